//! The rendezvous broker on 127.0.0.1 with real WebSocket clients: it pairs the two sides of a
//! route and relays their messages unmodified, keeps one live socket per route side, ends a
//! lone socket after the park limit and a silent pair after the idle limit, and refuses a bad
//! upgrade and an oversized message.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use pap_pair::broker::{BrokerLimits, BrokerStats, close, serve};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a test waits for what must happen.
const DEADLINE: Duration = Duration::from_secs(5);

struct Broker {
    url: String,
    stats: Arc<BrokerStats>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn broker(limits: BrokerLimits) -> Broker {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/v1", listener.local_addr().unwrap());
    let stats = Arc::new(BrokerStats::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, limits, stats.clone(), async move {
        let _ = stopped.await;
    }));
    Broker {
        url,
        stats,
        _stop: stop,
    }
}

async fn dial(broker: &Broker, side: &str, route: &str) -> Socket {
    let url = format!("{}?side={side}&t={route}", broker.url);
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// The next data message, or the close code the socket ended with.
async fn next(socket: &mut Socket) -> Result<Message, Option<u16>> {
    loop {
        match tokio::time::timeout(DEADLINE, socket.next())
            .await
            .expect("nothing came")
        {
            Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| u16::from(f.code))),
            Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => return Ok(message),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return Err(None),
        }
    }
}

/// Waits until `parked` sockets are parked.
async fn parked(broker: &Broker, parked: usize) {
    tokio::time::timeout(DEADLINE, async {
        while broker.stats.parked.load(Ordering::SeqCst) != parked {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the socket was never parked");
}

#[tokio::test]
async fn the_two_sides_of_a_route_are_paired_and_their_messages_relayed_unmodified() {
    let broker = broker(BrokerLimits::default()).await;
    let mut daemon = dial(&broker, "daemon", "G8SO5JOFLKZDqugteQRpFw").await;
    parked(&broker, 1).await;
    let mut client = dial(&broker, "client", "G8SO5JOFLKZDqugteQRpFw").await;
    client.send(Message::text(r#"{"v":2,"ePub":"x"}"#)).await.unwrap();
    assert_eq!(next(&mut daemon).await.unwrap(), Message::text(r#"{"v":2,"ePub":"x"}"#));
    let bytes: Vec<u8> = (0..=255).collect();
    daemon.send(Message::binary(bytes.clone())).await.unwrap();
    assert_eq!(next(&mut client).await.unwrap(), Message::binary(bytes));
    assert_eq!(broker.stats.splices.load(Ordering::SeqCst), 1);
    // One side goes: the other is told its peer closed, and the route is free again.
    client.close(None).await.unwrap();
    assert_eq!(next(&mut daemon).await, Err(Some(close::PEER_CLOSED)));
    let _again = dial(&broker, "daemon", "G8SO5JOFLKZDqugteQRpFw").await;
    parked(&broker, 1).await;
}

#[tokio::test]
async fn what_a_parked_socket_sends_before_its_pair_exists_reaches_the_pair() {
    let broker = broker(BrokerLimits::default()).await;
    let mut device = dial(&broker, "client", "early").await;
    device.send(Message::text("hello before the host")).await.unwrap();
    parked(&broker, 1).await;
    let mut host = dial(&broker, "daemon", "early").await;
    assert_eq!(next(&mut host).await.unwrap(), Message::text("hello before the host"));
    host.send(Message::text("reply")).await.unwrap();
    assert_eq!(next(&mut device).await.unwrap(), Message::text("reply"));
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_of_sockets() {
    let broker = broker(BrokerLimits {
        max_connections_per_address: 2,
        ..BrokerLimits::default()
    })
    .await;
    let _first = dial(&broker, "daemon", "one").await;
    let _second = dial(&broker, "daemon", "two").await;
    let url = format!("{}?side=daemon&t=three", broker.url);
    let third = tokio::time::timeout(DEADLINE, tokio_tungstenite::connect_async(url)).await;
    assert!(
        third.expect("neither served nor closed").is_err(),
        "a third socket was served"
    );
    assert_eq!(broker.stats.refused.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn one_address_dials_at_most_its_burst_then_its_rate() {
    // A burst of 3, and one more a minute: the fourth dial in a row is closed before any
    // upgrade; another address would still be served.
    let broker = broker(BrokerLimits {
        upgrade_burst: 3,
        upgrades_per_minute: 1,
        ..BrokerLimits::default()
    })
    .await;
    let mut kept = Vec::new();
    for route in ["a", "b", "c"] {
        kept.push(dial(&broker, "daemon", route).await);
    }
    let url = format!("{}?side=daemon&t=d", broker.url);
    let fourth = tokio::time::timeout(DEADLINE, tokio_tungstenite::connect_async(url)).await;
    assert!(
        fourth.expect("neither served nor closed").is_err(),
        "a fourth dial was served"
    );
    assert_eq!(broker.stats.refused.load(Ordering::SeqCst), 1);
    // Closing sockets gives back sockets, not dials.
    drop(kept);
    let url = format!("{}?side=daemon&t=e", broker.url);
    let fifth = tokio::time::timeout(DEADLINE, tokio_tungstenite::connect_async(url)).await;
    assert!(
        fifth.expect("neither served nor closed").is_err(),
        "a fifth dial was served"
    );
}

#[tokio::test]
async fn a_route_holds_one_socket_per_side_and_no_third_on_a_live_pair() {
    let broker = broker(BrokerLimits::default()).await;
    let mut daemon = dial(&broker, "daemon", "route-one").await;
    parked(&broker, 1).await;
    let mut second_daemon = dial(&broker, "daemon", "route-one").await;
    assert_eq!(next(&mut second_daemon).await, Err(Some(close::ROUTE_IN_USE)));
    let mut client = dial(&broker, "client", "route-one").await;
    let mut third = dial(&broker, "client", "route-one").await;
    assert_eq!(next(&mut third).await, Err(Some(close::ROUTE_IN_USE)));
    // The pair is untouched.
    client.send(Message::text("still here")).await.unwrap();
    assert_eq!(next(&mut daemon).await.unwrap(), Message::text("still here"));
}

#[tokio::test]
async fn a_lone_socket_ends_at_the_park_limit_and_a_silent_pair_at_the_idle_limit() {
    let limits = BrokerLimits {
        park_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..BrokerLimits::default()
    };
    let broker = broker(limits).await;
    let mut lone = dial(&broker, "client", "lonely").await;
    assert_eq!(next(&mut lone).await, Err(Some(close::PARK_TIMEOUT)));
    let mut daemon = dial(&broker, "daemon", "quiet").await;
    parked(&broker, 1).await;
    let mut client = dial(&broker, "client", "quiet").await;
    assert_eq!(next(&mut daemon).await, Err(Some(close::IDLE_TIMEOUT)));
    assert_eq!(next(&mut client).await, Err(Some(close::IDLE_TIMEOUT)));
}

#[tokio::test]
async fn a_bad_upgrade_is_refused_and_an_oversized_message_ends_its_pair() {
    let broker = broker(BrokerLimits {
        max_message_bytes: 1_024,
        ..BrokerLimits::default()
    })
    .await;
    for query in [
        "side=daemon",
        "t=abc",
        "side=both&t=abc",
        "side=daemon&t=a%2Fb",
        "side=daemon&t=a&t=b",
    ] {
        let refused = tokio_tungstenite::connect_async(format!("{}?{query}", broker.url)).await;
        match refused {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 400, "{query}"),
            other => panic!("{query}: not refused with 400: {:?}", other.map(|_| ())),
        }
    }
    let mut daemon = dial(&broker, "daemon", "big").await;
    parked(&broker, 1).await;
    let mut client = dial(&broker, "client", "big").await;
    client.send(Message::binary(vec![0_u8; 1_024])).await.unwrap();
    assert_eq!(next(&mut daemon).await.unwrap(), Message::binary(vec![0_u8; 1_024]));
    let _ = client.send(Message::binary(vec![0_u8; 1_025])).await;
    // The sender's socket is ended for it, and its peer is told.
    assert_eq!(next(&mut daemon).await, Err(Some(close::PEER_CLOSED)));
}

/// A WebSocket to `broker` from the source address `from` (any of 127.0.0.0/8 on Linux).
async fn dial_from(broker: &Broker, from: std::net::Ipv4Addr, side: &str, route: &str) -> Option<Socket> {
    let url = format!("{}?side={side}&t={route}", broker.url);
    let target = url::Url::parse(&url).unwrap().socket_addrs(|| None).unwrap()[0];
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((from, 0).into()).unwrap();
    let tcp = socket.connect(target).await.ok()?;
    let dialed = tokio::time::timeout(
        DEADLINE,
        tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(tcp)),
    )
    .await
    .ok()?;
    dialed.ok().map(|(socket, _)| socket)
}

/// Review S6: strangers from many networks fill the broker and keep dialing; the accept loop
/// never stops, and a host and a device on a network of their own still pair and talk, each
/// seated by closing (1013) a socket of the heaviest network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_many_networks_never_stops_a_pairing_on_another() {
    let broker = broker(BrokerLimits {
        max_connections: 64,
        max_connections_per_address: 8,
        upgrade_burst: 10_000,
        upgrades_per_minute: 600_000,
        ..BrokerLimits::default()
    })
    .await;
    // 16 networks (127.N.0.0/24), 8 sockets from each: twice what the broker holds.
    let flooder = |n: u8| std::net::Ipv4Addr::new(127, 10 + n, 0, 1);
    let mut flood = Vec::new();
    for n in 0..16_u8 {
        for k in 0..8 {
            if let Some(socket) = dial_from(&broker, flooder(n), "daemon", &format!("flood-{n}-{k}")).await {
                flood.push(socket);
            }
        }
    }
    let seated_first = flood.len();
    // It keeps coming while the pairing happens.
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let (rounds, mut round) = tokio::sync::watch::channel(0_u32);
    let url = broker.url.clone();
    let again = tokio::spawn(async move {
        let broker = Broker {
            url,
            stats: Arc::default(),
            _stop: tokio::sync::oneshot::channel().0,
        };
        let (mut held, mut dials) = (Vec::new(), 0_u32);
        loop {
            for n in 0..16_u8 {
                if stopped.try_recv().is_ok() {
                    return dials;
                }
                dials += 1;
                if let Some(socket) = dial_from(&broker, flooder(n), "daemon", &format!("again-{dials}")).await {
                    held.push(socket);
                }
            }
            held.truncate(256);
            rounds.send_modify(|n| *n += 1);
        }
    });

    // The pairing starts once the flood has gone round every network twice more.
    tokio::time::timeout(DEADLINE, round.wait_for(|n| *n >= 2))
        .await
        .unwrap()
        .unwrap();
    let own = std::net::Ipv4Addr::new(127, 0, 0, 1);
    let mut daemon = dial_from(&broker, own, "daemon", "legitimate")
        .await
        .expect("the host was not seated");
    let mut client = dial_from(&broker, own, "client", "legitimate")
        .await
        .expect("the device was not seated");
    client.send(Message::text("hello through a flood")).await.unwrap();
    assert_eq!(next(&mut daemon).await.unwrap(), Message::text("hello through a flood"));
    daemon.send(Message::text("reply through a flood")).await.unwrap();
    assert_eq!(next(&mut client).await.unwrap(), Message::text("reply through a flood"));
    let _ = stop.send(());
    let dials = again.await.unwrap();

    let evicted = broker.stats.evicted.load(Ordering::SeqCst);
    let refused = broker.stats.refused.load(Ordering::SeqCst);
    let figures = format!(
        "{seated_first} of 128 first dials seated, {dials} more dials during the pairing, \
         {evicted} sockets evicted, {refused} refused"
    );
    assert!(seated_first >= 64, "the broker held fewer than its cap: {figures}");
    assert!(
        evicted >= 2,
        "the pairing was seated without evicting anyone: {figures}"
    );
}

/// Review S6: what parked sockets hold for their pairs is bounded across the broker too; the
/// socket that would pass the bound ends, and what the others hold still reaches their pairs.
#[tokio::test]
async fn parked_sockets_hold_at_most_the_brokers_early_bytes_between_them() {
    let broker = broker(BrokerLimits {
        max_early_bytes: 16,
        ..BrokerLimits::default()
    })
    .await;
    let mut first = dial(&broker, "daemon", "early-one").await;
    parked(&broker, 1).await;
    first.send(Message::text("ten bytes!")).await.unwrap();
    // The broker has read (and holds) it once it answers a ping sent after it.
    first.send(Message::Ping(Default::default())).await.unwrap();
    tokio::time::timeout(DEADLINE, async {
        while !matches!(first.next().await, Some(Ok(Message::Pong(_)))) {}
    })
    .await
    .expect("no pong");
    let mut second = dial(&broker, "daemon", "early-two").await;
    parked(&broker, 2).await;
    second.send(Message::text("ten more..")).await.unwrap();
    assert_eq!(next(&mut second).await, Err(Some(close::PARK_TIMEOUT)));
    let mut client = dial(&broker, "client", "early-one").await;
    assert_eq!(next(&mut client).await.unwrap(), Message::text("ten bytes!"));
}

/// Review of S6 (H1): a side that stops reading cannot hold its pair, the relay and both seats
/// for ever. Its counterpart sends until the broker's writes to the stalled side fill every
/// buffer between them; the broker gives the stalled side `write_timeout`, then ends the pair,
/// and the sender hears 4410 while the stalled side has still read nothing.
#[tokio::test]
async fn a_side_that_stops_reading_ends_its_pair_at_the_write_deadline() {
    let broker = broker(BrokerLimits {
        write_timeout: Duration::from_millis(300),
        ..BrokerLimits::default()
    })
    .await;
    let _stalled = dial(&broker, "daemon", "stalled").await;
    parked(&broker, 1).await;
    let sender = dial(&broker, "client", "stalled").await;
    let (mut tx, mut rx) = sender.split();
    let chunk = Message::binary(vec![7_u8; 512 << 10]);
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    let sending = tokio::spawn(async move {
        // Ends when the broker closes the pair (the send fails) or is dropped with the test.
        while tx.send(chunk.clone()).await.is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let code = tokio::time::timeout(DEADLINE * 4, async {
        loop {
            match rx.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the pair was never ended");
    sending.abort();
    let sent = sent.load(Ordering::SeqCst);
    assert_eq!(code, Some(close::PEER_CLOSED), "after {sent} chunks of 512 KiB");
    assert!(
        sent >= 2,
        "the broker ended the pair before any write stalled: {sent} chunks"
    );
    assert_eq!(broker.stats.active.load(Ordering::SeqCst), 0);
}
