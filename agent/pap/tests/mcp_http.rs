//! `pap-agent host serve` (MCP over streamable HTTP) as a stranger and two paired devices meet
//! it, with an MCP client of the official Rust SDK for the devices and raw HTTP for the rest:
//!
//! - the guard: a rebinding-style `Host` 403 and a foreign `Origin` 403, on every route; no
//!   bearer (or a wrong one) 401 with `WWW-Authenticate: Bearer realm=...` and a body that says
//!   nothing; `/health` open; a non-loopback bind refused at start without `--allow-remote`;
//! - pairing: a one-time code from `pap-agent pair` exchanged at `POST /pair`, once;
//! - the PAP steps as tools: a Session started and signed in with Device Sign-In (started and
//!   polled without blocking the host; the person approves at the company), an operation
//!   proposed, the Session joined on the operation's page in a tab of device A's;
//! - per-device contexts: device B is refused the join (`browser:consent_required`, the grant is
//!   A's), cannot use A's tab, and revoking A refuses A's very next request.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use support::Stage;
use support::cli_agent::{
    agent_and_company, browsers, host_serve, host_serve_with, mcp_call as call, mcp_device as device,
    pair_over_http as pair, pap, pap_fails, stop_host, test_network, until_a_browser_runs,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn paired_devices_reach_the_browser_and_pap_through_the_guarded_http_host() {
    let mut stage = Stage::new("mcp-http", &["shop.example", "atlas.example"]).await;
    let (state, company, shop) = agent_and_company(&mut stage).await;

    // A non-loopback address needs the operator's explicit flag...
    let said = pap_fails(&state, &["host", "serve", "--listen", "0.0.0.0:0"]);
    assert!(said.contains("--allow-remote"), "{said}");
    // ... and TLS, or every device's bearer would cross the network in the clear.
    let said = pap_fails(&state, &["host", "serve", "--listen", "0.0.0.0:0", "--allow-remote"]);
    assert!(said.contains("--tls-cert"), "{said}");
    // With both, it serves HTTPS on every interface; the guard still answers only the names
    // it expects (here the certificate's, which the operator allowed).
    let (remote, remote_addr) = host_serve_with(
        &state,
        &[],
        &[
            "--listen",
            "0.0.0.0:0",
            "--allow-remote",
            "--tls-cert",
            stage.cert.to_str().unwrap(),
            "--tls-key",
            stage.key.to_str().unwrap(),
            "--allow-host",
            "shop.example",
        ],
    )
    .await;
    let roots = pap_net::tls::trust_roots(std::slice::from_ref(&stage.ca_der)).unwrap();
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], remote_addr.port()));
    let https = pap_agent::testkit::plain_http_client(roots, &[("shop.example".to_owned(), local)].into()).unwrap();
    let health = https
        .get(format!("https://shop.example:{}/health", remote_addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "over TLS");
    let unnamed = https
        .get(format!("https://shop.example:{}/health", remote_addr.port()))
        .header("host", format!("attacker.example:{}", remote_addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(unnamed.status(), 403, "a Host the operator did not allow");
    stop_host(remote, &state).await;

    let (host, addr) = host_serve(&state, &test_network(&stage, shop)).await;
    // A stranger's plain HTTP client (the host speaks HTTP on loopback).
    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    let base = format!("http://{addr}");

    // The guard and the 401.
    let health = http.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200, "{:?}", health.text().await);
    let health: Value = serde_json::from_str(&health.text().await.unwrap()).unwrap();
    assert_eq!(health["ok"], true, "{health}");
    assert!(health["tools"].as_u64().unwrap() >= 20, "{health}");
    // The browser's state, as AIP-63's health() reports it (none launched yet).
    assert_eq!(health["browser"]["state"], "absent", "{health}");
    for path in ["/health", "/mcp", "/pair"] {
        let rebinding = http
            .post(format!("{base}{path}"))
            .header("host", format!("attacker.example:{}", addr.port()))
            .send()
            .await
            .unwrap();
        assert_eq!(rebinding.status(), 403, "a rebinding Host on {path}");
        let foreign = http
            .post(format!("{base}{path}"))
            .header("origin", "https://attacker.example")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status(), 403, "a foreign Origin on {path}");
    }
    for bearer in [None, Some("papdev_guessed")] {
        let mut request = http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), 401);
        assert_eq!(answer.headers()["www-authenticate"], "Bearer realm=\"pap-agent\"");
        assert_eq!(answer.text().await.unwrap(), r#"{"error":"unauthorized"}"#);
    }

    // Two devices pair; the operator grants the shop to A only (C12).
    let (a_id, a_bearer) = pair(&http, addr, &state, "device-a").await;
    let (_b_id, b_bearer) = pair(&http, addr, &state, "device-b").await;
    pap(
        &state,
        &["consent", "grant", "--domain", "shop.example", "--device", &a_id],
    );
    let a = device(addr, &a_bearer).await;
    let b = device(addr, &b_bearer).await;
    let names: Vec<String> = a
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    for wanted in ["browser_navigate", "pap_join", "pap_signin_start", "pap_signin_status"] {
        assert!(names.contains(&wanted.to_owned()), "{wanted}: {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.contains("approve") || n.contains("confirm")),
        "{names:?}"
    );

    // The PAP steps, as device A: a Session, signed in by the person, an operation.
    let started = call(&a, "pap_session_start", json!({"domain": "shop.example"}))
        .await
        .unwrap();
    assert_eq!(started["signedIn"], false);
    let signin = call(&a, "pap_signin_start", json!({"domain": "shop.example"}))
        .await
        .unwrap();
    assert_eq!(signin["state"], "pending");
    // The host is not blocked while the sign-in waits for the person.
    let pending = call(&a, "pap_signin_status", json!({"domain": "shop.example"}))
        .await
        .unwrap();
    assert_eq!(pending["state"], "pending");
    company
        .approve_device(signin["userCode"].as_str().unwrap(), "acct_ada", None)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let status = call(&a, "pap_signin_status", json!({"domain": "shop.example"}))
            .await
            .unwrap();
        if status["state"] == "signed_in" {
            break;
        }
        assert_eq!(status["state"], "pending", "{status}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sign-in did not finish in 30 s"
        );
    }
    let operation = call(
        &a,
        "pap_propose",
        json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges", "body": {}}),
    )
    .await
    .unwrap();
    let page = operation["url"].as_str().unwrap().to_owned();

    // Device B holds no Session of A's (review N5)...
    let none = call(&b, "pap_join", json!({"domain": "shop.example", "returnTo": page}))
        .await
        .unwrap_err();
    assert_eq!(none["code"], "not_found", "{none}");
    // ... and with one of its own, the shop's grant is A's, so B's join is refused (C12).
    call(&b, "pap_session_start", json!({"domain": "shop.example"}))
        .await
        .unwrap();
    let refused = call(&b, "pap_join", json!({"domain": "shop.example", "returnTo": page}))
        .await
        .unwrap_err();
    assert_eq!(refused["code"], "browser:consent_required", "{refused}");

    // Device A joins and lands on the operation's page, in the Session.
    let joined = call(&a, "pap_join", json!({"domain": "shop.example", "returnTo": page}))
        .await
        .unwrap();
    assert_eq!(joined["url"], page.as_str());
    assert_eq!(joined["status"], 200);
    let dom = call(&a, "browser_get_dom", json!({"target": joined["target"]}))
        .await
        .unwrap();
    let html = dom["html"].as_str().unwrap();
    assert!(
        html.contains(operation["operation_id"].as_str().unwrap()),
        "the operation's page: {html}"
    );
    assert!(html.contains("value=\"confirm\""), "the page's own confirm form");

    // B cannot use A's tab.
    let foreign = call(&b, "browser_get_dom", json!({"target": joined["target"]}))
        .await
        .unwrap_err();
    assert_eq!(foreign["code"], "not_found");

    // Unpairing A refuses its very next request.
    // By name; its signed-in Session is signed out at the company and its record removed (N5).
    let mut revoke = test_network(&stage, shop);
    revoke.extend(["devices".to_owned(), "revoke".to_owned(), "device-a".to_owned()]);
    let unpaired: Value =
        serde_json::from_str(&pap(&state, &revoke.iter().map(String::as_str).collect::<Vec<_>>())).unwrap();
    assert_eq!(unpaired["unpaired"], a_id.as_str(), "{unpaired}");
    assert_eq!(unpaired["sessionsSignedOut"], json!(["shop.example"]), "{unpaired}");
    assert!(pap_agent::Wallet::held_by_device(&state, &a_id).unwrap().is_empty());
    let after = a.call_tool(CallToolRequestParams::new("browser_tabs")).await;
    assert!(after.is_err(), "an unpaired device's request went through: {after:?}");
    let raw = http
        .post(format!("{base}/mcp"))
        .bearer_auth(&a_bearer)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 401);
    assert!(
        call(&b, "browser_tabs", json!({})).await.is_ok(),
        "device B lost its access"
    );

    drop(a);
    drop(b);
    stop_host(host, &state).await;
    let _ = std::fs::remove_dir_all(&stage.work);
}

/// `host serve --launch-at-start` (issue 42): the browser runs before any device connects, a
/// paired device's first call uses it (one browser, not a second), and SIGTERM stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_served_host_launching_at_start_runs_its_browser_before_any_device_calls() {
    let mut stage = Stage::new("mcp-http-start", &["shop.example", "atlas.example"]).await;
    let (state, _company, shop) = agent_and_company(&mut stage).await;
    let net = test_network(&stage, shop);
    let (host, addr) = host_serve_with(&state, &net, &["--listen", "127.0.0.1:0", "--launch-at-start"]).await;
    until_a_browser_runs(&state).await;
    let launched = browsers(&state);

    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    let (id, bearer) = pair(&http, addr, &state, "device-a").await;
    pap(
        &state,
        &["consent", "grant", "--domain", "shop.example", "--device", &id],
    );
    let device = device(addr, &bearer).await;
    let opened = call(&device, "browser_navigate", json!({"url": "https://shop.example/"}))
        .await
        .unwrap();
    assert_eq!(opened["url"], "https://shop.example/");
    // The browser launched at start, not one launched (or relaunched) by the call.
    let running = browsers(&state);
    assert_eq!(
        running.iter().map(|b| b.pid).collect::<Vec<_>>(),
        launched.iter().map(|b| b.pid).collect::<Vec<_>>(),
        "{running:?}"
    );
    device.cancel().await.unwrap();
    stop_host(host, &state).await;
    let _ = std::fs::remove_dir_all(&stage.work);
}
