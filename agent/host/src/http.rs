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
//! Bounds ([`Limits`]), so that strangers cannot hold what paired devices need (review N4):
//!
//! - **connections**: at most `max_connections`; when all are taken, a new one makes room by
//!   ending the oldest connection that has not yet carried a paired device's request (a slow or
//!   silent stranger's), so a device's new connection is served while strangers fill the rest;
//!   headers within `header_read_timeout`, which is also the idle limit between requests;
//! - **no keep-alive for strangers**: every answer that did not authenticate a device (`/health`,
//!   `/pair`, a 401 or 403) closes its connection, so idle keep-alives cannot be held by
//!   periodic requests;
//! - **bodies** are read within `body_read_timeout` and capped (413);
//! - **requests in flight**: strangers' within `max_stranger_in_flight` (`/health` and `/pair`
//!   each), devices' within `max_in_flight`, taken only after the bearer is checked (503 with
//!   `Retry-After`);
//! - **MCP sessions**: `max_sessions` in all and `max_sessions_per_device` per device. A device
//!   past either cap loses its own least recently used session to its new one (clients that
//!   restart or health-check never send `DELETE`; a device is never locked out by sessions it
//!   forgot), and never another device's: a new device's session past the host's cap is 503.
//!   A session with no request for [`SESSION_IDLE`] ends.
//!
//! No request timeout: an MCP response may be a long-lived event stream (rmcp pings it every
//! 15 s). Binding anything but loopback is the operator's
//! explicit choice ([`Exposure::check`]), and pairing stays required.

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

use crate::BrowserServer;
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
    /// A guard that admits the one `host` (`name:port`) and the one `origin`.
    pub(crate) fn only(host: &str, origin: &str) -> Self {
        Self {
            hosts: vec![host.to_ascii_lowercase()],
            origins: vec![origin.to_ascii_lowercase()],
        }
    }

    /// Why a request's `Host` or `Origin` is refused, if it is.
    pub(crate) fn refuses(&self, request: &Request) -> Option<&'static str> {
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
    /// Longest a request's body may take to arrive (`/pair`, `/mcp`).
    pub body_read_timeout: std::time::Duration,
    /// Most strangers' requests in flight at once on `/health`, and on `/pair`, apart from each
    /// other's and from devices'.
    pub max_stranger_in_flight: usize,
    /// Most live MCP sessions one device holds.
    pub max_sessions_per_device: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body: 1024 * 1024,
            max_in_flight: 64,
            max_sessions: 32,
            max_connections: 256,
            header_read_timeout: std::time::Duration::from_secs(10),
            body_read_timeout: std::time::Duration::from_secs(5),
            max_stranger_in_flight: 16,
            max_sessions_per_device: 4,
        }
    }
}

/// How long an MCP session lives without a request (rmcp's default is 5 min): a client that
/// went away without `DELETE` frees its place sooner, and one that comes back after it starts a
/// new session, as the MCP transport says to on a 404.
pub const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(120);

/// The MCP sessions of one device, each with when it was last used.
type DeviceSessions = Vec<(String, tokio::time::Instant)>;

#[derive(Clone)]
struct Host {
    server: BrowserServer,
    devices: Devices,
    guard: Arc<Guard>,
    in_flight: Arc<Semaphore>,
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    /// Strangers' requests in flight, apart from devices': `/health`'s and `/pair`'s each their
    /// own, so a flood of slow pairings leaves `/health` answering.
    health_in_flight: Arc<Semaphore>,
    pair_in_flight: Arc<Semaphore>,
    max_sessions_per_device: usize,
    /// The largest request body read.
    max_body: usize,
    /// The MCP sessions each device opened, with when each was last used: to cap them per
    /// device, and to know which to end first.
    sessions_of: Arc<Mutex<std::collections::HashMap<String, DeviceSessions>>>,
    /// The devices that made a request, so a revoked one's tabs and contexts end (C13).
    seen: Arc<Mutex<HashSet<String>>>,
}

/// Set on a connection once it carried a paired device's request: a full host never ends it to
/// make room ([`serve`]).
#[derive(Clone, Debug, Default)]
pub struct Proven(Arc<std::sync::atomic::AtomicBool>);

/// The host's routes: `/health`, `/pair` and `/mcp` (serving `server`, made with
/// [`BrowserServer::per_request`]), every one behind the Host/Origin guard.
pub fn router(server: BrowserServer, devices: Devices, guard: Guard, limits: Limits) -> Router {
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE);
    let sessions = Arc::new(manager);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(guard.hosts.clone())
        .with_allowed_origins(guard.origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(limits.max_body);
    config.sse_keep_alive = Some(std::time::Duration::from_secs(15));
    let factory = server.clone();
    let mcp = StreamableHttpService::new(move || Ok(factory.for_session()), sessions.clone(), config);
    let host = Host {
        server,
        devices,
        guard: Arc::new(guard),
        in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
        sessions,
        max_sessions: limits.max_sessions,
        health_in_flight: Arc::new(Semaphore::new(limits.max_stranger_in_flight)),
        pair_in_flight: Arc::new(Semaphore::new(limits.max_stranger_in_flight)),
        max_sessions_per_device: limits.max_sessions_per_device,
        max_body: limits.max_body,
        sessions_of: Arc::default(),
        seen: Arc::default(),
    };
    let guarded_mcp = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(host.clone(), paired));
    let for_strangers = Router::new()
        .route("/health", axum::routing::get(health))
        .route("/pair", axum::routing::post(pair).layer(DefaultBodyLimit::max(1024)))
        .layer(axum::middleware::from_fn_with_state(host.clone(), stranger));
    Router::new()
        .merge(for_strangers)
        .merge(guarded_mcp)
        .layer(axum::middleware::from_fn_with_state(host.clone(), guarded))
        .with_state(host)
}

/// Serves `app` on `listener` (plain TCP, or [`pap_net::listener::TlsListener`], whose handshakes are
/// bounded on their own) until `shutdown` completes: at most `limits.max_connections` at once,
/// each in its own task, HTTP/1.1, headers within `limits.header_read_timeout`. When every
/// slot is taken, the oldest connection that never carried a paired device's request is ended
/// to make room ([`Proven`]); with none such, the next connection waits for a slot.
pub async fn serve<L>(mut listener: L, app: Router, limits: Limits, shutdown: impl std::future::Future<Output = ()>)
where
    L: axum::serve::Listener,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt as _;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let open: Arc<Mutex<std::collections::VecDeque<Open>>> = Arc::default();
    let mut next_id = 0_u64;
    tokio::pin!(shutdown);
    loop {
        // The listener retries a failed `accept` itself (axum's: resting a second after one
        // that is not a single connection's).
        let (io, _) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                make_room(&open);
                tokio::select! {
                    () = &mut shutdown => return,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        // The semaphore is never closed.
                        Err(_) => return,
                    },
                }
            }
        };
        next_id += 1;
        let id = next_id;
        let proven = Proven::default();
        let app = app.clone();
        let tag = proven.clone();
        let service = tower::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let mut request = request.map(|body| DeadlineBody::new(body, limits.body_read_timeout));
            request.extensions_mut().insert(tag.clone());
            app.clone().oneshot(request)
        });
        let registry = open.clone();
        let task = tokio::spawn(async move {
            let _slot = slot;
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            // HTTP/1.1 only: detecting HTTP/2 prior knowledge would wait for a silent client's
            // first bytes with no timeout at all (MCP clients speak HTTP/1.1 to an http: URL).
            let builder = builder.http1_only();
            let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            lock(&registry).retain(|o| o.id != id);
        });
        lock(&open).push_back(Open {
            id,
            proven,
            task: task.abort_handle(),
        });
    }
}

/// A request body that must arrive whole before its deadline: a total deadline, not one per
/// frame, so a client that trickles a byte at a time is cut off all the same (review N4).
struct DeadlineBody<B> {
    body: std::pin::Pin<Box<B>>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> DeadlineBody<B> {
    fn new(body: B, within: std::time::Duration) -> Self {
        Self {
            body: Box::pin(body),
            deadline: Box::pin(tokio::time::sleep(within)),
        }
    }
}

impl<B> hyper::body::Body for DeadlineBody<B>
where
    B: hyper::body::Body,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let std::task::Poll::Ready(frame) = this.body.as_mut().poll_frame(cx) {
            return std::task::Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => {
                std::task::Poll::Ready(Some(Err("the request body did not arrive in time".into())))
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection being served.
struct Open {
    id: u64,
    proven: Proven,
    task: tokio::task::AbortHandle,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one collection operation.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ends the oldest open connection that never carried a paired device's request; its slot is
/// free once its task has ended (at its next await).
fn make_room(open: &Mutex<std::collections::VecDeque<Open>>) {
    let mut open = lock(open);
    let oldest = open
        .iter()
        .position(|o| !o.proven.0.load(std::sync::atomic::Ordering::SeqCst));
    if let Some(oldest) = oldest.and_then(|at| open.remove(at)) {
        oldest.task.abort();
    }
}

/// The Host/Origin guard, in front of every route.
async fn guarded(State(host): State<Host>, request: Request, next: Next) -> Response {
    if let Some(why) = host.guard.refuses(&request) {
        return closing(
            (
                StatusCode::FORBIDDEN,
                axum::Json(json!({ "error": "forbidden", "message": why })),
            )
                .into_response(),
        );
    }
    next.run(request).await
}

/// The strangers' routes (`/health`, `/pair`): each its own in-flight budget, and no keep-alive.
async fn stranger(State(host): State<Host>, request: Request, next: Next) -> Response {
    let budget = if request.uri().path() == "/pair" {
        &host.pair_in_flight
    } else {
        &host.health_in_flight
    };
    let Ok(_slot) = budget.clone().try_acquire_owned() else {
        return closing(busy("too many requests in flight"));
    };
    closing(next.run(request).await)
}

/// `response`, closing its connection after it (HTTP/1.1 `Connection: close`).
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// `/mcp` for paired devices only: the bearer is checked against the devices file now (a
/// revoked device is refused on its next request), then the devices' in-flight budget and
/// session caps apply, and the device rides the request to the tools ([`BrowserServer`] reads
/// it). The connection is marked [`Proven`].
async fn paired(State(host): State<Host>, mut request: Request, next: Next) -> Response {
    let paired = match host.devices.load() {
        Ok(paired) => paired,
        Err(error) => {
            // Fail closed: no device is known when the file cannot be read.
            tracing::error!(%error, "the devices file");
            return closing(busy("the host cannot check devices now"));
        }
    };
    end_unpaired(&host, &paired);
    let device = bearer(request.headers()).and_then(|b| paired.authenticate(&b));
    let Some(device) = device else {
        return closing(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, REALM)],
                axum::Json(json!({ "error": "unauthorized" })),
            )
                .into_response(),
        );
    };
    if let Some(proven) = request.extensions().get::<Proven>() {
        proven.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    let Ok(_slot) = host.in_flight.clone().try_acquire_owned() else {
        return busy("too many requests in flight");
    };
    if request.method() == http::Method::POST {
        request = match checked_jsonrpc(request, host.max_body).await {
            Ok(request) => request,
            Err(refused) => return refused,
        };
    }
    let opens_session = request.method() == http::Method::POST && !request.headers().contains_key("mcp-session-id");
    if opens_session {
        if let Err(refused) = make_room_for_session(&host, &device.id).await {
            return refused;
        }
    } else if let Some(session) = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        let mut of = lock(&host.sessions_of);
        if let Some(used) = of
            .get_mut(&device.id)
            .and_then(|mine| mine.iter_mut().find(|(id, _)| id == session))
        {
            used.1 = tokio::time::Instant::now();
        }
    }
    host.seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(device.id.clone());
    if let Err(error) = host.devices.seen(&device, pap_shared::Clock::now(&SystemClock)) {
        // Only `devices list`'s lastSeen is stale then; the request goes on.
        tracing::warn!(%error, "recording when the device was last seen");
    }
    let id = device.id.clone();
    request.extensions_mut().insert(AgentCaller::paired(device.id));
    let response = next.run(request).await;
    if opens_session && let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        lock(&host.sessions_of)
            .entry(id)
            .or_default()
            .push((session.to_owned(), tokio::time::Instant::now()));
    }
    response
}

/// A POST's body read whole (within `max_body`) and put through [`jsonrpc::precheck`]: what
/// rmcp would misanswer gets the JSON-RPC error the MCP spec asks for, with HTTP 400 (the
/// streamable HTTP transport's answer to a message it cannot accept); the rest goes on.
async fn checked_jsonrpc(request: Request, max_body: usize) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, max_body).await {
        Ok(bytes) => bytes,
        Err(error) => {
            let too_large =
                std::error::Error::source(&error).is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            let (status, why) = if too_large {
                (StatusCode::PAYLOAD_TOO_LARGE, "the body is larger than this host reads")
            } else {
                (StatusCode::REQUEST_TIMEOUT, "the body did not arrive whole in time")
            };
            return Err(closing((status, axum::Json(json!({ "error": why }))).into_response()));
        }
    };
    if let Some(error) = crate::jsonrpc::precheck(&bytes) {
        return Err((StatusCode::BAD_REQUEST, axum::Json(error)).into_response());
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// Room for one more MCP session of `device`: past its own cap, or the host's, its least
/// recently used session ends (never another device's); past the host's cap with none of its
/// own to end, 503.
async fn make_room_for_session(host: &Host, device: &str) -> Result<(), Response> {
    use rmcp::transport::streamable_http_server::session::SessionManager as _;
    let live: Vec<String> = host
        .sessions
        .sessions
        .read()
        .await
        .keys()
        .map(|id| id.to_string())
        .collect();
    let oldest = {
        let mut of = lock(&host.sessions_of);
        let mine = of.entry(device.to_owned()).or_default();
        // Sessions that ended (a DELETE, the idle limit) hold no place.
        mine.retain(|(id, _)| live.contains(id));
        let full = mine.len() >= host.max_sessions_per_device || live.len() >= host.max_sessions;
        if !full {
            return Ok(());
        }
        let Some(at) = mine
            .iter()
            .enumerate()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(at, _)| at)
        else {
            return Err(busy("too many MCP sessions are open"));
        };
        mine.remove(at).0
    };
    if let Err(error) = host.sessions.close_session(&oldest.as_str().into()).await {
        // Already gone (it ended meanwhile): its place is free all the same.
        tracing::debug!(%error, "ending a device's least recently used MCP session");
    }
    tracing::info!(
        device,
        "a device's least recently used MCP session ended for its new one"
    );
    Ok(())
}

/// Ends the tabs and contexts of devices seen here that are no longer paired (C13).
fn end_unpaired(host: &Host, paired: &crate::pairing::Paired) {
    let gone: Vec<String> = {
        let mut seen = host.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone: Vec<String> = seen.iter().filter(|id| !paired.has(id)).cloned().collect();
        seen.retain(|id| paired.has(id));
        gone
    };
    lock(&host.sessions_of).retain(|id, _| paired.has(id));
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
        host_on(label, limits, PORT)
    }

    /// [`host`] whose guard admits `port`.
    fn host_on(label: &str, limits: Limits, port: u16) -> (Router, String, std::path::PathBuf) {
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
        let guard = Exposure::check(SocketAddr::from(([127, 0, 0, 1], port)), false, false, &[], &[])
            .unwrap()
            .guard(port);
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
        // Another device finds the host full: the first device's session is not its to end.
        let (_, other) = Devices::at(&state)
            .mint("other", "install", &SystemClock, &SystemRng)
            .unwrap();
        let refused = app
            .clone()
            .oneshot(post("/mcp", other.expose(), initialize()))
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "a session past the cap"
        );
        assert!(refused.headers().contains_key(header::RETRY_AFTER));
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

    /// Over HTTP, the JSON-RPC codes the MCP spec names: a body that is not JSON and a nameless
    /// `tools/call` answer 400 with -32700 / -32602 before rmcp; an unknown tool, a cursor never
    /// given out and an unknown method answer -32602 / -32602 / -32601 in the session's stream.
    #[tokio::test]
    async fn bad_messages_get_their_json_rpc_codes_over_http() {
        let (app, bearer, state) = host("jsonrpc", Limits::default());
        let garbage = app
            .clone()
            .oneshot(post("/mcp", &bearer, "{nope".to_owned()))
            .await
            .unwrap();
        assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);
        let body = axum::body::to_bytes(garbage.into_body(), 4096).await.unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer.pointer("/error/code"), Some(&json!(-32700)), "{answer}");
        assert_eq!(answer.get("id"), Some(&json!(null)));

        let opened = app.clone().oneshot(post("/mcp", &bearer, initialize())).await.unwrap();
        let session = opened.headers().get("mcp-session-id").cloned().expect("a session");
        let mut initialized = post(
            "/mcp",
            &bearer,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        );
        initialized.headers_mut().insert("mcp-session-id", session.clone());
        let accepted = app.clone().oneshot(initialized).await.unwrap();
        assert_eq!(accepted.status(), StatusCode::ACCEPTED);
        for (message, code) in [
            (
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}),
                -32602,
            ),
            (
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "no_such_tool"}}),
                -32602,
            ),
            (
                json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": "x"}}),
                -32602,
            ),
            (json!({"jsonrpc": "2.0", "id": 5, "method": "no/such/method"}), -32601),
        ] {
            let mut request = post("/mcp", &bearer, message.to_string());
            request.headers_mut().insert("mcp-session-id", session.clone());
            let answered = app.clone().oneshot(request).await.unwrap();
            let body = axum::body::to_bytes(answered.into_body(), 64 * 1024).await.unwrap();
            let text = String::from_utf8_lossy(&body);
            // A JSON body, or the one message of an event stream (after its empty priming event).
            let payload = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .find(|data| !data.trim().is_empty())
                .unwrap_or(&text);
            let answer: serde_json::Value = serde_json::from_str(payload.trim()).unwrap();
            assert_eq!(answer.get("id"), message.get("id"), "{message}: {answer}");
            assert_eq!(answer.pointer("/error/code"), Some(&json!(code)), "{message}: {answer}");
        }
        let _ = std::fs::remove_dir_all(&state);
    }

    /// A `tools/list` in the session `session`.
    fn in_session(bearer: &str, session: &HeaderValue) -> Request {
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let mut request = post("/mcp", bearer, list.to_string());
        request.headers_mut().insert("mcp-session-id", session.clone());
        request
    }

    /// A client that reconnects without `DELETE` (the TypeScript SDK's `close()`, Claude Code,
    /// the Inspector) gets a working session every time: past its cap, its least recently used
    /// session ends, never another device's.
    #[tokio::test]
    async fn a_device_that_never_closes_its_sessions_gets_a_working_one_every_time() {
        let limits = Limits::default();
        let (app, bearer, state) = host("reconnects", limits);
        let (_, other) = Devices::at(&state)
            .mint("other", "install", &SystemClock, &SystemRng)
            .unwrap();
        let opened = app
            .clone()
            .oneshot(post("/mcp", other.expose(), initialize()))
            .await
            .unwrap();
        let others = opened.headers().get("mcp-session-id").cloned().expect("a session");
        let mut sessions = Vec::new();
        for round in 0..50 {
            let opened = app.clone().oneshot(post("/mcp", &bearer, initialize())).await.unwrap();
            assert_eq!(opened.status(), StatusCode::OK, "reconnect {round}");
            let session = opened.headers().get("mcp-session-id").cloned().expect("a session");
            let used = app.clone().oneshot(in_session(&bearer, &session)).await.unwrap();
            assert_eq!(used.status(), StatusCode::OK, "the session of reconnect {round}");
            sessions.push(session);
        }
        // The device holds its cap, its newest; the older ones ended; the other device's lives.
        for (round, session) in sessions.iter().enumerate() {
            let status = app
                .clone()
                .oneshot(in_session(&bearer, session))
                .await
                .unwrap()
                .status();
            let newest = round >= 50 - limits.max_sessions_per_device;
            assert_eq!(status == StatusCode::OK, newest, "session {round}: {status}");
        }
        let theirs = app.clone().oneshot(in_session(other.expose(), &others)).await.unwrap();
        assert_eq!(theirs.status(), StatusCode::OK, "another device's session was touched");
        let _ = std::fs::remove_dir_all(&state);
    }

    #[tokio::test]
    async fn strangers_and_devices_have_their_own_in_flight_budgets_and_strangers_no_keep_alive() {
        let (app, bearer, state) = host(
            "in-flight",
            Limits {
                max_body: 1024,
                max_in_flight: 0,
                max_stranger_in_flight: 0,
                max_sessions: 1,
                ..Limits::default()
            },
        );
        let health = || {
            http::Request::get("/health")
                .header(header::HOST, format!("localhost:{PORT}"))
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let busy = app.clone().oneshot(health()).await.unwrap();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
        assert_eq!(busy.headers()[header::CONNECTION], "close");
        // A device's budget is its own: spent here, so its request is told to come back...
        let device = app.clone().oneshot(post("/mcp", &bearer, initialize())).await.unwrap();
        assert_eq!(device.status(), StatusCode::SERVICE_UNAVAILABLE);
        // ... and a stranger's 401 is not taken from it, and closes its connection.
        let stranger = app.oneshot(post("/mcp", "papdev_guessed", initialize())).await.unwrap();
        assert_eq!(stranger.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(stranger.headers()[header::CONNECTION], "close");

        let (app, _, open_state) = host("in-flight-open", Limits::default());
        let open = app.oneshot(health()).await.unwrap();
        assert_eq!(open.status(), StatusCode::OK);
        assert_eq!(open.headers()[header::CONNECTION], "close", "a stranger's keep-alive");
        let _ = std::fs::remove_dir_all(&state);
        let _ = std::fs::remove_dir_all(&open_state);
    }

    /// A client that opens a connection and sends nothing is cut off once the header timeout
    /// passes; when every slot is taken, a new connection ends the oldest one that never
    /// carried a device's request, never a device's.
    #[tokio::test]
    async fn silent_strangers_are_cut_off_and_make_room_but_a_devices_connection_stays() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let limits = Limits {
            max_body: 2048,
            max_connections: 2,
            header_read_timeout: std::time::Duration::from_millis(300),
            ..Limits::default()
        };
        let (app, bearer, state) = host("silent", limits);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, limits, std::future::pending()));
        let deadline = std::time::Duration::from_secs(10);

        // A silent stranger is cut off after the header timeout.
        let started = tokio::time::Instant::now();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(deadline, silent.read(&mut byte)).await.unwrap();
        assert!(matches!(read, Ok(0) | Err(_)), "a silent connection was answered");
        assert!(started.elapsed() >= limits.header_read_timeout);

        // A device's keep-alive connection, then a silent stranger: both slots taken.
        let mut device = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{PORT}\r\nAuthorization: Bearer {bearer}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: 2\r\n\r\n{{}}"
        );
        device.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        tokio::time::timeout(deadline, device.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        let mut stranger = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A third connection is served at once: the stranger made room, not the device.
        let started = tokio::time::Instant::now();
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        third
            .write_all(format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{PORT}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(deadline, third.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            started.elapsed() < limits.header_read_timeout,
            "the third waited {:?}",
            started.elapsed()
        );
        let read = tokio::time::timeout(deadline, stranger.read(&mut byte)).await.unwrap();
        assert!(matches!(read, Ok(0) | Err(_)), "the silent stranger was kept");
        // The device's connection is still open: its next request is answered.
        let mut rest = vec![0u8; 4096];
        let _ = tokio::time::timeout(std::time::Duration::from_millis(100), device.read(&mut rest)).await;
        device.write_all(request.as_bytes()).await.unwrap();
        tokio::time::timeout(deadline, device.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        assert!(head.starts_with(b"HTTP/1.1"), "{}", String::from_utf8_lossy(&head));
        let _ = std::fs::remove_dir_all(&state);
    }

    /// A body that trickles in is cut off at the body deadline, whatever it sends meanwhile.
    #[tokio::test]
    async fn a_trickling_body_is_cut_off_at_its_deadline() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let limits = Limits {
            body_read_timeout: std::time::Duration::from_millis(400),
            ..Limits::default()
        };
        let (app, _, state) = host("trickle", limits);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, limits, std::future::pending()));
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = tokio::time::Instant::now();
        slow.write_all(
            format!("POST /pair HTTP/1.1\r\nHost: 127.0.0.1:{PORT}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{").as_bytes(),
        )
        .await
        .unwrap();
        let trickle = async {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                if slow.write_all(b" ").await.is_err() {
                    return;
                }
            }
        };
        let mut answer = Vec::new();
        tokio::select! {
            () = trickle => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(10)) => panic!("the trickling body was not cut off"),
        }
        let _ = slow.read_to_end(&mut answer).await;
        assert!(started.elapsed() >= limits.body_read_timeout);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let _ = std::fs::remove_dir_all(&state);
    }

    /// Review N4's flood: 64 slow `/pair` bodies and 256 silent connections (more than the 256
    /// connection slots in all); a paired device's tool calls still go through, every one, and
    /// `/health` answers. (The load run `benches/mcp_flood.rs` measures the calls' latency.)
    #[cfg(feature = "test-support")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_a_flood_of_slow_pairings_and_idle_connections_a_device_is_served_and_health_answers() {
        use rmcp::ServiceExt as _;
        use rmcp::model::CallToolRequestParams;
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        // The SDK's HTTP client (reqwest over rustls) needs the process's crypto provider.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits::default();
        let (app, bearer, state) = host_on("flood", limits, addr.port());
        tokio::spawn(serve(listener, app, limits, std::future::pending()));
        let flood = crate::testkit::Flood::open(addr, &format!("127.0.0.1:{}", addr.port()), 64, 256)
            .await
            .unwrap();
        assert_eq!(flood.len(), 320);

        let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(bearer);
        let device = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
        for _ in 0..15 {
            let listed = device
                .call_tool(CallToolRequestParams::new("browser_profile_list"))
                .await
                .unwrap();
            assert_ne!(listed.is_error, Some(true), "{listed:?}");
        }
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let health = http.get(format!("http://{addr}/health")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        drop(flood);
        let _ = std::fs::remove_dir_all(&state);
    }
}
