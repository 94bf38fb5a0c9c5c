//! `serve_tls_with` against real TLS clients on 127.0.0.1: what a stranger can hold and for how
//! long (security review H2). Limits are short here so each bound is seen in about a second.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use pap_net::serve::{CoreRuntimes, ServeLimits, serve_tls_on_cores, serve_tls_with};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const SHORT: Duration = Duration::from_secs(1);
/// How long past a limit a closed connection may take to be seen closed.
const GRACE: Duration = Duration::from_secs(2);

struct Server {
    addr: SocketAddr,
    connector: TlsConnector,
    /// The same, offering only `h2`.
    h2_connector: TlsConnector,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

async fn server(limits: ServeLimits) -> Server {
    let pki = test_pki("shop.example");
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/echo", post(|body: String| async move { body }));
    server_of(app, limits, pki.server, &[pki.ca_der]).await.0
}

/// Serves `app` with `config`, trusting `cas`; the server, and the serving task (it ends when
/// the drain does).
async fn server_of(
    app: Router,
    limits: ServeLimits,
    config: Arc<rustls::ServerConfig>,
    cas: &[Vec<u8>],
) -> (Server, tokio::task::JoinHandle<()>) {
    server_on(app, limits, config, cas, None).await
}

/// [`server_of`], each connection on one of `cores` if given ([`serve_tls_on_cores`]).
async fn server_on(
    app: Router,
    limits: ServeLimits,
    config: Arc<rustls::ServerConfig>,
    cas: &[Vec<u8>],
    cores: Option<CoreRuntimes>,
) -> (Server, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let serving = match cores {
        None => tokio::spawn(serve_tls_with(listener, app, config, limits, stopped)),
        Some(cores) => tokio::spawn(serve_tls_on_cores(listener, app, config, limits, cores, stopped)),
    };
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(CertificateDer::from(ca.clone())).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every connection a full handshake: a resumed one reports the certificate of the session
    // it resumes, not the one the server presents now.
    config.resumption = rustls::client::Resumption::disabled();
    let mut h2 = config.clone();
    h2.alpn_protocols = vec![b"h2".to_vec()];
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let server = Server {
        addr,
        connector: TlsConnector::from(Arc::new(config)),
        h2_connector: TlsConnector::from(Arc::new(h2)),
        _shutdown: shutdown,
    };
    (server, serving)
}

fn short_limits() -> ServeLimits {
    ServeLimits {
        header_read_timeout: SHORT,
        idle_timeout: SHORT,
        request_timeout: SHORT,
        ..ServeLimits::default()
    }
}

async fn connect(server: &Server) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("shop.example").unwrap();
    server.connector.connect(name, tcp).await.unwrap()
}

/// Reads until the server closes; how long that took. Fails past `deadline`.
async fn closed_within(stream: &mut TlsStream<TcpStream>, deadline: Duration) -> Duration {
    let started = Instant::now();
    let mut sink = Vec::new();
    tokio::time::timeout(deadline, async {
        // An error is a close too (the server may reset rather than say goodbye).
        let _ = stream.read_to_end(&mut sink).await;
    })
    .await
    .expect("the server kept the connection open past the deadline");
    started.elapsed()
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_within_its_limit() {
    let server = server(short_limits()).await;
    let mut idle = connect(&server).await;
    let took = closed_within(&mut idle, SHORT + GRACE).await;
    assert!(took >= SHORT / 2, "closed too early: {took:?}");
}

#[tokio::test]
async fn an_http2_connection_that_goes_silent_is_closed_within_its_limit() {
    let server = server(short_limits()).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("shop.example").unwrap();
    let mut silent = server.h2_connector.connect(name, tcp).await.unwrap();
    assert_eq!(silent.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // The client preface, then nothing.
    silent
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    closed_within(&mut silent, SHORT + GRACE).await;
}

#[tokio::test]
async fn headers_sent_a_byte_at_a_time_are_cut_off_at_the_header_limit() {
    let server = server(short_limits()).await;
    let mut slow = connect(&server).await;
    let started = Instant::now();
    let request = b"GET / HTTP/1.1\r\nHost: shop.example\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    // One byte every 100 ms keeps the connection busy (so the idle limit never fires) but never
    // finishes the headers.
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    for byte in request {
        ticks.tick().await;
        if slow.write_all(&[*byte]).await.is_err() || slow.flush().await.is_err() {
            break;
        }
        if started.elapsed() > SHORT + GRACE {
            panic!(
                "the server still reads a trickle of headers after {:?}",
                started.elapsed()
            );
        }
    }
    closed_within(&mut slow, SHORT + GRACE).await;
    assert!(started.elapsed() < SHORT + GRACE);
}

#[tokio::test]
async fn a_request_whose_body_never_ends_is_answered_408_within_the_request_limit() {
    let limits = ServeLimits {
        idle_timeout: Duration::from_secs(30),
        ..short_limits()
    };
    let server = server(limits).await;
    let mut stream = connect(&server).await;
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 100\r\n\r\nabc")
        .await
        .unwrap();
    let mut answer = vec![0; 64];
    let n = tokio::time::timeout(SHORT + GRACE, stream.read(&mut answer))
        .await
        .expect("no answer within the request limit")
        .unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_closes() {
    let limits = ServeLimits {
        max_connections: 2,
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        ..ServeLimits::default()
    };
    let server = server(limits).await;
    let first = connect(&server).await;
    let _second = connect(&server).await;
    // The third is queued by the kernel; its handshake gets no answer while both slots are held.
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("shop.example").unwrap();
    let mut third = Box::pin(server.connector.connect(name, tcp));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut third)
            .await
            .is_err(),
        "a third connection was served past a cap of two"
    );
    drop(first);
    let mut third = tokio::time::timeout(GRACE, third)
        .await
        .expect("the freed slot was not given to the waiting connection")
        .unwrap();
    third
        .write_all(b"GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    third.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"));
}

struct TestPki {
    ca_der: Vec<u8>,
    server: Arc<rustls::ServerConfig>,
}

/// A CA and a leaf for `name`, the leaf as a server configuration.
fn test_pki(name: &str) -> TestPki {
    let pem = pap_net::dev_certs::generate(&[name.to_owned()]).unwrap();
    TestPki {
        server: pap_net::tls::server_config_from_pem(pem.cert_pem.as_bytes(), pem.key_pem.as_bytes()).unwrap(),
        ca_der: pem.ca_der,
    }
}

/// A closed gate for [`gated_app`], and the signal that a request reached it.
fn gate() -> (Arc<tokio::sync::Semaphore>, Arc<tokio::sync::Notify>) {
    (
        Arc::new(tokio::sync::Semaphore::new(0)),
        Arc::new(tokio::sync::Notify::new()),
    )
}

/// An app whose `/slow` answers only once the test adds a permit to `gate`, and says when a
/// request has reached it.
fn gated_app(gate: Arc<tokio::sync::Semaphore>, entered: Arc<tokio::sync::Notify>) -> Router {
    Router::new().route(
        "/slow",
        get(move || {
            let (gate, entered) = (gate.clone(), entered.clone());
            async move {
                entered.notify_one();
                let _permit = gate.acquire().await;
                "done"
            }
        }),
    )
}

/// Issue 25: a restart loses nothing. On shutdown the server stops accepting, answers the
/// request in flight, closes the idle connection, and ends once both are gone.
#[tokio::test]
async fn shutdown_answers_the_request_in_flight_closes_idle_connections_and_refuses_new_ones() {
    shutdown_answers_in_flight_and_closes_idle(None).await;
}

/// The same with each connection on a core of its own: the drain holds across the cores.
#[tokio::test]
async fn on_cores_shutdown_answers_the_request_in_flight_and_closes_idle_connections() {
    let cores = CoreRuntimes::new(std::num::NonZeroUsize::new(2).unwrap(), "test-core").unwrap();
    shutdown_answers_in_flight_and_closes_idle(Some(cores)).await;
}

async fn shutdown_answers_in_flight_and_closes_idle(cores: Option<CoreRuntimes>) {
    let pki = test_pki("shop.example");
    let (gate, entered) = gate();
    let (server, serving) = server_on(
        gated_app(gate.clone(), entered.clone()),
        ServeLimits::default(),
        pki.server,
        &[pki.ca_der],
        cores,
    )
    .await;
    let mut busy = connect(&server).await;
    busy.write_all(b"GET /slow HTTP/1.1\r\nhost: shop.example\r\n\r\n")
        .await
        .unwrap();
    entered.notified().await;
    let mut idle = connect(&server).await;

    let Server { addr, _shutdown, .. } = server;
    drop(_shutdown);
    // The idle connection closes at once; by then nothing listens.
    assert!(closed_within(&mut idle, GRACE).await < GRACE);
    let refused = TcpStream::connect(addr).await;
    assert!(refused.is_err(), "a new connection was accepted while draining");
    assert!(!serving.is_finished(), "the server ended with a request in flight");

    // The request in flight is answered whole, then its connection closes.
    gate.add_permits(1);
    let mut answer = Vec::new();
    tokio::time::timeout(GRACE, busy.read_to_end(&mut answer))
        .await
        .unwrap()
        .ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("done"), "{answer}");
    tokio::time::timeout(GRACE, serving).await.unwrap().unwrap();
}

/// Thread per core: each connection goes to the core with the fewest open (the first on a
/// tie), and every request on it is answered there.
#[tokio::test]
async fn on_cores_each_connection_goes_to_the_least_busy_core_and_stays_there() {
    let pki = test_pki("shop.example");
    let cores = CoreRuntimes::new(std::num::NonZeroUsize::new(2).unwrap(), "test-core").unwrap();
    assert_eq!(cores.count().get(), 2);
    let app = Router::new().route(
        "/",
        get(|| async { std::thread::current().name().unwrap_or("unnamed").to_owned() }),
    );
    let (server, _serving) = server_on(
        app,
        ServeLimits::default(),
        pki.server,
        &[pki.ca_der],
        Some(cores.clone()),
    )
    .await;
    let mut connections = Vec::new();
    for _ in 0..4 {
        connections.push(connect(&server).await);
    }
    let mut answered_by = Vec::new();
    for connection in &mut connections {
        answered_by.push(thread_answering(connection).await);
    }
    assert_eq!(
        answered_by,
        ["test-core-0", "test-core-1", "test-core-0", "test-core-1"]
    );
    // Kept alive, a connection stays on its core.
    for (connection, first) in connections.iter_mut().zip(&answered_by) {
        assert_eq!(&thread_answering(connection).await, first);
    }
    // The second core's two close; once its count is down, the next connection goes there,
    // not to the first core (round-robin would, and so would a count that never fell).
    assert_eq!(cores.open_connections(), [2, 2]);
    drop(connections.remove(3));
    drop(connections.remove(1));
    tokio::time::timeout(GRACE, async {
        loop {
            let closed = cores.connection_closed();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if cores.open_connections() == [2, 0] {
                return;
            }
            closed.await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the closed connections still count: {:?}", cores.open_connections()));
    let mut next = connect(&server).await;
    assert_eq!(thread_answering(&mut next).await, "test-core-1");
}

/// `GET /` on a kept-alive connection: the answer's body (here, the name of the thread that
/// answered).
async fn thread_answering(stream: &mut TlsStream<TcpStream>) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0_u8; 1024];
    loop {
        let read = tokio::time::timeout(GRACE, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(read > 0, "the server closed the connection");
        answer.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&answer).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .expect("a content-length")
            .parse()
            .unwrap();
        if body.len() >= length {
            return body.to_owned();
        }
    }
}

/// A request that outlasts the drain deadline does not hold the server past it.
#[tokio::test]
async fn a_request_that_outlasts_the_drain_does_not_hold_the_server_past_it() {
    let pki = test_pki("shop.example");
    let (gate, entered) = gate();
    let limits = ServeLimits {
        drain_timeout: SHORT,
        ..ServeLimits::default()
    };
    let (server, serving) = server_of(gated_app(gate, entered.clone()), limits, pki.server, &[pki.ca_der]).await;
    let mut busy = connect(&server).await;
    busy.write_all(b"GET /slow HTTP/1.1\r\nhost: shop.example\r\n\r\n")
        .await
        .unwrap();
    entered.notified().await;
    let started = Instant::now();
    drop(server);
    tokio::time::timeout(SHORT + GRACE, serving).await.unwrap().unwrap();
    assert!(started.elapsed() >= SHORT, "the drain ended before its deadline");
}

/// Issue 25: a renewed certificate is taken on reload (SIGHUP in the company) without dropping
/// the connections already open; a reload of a broken file keeps the certificate in use.
#[tokio::test]
async fn a_reload_presents_the_new_certificate_and_keeps_open_connections() {
    let dir = std::env::temp_dir().join(format!("pap-net-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let first = pap_net::dev_certs::generate(&["shop.example".to_owned()]).unwrap();
    let second = pap_net::dev_certs::generate(&["shop.example".to_owned()]).unwrap();
    std::fs::write(&cert, &first.cert_pem).unwrap();
    std::fs::write(&key, first.key_pem.as_bytes()).unwrap();
    let reloadable = pap_net::tls::ReloadableCert::load(&cert, &key).unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    let (server, _serving) = server_of(
        app,
        ServeLimits::default(),
        reloadable.server_config().unwrap(),
        &[first.ca_der.clone(), second.ca_der.clone()],
    )
    .await;
    let leaf = |stream: &TlsStream<TcpStream>| stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let mut open = connect(&server).await;
    let first_leaf = leaf(&open);

    std::fs::write(&cert, &second.cert_pem).unwrap();
    std::fs::write(&key, second.key_pem.as_bytes()).unwrap();
    reloadable.reload().unwrap();
    let renewed = connect(&server).await;
    assert_ne!(leaf(&renewed), first_leaf, "the reload did not take");
    // The connection opened before the reload still serves.
    open.write_all(b"GET / HTTP/1.1\r\nhost: shop.example\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(GRACE, open.read_to_end(&mut answer))
        .await
        .unwrap()
        .ok();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));

    // A half-written key: the reload fails and the renewed certificate stays.
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA").unwrap();
    assert!(reloadable.reload().is_err());
    assert_eq!(leaf(&connect(&server).await), leaf(&renewed));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A TLS connection to `server` from local address `from`.
async fn connect_from(server: &Server, from: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    let tcp = socket.connect(server.addr).await?;
    let name = ServerName::try_from("shop.example").unwrap();
    server.connector.connect(name, tcp).await
}

/// Answers `GET /` on `stream`: the status line's first bytes.
async fn get_root(stream: &mut TlsStream<TcpStream>) -> Vec<u8> {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    answer
}

/// Review N15: one peer address holds at most its share of the connections; past it, its new
/// connections are closed at once, and another address is served beside it.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_connections() {
    let limits = ServeLimits {
        max_connections_per_address: 2,
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        ..ServeLimits::default()
    };
    let server = server(limits).await;
    let first = connect_from(&server, "127.0.0.1").await.unwrap();
    let _second = connect_from(&server, "127.0.0.1").await.unwrap();
    // The third from the same address: closed before its handshake completes.
    let third = tokio::time::timeout(GRACE, connect_from(&server, "127.0.0.1"))
        .await
        .expect("the third connection was neither served nor closed");
    assert!(third.is_err(), "a third connection was served past a share of two");
    // Another address beside them is served.
    let mut other = connect_from(&server, "127.0.0.2").await.unwrap();
    assert!(get_root(&mut other).await.starts_with(b"HTTP/1.1 200"));
    // A closed connection gives its place back.
    drop(first);
    let deadline = Instant::now() + GRACE;
    let mut again = loop {
        match connect_from(&server, "127.0.0.1").await {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => tokio::task::yield_now().await,
            Err(error) => panic!("the freed place was not given back: {error}"),
        }
    };
    assert!(get_root(&mut again).await.starts_with(b"HTTP/1.1 200"));
}

/// Review N15: a connection kept busy, by requests on HTTP/1.1 or by PINGs alone on HTTP/2,
/// still closes once it is `max_connection_age` old.
#[tokio::test]
async fn a_busy_connection_closes_at_its_maximum_age_http1_and_http2_pings_alike() {
    let limits = ServeLimits {
        max_connection_age: SHORT,
        // An HTTP/2 peer that never acknowledges the GOAWAY's PING is cut off after it.
        drain_timeout: SHORT,
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        ..ServeLimits::default()
    };
    let server = server(limits).await;
    // HTTP/1.1: a keep-alive request every 100 ms, each answered, until the server closes.
    let mut busy = connect(&server).await;
    let started = Instant::now();
    let mut answered = 0;
    let closed = tokio::time::timeout(SHORT + GRACE, async {
        loop {
            if busy
                .write_all(b"GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            let mut answer = [0_u8; 1024];
            match busy.read(&mut answer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => answered += 1,
            }
            // The traffic's pace (busy, never idle), not a wait for readiness.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "a busy HTTP/1.1 connection outlived its age");
    assert!(
        started.elapsed() >= SHORT,
        "closed before its age: {:?}",
        started.elapsed()
    );
    assert!(answered >= 5, "only {answered} requests were answered before the close");
    // HTTP/2: the preface and SETTINGS, then a PING every 100 ms and nothing else.
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("shop.example").unwrap();
    let pinging = server.h2_connector.connect(name, tcp).await.unwrap();
    let (mut reader, mut writer) = tokio::io::split(pinging);
    writer
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let pings = tokio::spawn(async move {
        loop {
            let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingping";
            if writer.write_all(ping).await.is_err() {
                return;
            }
            // The PINGs' pace, not a wait for readiness.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let started = Instant::now();
    let mut sink = Vec::new();
    tokio::time::timeout(SHORT + SHORT + GRACE, async {
        let _ = reader.read_to_end(&mut sink).await;
    })
    .await
    .expect("PINGs kept an HTTP/2 connection past its age");
    assert!(
        started.elapsed() >= SHORT / 2,
        "closed too early: {:?}",
        started.elapsed()
    );
    pings.abort();
}
