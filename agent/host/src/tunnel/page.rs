//! The self-hostable pair page and service worker (AIP-59 §5, the browser client): static
//! files a person serves on an origin of their own (`pap-agent pair page --listen ADDR`), so
//! no third party's script holds their credentials (the threat model's "pair-page origin").
//!
//! ```text
//!  /pair     the page: reads the offer from the fragment (then removes it), pairs with
//!            WebCrypto, shows the fingerprint and the host's name, keeps the credential
//!            in IndexedDB on the person's word, registers the worker
//!  /sw.js    the worker for /d/<fingerprint>/: the host's /health and /mcp through the tunnel
//!  /pair.js  pair/v2 in JavaScript, byte for byte `pap-pair`
//! ```
//!
//! Every answer carries a strict Content-Security-Policy (own scripts only, no frames, no
//! third-party connections but the broker's WebSocket), no referrer and an isolated opener.
//! Everything else is 404: the pair page's server never hosts daemon UI (§5.2).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../../pair-page/index.html");
const PAGE: &str = include_str!("../../pair-page/page.js");
const PAIR: &str = include_str!("../../pair-page/pair.js");
const WORKER: &str = include_str!("../../pair-page/sw.js");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
                   connect-src 'self' ws: wss:; img-src 'self'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'; worker-src 'self'";

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn serve(request: axum::extract::Request) -> Response {
    let mut response = match request.uri().path() {
        "/pair" | "/pair/" => file("text/html; charset=utf-8", INDEX),
        "/page.js" => file("text/javascript; charset=utf-8", PAGE),
        "/pair.js" => file("text/javascript; charset=utf-8", PAIR),
        "/sw.js" => {
            let mut worker = file("text/javascript; charset=utf-8", WORKER);
            // The worker lives at /sw.js and controls /d/<fingerprint>/.
            worker
                .headers_mut()
                .insert("service-worker-allowed", HeaderValue::from_static("/d/"));
            worker
        }
        _ => (StatusCode::NOT_FOUND, "not here: open the pair page from an offer\n").into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Requests the pair page serves at once.
pub const MAX_CONCURRENT: usize = 64;

/// The pair page's routes: GET only, no request body read, at most [`MAX_CONCURRENT`] at once.
pub fn router() -> axum::Router {
    axum::Router::new()
        .fallback(serve)
        .layer(axum::extract::DefaultBodyLimit::max(0))
        .layer(tower::limit::ConcurrencyLimitLayer::new(MAX_CONCURRENT))
}
