//! A browser that comes back: `pap-agent host serve` with a paired device whose grant holds a
//! cookie; the agent's Chromium is SIGKILLed mid-session, five times. Each time:
//!
//! - `/health` shows it (the browser's `state` leaves `healthy`, with the exit as `reason`, or
//!   a new `bootId`) within 2 s of the kill;
//! - a tool call meanwhile answers a retryable `browser:not_ready` (or `browser:starting`), never
//!   an opaque failure;
//! - the first successful tool call after the kill comes within 10 s (the goal: 5 s, median);
//! - the old tab answers `browser:target_gone` (L12), and a new tab on the granted site carries
//!   the grant's cookie again (re-injected into the device's context).
//!
//! The times are printed (the README's figures); the median of the five is asserted under 5 s.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Stage;
use support::cli_agent::{
    agent_and_company, health, host_serve, mcp_call as call, mcp_device as device, pair_over_http, pap, stop_host,
    test_network,
};

/// What the device's grant holds: a cookie the page can read (its value is the person's, and
/// the tools redact it; its name shows it is there).
const COOKIE: &str = "pref";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_browser_killed_under_the_host_is_noticed_and_comes_back_with_the_devices_grants() {
    let mut stage = Stage::new("mcp-recovery", &["shop.example", "atlas.example"]).await;
    let (state, _company, shop) = agent_and_company(&mut stage).await;
    let (host, addr) = host_serve(&state, &test_network(&stage, shop)).await;
    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    let (id, bearer) = pair_over_http(&http, addr, &state, "recovering-device").await;
    let source = stage.work.join("storage-state.json");
    std::fs::write(
        &source,
        json!({"cookies": [{"name": COOKIE, "value": "RECOVERY-CANARY-3f1a", "domain": ".shop.example",
                            "path": "/", "secure": true}], "origins": []})
        .to_string(),
    )
    .unwrap();
    pap(
        &state,
        &[
            "consent",
            "grant",
            "--domain",
            "shop.example",
            "--source",
            source.to_str().unwrap(),
            "--device",
            &id,
        ],
    );
    let client = device(addr, &bearer).await;
    let open = || call(&client, "browser_navigate", json!({"url": "https://shop.example/"}));
    let has_cookie = |target: Value| {
        let client = &client;
        async move {
            let read = call(
                client,
                "browser_evaluate",
                json!({"target": target, "expression": "document.cookie"}),
            )
            .await
            .unwrap();
            read["value"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("{COOKIE}="))
        }
    };
    let tab = open().await.unwrap();
    assert!(
        has_cookie(tab["target"].clone()).await,
        "the grant's cookie before any kill"
    );

    let mut noticed = Vec::new();
    let mut recovered = Vec::new();
    let mut tab = tab;
    for round in 1..=5 {
        let before = health(&http, addr).await;
        assert_eq!(before["browser"]["state"], "healthy", "round {round}: {before}");
        let boot = before["browser"]["bootId"].as_u64().unwrap();
        let browsers = pap_browser::chromium::browsers_of(&pap_browser::chromium::ProcTable, &state).unwrap();
        assert_eq!(browsers.len(), 1, "round {round}: {browsers:?}");
        let killed = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(browsers[0].pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();

        // Noticed: /health no longer says healthy on the old boot.
        let deadline = killed + Duration::from_secs(2);
        let mut ticks = tokio::time::interval(Duration::from_millis(20));
        let seen = loop {
            ticks.tick().await;
            let now = health(&http, addr).await;
            let browser = &now["browser"];
            if browser["state"] != "healthy" || browser["bootId"].as_u64() != Some(boot) {
                break now;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the exit was not noticed in 2 s: {now}"
            );
        };
        noticed.push(killed.elapsed());
        if seen["browser"]["state"] == "stopped" {
            let reason = seen["browser"]["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("exited"), "round {round}: {seen}");
        }

        // Calls until one succeeds; each failure meanwhile is a retryable not-ready answer.
        let deadline = killed + Duration::from_secs(10);
        let mut retry = tokio::time::interval(Duration::from_millis(100));
        let fresh = loop {
            match open().await {
                Ok(fresh) => break fresh,
                Err(error) => {
                    let code = error["code"].as_str().unwrap_or_default();
                    assert!(
                        ["browser:not_ready", "browser:starting"].contains(&code) && error["retryable"] == true,
                        "round {round}: {error}"
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no successful call 10 s after the kill"
            );
            // Within the host's rate limit (10 calls a second per tool and device).
            retry.tick().await;
        };
        recovered.push(killed.elapsed());

        let stale = call(&client, "browser_get_dom", json!({"target": tab["target"]}))
            .await
            .unwrap_err();
        assert_eq!(stale["code"], "browser:target_gone", "round {round}: {stale}");
        assert!(
            has_cookie(fresh["target"].clone()).await,
            "round {round}: the device's grant was not put back"
        );
        tab = fresh;
    }

    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    eprintln!(
        "kill-and-recover over 5 rounds: noticed (median) {:.0} ms, first successful call (median) {:.0} ms; each: {:?}",
        ms(median(&mut noticed)),
        ms(median(&mut recovered)),
        recovered
            .iter()
            .map(|d| format!("{:.0} ms", ms(*d)))
            .collect::<Vec<_>>(),
    );
    assert!(
        median(&mut recovered) < Duration::from_secs(5),
        "the median recovery is over 5 s"
    );

    drop(client);
    stop_host(host, &state).await;
    let _ = std::fs::remove_dir_all(&stage.work);
}
