//! The agents' side of the load run, on one TLS server the company reaches through its test
//! allow-list: the honest agent's documents (`atlas.example`), an attacker's documents under
//! every name of `*.atk.example` (a metadata document near the 100 KiB limit and a JWKS at the
//! key cap), and agents whose JWKS lists far more keys than the cap: 1,000 (`big.example`, some
//! 127 KB, past the document limit too) and 780 (`wide.example`, the most that fit in 100 KiB,
//! which only the key cap refuses). Every fetch is counted.
//!
//! For scenario 6 (review N1) the attacker's names also serve slow documents: under
//! `/slow/` a server that accepts and stays silent, under `/chain/` a metadata document whose
//! JWKS redirects on the same host, slowly, one hop after another (any name of the attacker's,
//! under `*.atk.example` and [`ATTACKER_DOMAINS`] more like it); and legitimate agents the
//! company has never seen ([`NEWCOMERS`]) serve their documents beside them.
//!
//! For scenario 8 (review S3) names under a free public suffix ([`FREE_SUFFIX`], each name its
//! own registrable domain by the PSL's private section) serve `/once/`: valid documents, fast
//! and `no-store`, the first time each is asked for, then silence past the company's deadline:
//! a client that makes itself look known and then holds a fetch slot at every refetch.

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
/// Agents the company has never seen, each a first contact: the legitimate agents of scenario
/// 6 (one per flood) and 7, and scenario 7's self-hosted agent that fills its replay share.
pub(crate) const NEWCOMERS: [&str; 4] = [
    "newcomer.example",
    "second-newcomer.example",
    "third-newcomer.example",
    FILLER,
];
/// Scenario 7's agent that fills its share of the replay guard (review N3).
pub(crate) const FILLER: &str = "filler.example";
/// Which of [`NEWCOMERS`] is scenario 7's legitimate newcomer, and which its filler.
pub(crate) const SCENARIO_7: (usize, usize) = (2, 3);
/// How many registrable domains the attacker holds (a wildcard certificate each).
pub(crate) const ATTACKER_DOMAINS: usize = 10;

/// The attacker's `i`th registrable domain: `atk.example`, `atk1.example`, ...
pub(crate) fn attacker_domain(i: usize) -> String {
    if i == 0 {
        ATTACKER_PARENT.to_owned()
    } else {
        format!("atk{i}.example")
    }
}
/// A public suffix of the PSL's private section whose names anyone may register for free
/// (review S3): every `s3-N.duckdns.org` is a registrable domain of its own.
pub(crate) const FREE_SUFFIX: &str = "duckdns.org";

/// Scenario 8's `i`th client: `https://s3-i.duckdns.org/once/agent.json`.
pub(crate) fn free_suffix_client(i: usize) -> String {
    format!("https://s3-{i}.{FREE_SUFFIX}/once/agent.json")
}

/// How long a `/slow/` document stays silent: past the company's read timeout.
const SLOW_SILENCE: std::time::Duration = std::time::Duration::from_secs(10);
/// How long each hop of a `/chain/` JWKS takes before it redirects to the next.
const CHAIN_HOP: std::time::Duration = std::time::Duration::from_millis(1_500);
/// Agents whose JWKS is far past the key cap, and how many keys each lists (its own among them).
pub(crate) const KEYED_AGENTS: [(&str, usize); 2] = [("big.example", 1_000), ("wide.example", 780)];

/// What the server has answered, by kind of agent.
#[derive(Default)]
pub(crate) struct Fetches {
    pub(crate) honest: AtomicU64,
    pub(crate) attacker: AtomicU64,
    /// Fetches of each of [`KEYED_AGENTS`], and the size of its JWKS.
    pub(crate) keyed: [(AtomicU64, AtomicU64); 2],
    /// Requests for the attacker's slow and chained documents that reached this server.
    pub(crate) attacker_slow: AtomicU64,
    /// Told at each of them.
    pub(crate) attacker_slow_seen: tokio::sync::Notify,
    /// Fetches of the newcomers' documents.
    pub(crate) newcomer: AtomicU64,
    /// Scenario 8: `/once/` documents answered fast (the first time for their name and path)...
    pub(crate) once_fast: AtomicU64,
    /// ...and answered with silence (every later time).
    pub(crate) once_silent: AtomicU64,
}

struct Documents {
    honest_metadata: String,
    /// The honest agent: its JWKS is built at each fetch, as `pap-agent identity serve` does,
    /// so a rotation shows.
    honest: Arc<Identity>,
    newcomers: Vec<Arc<Identity>>,
    attacker_jwks: String,
    /// Metadata and JWKS of each of [`KEYED_AGENTS`].
    keyed: Vec<(String, String)>,
    fetches: Arc<Fetches>,
    /// The `/once/` documents already answered, by name and path.
    once_answered: std::sync::Mutex<std::collections::HashSet<(String, bool)>>,
}

/// Starts the server on `listen`; what it has served.
pub(crate) async fn serve(
    listen: SocketAddr,
    honest: Arc<Identity>,
    newcomers: Vec<Arc<Identity>>,
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
        newcomers,
        attacker_jwks: keys(pap_shared::MAX_JWKS_KEYS, None)?,
        keyed: keyed_documents,
        fetches: fetches.clone(),
        once_answered: std::sync::Mutex::default(),
    });
    for ((_, jwks), (_, bytes)) in documents.keyed.iter().zip(&fetches.keyed) {
        bytes.store(u64::try_from(jwks.len()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
    let app = Router::new()
        .route("/agent.json", get(document))
        .route("/jwks.json", get(document))
        .route("/slow/agent.json", get(slow))
        .route("/chain/agent.json", get(chain_metadata))
        .route("/chain/jwks/{hop}", get(chain_hop))
        .route("/once/agent.json", get(once))
        .route("/once/jwks.json", get(once))
        .with_state(documents);
    let tcp = tokio::net::TcpListener::bind(listen).await?;
    let listener = TlsListener::new(tcp, cert_pem, key_pem)?;
    tokio::spawn(axum::serve(listener, app).into_future());
    Ok(fetches)
}

/// The name a request was sent to: HTTP/2's `:authority` or HTTP/1.1's `Host`, no port.
fn request_host(uri: &Uri, headers: &HeaderMap) -> String {
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
    host.split(':').next().unwrap_or_default().to_owned()
}

/// The attacker's silent server: it accepts, says nothing past the company's read timeout. (The
/// sleep is the attack itself, not a wait for readiness.)
async fn slow(State(docs): State<Arc<Documents>>) -> Response {
    docs.fetches.attacker_slow.fetch_add(1, Ordering::Relaxed);
    docs.fetches.attacker_slow_seen.notify_one();
    tokio::time::sleep(SLOW_SILENCE).await;
    json_response("{}".to_owned())
}

/// Scenario 8's documents: valid, fast and `no-store` the first time their name asks for each;
/// silent past the company's deadline every later time. (The sleep is the attack itself.)
async fn once(State(docs): State<Arc<Documents>>, uri: Uri, headers: HeaderMap) -> Response {
    let host = request_host(&uri, &headers);
    let metadata = uri.path() == "/once/agent.json";
    let first = docs
        .once_answered
        .lock()
        .map(|mut answered| answered.insert((host.clone(), metadata)))
        .unwrap_or(false);
    if !first {
        docs.fetches.once_silent.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(SLOW_SILENCE).await;
        return json_response("{}".to_owned());
    }
    docs.fetches.once_fast.fetch_add(1, Ordering::Relaxed);
    let body = if metadata {
        json!({
            "client_id": format!("https://{host}/once/agent.json"),
            "client_name": "Self-made known",
            "jwks_uri": format!("https://{host}/once/jwks.json"),
            "token_endpoint_auth_method": "private_key_jwt",
        })
        .to_string()
    } else {
        docs.attacker_jwks.clone()
    };
    let mut response = json_response(body);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The attacker's chained documents: a valid metadata document, quickly...
async fn chain_metadata(State(docs): State<Arc<Documents>>, uri: Uri, headers: HeaderMap) -> Response {
    docs.fetches.attacker_slow.fetch_add(1, Ordering::Relaxed);
    docs.fetches.attacker_slow_seen.notify_one();
    let host = request_host(&uri, &headers);
    json_response(
        json!({
            "client_id": format!("https://{host}/chain/agent.json"),
            "client_name": "Attacker",
            "jwks_uri": format!("https://{host}/chain/jwks/0"),
            "token_endpoint_auth_method": "private_key_jwt",
        })
        .to_string(),
    )
}

/// ... whose JWKS redirects on the same host, one slow hop after another, past the limit.
async fn chain_hop(State(docs): State<Arc<Documents>>, axum::extract::Path(hop): axum::extract::Path<u32>) -> Response {
    docs.fetches.attacker_slow.fetch_add(1, Ordering::Relaxed);
    docs.fetches.attacker_slow_seen.notify_one();
    tokio::time::sleep(CHAIN_HOP).await;
    let next = format!("/chain/jwks/{}", hop.saturating_add(1));
    (axum::http::StatusCode::FOUND, [(header::LOCATION, next)]).into_response()
}

fn json_response(body: String) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

async fn document(State(docs): State<Arc<Documents>>, uri: Uri, headers: HeaderMap) -> Response {
    let host = request_host(&uri, &headers);
    let metadata = uri.path() == "/agent.json";
    let keyed = KEYED_AGENTS.iter().position(|(name, _)| *name == host);
    let body = if let Some(i) = keyed {
        docs.fetches.keyed[i].0.fetch_add(1, Ordering::Relaxed);
        let (metadata_doc, jwks) = &docs.keyed[i];
        if metadata { metadata_doc.clone() } else { jwks.clone() }
    } else if let Some(i) = NEWCOMERS.iter().position(|name| *name == host) {
        docs.fetches.newcomer.fetch_add(1, Ordering::Relaxed);
        let newcomer = &docs.newcomers[i];
        if metadata {
            newcomer.metadata().to_string()
        } else {
            newcomer.jwks().to_string()
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
            docs.honest.jwks().to_string()
        }
    };
    json_response(body)
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
