//! The reference company through its router (no socket), played by a Rust agent: the Shop
//! harness of `reference.rs` and `hostile.rs`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use pap_company::resolver::{ClientMetadata, StaticClientKeys};
use pap_shared::{
    BROWSER_ASSERTION_TYP, ClientId, DpopRequest, Jti, SigningKey, SystemRng, UnixTime, create_dpop_proof,
};
use pap_shop::{CompanyConfig, CompanyStores, ReferenceCompany};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::{NOW, TestClock};

pub const BASE: &str = "https://shop.example";
pub const CLIENT_ID: &str = "https://atlas.example/agent.json";
pub const PASSWORD: &str = "correct horse battery staple";

pub struct Shop {
    pub company: ReferenceCompany,
    pub app: Router,
    pub operator: Router,
    pub operator_credential: String,
    pub clock: Arc<TestClock>,
    pub agent: SigningKey,
    pub dpop: SigningKey,
}

pub fn metadata(operations: bool) -> ClientMetadata {
    let mut doc = json!({
        "client_id": CLIENT_ID,
        "client_name": "Atlas",
        "jwks_uri": "https://atlas.example/jwks.json",
        "token_endpoint_auth_method": "private_key_jwt",
    });
    if operations {
        doc["extensions"] = json!({"operations": {"version": "1"}});
    }
    ClientMetadata::parse(&serde_json::to_vec(&doc).unwrap(), &ClientId::parse(CLIENT_ID).unwrap()).unwrap()
}

pub fn shop_with(operations: bool) -> Shop {
    shop_configured(operations, |_| {})
}

/// The shop of `shop.example.toml` as `change` leaves it.
pub fn shop_configured(operations: bool, change: impl FnOnce(&mut CompanyConfig)) -> Shop {
    shop_built(operations, change, CompanyStores::in_memory)
}

/// The shop over the stores `stores` makes (in memory, as the test needs them).
pub fn shop_with_stores(stores: impl FnOnce(Arc<dyn pap_shared::Clock>) -> CompanyStores) -> Shop {
    shop_built(true, |_| {}, stores)
}

fn shop_built(
    operations: bool,
    change: impl FnOnce(&mut CompanyConfig),
    stores: impl FnOnce(Arc<dyn pap_shared::Clock>) -> CompanyStores,
) -> Shop {
    let mut config = CompanyConfig::parse(include_str!("../../shop.example.toml")).unwrap();
    change(&mut config);
    let clock = TestClock::at(NOW);
    let agent = SigningKey::generate_es256(&SystemRng, "key-1").unwrap();
    let clients = StaticClientKeys::new()
        .with_client(
            ClientId::parse(CLIENT_ID).unwrap(),
            pap_shared::Jwks::from_keys(vec![agent.public_key().clone()]),
        )
        .with_metadata(metadata(operations));
    let stores = stores(clock.clone());
    let company = ReferenceCompany::with_stores(config, clock.clone(), Arc::new(SystemRng), Arc::new(clients), stores);
    let dpop = SigningKey::generate_es256(&SystemRng, "dpop").unwrap();
    Shop {
        company: company.clone(),
        app: company.router(),
        operator: company.operator_router(),
        operator_credential: company.operator_credential().secret().to_owned(),
        clock,
        agent,
        dpop,
    }
}

pub fn shop() -> Shop {
    shop_with(true)
}

pub fn jti() -> String {
    Jti::generate(&SystemRng).as_str().to_owned()
}

pub async fn body_json(response: Response<Body>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

pub async fn body_text(response: Response<Body>) -> String {
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

pub fn hidden_inputs(page: &str) -> Vec<(String, String)> {
    // The reference runner's own pattern: `<input type="hidden" name="N" value="V">`.
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find("<input type=\"hidden\" name=\"") {
        rest = &rest[at + 27..];
        let (name, after) = rest.split_once("\" value=\"").unwrap();
        let (value, after) = after.split_once("\">").unwrap();
        out.push((name.to_owned(), value.to_owned()));
        rest = after;
    }
    out
}

pub struct Signed {
    pub session_id: String,
    pub access_token: String,
    pub account_token: String,
}

impl Shop {
    pub fn now(&self) -> i64 {
        pap_shared::Clock::now(self.clock.as_ref()).as_secs()
    }

    pub fn client_assertion(&self) -> String {
        let now = self.now();
        let claims =
            json!({"iss": CLIENT_ID, "sub": CLIENT_ID, "aud": BASE, "iat": now, "exp": now + 60, "jti": jti()});
        self.agent.sign("JWT", &claims).unwrap().secret().to_owned()
    }

    pub fn session_assertion(&self, user: &str, typ: &str) -> String {
        let now = self.now();
        let claims = json!({"iss": CLIENT_ID, "sub": user, "aud": BASE, "iat": now, "exp": now + 60, "jti": jti()});
        self.agent.sign(typ, &claims).unwrap().secret().to_owned()
    }

    pub fn proof(&self, method: &str, path: &str, token: Option<&str>) -> String {
        let htu = format!("{BASE}{path}");
        let request = DpopRequest {
            method,
            htu: &htu,
            access_token: token,
            nonce: None,
        };
        create_dpop_proof(&self.dpop, &request, UnixTime::from_secs(self.now()), &jti())
            .unwrap()
            .secret()
            .to_owned()
    }

    pub async fn post_form(&self, path: &str, fields: &[(&str, &str)], dpop: bool) -> Response<Body> {
        self.post_form_from(path, fields, dpop, None).await
    }

    /// [`Self::post_form`] over a TCP connection from `peer`, when given.
    pub async fn post_form_from(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        dpop: bool,
        peer: Option<std::net::SocketAddr>,
    ) -> Response<Body> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut request = Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if dpop {
            request = request.header("dpop", self.proof("POST", path, None));
        }
        let mut request = request.body(Body::from(body)).unwrap();
        if let Some(peer) = peer {
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        }
        self.app.clone().oneshot(request).await.unwrap()
    }

    /// A token request with a fresh client assertion and DPoP proof (two replay marks), from
    /// `peer` when given.
    pub async fn token_request_from(
        &self,
        fields: &[(&str, &str)],
        peer: Option<std::net::SocketAddr>,
    ) -> Response<Body> {
        let assertion = self.client_assertion();
        let mut all = vec![
            ("client_id", CLIENT_ID),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ),
            ("client_assertion", assertion.as_str()),
        ];
        all.extend_from_slice(fields);
        self.post_form_from("/oauth/token", &all, true, peer).await
    }

    pub async fn token_request(&self, fields: &[(&str, &str)]) -> Response<Body> {
        self.token_request_from(fields, None).await
    }

    pub async fn start_session(&self, user: &str) -> Value {
        let assertion = self.session_assertion(user, "JWT");
        let response = self
            .token_request(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                ("assertion", &assertion),
            ])
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        body_json(response).await
    }

    /// Device Sign-In with the user approving on the `/device` page as `ada`.
    pub async fn sign_in(&self, user: &str) -> Signed {
        self.sign_in_as(user, "ada").await
    }

    pub async fn sign_in_as(&self, user: &str, username: &str) -> Signed {
        let session = self.start_session(user).await;
        let session_id = session["session_id"].as_str().unwrap().to_owned();
        let device = self.device_code("orders:read orders:write").await;
        assert_eq!(device.status(), StatusCode::OK);
        let device = body_json(device).await;
        let user_code = device["user_code"].as_str().unwrap();
        assert_eq!(
            self.approve_on_page(user_code, username, PASSWORD).await,
            StatusCode::OK
        );
        self.clock.advance(1);
        let poll = self
            .token_request(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", device["device_code"].as_str().unwrap()),
                ("session_id", &session_id),
            ])
            .await;
        assert_eq!(poll.status(), StatusCode::OK);
        let token = body_json(poll).await;
        assert_eq!(token["signed_in"], json!(true));
        assert_eq!(token["session_id"], json!(session_id));
        Signed {
            session_id,
            access_token: token["access_token"].as_str().unwrap().to_owned(),
            account_token: token["refresh_token"].as_str().unwrap().to_owned(),
        }
    }

    /// `POST /oauth/device` for `scope`, as the agent asks for a device code.
    pub async fn device_code(&self, scope: &str) -> Response<Body> {
        let assertion = self.client_assertion();
        self.post_form(
            "/oauth/device",
            &[
                ("client_id", CLIENT_ID),
                (
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                ),
                ("client_assertion", &assertion),
                ("scope", scope),
            ],
            false,
        )
        .await
    }

    pub async fn approve_on_page(&self, user_code: &str, username: &str, password: &str) -> StatusCode {
        self.approve_on_page_answer(user_code, username, password)
            .await
            .status()
    }

    /// The `/device` page's whole answer to one approval.
    pub async fn approve_on_page_answer(&self, user_code: &str, username: &str, password: &str) -> Response<Body> {
        self.approve_on_page_from(user_code, username, password, None, None)
            .await
    }

    /// [`Self::approve_on_page_answer`] from TCP peer `peer`, with an `X-Forwarded-For`.
    pub async fn approve_on_page_from(
        &self,
        user_code: &str,
        username: &str,
        password: &str,
        peer: Option<std::net::SocketAddr>,
        forwarded_for: Option<&str>,
    ) -> Response<Body> {
        let from = (peer, forwarded_for);
        self.decide_on_page_from(user_code, "approve", username, password, from)
            .await
    }

    /// The device page for `user_code` from TCP peer `peer` (`None`: no peer known).
    pub async fn device_page_from(&self, user_code: &str, peer: Option<std::net::SocketAddr>) -> Response<Body> {
        let mut request = Request::get(format!("/device?user_code={user_code}"))
            .body(Body::empty())
            .unwrap();
        if let Some(peer) = peer {
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        }
        self.app.clone().oneshot(request).await.unwrap()
    }

    /// The device page's form posted with `decision` (`approve`, `deny`), from `from`: a TCP
    /// peer and an `X-Forwarded-For`.
    pub async fn decide_on_page_from(
        &self,
        user_code: &str,
        decision: &str,
        username: &str,
        password: &str,
        from: (Option<std::net::SocketAddr>, Option<&str>),
    ) -> Response<Body> {
        let (peer, forwarded_for) = from;
        let page = self.device_page_from(user_code, peer).await;
        assert_eq!(page.status(), StatusCode::OK);
        let cookie = page.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let mut fields = hidden_inputs(&body_text(page).await);
        fields.extend([
            ("username".into(), username.into()),
            ("password".into(), password.into()),
            ("decision".into(), decision.into()),
        ]);
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&fields)
            .finish();
        let mut request = Request::post("/device")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ORIGIN, BASE)
            .header("sec-fetch-site", "same-origin")
            .header(header::COOKIE, cookie);
        if let Some(forwarded) = forwarded_for {
            request = request.header("x-forwarded-for", forwarded);
        }
        let mut request = request.body(Body::from(body)).unwrap();
        if let Some(peer) = peer {
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        }
        self.app.clone().oneshot(request).await.unwrap()
    }

    pub async fn api(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> Response<Body> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("DPoP {token}"))
            .header("dpop", self.proof(method, path, Some(token)));
        if body.is_some() {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .header("idempotency-key", jti());
        }
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        self.app.clone().oneshot(request.body(body).unwrap()).await.unwrap()
    }

    pub async fn propose(&self, signed: &Signed, kind: &str) -> Value {
        let response = self
            .api(
                "POST",
                &format!("/api/orders/ord_7Hk2/{kind}"),
                &signed.access_token,
                Some(json!({})),
            )
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        body_json(response).await["operation"].clone()
    }

    pub fn browser_assertion(&self, user: &str, session_id: &str, return_to: &str) -> String {
        let now = self.now();
        let claims = json!({
            "iss": CLIENT_ID, "sub": user, "aud": format!("{BASE}/poppy/browser-session"),
            "session_id": session_id, "return_to": return_to, "iat": now - 5, "exp": now + 55, "jti": jti(),
        });
        self.agent
            .sign(BROWSER_ASSERTION_TYP, &claims)
            .unwrap()
            .secret()
            .to_owned()
    }

    /// Joins the browser and returns its cookie header value.
    pub async fn join(&self, user: &str, session_id: &str, return_to: &str) -> String {
        let assertion = self.browser_assertion(user, session_id, return_to);
        let response = self
            .post_form("/poppy/browser-session", &[("assertion", &assertion)], false)
            .await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(response.headers()[header::LOCATION], return_to);
        response.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned()
    }

    pub async fn page(&self, url: &str, cookie: &str) -> Response<Body> {
        let path = url.strip_prefix(BASE).unwrap();
        self.app
            .clone()
            .oneshot(
                Request::get(path)
                    .header(header::COOKIE, cookie)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap()
    }

    pub async fn submit(&self, url: &str, cookie: &str, fields: &[(String, String)], origin: &str) -> Response<Body> {
        let path = url.strip_prefix(BASE).unwrap();
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let request = Request::post(path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ORIGIN, origin)
            .header("sec-fetch-site", "same-origin")
            .header(header::COOKIE, cookie)
            .body(Body::from(body))
            .unwrap();
        self.app.clone().oneshot(request).await.unwrap()
    }

    pub async fn performed(&self, id: &str) -> u64 {
        let response = self
            .operator
            .clone()
            .oneshot(
                shop_operator(self, Request::get(format!("/performed/{id}")))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        body_json(response).await["count"].as_u64().unwrap()
    }

    pub async fn revoke(&self, account_token: &str) -> StatusCode {
        let assertion = self.client_assertion();
        let fields = [
            ("client_id", CLIENT_ID),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ),
            ("client_assertion", assertion.as_str()),
            ("token", account_token),
            ("token_type_hint", "refresh_token"),
        ];
        self.post_form("/oauth/revoke", &fields, false).await.status()
    }
}

/// An operator API request as the operator makes it: a loopback `Host`, the credential.
pub fn shop_operator(shop: &Shop, request: http::request::Builder) -> http::request::Builder {
    request
        .header(header::HOST, "127.0.0.1:8444")
        .header(header::AUTHORIZATION, format!("Bearer {}", shop.operator_credential))
}
