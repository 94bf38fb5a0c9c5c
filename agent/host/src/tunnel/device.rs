//! The device's end of `pair/v2` (AIP-59 §1.4, §3.6, §4, §5.7, §6.3): accepting an offer,
//! keeping the credential, and a loopback endpoint that tunnels every request to the host.
//!
//! ```text
//!  accept     check the offer (§1.4) → show its fingerprint → pair on the offer's route →
//!             show the host's name beside the fingerprint → ask → keep the credential
//!             (STATE/hosts/<fingerprint>.json, 0600: pinned keys, broker, pair root)
//!  connect    one tunnel client per credential on this machine (§5.3: an exclusive lock,
//!             STATE/hosts/<fingerprint>.tunnel.lock, held by the process that runs it), one
//!             channel per credential, today's epoch route then yesterday's;
//!             requests multiplexed by reqId; a dropped channel fails what was pending and
//!             reconnects with jittered, capped backoff; an authenticated pairing_revoked
//!             marks the credential revoked and ends it (no retry, §6.3)
//!  endpoint   http://127.0.0.1:PORT/mcp for the MCP clients of this user: its own bearer
//!             (a fresh 0600 file each run: loopback is shared by every user of the
//!             machine), Host and Origin loopback (no web page reaches it), bodies ≤ 256 KiB
//!  stdio      the same for a client that spawns its servers (pipes: no bearer needed)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderName, HeaderValue, StatusCode, header};
use pap_pair::keys::{Ed25519Public, X25519Public};
use pap_pair::link::{Dialer, LinkError, LinkSender, Pins, connect_client};
use pap_pair::offer::Offer;
use pap_pair::tunnel::{Frame, MAX_FRAME_BODY, PAIRING_REVOKED, decode_body, encode_body};
use pap_shared::{Clock, Rng, UnixTime};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use zeroize::Zeroizing;

use super::{Backoff, epoch_at, shown_name};

/// How long a request waits for a channel before it is answered 503.
pub const CONNECT_WAIT: Duration = Duration::from_secs(20);
/// How long a request waits for its response head.
pub const RESPONSE_WAIT: Duration = Duration::from_secs(60);
/// Frames of one response queued before the channel's reader waits for its consumer.
const RESPONSE_QUEUE: usize = 32;
/// Requests the endpoint serves at once.
const MAX_CONCURRENT: usize = 64;

/// Why a device step failed. Names no secret.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The offer is refused (§1.4), before any socket.
    #[error(transparent)]
    Offer(pap_pair::PairError),
    /// The pairing failed on the way.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The person declined: nothing kept (the host has a record to revoke).
    #[error("declined: no credential kept (revoke the new device on the host: pap-agent devices revoke)")]
    Declined,
    /// Reading or writing a credential failed.
    #[error("the credential {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No credential for that fingerprint, or one this agent does not write.
    #[error("no usable credential for the host {0} (pair first: pap-agent pair accept)")]
    NoCredential(String),
    /// The host revoked the pairing (§6.3): terminal.
    #[error("the host revoked this pairing on {0}: pair again from a new offer")]
    Revoked(String),
    /// The endpoint's listen address is not loopback.
    #[error("{0} is not a loopback address: the tunnel's endpoint serves this machine only")]
    NotLoopback(SocketAddr),
    /// Another process is already this credential's tunnel client (§5.3: one per credential).
    #[error(
        "another process{} is already the tunnel client of this pairing (AIP-59 §5.3: one per credential): \
         reach the host through it (pap-agent pair connect serves an endpoint), or stop it",
        held_by(*.holder)
    )]
    TunnelHeld {
        /// The holder's process id, as it wrote it (if it could be read).
        holder: Option<u32>,
    },
}

fn held_by(holder: Option<u32>) -> String {
    holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
}

/// This process's hold on a credential's tunnel: while it lives, no other process (and no other
/// hold in this one) becomes a tunnel client of the same pairing (§5.3). The kernel lets go when
/// the process ends, however it ends.
#[derive(Debug)]
pub struct TunnelHold {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Holds the tunnel of the credential for `fingerprint` (an exclusive `flock` on
/// `STATE/hosts/<fingerprint>.tunnel.lock`, 0600, with this process's id written in it), or says
/// which process holds it. Take it before anything of the tunnel's is started or written (the
/// endpoint's bearer file is the holder's).
pub fn hold_tunnel(state_dir: &Path, fingerprint: &str) -> Result<TunnelHold, DeviceError> {
    use std::io::{Read as _, Seek as _, Write as _};
    if !pap_pair::keys::is_fingerprint(fingerprint) {
        return Err(DeviceError::NoCredential(fingerprint.to_owned()));
    }
    let path = state_dir.join("hosts").join(format!("{fingerprint}.tunnel.lock"));
    let mut options = std::fs::OpenOptions::new();
    options.create(true).read(true).write(true).truncate(false);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    // Never through a link: emptying the lock file must empty nothing else.
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, nix::fcntl::OFlag::O_NOFOLLOW.bits());
    let file = options.open(&path).map_err(io_error(&path))?;
    // 0600 whoever made it (the mode above applies only to a file this call creates).
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(io_error(&path))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            let pid = std::process::id().to_string();
            let written = lock
                .set_len(0)
                .and_then(|()| lock.rewind())
                .and_then(|()| lock.write_all(pid.as_bytes()));
            written.map_err(io_error(&path))?;
            Ok(TunnelHold { _lock: lock })
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let holder = file
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| text.trim().parse().ok());
            Err(DeviceError::TunnelHeld { holder })
        }
        Err((_, errno)) => Err(io_error(&path)(std::io::Error::from(errno))),
    }
}

/// What `STATE/hosts/<fingerprint>.json` holds (§4.1).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CredentialFile {
    fingerprint: String,
    /// The host's X25519 key, SPKI DER, base64url.
    pk: String,
    /// The host's Ed25519 key, SPKI DER, base64url.
    sk: String,
    rendezvous: String,
    /// base64url.
    pair_root: String,
    client_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    #[serde(with = "pap_shared::rfc3339")]
    paired_at: UnixTime,
    /// Set when the host said `pairing_revoked`: never dialed again.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "pap_shared::rfc3339::option"
    )]
    revoked_at: Option<UnixTime>,
}

impl Drop for CredentialFile {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.pair_root);
    }
}

/// A kept pairing with one host.
pub struct Credential {
    /// The host's fingerprint.
    pub fingerprint: String,
    /// The host's name, as its hello said.
    pub label: Option<String>,
    /// The broker.
    pub rendezvous: String,
    pins: Pins,
    pair_root: Zeroizing<[u8; 32]>,
    client_name: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("fingerprint", &self.fingerprint)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Where the credential for the host `fingerprint` is kept.
pub fn credential_path(state_dir: &Path, fingerprint: &str) -> PathBuf {
    state_dir.join("hosts").join(format!("{fingerprint}.json"))
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> DeviceError + '_ {
    move |source| DeviceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The credential for `fingerprint` (32 lowercase hex), unless it was revoked.
pub fn load_credential(state_dir: &Path, fingerprint: &str) -> Result<Credential, DeviceError> {
    let none = || DeviceError::NoCredential(fingerprint.to_owned());
    if !pap_pair::keys::is_fingerprint(fingerprint) {
        return Err(none());
    }
    let path = credential_path(state_dir, fingerprint);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => Zeroizing::new(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(none()),
        Err(e) => return Err(io_error(&path)(e)),
    };
    let file: CredentialFile = serde_json::from_slice(&bytes).map_err(|_| none())?;
    if let Some(at) = file.revoked_at {
        return Err(DeviceError::Revoked(at.to_rfc3339()));
    }
    let key = |text: &str| URL_SAFE_NO_PAD.decode(text).map_err(|_| none());
    let pins = Pins {
        x25519: X25519Public::from_spki(&key(&file.pk)?).map_err(|_| none())?,
        ed25519: Ed25519Public::from_spki(&key(&file.sk)?).map_err(|_| none())?,
    };
    if pins.x25519.fingerprint() != file.fingerprint {
        return Err(none());
    }
    let raw = Zeroizing::new(key(&file.pair_root)?);
    let mut pair_root = Zeroizing::new([0_u8; 32]);
    if raw.len() != 32 {
        return Err(none());
    }
    pair_root.copy_from_slice(&raw);
    Ok(Credential {
        fingerprint: file.fingerprint.clone(),
        label: file.label.clone(),
        rendezvous: file.rendezvous.clone(),
        pins,
        pair_root,
        client_name: file.client_name.clone(),
    })
}

/// Marks the credential of `fingerprint` revoked at `now` (kept, so the person is told why,
/// and never dialed again).
fn mark_revoked(state_dir: &Path, fingerprint: &str, now: UnixTime) -> Result<(), DeviceError> {
    let path = credential_path(state_dir, fingerprint);
    let bytes = Zeroizing::new(std::fs::read(&path).map_err(io_error(&path))?);
    let mut file: CredentialFile =
        serde_json::from_slice(&bytes).map_err(|_| DeviceError::NoCredential(fingerprint.to_owned()))?;
    file.revoked_at = Some(now);
    file.pair_root = String::new();
    let json = Zeroizing::new(serde_json::to_vec_pretty(&file).unwrap_or_default());
    pap_browser::store::write_private(&path, &json).map_err(io_error(&path))
}

/// A pairing done, before the person confirmed it.
#[derive(Debug)]
pub struct Paired {
    /// The host's fingerprint (equal to the offer's `id`).
    pub fingerprint: String,
    /// The host's name from its hello frame.
    pub label: Option<String>,
}

/// Pairs with the host of `offer` (already checked, §1.4) as `client_name`; calls `confirm`
/// with the fingerprint and the host's name, and keeps the credential only if it says yes
/// (§3.6). The channel of the first contact is closed after: `connect` opens the next.
pub async fn accept(
    state_dir: &Path,
    offer: &Offer,
    client_name: &str,
    dialer: &Dialer,
    confirm: impl FnOnce(&Paired) -> bool,
    clock: &dyn Clock,
    rng: &dyn Rng,
) -> Result<Paired, DeviceError> {
    let tokens = pap_pair::derive::offer_tokens(&offer.secret).map_err(DeviceError::Offer)?;
    let pins = Pins {
        x25519: offer.daemon_x25519,
        ed25519: offer.daemon_ed25519,
    };
    let name = shown_name(client_name);
    let (mut sender, _receiver, session, label) = connect_client(
        dialer,
        &offer.rendezvous,
        &tokens.route,
        &pins,
        &tokens.auth,
        &name,
        rng,
    )
    .await?;
    let root = pap_pair::derive::pair_root(&session.send_key, &session.recv_key, &session.transcript)
        .map_err(DeviceError::Offer)?;
    sender.close().await;
    let paired = Paired {
        fingerprint: offer.fingerprint.clone(),
        label: label.map(|l| shown_name(&l)),
    };
    if !confirm(&paired) {
        return Err(DeviceError::Declined);
    }
    let file = CredentialFile {
        fingerprint: offer.fingerprint.clone(),
        pk: URL_SAFE_NO_PAD.encode(offer.daemon_x25519.to_spki()),
        sk: URL_SAFE_NO_PAD.encode(offer.daemon_ed25519.to_spki()),
        rendezvous: offer.rendezvous.clone(),
        pair_root: URL_SAFE_NO_PAD.encode(root.as_ref()),
        client_name: name,
        label: paired.label.clone(),
        paired_at: clock.now(),
        revoked_at: None,
    };
    let path = credential_path(state_dir, &offer.fingerprint);
    if let Some(dir) = path.parent() {
        pap_browser::store::private_dir(dir).map_err(io_error(&path))?;
    }
    let json = Zeroizing::new(serde_json::to_vec_pretty(&file).unwrap_or_default());
    pap_browser::store::write_private(&path, &json).map_err(io_error(&path))?;
    Ok(paired)
}

/// Where the client's one channel stands.
#[derive(Clone, Debug)]
enum Status {
    Connecting,
    Live(Live),
    Revoked,
}

/// A live channel: its outbox and the responses waiting on it.
#[derive(Clone, Debug)]
struct Live {
    outbox: mpsc::Sender<Frame>,
    pending: Arc<Mutex<HashMap<String, mpsc::Sender<Frame>>>>,
}

/// The device's one channel to a host (§5.3), kept up in the background.
pub struct TunnelClient {
    status: watch::Receiver<Status>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for TunnelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelClient").finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TunnelClient {
    /// Starts keeping a channel to the host of `credential`; the task ends (returning the
    /// revocation) only when the host revokes the pairing. A process that may run beside
    /// another on the same state holds [`hold_tunnel`] first (the `pap-agent` commands do).
    pub fn start(
        state_dir: PathBuf,
        credential: Credential,
        dialer: Dialer,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> (Arc<Self>, tokio::task::JoinHandle<DeviceError>) {
        let (tell, status) = watch::channel(Status::Connecting);
        let task = tokio::spawn(keep(state_dir, credential, dialer, tell, clock, rng));
        (
            Arc::new(Self {
                status,
                next_id: AtomicU64::new(1),
            }),
            task,
        )
    }

    /// Sends `request` (path and query, headers, a body of at most 256 KiB) through the
    /// channel and returns the host's response, streamed as it comes.
    pub async fn fetch(&self, method: &str, path: &str, headers: BTreeMap<String, String>, body: Bytes) -> Response {
        let mut status = self.status.clone();
        let seen = tokio::time::timeout(
            CONNECT_WAIT,
            status.wait_for(|s| matches!(s, Status::Live(_) | Status::Revoked)),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .map(|seen| seen.clone());
        let live = match seen {
            Some(Status::Live(live)) => live,
            Some(Status::Revoked) => {
                return plain(
                    StatusCode::GONE,
                    "the host revoked this pairing: pair again from a new offer",
                );
            }
            _ => return plain(StatusCode::SERVICE_UNAVAILABLE, "the host is offline (no channel)"),
        };
        let req_id = format!("r{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (deliver, mut frames) = mpsc::channel(RESPONSE_QUEUE);
        lock(&live.pending).insert(req_id.clone(), deliver);
        let mut guard = Cancel {
            req_id: req_id.clone(),
            live: live.clone(),
            done: false,
        };
        let request = Frame::HttpRequest {
            req_id: req_id.clone(),
            method: method.to_owned(),
            path: path.to_owned(),
            headers,
            body: (!body.is_empty()).then(|| encode_body(&body)),
            body_chunked: false,
            timeout_ms: None,
        };
        if live.outbox.send(request).await.is_err() {
            guard.done = true;
            return plain(StatusCode::BAD_GATEWAY, "the channel to the host dropped");
        }
        let first = match tokio::time::timeout(RESPONSE_WAIT, frames.recv()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                guard.done = true;
                return plain(StatusCode::BAD_GATEWAY, "the channel to the host dropped");
            }
            Err(_) => return plain(StatusCode::GATEWAY_TIMEOUT, "the host did not answer in time"),
        };
        match first {
            Frame::HttpResponse {
                status,
                headers,
                body,
                error,
                ..
            } => {
                guard.finish();
                let body = bytes_of(body.as_deref());
                // The host's own failure (a path the tunnel does not reach, busy, a timeout)
                // says why in the body, for the person reading the client's error.
                let body = match error {
                    Some(error) if body.is_empty() => format!("{}: {}", error.code, error.message).into_bytes(),
                    _ => body,
                };
                respond(status, &headers, Body::from(body))
            }
            Frame::HttpResponseHead { status, headers, .. } => {
                let stream = futures_util::stream::unfold((frames, guard), |(mut frames, mut guard)| async move {
                    match frames.recv().await {
                        Some(Frame::HttpResponseChunk { data, end, error, .. }) => {
                            if end || error.is_some() {
                                guard.finish();
                            }
                            if error.is_some() {
                                return Some((
                                    Err(std::io::Error::other("the host's response failed")),
                                    (frames, guard),
                                ));
                            }
                            let bytes = bytes_of(data.as_deref());
                            if end && bytes.is_empty() {
                                return None;
                            }
                            Some((Ok(Bytes::from(bytes)), (frames, guard)))
                        }
                        // The channel dropped: a network error (§5.7).
                        _ if guard.done => None,
                        _ => {
                            guard.done = true;
                            Some((
                                Err(std::io::Error::other("the channel to the host dropped")),
                                (frames, guard),
                            ))
                        }
                    }
                });
                respond(status, &headers, Body::from_stream(stream))
            }
            _ => plain(StatusCode::BAD_GATEWAY, "the host answered with something else"),
        }
    }
}

/// Sends `http_cancel` for a request whose response was not read to its end (§5.6).
struct Cancel {
    req_id: String,
    live: Live,
    done: bool,
}

impl Cancel {
    /// The response came to its end: nothing to cancel, and no frame is awaited any more.
    fn finish(&mut self) {
        self.done = true;
        lock(&self.live.pending).remove(&self.req_id);
    }
}

/// A frame's `body` or `data`. [`Frame::decode`] already refused any that is not base64 within
/// the frame bound, so none fails here.
fn bytes_of(text: Option<&str>) -> Vec<u8> {
    text.and_then(|text| decode_body(text).ok()).unwrap_or_default()
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.live.pending).remove(&self.req_id);
            let _ = self.live.outbox.try_send(Frame::HttpCancel {
                req_id: std::mem::take(&mut self.req_id),
            });
        }
    }
}

fn plain(status: StatusCode, message: &'static str) -> Response {
    (status, message).into_response()
}

fn respond(status: u16, headers: &BTreeMap<String, String>, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// Keeps the channel: connects, serves it to its end, reconnects with backoff; ends only on an
/// authenticated `pairing_revoked`.
async fn keep(
    state_dir: PathBuf,
    credential: Credential,
    dialer: Dialer,
    tell: watch::Sender<Status>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
) -> DeviceError {
    let mut backoff = Backoff::new();
    loop {
        let today = epoch_at(clock.now());
        let mut outcome = Err(LinkError::Timeout);
        for epoch in [today, today.saturating_sub(1)] {
            let Ok(tokens) = pap_pair::derive::epoch_tokens(&credential.pair_root, epoch) else {
                continue;
            };
            outcome = connect_client(
                &dialer,
                &credential.rendezvous,
                &tokens.route,
                &credential.pins,
                &tokens.auth,
                &credential.client_name,
                rng.as_ref(),
            )
            .await;
            if matches!(outcome, Ok(_) | Err(LinkError::Revoked)) {
                break;
            }
        }
        let ended = match outcome {
            Ok((sender, receiver, _session, _label)) => {
                backoff.reset();
                tracing::info!(host = %credential.fingerprint, "the channel to the host is up");
                serve_channel(sender, receiver, &tell).await
            }
            Err(error) => Err(error),
        };
        match ended {
            Err(LinkError::Revoked) => {
                let _ = tell.send(Status::Revoked);
                let now = clock.now();
                if let Err(error) = mark_revoked(&state_dir, &credential.fingerprint, now) {
                    tracing::warn!(%error, "the revoked credential could not be marked");
                }
                return DeviceError::Revoked(now.to_rfc3339());
            }
            Ok(()) | Err(_) => {
                let _ = tell.send(Status::Connecting);
                let delay = backoff.next(rng.as_ref());
                tracing::info!(delay_ms = delay.as_millis(), "the host is offline; retrying");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Runs one live channel: publishes it, routes each response frame to its request, and ends
/// (failing what is pending) when the channel does. `Err(Revoked)` on `pairing_revoked`.
async fn serve_channel(
    sender: LinkSender,
    mut receiver: pap_pair::link::LinkReceiver,
    tell: &watch::Sender<Status>,
) -> Result<(), LinkError> {
    let (outbox, queued) = mpsc::channel::<Frame>(RESPONSE_QUEUE);
    let writer = tokio::spawn(async move {
        let (mut sender, mut queued) = (sender, queued);
        while let Some(frame) = queued.recv().await {
            if sender.send(&frame).await.is_err() {
                break;
            }
        }
        sender.close().await;
    });
    let live = Live {
        outbox,
        pending: Arc::default(),
    };
    let _ = tell.send(Status::Live(live.clone()));
    let result = loop {
        let frame = match receiver.recv().await {
            Ok(frame) => frame,
            Err(LinkError::Frame(_)) => continue,
            Err(error) => break Err(error),
        };
        let req_id = match &frame {
            Frame::HttpResponse { req_id, .. }
            | Frame::HttpResponseHead { req_id, .. }
            | Frame::HttpResponseChunk { req_id, .. } => req_id.clone(),
            Frame::Error { code, .. } if code == PAIRING_REVOKED => break Err(LinkError::Revoked),
            Frame::Ping { nonce } => {
                let _ = live.outbox.send(Frame::Pong { nonce: nonce.clone() }).await;
                continue;
            }
            _ => continue,
        };
        // Frames for a request already cancelled or done are dropped (§5.6).
        let waiting = lock(&live.pending).get(&req_id).cloned();
        if let Some(waiting) = waiting
            && waiting.send(frame).await.is_err()
        {
            lock(&live.pending).remove(&req_id);
        }
    };
    let _ = tell.send(Status::Connecting);
    // Pending requests fail as network errors: their senders go with the map.
    lock(&live.pending).clear();
    drop(live);
    writer.abort();
    result
}

/// The loopback endpoint's state.
#[derive(Clone)]
struct Endpoint {
    client: Arc<TunnelClient>,
    port: u16,
    /// SHA-256 of the endpoint's bearer.
    bearer_sha256: [u8; 32],
}

/// The endpoint's own credential: loopback is shared by every user of the machine, so the
/// endpoint, like the host itself, serves only a client that presents it. Made fresh each run
/// and kept only in a 0600 file beside the credential ([`endpoint_bearer_path`]).
pub struct EndpointBearer(Zeroizing<String>);

impl std::fmt::Debug for EndpointBearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndpointBearer(..)")
    }
}

/// Where the bearer of the `pair connect` endpoint for `fingerprint` is kept while it runs.
pub fn endpoint_bearer_path(state_dir: &Path, fingerprint: &str) -> PathBuf {
    state_dir.join("hosts").join(format!("{fingerprint}.endpoint-bearer"))
}

impl EndpointBearer {
    /// A fresh bearer (256 bits from `rng`), written to `path` (0600) for the MCP clients of
    /// this user.
    pub fn mint(path: &Path, rng: &dyn Rng) -> Result<Self, DeviceError> {
        let mut raw = Zeroizing::new([0_u8; 32]);
        rng.fill(raw.as_mut());
        let bearer = Self(Zeroizing::new(format!(
            "paptun_{}",
            URL_SAFE_NO_PAD.encode(raw.as_ref())
        )));
        pap_browser::store::write_private(path, bearer.0.as_bytes()).map_err(io_error(path))?;
        Ok(bearer)
    }

    fn digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(self.0.as_bytes()).into()
    }
}

/// Serves `client` at `listener` (loopback only) until `shutdown`: every request to `/mcp` or
/// `/health` goes through the tunnel; a `Host` or `Origin` that is not this loopback endpoint
/// is refused 403, so no web page the device opens can reach the host through it.
pub async fn serve_endpoint(
    listener: tokio::net::TcpListener,
    client: Arc<TunnelClient>,
    bearer: &EndpointBearer,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), DeviceError> {
    let addr = listener.local_addr().map_err(|e| DeviceError::Io {
        path: PathBuf::from("(listener)"),
        source: e,
    })?;
    if !addr.ip().is_loopback() {
        return Err(DeviceError::NotLoopback(addr));
    }
    let state = Endpoint {
        client,
        port: addr.port(),
        bearer_sha256: bearer.digest(),
    };
    let app = axum::Router::new()
        .fallback(through)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_FRAME_BODY))
        .layer(tower::limit::ConcurrencyLimitLayer::new(MAX_CONCURRENT))
        .with_state(state);
    // The host's bounded server: a connection cap, header and body deadlines.
    crate::http::serve(listener, app, crate::http::Limits::default(), shutdown).await;
    Ok(())
}

async fn through(State(endpoint): State<Endpoint>, request: Request) -> Response {
    let loopback = |value: &str, with_scheme: bool| {
        let value = value.to_ascii_lowercase();
        let value = if with_scheme {
            match value.strip_prefix("http://") {
                Some(rest) => rest.to_owned(),
                None => return false,
            }
        } else {
            value
        };
        ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .any(|name| value == format!("{name}:{}", endpoint.port))
    };
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok());
    if !host.is_some_and(|h| loopback(h, false)) {
        return plain(StatusCode::FORBIDDEN, "this endpoint answers its loopback name only");
    }
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin.to_str().is_ok_and(|o| loopback(o, true))
    {
        return plain(StatusCode::FORBIDDEN, "this endpoint answers no web page");
    }
    // The endpoint's bearer, compared in constant time on digests; it goes no further (the
    // host drops every credential a device sends).
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| EndpointBearer(Zeroizing::new(v.trim().to_owned())).digest());
    let right = presented
        .is_some_and(|digest| bool::from(subtle::ConstantTimeEq::ct_eq(&digest[..], &endpoint.bearer_sha256[..])));
    if !right {
        let mut refused = plain(
            StatusCode::UNAUTHORIZED,
            "this endpoint serves the MCP clients of its user: present the bearer in its .endpoint-bearer file",
        );
        refused.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"pap-agent tunnel\""),
        );
        return refused;
    }
    let method = request.method().as_str().to_owned();
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let mut headers = BTreeMap::new();
    for (name, value) in request.headers() {
        // The endpoint's own credential stays here; the host serves the paired device.
        if name == header::AUTHORIZATION || name == header::COOKIE {
            continue;
        }
        if let Ok(value) = value.to_str() {
            headers.insert(name.as_str().to_owned(), value.to_owned());
        }
    }
    let body = match axum::body::to_bytes(request.into_body(), MAX_FRAME_BODY).await {
        Ok(body) => body,
        Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "a request body over 256 KiB"),
    };
    endpoint.client.fetch(&method, &path, headers, body).await
}

/// The JSON-RPC error a request gets when the host could not answer it (the client must not
/// wait forever for a response that will never come).
fn unanswered(id: &serde_json::Value, why: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": -32000, "message": why },
    }))
    .unwrap_or_default()
}

/// The JSON-RPC messages of an event stream's bytes, as they complete: each event's `data`
/// lines joined (MCP's streamable HTTP sends one message per event).
#[derive(Default)]
struct Events {
    pending: Vec<u8>,
}

impl Events {
    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(bytes);
        let mut messages = Vec::new();
        while let Some(end) = find_event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..end.1).collect();
            let text = String::from_utf8_lossy(&event[..end.0]);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            if !data.trim().is_empty() {
                messages.push(data.into_bytes());
            }
        }
        messages
    }
}

/// Where the first event in `bytes` ends: (its length, with its blank line).
fn find_event_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| (i, i + 2));
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// What the bridge knows of its MCP session with the host.
#[derive(Default)]
struct Bridged {
    session: Option<String>,
    protocol: Option<String>,
}

/// Serves the host behind `client` to an MCP client on `input`/`output` (stdio: one JSON-RPC
/// message a line), for clients that only spawn servers (Claude Desktop): each message is
/// POSTed to the host's `/mcp` through the tunnel in the order it came, and what the host
/// answers (JSON, or an event stream read as it comes) is written back a message a line. A
/// request the host cannot answer gets a JSON-RPC error. At the end of `input`, the MCP session
/// is ended (`DELETE /mcp`).
pub async fn serve_stdio(
    client: Arc<TunnelClient>,
    input: impl tokio::io::AsyncRead + Unpin,
    mut output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> Result<(), DeviceError> {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let (lines_out, mut to_write) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        while let Some(mut line) = to_write.recv().await {
            line.push(b'\n');
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let state: Arc<Mutex<Bridged>> = Arc::default();
    let mut input = tokio::io::BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = input
            .read_until(b'\n', &mut line)
            .await
            .map_err(|source| DeviceError::Io {
                path: PathBuf::from("(stdin)"),
                source,
            })?;
        if read == 0 {
            break;
        }
        let message = line.trim_ascii();
        if message.is_empty() {
            continue;
        }
        let parsed: serde_json::Value = serde_json::from_slice(message).unwrap_or_default();
        let id = parsed.get("id").filter(|_| parsed.get("method").is_some()).cloned();
        if message.len() > MAX_FRAME_BODY {
            if let Some(id) = &id {
                let _ = lines_out.send(unanswered(id, "a message over 256 KiB")).await;
            }
            continue;
        }
        let initialize = parsed.get("method").and_then(|m| m.as_str()) == Some("initialize");
        let mut headers = BTreeMap::from([
            ("content-type".to_owned(), "application/json".to_owned()),
            ("accept".to_owned(), "application/json, text/event-stream".to_owned()),
        ]);
        {
            let known = lock(&state);
            if let Some(session) = &known.session {
                headers.insert("mcp-session-id".to_owned(), session.clone());
            }
            if let Some(protocol) = &known.protocol {
                headers.insert("mcp-protocol-version".to_owned(), protocol.clone());
            }
        }
        // The head in order (so `initialize` has its session before the next message), the
        // body streamed apart (so a long call holds up no other).
        let response = client
            .fetch("POST", "/mcp", headers, Bytes::copy_from_slice(message))
            .await;
        let status = response.status();
        if let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            lock(&state).session = Some(session.to_owned());
        }
        let streamed = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let (lines_out, state) = (lines_out.clone(), state.clone());
        tokio::spawn(async move {
            let mut body = response.into_body().into_data_stream();
            let mut events = Events::default();
            let mut whole = Vec::new();
            let mut answered = false;
            while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
                let Ok(chunk) = chunk else { break };
                if !streamed {
                    whole.extend_from_slice(&chunk);
                    continue;
                }
                for event in events.push(&chunk) {
                    if initialize
                        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(&event)
                        && let Some(version) = value.pointer("/result/protocolVersion").and_then(|v| v.as_str())
                    {
                        lock(&state).protocol = Some(version.to_owned());
                    }
                    answered = true;
                    if lines_out.send(event).await.is_err() {
                        return;
                    }
                }
            }
            if !streamed && status.is_success() && !whole.trim_ascii().is_empty() {
                answered = true;
                let _ = lines_out.send(whole.trim_ascii().to_vec()).await;
            }
            if !answered && let Some(id) = id {
                let why = if status.is_success() {
                    "the host's answer ended before it answered".to_owned()
                } else {
                    format!(
                        "the host answered {status}: {}",
                        String::from_utf8_lossy(whole.trim_ascii())
                    )
                };
                let _ = lines_out.send(unanswered(&id, &why)).await;
            }
        });
    }
    let session = lock(&state).session.clone();
    if let Some(session) = session {
        let headers = BTreeMap::from([("mcp-session-id".to_owned(), session)]);
        let _ = client.fetch("DELETE", "/mcp", headers, Bytes::new()).await;
    }
    drop(lines_out);
    let _ = writer.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hold_per_credential_and_the_next_is_told_who_holds_it() {
        #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
        let dir = crate::scratch::Dir::new("pap-tunnel-hold");
        std::fs::create_dir_all(dir.path().join("hosts")).unwrap();
        let fingerprint = "0123456789abcdef0123456789abcdef";
        let held = hold_tunnel(dir.path(), fingerprint).unwrap();
        // A second hold, even in this process (a lock per open file), is refused, naming us.
        match hold_tunnel(dir.path(), fingerprint) {
            Err(DeviceError::TunnelHeld { holder }) => assert_eq!(holder, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        let said = hold_tunnel(dir.path(), fingerprint).unwrap_err().to_string();
        assert!(said.contains(&format!("(pid {})", std::process::id())), "{said}");
        // Another pairing's is its own.
        let other = hold_tunnel(dir.path(), "fedcba9876543210fedcba9876543210").unwrap();
        drop(held);
        let again = hold_tunnel(dir.path(), fingerprint).unwrap();
        let lock = dir.path().join(format!("hosts/{fingerprint}.tunnel.lock"));
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&lock).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        // A lock path that is a link is refused, and what it points to is left whole.
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let linked = "abcdefabcdefabcdefabcdefabcdefab";
        std::os::unix::fs::symlink(&target, dir.path().join(format!("hosts/{linked}.tunnel.lock"))).unwrap();
        assert!(matches!(hold_tunnel(dir.path(), linked), Err(DeviceError::Io { .. })));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        assert!(matches!(
            hold_tunnel(dir.path(), "../x"),
            Err(DeviceError::NoCredential(_))
        ));
        drop((other, again));
    }

    #[test]
    fn events_are_read_as_they_complete_in_either_line_ending() {
        let mut events = Events::default();
        assert!(events.push(b"data: \nid: 0\nretry: 3000\n\nda").is_empty());
        assert_eq!(events.push(b"ta: {\"id\":1}\n\n"), vec![b"{\"id\":1}".to_vec()]);
        assert_eq!(
            events.push(b"data: {\"a\":\r\ndata: 2}\r\n\r\n"),
            vec![b"{\"a\":\n2}".to_vec()]
        );
    }
}
