//! The sockets of a pairing (feature `net`): dialing a rendezvous broker as the daemon or the
//! client of a route (`ws:` on loopback, `wss:` over rustls), the handshake's two messages,
//! and then a [`Link`]: tunnel frames through the `e2e` channel, split into a sending and a
//! receiving half so one task can read while others write.
//!
//! Only the route reaches the broker (`?side=…&t=<route>`, §2.2); the hello is sealed, the
//! reply is signed, and every later message is an `e2e` envelope.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use pap_shared::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::PairError;
use crate::channel::{ChannelError, Receiver, Sender};
use crate::handshake::{ClientHandshake, Framing, Hello, Reply, Session, handshake_text, read_handshake};
use crate::keys::{Ed25519Public, X25519Public};
use crate::tunnel::{Frame, FrameDecodeError, PAIRING_REVOKED};

/// The largest WebSocket message either side takes: the reference broker's cap (§5.5).
pub const MAX_MESSAGE: usize = 1 << 20;
/// How long dialing a broker (TCP, TLS, the upgrade) may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a peer may take to answer a handshake message or send its first frame.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// Which end of a route a socket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The host that parks and answers.
    Daemon,
    /// The device that dials and says hello.
    Client,
}

impl Side {
    fn as_str(self) -> &'static str {
        match self {
            Self::Daemon => "daemon",
            Self::Client => "client",
        }
    }
}

/// Why a socket, a handshake or a link failed. Names no route, token or key.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The broker's URL is not a `wss:` URL, or a `ws:` URL on loopback.
    #[error("the rendezvous URL is not a wss: URL (ws: only on this machine's loopback)")]
    Url,
    /// The broker could not be reached or refused the upgrade.
    #[error("the rendezvous broker could not be reached: {0}")]
    Dial(String),
    /// A deadline passed (dialing, a handshake answer, the first frame).
    #[error("the peer did not answer in time")]
    Timeout,
    /// The socket closed (the broker's close code, if it gave one).
    #[error("the connection closed{}", .0.map(|c| format!(" (code {c})")).unwrap_or_default())]
    Closed(Option<u16>),
    /// A handshake message that is not one, or over the size cap.
    #[error("the peer sent something that is not a handshake message")]
    Protocol,
    /// The handshake failed.
    #[error(transparent)]
    Pair(#[from] PairError),
    /// The `e2e` channel failed: it is closed for good.
    #[error("the encrypted channel failed: {0}")]
    Channel(#[from] ChannelError),
    /// A frame inside the channel that is not a tunnel frame this side knows.
    #[error(transparent)]
    Frame(#[from] FrameDecodeError),
    /// The daemon revoked this pairing (an authenticated `pairing_revoked`, §6.3).
    #[error("the host revoked this pairing: pair again from a new offer")]
    Revoked,
    /// The WebSocket failed mid-way.
    #[error("the connection failed: {0}")]
    Socket(String),
}

/// Anything a WebSocket can run over: a TCP stream, or TLS over one.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A socket to the broker, before or during the handshake.
pub type Socket = WebSocketStream<Box<dyn Io>>;

fn socket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// Dials brokers: one TLS client configuration for `wss:` (the web PKI and any extra roots).
#[derive(Clone)]
pub struct Dialer {
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer").finish_non_exhaustive()
    }
}

impl Dialer {
    /// A dialer trusting the web PKI and `extra_roots` (a private CA's certificates, DER).
    pub fn new(extra_roots: &[rustls::pki_types::CertificateDer<'static>]) -> Result<Self, LinkError> {
        let roots = pap_net::tls::trust_roots(extra_roots).map_err(|e| LinkError::Dial(e.to_string()))?;
        let config = pap_net::tls::client_config(roots).map_err(|e| LinkError::Dial(e.to_string()))?;
        Ok(Self {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// Opens `side` of `route` on the broker at `rendezvous` (`ws:` or `wss:`), within
    /// [`DIAL_TIMEOUT`].
    pub async fn dial(&self, rendezvous: &str, side: Side, route: &str) -> Result<Socket, LinkError> {
        if !crate::offer::rendezvous_allowed(rendezvous) {
            return Err(LinkError::Url);
        }
        let mut url = url::Url::parse(rendezvous).map_err(|_| LinkError::Url)?;
        let tls = match url.scheme() {
            "wss" => true,
            "ws" => false,
            _ => return Err(LinkError::Url),
        };
        url.query_pairs_mut()
            .append_pair("side", side.as_str())
            .append_pair("t", route);
        let host = url.host_str().ok_or(LinkError::Url)?.to_owned();
        let port = url.port_or_known_default().ok_or(LinkError::Url)?;
        let dialing = async {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let tcp = tokio::net::TcpStream::connect((bare, port))
                .await
                .map_err(|e| LinkError::Dial(e.kind().to_string()))?;
            // Frames are small and interactive (a tool call, an SSE event): no Nagle delay.
            let _ = tcp.set_nodelay(true);
            let io: Box<dyn Io> = if tls {
                let name = rustls::pki_types::ServerName::try_from(bare.to_owned()).map_err(|_| LinkError::Url)?;
                Box::new(
                    self.tls
                        .connect(name, tcp)
                        .await
                        .map_err(|e| LinkError::Dial(format!("TLS: {e}")))?,
                )
            } else {
                Box::new(tcp)
            };
            let (socket, _) = tokio_tungstenite::client_async_with_config(url.as_str(), io, Some(socket_config()))
                .await
                .map_err(|e| LinkError::Dial(upgrade_error(&e)))?;
            Ok(socket)
        };
        tokio::time::timeout(DIAL_TIMEOUT, dialing)
            .await
            .map_err(|_| LinkError::Timeout)?
    }
}

/// A tungstenite error without the URL (which holds the route).
fn upgrade_error(error: &tokio_tungstenite::tungstenite::Error) -> String {
    match error {
        tokio_tungstenite::tungstenite::Error::Http(response) => format!("HTTP {}", response.status()),
        tokio_tungstenite::tungstenite::Error::Io(e) => e.kind().to_string(),
        _ => "the WebSocket upgrade failed".to_owned(),
    }
}

/// Sends one handshake message in `framing` (a text message).
pub async fn send_handshake(socket: &mut Socket, value: &impl Serialize, framing: Framing) -> Result<(), LinkError> {
    let text = handshake_text(value, framing).map_err(|_| LinkError::Protocol)?;
    socket
        .send(Message::text(text))
        .await
        .map_err(|e| LinkError::Socket(e.to_string()))
}

/// The next data message (text or binary), skipping control messages; `None` when the
/// socket closed.
async fn next_data(stream: &mut (impl futures_util::Stream<Item = WsResult> + Unpin)) -> Result<Vec<u8>, LinkError> {
    loop {
        match stream.next().await {
            None => return Err(LinkError::Closed(None)),
            Some(Err(e)) => return Err(LinkError::Socket(e.to_string())),
            Some(Ok(Message::Text(text))) => return Ok(text.as_bytes().to_vec()),
            Some(Ok(Message::Binary(bytes))) => return Ok(bytes.to_vec()),
            Some(Ok(Message::Close(frame))) => return Err(LinkError::Closed(frame.map(|f| u16::from(f.code)))),
            Some(Ok(_)) => {}
        }
    }
}

type WsResult = Result<Message, tokio_tungstenite::tungstenite::Error>;

/// Waits for one handshake message in either framing, `deadline` at most (`None`: as long as
/// the socket lives, for a parked daemon whose broker ends the wait).
pub async fn recv_handshake<T: DeserializeOwned>(
    socket: &mut Socket,
    deadline: Option<Duration>,
) -> Result<(T, Framing), LinkError> {
    let data = match deadline {
        Some(deadline) => tokio::time::timeout(deadline, next_data(socket))
            .await
            .map_err(|_| LinkError::Timeout)??,
        None => next_data(socket).await?,
    };
    read_handshake(&data).ok_or(LinkError::Protocol)
}

/// A live channel after a handshake, before it is split.
pub struct Link {
    socket: Socket,
    sender: Sender,
    receiver: Receiver,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

impl Link {
    /// The channel of `session` over `socket`.
    pub fn new(socket: Socket, session: &Session) -> Result<Self, LinkError> {
        Ok(Self {
            socket,
            sender: Sender::new(&session.send_key)?,
            receiver: Receiver::new(&session.recv_key)?,
        })
    }

    /// Its sending and receiving halves.
    pub fn split(self) -> (LinkSender, LinkReceiver) {
        let (sink, stream) = self.socket.split();
        (
            LinkSender {
                sink,
                channel: self.sender,
            },
            LinkReceiver {
                stream,
                channel: self.receiver,
            },
        )
    }
}

/// Sends frames, sealed in order.
pub struct LinkSender {
    sink: SplitSink<Socket, Message>,
    channel: Sender,
}

impl std::fmt::Debug for LinkSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSender").finish_non_exhaustive()
    }
}

impl LinkSender {
    /// Seals and sends `frame`.
    pub async fn send(&mut self, frame: &Frame) -> Result<(), LinkError> {
        let envelope = self.channel.seal(&frame.encode())?;
        let text = serde_json::to_string(&envelope).map_err(|_| LinkError::Protocol)?;
        self.sink
            .send(Message::text(text))
            .await
            .map_err(|e| LinkError::Socket(e.to_string()))
    }

    /// Closes the socket (after the frames already sent).
    pub async fn close(&mut self) {
        let _ = self.sink.close().await;
    }
}

/// Receives frames, opened in order; the first failure ends it.
pub struct LinkReceiver {
    stream: SplitStream<Socket>,
    channel: Receiver,
}

impl std::fmt::Debug for LinkReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkReceiver").finish_non_exhaustive()
    }
}

impl LinkReceiver {
    /// The next frame. A message that is not an `e2e` envelope, a replay, a reorder or a bad
    /// tag ends the channel (§3.5).
    pub async fn recv(&mut self) -> Result<Frame, LinkError> {
        let data = next_data(&mut self.stream).await?;
        let text = std::str::from_utf8(&data).map_err(|_| LinkError::Channel(ChannelError::Decode))?;
        let plain = self.channel.open(text)?;
        Ok(Frame::decode(&plain)?)
    }
}

/// What a client knows of the daemon it dials: the keys pinned from the offer or credential.
#[derive(Clone, Debug)]
pub struct Pins {
    /// `pk`.
    pub x25519: X25519Public,
    /// `sk`.
    pub ed25519: Ed25519Public,
}

/// Dials `route` as a client, says hello with `auth`, checks the signed reply against `pins`
/// and waits for the daemon's first frame: its `hello` (whose label is returned with the
/// halves and the session), or an authenticated `pairing_revoked` ([`LinkError::Revoked`]).
pub async fn connect_client(
    dialer: &Dialer,
    rendezvous: &str,
    route: &str,
    pins: &Pins,
    auth: &str,
    client_name: &str,
    rng: &dyn Rng,
) -> Result<(LinkSender, LinkReceiver, Session, Option<String>), LinkError> {
    let mut socket = dialer.dial(rendezvous, Side::Client, route).await?;
    let handshake = ClientHandshake::start(pins.x25519, pins.ed25519, auth, client_name, rng)?;
    // The reference's framing: a reference daemon drops a bare hello unread.
    send_handshake(&mut socket, handshake.hello(), Framing::Frame).await?;
    let (reply, _): (Reply, _) = recv_handshake(&mut socket, Some(HANDSHAKE_TIMEOUT)).await?;
    let session = handshake.complete(&reply)?;
    let (sender, mut receiver) = Link::new(socket, &session)?.split();
    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, receiver.recv())
        .await
        .map_err(|_| LinkError::Timeout)??;
    match first {
        Frame::Hello { label, .. } => Ok((sender, receiver, session, label)),
        Frame::Error { code, .. } if code == PAIRING_REVOKED => Err(LinkError::Revoked),
        _ => Err(LinkError::Protocol),
    }
}

/// The hello a parked daemon socket receives first (no deadline: the broker ends a lone wait),
/// and the framing it came in, which the reply is sent in.
pub async fn await_hello(socket: &mut Socket) -> Result<(Hello, Framing), LinkError> {
    recv_handshake(socket, None).await
}
