//! The PAP client (draft 0.2): discovery, Sessions (jwt-bearer + `private_key_jwt` + DPoP),
//! Device Sign-In, Account Token revocation, and Operations v1 through the company's API.
//!
//! Every request goes over HTTPS only, follows no redirect, and is refused past a size and time
//! limit. Tokens live in types that cannot print them; errors carry OAuth error codes, never a
//! response body.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pap_shared::{
    AuthorizationServerMetadata, CLIENT_ASSERTION_TYPE, Clock, CompanyDomain, DeviceAuthorizationResponse, Discovery,
    DpopRequest, HttpsUrl, Jti, OAuthErrorCode, Operation, OperationState, PROTOCOL_VERSION, PairwiseUserId, Rng,
    SecretToken, SessionId, SigningKey, TokenResponse, UnixTime, create_dpop_proof, grant_type,
};
use rustls::pki_types::CertificateDer;
use serde_json::{Value, json};

use crate::identity::Identity;

/// Largest response body read, in bytes.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// How the client reaches the network.
#[derive(Clone, Debug, Default)]
pub struct ClientConfig {
    /// Extra trusted roots (a test CA), added to the web PKI roots.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Test only: connect these names to these addresses (like curl's `--connect-to`).
    pub connect: HashMap<String, SocketAddr>,
}

/// What the agent reports of a company's discovery, on the command line (`pap-agent pap
/// discover`) and to a tool caller (`pap_discover`) alike: one shape, not two.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryReport {
    /// `organization.domain`.
    pub domain: String,
    /// `organization.name`.
    pub name: String,
    /// `auth.issuer`.
    pub issuer: String,
    /// `web.browser_session_endpoint`, if the website follows the Session.
    pub browser_session_endpoint: Option<String>,
    /// The Operations v1 endpoint, if offered.
    pub operations_endpoint: Option<String>,
    /// Whether Device Sign-In is offered.
    pub device_sign_in: bool,
}

/// What discovery tells about a company (wire doc §2.1-2.2), checked.
#[derive(Clone, Debug)]
pub struct Company {
    /// `organization.domain`.
    pub domain: CompanyDomain,
    /// `organization.name`.
    pub name: String,
    /// `auth.issuer`, verbatim: the `aud` of client and Session assertions.
    pub issuer: String,
    /// The token endpoint.
    pub token_endpoint: HttpsUrl,
    /// The revocation endpoint.
    pub revocation_endpoint: HttpsUrl,
    /// The device authorization endpoint, when Device Sign-In is offered.
    pub device_authorization_endpoint: Option<HttpsUrl>,
    /// `web.browser_session_endpoint`, verbatim: the browser assertion's `aud`.
    pub browser_session_endpoint: Option<HttpsUrl>,
    /// Origin of the first OpenAPI API.
    pub api_origin: Option<String>,
    /// The first OpenAPI API's description document (what it declares it proposes).
    pub api_description: Option<HttpsUrl>,
    /// The Operations v1 endpoint, when negotiated.
    pub operations_endpoint: Option<HttpsUrl>,
}

impl Company {
    /// What the agent reports of this company.
    pub fn report(&self) -> DiscoveryReport {
        DiscoveryReport {
            domain: self.domain.as_str().to_owned(),
            name: self.name.clone(),
            issuer: self.issuer.clone(),
            browser_session_endpoint: self.browser_session_endpoint.as_ref().map(|u| u.as_str().to_owned()),
            operations_endpoint: self.operations_endpoint.as_ref().map(|u| u.as_str().to_owned()),
            device_sign_in: self.device_authorization_endpoint.is_some(),
        }
    }
}

/// A live Session with a company: its id, user, Session Token and the DPoP key it is bound to.
#[derive(Debug)]
pub struct Session {
    /// The Session's id.
    pub session_id: SessionId,
    /// The pairwise User ID.
    pub user: PairwiseUserId,
    /// The Session Token.
    pub access_token: SecretToken,
    /// Whether it is signed in.
    pub signed_in: bool,
    /// Granted scopes.
    pub scope: String,
    /// When the token expires.
    pub expires_at: UnixTime,
    /// The Account Token, after a sign-in.
    pub account_token: Option<SecretToken>,
    /// The DPoP key of (this company, this user).
    pub dpop_key: Arc<SigningKey>,
}

/// A pending Device Sign-In (RFC 8628).
#[derive(Debug)]
pub struct DeviceAuthorization {
    /// The device code (kept by the agent).
    pub device_code: SecretToken,
    /// The code the user confirms.
    pub user_code: String,
    /// Where the user goes.
    pub verification_uri: HttpsUrl,
    /// The same with the code filled in, when given.
    pub verification_uri_complete: Option<HttpsUrl>,
    /// Seconds between polls.
    pub interval: u64,
    /// Seconds until the code expires.
    pub expires_in: u64,
}

/// How the client waits between Device Sign-In polls (RFC 8628 §3.5): injected, like the clock,
/// so the pacing is tested exactly and without real waits.
#[async_trait::async_trait]
pub trait Pause: Send + Sync {
    /// Returns after `wait`.
    async fn pause(&self, wait: Duration);
}

/// The real wait: a Tokio timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioPause;

#[async_trait::async_trait]
impl Pause for TokioPause {
    async fn pause(&self, wait: Duration) {
        tokio::time::sleep(wait).await;
    }
}

/// The PAP client of one agent.
#[derive(Clone)]
pub struct PapClient {
    http: reqwest::Client,
    identity: Arc<Identity>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
    pause: Arc<dyn Pause>,
}

impl fmt::Debug for PapClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PapClient")
            .field("client_id", self.identity.client_id())
            .finish_non_exhaustive()
    }
}

impl PapClient {
    /// A client for `identity`.
    pub fn new(
        identity: Arc<Identity>,
        config: &ClientConfig,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> Result<Self, ClientError> {
        let roots = pap_net::tls::trust_roots(&config.extra_roots)
            .map_err(|_| ClientError::Setup("an extra root certificate is invalid"))?;
        let tls = pap_net::tls::client_config(roots).map_err(|_| ClientError::Setup("TLS"))?;
        // A company's names must resolve to public addresses (PAP-3-10); the test-only
        // `connect` map is the one explicit exception, and takes precedence over the resolver.
        let mut builder = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .no_proxy()
            .dns_resolver(Arc::new(pap_net::resolve::PublicOnly::new()));
        for (name, addr) in &config.connect {
            builder = builder.resolve(name, *addr);
        }
        let http = builder.build().map_err(|_| ClientError::Setup("HTTP client"))?;
        Ok(Self {
            http,
            identity,
            clock,
            rng,
            pause: Arc::new(TokioPause),
        })
    }

    /// The same client, waiting between Device Sign-In polls with `pause` (tests pair it with
    /// the clock they inject; the default is [`TokioPause`]).
    #[must_use]
    pub fn with_pause(mut self, pause: Arc<dyn Pause>) -> Self {
        self.pause = pause;
        self
    }

    /// The agent's identity.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The clock the client reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The client's randomness.
    pub fn rng(&self) -> &Arc<dyn Rng> {
        &self.rng
    }

    fn jti(&self) -> String {
        Jti::generate(self.rng.as_ref()).as_str().to_owned()
    }

    /// Discovers `domain` (wire doc §2.1-2.2): `poppy.json` with `protocol_version` `0.2` and an
    /// `organization.domain` equal to the host asked, then the issuer's metadata, whose `issuer`
    /// must equal `auth.issuer` exactly and whose `poppy_domains` must list the domain.
    pub async fn discover(&self, domain: &CompanyDomain) -> Result<Company, ClientError> {
        let invalid = ClientError::InvalidDiscovery;
        let doc: Discovery = serde_json::from_value(
            self.get_json(&format!("https://{domain}/.well-known/poppy.json"))
                .await?,
        )
        .map_err(|_| invalid("poppy.json does not have PAP's shape"))?;
        if doc.protocol_version != PROTOCOL_VERSION {
            return Err(invalid("protocol_version is not 0.2"));
        }
        if &doc.organization.domain != domain {
            return Err(invalid("organization.domain is not the domain asked"));
        }
        if doc.organization.name.is_empty() {
            return Err(invalid("organization.name"));
        }
        // Every endpoint names a host, never an address: an IP literal would skip the resolver
        // that keeps the agent off loopback and private networks (PAP-3-10).
        let https = |v: &str| HttpsUrl::parse(v).ok().filter(|u| u.domain().is_some());
        let issuer = https(&doc.auth.issuer).ok_or(invalid("auth.issuer"))?;
        let browser_session_endpoint = match doc.web.as_ref().and_then(|w| w.browser_session_endpoint.as_deref()) {
            None => None,
            Some(url) => Some(https(url).ok_or(invalid("web.browser_session_endpoint"))?),
        };
        let api_description = doc
            .apis
            .iter()
            .find(|a| a.kind == "openapi")
            .and_then(|a| https(&a.url));
        let api_origin = api_description.as_ref().map(HttpsUrl::origin);
        let operations_endpoint = doc
            .extensions
            .operations
            .as_ref()
            .filter(|o| o.version == "1")
            .and_then(|o| https(&o.endpoint));

        // RFC 8414 §3.1: the well-known segment goes between host and path.
        let path = issuer.url().path().trim_end_matches('/');
        let metadata_url = format!("{}/.well-known/oauth-authorization-server{path}", issuer.origin());
        let meta: AuthorizationServerMetadata = serde_json::from_value(self.get_json(&metadata_url).await?)
            .map_err(|_| invalid("the issuer's metadata does not have RFC 8414's shape"))?;
        if meta.issuer != doc.auth.issuer {
            return Err(invalid("the metadata's issuer differs from auth.issuer"));
        }
        if !meta
            .poppy_domains
            .iter()
            .any(|d| d.eq_ignore_ascii_case(domain.as_str()))
        {
            return Err(invalid("poppy_domains does not list the domain"));
        }
        if let Some(algs) = &meta.dpop_signing_alg_values_supported
            && !algs.iter().any(|a| a == "ES256")
        {
            return Err(invalid("the company does not accept ES256 DPoP proofs"));
        }
        Ok(Company {
            domain: doc.organization.domain,
            name: doc.organization.name,
            issuer: doc.auth.issuer,
            token_endpoint: https(&meta.token_endpoint).ok_or(invalid("token_endpoint"))?,
            revocation_endpoint: https(&meta.revocation_endpoint).ok_or(invalid("revocation_endpoint"))?,
            device_authorization_endpoint: meta.device_authorization_endpoint.as_deref().and_then(https),
            browser_session_endpoint,
            api_origin,
            api_description,
            operations_endpoint,
        })
    }

    /// A fresh DPoP key for one (company, user).
    pub fn new_dpop_key(&self) -> Result<Arc<SigningKey>, ClientError> {
        SigningKey::generate_es256(self.rng.as_ref(), "dpop")
            .map(Arc::new)
            .map_err(|_| ClientError::Setup("DPoP key"))
    }

    /// Starts a signed-out Session for `user` (PAP §4.2): the jwt-bearer grant with a Session
    /// assertion, authenticated by a client assertion, with a DPoP proof of `dpop_key`.
    pub async fn start_session(
        &self,
        company: &Company,
        user: &PairwiseUserId,
        dpop_key: Arc<SigningKey>,
    ) -> Result<Session, ClientError> {
        let assertion = self.jwt_assertion(company, user.as_str())?;
        let token = self
            .token_request(
                company,
                &dpop_key,
                vec![
                    ("grant_type", grant_type::JWT_BEARER.to_owned()),
                    ("assertion", assertion),
                ],
            )
            .await?;
        session_from(token, user.clone(), dpop_key, self.clock.now(), None)
    }

    /// Begins Device Sign-In for `scopes` (RFC 8628 §3.1).
    pub async fn device_begin(&self, company: &Company, scopes: &[&str]) -> Result<DeviceAuthorization, ClientError> {
        let endpoint = company
            .device_authorization_endpoint
            .as_ref()
            .ok_or(ClientError::Unsupported("Device Sign-In"))?;
        let mut form = self.client_auth(company)?;
        form.push(("scope", scopes.join(" ")));
        let body: DeviceAuthorizationResponse = serde_json::from_value(self.post_form(endpoint, &form, None).await?)
            .map_err(|_| ClientError::InvalidResponse("the device authorization does not have RFC 8628's shape"))?;
        let on_company = |u: HttpsUrl| u.is_on(&company.domain).then_some(u);
        let verification_uri = HttpsUrl::parse(&body.verification_uri)
            .ok()
            .and_then(on_company)
            .ok_or(ClientError::InvalidResponse(
                "verification_uri is not on the company's domain",
            ))?;
        Ok(DeviceAuthorization {
            device_code: body.device_code,
            user_code: body.user_code,
            verification_uri,
            verification_uri_complete: body
                .verification_uri_complete
                .as_deref()
                .and_then(|u| HttpsUrl::parse(u).ok())
                .and_then(on_company),
            interval: body.interval.unwrap_or(5).clamp(1, 300),
            // A company cannot keep the agent polling for days (reviews L11, N10): at most
            // 30 minutes, so at most 1,800 polls at the shortest interval.
            expires_in: body.expires_in.unwrap_or(600).min(MAX_DEVICE_SIGNIN_SECONDS),
        })
    }

    /// Polls a Device Sign-In for `session` until approved, denied or expired, honouring
    /// `interval` and `slow_down` (RFC 8628 §3.5: every later wait 5 s longer). On success the
    /// Session is signed in. Past `expires_in` it answers `expired_token` without polling again.
    pub async fn device_wait(
        &self,
        company: &Company,
        session: &mut Session,
        device: &DeviceAuthorization,
    ) -> Result<(), ClientError> {
        let mut interval = device.interval;
        let deadline = self.clock.now().plus(i64::try_from(device.expires_in).unwrap_or(600));
        loop {
            self.pause.pause(Duration::from_secs(interval)).await;
            if self.clock.now() >= deadline {
                return Err(ClientError::Protocol {
                    status: 400,
                    code: OAuthErrorCode::ExpiredToken,
                });
            }
            let form = vec![
                ("grant_type", grant_type::DEVICE_CODE.to_owned()),
                ("device_code", device.device_code.secret().to_owned()),
                ("session_id", session.session_id.as_str().to_owned()),
            ];
            match self.token_request(company, &session.dpop_key, form).await {
                Ok(token) => {
                    let signed = session_from(
                        token,
                        session.user.clone(),
                        session.dpop_key.clone(),
                        self.clock.now(),
                        Some(&session.session_id),
                    )?;
                    if !signed.signed_in || signed.account_token.is_none() {
                        return Err(ClientError::InvalidResponse(
                            "the device grant did not sign the Session in",
                        ));
                    }
                    *session = signed;
                    return Ok(());
                }
                Err(ClientError::Protocol {
                    code: OAuthErrorCode::AuthorizationPending,
                    ..
                }) => {}
                Err(ClientError::Protocol {
                    code: OAuthErrorCode::SlowDown,
                    ..
                }) => interval += 5,
                Err(other) => return Err(other),
            }
        }
    }

    /// Revokes the Session's Account Token (RFC 7009): the company signs out every Session
    /// signed in with it.
    pub async fn revoke(&self, company: &Company, account_token: &SecretToken) -> Result<(), ClientError> {
        let mut form = self.client_auth(company)?;
        form.push(("token", account_token.secret().to_owned()));
        form.push(("token_type_hint", "refresh_token".to_owned()));
        self.post_form(&company.revocation_endpoint, &form, None)
            .await
            .map(|_| ())
    }

    /// Calls the company's API to propose an operation (`202 {"operation": …}`), with an
    /// `Idempotency-Key`: the URL is the API's origin joined with `path` and kept on it, never
    /// under the operations endpoint. The operator's CLI calls it; the
    /// agent's tools call [`Self::propose_declared`].
    pub async fn propose(
        &self,
        company: &Company,
        session: &Session,
        method: &str,
        path: &str,
        body: &Value,
    ) -> Result<Operation, ClientError> {
        let url = proposal_url(company, path)?;
        let answer = self.api_call(&url, method, session, Some(body), 202).await?;
        serde_json::from_value(answer["operation"].clone()).map_err(|_| ClientError::InvalidResponse("operation"))
    }

    /// The proposals the company's OpenAPI description declares: every operation (method and
    /// path template) that answers `202`, the status of a proposed operation (Operations v1),
    /// outside the operations endpoint. Read from the API's description document now.
    pub async fn declared_proposals(&self, company: &Company) -> Result<Vec<DeclaredProposal>, ClientError> {
        let description = company
            .api_description
            .as_ref()
            .ok_or(ClientError::Unsupported("an OpenAPI API"))?;
        let document = self.get_json(description.as_str()).await?;
        let paths = document["paths"]
            .as_object()
            .ok_or(ClientError::InvalidResponse("the OpenAPI description has no paths"))?;
        let mut declared = Vec::new();
        for (template, item) in paths.iter().take(MAX_DECLARED_PATHS) {
            let Some(item) = item.as_object() else { continue };
            for (method, operation) in item {
                let proposes = operation["responses"].get("202").is_some();
                let method = method.to_ascii_uppercase();
                if proposes && ["POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
                    declared.push(DeclaredProposal {
                        method,
                        template: template.clone(),
                    });
                }
            }
        }
        Ok(declared)
    }

    /// Proposes an operation through a proposal the company declares (review N2): `method` and
    /// `path` must match one of [`Self::declared_proposals`]; the URL is the API's origin joined
    /// with `path` (`Url::join`) and must keep that origin; nothing under the operations endpoint
    /// is sent; only `202` with a `proposed` operation is an answer. This is what the agent's
    /// tools call: no sequence of them confirms or cancels an operation (AIP-7).
    pub async fn propose_declared(
        &self,
        company: &Company,
        session: &Session,
        method: &str,
        path: &str,
        body: &Value,
    ) -> Result<Operation, ClientError> {
        let url = proposal_url(company, path)?;
        let declared = self.declared_proposals(company).await?;
        let matches = declared
            .iter()
            .any(|d| d.method.eq_ignore_ascii_case(method) && d.matches(url.url().path()));
        if !matches {
            return Err(ClientError::Undeclared);
        }
        let operation = self
            .propose(company, session, &method.to_ascii_uppercase(), path, body)
            .await?;
        if operation.state != OperationState::Proposed {
            return Err(ClientError::InvalidResponse("the answer is not a proposed operation"));
        }
        Ok(operation)
    }

    /// Reads an operation from the operations endpoint.
    pub async fn read_operation(
        &self,
        company: &Company,
        session: &Session,
        id: &str,
    ) -> Result<Operation, ClientError> {
        let url = operation_url(company, id, "")?;
        let answer = self.api_call(&url, "GET", session, None, 200).await?;
        let operation = if answer.get("operation").is_some() {
            answer["operation"].clone()
        } else {
            answer
        };
        serde_json::from_value(operation).map_err(|_| ClientError::InvalidResponse("operation"))
    }

    /// Confirms `operation`'s revision as approved by the user.
    pub async fn confirm_operation(
        &self,
        company: &Company,
        session: &Session,
        operation: &Operation,
    ) -> Result<Operation, ClientError> {
        let url = operation_url(company, &operation.operation_id, "/confirm")?;
        let body = json!({"revision": operation.revision, "approved_by": "user"});
        let answer = self.api_call(&url, "POST", session, Some(&body), 200).await?;
        serde_json::from_value(answer).map_err(|_| ClientError::InvalidResponse("operation"))
    }

    async fn api_call(
        &self,
        url: &HttpsUrl,
        method: &str,
        session: &Session,
        body: Option<&Value>,
        expect: u16,
    ) -> Result<Value, ClientError> {
        let htu = format!("{}{}", url.origin(), url.url().path());
        let token = session.access_token.secret();
        let proof = self.dpop_proof(&session.dpop_key, method, &htu, Some(token), None)?;
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| ClientError::Setup("HTTP method"))?;
        let mut request = self
            .http
            .request(method, url.url().clone())
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::AUTHORIZATION, format!("DPoP {token}"))
            .header("DPoP", proof);
        if let Some(body) = body {
            request = request
                .header(http::header::CONTENT_TYPE, "application/json")
                .header("Idempotency-Key", self.jti())
                .body(body.to_string());
        }
        let (status, value) = read_json(request.send().await.map_err(|e| transport(&e))?).await?;
        if status != expect {
            return Err(protocol_error(status, &value));
        }
        Ok(value)
    }

    fn client_auth(&self, company: &Company) -> Result<Vec<(&'static str, String)>, ClientError> {
        let assertion = self.jwt_assertion(company, self.identity.client_id().as_str())?;
        Ok(vec![
            ("client_id", self.identity.client_id().as_str().to_owned()),
            ("client_assertion_type", CLIENT_ASSERTION_TYPE.to_owned()),
            ("client_assertion", assertion),
        ])
    }

    /// A client (`sub` = `client_id`) or Session (`sub` = user) assertion: ES256, `typ` JWT,
    /// `aud` the issuer, 60 s, integer times, a fresh `jti`.
    fn jwt_assertion(&self, company: &Company, sub: &str) -> Result<String, ClientError> {
        let now = self.clock.now().as_secs();
        let claims = json!({
            "iss": self.identity.client_id().as_str(), "sub": sub, "aud": company.issuer,
            "iat": now, "exp": now + 60, "jti": self.jti(),
        });
        let jws = self
            .identity
            .key()
            .sign("JWT", &claims)
            .map_err(|_| ClientError::Setup("signing"))?;
        Ok(jws.secret().to_owned())
    }

    fn dpop_proof(
        &self,
        key: &SigningKey,
        method: &str,
        htu: &str,
        token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, ClientError> {
        let request = DpopRequest {
            method,
            htu,
            access_token: token,
            nonce,
        };
        let proof = create_dpop_proof(key, &request, self.clock.now(), &self.jti())
            .map_err(|_| ClientError::Setup("DPoP proof"))?;
        Ok(proof.secret().to_owned())
    }

    /// A token-endpoint request with client authentication and a DPoP proof; retried once with
    /// the company's nonce on `use_dpop_nonce`.
    async fn token_request(
        &self,
        company: &Company,
        dpop_key: &SigningKey,
        fields: Vec<(&'static str, String)>,
    ) -> Result<Value, ClientError> {
        let htu = format!(
            "{}{}",
            company.token_endpoint.origin(),
            company.token_endpoint.url().path()
        );
        let mut nonce: Option<String> = None;
        for _ in 0..2 {
            let mut form = self.client_auth(company)?;
            form.extend(fields.iter().cloned());
            let proof = self.dpop_proof(dpop_key, "POST", &htu, None, nonce.as_deref())?;
            match self.post_form(&company.token_endpoint, &form, Some(proof)).await {
                Err(ClientError::Nonce(next)) if nonce.is_none() => nonce = Some(next),
                other => return other,
            }
        }
        Err(ClientError::Protocol {
            status: 400,
            code: OAuthErrorCode::UseDpopNonce,
        })
    }

    async fn post_form(
        &self,
        url: &HttpsUrl,
        form: &[(&'static str, String)],
        dpop: Option<String>,
    ) -> Result<Value, ClientError> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let mut request = self
            .http
            .post(url.url().clone())
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        if let Some(proof) = dpop {
            request = request.header("DPoP", proof);
        }
        let response = request.send().await.map_err(|e| transport(&e))?;
        let nonce = response
            .headers()
            .get("dpop-nonce")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (status, value) = read_json(response).await?;
        if status == 200 {
            return Ok(value);
        }
        if value["error"] == OAuthErrorCode::UseDpopNonce.as_str()
            && let Some(nonce) = nonce
        {
            return Err(ClientError::Nonce(nonce));
        }
        Err(protocol_error(status, &value))
    }

    async fn get_json(&self, url: &str) -> Result<Value, ClientError> {
        let response = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let (status, value) = read_json(response).await?;
        if status != 200 {
            return Err(protocol_error(status, &value));
        }
        Ok(value)
    }
}

/// The longest a Device Sign-In is polled, whatever `expires_in` the company answers.
pub const MAX_DEVICE_SIGNIN_SECONDS: u64 = 1800;

/// Paths of an OpenAPI description read, at most.
const MAX_DECLARED_PATHS: usize = 1024;

/// A proposal a company's OpenAPI declares: a method and a path template (`/api/orders/{id}/exchanges`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredProposal {
    /// `POST`, uppercase.
    pub method: String,
    /// The path template.
    pub template: String,
}

impl DeclaredProposal {
    /// Whether `path` fills the template: the same segments, each `{parameter}` filled with
    /// one identifier (`[A-Za-z0-9_-]+`).
    pub fn matches(&self, path: &str) -> bool {
        let (wanted, given): (Vec<&str>, Vec<&str>) = (self.template.split('/').collect(), path.split('/').collect());
        wanted.len() == given.len()
            && wanted.iter().zip(&given).all(|(w, g)| {
                if w.starts_with('{') && w.ends_with('}') {
                    pap_shared::is_base64url(g, 1, MAX_ID_LEN)
                } else {
                    w == g
                }
            })
    }
}

/// The URL of a proposal at `path` on the company's API: one leading `/`, no query, fragment,
/// dot segment or escape; joined to the API's origin with `Url::join` and still on it; not
/// under the operations endpoint (whose confirm and cancel are the person's, AIP-7).
fn proposal_url(company: &Company, path: &str) -> Result<HttpsUrl, ClientError> {
    let origin = company
        .api_origin
        .as_deref()
        .ok_or(ClientError::Unsupported("an OpenAPI API"))?;
    let plain = path.starts_with('/')
        && !path.starts_with("//")
        && path.len() <= 2048
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_-.~".contains(&b))
        && !path.split('/').any(|segment| segment == "." || segment == "..");
    if !plain {
        return Err(ClientError::Undeclared);
    }
    let base = url::Url::parse(origin).map_err(|_| ClientError::InvalidDiscovery("the API's origin"))?;
    let joined = base.join(path).map_err(|_| ClientError::Undeclared)?;
    if joined.origin().ascii_serialization() != origin {
        return Err(ClientError::Undeclared);
    }
    if let Some(endpoint) = &company.operations_endpoint {
        let operations = endpoint.url();
        let under = operations.path().trim_end_matches('/');
        let same_origin = operations.origin() == joined.origin();
        if same_origin && (joined.path() == under || joined.path().starts_with(&format!("{under}/"))) {
            return Err(ClientError::Undeclared);
        }
    }
    HttpsUrl::parse(joined.as_str()).map_err(|_| ClientError::Undeclared)
}

/// The longest identifier (an operation id, a path parameter) the agent takes from a company.
const MAX_ID_LEN: usize = 256;

fn operation_url(company: &Company, id: &str, suffix: &str) -> Result<HttpsUrl, ClientError> {
    let endpoint = company
        .operations_endpoint
        .as_ref()
        .ok_or(ClientError::Unsupported("Operations v1"))?;
    if !pap_shared::is_base64url(id, 1, MAX_ID_LEN) {
        return Err(ClientError::InvalidResponse("operation_id"));
    }
    HttpsUrl::parse(&format!("{}/{id}{suffix}", endpoint.as_str().trim_end_matches('/')))
        .map_err(|_| ClientError::InvalidResponse("operation URL"))
}

fn session_from(
    token: Value,
    user: PairwiseUserId,
    dpop_key: Arc<SigningKey>,
    now: UnixTime,
    same: Option<&SessionId>,
) -> Result<Session, ClientError> {
    let token: TokenResponse = serde_json::from_value(token)
        .map_err(|_| ClientError::InvalidResponse("the token response does not have PAP's shape"))?;
    if token.token_type != "DPoP" {
        return Err(ClientError::InvalidResponse("token_type is not DPoP"));
    }
    let session_id = SessionId::parse(&token.session_id).map_err(|_| ClientError::InvalidResponse("session_id"))?;
    if same.is_some_and(|s| s != &session_id) {
        return Err(ClientError::InvalidResponse("the company answered for another Session"));
    }
    if token.expires_in <= 0 {
        return Err(ClientError::InvalidResponse("expires_in"));
    }
    Ok(Session {
        session_id,
        user,
        access_token: token.access_token,
        signed_in: token.signed_in,
        scope: token.scope.unwrap_or_default(),
        expires_at: now.plus(token.expires_in),
        account_token: token.refresh_token,
        dpop_key,
    })
}

async fn read_json(mut response: reqwest::Response) -> Result<(u16, Value), ClientError> {
    let status = response.status().as_u16();
    if response.status().is_redirection() {
        return Err(ClientError::Redirected { status });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(ClientError::InvalidResponse("the response is too large"));
        }
        body.extend_from_slice(&chunk);
    }
    if body.is_empty() {
        return Ok((status, Value::Null));
    }
    let value = serde_json::from_slice(&body).map_err(|_| ClientError::InvalidResponse("the response is not JSON"))?;
    Ok((status, value))
}

fn protocol_error(status: u16, body: &Value) -> ClientError {
    ClientError::Protocol {
        status,
        code: OAuthErrorCode::from_wire(body["error"].as_str().unwrap_or_default()),
    }
}

fn transport(error: &reqwest::Error) -> ClientError {
    ClientError::Transport(if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "transport error"
    })
}

/// Why a PAP call failed. No variant carries a token or a response body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The company's discovery documents break a rule.
    #[error("the company's discovery is invalid: {0}")]
    InvalidDiscovery(&'static str),
    /// A response lacks or misstates a member.
    #[error("the company's response is invalid: {0}")]
    InvalidResponse(&'static str),
    /// The company asks for a DPoP nonce (handled inside the client).
    #[error("the company requires a DPoP nonce")]
    Nonce(String),
    /// The company refused, with this status and OAuth error code.
    #[error("the company refused: {status} {code}")]
    Protocol {
        /// HTTP status.
        status: u16,
        /// The `error` member (`unknown` when it is missing or not printable).
        code: OAuthErrorCode,
    },
    /// The company answered with a redirect, which the agent never follows (SSRF, PAP-3-10).
    #[error("the company answered {status} with a redirect, which is not followed")]
    Redirected {
        /// HTTP status.
        status: u16,
    },
    /// The client could not be set up or could not sign.
    #[error("the client could not be set up: {0}")]
    Setup(&'static str),
    /// Transport failure (connect, TLS, timeout).
    #[error("the request failed: {0}")]
    Transport(&'static str),
    /// The company does not offer what is needed.
    #[error("the company does not offer {0}")]
    Unsupported(&'static str),
    /// A proposal the company's OpenAPI does not declare (a method and path it does not list,
    /// a path off the API's origin, or under the operations endpoint).
    #[error(
        "that is not a proposal the company's OpenAPI declares (a method and path it lists as answering 202, \
         on the API's origin, outside the operations endpoint)"
    )]
    Undeclared,
}

/// The pairwise User ID the agent uses with a company: `usr_` + 22 random base64url characters.
pub fn new_pairwise_user(rng: &dyn Rng) -> PairwiseUserId {
    let id = format!("usr_{}", Jti::generate(rng).as_str());
    PairwiseUserId::parse(&id).expect("usr_ + 22 base64url characters is a valid id")
}
