//! The AIP-63 tool surface on real Chromium: the core tools in AIP-14 envelopes, typed
//! `browser:unsupported` naming the capability (T3), `browser:not_ready` with the state (L3),
//! `browser:target_gone` for a handle of a previous boot (L12), and a health check that opens
//! no target (L4).

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::PathBuf;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::target::GetTargetsParams;
use pap_agent::{BrowserHost, ChromiumConfig, ToolHost, load_manifest};
use pap_shared::{ToolErrorCode, ToolResult};
use serde_json::{Value, json};

fn manifest() -> pap_agent::BrowserManifest {
    load_manifest(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers/chromium/BROWSER.md")).unwrap()
}

fn ok(result: ToolResult) -> Value {
    match result {
        ToolResult::Ok(value) => value,
        ToolResult::Err(error) => panic!("{} {}", error.code.as_str(), error.message),
    }
}

fn err(result: ToolResult) -> pap_shared::ToolError {
    match result {
        ToolResult::Err(error) => error,
        ToolResult::Ok(value) => panic!("expected an error, got {value}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_tools_errors_and_stale_handles_on_real_chromium() {
    let state = std::env::temp_dir().join(format!("pap-tools-{}", std::process::id()));
    let host = BrowserHost::new();
    let tools = ToolHost::new(manifest(), host.clone(), ChromiumConfig::new(state.clone()), "tools");

    // Before any launch: not ready, with the state (L3), never an opaque error.
    let before = err(tools.call("browser.navigate", &json!({"url": "about:blank"})).await);
    assert_eq!(before.code, ToolErrorCode::NotReady);
    assert_eq!(before.cause.unwrap()["state"], "absent");

    tools.launch().await.unwrap();
    let page = "data:text/html,<title>t</title><h1 id=greeting>hello</h1>";
    let opened = ok(tools.call("browser.navigate", &json!({"url": page})).await);
    let target = opened["target"].as_str().unwrap().to_owned();
    let value = ok(tools
        .call(
            "browser.evaluate",
            &json!({"target": target, "expression": "document.getElementById('greeting').textContent"}),
        )
        .await);
    assert_eq!(value["value"], "hello");
    let dom = ok(tools
        .call("browser.get_dom", &json!({"target": target, "selector": "#greeting"}))
        .await);
    assert_eq!(dom["html"], "<h1 id=\"greeting\">hello</h1>");
    let shot = ok(tools
        .call("browser.screenshot", &json!({"target": target, "fullPage": true}))
        .await);
    assert!(shot["bytes"].as_u64().unwrap() > 100);

    // T3: a tool the manifest does not list answers browser:unsupported naming the capability.
    let unsupported = err(tools.call("browser.list_requests", &json!({"target": target})).await);
    assert_eq!(unsupported.code, ToolErrorCode::Unsupported);
    assert_eq!(unsupported.cause.unwrap()["capability"], "cdp");
    assert!(unsupported.message.contains("cdp"));
    // Input and lookup errors are typed too.
    assert_eq!(
        err(tools.call("browser.evaluate", &json!({"target": target})).await).code,
        ToolErrorCode::InputInvalid
    );
    assert_eq!(
        err(tools
            .call("browser.evaluate", &json!({"target": "t9-9", "expression": "1"}))
            .await)
        .code,
        ToolErrorCode::NotFound
    );

    // L4: health answers without opening a target.
    let browser = host.attach("tools").await.unwrap();
    let page = browser.new_page().await.unwrap();
    let count = || async {
        page.execute(GetTargetsParams::default())
            .await
            .unwrap()
            .result
            .target_infos
            .len()
    };
    let before = count().await;
    for _ in 0..3 {
        assert!(browser.is_healthy().await);
        assert!(host.health("tools").state.is_usable());
    }
    assert_eq!(count().await, before, "health opened a target");
    drop((page, browser));

    // L12: after a restart, the old handle is gone, never rebound.
    host.stop("tools", Duration::from_secs(2)).await.unwrap();
    let stopped = err(tools
        .call("browser.evaluate", &json!({"target": target, "expression": "1"}))
        .await);
    assert_eq!(stopped.code, ToolErrorCode::NotReady);
    assert_eq!(stopped.cause.unwrap()["state"], "stopped");
    tools.launch().await.unwrap();
    let gone = err(tools
        .call("browser.evaluate", &json!({"target": target, "expression": "1"}))
        .await);
    assert_eq!(gone.code, ToolErrorCode::TargetGone);
    host.stop("tools", Duration::from_secs(2)).await.unwrap();
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test]
async fn a_provider_without_cdp_answers_list_requests_with_unsupported_cdp() {
    // The canonical T3 example, on a provider whose manifest has no CDP at all; no browser runs.
    let mut manifest = manifest();
    manifest.browser.capabilities.cdp = false;
    manifest.implements.push(pap_agent::Implements {
        tool: "browser.list_requests".into(),
        version: "1".into(),
    });
    let tools = ToolHost::new(
        manifest,
        BrowserHost::new(),
        ChromiumConfig::new(std::env::temp_dir()),
        "no-cdp",
    );
    let error = err(tools.call("browser.list_requests", &json!({})).await);
    assert_eq!(error.code, ToolErrorCode::Unsupported);
    assert_eq!(error.cause.as_ref().unwrap(), &json!({"capability": "cdp"}));
    let envelope = ToolResult::Err(error).to_json();
    assert_eq!(envelope["ok"], false);
}
