//! The browser-session route and the WebSession extractor through the router, no socket.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use axum::body::Body;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use pap_shared::BROWSER_ASSERTION_TYP;
use serde_json::json;
use support::{World, form_post, join_request};
use tower::ServiceExt as _;

async fn send(world: &World, request: Request<Body>) -> Response<Body> {
    world.app().oneshot(request).await.unwrap()
}

fn set_cookie(response: &Response<Body>) -> Option<String> {
    response
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned())
}

fn cookie_value(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_owned()
}

fn page_request(cookie: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/operations/op_1");
    if let Some(value) = cookie {
        request = request.header(header::COOKIE, format!("__Host-poppy_session={value}"));
    }
    request.body(Body::empty()).unwrap()
}

fn assert_refused(response: &Response<Body>, what: &str) {
    assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
    assert!(
        response.headers().get(header::SET_COOKIE).is_none(),
        "{what}: a refusal must set no cookie"
    );
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8",
        "{what}"
    );
}

#[tokio::test]
async fn join_answers_303_with_exactly_the_specified_cookie() {
    let world = World::new();
    let response = send(&world, join_request(&world.assertion())).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        response.headers()[header::LOCATION],
        "https://shop.example/operations/op_1"
    );
    assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    let cookies: Vec<_> = response.headers().get_all(header::SET_COOKIE).iter().collect();
    assert_eq!(cookies.len(), 1, "exactly one Set-Cookie");
    let cookie = cookies[0].to_str().unwrap();
    let value = cookie_value(cookie);
    assert_eq!(
        cookie,
        format!("__Host-poppy_session={value}; Path=/; Secure; HttpOnly; SameSite=Lax")
    );
    // The Session's hash tag (4 hex digits), then 32 random bytes, unpadded base64url.
    assert_eq!(value.len(), 47);
    assert!(
        value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
}

#[tokio::test]
async fn the_reference_runners_six_refusals_after_one_accepted_join() {
    // lifecycle.browser-assertion-refused (wire doc §1.3): one valid assertion gets 303, then
    // six bad ones each get exactly 400 with no Set-Cookie, the last being the replay.
    let world = World::new();
    world.sessions.sign_out(&world.session);
    let valid = world.assertion();
    assert_eq!(send(&world, join_request(&valid)).await.status(), StatusCode::SEE_OTHER);

    let foreign = world.with("return_to", json!("https://evil.example/"));
    let session_assertion = world.agent.sign("JWT", &world.claims());
    let other_user = world.with("sub", json!("usr_conf_someoneelse0000000"));
    let mut long = world.claims();
    long["exp"] = json!(long["iat"].as_i64().unwrap() + 600);
    let long_lived = world.agent.sign(BROWSER_ASSERTION_TYP, &long);
    let other_audience = world.with("aud", json!("https://shop.example/elsewhere"));
    for (what, assertion) in [
        ("a foreign return_to", &foreign),
        ("a Session assertion", &session_assertion),
        ("another user's Session", &other_user),
        ("a long-lived assertion", &long_lived),
        ("another audience", &other_audience),
        ("a replayed assertion", &valid),
    ] {
        assert_refused(&send(&world, join_request(assertion)).await, what);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_posts_of_one_assertion_join_once() {
    let world = World::new();
    let body = format!("assertion={}", world.assertion().secret());
    let app = world.app();
    let tasks: Vec<_> = (0..1_000)
        .map(|_| {
            let app = app.clone();
            let body = body.clone();
            tokio::spawn(async move { app.oneshot(form_post(&body)).await.unwrap().status() })
        })
        .collect();
    let (mut joined, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            StatusCode::SEE_OTHER => joined += 1,
            StatusCode::BAD_REQUEST => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((joined, refused), (1, 999));
}

#[tokio::test]
async fn the_website_follows_the_session_on_the_next_request() {
    let world = World::new();
    let response = send(&world, join_request(&world.assertion())).await;
    let value = cookie_value(&set_cookie(&response).unwrap());

    let page = send(&world, page_request(Some(&value))).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.into_body().collect().await.unwrap().to_bytes(), "hello ada");

    // Sign-out shows on the very next request.
    world.sessions.sign_out(&world.session);
    assert_eq!(
        send(&world, page_request(Some(&value))).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // Signing in again does not revive it (L4): a browser the user meant to log out stays out;
    // a new join is needed, and that one works.
    world.sessions.sign_in(&world.session, "ada", vec![]);
    assert_eq!(
        send(&world, page_request(Some(&value))).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let rejoined = send(&world, join_request(&world.assertion())).await;
    let fresh = cookie_value(&set_cookie(&rejoined).unwrap());
    assert_eq!(send(&world, page_request(Some(&fresh))).await.status(), StatusCode::OK);
    // Ending the Session ends the cookie for good.
    world.sessions.end(&world.session);
    assert_eq!(
        send(&world, page_request(Some(&fresh))).await.status(),
        StatusCode::UNAUTHORIZED
    );
    world.sessions.sign_in(&world.session, "ada", vec![]);
    assert_eq!(
        send(&world, page_request(Some(&fresh))).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn the_cookie_does_not_outlive_the_session() {
    let world = World::new();
    let response = send(&world, join_request(&world.assertion())).await;
    let value = cookie_value(&set_cookie(&response).unwrap());
    world.clock.set(support::NOW + 3_600);
    assert_eq!(
        send(&world, page_request(Some(&value))).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn pages_refuse_missing_unknown_and_malformed_cookies() {
    let world = World::new();
    assert_eq!(
        send(&world, page_request(None)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let unknown = "A".repeat(43);
    assert_eq!(
        send(&world, page_request(Some(&unknown))).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&world, page_request(Some("short"))).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn reads_the_cookie_among_several_cookie_headers() {
    let world = World::new();
    let response = send(&world, join_request(&world.assertion())).await;
    let value = cookie_value(&set_cookie(&response).unwrap());
    let request = Request::get("/operations/op_1")
        .header(header::COOKIE, "a=1")
        .header(header::COOKIE, format!("__Host-poppy_session={value}"))
        .header(header::COOKIE, "b=2")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&world, request).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn refuses_an_assertion_in_the_url_a_json_body_an_oversized_body_and_other_methods() {
    let world = World::new();
    let assertion = world.assertion();

    let in_query = Request::post(format!("/poppy/browser-session?assertion={}", assertion.secret()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::empty())
        .unwrap();
    assert_refused(&send(&world, in_query).await, "assertion in the query string");

    let json_body = Request::post("/poppy/browser-session")
        .header("content-type", "application/json")
        .body(Body::from(json!({"assertion": assertion.secret()}).to_string()))
        .unwrap();
    assert_refused(&send(&world, json_body).await, "JSON body");

    let no_type = Request::post("/poppy/browser-session")
        .body(Body::from(format!("assertion={}", assertion.secret())))
        .unwrap();
    assert_refused(&send(&world, no_type).await, "no content type");

    let oversized = format!(
        "assertion={}&pad={}",
        assertion.secret(),
        "x".repeat(pap_company::route::MAX_FORM_BYTES)
    );
    assert_refused(&send(&world, form_post(&oversized)).await, "oversized body");

    let twice = format!("assertion={0}&assertion={0}", assertion.secret());
    assert_refused(&send(&world, form_post(&twice)).await, "repeated assertion");
    assert_refused(&send(&world, form_post("other=1")).await, "no assertion");

    let get = Request::get(format!("/poppy/browser-session?assertion={}", assertion.secret()))
        .body(Body::empty())
        .unwrap();
    let response = send(&world, get).await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(response.headers().get(header::SET_COOKIE).is_none());

    // None of those consumed the assertion: it still joins once.
    assert_eq!(
        send(&world, join_request(&assertion)).await.status(),
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn a_page_of_another_site_cannot_post_an_assertion_into_a_browser() {
    // Review L3: evil.example's page auto-posts an assertion it holds; the visitor's browser
    // names the page in Origin. Refused, no cookie, the assertion left unspent.
    let world = World::new();
    let assertion = world.assertion();
    let with_origin = |origin: &str| {
        let mut request = join_request(&assertion);
        request
            .headers_mut()
            .insert(header::ORIGIN, http::HeaderValue::from_str(origin).unwrap());
        request
    };
    for foreign in [
        "https://evil.example",
        "https://shop.example.evil.example",
        "http://shop.example",
        "garbage",
    ] {
        let refused = send(&world, with_origin(foreign)).await;
        assert_refused(&refused, foreign);
    }
    // The agent's own post: from a blank page (Origin: null), from the company's own pages, or
    // from a client that sends no Origin. The assertion was not spent by the refusals above.
    let joined = send(&world, with_origin("null")).await;
    assert_eq!(joined.status(), StatusCode::SEE_OTHER);
    let again = send(&world, with_origin("https://www.shop.example")).await;
    assert_eq!(again.status(), StatusCode::BAD_REQUEST, "replayed");
    let fresh = send(&world, join_request(&world.assertion())).await;
    assert_eq!(fresh.status(), StatusCode::SEE_OTHER);
}
