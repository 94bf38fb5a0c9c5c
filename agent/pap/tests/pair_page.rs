//! The browser client of AIP-59 (§1.3, §3.6, §4, §5), in real Chromium: our pair page
//! (`pap-agent pair page`) opens a web-form offer from `pap-agent pair offer --pair-page`,
//! removes the fragment, pairs with WebCrypto through our broker with `pap-agent host serve`,
//! shows the fingerprint and the host's name, keeps the credential when told to, and its
//! service worker then fetches `/health` and an MCP `tools/list` through the tunnel. The
//! credential's root in IndexedDB is a non-extractable key, the worker answers only its own
//! scope, and an event stream reaches the page as a stream. On a host's own origin
//! (`http://{fp}.localhost:PORT`, §5.8) the page pairs only that host's offer.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use chromiumoxide::{Browser, BrowserConfig, Page};
use futures_util::StreamExt as _;
use pap_pair::offer::Offer;
use pap_shared::{Clock as _, SystemClock};
use serde_json::Value;
use support::cli_agent::{agent_saying, host_serve, pap, rendezvous, stop_host};

const DEADLINE: Duration = Duration::from_secs(30);

async fn evaluate(page: &Page, script: &str) -> Value {
    page.evaluate(script)
        .await
        .unwrap()
        .into_value::<Value>()
        .unwrap_or(Value::Null)
}

/// Waits (30 s at most) until the page's `data-state` is `wanted` (a MutationObserver in the
/// page tells); fails at once on `error`, with what the page said.
async fn until_state(page: &Page, wanted: &str) {
    let script = format!(
        r#"new Promise((resolve) => {{
            const check = () => {{
                const state = document.body.dataset.state;
                if (state === "{wanted}" || state === "error") resolve(state);
            }};
            new MutationObserver(check).observe(document.body, {{ attributes: true }});
            check();
        }})"#
    );
    match tokio::time::timeout(DEADLINE, page.evaluate(script.as_str())).await {
        Ok(Ok(reached)) if reached.value() == Some(&Value::String(wanted.to_owned())) => {}
        outcome => {
            let state = evaluate(page, "document.body.dataset.state").await;
            let said = evaluate(page, "document.getElementById('said').textContent").await;
            let timed_out = outcome.is_err();
            panic!("the pair page never reached {wanted} (timed out: {timed_out}): it is {state}, saying {said}");
        }
    }
}

/// An offer from the host of `host_state` (`pap-agent pair offer`) for a device called `name`,
/// through the broker at `broker_url`, its web form at `page` (a template with `{fp}` or not).
fn offer_from(host_state: &std::path::Path, broker_url: &str, name: &str, page: &str) -> Offer {
    let canonical = pap(
        host_state,
        &[
            "pair",
            "offer",
            "--rendezvous",
            broker_url,
            "--name",
            name,
            "--pair-page",
            page,
        ],
    );
    Offer::parse(canonical.trim(), SystemClock.now().as_secs()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_browser_pairs_from_the_web_form_and_reaches_the_host_through_its_service_worker() {
    let work = std::env::temp_dir().join(format!("pap-pair-page-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let host_state = work.join("host");
    pap(&host_state, &["identity", "init", "atlas.example"]);
    let (broker_url, _broker) = rendezvous().await;
    let (host, _) = host_serve(&host_state, &[]).await;

    let (mut pair_page, page_url) = agent_saying(&["pair", "page", "--listen", "127.0.0.1:0"], "pair page on ").await;
    let origin = page_url.trim_end_matches("/pair").to_owned();

    let offer = offer_from(&host_state, &broker_url, "phone", &page_url);
    let web = offer.to_web_url(&page_url).unwrap();

    let config = BrowserConfig::builder()
        .chrome_executable("/usr/bin/chromium")
        .no_sandbox()
        .new_headless_mode()
        .user_data_dir(work.join("chromium"))
        .build()
        .unwrap();
    let (mut browser, mut handler) = Browser::launch(config).await.unwrap();
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let page = browser.new_page(web.as_str()).await.unwrap();
    // chromiumoxide attaches to every new target paused (waitForDebuggerOnStart) and races to
    // resume service workers; a worker left paused never installs. The test's CDP session does
    // not need the worker's target at all.
    page.execute(
        chromiumoxide::cdp::browser_protocol::target::SetAutoAttachParams::builder()
            .auto_attach(false)
            .wait_for_debugger_on_start(false)
            .flatten(true)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();

    until_state(&page, "confirm").await;
    // §1.3: the offer is out of the address bar and the history before any network I/O.
    let location = evaluate(&page, "location.href").await;
    assert_eq!(location, Value::String(page_url.clone()), "the fragment stayed");
    // §3.6: the fingerprint and the host's name, then the person's word.
    assert_eq!(
        evaluate(&page, "document.getElementById('fingerprint').textContent").await,
        Value::String(offer.fingerprint.clone())
    );
    let name = evaluate(&page, "document.getElementById('name').textContent").await;
    assert!(name.as_str().unwrap().starts_with("pap-agent"), "{name}");
    evaluate(&page, "document.getElementById('keep').click()").await;
    until_state(&page, "paired").await;

    // The service worker serves /d/<fingerprint>/ from the host through the tunnel.
    let health = format!("{origin}/d/{}/health", offer.fingerprint);
    page.goto(health.as_str()).await.unwrap();
    let body = evaluate(&page, "document.body.innerText").await;
    let health: Value = serde_json::from_str(body.as_str().unwrap()).unwrap();
    assert_eq!(health["ok"], true, "{health}");

    // An MCP client in the page: initialize, then tools/list, each through the worker.
    let script = format!(
        r#"(async () => {{
            const mcp = "/d/{fp}/mcp";
            const headers = {{ "content-type": "application/json", "accept": "application/json, text/event-stream" }};
            const data = (text) => JSON.parse(text.split("\n").filter((l) => l.startsWith("data: {{")).map((l) => l.slice(6))[0]);
            const init = await fetch(mcp, {{ method: "POST", headers, body: JSON.stringify({{ jsonrpc: "2.0", id: 1, method: "initialize",
                params: {{ protocolVersion: "2025-06-18", capabilities: {{}}, clientInfo: {{ name: "pair-page-test", version: "1" }} }} }}) }});
            const session = init.headers.get("mcp-session-id");
            const version = data(await init.text()).result.protocolVersion;
            const more = {{ ...headers, "mcp-session-id": session, "mcp-protocol-version": version }};
            await fetch(mcp, {{ method: "POST", headers: more, body: JSON.stringify({{ jsonrpc: "2.0", method: "notifications/initialized" }}) }});
            const listed = await fetch(mcp, {{ method: "POST", headers: more, body: JSON.stringify({{ jsonrpc: "2.0", id: 2, method: "tools/list" }}) }});
            const tools = data(await listed.text()).result.tools.map((t) => t.name);
            return {{ status: listed.status, tools }};
        }})()"#,
        fp = offer.fingerprint
    );
    let listed = evaluate(&page, &script).await;
    assert_eq!(listed["status"], 200, "{listed}");
    let tools: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"browser_navigate"), "{tools:?}");
    eprintln!("the pair page's worker listed {} tools through the tunnel", tools.len());

    // §4.2/§4.3: the credential is in IndexedDB, its pair root a non-extractable HKDF key that
    // not even the page can export.
    let script = format!(
        r#"(async () => {{
            const db = await new Promise((resolve, reject) => {{
                const open = indexedDB.open("pap-pair", 1);
                open.onsuccess = () => resolve(open.result);
                open.onerror = () => reject(open.error);
            }});
            const credential = await new Promise((resolve, reject) => {{
                const get = db.transaction("credentials").objectStore("credentials").get("{fp}");
                get.onsuccess = () => resolve(get.result);
                get.onerror = () => reject(get.error);
            }});
            let exported = "refused";
            try {{ await crypto.subtle.exportKey("raw", credential.root); exported = "exported"; }} catch (e) {{ exported = e.name; }}
            return {{
                fields: Object.keys(credential).sort(),
                isKey: credential.root instanceof CryptoKey,
                extractable: credential.root.extractable,
                algorithm: credential.root.algorithm.name,
                usages: credential.root.usages,
                exported,
            }};
        }})()"#,
        fp = offer.fingerprint
    );
    let stored = evaluate(&page, &script).await;
    assert_eq!(stored["isKey"], true, "{stored}");
    assert_eq!(stored["extractable"], false, "{stored}");
    assert_eq!(stored["algorithm"], "HKDF", "{stored}");
    assert_eq!(stored["usages"], serde_json::json!(["deriveBits"]), "{stored}");
    // Chromium refuses an HKDF key's export whatever its flag (NotSupportedError); the flag
    // above is what keeps the root inside WebCrypto.
    assert_ne!(stored["exported"], "exported", "{stored}");
    assert_eq!(
        stored["fields"],
        serde_json::json!(["clientName", "fingerprint", "pairedAt", "pk", "root", "rv", "sk"]),
        "no other field of the record holds the root: {stored}"
    );

    // §5.1: the worker answers only its scope, /d/<fingerprint>/: another host's path and the
    // page itself are the page server's (404 and the page), never the tunnel's.
    let script = format!(
        r#"(async () => {{
            const mine = await navigator.serviceWorker.getRegistration("/d/{fp}/");
            const page = await navigator.serviceWorker.getRegistration("/pair");
            const other = await fetch("/d/00000000000000000000000000000000/health");
            return {{ scope: mine && mine.scope, pageControlled: page !== undefined, other: other.status }};
        }})()"#,
        fp = offer.fingerprint
    );
    let scoped = evaluate(&page, &script).await;
    assert_eq!(
        scoped["scope"],
        format!("{origin}/d/{}/", offer.fingerprint),
        "{scoped}"
    );
    assert_eq!(scoped["pageControlled"], false, "{scoped}");
    assert_eq!(scoped["other"], 404, "{scoped}");

    // §5.4: an event stream comes through the worker as a stream: the MCP session's GET stream
    // is open (headers and a body that has not ended) long before the host would end it, then
    // the page lets go (§5.6: the worker cancels it upstream).
    let script = format!(
        r#"(async () => {{
            const mcp = "/d/{fp}/mcp";
            const headers = {{ "content-type": "application/json", "accept": "application/json, text/event-stream" }};
            const init = await fetch(mcp, {{ method: "POST", headers, body: JSON.stringify({{ jsonrpc: "2.0", id: 1, method: "initialize",
                params: {{ protocolVersion: "2025-06-18", capabilities: {{}}, clientInfo: {{ name: "pair-page-stream", version: "1" }} }} }}) }});
            const session = init.headers.get("mcp-session-id");
            await init.text();
            const more = {{ "mcp-session-id": session, "mcp-protocol-version": "2025-06-18" }};
            await fetch(mcp, {{ method: "POST", headers: {{ ...headers, ...more }}, body: JSON.stringify({{ jsonrpc: "2.0", method: "notifications/initialized" }}) }});
            const began = performance.now();
            const stream = await fetch(mcp, {{ headers: {{ accept: "text/event-stream", ...more }} }});
            const opened = performance.now() - began;
            const reader = stream.body.getReader();
            const ended = await Promise.race([
                reader.read().then((r) => r.done ? "ended" : "data"),
                new Promise((resolve) => setTimeout(() => resolve("open"), 1000)),
            ]);
            await reader.cancel();
            return {{ status: stream.status, type: stream.headers.get("content-type"), opened, ended }};
        }})()"#,
        fp = offer.fingerprint
    );
    let streamed = evaluate(&page, &script).await;
    assert_eq!(streamed["status"], 200, "{streamed}");
    assert!(
        streamed["type"].as_str().unwrap_or("").starts_with("text/event-stream"),
        "{streamed}"
    );
    assert_ne!(
        streamed["ended"], "ended",
        "the stream was buffered to its end: {streamed}"
    );
    eprintln!(
        "the worker handed the page the host's event stream {:.0} ms after asking, still open ({})",
        streamed["opened"].as_f64().unwrap_or(-1.0),
        streamed["ended"]
    );

    // §5.8: each host on an origin of its own, its fingerprint the first label
    // (`http://{fp}.localhost:PORT`, loopback to the browser). The page on another host's
    // origin refuses the offer before anything leaves it; on its own it pairs, and its worker
    // serves the host there.
    let template = page_url.replace("127.0.0.1", "{fp}.localhost");
    let second = offer_from(&host_state, &broker_url, "tablet", &template);
    let own = second.to_web_url(&template).unwrap();
    assert!(
        own.starts_with(&format!("http://{}.localhost:", second.fingerprint)),
        "{}",
        own.as_str()
    );
    let foreign = own.replacen(&second.fingerprint, "0123456789abcdef0123456789abcdef", 1);
    page.goto(foreign.as_str()).await.unwrap();
    until_state(&page, "wrong-origin").await;
    let said = evaluate(&page, "document.getElementById('said').textContent").await;
    assert!(said.as_str().unwrap().contains(&second.fingerprint), "{said}");
    page.goto(own.as_str()).await.unwrap();
    until_state(&page, "confirm").await;
    evaluate(&page, "document.getElementById('keep').click()").await;
    until_state(&page, "paired").await;
    let own_origin = own.split("/pair").next().unwrap().to_owned();
    page.goto(format!("{own_origin}/d/{}/health", second.fingerprint).as_str())
        .await
        .unwrap();
    let body = evaluate(&page, "document.body.innerText").await;
    let health: Value = serde_json::from_str(body.as_str().unwrap()).unwrap();
    assert_eq!(health["ok"], true, "{health}");

    // The host sees a device paired over the rendezvous, named as the offer said.
    let devices: Value = serde_json::from_str(&pap(&host_state, &["devices", "list"])).unwrap();
    assert!(
        devices["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "phone" && d["via"] == "pair/v2"),
        "{devices}"
    );
    // The page on the wrong origin paired nothing: one tablet, from its own origin.
    assert_eq!(
        devices["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["name"] == "tablet" && d["via"] == "pair/v2")
            .count(),
        1,
        "{devices}"
    );

    browser.close().await.unwrap();
    let _ = browser.wait().await;
    events.abort();
    pair_page.kill().await.unwrap();
    stop_host(host, &host_state).await;
    let _ = std::fs::remove_dir_all(&work);
}
