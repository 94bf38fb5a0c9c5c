//! A rendezvous broker (AIP-59 "Roles"; issue 26's item 6) a person can run for their own
//! pairings: it pairs the two WebSockets that present the same route
//! (`GET <any path>?side=daemon|client&t=<route>`) and relays their messages unmodified, so it
//! learns routes, addresses, sizes and timing, and nothing it could use to read, forge or pair.
//!
//! ```text
//!  connections     always accepted; at most `max_connections_per_address` from one address
//!                  (IPv6 by its /64), past which a new one is closed at once; past
//!                  `max_connections` in all, a newcomer is seated by closing (1013) the oldest
//!                  socket of the heaviest holder, networks (IPv4 /24, IPv6 /48) sharing
//!                  max-min fairly (`room`), or closed at once
//!  dialing         at most `upgrade_burst` connections from one address, then
//!                  `upgrades_per_minute`; past them closed at once
//!  upgrade         within `handshake_timeout` (the TLS handshake included, with
//!                  [`serve_tls`]); a bad side or route is refused 400
//!  a lone socket   parked until its counterpart comes, at most `park_timeout` (close 4408);
//!                  what it sends meanwhile (16 messages, 64 KiB in all, and
//!                  `max_early_bytes` across the broker) waits
//!  a route         one live socket per side: a second one, or a third on a live pair, 4409
//!  a pair          relayed until either side closes (the other gets 4410), nothing moved
//!                  for `idle_timeout` (both get 4411), or one side took no message for
//!                  `write_timeout` (both get 4410)
//!  a message       at most `max_message_bytes` (1 MiB): a larger one ends its socket's pair
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};

use room::{Room, Seat};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};

mod room;

/// The close codes the broker sends (the reference broker's).
pub mod close {
    /// A lone socket's counterpart never came.
    pub const PARK_TIMEOUT: u16 = 4408;
    /// The route's side is taken, or the route has a live pair.
    pub const ROUTE_IN_USE: u16 = 4409;
    /// The other side of the pair went away.
    pub const PEER_CLOSED: u16 = 4410;
    /// The pair was silent too long.
    pub const IDLE_TIMEOUT: u16 = 4411;
    /// The broker was full and closed this socket to seat another network's (RFC 6455's
    /// "Try Again Later"; not one of the reference broker's codes).
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// The longest route accepted (a route is 22 characters; an epoch route too).
const MAX_ROUTE_LEN: usize = 128;
/// How many messages a parked socket may send before its pair exists (they are relayed once
/// it does)...
const MAX_EARLY_MESSAGES: usize = 16;
/// ...and how many bytes (or `max_message_bytes`, if smaller). What comes early is a device's
/// hello (a few hundred bytes) that beat the host to the route; at this size the default
/// `max_connections` parked sockets hold at most `max_early_bytes` (64 MiB) between them, and
/// one address's share of sockets at most 4 MiB, so no address can take every other socket's
/// room for its hello.
const MAX_EARLY_BYTES: usize = 64 << 10;

/// What the broker bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerLimits {
    /// Sockets open at once.
    pub max_connections: usize,
    /// Sockets open at once from one address (an IPv6 address counts by its /64): a host parks
    /// one per open offer and two per pairing, so one address cannot hold every socket.
    pub max_connections_per_address: usize,
    /// How long the WebSocket upgrade may take.
    pub handshake_timeout: Duration,
    /// How long a lone socket waits for its counterpart.
    pub park_timeout: Duration,
    /// How long a pair may be silent.
    pub idle_timeout: Duration,
    /// How long one message may take to reach a side of a pair: a side that stops reading
    /// (its TCP window full) ends its pair, rather than holding the relay and both seats.
    pub write_timeout: Duration,
    /// The largest message relayed (AIP-59 §5.5: the reference broker's 1 MiB).
    pub max_message_bytes: usize,
    /// Bytes that parked sockets may hold for their pairs, all of them together (each at most
    /// `max_message_bytes`).
    pub max_early_bytes: usize,
    /// Connections one address (counted as above) may open in a burst...
    pub upgrade_burst: u32,
    /// ...and a minute after it: past them a connection is closed at once, before any upgrade
    /// (a host re-parks its routes every `park_timeout`; a guesser dials without end).
    pub upgrades_per_minute: u32,
}

impl Default for BrokerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1_024,
            max_connections_per_address: 64,
            handshake_timeout: Duration::from_secs(10),
            park_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(900),
            write_timeout: Duration::from_secs(30),
            max_message_bytes: 1 << 20,
            max_early_bytes: 64 << 20,
            upgrade_burst: 60,
            upgrades_per_minute: 600,
        }
    }
}

/// How many addresses' upgrade buckets the broker remembers (a bounded cache: an address idle
/// for ten minutes is forgotten, its bucket full again by then anyway).
const MAX_TRACKED_ADDRESSES: u64 = 65_536;

/// Each address's upgrades: a token bucket, `upgrade_burst` deep, refilled at
/// `upgrades_per_minute`.
struct Attempts {
    buckets: moka::sync::Cache<std::net::IpAddr, Arc<Mutex<(f64, std::time::Instant)>>>,
    burst: f64,
    per_second: f64,
}

impl Attempts {
    fn new(limits: &BrokerLimits) -> Self {
        Self {
            buckets: moka::sync::Cache::builder()
                .max_capacity(MAX_TRACKED_ADDRESSES)
                .time_to_idle(Duration::from_secs(600))
                .build(),
            burst: f64::from(limits.upgrade_burst),
            per_second: f64::from(limits.upgrades_per_minute) / 60.0,
        }
    }

    /// Takes one of `address`'s upgrades at `now`, if it has one left.
    fn take(&self, address: std::net::IpAddr, now: std::time::Instant) -> bool {
        let bucket = self
            .buckets
            .get_with(address, || Arc::new(Mutex::new((self.burst, now))));
        let mut bucket = bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(bucket.1).as_secs_f64();
        bucket.0 = (bucket.0 + elapsed * self.per_second).min(self.burst);
        bucket.1 = now;
        if bucket.0 >= 1.0 {
            bucket.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What the broker did, for an operator and for tests: counts, and a journal that is off
/// unless asked for ([`Journal::keep`]).
#[derive(Debug, Default)]
pub struct BrokerStats {
    /// Sockets waiting for their counterpart now.
    pub parked: AtomicUsize,
    /// Pairs relaying now.
    pub active: AtomicUsize,
    /// Pairs made since the start.
    pub splices: AtomicU64,
    /// Upgrades and sockets refused since the start.
    pub refused: AtomicU64,
    /// Sockets closed since the start to seat another network's when the broker was full.
    pub evicted: AtomicU64,
    /// Everything the broker could see, line by line, when kept.
    pub journal: Journal,
}

/// The broker's view of its traffic: each upgrade's request target (the side and the route,
/// which AIP-59 §2.2 makes public) and each relayed message's direction, kind and size. It
/// is all a broker learns, so it shows what a broker operator could log. Bounded: the most
/// recent [`Journal::keep`] lines.
#[derive(Debug, Default)]
pub struct Journal {
    lines: Mutex<std::collections::VecDeque<String>>,
    capacity: AtomicUsize,
}

impl Journal {
    /// Keeps the last `capacity` lines from now on (0: none, the default).
    pub fn keep(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::SeqCst);
    }

    /// The lines kept.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    fn note(&self, line: impl FnOnce() -> String) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        if capacity == 0 {
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        while lines.len() >= capacity {
            lines.pop_front();
        }
        lines.push_back(line());
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Daemon => "daemon",
        Side::Client => "client",
    }
}

fn kind_and_size(message: &Message) -> (&'static str, usize) {
    match message {
        Message::Text(text) => ("text", text.len()),
        Message::Binary(bytes) => ("binary", bytes.len()),
        _ => ("control", message.len()),
    }
}

/// A client's byte stream: the TCP connection, or TLS over it.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

type Ws = WebSocketStream<Box<dyn Io>>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Daemon,
    Client,
}

/// A socket and its place in the [`Room`]: handed to its counterpart's task together, so a
/// live pair holds both sides' seats and either side's eviction ends it.
struct Held {
    ws: Ws,
    seat: Seat,
}

/// A route's state: one side parked (and how to hand it its counterpart), or a live pair.
enum Route {
    Parked {
        side: Side,
        id: u64,
        deliver: oneshot::Sender<Held>,
    },
    Live,
}

#[derive(Default)]
struct Routes {
    map: Mutex<HashMap<String, Route>>,
    next_id: AtomicU64,
}

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Route>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves the broker on `listener` until `shutdown` completes, plain WebSocket (`ws:`: for
/// loopback, or behind a TLS terminator).
pub async fn serve(
    listener: TcpListener,
    limits: BrokerLimits,
    stats: Arc<BrokerStats>,
    shutdown: impl Future<Output = ()>,
) {
    run(listener, None, limits, stats, shutdown).await;
}

/// Serves the broker on `listener` over TLS (`wss:`) with `tls` until `shutdown` completes.
/// The TLS handshake and the upgrade share `handshake_timeout`. The configuration offers
/// HTTP/1.1 only (a WebSocket upgrade is an HTTP/1.1 request).
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    limits: BrokerLimits,
    stats: Arc<BrokerStats>,
    shutdown: impl Future<Output = ()>,
) {
    let mut config = (*tls).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    run(listener, Some(acceptor), limits, stats, shutdown).await;
}

async fn run(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: BrokerLimits,
    stats: Arc<BrokerStats>,
    shutdown: impl Future<Output = ()>,
) {
    let room = Room::new(limits.max_connections, limits.max_connections_per_address);
    let early = Arc::new(Semaphore::new(limits.max_early_bytes.min(Semaphore::MAX_PERMITS)));
    let attempts = Attempts::new(&limits);
    let routes = Arc::new(Routes::default());
    tokio::pin!(shutdown);
    // Never waits for room before accepting: a full broker makes room, or closes the newcomer
    // at once (S6: a cap taken before `accept` stopped the loop for everyone).
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = pap_net::serve::accept(&listener) => accepted,
            () = &mut shutdown => return,
        };
        let address = pap_net::serve::counted_address(peer.ip());
        if !attempts.take(address, std::time::Instant::now()) {
            // Closed at once: the address dials faster than any host re-parks.
            stats.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let seat = match room.seat(peer.ip()) {
            Ok(seat) => seat,
            // Closed at once: the address holds its share already, or the broker is full and
            // its network holds as many as any.
            Err(_) => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let (routes, stats, tls, early) = (routes.clone(), stats.clone(), tls.clone(), early.clone());
        tokio::spawn(async move {
            connection(tcp, tls, seat, limits, &routes, &stats, &early).await;
        });
    }
}

/// The side and route of an upgrade request, or why not.
fn parse_upgrade(request: &Request) -> Option<(Side, String)> {
    let query = request.uri().query()?;
    let (mut side, mut route) = (None, None);
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*name {
            "side" if side.is_none() => {
                side = Some(match &*value {
                    "daemon" => Side::Daemon,
                    "client" => Side::Client,
                    _ => return None,
                });
            }
            "t" if route.is_none() => route = Some(value.into_owned()),
            "side" | "t" => return None,
            _ => {}
        }
    }
    let route = route.filter(|r| {
        !r.is_empty()
            && r.len() <= MAX_ROUTE_LEN
            && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })?;
    Some((side?, route))
}

#[allow(
    clippy::result_large_err,
    reason = "the upgrade callback's error type is tungstenite's HTTP response"
)]
async fn connection(
    tcp: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    seat: Seat,
    limits: BrokerLimits,
    routes: &Routes,
    stats: &BrokerStats,
    early: &Arc<Semaphore>,
) {
    let mut upgrade = None;
    let callback = |request: &Request, response: Response| match parse_upgrade(request) {
        Some(parsed) => {
            stats.journal.note(|| format!("upgrade GET {}", request.uri()));
            upgrade = Some(parsed);
            Ok(response)
        }
        None => {
            let mut refusal = ErrorResponse::new(Some(
                "a rendezvous upgrade needs side=daemon|client and t=<route>\n".to_owned(),
            ));
            *refusal.status_mut() = StatusCode::BAD_REQUEST;
            Err(refusal)
        }
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_message_bytes))
        .max_frame_size(Some(limits.max_message_bytes));
    let handshake = async {
        let io: Box<dyn Io> = match tls {
            Some(acceptor) => Box::new(acceptor.accept(tcp).await.ok()?),
            None => Box::new(tcp),
        };
        tokio_tungstenite::accept_hdr_async_with_config(io, callback, Some(config))
            .await
            .ok()
    };
    let upgraded = tokio::select! {
        upgraded = tokio::time::timeout(limits.handshake_timeout, handshake) => upgraded,
        () = seat.evicted() => {
            stats.evicted.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let Ok(Some(ws)) = upgraded else {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Some((side, route)) = upgrade else {
        return;
    };
    arrive(Held { ws, seat }, side, route, limits, routes, stats, early).await;
}

/// What a socket arriving on a route does.
enum Arrival {
    /// Its counterpart is parked: hand the socket over.
    Complete(oneshot::Sender<Held>),
    /// The route's side is taken, or the route has a live pair.
    Refuse,
    /// Park, waiting on this.
    Park(u64, oneshot::Receiver<Held>),
}

impl Routes {
    /// Decides, under the lock, what a socket of `side` on `route` does.
    fn arrive(&self, route: &str, side: Side) -> Arrival {
        let mut map = self.lock();
        match map.remove(route) {
            Some(Route::Parked {
                side: parked, deliver, ..
            }) if parked != side => {
                map.insert(route.to_owned(), Route::Live);
                Arrival::Complete(deliver)
            }
            Some(taken) => {
                map.insert(route.to_owned(), taken);
                Arrival::Refuse
            }
            None => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let (deliver, delivered) = oneshot::channel();
                map.insert(route.to_owned(), Route::Parked { side, id, deliver });
                Arrival::Park(id, delivered)
            }
        }
    }

    /// Forgets `route` if it is still the parking of `id`.
    fn unpark(&self, route: &str, id: u64) {
        let mut map = self.lock();
        if matches!(map.get(route), Some(Route::Parked { id: held, .. }) if *held == id) {
            map.remove(route);
        }
    }

    fn forget(&self, route: &str) {
        self.lock().remove(route);
    }
}

/// A socket on `route`: it completes a parked counterpart, or parks, or is refused.
async fn arrive(
    mut own: Held,
    side: Side,
    route: String,
    limits: BrokerLimits,
    routes: &Routes,
    stats: &BrokerStats,
    early_budget: &Arc<Semaphore>,
) {
    let (id, delivered) = loop {
        match routes.arrive(&route, side) {
            // The parked task relays from here; if it just ended (its socket closed or timed
            // out), this socket arrives again and parks in its place.
            Arrival::Complete(deliver) => match deliver.send(own) {
                Ok(()) => return,
                Err(back) => {
                    routes.forget(&route);
                    own = back;
                }
            },
            Arrival::Refuse => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                end(&mut own.ws, close::ROUTE_IN_USE, "route in use").await;
                return;
            }
            Arrival::Park(id, delivered) => break (id, delivered),
        }
    };
    stats.parked.fetch_add(1, Ordering::Relaxed);
    let mut delivered = delivered;
    // What a parked socket sends before its pair exists (a device's hello that beat the host
    // to the route) waits for the pair, a bounded amount of it: per socket
    // (`MAX_EARLY_BYTES`) and across the broker (`max_early_bytes`). (A message the socket
    // has begun but not finished sending sits in tungstenite's read buffer, outside this
    // count: up to `max_message_bytes` more per socket, as on any socket.)
    let early_cap = MAX_EARLY_BYTES.min(limits.max_message_bytes);
    let mut early: Vec<Message> = Vec::new();
    let mut early_bytes = 0_usize;
    let mut early_held = Vec::new();
    let park_deadline = tokio::time::sleep(limits.park_timeout);
    tokio::pin!(park_deadline);
    let mut evicted = false;
    let (counterpart, own_ended) = loop {
        tokio::select! {
            peer = &mut delivered => break (peer.ok(), false),
            message = own.ws.next() => match message {
                Some(Ok(message @ (Message::Text(_) | Message::Binary(_))))
                    if early.len() < MAX_EARLY_MESSAGES
                        && early_bytes + message.len() <= early_cap =>
                {
                    let Some(bytes) = u32::try_from(message.len())
                        .ok()
                        .and_then(|n| early_budget.clone().try_acquire_many_owned(n).ok())
                    else {
                        break (None, true);
                    };
                    early_held.push(bytes);
                    early_bytes += message.len();
                    early.push(message);
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                // Its close, an error, or more early data than a pair may hold: it ends.
                _ => break (None, true),
            },
            () = own.seat.evicted() => {
                evicted = true;
                break (None, true);
            }
            () = &mut park_deadline => break (None, false),
        }
    };
    // A counterpart may have been handed over in the same instant: closing the channel first
    // makes any later hand-over fail (that socket then parks itself), and takes this one.
    let counterpart = counterpart.or_else(|| {
        delivered.close();
        delivered.try_recv().ok()
    });
    stats.parked.fetch_sub(1, Ordering::Relaxed);
    if evicted {
        stats.evicted.fetch_add(1, Ordering::Relaxed);
    }
    let peer = match counterpart {
        Some(mut peer) if own_ended => {
            routes.forget(&route);
            end(&mut peer.ws, close::PEER_CLOSED, "peer closed").await;
            if evicted {
                end(&mut own.ws, close::TRY_AGAIN_LATER, "the broker is full").await;
            }
            return;
        }
        Some(peer) => peer,
        None => {
            routes.unpark(&route, id);
            let (code, reason) = if evicted {
                (close::TRY_AGAIN_LATER, "the broker is full")
            } else {
                if !own_ended {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                }
                (close::PARK_TIMEOUT, "no counterpart came")
            };
            end(&mut own.ws, code, reason).await;
            return;
        }
    };
    stats.splices.fetch_add(1, Ordering::Relaxed);
    stats.active.fetch_add(1, Ordering::Relaxed);
    let (mut a, mut b) = (own, peer);
    let mut code = None;
    let other = if side == Side::Daemon {
        Side::Client
    } else {
        Side::Daemon
    };
    for message in early {
        stats.journal.note(|| {
            let (kind, size) = kind_and_size(&message);
            format!(
                "relay {}→{} {kind} {size} bytes (held while parked)",
                side_name(side),
                side_name(other)
            )
        });
        if let Err(ended) = forward(&mut b.ws, message, [&a.seat, &b.seat], limits.write_timeout).await {
            code = Some(ended);
            break;
        }
    }
    drop(early_held);
    if code.is_none() {
        // A full room closes parked sockets before a live pair's.
        a.seat.live();
        b.seat.live();
    }
    let code = match code {
        Some(code) => code,
        None => relay(&mut a, &mut b, [side, other], limits, &stats.journal).await,
    };
    // The route is free before either side hears of the end, so a side that dials again at
    // once is not refused.
    routes.forget(&route);
    stats.active.fetch_sub(1, Ordering::Relaxed);
    if code == close::TRY_AGAIN_LATER {
        stats.evicted.fetch_add(1, Ordering::Relaxed);
    }
    let reason = match code {
        close::IDLE_TIMEOUT => "idle",
        close::TRY_AGAIN_LATER => "the broker is full",
        _ => "peer closed",
    };
    end(&mut a.ws, code, reason).await;
    end(&mut b.ws, code, reason).await;
}

/// What ended a relay's wait for its next message.
enum Next {
    Message(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>, bool),
    Evicted,
}

/// Sends `message` to `to` within `deadline`, unless either seat of the pair is evicted first;
/// the close code the pair ends with if not.
async fn forward(to: &mut Ws, message: Message, seats: [&Seat; 2], deadline: Duration) -> Result<(), u16> {
    tokio::select! {
        sent = tokio::time::timeout(deadline, to.send(message)) => match sent {
            Ok(Ok(())) => Ok(()),
            // It failed, or its side stopped reading: the pair ends as if it closed.
            Ok(Err(_)) | Err(_) => Err(close::PEER_CLOSED),
        },
        () = seats[0].evicted() => Err(close::TRY_AGAIN_LATER),
        () = seats[1].evicted() => Err(close::TRY_AGAIN_LATER),
    }
}

/// Relays every message between `a` and `b` unmodified until one side closes, fails, sends
/// past the limit, stops reading for `write_timeout`, is evicted, or both are silent for
/// `idle_timeout`; the close code both sides get.
async fn relay(a: &mut Held, b: &mut Held, sides: [Side; 2], limits: BrokerLimits, journal: &Journal) -> u16 {
    loop {
        let next = tokio::time::timeout(limits.idle_timeout, async {
            tokio::select! {
                message = a.ws.next() => Next::Message(message, true),
                message = b.ws.next() => Next::Message(message, false),
                () = a.seat.evicted() => Next::Evicted,
                () = b.seat.evicted() => Next::Evicted,
            }
        })
        .await;
        let (message, from_a) = match next {
            Err(_) => return close::IDLE_TIMEOUT,
            Ok(Next::Evicted) => return close::TRY_AGAIN_LATER,
            Ok(Next::Message(message, from_a)) => (message, from_a),
        };
        let seats = [&a.seat, &b.seat];
        let to = if from_a { &mut b.ws } else { &mut a.ws };
        match message {
            Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
                journal.note(|| {
                    let (kind, size) = kind_and_size(&message);
                    let [from, to] = if from_a { sides } else { [sides[1], sides[0]] };
                    format!("relay {}→{} {kind} {size} bytes", side_name(from), side_name(to))
                });
                if let Err(code) = forward(to, message, seats, limits.write_timeout).await {
                    return code;
                }
            }
            // tungstenite answers PINGs itself; the answer goes out with the next write.
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
            Some(Ok(Message::Close(_)) | Err(_)) | None => return close::PEER_CLOSED,
        }
    }
}

/// Closes `ws` with `code`, briefly: a peer that does not answer the close is dropped.
async fn end(ws: &mut Ws, code: u16, reason: &str) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(Some(frame))).await;
}
