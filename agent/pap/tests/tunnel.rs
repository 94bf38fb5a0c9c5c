//! AIP-59 `pair/v2` as a person runs it, every part real: our broker on loopback, `pap-agent
//! host serve` on the host's state, `pap-agent pair offer` / `pair accept` / `pair connect` as
//! separate processes on a device's state, and an MCP client of the official Rust SDK through
//! the device's loopback endpoint. The MCP Python SDK drives the same tunnel in
//! `mcp_python_sdk.rs`.
//!
//! It shows, in order: a hello with a wrong auth is refused and spends nothing (§1.5, §2.3); a
//! declined pairing keeps no credential (§3.6); a kept one is 0600, and its endpoint serves
//! only a client with the endpoint's own bearer (loopback is every user's), reaches `/health`
//! and `/mcp` and nothing else, from no web page; what the broker saw holds no secret (§2.2);
//! revoking tells the live channel, authenticated, and the device stops and says so (§6.1,
//! §6.3); a revoked device's credential restored from a backup is answered by the tombstone
//! with `pairing_revoked` (§6.2), while a dialer with a wrong auth on the same route is not.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use base64::Engine as _;
use pap_pair::link::{Dialer, LinkError, Pins, Side, connect_client};
use pap_pair::offer::Offer;
use pap_shared::{Clock as _, SystemClock, SystemRng};
use support::cli_agent::{
    host_serve, mcp_call, mcp_device, pair_accept, pair_connect, pap, pap_fails, rendezvous, stop_host,
};

const DEADLINE: Duration = Duration::from_secs(30);

fn now() -> i64 {
    SystemClock.now().as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_pairs_through_the_broker_reaches_only_the_host_and_is_told_when_revoked() {
    let work = std::env::temp_dir().join(format!("pap-tunnel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let (host_state, device_state) = (work.join("host"), work.join("device"));
    pap(&host_state, &["identity", "init", "atlas.example"]);
    let (broker_url, broker) = rendezvous().await;
    let (host, _host_addr) = host_serve(&host_state, &[]).await;
    let dialer = Dialer::new(&[]).unwrap();

    // A hello sealed with a wrong auth on a live offer's route: refused (the host closes; the
    // broker says so), and the offer stays open for the right one.
    let offer_text = pap(
        &host_state,
        &["pair", "offer", "--rendezvous", &broker_url, "--name", "laptop"],
    )
    .trim()
    .to_owned();
    let offer = Offer::parse(&offer_text, now()).unwrap();
    // Plain WebSocket off loopback is refused before anything is minted or dialled (S4).
    let said = pap_fails(
        &host_state,
        &["pair", "offer", "--rendezvous", "ws://rdv.example/", "--name", "laptop"],
    );
    assert!(said.contains("wss://"), "{said}");
    let off_loopback = Dialer::new(&[])
        .unwrap()
        .dial("ws://192.0.2.7:8788/", Side::Client, &"r".repeat(22))
        .await;
    assert!(matches!(off_loopback, Err(LinkError::Url)), "{:?}", off_loopback.err());
    let pins = Pins {
        x25519: offer.daemon_x25519,
        ed25519: offer.daemon_ed25519,
    };
    let tokens = pap_pair::derive::offer_tokens(&offer.secret).unwrap();
    let thief = connect_client(
        &dialer,
        &broker_url,
        &tokens.route,
        &pins,
        "not-the-auth",
        "thief",
        &SystemRng,
    )
    .await;
    assert!(
        matches!(thief, Err(LinkError::Closed(_) | LinkError::Socket(_))),
        "a wrong auth was not refused: {:?}",
        thief.as_ref().map(|_| "a channel")
    );

    // The person declines: no credential, and the host's record (made at the handshake, as
    // AIP-59's security considerations say) is the operator's to revoke.
    let (kept, _, said, _) = pair_accept(&device_state, &[], &offer_text, "no").await;
    assert!(!kept && said.contains("declined"), "{said}");
    assert!(said.contains(&format!("fingerprint {}", offer.fingerprint)), "{said}");
    assert!(
        !device_state.join("hosts").exists() || std::fs::read_dir(device_state.join("hosts")).unwrap().count() == 0
    );
    assert!(pap(&host_state, &["devices", "list"]).contains("\"laptop\""));
    pap(&host_state, &["devices", "revoke", "laptop"]);

    // The offer was single-use: a second one, accepted.
    let offer_text = pap(
        &host_state,
        &["pair", "offer", "--rendezvous", &broker_url, "--name", "laptop"],
    )
    .trim()
    .to_owned();
    let (kept, fingerprint, said, took) = pair_accept(&device_state, &[], &offer_text, "yes").await;
    assert!(kept, "{said}");
    let fingerprint = fingerprint.trim().to_owned();
    assert_eq!(fingerprint, offer.fingerprint);
    assert!(
        said.contains("paired with \"pap-agent"),
        "the host's name is shown: {said}"
    );
    let credential_path = device_state.join("hosts").join(format!("{fingerprint}.json"));
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&credential_path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    eprintln!("pair accept took {} ms", took.as_millis());

    let (mut connect, endpoint, mut heard) = pair_connect(&device_state, &[], &fingerprint).await;
    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    // Loopback is every user's: the endpoint serves only a client with its bearer (0600).
    let bearer_file = pap_host::tunnel::device::endpoint_bearer_path(&device_state, &fingerprint);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&bearer_file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let endpoint_bearer = std::fs::read_to_string(&bearer_file).unwrap();
    let stranger = http.get(format!("http://{endpoint}/health")).send().await.unwrap();
    assert_eq!(stranger.status(), 401);
    let wrong = http
        .get(format!("http://{endpoint}/health"))
        .bearer_auth("paptun_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let health = http
        .get(format!("http://{endpoint}/health"))
        .bearer_auth(&endpoint_bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let health: serde_json::Value = serde_json::from_slice(&health.bytes().await.unwrap()).unwrap();
    assert_eq!(health["ok"], true);

    // One tunnel client per credential (§5.3): a second process on the same pairing, `pair
    // stdio` (what install-mcp --tunnel configures) or another `pair connect`, is refused before
    // it connects or writes anything, naming the process that holds it.
    let connect_pid = connect.id().unwrap();
    let endpoint_text = endpoint.to_string();
    for second in [
        vec!["pair", "stdio", fingerprint.as_str()],
        // On the first one's own port: the pairing is named, not the port.
        vec!["pair", "connect", fingerprint.as_str(), "--listen", &endpoint_text],
    ] {
        let said = pap_fails(&device_state, &second);
        assert!(
            said.contains("already the tunnel client of this pairing")
                && said.contains(&format!("(pid {connect_pid})")),
            "{second:?}: {said}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&bearer_file).unwrap(),
        endpoint_bearer,
        "the endpoint's bearer is the first process's still"
    );
    // Only /mcp and /health: the host's /pair is not reachable through the tunnel.
    let pair = http
        .post(format!("http://{endpoint}/pair"))
        .bearer_auth(&endpoint_bearer)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(pair.status(), 404);
    assert!(pair.text().await.unwrap().starts_with("not_forwarded"));
    // No web page reaches the endpoint (DNS rebinding or a cross-site fetch).
    let from_page = http
        .get(format!("http://{endpoint}/health"))
        .header("origin", "https://evil.example")
        .bearer_auth(&endpoint_bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(from_page.status(), 403);
    let rebound = http
        .get(format!("http://{endpoint}/health"))
        .header("host", format!("evil.example:{}", endpoint.port()))
        .bearer_auth(&endpoint_bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    // An MCP client of the Rust SDK, through the tunnel: the host's tools (the endpoint's
    // bearer goes no further; the host serves the paired device).
    let client = mcp_device(endpoint, &endpoint_bearer).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "browser_navigate"), "{tools:?}");
    let listed = mcp_call(&client, "browser_profile_list", serde_json::json!({})).await;
    assert!(listed.is_ok(), "{listed:?}");
    client.cancel().await.unwrap();

    // What the broker saw: upgrade targets (side and route) and message sizes. No offer
    // secret, auth token, pair root or bearer.
    let backup = std::fs::read(&credential_path).unwrap();
    let stored: serde_json::Value = serde_json::from_slice(&backup).unwrap();
    let root_b64 = stored["pairRoot"].as_str().unwrap().to_owned();
    let root: [u8; 32] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&root_b64)
        .unwrap()
        .try_into()
        .unwrap();
    let today = pap_pair::derive::epoch_of(now() * 1000);
    let epoch = pap_pair::derive::epoch_tokens(&root, today).unwrap();
    let second = Offer::parse(&offer_text, now()).unwrap();
    let second_tokens = pap_pair::derive::offer_tokens(&second.secret).unwrap();
    let bearer = pap_host::pairing::tunnel_bearer(&root);
    let secrets = [
        second.secret.as_str(),
        offer.secret.as_str(),
        second_tokens.auth.as_str(),
        tokens.auth.as_str(),
        epoch.auth.as_str(),
        &root_b64,
        bearer.expose(),
        endpoint_bearer.as_str(),
    ];
    let journal = broker.journal.lines();
    assert!(
        journal
            .iter()
            .any(|l| l.contains(&format!("t={}", second_tokens.route)))
    );
    assert!(journal.iter().any(|l| l.contains(&format!("t={}", epoch.route))));
    for line in &journal {
        assert!(
            line.starts_with("upgrade GET /?side=") || line.starts_with("relay "),
            "{line}"
        );
        for secret in secrets {
            assert!(!line.contains(secret), "the broker saw a secret: {line}");
        }
    }
    eprintln!("what the broker saw ({} lines), the first 12:", journal.len());
    for line in journal.iter().take(12) {
        eprintln!("  {line}");
    }

    // Revoked on the host: the live channel is told (an authenticated pairing_revoked), and
    // the device's endpoint stops, saying so; the credential is marked and its root wiped.
    let client_dials = |route: &str| {
        let upgrade = format!("upgrade GET /?side=client&t={route}");
        broker.journal.lines().iter().filter(|l| **l == upgrade).count()
    };
    let dialed_before = client_dials(&epoch.route);
    pap(&host_state, &["devices", "revoke", "laptop"]);
    let ended = tokio::time::timeout(DEADLINE, connect.wait()).await.unwrap().unwrap();
    assert!(!ended.success());
    // It learned on its live channel (§6.1), not by dialing again into the tombstone.
    assert_eq!(
        client_dials(&epoch.route),
        dialed_before,
        "the device dialed again before it was told"
    );
    let mut lines = Vec::new();
    while let Ok(line) = heard.try_recv() {
        lines.push(line);
    }
    assert!(lines.iter().any(|l| l.contains("revoked this pairing")), "{lines:?}");
    let marked: serde_json::Value = serde_json::from_slice(&std::fs::read(&credential_path).unwrap()).unwrap();
    assert!(marked["revokedAt"].is_string() && marked["pairRoot"] == "", "{marked}");
    let again = std::process::Command::new(support::cli_agent::AGENT)
        .args([
            "--state-dir",
            device_state.to_str().unwrap(),
            "pair",
            "connect",
            &fingerprint,
        ])
        .output()
        .unwrap();
    assert!(!again.status.success(), "a revoked credential is never dialed again");
    assert!(String::from_utf8_lossy(&again.stderr).contains("revoked"));

    // A copy of the credential from before the revocation: the tombstone answers it with
    // pairing_revoked, and it stops (no retry loop).
    std::fs::write(&credential_path, &backup).unwrap();
    let (mut restored, _, mut heard) = pair_connect(&device_state, &[], &fingerprint).await;
    let ended = tokio::time::timeout(DEADLINE, restored.wait()).await.unwrap().unwrap();
    assert!(!ended.success());
    let mut lines = Vec::new();
    while let Ok(line) = heard.try_recv() {
        lines.push(line);
    }
    assert!(lines.iter().any(|l| l.contains("revoked this pairing")), "{lines:?}");
    // A dialer on the same route that knows the route and the pinned keys but not the epoch
    // auth (the broker's position) gets no pairing_revoked.
    let broker_view = connect_client(&dialer, &broker_url, &epoch.route, &pins, "wrong", "broker", &SystemRng).await;
    assert!(
        matches!(broker_view, Err(LinkError::Closed(_) | LinkError::Socket(_))),
        "{:?}",
        broker_view.as_ref().map(|_| "a channel")
    );

    stop_host(host, &host_state).await;
    let _ = std::fs::remove_dir_all(&work);
}
