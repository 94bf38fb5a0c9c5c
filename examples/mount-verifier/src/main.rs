//! Run with `cargo run -p example-mount-verifier -- CERT.pem KEY.pem 127.0.0.1:8443`, or, for
//! several replicas sharing their Sessions, replay marks and cookie bindings in Redis,
//! `cargo run -p example-mount-verifier --features redis -- CERT.pem KEY.pem ADDR redis://127.0.0.1:6379/0`
//!
//! Mounts the PAP browser-session route in your own axum app, next to a page of your own that
//! takes a `WebSession`: the page runs only for a browser joined to a live, signed-in PAP
//! Session, read fresh on every request. Your app's state holds a `BrowserSession`, which the
//! route and the extractor take through `FromRef`.
//!
//! Here the Sessions live in this process and nobody starts one, so every join is refused with
//! 400; a real company starts Sessions at its token endpoint (see `pap-company serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::routing::get;
use pap_company::resolver::{HttpClientResolver, ResolverConfig};
use pap_company::route::{BrowserSession, WebSession, browser_session_router};
use pap_company::stores::{MemoryCookieBindings, MemoryReplayGuard, MemorySessionDirectory, SeparateStores};
use pap_company::verify::{Verifier, VerifierParts};
use pap_shared::{CompanyDomain, HttpsUrl, SystemClock, SystemRng};

/// Your application's state; the bridge needs only its `BrowserSession`.
#[derive(Clone)]
struct App {
    browser_session: BrowserSession,
    shop_name: Arc<str>,
}

impl FromRef<App> for BrowserSession {
    fn from_ref(app: &App) -> Self {
        app.browser_session.clone()
    }
}

fn app(state: App) -> Router {
    Router::new()
        .merge(browser_session_router())
        .route("/account", get(account))
        .with_state(state)
}

/// A page of your own: reached only with a live, signed-in Session.
async fn account(session: WebSession, axum::extract::State(app): axum::extract::State<App>) -> String {
    format!("{}: signed in as {}", app.shop_name, session.account())
}

/// The route's state over the embedded stores: each replica knows only its own Sessions.
fn state() -> Result<App, Box<dyn std::error::Error>> {
    let clock = Arc::new(SystemClock);
    let rng = Arc::new(SystemRng);
    let sessions = Arc::new(MemorySessionDirectory::new(clock.clone(), rng.clone()));
    let cookies = Arc::new(MemoryCookieBindings::new(clock.clone()));
    let replay = Arc::new(MemoryReplayGuard::new(clock.clone()));
    let verifier = Verifier::new(VerifierParts {
        endpoint: HttpsUrl::parse("https://shop.example/poppy/browser-session")?,
        domain: CompanyDomain::try_from("shop.example")?,
        clock: clock.clone(),
        clients: Arc::new(HttpClientResolver::new(ResolverConfig::default(), clock.clone())?),
        sessions: sessions.clone(),
        joins: Arc::new(SeparateStores::new(sessions, replay, cookies.clone())),
    });
    let browser_session = BrowserSession::new(verifier, cookies, rng);
    Ok(App {
        browser_session,
        shop_name: Arc::from("Shop"),
    })
}

/// The same over Redis: every replica pointed at `url` accepts an assertion once between them,
/// and honours a cookie any of them issued. Your token endpoint starts Sessions with
/// `RecordSessions::start` over the same store.
#[cfg(feature = "redis")]
async fn redis_state(url: &str) -> Result<App, Box<dyn std::error::Error>> {
    let clock = Arc::new(SystemClock);
    let rng = Arc::new(SystemRng);
    let store = Arc::new(pap_company::stores::RedisStore::connect(url, "shop").await?);
    let sessions = pap_company::stores::RecordSessions::new(store.clone(), clock.clone(), rng.clone());
    let verifier = Verifier::new(VerifierParts {
        endpoint: HttpsUrl::parse("https://shop.example/poppy/browser-session")?,
        domain: CompanyDomain::try_from("shop.example")?,
        clock: clock.clone(),
        clients: Arc::new(HttpClientResolver::new(ResolverConfig::default(), clock)?),
        sessions: Arc::new(sessions),
        // One script per join: the Session re-checked, the jti marked, the cookie bound.
        joins: store.clone(),
    });
    Ok(App {
        browser_session: BrowserSession::new(verifier, store, rng),
        shop_name: Arc::from("Shop"),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(cert), Some(key), Some(listen)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: example-mount-verifier CERT.pem KEY.pem ADDR:PORT [redis://HOST:PORT/DB]".into());
    };
    let state = match args.next() {
        None => state()?,
        #[cfg(feature = "redis")]
        Some(url) => redis_state(&url).await?,
        #[cfg(not(feature = "redis"))]
        Some(_) => return Err("a Redis URL needs the `redis` feature (cargo run --features redis)".into()),
    };
    let tls = pap_net::tls::load_server_config(&PathBuf::from(cert), &PathBuf::from(key))?;
    let listen: SocketAddr = listen.parse()?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("serving https on {listen} (POST /poppy/browser-session, GET /account)");
    pap_net::serve::serve_tls(listener, app(state), tls, std::future::pending()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::{Request, StatusCode};
    use tower::ServiceExt as _;

    use super::*;

    #[tokio::test]
    async fn the_mounted_route_refuses_and_the_page_needs_a_session() {
        let app = app(state().unwrap());
        let join = Request::post("/poppy/browser-session")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from("assertion=a.b.c"))
            .unwrap();
        assert_eq!(
            app.clone().oneshot(join).await.unwrap().status(),
            StatusCode::BAD_REQUEST
        );
        let page = Request::get("/account").body(Body::empty()).unwrap();
        assert_eq!(app.oneshot(page).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
}
