//! The reference company through its router (no socket): the PAP flows the web cases need,
//! played by a Rust agent, plus the refusals and the at-most-once confirm under concurrency.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode, header};
use pap_shared::BROWSER_ASSERTION_TYP;
use serde_json::{Value, json};
use support::shop::*;
use tower::ServiceExt as _;

const USER: &str = "usr_conf_AAAAAAAAAAAAAAAAAAAAAA";

#[tokio::test]
async fn discovery_publishes_the_endpoints_the_runner_needs() {
    let shop = shop();
    let doc = body_json(
        shop.app
            .clone()
            .oneshot(Request::get("/.well-known/poppy.json").body(Body::empty()).unwrap())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(doc["protocol_version"], "0.2");
    assert_eq!(
        doc["web"]["browser_session_endpoint"],
        "https://shop.example/poppy/browser-session"
    );
    assert_eq!(
        doc["extensions"]["operations"],
        json!({"version": "1", "endpoint": "https://shop.example/poppy/operations"})
    );
    let meta = body_json(
        shop.app
            .clone()
            .oneshot(
                Request::get("/.well-known/oauth-authorization-server")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(meta["issuer"], "https://shop.example");
    assert_eq!(meta["revocation_endpoint"], "https://shop.example/oauth/revoke");
    assert_eq!(meta["poppy_domains"], json!(["shop.example"]));
}

#[tokio::test]
async fn join_then_confirm_on_the_page_performs_once_and_sign_out_ends_the_page() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let operation = shop.propose(&signed, "exchanges").await;
    assert_eq!(operation["state"], "proposed");
    assert_eq!(operation["confirmation"], Value::Null);
    let url = operation["url"].as_str().unwrap().to_owned();
    let id = operation["operation_id"].as_str().unwrap().to_owned();

    let cookie = shop.join(USER, &signed.session_id, &url).await;
    let page = shop.page(&url, &cookie).await;
    assert_eq!(page.status(), StatusCode::OK);
    let html = body_text(page).await;
    assert!(
        html.contains("Shop Example") && html.contains("data-state=\"proposed\""),
        "{html}"
    );
    let mut fields = hidden_inputs(&html);
    assert_eq!(
        fields.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["revision", "approved_by", "csrf"]
    );
    fields.push(("action".into(), "confirm".into()));

    let confirmed = shop.submit(&url, &cookie, &fields, BASE).await;
    assert_eq!(confirmed.status(), StatusCode::SEE_OTHER);
    assert_eq!(confirmed.headers()[header::LOCATION], url.as_str());
    let read = shop
        .api("GET", &format!("/poppy/operations/{id}"), &signed.access_token, None)
        .await;
    let read = body_json(read).await;
    assert_eq!(read["state"], "succeeded");
    assert_eq!(read["confirmation"]["approved_by"], "user");

    // A second confirm, through the endpoint this time: 200 with the same record, not redone.
    let again = shop
        .api(
            "POST",
            &format!("/poppy/operations/{id}/confirm"),
            &signed.access_token,
            Some(json!({"revision": 1, "approved_by": "user"})),
        )
        .await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(body_json(again).await, read);
    assert_eq!(
        shop.submit(&url, &cookie, &fields, BASE).await.status(),
        StatusCode::SEE_OTHER
    );
    assert_eq!(shop.performed(&id).await, 1);

    // Sign-out (revoking the Account Token) shows on the very next page request.
    assert_eq!(shop.revoke(&signed.account_token).await, StatusCode::OK);
    assert!([401, 403, 404].contains(&shop.page(&url, &cookie).await.status().as_u16()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_confirms_through_both_channels_perform_once() {
    let shop = Arc::new(shop());
    let signed = Arc::new(shop.sign_in(USER).await);
    let operation = shop.propose(&signed, "exchanges").await;
    let url = operation["url"].as_str().unwrap().to_owned();
    let id = operation["operation_id"].as_str().unwrap().to_owned();
    let cookie = shop.join(USER, &signed.session_id, &url).await;
    let mut fields = hidden_inputs(&body_text(shop.page(&url, &cookie).await).await);
    fields.push(("action".into(), "confirm".into()));
    let fields = Arc::new(fields);

    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let (shop, signed, url, id, cookie, fields) = (
                shop.clone(),
                signed.clone(),
                url.clone(),
                id.clone(),
                cookie.clone(),
                fields.clone(),
            );
            tokio::spawn(async move {
                if i % 2 == 0 {
                    shop.submit(&url, &cookie, &fields, BASE).await.status()
                } else {
                    let body = json!({"revision": 1, "approved_by": "user"});
                    shop.api(
                        "POST",
                        &format!("/poppy/operations/{id}/confirm"),
                        &signed.access_token,
                        Some(body),
                    )
                    .await
                    .status()
                }
            })
        })
        .collect();
    for task in tasks {
        assert!([StatusCode::OK, StatusCode::SEE_OTHER].contains(&task.await.unwrap()));
    }
    assert_eq!(shop.performed(&id).await, 1);
}

#[tokio::test]
async fn the_page_refuses_foreign_origins_missing_or_foreign_csrf_and_other_sessions() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let operation = shop.propose(&signed, "exchanges").await;
    let url = operation["url"].as_str().unwrap().to_owned();
    let id = operation["operation_id"].as_str().unwrap().to_owned();
    let cookie = shop.join(USER, &signed.session_id, &url).await;
    let mut fields = hidden_inputs(&body_text(shop.page(&url, &cookie).await).await);
    fields.push(("action".into(), "confirm".into()));

    for origin in [
        "https://evil.example",
        "https://www.shop.example",
        "https://shop.example:443",
        "null",
    ] {
        assert_eq!(
            shop.submit(&url, &cookie, &fields, origin).await.status(),
            StatusCode::FORBIDDEN,
            "{origin}"
        );
    }
    let no_csrf: Vec<_> = fields.iter().filter(|(n, _)| n != "csrf").cloned().collect();
    assert_eq!(
        shop.submit(&url, &cookie, &no_csrf, BASE).await.status(),
        StatusCode::FORBIDDEN
    );
    // A second browser of the same Session has its own cookie, so the first one's token fails.
    let other_cookie = shop.join(USER, &signed.session_id, &url).await;
    assert_eq!(
        shop.submit(&url, &other_cookie, &fields, BASE).await.status(),
        StatusCode::FORBIDDEN
    );
    // No cookie at all: 401 before anything else.
    let anonymous = shop.submit(&url, "a=b", &fields, BASE).await;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    // Another user's Session does not see the operation.
    let stranger = "usr_conf_BBBBBBBBBBBBBBBBBBBBBB";
    let theirs = shop.sign_in(stranger).await;
    let their_cookie = shop.join(stranger, &theirs.session_id, &url).await;
    assert_eq!(shop.page(&url, &their_cookie).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(shop.performed(&id).await, 0);
}

#[tokio::test]
async fn a_browser_assertion_at_the_token_endpoint_is_invalid_grant() {
    let shop = shop();
    let assertion = shop.session_assertion(USER, BROWSER_ASSERTION_TYP);
    let response = shop
        .token_request(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", &assertion),
        ])
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    let text = body_text(response).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"error": "invalid_grant"})
    );
    assert!(!text.contains(&assertion[..40]));
}

#[tokio::test]
async fn token_endpoint_refusals() {
    let shop = shop();
    // No DPoP proof: 400 invalid_dpop_proof.
    let assertion = shop.session_assertion(USER, "JWT");
    let client = shop.client_assertion();
    let fields = [
        ("client_id", CLIENT_ID),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", client.as_str()),
        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
        ("assertion", assertion.as_str()),
    ];
    let response = shop.post_form("/oauth/token", &fields, false).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(body_json(response).await, json!({"error": "invalid_dpop_proof"}));
    // The same client assertion again (its jti is used): 401 invalid_client.
    let response = shop.post_form("/oauth/token", &fields, true).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(body_json(response).await, json!({"error": "invalid_client"}));
    // An unknown grant type.
    let response = shop.token_request(&[("grant_type", "password")]).await;
    assert_eq!(body_json(response).await, json!({"error": "unsupported_grant_type"}));
}

#[tokio::test]
async fn a_wrong_password_approves_nothing() {
    let shop = shop();
    let session = shop.start_session(USER).await;
    let assertion = shop.client_assertion();
    let device = shop
        .post_form(
            "/oauth/device",
            &[
                ("client_id", CLIENT_ID),
                (
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                ),
                ("client_assertion", &assertion),
                ("scope", "orders:read"),
            ],
            false,
        )
        .await;
    let device = body_json(device).await;
    assert_eq!(
        shop.approve_on_page(device["user_code"].as_str().unwrap(), "ada", "wrong")
            .await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        shop.approve_on_page(device["user_code"].as_str().unwrap(), "nobody", PASSWORD)
            .await,
        StatusCode::UNAUTHORIZED
    );
    shop.clock.advance(1);
    let poll = shop
        .token_request(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ("device_code", device["device_code"].as_str().unwrap()),
            ("session_id", session["session_id"].as_str().unwrap()),
        ])
        .await;
    assert_eq!(body_json(poll).await, json!({"error": "authorization_pending"}));
}

#[tokio::test]
async fn proposals_need_a_signed_in_session_and_the_operations_extension() {
    let shop = shop();
    let session = shop.start_session(USER).await;
    let token = session["access_token"].as_str().unwrap();
    let response = shop
        .api("POST", "/api/orders/ord_1/exchanges", token, Some(json!({})))
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(body_json(response).await["error"], "sign_in_required");

    let without = shop_with(false);
    let signed = without.sign_in(USER).await;
    let response = without
        .api(
            "POST",
            "/api/orders/ord_1/exchanges",
            &signed.access_token,
            Some(json!({})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(
        response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .contains("extension_required")
    );
}

#[tokio::test]
async fn idempotency_key_replays_and_conflicts() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let send = |path: &'static str, body: Value| {
        let proof = shop.proof("POST", path, Some(&signed.access_token));
        let request = Request::post(path)
            .header(header::AUTHORIZATION, format!("DPoP {}", signed.access_token))
            .header("dpop", proof)
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", "key-1")
            .body(Body::from(body.to_string()))
            .unwrap();
        shop.app.clone().oneshot(request)
    };
    let first = body_json(send("/api/orders/ord_1/gift-wrap", json!({})).await.unwrap()).await;
    let second = body_json(send("/api/orders/ord_1/gift-wrap", json!({})).await.unwrap()).await;
    assert_eq!(first, second);
    let conflict = send("/api/orders/ord_2/gift-wrap", json!({})).await.unwrap();
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert_eq!(body_json(conflict).await["error"], "idempotency_key_conflict");
}

#[tokio::test]
async fn api_calls_refuse_bearer_missing_proofs_and_tokens_in_urls() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let bearer = Request::get("/api/orders")
        .header(header::AUTHORIZATION, format!("Bearer {}", signed.access_token))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        shop.app.clone().oneshot(bearer).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let no_proof = Request::get("/api/orders")
        .header(header::AUTHORIZATION, format!("DPoP {}", signed.access_token))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        shop.app.clone().oneshot(no_proof).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let in_url = Request::get(format!("/api/orders?access_token={}", signed.access_token))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        shop.app.clone().oneshot(in_url).await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        shop.api("GET", "/api/orders", &signed.access_token, None)
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_account_token_refreshes_once_and_not_into_another_accounts_session() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let fresh = shop.start_session(USER).await;
    let session = fresh["session_id"].as_str().unwrap();
    let refresh = |token: String, session: String| {
        let shop = &shop;
        async move {
            let fields = [
                ("grant_type", "refresh_token"),
                ("refresh_token", token.as_str()),
                ("session_id", session.as_str()),
            ];
            shop.token_request(&fields).await
        }
    };
    let first = refresh(signed.account_token.clone(), session.to_owned()).await;
    assert_eq!(first.status(), StatusCode::OK);
    let first = body_json(first).await;
    assert_eq!(first["signed_in"], json!(true));
    // The presented token rotated: using it again is invalid_grant.
    let reused = refresh(signed.account_token.clone(), session.to_owned()).await;
    assert_eq!(body_json(reused).await, json!({"error": "invalid_grant"}));
    // Revoking the rotated token ends the whole sign-in: both Sessions are signed out.
    assert_eq!(
        shop.revoke(first["refresh_token"].as_str().unwrap()).await,
        StatusCode::OK
    );
    let read = shop.api("GET", "/api/orders", &signed.access_token, None).await;
    assert_eq!(read.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn operator_api_approves_and_counts() {
    let shop = shop();
    let response = shop
        .operator
        .clone()
        .oneshot(
            shop_operator(&shop, Request::post("/approve-device"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(
                    json!({"user_code": "BCDF-GHJK", "account": "acct_ada"}).to_string(),
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let missing = shop
        .operator
        .clone()
        .oneshot(
            shop_operator(&shop, Request::get("/performed/op_nothing"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_operator_api_wants_its_credential_and_a_loopback_host() {
    let shop = shop();
    let ask = |request: http::request::Builder| {
        let operator = shop.operator.clone();
        async move {
            operator
                .oneshot(request.body(Body::empty()).unwrap())
                .await
                .unwrap()
                .status()
        }
    };
    // No credential, a wrong one: 401. The credential as a Basic password works too.
    let bare = Request::get("/performed/op_x").header(header::HOST, "127.0.0.1:8444");
    assert_eq!(ask(bare).await, StatusCode::UNAUTHORIZED);
    let wrong = Request::get("/performed/op_x")
        .header(header::HOST, "127.0.0.1:8444")
        .header(header::AUTHORIZATION, "Bearer not-the-credential");
    assert_eq!(ask(wrong).await, StatusCode::UNAUTHORIZED);
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("operator:{}", shop.operator_credential),
    );
    let with_basic = Request::get("/performed/op_x")
        .header(header::HOST, "localhost:8444")
        .header(header::AUTHORIZATION, format!("Basic {basic}"));
    assert_eq!(
        ask(with_basic).await,
        StatusCode::NOT_FOUND,
        "let through: no such operation"
    );
    // A rebound name (a web page's own, resolving to 127.0.0.1) is refused even with the
    // credential.
    let rebound = Request::get("/performed/op_x")
        .header(header::HOST, "evil.example:8444")
        .header(header::AUTHORIZATION, format!("Bearer {}", shop.operator_credential));
    assert_eq!(ask(rebound).await, StatusCode::MISDIRECTED_REQUEST);
}

#[tokio::test]
async fn an_account_token_cannot_sign_in_a_session_of_another_account() {
    let shop = shop();
    let personal = shop.sign_in_as(USER, "ada").await;
    let business = shop.sign_in_as(USER, "ada_business").await;
    // Even signed out since, the business Session may not take the personal account's token.
    assert_eq!(shop.revoke(&business.account_token).await, StatusCode::OK);
    let fields = [
        ("grant_type", "refresh_token"),
        ("refresh_token", personal.account_token.as_str()),
        ("session_id", business.session_id.as_str()),
    ];
    let response = shop.token_request(&fields).await;
    assert_eq!(body_json(response).await, json!({"error": "account_mismatch"}));
}

#[tokio::test]
async fn refusals_answer_their_status_and_echo_no_credential() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let mut answers: Vec<(u16, String)> = Vec::new();
    let mut record = |status: StatusCode, text: String| answers.push((status.as_u16(), text));

    // A replayed client assertion at the token endpoint: 401 invalid_client.
    let client = shop.client_assertion();
    let session_assertion = shop.session_assertion(USER, "JWT");
    let fields = [
        ("client_id", CLIENT_ID),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", client.as_str()),
        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
        ("assertion", session_assertion.as_str()),
    ];
    assert_eq!(
        shop.post_form("/oauth/token", &fields, true).await.status(),
        StatusCode::OK
    );
    let replay = shop.post_form("/oauth/token", &fields, true).await;
    record(replay.status(), body_text(replay).await);
    // An API call whose proof was made for another token: 401 invalid_dpop_proof.
    let wrong_proof = Request::get("/api/orders")
        .header(header::AUTHORIZATION, format!("DPoP {}", signed.access_token))
        .header("dpop", shop.proof("GET", "/api/orders", Some("sat_other")))
        .body(Body::empty())
        .unwrap();
    let response = shop.app.clone().oneshot(wrong_proof).await.unwrap();
    let challenge = response.headers()[header::WWW_AUTHENTICATE]
        .to_str()
        .unwrap()
        .to_owned();
    record(response.status(), format!("{challenge} {}", body_text(response).await));
    // A revoked Account Token refreshing: 400 invalid_grant.
    assert_eq!(shop.revoke(&signed.account_token).await, StatusCode::OK);
    let refresh = shop
        .token_request(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &signed.account_token),
            ("session_id", &signed.session_id),
        ])
        .await;
    record(refresh.status(), body_text(refresh).await);
    // A browser assertion for an unknown Session: 400 page, no cookie.
    let join = shop
        .post_form(
            "/poppy/browser-session",
            &[(
                "assertion",
                &shop.browser_assertion(USER, "ses_unknown", "https://shop.example/"),
            )],
            false,
        )
        .await;
    assert!(join.headers().get(header::SET_COOKIE).is_none());
    record(join.status(), body_text(join).await);

    assert_eq!(
        answers.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [401, 401, 400, 400]
    );
    for (_, text) in &answers {
        for secret in [&client, &session_assertion, &signed.access_token, &signed.account_token] {
            assert!(!text.contains(secret.as_str()), "a refusal echoes a credential: {text}");
        }
        assert!(!text.contains("eyJ"), "a refusal carries a JWT: {text}");
    }
}
