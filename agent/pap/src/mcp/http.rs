//! The agent's browser over MCP streamable HTTP (`pap-agent host serve`), as AIP-63's security
//! considerations ask of a browser host:
//!
//! ```text
//!  every route   the Host/Origin guard: Host must name the address served (loopback names, or
//!                what the operator allowed); an Origin, when sent, must be one allowed
//!                -> 403 (a web page reaching a local host through DNS rebinding, or posting
//!                cross-origin, is refused before anything else runs)
//!  GET  /health  open: {"ok":true,"tools":N}
//!  POST /pair    a one-time pairing code -> the device's id and bearer (AIP-59)
//!  /mcp          a paired device's bearer, checked against the devices file on every request
//!                -> 401 `WWW-Authenticate: Bearer realm="pap-agent"`, a body that says nothing;
//!                then MCP (rmcp's streamable HTTP service), as that device
//! ```
//!
//! Bounds ([`Limits`]): connections (the next waits in the kernel's queue), the time a
//! connection may take to send a request's headers, a request body cap (413), requests in
//! flight and live MCP sessions (503 with `Retry-After`). No request timeout: an MCP response
//! may be a long-lived event stream (rmcp pings it every 15 s and ends idle sessions after
//! 5 min). Binding anything but loopback is the operator's explicit choice
//! ([`Exposure::check`]), and pairing stays required.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use pap_browser::spec::AgentCaller;
use pap_shared::{SystemClock, SystemRng};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio::sync::Semaphore;

use super::BrowserServer;
use crate::pairing::{Bearer, Devices, RedeemError};

/// The realm a 401 names.
const REALM: &str = "Bearer realm=\"pap-agent\"";

/// Where the host may listen and which further names and origins the operator allowed: checked
/// before binding ([`Exposure::check`]), made a [`Guard`] once the port is known.
#[derive(Clone, Debug)]
pub struct Exposure {
    addr: SocketAddr,
    tls: bool,
    hosts: Vec<String>,
    origins: Vec<String>,
}

/// The Host/Origin guard of a bound host.
#[derive(Clone, Debug)]
pub struct Guard {
    /// `Host` values admitted, lowercase `name:port`.
    hosts: Vec<String>,
    /// `Origin` values admitted, lowercase `scheme://name:port`.
    origins: Vec<String>,
}

/// A listen address refused at start.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Not loopback, and the operator did not say so.
    #[error(
        "{0} is not a loopback address: a browser host binds loopback unless the operator says \
         otherwise (--allow-remote); pairing stays required either way"
    )]
    NotLoopback(SocketAddr),
    /// Not loopback, and no TLS: a device's bearer would cross the network in the clear.
    #[error(
        "{0} is not a loopback address: serving it needs TLS (--tls-cert and --tls-key), or \
         every device's bearer crosses the network in the clear"
    )]
    RemoteWithoutTls(SocketAddr),
}

impl Exposure {
    /// Where a host may listen: `addr`, which must be loopback unless `allow_remote`, and then
    /// served over TLS (`tls`); the operator's further `hosts` (`name` or `name:port`) and
    /// `origins`.
    pub fn check(
        addr: SocketAddr,
        allow_remote: bool,
        tls: bool,
        hosts: &[String],
        origins: &[String],
    ) -> Result<Self, Refused> {
        if !addr.ip().is_loopback() {
            if !allow_remote {
                return Err(Refused::NotLoopback(addr));
            }
            if !tls {
                return Err(Refused::RemoteWithoutTls(addr));
            }
        }
        Ok(Self {
            addr,
            tls,
            hosts: hosts.to_vec(),
            origins: origins.to_vec(),
        })
    }

    /// The guard once bound to `port`: the loopback names (and the address itself) at that port,
    /// the operator's hosts (a bare name gets the port) and origins, and the origin of each
    /// host (`https://` when served over TLS).
    pub fn guard(&self, port: u16) -> Guard {
        let addr = self.addr;
        let (hosts, origins) = (&self.hosts, &self.origins);
        let mut names: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
            names.push(match addr {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            });
        }
        let mut admitted: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
        for host in hosts {
            let host = host.to_ascii_lowercase();
            admitted.push(
                if host.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
                    host
                } else {
                    format!("{host}:{port}")
                },
            );
        }
        let scheme = if self.tls { "https" } else { "http" };
        let mut allowed_origins: Vec<String> = admitted.iter().map(|a| format!("{scheme}://{a}")).collect();
        allowed_origins.extend(origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()));
        Guard {
            hosts: admitted,
            origins: allowed_origins,
        }
    }
}

impl Guard {
    /// Why a request's `Host` or `Origin` is refused, if it is.
    fn refuses(&self, request: &Request) -> Option<&'static str> {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
        match host {
            Some(host) if self.hosts.contains(&host.to_ascii_lowercase()) => {}
            _ => return Some("this host does not answer that Host"),
        }
        match request.headers().get(header::ORIGIN).map(HeaderValue::to_str) {
            None => None,
            Some(Ok(origin)) if self.origins.contains(&origin.to_ascii_lowercase()) => None,
            Some(_) => Some("this host does not answer requests from that Origin"),
        }
    }
}

/// How much the host takes on at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body, bytes (MCP messages; a `/pair` body is capped at 1 KiB).
    pub max_body: usize,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// Most live MCP sessions (a client that negotiates a protocol with sessions holds one).
    pub max_sessions: usize,
    /// Most connections open at once ([`serve`]); the next waits in the kernel's queue.
    pub max_connections: usize,
    /// Longest a connection may take to send a request's headers once the host waits for them
    /// (the first request's or the next one's, so also how long an idle keep-alive lasts).
    pub header_read_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body: 1024 * 1024,
            max_in_flight: 64,
            max_sessions: 32,
            max_connections: 256,
            header_read_timeout: std::time::Duration::from_secs(10),
        }
    }
}

#[derive(Clone)]
struct Host {
    server: BrowserServer,
    devices: Devices,
    guard: Arc<Guard>,
    in_flight: Arc<Semaphore>,
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    /// The devices that made a request, so a revoked one's tabs and contexts end (C13).
    seen: Arc<Mutex<HashSet<String>>>,
}

/// The host's routes: `/health`, `/pair` and `/mcp` (serving `server`, made with
/// [`BrowserServer::per_request`]), every one behind the Host/Origin guard.
pub fn router(server: BrowserServer, devices: Devices, guard: Guard, limits: Limits) -> Router {
    let sessions = Arc::new(LocalSessionManager::default());
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(guard.hosts.clone())
        .with_allowed_origins(guard.origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(limits.max_body);
    config.sse_keep_alive = Some(std::time::Duration::from_secs(15));
    let factory = server.clone();
    let mcp = StreamableHttpService::new(move || Ok(factory.clone()), sessions.clone(), config);
    let host = Host {
        server,
        devices,
        guard: Arc::new(guard),
        in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
        sessions,
        max_sessions: limits.max_sessions,
        seen: Arc::default(),
    };
    let guarded_mcp = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(host.clone(), paired));
    Router::new()
        .route("/health", axum::routing::get(health))
        .route("/pair", axum::routing::post(pair).layer(DefaultBodyLimit::max(1024)))
        .merge(guarded_mcp)
        .layer(axum::middleware::from_fn_with_state(host.clone(), guarded))
        .with_state(host)
}

/// Serves `app` on `listener` (plain TCP, or [`crate::TlsListener`], whose handshakes are
/// bounded on their own) until `shutdown` completes: at most `limits.max_connections` at once,
/// each in its own task, HTTP/1.1, headers within `limits.header_read_timeout`.
pub async fn serve<L>(mut listener: L, app: Router, limits: Limits, shutdown: impl std::future::Future<Output = ()>)
where
    L: axum::serve::Listener,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                // The semaphore is never closed.
                Err(_) => return,
            },
        };
        // The listener retries a failed `accept` itself (axum's: resting a second after one
        // that is not a single connection's).
        let (io, _) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let app = app.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            // HTTP/1.1 only: detecting HTTP/2 prior knowledge would wait for a silent client's
            // first bytes with no timeout at all (MCP clients speak HTTP/1.1 to an http: URL).
            let builder = builder.http1_only();
            let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
}

/// The Host/Origin guard and the in-flight cap, in front of every route.
async fn guarded(State(host): State<Host>, request: Request, next: Next) -> Response {
    if let Some(why) = host.guard.refuses(&request) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(json!({ "error": "forbidden", "message": why })),
        )
            .into_response();
    }
    let Ok(_slot) = host.in_flight.clone().try_acquire_owned() else {
        return busy("too many requests in flight");
    };
    next.run(request).await
}

/// `/mcp` for paired devices only: the bearer is checked against the devices file now (a
/// revoked device is refused on its next request), and the device rides the request to the
/// tools ([`BrowserServer`] reads it).
async fn paired(State(host): State<Host>, mut request: Request, next: Next) -> Response {
    let paired = match host.devices.load() {
        Ok(paired) => paired,
        Err(error) => {
            // Fail closed: no device is known when the file cannot be read.
            tracing::error!(%error, "the devices file");
            return busy("the host cannot check devices now");
        }
    };
    end_unpaired(&host, &paired);
    let device = bearer(request.headers()).and_then(|b| paired.authenticate(&b));
    let Some(device) = device else {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, REALM)],
            axum::Json(json!({ "error": "unauthorized" })),
        )
            .into_response();
    };
    let opens_session = request.method() == http::Method::POST && !request.headers().contains_key("mcp-session-id");
    if opens_session && host.sessions.sessions.read().await.len() >= host.max_sessions {
        return busy("too many MCP sessions are open");
    }
    host.seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(device.id.clone());
    if let Err(error) = host.devices.seen(&device, pap_shared::Clock::now(&SystemClock)) {
        // Only `devices list`'s lastSeen is stale then; the request goes on.
        tracing::warn!(%error, "recording when the device was last seen");
    }
    request.extensions_mut().insert(AgentCaller::paired(device.id));
    next.run(request).await
}

/// Ends the tabs and contexts of devices seen here that are no longer paired (C13).
fn end_unpaired(host: &Host, paired: &crate::pairing::Paired) {
    let gone: Vec<String> = {
        let mut seen = host.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone: Vec<String> = seen.iter().filter(|id| !paired.has(id)).cloned().collect();
        seen.retain(|id| paired.has(id));
        gone
    };
    for id in gone {
        let tools = host.server.tools().clone();
        tokio::spawn(async move {
            if let Err(error) = tools.end_device(&id).await {
                tracing::warn!(device = %id, error = %error.message, "ending an unpaired device's browser contexts");
            }
        });
    }
}

/// The bearer of an `Authorization: Bearer ...` header.
fn bearer(headers: &HeaderMap) -> Option<Bearer> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| Bearer::presented(token))
}

fn busy(why: &'static str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        axum::Json(json!({ "error": "busy", "message": why })),
    )
        .into_response()
}

/// `/health`: the host answers, how many tools it lists, and its browser's state as AIP-63's
/// `health()` reports it (`state`, `reason` after an exit or failures, `checkedAt`, `bootId`)
/// with `recovering` while a browser that exited is relaunched. No secrets: a reason is an exit
/// status or a launch failure.
async fn health(State(host): State<Host>) -> axum::Json<serde_json::Value> {
    let tools = host.server.tools();
    let mut browser = serde_json::to_value(tools.health()).unwrap_or_else(|_| json!({}));
    if let Some(fields) = browser.as_object_mut() {
        fields.insert("recovering".into(), tools.recovering().into());
    }
    axum::Json(json!({ "ok": true, "tools": host.server.listed().len(), "browser": browser }))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PairRequest {
    code: String,
}

/// `POST /pair {"code": ...}`: the device's id and bearer, once (AIP-59).
async fn pair(State(host): State<Host>, body: axum::Json<PairRequest>) -> Response {
    let devices = host.devices.clone();
    let redeemed = tokio::task::spawn_blocking(move || devices.redeem(&body.code, &SystemClock, &SystemRng)).await;
    let no_store = [(header::CACHE_CONTROL, "no-store")];
    match redeemed {
        Ok(Ok((device, bearer))) => (
            no_store,
            axum::Json(json!({ "deviceId": device.id, "name": device.name, "bearer": bearer.expose() })),
        )
            .into_response(),
        Ok(Err(RedeemError::Invalid)) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({ "error": "invalid_code", "message": RedeemError::Invalid.to_string() })),
        )
            .into_response(),
        Ok(Err(RedeemError::Voided)) => (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({ "error": "voided", "message": RedeemError::Voided.to_string() })),
        )
            .into_response(),
        Ok(Err(RedeemError::Store(error))) => {
            tracing::error!(%error, "pairing");
            busy("the host cannot pair now")
        }
        Err(_) => busy("the host cannot pair now"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use pap_browser::chromium::{BrowserHost, ChromiumConfig};
    use pap_browser::consent::ConsentHost;
    use pap_browser::spec::InstanceKey;
    use pap_browser::tools::ToolHost;
    use tower::ServiceExt as _;

    const PORT: u16 = 7878;

    /// A host with `limits` over a fresh state directory, and a paired device's bearer. No
    /// browser is launched: these requests never reach a tool.
    fn host(label: &str, limits: Limits) -> (Router, String, std::path::PathBuf) {
        let state = std::env::temp_dir().join(format!("pap-http-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&state).unwrap();
        let consent = Arc::new(ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap());
        let tools = ToolHost::new(
            pap_browser::chromium::manifest().unwrap(),
            BrowserHost::new(),
            ChromiumConfig::new(state.clone()),
            InstanceKey::try_from("limits").unwrap(),
            consent,
        );
        let devices = Devices::at(&state);
        let (_, bearer) = devices.mint("test", "install", &SystemClock, &SystemRng).unwrap();
        let guard = Exposure::check(SocketAddr::from(([127, 0, 0, 1], PORT)), false, false, &[], &[])
            .unwrap()
            .guard(PORT);
        let app = router(BrowserServer::per_request(tools), devices, guard, limits);
        (app, bearer.expose().to_owned(), state)
    }

    fn post(path: &str, bearer: &str, body: String) -> Request {
        http::Request::post(path)
            .header(header::HOST, format!("127.0.0.1:{PORT}"))
            .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(axum::body::Body::from(body))
            .unwrap()
    }

    /// An `initialize` of a protocol version with sessions (before 2026-07-28).
    fn initialize() -> String {
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "limits", "version": "1"}},
        })
        .to_string()
    }

    #[tokio::test]
    async fn bodies_and_sessions_are_capped() {
        let limits = Limits {
            max_body: 4096,
            max_in_flight: 8,
            max_sessions: 1,
            ..Limits::default()
        };
        let (app, bearer, state) = host("capped", limits);

        let first = app.clone().oneshot(post("/mcp", &bearer, initialize())).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let session = first.headers().get("mcp-session-id").cloned().expect("a session");
        let second = app.clone().oneshot(post("/mcp", &bearer, initialize())).await.unwrap();
        assert_eq!(
            second.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "a session past the cap"
        );
        assert!(second.headers().contains_key(header::RETRY_AFTER));

        let padding = "x".repeat(limits.max_body);
        let big = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {"pad": padding}}});
        let mut request = post("/mcp", &bearer, big.to_string());
        request.headers_mut().insert("mcp-session-id", session);
        let too_big = app.clone().oneshot(request).await.unwrap();
        assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);

        let code = json!({"code": "x".repeat(2048)}).to_string();
        let too_big = app.clone().oneshot(post("/pair", "", code)).await.unwrap();
        assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let _ = std::fs::remove_dir_all(&state);
    }

    #[tokio::test]
    async fn requests_past_the_in_flight_cap_are_told_to_come_back() {
        let (app, _, state) = host(
            "in-flight",
            Limits {
                max_body: 1024,
                max_in_flight: 0,
                max_sessions: 1,
                ..Limits::default()
            },
        );
        let request = http::Request::get("/health")
            .header(header::HOST, format!("localhost:{PORT}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let busy = app.oneshot(request).await.unwrap();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
        let _ = std::fs::remove_dir_all(&state);
    }

    /// A client that opens a connection and sends nothing is cut off once the header timeout
    /// passes, and past the connection cap the next client waits until a slot frees.
    #[tokio::test]
    async fn silent_connections_are_cut_off_and_capped() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let limits = Limits {
            max_body: 2048,
            max_connections: 2,
            header_read_timeout: std::time::Duration::from_millis(300),
            ..Limits::default()
        };
        let (app, _, state) = host("silent", limits);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, limits, std::future::pending()));

        let started = tokio::time::Instant::now();
        let mut silent = vec![
            tokio::net::TcpStream::connect(addr).await.unwrap(),
            tokio::net::TcpStream::connect(addr).await.unwrap(),
        ];
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        third
            .write_all(
                format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{PORT}\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let deadline = std::time::Duration::from_secs(10);
        let mut cut = Vec::new();
        for stream in &mut silent {
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout(deadline, stream.read(&mut byte)).await.unwrap();
            assert!(matches!(read, Ok(0) | Err(_)), "a silent connection was answered");
            cut.push(started.elapsed());
        }
        let mut answer = String::new();
        tokio::time::timeout(deadline, third.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let answered = started.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(cut.iter().all(|at| *at >= limits.header_read_timeout), "{cut:?}");
        // The third connection waited in the queue until a silent one was cut off.
        assert!(answered >= limits.header_read_timeout, "answered after {answered:?}");
        let _ = std::fs::remove_dir_all(&state);
    }
}
