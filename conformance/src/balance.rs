//! A round-robin balancer for tests, request by request: each HTTPS request it takes is sent
//! on to the next of a company's replicas in turn (TLS to each, as its own clients would), and
//! the answer comes back unchanged. So a runner that keeps one connection (HTTP/2, pooled
//! keep-alive) still spreads its API calls and its browser's requests over every replica.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderName, StatusCode, header};

/// Largest body forwarded either way.
const MAX_BODY: usize = 1024 * 1024;

#[derive(Clone)]
struct Replicas {
    domain: Arc<str>,
    clients: Arc<[reqwest::Client]>,
    next: Arc<AtomicUsize>,
}

/// The balancer's routes: every request, forwarded to the next of `backends` (each serving
/// `domain` over TLS under the CA in `ca_pem`).
pub fn router(domain: &str, backends: &[SocketAddr], ca_pem: &[u8]) -> anyhow::Result<Router> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &ca_pem[..]) {
        roots.add(cert?)?;
    }
    let clients = backends
        .iter()
        .map(|backend| {
            let tls =
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(roots.clone())
                    .with_no_client_auth();
            reqwest::Client::builder()
                .use_preconfigured_tls(tls)
                .resolve(domain, *backend)
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .context("building a client for a replica")
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let replicas = Replicas {
        domain: Arc::from(domain),
        clients: clients.into(),
        next: Arc::default(),
    };
    Ok(Router::new().fallback(forward).with_state(replicas))
}

async fn forward(State(replicas): State<Replicas>, request: Request) -> Response {
    let turn = replicas.next.fetch_add(1, Ordering::Relaxed) % replicas.clients.len();
    let client = &replicas.clients[turn];
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut outbound = client.request(parts.method, format!("https://{}{path}", replicas.domain));
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            outbound = outbound.header(name, value);
        }
    }
    let Ok(answer) = outbound.body(body).send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let Ok(bytes) = answer.bytes().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !hop_by_hop(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

/// Headers that belong to one connection, not to the request.
fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::HOST,
        header::CONTENT_LENGTH,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
    ]
    .contains(name)
}
