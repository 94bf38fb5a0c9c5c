//! Review M5 on real Chromium: a grant's cookies live in a browser context of their own, so a
//! page elsewhere (a hostile site a tool visits, a company's page after a join) cannot ride the
//! person's session on a granted domain with a cross-site form POST, `fetch` or image.
//!
//! The review's probe: grant `bank.example` (a `SameSite=None` session cookie), then have a page
//! of another site auto-POST to `https://bank.example/echo`. Every site here is one HTTPS server
//! on loopback (the stage's test PKI, names routed by the browser's resolver rules); it records
//! the `Cookie` header of every request to `/echo` and `/whoami`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use pap_agent::{join_tab, spki_pin};
use pap_browser::chromium::{BrowserHost, ChromiumConfig, TestNetwork};
use pap_browser::consent::{Caller, GrantRequest, SourceSpec};
use pap_browser::spec::{AgentCaller, InstanceKey, Operator, ToolErrorCode, ToolResult};
use pap_browser::testkit::{chromium_manifest, consent_at, ok};
use pap_browser::tools::ToolHost;
use pap_net::listener::TlsListener;
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
        .route(
            "/cart",
            axum::routing::get(|| async {
                axum::response::Html("<script>document.cookie = 'cart=CART-OF-A; Secure; path=/';</script>")
            }),
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

/// The tool host of instance `instance` over `state`, its browser reaching the sites at `addr`.
fn tool_host(
    stage: &Stage,
    state: &std::path::Path,
    addr: SocketAddr,
    host: &BrowserHost,
    instance: &str,
) -> std::sync::Arc<ToolHost> {
    ToolHost::new(
        chromium_manifest(),
        host.clone(),
        browser_config(stage, state.to_path_buf(), addr),
        InstanceKey::try_from(instance).unwrap(),
        consent_at(state),
    )
}

/// Grants `domain` its session cookie (`SameSite=None`: sent on cross-site requests).
fn grant(state: &std::path::Path, domain: &str, value: &str) -> String {
    grant_to(state, domain, value, None)
}

/// [`grant`], scoped to the paired device `device` when one is named (C12).
fn grant_to(state: &std::path::Path, domain: &str, value: &str, device: Option<&str>) -> String {
    let source = state.join(format!("{domain}-storage-state.json"));
    std::fs::write(
        &source,
        json!({"cookies": [{"name": "sid", "value": value, "domain": domain, "path": "/",
            "secure": true, "httpOnly": true, "sameSite": "None"}], "origins": []})
        .to_string(),
    )
    .unwrap();
    let mut request = GrantRequest::for_domains(SourceSpec::StorageState(source), &[domain]);
    request.device_id = device.map(str::to_owned);
    consent_at(state)
        .grant(&Operator::from_operator_channel("test"), request)
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
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_page_elsewhere_never_rides_a_granted_session() {
    let stage = Stage::new("contexts", &["bank.example", "evil.example", "shop.example"]).await;
    let (addr, seen) = sites(&stage).await;
    let state = stage.work.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let bank_grant = grant(&state, "bank.example", BANK_SESSION);
    grant(&state, "shop.example", SHOP_SESSION);

    let host = BrowserHost::new();
    let tools = tool_host(&stage, &state, addr, &host, "contexts");
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

/// Issue 15, item 4: each paired device has its own jars and its own tabs. A grant scoped to
/// device A is absent for device B (C12); a grant both may use gives each its own context, so
/// what A's pages set never reaches B's; A's tabs are not B's targets; ending A's pairing ends
/// its tabs and contexts (C13).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn each_paired_device_has_its_own_jars_and_tabs() {
    let stage = Stage::new("devices", &["bank.example", "evil.example", "shop.example"]).await;
    let (addr, seen) = sites(&stage).await;
    let state = stage.work.join("state");
    std::fs::create_dir_all(&state).unwrap();
    grant_to(&state, "bank.example", BANK_SESSION, Some("device-a"));
    grant(&state, "shop.example", SHOP_SESSION);
    let tools = tool_host(&stage, &state, addr, &BrowserHost::new(), "devices");
    tools.launch().await.unwrap();
    let (a, b) = (AgentCaller::paired("device-a"), AgentCaller::paired("device-b"));

    // Device B: the bank's grant is A's, so B's bank page has no session (C12)...
    ok(tools
        .call_as(&b, "browser.navigate", &json!({"url": "https://bank.example/whoami"}))
        .await);
    let all = bank_saw(&seen, 1).await;
    assert!(!all[0].1.contains(BANK_SESSION), "device B rode device A's grant");
    // ... while A's has it (the grant works).
    let a_bank = ok(tools
        .call_as(&a, "browser.navigate", &json!({"url": "https://bank.example/whoami"}))
        .await);
    let all = bank_saw(&seen, 2).await;
    assert!(
        all[1].1.contains(BANK_SESSION),
        "device A's own grant did not reach its page"
    );

    // A's tab is not B's target: B cannot use it, close it or see it listed.
    for (tool, input) in [
        (
            "browser.evaluate",
            json!({"target": a_bank["target"], "expression": "document.cookie"}),
        ),
        ("browser.get_dom", json!({"target": a_bank["target"]})),
        ("browser.tabs", json!({"action": "close", "target": a_bank["target"]})),
    ] {
        match tools.call_as(&b, tool, &input).await {
            ToolResult::Err(e) => assert_eq!(e.code, ToolErrorCode::NotFound, "{tool}"),
            ToolResult::Ok(v) => panic!("device B used device A's tab with {tool}: {v}"),
        }
    }
    let listed = ok(tools.call_as(&b, "browser.tabs", &json!({"action": "list"})).await);
    assert!(
        !listed.to_string().contains(a_bank["target"].as_str().unwrap()),
        "{listed}"
    );

    // The shop's grant is both devices', in a jar each: A's page sets a cookie B never carries.
    ok(tools
        .call_as(&a, "browser.navigate", &json!({"url": "https://shop.example/cart"}))
        .await);
    let a_shop = ok(tools
        .call_as(&a, "browser.navigate", &json!({"url": "https://shop.example/whoami"}))
        .await);
    let all = bank_saw(&seen, 3).await;
    assert!(
        all[2].1.contains("CART-OF-A") && all[2].1.contains(SHOP_SESSION),
        "device A's shop page: {:?}",
        all[2]
    );
    ok(tools
        .call_as(&b, "browser.navigate", &json!({"url": "https://shop.example/whoami"}))
        .await);
    let all = bank_saw(&seen, 4).await;
    assert!(
        all[3].1.contains(SHOP_SESSION),
        "device B's shop page lacked the shared grant"
    );
    assert!(!all[3].1.contains("CART-OF-A"), "device A's cookie reached device B");

    // Device A's pairing ends: its tabs and contexts go; B's stay.
    assert_eq!(tools.end_device("device-a").await.unwrap(), 2);
    for target in [&a_bank["target"], &a_shop["target"]] {
        let gone = tools
            .call_as(&a, "browser.evaluate", &json!({"target": target, "expression": "1"}))
            .await;
        assert!(matches!(gone, ToolResult::Err(_)), "device A's tab still answers");
    }
    let b_tabs = ok(tools.call_as(&b, "browser.tabs", &json!({})).await);
    assert_eq!(b_tabs["targets"].as_array().unwrap().len(), 2, "{b_tabs}");

    tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&stage.work);
}
