//! A canary: the logs of a full join, a refusal and a page view hold neither the assertion nor
//! the cookie value, nor do the errors' Debug and Display forms.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::{Request, StatusCode, header};
use support::{World, join_request};
use tower::ServiceExt as _;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn logs_hold_neither_the_assertion_nor_the_cookie() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let world = World::new();
    let app = world.app();
    let assertion = world.assertion();

    let joined = app.clone().oneshot(join_request(&assertion)).await.unwrap();
    assert_eq!(joined.status(), StatusCode::SEE_OTHER);
    let set_cookie = joined.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    let cookie = set_cookie
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_owned();

    let replayed = app.clone().oneshot(join_request(&assertion)).await.unwrap();
    assert_eq!(replayed.status(), StatusCode::BAD_REQUEST);
    let refusal = world.state.verifier().verify(&assertion).await.unwrap_err();

    let page = Request::get("/operations/op_1")
        .header(header::COOKIE, format!("__Host-poppy_session={cookie}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.clone().oneshot(page).await.unwrap().status(), StatusCode::OK);
    world.sessions.sign_out(&world.session);
    let page = Request::get("/operations/op_1")
        .header(header::COOKIE, format!("__Host-poppy_session={cookie}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.oneshot(page).await.unwrap().status(), StatusCode::UNAUTHORIZED);

    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    // The logs are not empty: they say what happened, by reason code.
    assert!(logged.contains("browser joined its Session"), "{logged}");
    assert!(
        logged.contains("reason=\"replayed\"") || logged.contains("reason=replayed"),
        "{logged}"
    );
    let signature = assertion.secret().rsplit('.').next().unwrap();
    let payload = assertion.secret().split('.').nth(1).unwrap();
    for (what, secret) in [
        ("assertion", assertion.secret()),
        ("signature", signature),
        ("payload", payload),
        ("cookie", &cookie),
    ] {
        assert!(!logged.contains(secret), "the logs hold the {what}");
    }
    for text in [format!("{refusal:?}"), refusal.to_string(), format!("{assertion:?}")] {
        assert!(!text.contains(signature) && !text.contains(payload), "{text}");
    }
}
