//! Review M5 on real Chromium: a grant's cookies live in a browser context of their own, so a
//! page elsewhere (a hostile site a tool visits, a company's page after a join) cannot ride the
//! person's session on a granted domain with a cross-site form POST, `fetch` or image.
//!
//! The review's probe: grant `bank.example` (a `SameSite=None` session cookie), then have a page
//! of another site auto-POST to `https://bank.example/echo`. Every site here is one HTTPS server
//! on loopback (the stage's test PKI, names routed by the browser's resolver rules); it records
//! the `Cookie` header of every request to `/echo` and `/whoami`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use pap_agent::{TlsListener, join_tab, spki_pin};
use pap_browser::chromium::{BrowserHost, ChromiumConfig, TestNetwork};
use pap_browser::consent::{Caller, GrantRequest, SourceSpec};
use pap_browser::spec::{InstanceKey, Operator, ToolErrorCode, ToolResult};
use pap_browser::testkit::{chromium_manifest, consent_at, ok};
use pap_browser::tools::ToolHost;
use serde_json::json;
use support::Stage;

const BANK_SESSION: &str = "BANK-SESSION-CANARY-51c0";
const SHOP_SESSION: &str = "SHOP-SESSION-CANARY-9e2d";

/// What reached the bank: (path, the Cookie header).
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A page that rides whatever session the browser holds for the bank, three ways.
const HOSTILE: &str = "<h1>prize</h1>\
    <form id=f method=post action='https://bank.example/echo'><input name=to value=mallory></form>\
    <script>\
      fetch('https://bank.example/echo?fetch', {method: 'POST', credentials: 'include', mode: 'no-cors'});\
      new Image().src = 'https://bank.example/echo?image';\
      document.getElementById('f').submit();\
    </script>";

async fn sites(stage: &Stage) -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let record = |seen: Seen| {
        move |uri: axum::http::Uri, headers: HeaderMap| async move {
            let cookie = headers
                .get("cookie")
                .and_then(|c| c.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            seen.lock().unwrap().push((uri.to_string(), cookie));
            "seen"
        }
    };
    let app = axum::Router::new()
        .route(
            "/hostile",
            axum::routing::get(|| async { axum::response::Html(HOSTILE) }),
        )
        .route("/echo", axum::routing::any(record(seen.clone())))
        .route("/whoami", axum::routing::get(record(seen.clone())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let key = std::fs::read(&stage.key).unwrap();
    let tls = TlsListener::new(listener, &stage.cert_pem, &key).unwrap();
    tokio::spawn(axum::serve(tls, app).into_future());
    (addr, seen)
}

fn browser_config(stage: &Stage, state: std::path::PathBuf, addr: SocketAddr) -> ChromiumConfig {
    let mut config = ChromiumConfig::new(state);
    config.test_network = TestNetwork {
        map: ["bank.example", "evil.example", "shop.example"]
            .into_iter()
            .map(|name| (name.to_owned(), addr))
            .collect(),
        spki_pins: vec![spki_pin(&stage.cert_pem).unwrap()],
    };
    config
}

/// Grants `domain` its session cookie (`SameSite=None`: sent on cross-site requests).
fn grant(state: &std::path::Path, domain: &str, value: &str) -> String {
    let source = state.join(format!("{domain}-storage-state.json"));
    std::fs::write(
        &source,
        json!({"cookies": [{"name": "sid", "value": value, "domain": domain, "path": "/",
            "secure": true, "httpOnly": true, "sameSite": "None"}], "origins": []})
        .to_string(),
    )
    .unwrap();
    consent_at(state)
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::for_domains(SourceSpec::StorageState(source), &[domain]),
        )
        .unwrap()
        .id
}

/// Waits (10 s at most) until the bank has seen `n` requests, then returns them all.
async fn bank_saw(seen: &Seen, n: usize) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let now = seen.lock().unwrap().clone();
        if now.len() >= n || tokio::time::Instant::now() > deadline {
            return now;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_elsewhere_never_rides_a_granted_session() {
    let stage = Stage::new("contexts", &["bank.example", "evil.example", "shop.example"]).await;
    let (addr, seen) = sites(&stage).await;
    let state = stage.work.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let bank_grant = grant(&state, "bank.example", BANK_SESSION);
    grant(&state, "shop.example", SHOP_SESSION);

    let host = BrowserHost::new();
    let tools = ToolHost::new(
        chromium_manifest(),
        host.clone(),
        browser_config(&stage, state.clone(), addr),
        InstanceKey::try_from("contexts").unwrap(),
        consent_at(&state),
    );
    tools.launch().await.unwrap();

    // A tool visits a hostile site: its form POST, fetch and image reach the bank without the
    // granted cookie.
    ok(tools
        .call("browser.navigate", &json!({"url": "https://evil.example/hostile"}))
        .await);
    let from_hostile = bank_saw(&seen, 3).await;
    assert_eq!(from_hostile.len(), 3, "the hostile page's requests: {from_hostile:?}");
    for (path, cookie) in &from_hostile {
        assert!(!cookie.contains(BANK_SESSION), "{path} carried the bank session");
    }

    // The bank's own page, in the bank grant's context, has its session (the grant works: the
    // test above could have failed), and none of the shop's.
    let bank = ok(tools
        .call("browser.navigate", &json!({"url": "https://bank.example/whoami"}))
        .await);
    let all = bank_saw(&seen, 4).await;
    let (_, cookie) = all.last().unwrap();
    assert!(cookie.contains(BANK_SESSION), "the bank's own page lacked its session");
    assert!(
        !cookie.contains(SHOP_SESSION),
        "the bank's page carried the shop's session"
    );
    // The bank's tab is not sent to another site: the hostile page would run in the bank's jar.
    // (Had it loaded, its three requests would carry the bank session into the count below.)
    let refused = tools
        .call(
            "browser.navigate",
            &json!({"url": "https://evil.example/hostile", "target": bank["target"]}),
        )
        .await;
    match refused {
        ToolResult::Err(e) => {
            assert_eq!(e.code, ToolErrorCode::PermissionDenied);
            assert_eq!(e.cause.unwrap()["rule"], "context");
        }
        ToolResult::Ok(v) => panic!("the bank's tab went to another site: {v}"),
    }

    // A join to the shop: its tab holds the shop's grant only. The company's page posting to the
    // bank rides nothing.
    let browser = host.attach("contexts").await.unwrap();
    let caller = Caller::local_agent();
    let joined = join_tab(&browser, tools.consent(), &caller, "shop.example")
        .await
        .unwrap();
    joined.goto("https://shop.example/hostile").await.unwrap();
    let all = bank_saw(&seen, 7).await;
    assert_eq!(all.len(), 7, "the shop page's requests: {all:?}");
    for (path, cookie) in &all[4..] {
        assert!(
            !cookie.contains(BANK_SESSION),
            "from the join's tab, {path} carried the bank session"
        );
    }
    joined.goto("https://shop.example/whoami").await.unwrap();
    let all = bank_saw(&seen, 8).await;
    let (_, cookie) = all.last().unwrap();
    assert!(
        cookie.contains(SHOP_SESSION) && !cookie.contains(BANK_SESSION),
        "the join's own tab"
    );

    // Revoking the bank's grant ends its context: its tab and its cookie are gone.
    let revoked = ok(tools
        .call("browser.profile.revoke", &json!({"grantId": bank_grant}))
        .await);
    assert!(revoked["tabsClosed"].as_u64().unwrap() >= 1, "{revoked}");
    let names = browser.cookie_names().await.unwrap();
    assert!(!names.iter().any(|(_, d)| d.contains("bank.example")), "{names:?}");
    let gone = tools
        .call(
            "browser.evaluate",
            &json!({"target": bank["target"], "expression": "1"}),
        )
        .await;
    assert!(
        matches!(gone, pap_browser::spec::ToolResult::Err(_)),
        "the bank's tab still answers"
    );

    drop(browser);
    host.stop("contexts", Duration::from_secs(2)).await.unwrap();
    let _ = std::fs::remove_dir_all(&stage.work);
}
