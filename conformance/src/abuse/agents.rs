//! The agents' side of the load run, on one TLS server the company reaches through its test
//! allow-list: the honest agent's documents (`atlas.example`), an attacker's documents under
//! every name of `*.atk.example` (a metadata document near the 100 KiB limit and a JWKS at the
//! key cap), and an agent whose JWKS lists 1,000 keys (`big.example`). Every fetch is counted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pap_agent::{Identity, TlsListener};
use pap_shared::{SigningKey, SystemRng};
use serde_json::{Value, json};

/// The attacker's names: `a{n}.atk.example`.
pub(crate) const ATTACKER_PARENT: &str = "atk.example";
/// The agent whose JWKS is far past the cap.
pub(crate) const BIG_JWKS_AGENT: &str = "big.example";
/// Keys in its JWKS.
pub(crate) const BIG_JWKS_KEYS: usize = 1_000;

/// What the server has answered, by kind of agent.
#[derive(Default)]
pub(crate) struct Fetches {
    pub(crate) honest: AtomicU64,
    pub(crate) attacker: AtomicU64,
    pub(crate) big: AtomicU64,
}

struct Documents {
    honest_metadata: String,
    honest_jwks: String,
    attacker_jwks: String,
    big_metadata: String,
    big_jwks: String,
    fetches: Arc<Fetches>,
}

/// Starts the server on `listen`; what it has served.
pub(crate) async fn serve(
    listen: SocketAddr,
    honest: &Identity,
    big: &Identity,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> anyhow::Result<Arc<Fetches>> {
    let fetches = Arc::new(Fetches::default());
    let keys = |n: usize| -> anyhow::Result<Value> {
        let keys: Result<Vec<Value>, _> = (0..n)
            .map(|i| {
                SigningKey::generate_es256(&SystemRng, &format!("k{i}"))
                    .map(|k| serde_json::to_value(k.public_key().jwk()).unwrap_or(Value::Null))
            })
            .collect();
        Ok(json!({ "keys": keys.map_err(|e| anyhow::anyhow!("{e}"))? }))
    };
    let documents = Arc::new(Documents {
        honest_metadata: honest.metadata().to_string(),
        honest_jwks: honest.jwks().to_string(),
        attacker_jwks: keys(pap_shared::MAX_JWKS_KEYS)?.to_string(),
        big_metadata: big.metadata().to_string(),
        big_jwks: keys(BIG_JWKS_KEYS)?.to_string(),
        fetches: fetches.clone(),
    });
    let app = Router::new()
        .route("/agent.json", get(document))
        .route("/jwks.json", get(document))
        .with_state(documents);
    let tcp = tokio::net::TcpListener::bind(listen).await?;
    let listener = TlsListener::new(tcp, cert_pem, key_pem)?;
    tokio::spawn(axum::serve(listener, app).into_future());
    Ok(fetches)
}

async fn document(State(docs): State<Arc<Documents>>, uri: Uri, headers: HeaderMap) -> Response {
    let host = uri
        .host()
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let host = host.split(':').next().unwrap_or_default().to_owned();
    let metadata = uri.path() == "/agent.json";
    let body = if host == BIG_JWKS_AGENT {
        docs.fetches.big.fetch_add(1, Ordering::Relaxed);
        if metadata {
            docs.big_metadata.clone()
        } else {
            docs.big_jwks.clone()
        }
    } else if host.ends_with(&format!(".{ATTACKER_PARENT}")) {
        docs.fetches.attacker.fetch_add(1, Ordering::Relaxed);
        if metadata {
            attacker_metadata(&host)
        } else {
            docs.attacker_jwks.clone()
        }
    } else {
        docs.fetches.honest.fetch_add(1, Ordering::Relaxed);
        if metadata {
            docs.honest_metadata.clone()
        } else {
            docs.honest_jwks.clone()
        }
    };
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A valid metadata document for `host`, padded to just under the company's 100 KiB limit.
fn attacker_metadata(host: &str) -> String {
    json!({
        "client_id": format!("https://{host}/agent.json"),
        "client_name": "Attacker",
        "jwks_uri": format!("https://{host}/jwks.json"),
        "token_endpoint_auth_method": "private_key_jwt",
        "padding": "x".repeat(99 * 1024),
    })
    .to_string()
}
