//! The tunnel's frames under load they must bear (AIP-59 §5.4-§5.6), with the host's and the
//! device's ends as the library runs them (`HostTunnel`, `TunnelClient`) and our broker between
//! them on loopback; the host's routes are a small app here, so a response can be larger than
//! one frame, or never end.
//!
//! A 600 KiB body arrives whole, split into frames of at most 256 KiB; an event stream that
//! never ends arrives chunk by chunk (it cannot have been buffered to its end); dropping its
//! response sends `http_cancel`, and the host drops the upstream body. A broker killed under a
//! live stream fails that stream as a network error, and the device (offline, never revoked)
//! comes back once a broker answers again.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures_util::StreamExt as _;
use pap_host::pairing::Devices;
use pap_host::tunnel::device::{TunnelClient, accept, load_credential};
use pap_host::tunnel::host::HostTunnel;
use pap_host::tunnel::{daemon_keys, mint_offer};
use pap_pair::link::Dialer;
use pap_shared::{Clock, ManualClock, SystemClock, SystemRng};
use support::cli_agent::{agent_saying, rendezvous};

const DEADLINE: Duration = Duration::from_secs(20);
const BIG: usize = 600 * 1024;

/// The upstream streams alive, and a signal when one is dropped (the host aborted it).
#[derive(Default)]
struct Upstreams {
    alive: AtomicUsize,
    dropped: tokio::sync::Notify,
}

struct Alive(Arc<Upstreams>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
        self.0.dropped.notify_one();
    }
}

fn app(alive: Arc<Upstreams>) -> axum::Router {
    let big = axum::routing::get(|| async { Body::from(vec![b'x'; BIG]) });
    let endless = axum::routing::get(move || {
        let alive = alive.clone();
        async move {
            alive.alive.fetch_add(1, Ordering::SeqCst);
            let guard = Alive(alive);
            let events = futures_util::stream::unfold((0_u32, guard), |(n, guard)| async move {
                // An event every 20 ms, as a live stream paces them (not a readiness wait).
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((
                    Ok::<_, std::io::Error>(Bytes::from(format!("data: {n}\n\n"))),
                    (n + 1, guard),
                ))
            });
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(events))
                .unwrap()
        }
    });
    axum::Router::new().route("/health", big).route("/mcp", endless)
}

/// A host (this file's app behind a `HostTunnel`) and a device paired through the broker at
/// `broker_url`: the device's client and the upstream counter.
async fn paired(label: &str, broker_url: &str) -> (std::path::PathBuf, Arc<TunnelClient>, Arc<Upstreams>) {
    paired_at(label, broker_url, Arc::new(SystemClock), Arc::new(SystemClock)).await
}

/// A host of this file's app behind a `HostTunnel`, its state under the returned work
/// directory's `host`: the work directory and the upstream counter.
fn hosting(label: &str, host_clock: Arc<dyn Clock>, dialer: Dialer) -> (std::path::PathBuf, Arc<Upstreams>) {
    let work = std::env::temp_dir().join(format!("pap-tunnel-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let host_state = work.join("host");
    pap_browser::store::private_dir(&host_state).unwrap();
    let alive = Arc::new(Upstreams::default());
    let tunnel = Arc::new(HostTunnel::new(
        Devices::at(&host_state),
        daemon_keys(&host_state, &SystemRng).unwrap(),
        dialer,
        app(alive.clone()),
        "127.0.0.1:1".to_owned(),
        "frames host".to_owned(),
        host_clock,
        Arc::new(SystemRng),
    ));
    tokio::spawn(tunnel.run(std::future::pending()));
    (work, alive)
}

/// [`paired`] with the host's and the device's clocks given.
async fn paired_at(
    label: &str,
    broker_url: &str,
    host_clock: Arc<dyn Clock>,
    device_clock: Arc<dyn Clock>,
) -> (std::path::PathBuf, Arc<TunnelClient>, Arc<Upstreams>) {
    let (work, alive) = hosting(label, host_clock.clone(), Dialer::new(&[]).unwrap());
    let (host_state, device_state) = (work.join("host"), work.join("device"));
    let offer = mint_offer(
        &host_state,
        broker_url,
        600,
        Some("frames"),
        host_clock.as_ref(),
        &SystemRng,
    )
    .unwrap();
    let paired = accept(
        &device_state,
        &offer,
        "frames device",
        &Dialer::new(&[]).unwrap(),
        |paired| paired.label.as_deref() == Some("frames host"),
        device_clock.as_ref(),
        &SystemRng,
    )
    .await
    .unwrap();
    let credential = load_credential(&device_state, &paired.fingerprint).unwrap();
    let (client, _kept) = TunnelClient::start(
        device_state.clone(),
        credential,
        Dialer::new(&[]).unwrap(),
        device_clock,
        Arc::new(SystemRng),
    );
    (work, client, alive)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_split_streams_arrive_chunk_by_chunk_and_a_dropped_response_is_cancelled_upstream() {
    let (broker_url, broker) = rendezvous().await;
    let (work, client, alive) = paired("frames", &broker_url).await;

    // 600 KiB: streamed as a head and chunks, each within the frame bound, whole at the end.
    let response = tokio::time::timeout(DEADLINE, client.fetch("GET", "/health", BTreeMap::new(), Bytes::new()))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = axum::body::to_bytes(response.into_body(), BIG + 1).await.unwrap();
    assert_eq!(body.len(), BIG);
    assert!(body.iter().all(|b| *b == b'x'));
    let sizes: Vec<usize> = broker
        .journal
        .lines()
        .iter()
        .filter(|l| l.starts_with("relay daemon→client"))
        .filter_map(|l| l.split_whitespace().nth(3).and_then(|n| n.parse().ok()))
        .collect();
    assert!(sizes.iter().filter(|s| **s > 256 * 1024).count() >= 2, "{sizes:?}");
    assert!(
        sizes.iter().all(|s| *s < 1 << 20),
        "every envelope under 1 MiB: {sizes:?}"
    );

    // An event stream that never ends: its first events arrive as they are sent.
    let response = tokio::time::timeout(DEADLINE, client.fetch("GET", "/mcp", BTreeMap::new(), Bytes::new()))
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut events = response.into_body().into_data_stream();
    let mut seen = String::new();
    while !seen.contains("data: 2\n") {
        let chunk = tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(seen.starts_with("data: 0\n\n"), "{seen}");
    assert_eq!(alive.alive.load(Ordering::SeqCst), 1);
    // Dropping the response cancels it (§5.6): the host aborts the upstream request.
    drop(events);
    tokio::time::timeout(DEADLINE, alive.dropped.notified())
        .await
        .expect("the host did not drop the cancelled upstream stream");
    assert_eq!(alive.alive.load(Ordering::SeqCst), 0);

    // The channel still serves after the cancel.
    let again = tokio::time::timeout(DEADLINE, client.fetch("GET", "/health", BTreeMap::new(), Bytes::new()))
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let _ = std::fs::remove_dir_all(&work);
}

/// `pap-agent rendezvous` on `listen`; its `ws://` URL once it listens.
async fn broker_process(listen: &str) -> (tokio::process::Child, String) {
    agent_saying(&["rendezvous", "--listen", listen], "rendezvous broker on ").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_gone_is_offline_not_revoked_and_the_device_comes_back_when_it_returns() {
    let (mut broker, broker_url) = broker_process("127.0.0.1:0").await;
    let (work, client, _alive) = paired("offline", &broker_url).await;
    let up = tokio::time::timeout(DEADLINE, client.fetch("GET", "/health", BTreeMap::new(), Bytes::new()))
        .await
        .unwrap();
    assert_eq!(up.status(), 200);
    let streaming = tokio::time::timeout(DEADLINE, client.fetch("GET", "/mcp", BTreeMap::new(), Bytes::new()))
        .await
        .unwrap();
    let mut events = streaming.into_body().into_data_stream();
    assert!(
        tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .is_ok()
    );

    // The broker dies (kill -9): the pending stream fails as a network error (§5.7)...
    broker.kill().await.unwrap();
    let failed = tokio::time::timeout(DEADLINE, async {
        loop {
            match events.next().await {
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    })
    .await;
    assert!(failed.is_ok(), "a stream on a dead channel did not end");

    // ...and the device is offline, not revoked: once a broker answers on the same address
    // again, both sides reconnect (jittered backoff) and the next request is served.
    let port = url::Url::parse(&broker_url).unwrap().port().unwrap();
    let (_broker, _) = broker_process(&format!("127.0.0.1:{port}")).await;
    let back = tokio::time::timeout(
        Duration::from_secs(60),
        client.fetch("GET", "/health", BTreeMap::new(), Bytes::new()),
    )
    .await
    .unwrap();
    assert_eq!(back.status(), 200, "the device did not come back");
    let credential = std::fs::read_dir(work.join("device").join("hosts"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(credential.path()).unwrap()).unwrap();
    assert!(
        stored.get("revokedAt").is_none(),
        "offline was taken for revoked: {stored}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Fetches `/health` through `client` until it answers 200 (a fetch with no channel yet waits
/// 20 s and answers 503 "offline"; then it asks again), a minute at most.
async fn served(client: &TunnelClient) {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let response = client.fetch("GET", "/health", BTreeMap::new(), Bytes::new()).await;
            match response.status().as_u16() {
                200 => return,
                503 => {}
                other => panic!("answered {other}"),
            }
        }
    })
    .await
    .expect("the device was not served within a minute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_reconnects_across_midnight_on_todays_or_yesterdays_route() {
    // UTC day D ends at `midnight`.
    let midnight = 20_790 * 86_400;
    // The host is past midnight, the device not yet: the device's first channel is on day D's
    // route, which is the host's yesterday (§2.4: the daemon parks on both).
    let (host_clock, device_clock) = (ManualClock::at(midnight + 30), ManualClock::at(midnight - 30));
    let (mut broker, broker_url) = broker_process("127.0.0.1:0").await;
    let port = url::Url::parse(&broker_url).unwrap().port().unwrap();
    let (work, client, _alive) = paired_at("midnight", &broker_url, host_clock.clone(), device_clock.clone()).await;
    served(&client).await;

    // The device a day ahead of the host (D+2 against D+1): nothing parks on its today's route,
    // so after that wait it dials its yesterday's, the host's today (§2.4: the client tries
    // today first, then yesterday).
    device_clock.set(midnight + 86_400 + 30);
    broker.kill().await.unwrap();
    let (_broker, _) = broker_process(&format!("127.0.0.1:{port}")).await;
    served(&client).await;
    let _ = std::fs::remove_dir_all(&work);
}

/// The hello as the reference's clients frame it (`{"t":"e2e_handshake","d":…}`) and as the
/// AIP-59 text reads literally (the bare object) both pair with our host through our broker, and
/// each is answered in the framing it spoke: a reference client would drop a bare reply, and a
/// literal one cannot read a framed one. (Over `wss://` too: the TLS broker's test below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_pairs_in_either_framing_and_is_answered_in_the_framing_it_spoke() {
    let (broker_url, _stats) = rendezvous().await;
    let (work, _alive) = hosting("framings", Arc::new(SystemClock), Dialer::new(&[]).unwrap());
    pairs_in_each_framing(&work, &broker_url, &Dialer::new(&[]).unwrap()).await;
    let _ = std::fs::remove_dir_all(&work);
}

/// A client of its own socket (not our device's tunnel code; `pap_pair`'s handshake types build
/// and read the messages) pairs with the host of `work` through the broker at `broker_url`, once
/// with the reference's framed hello and once with the bare one, and is answered in the framing
/// it spoke.
async fn pairs_in_each_framing(work: &std::path::Path, broker_url: &str, dialer: &Dialer) {
    use futures_util::SinkExt as _;
    use pap_pair::handshake::{ClientHandshake, Framing, Reply, handshake_text, read_handshake};
    use pap_pair::link::{Link, Side};
    use pap_pair::tunnel::Frame;
    use tokio_tungstenite::tungstenite::Message;

    for framing in [Framing::Frame, Framing::Bare] {
        let offer = mint_offer(&work.join("host"), broker_url, 600, None, &SystemClock, &SystemRng).unwrap();
        let tokens = pap_pair::derive::offer_tokens(&offer.secret).unwrap();
        let mut socket = dialer
            .dial(&offer.rendezvous, Side::Client, &tokens.route)
            .await
            .unwrap();
        let handshake = ClientHandshake::start(
            offer.daemon_x25519,
            offer.daemon_ed25519,
            &tokens.auth,
            "framing client",
            &SystemRng,
        )
        .unwrap();
        let hello = handshake_text(handshake.hello(), framing).unwrap();
        assert_eq!(
            hello.starts_with(r#"{"t":"e2e_handshake","d":""#),
            framing == Framing::Frame
        );
        socket.send(Message::text(hello)).await.unwrap();
        let answer = tokio::time::timeout(DEADLINE, socket.next())
            .await
            .expect("the host did not answer the hello")
            .unwrap()
            .unwrap();
        let Message::Text(answer) = answer else {
            panic!("not a text message: {answer:?}")
        };
        let (reply, spoken): (Reply, _) = read_handshake(answer.as_bytes()).expect("not a reply");
        assert_eq!(spoken, framing, "answered in another framing: {answer}");
        let session = handshake.complete(&reply).unwrap();
        let (_sender, mut receiver) = Link::new(socket, &session).unwrap().split();
        let first = tokio::time::timeout(DEADLINE, receiver.recv()).await.unwrap().unwrap();
        assert!(
            matches!(&first, Frame::Hello { label, .. } if label.as_deref() == Some("frames host")),
            "{first:?}"
        );
    }
}

/// `pap-agent rendezvous --cert --key` serves `wss://` itself: a host and a device that trust
/// its CA pair and are served through it, and so do a reference-framed hello and a bare one; on SIGHUP new handshakes present the renewed
/// certificate (a client trusting only the old CA is refused, one trusting the new is served)
/// while the channel already open keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_over_tls_pairs_and_serves_and_presents_a_renewed_certificate_after_sighup() {
    use pap_pair::link::{LinkError, Side};
    use rustls::pki_types::CertificateDer;

    let names = ["127.0.0.1".to_owned()];
    let (first, renewed) = (
        pap_net::dev_certs::generate(&names).unwrap(),
        pap_net::dev_certs::generate(&names).unwrap(),
    );
    let certs = std::env::temp_dir().join(format!("pap-broker-tls-{}", std::process::id()));
    pap_browser::store::private_dir(&certs).unwrap();
    let (cert, key) = (certs.join("cert.pem"), certs.join("key.pem"));
    std::fs::write(&cert, &first.cert_pem).unwrap();
    std::fs::write(&key, first.key_pem.as_bytes()).unwrap();
    let (broker, url) = agent_saying(
        &[
            "rendezvous",
            "--listen",
            "127.0.0.1:0",
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
        "rendezvous broker on ",
    )
    .await;
    assert!(url.starts_with("wss://127.0.0.1:"), "{url}");
    let (first_ca, renewed_ca) = (
        CertificateDer::from(first.ca_der.clone()),
        CertificateDer::from(renewed.ca_der.clone()),
    );
    let both = Dialer::new(&[first_ca.clone(), renewed_ca.clone()]).unwrap();

    // A pairing and a request through the broker over TLS.
    let (work, _alive) = hosting("tls", Arc::new(SystemClock), both.clone());
    let offer = mint_offer(&work.join("host"), &url, 600, None, &SystemClock, &SystemRng).unwrap();
    let device_state = work.join("device");
    let paired = accept(
        &device_state,
        &offer,
        "tls device",
        &Dialer::new(std::slice::from_ref(&first_ca)).unwrap(),
        |_| true,
        &SystemClock,
        &SystemRng,
    )
    .await
    .unwrap();
    let credential = load_credential(&device_state, &paired.fingerprint).unwrap();
    let (client, _kept) = TunnelClient::start(
        device_state.clone(),
        credential,
        both.clone(),
        Arc::new(SystemClock),
        Arc::new(SystemRng),
    );
    served(&client).await;
    // The pairing matrix over `wss://`: a reference-framed hello and a bare one pair with our
    // host through this broker too.
    pairs_in_each_framing(&work, &url, &both).await;
    // A client that trusts no CA of the broker's is refused in the TLS handshake.
    let untrusted = Dialer::new(&[])
        .unwrap()
        .dial(&url, Side::Daemon, "untrusted-route")
        .await;
    assert!(matches!(untrusted, Err(LinkError::Dial(_))), "{:?}", untrusted.err());

    // Renewal: new files, SIGHUP; new handshakes present the new certificate.
    std::fs::write(&cert, &renewed.cert_pem).unwrap();
    std::fs::write(&key, renewed.key_pem.as_bytes()).unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(broker.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let only_renewed = Dialer::new(std::slice::from_ref(&renewed_ca)).unwrap();
    tokio::time::timeout(DEADLINE, async {
        // The reload happens when the broker's signal task runs: dial until it has.
        while only_renewed.dial(&url, Side::Daemon, "renewed-route").await.is_err() {}
    })
    .await
    .expect("the broker did not present the renewed certificate after SIGHUP");
    let stale = Dialer::new(std::slice::from_ref(&first_ca))
        .unwrap()
        .dial(&url, Side::Daemon, "stale-route")
        .await;
    assert!(matches!(stale, Err(LinkError::Dial(_))), "{:?}", stale.err());
    let still = client.fetch("GET", "/health", BTreeMap::new(), Bytes::new()).await;
    assert_eq!(still.status(), 200, "the open channel broke on the reload");
    drop(broker);
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&certs);
}
