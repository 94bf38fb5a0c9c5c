//! The agents' side of the load run, on one TLS server the company reaches through its test
//! allow-list: the honest agent's documents (`atlas.example`), an attacker's documents under
//! every name of `*.atk.example` (a metadata document near the 100 KiB limit and a JWKS at the
//! key cap), and agents whose JWKS lists far more keys than the cap: 1,000 (`big.example`, some
//! 127 KB, past the document limit too) and 780 (`wide.example`, the most that fit in 100 KiB,
//! which only the key cap refuses). Every fetch is counted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pap_agent::Identity;
use pap_net::listener::TlsListener;
use pap_shared::{SigningKey, SystemRng};
use serde_json::{Value, json};

/// The attacker's names: `a{n}.atk.example`.
pub(crate) const ATTACKER_PARENT: &str = "atk.example";
/// Agents whose JWKS is far past the key cap, and how many keys each lists (its own among them).
pub(crate) const KEYED_AGENTS: [(&str, usize); 2] = [("big.example", 1_000), ("wide.example", 780)];

/// What the server has answered, by kind of agent.
#[derive(Default)]
pub(crate) struct Fetches {
    pub(crate) honest: AtomicU64,
    pub(crate) attacker: AtomicU64,
    /// Fetches of each of [`KEYED_AGENTS`], and the size of its JWKS.
    pub(crate) keyed: [(AtomicU64, AtomicU64); 2],
}

struct Documents {
    honest_metadata: String,
    /// The honest agent: its JWKS is built at each fetch, as `pap-agent identity serve` does,
    /// so a rotation shows.
    honest: Arc<Identity>,
    attacker_jwks: String,
    /// Metadata and JWKS of each of [`KEYED_AGENTS`].
    keyed: Vec<(String, String)>,
    fetches: Arc<Fetches>,
}

/// Starts the server on `listen`; what it has served.
pub(crate) async fn serve(
    listen: SocketAddr,
    honest: Arc<Identity>,
    keyed: &[Identity],
    cert_pem: &[u8],
    key_pem: &[u8],
) -> anyhow::Result<Arc<Fetches>> {
    let fetches = Arc::new(Fetches::default());
    // Keys at their smallest (no `kid`, `use` or `alg`): about 100 bytes each, so 1,000 of them
    // fit within the company's 100 KiB document limit, and only the key cap refuses the set.
    let keys = |n: usize, own: Option<Value>| -> anyhow::Result<String> {
        let mut keys: Vec<Value> = Vec::with_capacity(n);
        for _ in keys.len()..n.saturating_sub(usize::from(own.is_some())) {
            let key = SigningKey::generate_es256(&SystemRng, "k").map_err(|e| anyhow::anyhow!("{e}"))?;
            let jwk = serde_json::to_value(key.public_key().jwk())?;
            keys.push(json!({"kty": "EC", "crv": "P-256", "x": jwk["x"], "y": jwk["y"]}));
        }
        keys.extend(own);
        Ok(json!({ "keys": keys }).to_string())
    };
    let mut keyed_documents = Vec::new();
    for (identity, (_, n)) in keyed.iter().zip(KEYED_AGENTS) {
        let own = identity.jwks()["keys"].get(0).cloned();
        keyed_documents.push((identity.metadata().to_string(), keys(n, own)?));
    }
    let documents = Arc::new(Documents {
        honest_metadata: honest.metadata().to_string(),
        honest: honest.clone(),
        attacker_jwks: keys(pap_shared::MAX_JWKS_KEYS, None)?,
        keyed: keyed_documents,
        fetches: fetches.clone(),
    });
    for ((_, jwks), (_, bytes)) in documents.keyed.iter().zip(&fetches.keyed) {
        bytes.store(u64::try_from(jwks.len()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
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
    let keyed = KEYED_AGENTS.iter().position(|(name, _)| *name == host);
    let body = if let Some(i) = keyed {
        docs.fetches.keyed[i].0.fetch_add(1, Ordering::Relaxed);
        let (metadata_doc, jwks) = &docs.keyed[i];
        if metadata { metadata_doc.clone() } else { jwks.clone() }
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
            docs.honest.jwks().to_string()
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
