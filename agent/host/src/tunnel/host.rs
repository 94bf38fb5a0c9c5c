//! The host's end of `pair/v2` (AIP-59 §2–§6): it parks on its rendezvous broker, answers
//! hellos, and serves each paired device's channel from the host's own routes.
//!
//! ```text
//!  every RESCAN   read the devices file: open offers, pairings, tombstones → the routes to
//!                 park on (a pairing's today and yesterday, §2.4); one parker per route
//!  a parker       dial ?side=daemon&t=<route> → wait for a hello → check its sealed auth
//!                 (an offer's: spends it only when right, §1.5; an epoch's; a tombstone's)
//!                 → sign the reply → serve the channel, then park again; failures back off
//!                 (jittered, capped)
//!  a channel      hello frame first; http_request → the host's own /mcp or /health, in
//!                 process, as that device (its bearer derived from the pair root and set
//!                 in memory); streamed responses chunk by chunk; http_cancel aborts;
//!                 revoked → one pairing_revoked, then close (§6.1)
//!  a tombstone    answers only a hello with the right epoch auth, with pairing_revoked as
//!                 its first and only frame (§6.2)
//! ```
//!
//! The broker holds one live socket per route side, so a pairing has at most two channels at
//! once (today's route and yesterday's), each with at most [`MAX_IN_FLIGHT`] requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use http::{HeaderName, HeaderValue, Method, Request, header};
use http_body_util::BodyExt as _;
use pap_pair::handshake::{Hello, respond, tokens_match};
use pap_pair::keys::DaemonKeys;
use pap_pair::link::{Dialer, Link, LinkError, LinkSender, Side, await_hello, send_handshake};
use pap_pair::tunnel::{
    Capabilities, Frame, FrameError, MAX_FRAME_BODY, PAIRING_REVOKED, TUNNEL_VERSION, decode_body, encode_body,
};
use pap_shared::{Clock, Rng};
use tokio::sync::mpsc;
use tower::ServiceExt as _;
use zeroize::Zeroizing;

use super::{Backoff, epoch_at, shown_name};
use crate::pairing::{Devices, tunnel_bearer};

/// How often the host rereads the devices file: a new offer is parked on, and a revoked
/// pairing told, within this.
pub const RESCAN: Duration = Duration::from_secs(1);
/// Requests one channel may have in flight; the next is answered 503 `busy`.
pub const MAX_IN_FLIGHT: usize = 32;
/// The longest a request may wait for its response head (a request may ask for less).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames queued for one channel's socket before its senders wait.
const OUTBOX: usize = 64;

/// What a route is for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Offer,
    Pairing { device: String, epoch: u64 },
    Tombstone { device: String, epoch: u64 },
}

struct Parker {
    /// The broker and the target it parks for: a route that comes to mean something else (a
    /// pairing's route become a tombstone's) gets a new parker.
    parks_for: (String, Target),
    task: tokio::task::JoinHandle<()>,
    wanted: Arc<AtomicBool>,
    serving: Arc<AtomicBool>,
}

/// The host's end of every pairing over a rendezvous.
pub struct HostTunnel {
    devices: Devices,
    keys: DaemonKeys,
    dialer: Dialer,
    app: axum::Router,
    authority: String,
    label: String,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
}

impl std::fmt::Debug for HostTunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTunnel")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl HostTunnel {
    /// The tunnel of a host: its `devices`, its pairing identity, how it dials brokers, its
    /// routes (`app`, the same router its listener serves) and a `Host` value `authority` they
    /// answer (`127.0.0.1:PORT`), and the `label` devices are shown.
    #[allow(clippy::too_many_arguments, reason = "each is one of the host's parts, named")]
    pub fn new(
        devices: Devices,
        keys: DaemonKeys,
        dialer: Dialer,
        app: axum::Router,
        authority: String,
        label: String,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> Self {
        Self {
            devices,
            keys,
            dialer,
            app,
            authority,
            label,
            clock,
            rng,
        }
    }

    /// Parks on every route the devices file asks for, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        let mut parkers: HashMap<String, Parker> = HashMap::new();
        // Parkers no longer wanted that are still serving a channel: it ends on its own (served
        // to its end, or told it was revoked), and they then stop.
        let mut draining: Vec<Parker> = Vec::new();
        tokio::pin!(shutdown);
        loop {
            let wanted = self.wanted_routes();
            draining.retain(|parker| !parker.task.is_finished());
            for (route, parker) in std::mem::take(&mut parkers) {
                if parker.task.is_finished() {
                    continue;
                }
                if wanted.get(&route) == Some(&parker.parks_for) {
                    parkers.insert(route, parker);
                    continue;
                }
                parker.wanted.store(false, Ordering::SeqCst);
                if parker.serving.load(Ordering::SeqCst) {
                    draining.push(parker);
                } else {
                    parker.task.abort();
                }
            }
            for (route, parks_for) in wanted {
                if parkers.contains_key(&route) {
                    continue;
                }
                let (flag, serving) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
                let task = tokio::spawn(self.clone().park(
                    route.clone(),
                    parks_for.0.clone(),
                    parks_for.1.clone(),
                    flag.clone(),
                    serving.clone(),
                ));
                parkers.insert(
                    route,
                    Parker {
                        parks_for,
                        task,
                        wanted: flag,
                        serving,
                    },
                );
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(RESCAN) => {}
            }
        }
        for parker in parkers.into_values().chain(draining) {
            parker.task.abort();
        }
    }

    /// Route → (broker, what it is for), from the devices file now. A file that cannot be read
    /// parks on nothing new (and the host's routes refuse its devices: it fails closed).
    fn wanted_routes(&self) -> HashMap<String, (String, Target)> {
        let now = self.clock.now();
        let targets = match self.devices.tunnel_targets(now) {
            Ok(targets) => targets,
            Err(error) => {
                tracing::warn!(%error, "the devices file could not be read: parking on nothing new");
                return HashMap::new();
            }
        };
        let today = epoch_at(now);
        let mut wanted = HashMap::new();
        for (route, rendezvous) in targets.offers {
            wanted.insert(route, (rendezvous, Target::Offer));
        }
        for (device, rendezvous, root) in &targets.pairings {
            for epoch in [today, today.saturating_sub(1)] {
                if let Ok(tokens) = pap_pair::derive::epoch_tokens(root, epoch) {
                    let target = Target::Pairing {
                        device: device.clone(),
                        epoch,
                    };
                    wanted.insert(tokens.route, (rendezvous.clone(), target));
                }
            }
        }
        for (device, rendezvous, epoch, route) in targets.tombstones {
            wanted.insert(route, (rendezvous, Target::Tombstone { device, epoch }));
        }
        wanted
    }

    async fn park(
        self: Arc<Self>,
        route: String,
        rendezvous: String,
        target: Target,
        wanted: Arc<AtomicBool>,
        serving: Arc<AtomicBool>,
    ) {
        let mut backoff = Backoff::new();
        while wanted.load(Ordering::SeqCst) {
            let outcome = match self.dialer.dial(&rendezvous, Side::Daemon, &route).await {
                Ok(socket) => self.answer(socket, &route, &target, &serving).await,
                Err(error) => Err(error),
            };
            match outcome {
                Ok(()) => backoff.reset(),
                // The broker ended a lone wait (4408): park again at once.
                Err(LinkError::Closed(Some(pap_pair::broker::close::PARK_TIMEOUT))) => backoff.reset(),
                // A hello refused (a wrong auth, a stale offer, not a hello): the broker works,
                // so park again after the first step only. Growing the wait here would let
                // whoever knows a route (the broker) keep the right device out for the cap.
                Err(error @ (LinkError::Pair(_) | LinkError::Protocol)) => {
                    tracing::debug!(%error, "a hello was refused");
                    backoff.reset();
                    tokio::time::sleep(backoff.next(self.rng.as_ref())).await;
                    backoff.reset();
                }
                Err(error) => {
                    tracing::debug!(%error, "a parked socket ended");
                    tokio::time::sleep(backoff.next(self.rng.as_ref())).await;
                }
            }
        }
    }

    /// Waits for a hello on a parked socket and answers it as `target` asks.
    async fn answer(
        &self,
        mut socket: pap_pair::link::Socket,
        route: &str,
        target: &Target,
        serving: &AtomicBool,
    ) -> Result<(), LinkError> {
        // Answered in the framing it was spoken to: the reference's frame, or the bare object.
        let (hello, framing): (Hello, _) = await_hello(&mut socket).await?;
        let now = self.clock.now();
        match target {
            Target::Offer => {
                let mut presented = None;
                let (reply, session) = respond(
                    &hello,
                    &self.keys,
                    |auth| {
                        let right = self.devices.offer_auth_ok(route, auth, now).unwrap_or(false);
                        if right {
                            presented = Some(Zeroizing::new(auth.to_owned()));
                        }
                        right
                    },
                    self.rng.as_ref(),
                )?;
                let auth = presented.ok_or(LinkError::Pair(pap_pair::PairError::AuthRejected))?;
                let root = pap_pair::derive::pair_root(&session.send_key, &session.recv_key, &session.transcript)?;
                // Spent before the reply leaves: of two right hellos racing, one pairs.
                let device = self
                    .devices
                    .spend_offer(
                        route,
                        &auth,
                        &shown_name(&session.client_name),
                        &root,
                        now,
                        self.rng.as_ref(),
                    )
                    .ok()
                    .flatten()
                    .ok_or(LinkError::Pair(pap_pair::PairError::AuthRejected))?;
                tracing::info!(device = %device.id, name = %device.name, "a device paired over the rendezvous");
                send_handshake(&mut socket, &reply, framing).await?;
                serving.store(true, Ordering::SeqCst);
                self.serve(Link::new(socket, &session)?, &device.id, &root).await;
                serving.store(false, Ordering::SeqCst);
                Ok(())
            }
            Target::Pairing { device, epoch } => {
                let root = self
                    .devices
                    .pair_root_of(device)
                    .ok()
                    .flatten()
                    .ok_or(LinkError::Pair(pap_pair::PairError::AuthRejected))?;
                let expected = pap_pair::derive::epoch_tokens(&root, *epoch)?;
                let (reply, session) = respond(
                    &hello,
                    &self.keys,
                    |auth| tokens_match(auth, &expected.auth),
                    self.rng.as_ref(),
                )?;
                send_handshake(&mut socket, &reply, framing).await?;
                serving.store(true, Ordering::SeqCst);
                self.serve(Link::new(socket, &session)?, device, &root).await;
                serving.store(false, Ordering::SeqCst);
                Ok(())
            }
            Target::Tombstone { device, epoch } => {
                let (reply, session) = respond(
                    &hello,
                    &self.keys,
                    |auth| {
                        self.devices
                            .tombstone_auth_ok(device, *epoch, auth, now)
                            .unwrap_or(false)
                    },
                    self.rng.as_ref(),
                )?;
                send_handshake(&mut socket, &reply, framing).await?;
                let (mut sender, _receiver) = Link::new(socket, &session)?.split();
                sender.send(&revoked()).await?;
                sender.close().await;
                Ok(())
            }
        }
    }

    /// Serves one channel of `device` until it closes, fails, or the device is revoked.
    async fn serve(&self, link: Link, device: &str, root: &[u8; 32]) {
        let bearer = Arc::new(tunnel_bearer(root));
        let (sender, mut receiver) = link.split();
        let (outbox, queued) = mpsc::channel::<Frame>(OUTBOX);
        let writer = tokio::spawn(write_frames(sender, queued));
        let hello = Frame::Hello {
            version: TUNNEL_VERSION.to_owned(),
            capabilities: Capabilities {
                http_cancel: true,
                ..Capabilities::default()
            },
            label: Some(self.label.clone()),
        };
        let _ = outbox.send(hello).await;
        let in_flight: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
        let mut rescan = tokio::time::interval(RESCAN);
        loop {
            tokio::select! {
                frame = receiver.recv() => match frame {
                    Ok(Frame::HttpRequest { req_id, method, path, headers, body, body_chunked, timeout_ms }) => {
                        let request = Forward { method, path, headers, body, body_chunked, timeout_ms };
                        self.start(req_id, request, &bearer, &outbox, &in_flight);
                    }
                    Ok(Frame::HttpCancel { req_id }) => {
                        if let Some(task) = lock(&in_flight).remove(&req_id) {
                            task.abort();
                        }
                    }
                    Ok(Frame::Ping { nonce }) => {
                        let _ = outbox.send(Frame::Pong { nonce }).await;
                    }
                    // A frame this side does not know inside a sound channel: ignored.
                    Ok(_) | Err(LinkError::Frame(_)) => {}
                    Err(_) => break,
                },
                _ = rescan.tick() => {
                    if let Ok(paired) = self.devices.load() && !paired.has(device) {
                        let _ = outbox.send(revoked()).await;
                        tracing::info!(device, "told a revoked device over its live channel");
                        break;
                    }
                }
            }
        }
        for (_, task) in lock(&in_flight).drain() {
            task.abort();
        }
        drop(outbox);
        let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    }

    /// Starts forwarding one request, or answers it at once (busy, a duplicate id, a path the
    /// tunnel does not reach).
    fn start(
        &self,
        req_id: String,
        request: Forward,
        bearer: &Arc<crate::pairing::Bearer>,
        outbox: &mpsc::Sender<Frame>,
        in_flight: &Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>,
    ) {
        let refuse = |status: u16, code: &str, message: &str| Frame::HttpResponse {
            req_id: req_id.clone(),
            status,
            headers: BTreeMap::new(),
            body: None,
            error: Some(FrameError {
                code: code.to_owned(),
                message: message.to_owned(),
            }),
        };
        let mut running = lock(in_flight);
        let answer = if running.len() >= MAX_IN_FLIGHT {
            Some(refuse(503, "busy", "too many requests in flight on this channel"))
        } else if running.contains_key(&req_id) || req_id.is_empty() || req_id.len() > 64 {
            Some(refuse(400, "bad_request", "a reqId must be fresh and at most 64 bytes"))
        } else {
            None
        };
        if let Some(answer) = answer {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.send(answer).await });
            return;
        }
        let (app, authority, bearer, outbox) =
            (self.app.clone(), self.authority.clone(), bearer.clone(), outbox.clone());
        let registry = in_flight.clone();
        let id = req_id.clone();
        let task = tokio::spawn(async move {
            let frames = forward(app, &authority, &bearer, &id, request, &outbox).await;
            if let Some(frame) = frames {
                let _ = outbox.send(frame).await;
            }
            lock(&registry).remove(&id);
        });
        running.insert(req_id, task.abort_handle());
    }
}

fn revoked() -> Frame {
    Frame::Error {
        code: PAIRING_REVOKED.to_owned(),
        message: "this device was unpaired; pair again from a new offer".to_owned(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn write_frames(mut sender: LinkSender, mut queued: mpsc::Receiver<Frame>) {
    while let Some(frame) = queued.recv().await {
        if sender.send(&frame).await.is_err() {
            break;
        }
    }
    sender.close().await;
}

/// One `http_request`'s parts.
struct Forward {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Option<String>,
    body_chunked: bool,
    timeout_ms: Option<u64>,
}

/// Headers that belong to one hop, or that the tunnel sets itself: never forwarded.
fn dropped_request_header(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "upgrade"
            | "te"
            | "trailer"
            | "host"
            | "authorization"
            | "cookie"
            | "origin"
            | "content-length"
    ) || name.starts_with("proxy-")
}

fn dropped_response_header(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "te" | "trailer" | "set-cookie"
    ) || name.starts_with("proxy-")
}

/// Whether the tunnel reaches `path`: the host's `/mcp` and `/health`, nothing else.
fn reachable(path: &str) -> bool {
    let Ok(parsed) = path.parse::<http::uri::PathAndQuery>() else {
        return false;
    };
    path.starts_with('/') && matches!(parsed.path(), "/mcp" | "/health")
}

/// Forwards one request to the host's own routes as the device, sending a streamed response's
/// frames as they come; the frame to send last (a whole response, or an end marker).
async fn forward(
    app: axum::Router,
    authority: &str,
    bearer: &crate::pairing::Bearer,
    req_id: &str,
    request: Forward,
    outbox: &mpsc::Sender<Frame>,
) -> Option<Frame> {
    let failed = |status: u16, code: &str, message: &str| {
        Some(Frame::HttpResponse {
            req_id: req_id.to_owned(),
            status,
            headers: BTreeMap::new(),
            body: None,
            error: Some(FrameError {
                code: code.to_owned(),
                message: message.to_owned(),
            }),
        })
    };
    if request.body_chunked {
        return failed(400, "bad_request", "this host does not take chunked request bodies");
    }
    if !reachable(&request.path) {
        return failed(404, "not_forwarded", "the tunnel reaches /mcp and /health only");
    }
    let Ok(method) = Method::from_bytes(request.method.as_bytes()) else {
        return failed(400, "bad_request", "not an HTTP method");
    };
    let body = match request.body.as_deref().map(decode_body).transpose() {
        Ok(body) => body.unwrap_or_default(),
        Err(_) => return failed(400, "bad_request", "a body that is not base64"),
    };
    let mut builder = Request::builder().method(method).uri(request.path.as_str());
    for (name, value) in &request.headers {
        let name = name.to_ascii_lowercase();
        if dropped_request_header(&name) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            builder = builder.header(name, value);
        }
    }
    let Ok(authorization) = HeaderValue::from_str(&format!("Bearer {}", bearer.expose())) else {
        return failed(500, "internal", "the device credential");
    };
    let Ok(outgoing) = builder
        .header(header::HOST, authority)
        .header(header::AUTHORIZATION, authorization)
        .body(Body::from(body))
    else {
        return failed(400, "bad_request", "the request could not be built");
    };
    let deadline = request
        .timeout_ms
        .map_or(REQUEST_TIMEOUT, |ms| Duration::from_millis(ms).min(REQUEST_TIMEOUT));
    let response = match tokio::time::timeout(deadline, app.oneshot(outgoing)).await {
        Ok(Ok(response)) => response,
        Ok(Err(never)) => match never {},
        Err(_) => return failed(504, "timeout", "the host did not answer in time"),
    };
    let status = response.status().as_u16();
    let mut headers = BTreeMap::new();
    for (name, value) in response.headers() {
        if dropped_response_header(name.as_str()) {
            continue;
        }
        if let Ok(value) = value.to_str() {
            headers
                .entry(name.as_str().to_owned())
                .and_modify(|v: &mut String| {
                    v.push_str(", ");
                    v.push_str(value);
                })
                .or_insert_with(|| value.to_owned());
        }
    }
    let length = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut body = response.into_body();
    if let Some(length) = length.filter(|l| *l <= MAX_FRAME_BODY) {
        let bytes = match http_body_util::Limited::new(body, length.max(1)).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return failed(502, "upstream_failed", "the host's response failed"),
        };
        return Some(Frame::HttpResponse {
            req_id: req_id.to_owned(),
            status,
            headers,
            body: (!bytes.is_empty()).then(|| encode_body(&bytes)),
            error: None,
        });
    }
    // Streamed (an event stream, or no length): the head, then each piece as it comes.
    headers.remove("content-length");
    let head = Frame::HttpResponseHead {
        req_id: req_id.to_owned(),
        status,
        headers,
    };
    if outbox.send(head).await.is_err() {
        return None;
    }
    loop {
        match body.frame().await {
            None => break,
            Some(Err(_)) => {
                return Some(Frame::HttpResponseChunk {
                    req_id: req_id.to_owned(),
                    data: None,
                    end: true,
                    error: Some(FrameError {
                        code: "upstream_failed".to_owned(),
                        message: "the host's response failed mid-stream".to_owned(),
                    }),
                });
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                for piece in data.chunks(MAX_FRAME_BODY) {
                    let chunk = Frame::HttpResponseChunk {
                        req_id: req_id.to_owned(),
                        data: Some(encode_body(piece)),
                        end: false,
                        error: None,
                    };
                    if outbox.send(chunk).await.is_err() {
                        return None;
                    }
                }
            }
        }
    }
    Some(Frame::HttpResponseChunk {
        req_id: req_id.to_owned(),
        data: None,
        end: true,
        error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunnel_reaches_mcp_and_health_only() {
        for path in ["/mcp", "/mcp?session=1", "/health"] {
            assert!(reachable(path), "{path}");
        }
        for path in [
            "/pair",
            "/",
            "mcp",
            "//evil/mcp",
            "/mcp/../pair",
            "http://x/mcp",
            "/health/x",
            "",
        ] {
            assert!(!reachable(path), "{path}");
        }
    }

    #[test]
    fn credentials_and_hop_headers_from_the_device_are_dropped() {
        for name in [
            "authorization",
            "cookie",
            "host",
            "origin",
            "connection",
            "proxy-authorization",
        ] {
            assert!(dropped_request_header(name), "{name}");
        }
        for name in ["accept", "content-type", "mcp-session-id", "last-event-id"] {
            assert!(!dropped_request_header(name), "{name}");
        }
    }
}
