//! The reference shop's pages as a person sees them, through its router (no socket): the front
//! page for a stranger and for a browser in a signed-in Session, the sign-out form, the device
//! page naming the agent that asks. Real Chromium renders them in `agent/pap/tests/pages.rs`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use axum::body::Body;
use http::{Request, Response, StatusCode, header};
use pap_company::stores::SessionDirectory as _;
use pap_shared::SessionId;
use serde_json::Value;
use support::shop::*;
use tower::ServiceExt as _;

const USER: &str = "usr_conf_AAAAAAAAAAAAAAAAAAAAAA";

async fn get(shop: &Shop, path: &str, cookie: Option<&str>) -> Response<Body> {
    let mut request = Request::get(path);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    shop.app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

async fn sign_out(shop: &Shop, cookie: &str, csrf: &str, origin: &str) -> Response<Body> {
    let request = Request::post("/sign-out")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ORIGIN, origin)
        .header(header::COOKIE, cookie)
        .body(Body::from(format!("csrf={csrf}")))
        .unwrap();
    shop.app.clone().oneshot(request).await.unwrap()
}

/// A 200 page's HTML, after checking what every page carries: the site's own stylesheet, a
/// phone viewport, no script, no inline style, `default-src 'self'`.
async fn page_html(response: Response<Body>) -> String {
    assert_eq!(response.status(), StatusCode::OK);
    let policy = response.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("default-src 'self'"), "{policy}");
    let html = body_text(response).await;
    assert!(html.contains("<link rel=\"stylesheet\" href=\"/site.css\">"), "{html}");
    assert!(html.contains("name=\"viewport\""), "{html}");
    assert!(!html.contains("<script") && !html.contains(" style="), "{html}");
    html
}

#[tokio::test]
async fn a_stranger_sees_what_the_shop_is_and_how_an_agent_connects() {
    let shop = shop();
    let html = page_html(get(&shop, "/", None).await).await;
    assert!(html.contains("<h1>Shop Example</h1>"), "{html}");
    assert!(html.contains("You are not signed in here"), "{html}");
    assert!(html.contains("href=\"/device\""), "{html}");
    // testing = true: the demo accounts are named (never their password).
    assert!(html.contains("<code>ada</code>") && html.contains("<code>ada_business</code>"));
    assert!(!html.contains(PASSWORD));

    let css = get(&shop, "/site.css", None).await;
    assert_eq!(css.status(), StatusCode::OK);
    assert_eq!(css.headers()[header::CONTENT_TYPE], "text/css; charset=utf-8");
    assert_eq!(css.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
}

#[tokio::test]
async fn in_a_signed_in_session_the_front_page_lists_the_operations_and_signs_out() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    let operation = shop.propose(&signed, "exchanges").await;
    let id = operation["operation_id"].as_str().unwrap().to_owned();
    let cookie = shop.join(USER, &signed.session_id, &format!("{BASE}/")).await;

    let html = page_html(get(&shop, "/", Some(&cookie)).await).await;
    assert!(html.contains("Signed in as ada"), "{html}");
    assert!(html.contains("<strong>Atlas</strong> (atlas.example)"), "{html}");
    assert!(html.contains("See your orders and their status"), "{html}");
    assert!(html.contains(&format!("href=\"/operations/{id}\"")), "{html}");
    assert!(html.contains("state-proposed"), "{html}");
    let fields = hidden_inputs(&html);
    let csrf = &fields.iter().find(|(n, _)| n == "csrf").unwrap().1;

    // Refused and nothing changed: another site's post, a wrong token.
    let live = |shop: &Shop| {
        let id = SessionId::parse(&signed.session_id).unwrap();
        let sessions = shop.company.sessions().clone();
        async move { sessions.session(&id).await.unwrap().unwrap().is_signed_in() }
    };
    let cross = sign_out(&shop, &cookie, csrf, "https://evil.example").await;
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    let forged = sign_out(&shop, &cookie, "bm90LXRoZS10b2tlbg", BASE).await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(live(&shop).await, "a refused sign-out signed nothing out");

    let out = sign_out(&shop, &cookie, csrf, BASE).await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert_eq!(out.headers()[header::LOCATION], "/");
    let cleared = out.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cleared.starts_with("__Host-poppy_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    // The Session itself is signed out: the agent's API calls and every page show it.
    assert!(!live(&shop).await);
    let read = shop.api("GET", "/api/orders", &signed.access_token, None).await;
    assert_ne!(read.status(), StatusCode::OK, "{:?}", body_json(read).await);
    assert!(
        page_html(get(&shop, "/", Some(&cookie)).await)
            .await
            .contains("You are not signed in here")
    );
    let page = shop.page(&format!("{BASE}/operations/{id}"), &cookie).await;
    assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
    // Review N19: the agent's next refresh does not undo the person's sign-out; its sign-in
    // ended with it.
    let renewed = shop
        .token_request(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &signed.account_token),
            ("session_id", &signed.session_id),
        ])
        .await;
    assert_eq!(body_json(renewed).await, serde_json::json!({"error": "invalid_grant"}));
    assert!(!live(&shop).await, "a refresh signed the Session back in");
}

#[tokio::test]
async fn the_device_page_names_the_agent_and_what_it_asks_for() {
    let shop = shop();
    let device: Value = body_json(shop.device_code("orders:read").await).await;
    let user_code = device["user_code"].as_str().unwrap();
    let html = page_html(get(&shop, &format!("/device?user_code={user_code}"), None).await).await;
    assert!(html.contains("<strong>Atlas</strong> (atlas.example)"), "{html}");
    assert!(html.contains(user_code), "{html}");
    assert!(html.contains("See your orders and their status"), "{html}");
    assert!(!html.contains("Ask for exchanges"), "only the scopes asked for: {html}");

    // A code nobody is waiting with: said so, and the form (whose post says the same) stays.
    let html = page_html(get(&shop, "/device?user_code=BBBB-BBBB", None).await).await;
    assert!(html.contains("No agent is waiting"), "{html}");
    assert!(!html.contains("Atlas"), "{html}");
    assert_eq!(
        hidden_inputs(&html).iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["user_code", "csrf"]
    );

    // No code yet: the entry form.
    let html = page_html(get(&shop, "/device", None).await).await;
    assert!(html.contains("Enter the code your agent shows you"), "{html}");
}
