//! Serving an axum router over TLS to strangers: every wait has a deadline, the connections
//! have a cap, and a failing `accept` backs off (security review H2).
//!
//! ```text
//!  accept          waits for one of `max_connections` slots (the kernel queues the rest);
//!                  a peer address past `max_connections_per_address` is closed at once
//!  TLS handshake   at most `handshake_timeout`
//!  HTTP/1.1        each request's headers within `header_read_timeout` of waiting for them
//!                  (this is also how long an idle keep-alive connection is kept)
//!  any connection  closed after `idle_timeout` without a byte either way, and once it is
//!                  `max_connection_age` old (the request in flight answered first, within
//!                  `drain_timeout`; HTTP/2: GOAWAY), so nothing a peer sends (HTTP/2 PINGs
//!                  included) keeps it forever
//!  any request     answered within `request_timeout`, body read included (408 otherwise)
//!  shutdown        stops accepting; requests in flight finish, idle connections close, for
//!                  at most `drain_timeout`; then whatever is left is closed
//! ```
//!
//! [`serve_tls_on_cores`] serves the same way with each connection on one of [`CoreRuntimes`]'
//! single-threaded runtimes, one per core (thread per core): see there for why.

use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::Router;
use axum::extract::ConnectInfo;
use http::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::shares::PerKey;
use tower_http::timeout::TimeoutLayer;

/// How a server bounds what each stranger may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// Most connections open at once; the next waits in the kernel's queue. Clamped to the
    /// process's open-file limit, less [`RESERVED_FILES`].
    pub max_connections: usize,
    /// Most connections open at once from one peer address (an IPv6 address counts by its
    /// /64); past it, a new connection from that address is closed at once, so one peer cannot
    /// hold every slot (review N15). Behind a load balancer every connection comes from its
    /// addresses: there, set it to `usize::MAX` and let the balancer cap its clients.
    pub max_connections_per_address: usize,
    /// Longest a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Longest an HTTP/1.1 connection may take to send a request's headers once the server
    /// waits for them, the first request's or the next one's (so also the keep-alive idle time).
    pub header_read_timeout: Duration,
    /// Longest a connection may go without a byte read or written.
    pub idle_timeout: Duration,
    /// Oldest a connection may grow: then it closes as in a drain (the request in flight is
    /// answered first; HTTP/2 says GOAWAY), and its peer connects again if it wants. Nothing a
    /// peer sends keeps a connection past it, HTTP/2 PINGs included (review N15).
    pub max_connection_age: Duration,
    /// Longest one request may take, from its headers to its answer, its body read included.
    pub request_timeout: Duration,
    /// Once shutdown begins, how long requests in flight may take to finish before their
    /// connections are closed anyway.
    pub drain_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 8_192,
            max_connections_per_address: 1_024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connection_age: Duration::from_secs(600),
            request_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Open files kept for what is not a connection (logs, stores, outbound fetches).
pub const RESERVED_FILES: usize = 256;

/// How long `accept` rests after an error that is not one connection's (out of files, say),
/// so a full process does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` over TLS with the default [`ServeLimits`] until `shutdown`
/// completes, then drains: no new connection is accepted, each request in flight is answered
/// (its connection then closes), and idle connections close, for at most
/// [`ServeLimits::drain_timeout`]. Returns when every connection has ended or the drain
/// deadline passed. Each connection runs in its own task; a failed handshake or a broken
/// connection ends only that connection.
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    config: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) {
    serve_tls_with(listener, app, config, ServeLimits::default(), shutdown).await;
}

/// [`serve_tls`] with the given limits.
pub async fn serve_tls_with(
    listener: TcpListener,
    app: Router,
    config: Arc<ServerConfig>,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()>,
) {
    serve(listener, app, config, limits, None, shutdown).await;
}

/// [`serve_tls_with`], each connection served on one of `cores`' runtimes: the one with the
/// fewest connections open when it is accepted, for as long as it lasts (its requests, HTTP/2
/// streams included, all run there). Accepting, the connection caps and the drain stay on the
/// caller's runtime: a connection takes its slots before it goes to a core, and the drain waits
/// for the connections on every core. This future holds a clone of `cores` until it returns;
/// if it is the last one then, connections still open after the drain's deadline close with
/// the cores (cancelling this future mid-drain does the same at once).
///
/// A core whose thread has ended (only a panic inside Tokio ends one) gets no connection; with
/// none left, connections are served on the caller's runtime.
pub async fn serve_tls_on_cores(
    listener: TcpListener,
    app: Router,
    config: Arc<ServerConfig>,
    limits: ServeLimits,
    cores: CoreRuntimes,
    shutdown: impl Future<Output = ()>,
) {
    serve(listener, app, config, limits, Some(cores), shutdown).await;
}

/// The accept loop of [`serve_tls_with`] and [`serve_tls_on_cores`]: connections on the
/// caller's runtime, or on `cores`.
async fn serve(
    listener: TcpListener,
    app: Router,
    config: Arc<ServerConfig>,
    limits: ServeLimits,
    cores: Option<CoreRuntimes>,
    shutdown: impl Future<Output = ()>,
) {
    let max_connections = clamp_to_open_files(limits.max_connections);
    let slots = Arc::new(Semaphore::new(max_connections));
    let app = app.layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        limits.request_timeout,
    ));
    let acceptor = TlsAcceptor::from(config);
    let per_address = PerKey::new(limits.max_connections_per_address);
    let (drain, draining) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                // The semaphore is never closed.
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => accepted,
        };
        let Some(address_slot) = per_address.take(counted_address(peer.ip())) else {
            // Closed at once, its global slot given back: the peer holds its share already.
            tracing::debug!("a peer past its connections was refused");
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let draining = draining.clone();
        match &cores {
            None => {
                tokio::spawn(async move {
                    let _slots = (slot, address_slot);
                    serve_connection(tcp, peer, acceptor, app, limits, draining).await;
                });
            }
            Some(cores) => match cores.least_busy() {
                Some((core, open)) => {
                    // Taken off this runtime's reactor here, put on the core's there.
                    let tcp = match tcp.into_std() {
                        Ok(tcp) => tcp,
                        Err(error) => {
                            tracing::debug!(%error, "an accepted connection could not be handed to a core");
                            continue;
                        }
                    };
                    core.spawn(async move {
                        let _slots = (slot, address_slot, open);
                        match tokio::net::TcpStream::from_std(tcp) {
                            Ok(tcp) => serve_connection(tcp, peer, acceptor, app, limits, draining).await,
                            Err(error) => tracing::debug!(%error, "a core could not take a connection"),
                        }
                    });
                }
                None => {
                    tracing::error!("no core runtime runs; serving the connection on the accepting runtime");
                    tokio::spawn(async move {
                        let _slots = (slot, address_slot);
                        serve_connection(tcp, peer, acceptor, app, limits, draining).await;
                    });
                }
            },
        }
    }
    // The drain. The listening socket closes first: a balancer's next connection is refused
    // at once and goes to another replica.
    drop(listener);
    let _ = drain.send(true);
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    match tokio::time::timeout(limits.drain_timeout, slots.acquire_many(all)).await {
        Ok(_) => tracing::info!("drained: every connection ended"),
        Err(_) => tracing::warn!(
            open = max_connections.saturating_sub(slots.available_permits()),
            "the drain deadline passed; closing the connections left"
        ),
    }
}

/// One connection: handshake, then HTTP until it ends or idles. Each request carries the
/// peer's address as axum's `ConnectInfo<SocketAddr>`, as `into_make_service_with_connect_info`
/// would give it, for per-address limits.
async fn serve_connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    limits: ServeLimits,
    mut draining: tokio::sync::watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let Ok(Ok(tls)) = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await else {
        return;
    };
    // The protocol is the one ALPN agreed: no bytes are read to guess it.
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: tls,
        activity: activity.clone(),
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    // No HTTP/2 keep-alive PINGs of our own: the idle watchdog ends a dead peer's connection
    // as it ends a silent one, and bytes we send must not be what keeps a connection open.
    builder.http2().timer(TokioTimer::new());
    let builder = if h2 { builder.http2_only() } else { builder.http1_only() };
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        })
        .service(app);
    let connection = builder.serve_connection(io, TowerToHyperService::new(service));
    tokio::pin!(connection);
    let aged = tokio::time::sleep(limits.max_connection_age);
    tokio::pin!(aged);
    // Once closing began: how long what is in flight may still take. A peer that never lets a
    // graceful close finish (an HTTP/2 peer that never acknowledges its GOAWAY's PING) is cut
    // off then.
    let closing = tokio::time::sleep(Duration::MAX);
    tokio::pin!(closing);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = activity.idle_for(limits.idle_timeout) => {
                tracing::debug!("idle connection closed");
                return;
            }
            // Draining: the request in flight is answered, then the connection closes (HTTP/2:
            // GOAWAY); an idle one closes now.
            _ = draining.wait_for(|draining| *draining), if !shutting_down => {
                shutting_down = true;
                connection.as_mut().graceful_shutdown();
                closing.as_mut().reset((Instant::now() + limits.drain_timeout).into());
            }
            // Old enough: closed the same way.
            () = &mut aged, if !shutting_down => {
                tracing::debug!("connection reached its maximum age");
                shutting_down = true;
                connection.as_mut().graceful_shutdown();
                closing.as_mut().reset((Instant::now() + limits.drain_timeout).into());
            }
            () = &mut closing, if shutting_down => {
                tracing::debug!("connection closed: its close did not finish in time");
                return;
            }
        }
    }
}

/// Single-threaded Tokio runtimes, each on a thread of its own, for [`serve_tls_on_cores`]:
/// thread per core, each connection on one thread for its whole life.
///
/// Why: on Tokio's multi-threaded runtime, a POST wakes a second worker for nothing. When a
/// handler takes a request body's data from hyper's HTTP/1.1 body channel, hyper wakes the
/// channel's sender, which is the connection's own task; Tokio treats that as a yield and
/// notifies a parked worker, which finds no work and parks again. A single-threaded runtime has
/// no other worker. Measured with `pap-company`'s join in memory (company/README.md): half the
/// wake-ups per join at concurrency 1; its CPU and throughput moved within the test machine's
/// run-to-run spread (from 12 % fewer to 10 % more joins a second, level by level and run by
/// run).
///
/// What it costs, against the multi-threaded runtime:
/// - Connections are spread by their count, not their work, and never move: one busy
///   connection (an HTTP/2 one with many streams) fills its core while another core idles.
/// - A handler that blocks stops its whole core, the deadlines of the connections there
///   included; `tokio::task::block_in_place` panics on these runtimes.
/// - A handler that waits on a client driven by another runtime (a Redis connection made on the
///   caller's) is woken across threads for each answer, and there the cores cost more than
///   they save.
/// - Each core holds a few file descriptors of its own (its poller, a waker) beyond
///   [`RESERVED_FILES`], and a blocking pool of its own.
///
/// Clones share the runtimes. When the last clone is dropped, the runtimes stop soon after, on
/// their own threads, and connections still open on them close; the threads are not waited for.
#[derive(Clone)]
pub struct CoreRuntimes(Arc<Cores>);

impl std::fmt::Debug for CoreRuntimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreRuntimes")
            .field("open_connections", &self.open_connections())
            .finish()
    }
}

/// At least one core, by construction: the first, then the rest.
struct Cores {
    first: Core,
    rest: Vec<Core>,
    /// Told each time a connection on any core ends.
    closed: Arc<tokio::sync::Notify>,
}

impl Cores {
    fn iter(&self) -> impl Iterator<Item = &Core> {
        std::iter::once(&self.first).chain(&self.rest)
    }
}

struct Core {
    handle: tokio::runtime::Handle,
    /// Connections open on this core.
    open: Arc<AtomicUsize>,
    /// Cleared when the core's thread ends.
    running: Arc<std::sync::atomic::AtomicBool>,
    /// Dropped to stop the core's runtime.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Clears a core's `running` when its thread ends, however it ends.
struct Running(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl CoreRuntimes {
    /// One runtime per core this process may use (`std::thread::available_parallelism`), its
    /// threads named `name-0`, `name-1`...
    pub fn one_per_core(name: &str) -> io::Result<Self> {
        Self::new(std::thread::available_parallelism()?, name)
    }

    /// `count` runtimes, their threads named `name-0`, `name-1`...
    pub fn new(count: NonZeroUsize, name: &str) -> io::Result<Self> {
        let mut cores = (0..count.get())
            .map(|n| {
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let (made, handle) = std::sync::mpsc::sync_channel(1);
                let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
                let on_exit = Running(running.clone());
                // The runtime is made on its own thread and ends there: a runtime dropped on a
                // caller's async thread would panic.
                std::thread::Builder::new().name(format!("{name}-{n}")).spawn(move || {
                    let _on_exit = on_exit;
                    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        Ok(runtime) => {
                            let _ = made.send(Ok(runtime.handle().clone()));
                            // Runs the core's tasks until told to stop; dropping the runtime
                            // then ends what is left.
                            let _ = runtime.block_on(stopped);
                        }
                        Err(error) => {
                            let _ = made.send(Err(error));
                        }
                    }
                })?;
                let handle = handle
                    .recv()
                    .map_err(|_| io::Error::other("a core's thread ended before its runtime was made"))??;
                Ok(Core {
                    handle,
                    open: Arc::new(AtomicUsize::new(0)),
                    running,
                    _stop: stop,
                })
            })
            .collect::<io::Result<std::collections::VecDeque<_>>>()?;
        let first = cores
            .pop_front()
            .ok_or_else(|| io::Error::other("no core runtime was made"))?;
        Ok(Self(Arc::new(Cores {
            first,
            rest: cores.into(),
            closed: Arc::new(tokio::sync::Notify::new()),
        })))
    }

    /// How many runtimes there are (at least one).
    pub fn count(&self) -> NonZeroUsize {
        NonZeroUsize::MIN.saturating_add(self.0.rest.len())
    }

    /// Each runtime's handle, in the order of their threads' names.
    pub fn handles(&self) -> impl Iterator<Item = &tokio::runtime::Handle> {
        self.0.iter().map(|core| &core.handle)
    }

    /// Connections open on each core now, in the order of their threads' names.
    pub fn open_connections(&self) -> Vec<usize> {
        self.0.iter().map(|core| core.open.load(Ordering::Relaxed)).collect()
    }

    /// Completes when a connection on any core next ends (after its count fell). To wait for
    /// [`CoreRuntimes::open_connections`] to reach a value without missing an end, `enable` the
    /// returned future before reading the counts.
    pub fn connection_closed(&self) -> tokio::sync::futures::Notified<'_> {
        self.0.closed.notified()
    }

    /// Of the cores still running, the one with the fewest connections open (the first of them
    /// on a tie), and its count raised by one until the returned guard is dropped; none if no
    /// core runs.
    fn least_busy(&self) -> Option<(tokio::runtime::Handle, OpenConnection)> {
        let open = |core: &Core| core.open.load(Ordering::Relaxed);
        let core = self.0.iter().filter(|core| core.running.load(Ordering::Relaxed)).fold(
            None,
            |best: Option<&Core>, core| match best {
                Some(best) if open(best) <= open(core) => Some(best),
                _ => Some(core),
            },
        )?;
        core.open.fetch_add(1, Ordering::Relaxed);
        Some((
            core.handle.clone(),
            OpenConnection(core.open.clone(), self.0.closed.clone()),
        ))
    }
}

/// One connection counted open on a core, until dropped: then its core's count falls and
/// [`CoreRuntimes::connection_closed`] is told.
struct OpenConnection(Arc<AtomicUsize>, Arc<tokio::sync::Notify>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        self.1.notify_waiters();
    }
}

/// The address a peer counts as: IPv4 as it is (an IPv4-mapped IPv6 address too), IPv6 by its
/// /64, which one host usually holds whole.
pub fn counted_address(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// When a connection last moved a byte, in milliseconds since it began.
struct Activity {
    began: Instant,
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            began: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.began.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    /// Completes once `limit` has passed with no byte moved.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = self.began + last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// A stream that records each byte moved in its [`Activity`].
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The next connection on `listener`: a failure that is one connection's is skipped at once;
/// one that is the process's (out of files, out of memory) is logged and waited out for
/// a second, so a full process does not spin. Every accept loop here uses it.
pub async fn accept(listener: &TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) if is_connection_error(&error) => {}
            Err(error) => {
                tracing::warn!(%error, "accept failed; resting before the next");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// An `accept` error that is one connection's (it went away before it was taken): try the next
/// at once. Anything else (out of files, out of memory) is the process's, and waits.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Raises this process's soft open-file limit to its hard limit, so the connection cap rather
/// than the file table is what bounds the server; the limit now in force.
pub fn raise_open_file_limit() -> io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    }
    Ok(hard.max(soft))
}

/// `wanted` connections, or fewer if the open-file limit cannot hold them and the reserve.
fn clamp_to_open_files(wanted: usize) -> usize {
    let Ok((soft, _)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) else {
        return wanted;
    };
    let room = usize::try_from(soft)
        .unwrap_or(usize::MAX)
        .saturating_sub(RESERVED_FILES)
        .max(1);
    if room < wanted {
        tracing::warn!(
            wanted,
            room,
            "the open-file limit holds fewer connections than the cap; the cap is lowered to fit"
        );
    }
    wanted.min(room)
}
