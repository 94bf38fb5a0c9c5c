//! AIP-7 (agents never decide) and per-device Sessions at the MCP surface, in real Chromium
//! against our reference company. Every route a tool caller has to an operation's decision is
//! tried, and the company's own count (what its operator API answers at `/performed/{id}`) must
//! read 0 after each; then the person's own click, in a tab the person holds, performs it once.
//!
//! The routes (issue 37, review 2026-12-04 S1 and S2), each with what stops it:
//!
//! | route | stopped by |
//! |---|---|
//! | `pap_propose` as a generic API call (the confirm endpoint, dot segments, another host, ...) | the declared proposals only (review N2, route 1) |
//! | page-level `browser_click` / `browser_fill` on the confirm form | the in-page check, in the document the script acts in |
//! | trusted click, trusted typing (Enter) on the confirm button | the in-page check before; the request guard behind |
//! | the page model by ref: click, trusted click, fill with submit, hover, select_option on the form | the same in-page check, in the element's own document |
//! | `browser_evaluate`; `browser_cdp_send` `Runtime.evaluate`, `DOM.setOuterHTML` (markup that runs script) | the jar: no script in a cookie jar that can hold the person's Session |
//! | a script of another page of the site (`www.shop.example`) posting the form with the token `browser_get_dom` read | the request guard (and the company's `SameOrigin`) |
//! | a page of another site posting the form (`fetch`, `sendBeacon`) | the request guard |
//! | a `GET` navigation to the form's action | decides nothing (the confirm is a `POST`) |
//! | a click or a script racing a tab onto the page (S2), a trusted click racing a navigation | the jar, the in-page check, the request guard; looped with timing that adapts |
//! | after `host serve` restarts; an operation proposed by the CLI (another process) or by another device of the same account (S1) | nothing depends on what a process saw: the wallet on disk names the sites |
//!
//! And per-device Sessions (review N5): device B reads, proposes on, signs out and replaces none
//! of device A's Sessions; unpairing signs a device's Sessions out and removes its records.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pap_agent::{Holder, Wallet, WalletSites};
use pap_agent::{PapTools, sign_out_device};
use pap_browser::chromium::{self, ChromiumConfig, TestNetwork, click_and_land};
use pap_browser::consent::{ConsentHost, GrantRequest};
use pap_browser::spec::{AgentCaller, InstanceKey, Operator, is_mcp_name};
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_host::BrowserServer;
use pap_shared::{CompanyDomain, SystemClock, SystemRng};
use serde_json::{Value, json};
use support::{Stage, client_for, start_reference_company};

/// The names the stage's certificate holds: the company, a sibling of its site, another site,
/// the agent's documents.
const NAMES: [&str; 4] = ["shop.example", "www.shop.example", "atk.example", "atlas.example"];

/// A page that posts the confirm form from its own script, as soon as it loads, with what its
/// fragment carries (`op`, `rev`, `csrf`): a `fetch` (answering `blocked` when the browser
/// refused to send it, `sent` when it went, whatever the company then said), a beacon, and the
/// form itself submitted into a frame of the page. Served on `www.shop.example` (a sibling of
/// the company's site) and `atk.example` (another site).
const POSTING_PAGE: &str = r#"<!doctype html><meta charset="utf-8"><title>pending</title><pre id="out">pending</pre>
<iframe name="sink"></iframe>
<script>
(async () => {
  const p = new URLSearchParams(location.hash.slice(1));
  const fields = { revision: p.get('rev'), approved_by: 'user', csrf: p.get('csrf'), action: 'confirm' };
  const body = new URLSearchParams(fields);
  let out;
  try { await fetch(p.get('op'), { method: 'POST', mode: 'no-cors', credentials: 'include', body }); out = 'sent'; }
  catch (e) { out = 'blocked'; }
  navigator.sendBeacon(p.get('op'), body);
  const form = document.createElement('form');
  form.method = 'post'; form.action = p.get('op'); form.target = 'sink';
  for (const [name, value] of Object.entries(fields)) {
    const input = document.createElement('input'); input.type = 'hidden'; input.name = name; input.value = value;
    form.appendChild(input);
  }
  document.body.appendChild(form); form.submit();
  document.getElementById('out').textContent = out;
  document.title = out;
})();
</script>"#;

/// A tool call through the host's MCP dispatch: Ok(structured result) or Err(the error object).
async fn call(server: &BrowserServer, caller: &AgentCaller, name: &str, input: Value) -> Result<Value, Value> {
    let result = server.call(caller, name, input).await;
    let structured = result.structured_content.unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        Err(structured)
    } else {
        Ok(structured)
    }
}

/// Asserts `outcome` is AIP-7's refusal, which tells the agent runtime what to do instead.
fn refused_by_aip7(outcome: Result<Value, Value>, what: &str) {
    let error = outcome.expect_err(what);
    assert_eq!(error["code"], "permission_denied", "{what}: {error}");
    assert_eq!(error["cause"]["rule"], "AIP-7", "{what}: {error}");
    assert!(
        error["message"].as_str().unwrap().contains("ask the person"),
        "{what}: {error}"
    );
}

/// The ref (`e12`) of the first button of a snapshot whose line holds `part`.
fn ref_of(snapshot: &str, part: &str) -> String {
    let line = snapshot
        .lines()
        .find(|line| line.contains("button") && line.contains(part))
        .unwrap_or_else(|| panic!("no button with {part} in\n{snapshot}"));
    let at = line.find("[ref=").unwrap_or_else(|| panic!("no ref on {line}")) + 5;
    line[at..at + line[at..].find(']').unwrap()].to_owned()
}

/// The short name of an answer, for the race tallies: `ok`, or the error's code.
fn answer(outcome: &Result<Value, Value>) -> String {
    match outcome {
        Ok(_) => "ok".to_owned(),
        Err(error) => {
            if error["code"] == "internal" {
                eprintln!("internal: {error}");
            }
            error["code"].as_str().unwrap_or("?").to_owned()
        }
    }
}

/// Calls `tool` as the race does: a `rate_limited` answer is waited out as it says
/// (`retryAfterMs`) and the call made again, so every tally is an answer about the race.
async fn race_call(server: &BrowserServer, caller: &AgentCaller, tool: &str, input: Value) -> String {
    loop {
        let outcome = call(server, caller, tool, input.clone()).await;
        match &outcome {
            Err(error) if error["code"] == "rate_limited" => {
                let wait = error["cause"]["retryAfterMs"].as_u64().unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            _ => return answer(&outcome),
        }
    }
}

struct World {
    stage: Stage,
    company: pap_shop::ReferenceCompany,
    server: BrowserServer,
    tools: Arc<ToolHost>,
    client: pap_agent::PapClient,
    shop: pap_agent::Company,
    state: std::path::PathBuf,
    sealing: SealingKey,
}

/// Serves [`POSTING_PAGE`] over TLS with the stage's certificate.
async fn posting_pages(stage: &Stage) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls =
        pap_net::listener::TlsListener::new(listener, &stage.cert_pem, &std::fs::read(&stage.key).unwrap()).unwrap();
    let page = || async { ([("content-type", "text/html; charset=utf-8")], POSTING_PAGE) };
    let router = axum::Router::new().route("/post", axum::routing::get(page));
    tokio::spawn(axum::serve(tls, router).into_future());
    addr
}

/// The agent's browser as `host serve` configures it: the stage's names routed, the one leaf
/// pinned, and the wallet's companies as the person's sites.
fn browser_config(stage: &Stage, state: &std::path::Path, shop: SocketAddr, pages: SocketAddr) -> ChromiumConfig {
    let mut config = ChromiumConfig::new(state.to_owned());
    config.test_network = TestNetwork {
        map: [
            ("shop.example".to_owned(), shop),
            ("www.shop.example".to_owned(), pages),
            ("atk.example".to_owned(), pages),
        ]
        .into(),
        spki_pins: vec![pap_agent::spki_pin(&stage.cert_pem).unwrap()],
    };
    config.persons = WalletSites::persons(state);
    config
}

async fn world(label: &str) -> World {
    let stage = Stage::new(label, &NAMES).await;
    let (company, addr) = start_reference_company(&stage).await;
    let pages = posting_pages(&stage).await;
    let state = stage.work.join("state");
    let consent = Arc::new(ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap());
    for device in ["dev_A", "dev_B"] {
        let mut grant = GrantRequest::native_login("aip7", &["shop.example"]);
        grant.device_id = Some(device.to_owned());
        consent.grant(&Operator::from_operator_channel("test"), grant).unwrap();
    }
    let tools = ToolHost::new(
        chromium::manifest().unwrap(),
        pap_browser::BrowserHost::new(),
        browser_config(&stage, &state, addr, pages),
        InstanceKey::try_from("aip7").unwrap(),
        consent,
    );
    tools.launch().await.unwrap();
    let (client, shop) = client_for(&stage, "shop.example", addr).await;
    let sealing = SealingKey::open(&state, &SystemRng).unwrap();
    let pap = PapTools::new(
        client.clone(),
        state.clone(),
        SealingKey::open(&state, &SystemRng).unwrap(),
    );
    let server = BrowserServer::per_request(tools.clone()).with_extra(pap);
    World {
        stage,
        company,
        server,
        tools,
        client,
        shop,
        state,
        sealing,
    }
}

/// `device` starts a Session and the person approves its sign-in at the company.
async fn signed_in(w: &World, device: &AgentCaller, account: &str) {
    let shop = json!({"domain": "shop.example"});
    call(&w.server, device, "pap_session_start", shop.clone())
        .await
        .unwrap();
    let signin = call(&w.server, device, "pap_signin_start", shop.clone()).await.unwrap();
    w.company
        .approve_device(signin["userCode"].as_str().unwrap(), account, None)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let status = call(&w.server, device, "pap_signin_status", shop.clone())
            .await
            .unwrap();
        if status["state"] == "signed_in" {
            return;
        }
        assert_eq!(status["state"], "pending", "{status}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sign-in did not finish in 30 s"
        );
    }
}

async fn performed(w: &World, operation: &str) -> u32 {
    w.company.performed(operation).await.unwrap().unwrap_or(0)
}

/// The operation's CSRF token and revision, read off its page with `browser_get_dom`.
fn form_fields(html: &str) -> (String, String) {
    let field = |name: &str| {
        let marker = format!("name=\"{name}\" value=\"");
        let start = html.find(&marker).unwrap_or_else(|| panic!("no {name} in {html}")) + marker.len();
        html[start..].split('"').next().unwrap().to_owned()
    };
    (field("csrf"), field("revision"))
}

/// What [`POSTING_PAGE`] in `target` said (within 15 s).
async fn posting_outcome(w: &World, caller: &AgentCaller, target: &Value) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        let dom = call(
            &w.server,
            caller,
            "browser_get_dom",
            json!({"target": target, "selector": "#out"}),
        )
        .await
        .unwrap();
        let html = dom["html"].as_str().unwrap();
        for said in ["blocked", "sent"] {
            if html.contains(&format!(">{said}<")) {
                return said.to_owned();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the page said nothing: {html}");
    }
}

/// The issue's table: one row per route, what it answered, the company's count after it.
struct Routes(Vec<(String, String, u32)>);

impl Routes {
    async fn row(&mut self, w: &World, operation: &str, route: &str, outcome: &str) {
        let count = performed(w, operation).await;
        assert_eq!(count, 0, "{route} performed the operation");
        self.0.push((route.to_owned(), outcome.to_owned(), count));
    }

    fn print(&self) {
        eprintln!("| route | answered | performed |\n|---|---|---|");
        for (route, outcome, count) in &self.0 {
            eprintln!("| {route} | {outcome} | {count} |");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn no_route_performs_an_operation_and_the_persons_own_click_does_once() {
    let w = world("mcp-aip7").await;
    let a = AgentCaller::paired("dev_A");
    for tool in w.server.listed() {
        assert!(is_mcp_name(&tool.name), "{} is no MCP name clients accept", tool.name);
    }
    signed_in(&w, &a, "acct_ada").await;
    let operation = call(
        &w.server,
        &a,
        "pap_propose",
        json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges"}),
    )
    .await
    .unwrap();
    assert_eq!(operation["state"], "proposed");
    let id = operation["operation_id"].as_str().unwrap().to_owned();
    let page = operation["url"].as_str().unwrap().to_owned();
    let mut routes = Routes(Vec::new());

    // pap_propose as a generic API call (review N2, route 1).
    let endpoint = w.shop.operations_endpoint.as_ref().unwrap().url().path().to_owned();
    let confirm = json!({"revision": operation["revision"], "approved_by": "user"});
    for (method, path) in [
        ("POST", format!("{endpoint}/{id}/confirm")),
        ("POST", format!("{endpoint}/{id}/cancel")),
        ("POST", format!("/api/../{endpoint}/{id}/confirm")),
        (
            "POST",
            format!("/api/orders/ord_7Hk2/exchanges/../../../..{endpoint}/{id}/confirm"),
        ),
        ("POST", ".atk.example/x".to_owned()),
        ("POST", ":8443/x".to_owned()),
        ("POST", "//atk.example/x".to_owned()),
        ("POST", "/api/orders/ord_7Hk2/exchanges?then=confirm".to_owned()),
        ("POST", "/api/orders/ord_7Hk2/nothing-declared".to_owned()),
        ("GET", "/api/orders/ord_7Hk2/exchanges".to_owned()),
    ] {
        let outcome = call(
            &w.server,
            &a,
            "pap_propose",
            json!({"domain": "shop.example", "method": method, "path": path, "body": confirm}),
        )
        .await;
        let error = outcome.expect_err(&path);
        assert_eq!(error["code"], "permission_denied", "{method} {path}: {error}");
        assert_eq!(error["cause"]["rule"], "AIP-7", "{method} {path}: {error}");
    }
    routes
        .row(&w, &id, "`pap_propose` path tricks (10 paths)", "permission_denied x10")
        .await;

    // The operation's page in a tab the device holds.
    let joined = call(
        &w.server,
        &a,
        "pap_join",
        json!({"domain": "shop.example", "returnTo": page}),
    )
    .await
    .unwrap();
    assert_eq!(joined["url"], page.as_str());
    let target = joined["target"].as_str().unwrap().to_owned();
    let html = call(&w.server, &a, "browser_get_dom", json!({"target": target}))
        .await
        .unwrap()["html"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(html.contains("value=\"confirm\""), "reading the page still works");
    call(&w.server, &a, "browser_screenshot", json!({"target": target}))
        .await
        .unwrap();
    let on_page = [
        (
            "page-level `browser_click` on Confirm",
            "browser_click",
            json!({"target": target, "selector": "button[value=confirm]"}),
        ),
        (
            "page-level `browser_click` on Cancel",
            "browser_click",
            json!({"target": target, "selector": "button[value=cancel]"}),
        ),
        (
            "trusted `browser_click` on Confirm",
            "browser_click",
            json!({"target": target, "selector": "button[value=confirm]", "trusted": true}),
        ),
        (
            "page-level `browser_fill` in the form",
            "browser_fill",
            json!({"target": target, "selector": "input[name=revision]", "value": "1"}),
        ),
        (
            "trusted typing: Enter to the focused Confirm",
            "browser_fill",
            json!({"target": target, "selector": "button[value=confirm]", "value": "\n", "trusted": true}),
        ),
        (
            "`browser_evaluate` submitting the form",
            "browser_evaluate",
            json!({"target": target, "expression": "document.forms[0].submit()"}),
        ),
        (
            "`browser_cdp_send` `Runtime.evaluate`",
            "browser_cdp_send",
            json!({"target": target, "method": "Runtime.evaluate", "params": {"expression": "document.forms[0].submit()"}}),
        ),
        (
            "`browser_cdp_send` `DOM.setOuterHTML` (markup that runs script)",
            "browser_cdp_send",
            json!({"target": target, "method": "DOM.setOuterHTML", "params": {"nodeId": 1, "outerHTML": "<img src=x onerror=document.forms[0].submit()>"}}),
        ),
        (
            "`browser_cdp_send` `Input.dispatchKeyEvent` (Enter)",
            "browser_cdp_send",
            json!({"target": target, "method": "Input.dispatchKeyEvent", "params": {"type": "keyDown", "key": "Enter"}}),
        ),
    ];
    for (route, tool, input) in on_page {
        refused_by_aip7(call(&w.server, &a, tool, input.clone()).await, route);
        routes.row(&w, &id, route, "permission_denied (AIP-7)").await;
    }

    // The page model reads the page and names its buttons; every act by ref on the form is
    // refused exactly as by selector (issue 39).
    let snapshot = call(&w.server, &a, "browser_snapshot", json!({"target": target}))
        .await
        .unwrap();
    let text = snapshot["snapshot"].as_str().unwrap();
    let confirm = ref_of(text, "onfirm");
    let by_ref = [
        (
            "page-level `browser_click` by ref on Confirm",
            "browser_click",
            json!({"target": target, "ref": confirm}),
        ),
        (
            "trusted `browser_click` by ref on Confirm",
            "browser_click",
            json!({"target": target, "ref": confirm, "trusted": true}),
        ),
        (
            "`browser_fill` by ref with submit",
            "browser_fill",
            json!({"target": target, "ref": confirm, "value": "1", "submit": true}),
        ),
        (
            "trusted `browser_fill` by ref with submit",
            "browser_fill",
            json!({"target": target, "ref": confirm, "value": "1", "submit": true, "trusted": true}),
        ),
        (
            "`browser_hover` by ref on Confirm",
            "browser_hover",
            json!({"target": target, "ref": confirm}),
        ),
        (
            "`browser_select_option` by ref in the form",
            "browser_select_option",
            json!({"target": target, "ref": confirm, "values": ["confirm"]}),
        ),
    ];
    for (route, tool, input) in by_ref {
        refused_by_aip7(call(&w.server, &a, tool, input.clone()).await, route);
        routes.row(&w, &id, route, "permission_denied (AIP-7)").await;
    }

    // A GET navigation to the form's action shows the page and decides nothing; the same page
    // in a second tab is refused the same way.
    let again = call(&w.server, &a, "browser_navigate", json!({"url": page}))
        .await
        .unwrap();
    refused_by_aip7(
        call(
            &w.server,
            &a,
            "browser_click",
            json!({"target": again["target"], "selector": "button[value=confirm]"}),
        )
        .await,
        "a second tab on the operation's page",
    );
    routes
        .row(
            &w,
            &id,
            "`browser_navigate` to the form's action (GET), then a click",
            "ok, then permission_denied",
        )
        .await;

    // Scripts of any other page of the company's jar: refused whatever the page.
    let home = call(
        &w.server,
        &a,
        "browser_navigate",
        json!({"url": "https://shop.example/"}),
    )
    .await
    .unwrap();
    let fetch_and_confirm = format!(
        "fetch('{page}').then(r => r.text()).then(t => {{ const d = new DOMParser().parseFromString(t, 'text/html'); \
         const f = d.querySelector('form'); return fetch(f.action, {{method: 'POST', body: new FormData(f)}}); }})"
    );
    refused_by_aip7(
        call(
            &w.server,
            &a,
            "browser_evaluate",
            json!({"target": home["target"], "expression": fetch_and_confirm}),
        )
        .await,
        "a script on the company's front page",
    );
    routes
        .row(
            &w,
            &id,
            "`browser_evaluate` on the front page (fetch the page, post its form)",
            "permission_denied (AIP-7)",
        )
        .await;

    // A page of a sibling subdomain posts the form with the token get_dom read: the cookie would
    // go (SameSite=Lax), the token is right; the browser does not send it.
    let (csrf, revision) = form_fields(&html);
    let refused_before = w.tools.persons().refused();
    let fragment = format!("#op={page}&rev={revision}&csrf={csrf}");
    let sibling = call(
        &w.server,
        &a,
        "browser_navigate",
        json!({"url": format!("https://www.shop.example/post{fragment}")}),
    )
    .await
    .unwrap();
    assert_eq!(posting_outcome(&w, &a, &sibling["target"]).await, "blocked");
    refused_by_aip7(
        call(
            &w.server,
            &a,
            "browser_evaluate",
            json!({"target": sibling["target"], "expression": "1"}),
        )
        .await,
        "a script tool on the sibling page (the company's jar)",
    );
    routes
        .row(
            &w,
            &id,
            "a script of `www.shop.example` posting the form (`fetch`, `sendBeacon`, a form into a frame) with the token",
            "blocked by the browser",
        )
        .await;
    // A page of another site, in a jar of its own: the same.
    let cross = call(
        &w.server,
        &a,
        "browser_navigate",
        json!({"url": format!("https://atk.example/post{fragment}")}),
    )
    .await
    .unwrap();
    assert_eq!(posting_outcome(&w, &a, &cross["target"]).await, "blocked");
    routes
        .row(
            &w,
            &id,
            "a page of `atk.example` posting the form (`fetch`, `sendBeacon`, a form into a frame)",
            "blocked by the browser",
        )
        .await;
    // Each page's fetch, its beacon and its form: six requests the guard refused, none sent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while w.tools.persons().refused() - refused_before < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the guard refused {} of the pages' 6 requests",
            w.tools.persons().refused() - refused_before
        );
        tick.tick().await;
    }
    for tab in [&again["target"], &home["target"], &sibling["target"], &cross["target"]] {
        call(&w.server, &a, "browser_tabs", json!({"action": "close", "target": tab}))
            .await
            .unwrap();
    }

    // Device B, another holder of the same account, with its own Session and jar: the same.
    let b = AgentCaller::paired("dev_B");
    signed_in(&w, &b, "acct_ada").await;
    let b_joined = call(
        &w.server,
        &b,
        "pap_join",
        json!({"domain": "shop.example", "returnTo": page}),
    )
    .await
    .unwrap();
    for trusted in [false, true] {
        refused_by_aip7(
            call(
                &w.server,
                &b,
                "browser_click",
                json!({"target": b_joined["target"], "selector": "button[value=confirm]", "trusted": trusted}),
            )
            .await,
            "device B on A's operation",
        );
    }
    routes
        .row(
            &w,
            &id,
            "device B (same account) clicks on A's operation, page-level and trusted",
            "permission_denied (AIP-7)",
        )
        .await;
    routes.print();

    // The person confirms on the page, in a tab of their own: performed exactly once; a second
    // confirm changes nothing.
    let persons = w.tools.persons_page(&target).await.unwrap();
    let status = click_and_land(persons.page(), "button[value=confirm]", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(performed(&w, &id).await, 1, "the person's confirm performed it once");
    drop(persons);
    let persons = w.tools.persons_page(&target).await.unwrap();
    let shown = persons.page().content().await.unwrap();
    assert!(
        !shown.contains("value=\"confirm\""),
        "a confirmed operation offers no form"
    );
    assert_eq!(performed(&w, &id).await, 1);
    eprintln!("| the person's own click, in their tab | 303, then 200 | 1 |");
    drop(persons);

    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

/// Races between a tool's check and its action, each looped with a delay that adapts to the
/// answers: an answer that comes too early (`not_found`) moves the next try later, one that is
/// refused moves it earlier, so the tries close in on the window between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn races_between_a_check_and_an_action_never_perform() {
    const ATTEMPTS: usize = 12;
    let w = world("mcp-aip7-races").await;
    let a = AgentCaller::paired("dev_A");
    signed_in(&w, &a, "acct_ada").await;
    let operation = call(
        &w.server,
        &a,
        "pap_propose",
        json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges"}),
    )
    .await
    .unwrap();
    let id = operation["operation_id"].as_str().unwrap().to_owned();
    let page = operation["url"].as_str().unwrap().to_owned();
    let joined = call(
        &w.server,
        &a,
        "pap_join",
        json!({"domain": "shop.example", "returnTo": "https://shop.example/"}),
    )
    .await
    .unwrap();
    let joined = joined["target"].as_str().unwrap().to_owned();

    // S2: a script sent at a tab that opens onto the company's front page (about:blank first),
    // and a page-level click sent at a tab that opens onto the operation's page.
    for (tool, url, input) in [
        (
            "browser_evaluate",
            "https://shop.example/",
            json!({"expression": "document.title"}),
        ),
        (
            "browser_click",
            page.as_str(),
            json!({"selector": "button[value=confirm]"}),
        ),
    ] {
        let mut tally: BTreeMap<String, usize> = BTreeMap::new();
        let mut gap = Duration::from_millis(4);
        for _ in 0..ATTEMPTS {
            // The next target id: the one after a tab just opened (and closed).
            let probe = call(&w.server, &a, "browser_tabs", json!({"action": "open"}))
                .await
                .unwrap();
            let probe = probe["target"].as_str().unwrap().to_owned();
            call(
                &w.server,
                &a,
                "browser_tabs",
                json!({"action": "close", "target": probe}),
            )
            .await
            .unwrap();
            let (boot, n) = probe.rsplit_once('-').unwrap();
            let next = format!("{boot}-{}", n.parse::<u64>().unwrap() + 1);
            let opening = call(&w.server, &a, "browser_tabs", json!({"action": "open", "url": url}));
            let spam = async {
                let mut answers = Vec::new();
                for _ in 0..8 {
                    let mut input = input.clone();
                    input["target"] = json!(next);
                    answers.push(race_call(&w.server, &a, tool, input).await);
                    tokio::time::sleep(gap).await;
                }
                answers
            };
            let (opened, answers) = tokio::join!(opening, spam);
            assert!(
                !answers.iter().any(|a| a == "ok"),
                "{tool} acted in the race: {answers:?}"
            );
            if answers.iter().all(|a| a == "not_found") {
                gap *= 2;
            } else if !answers.contains(&"not_found".to_owned()) {
                gap = (gap / 2).max(Duration::from_millis(1));
            }
            for said in answers {
                *tally.entry(said).or_default() += 1;
            }
            if let Ok(opened) = opened {
                call(
                    &w.server,
                    &a,
                    "browser_tabs",
                    json!({"action": "close", "target": opened["target"]}),
                )
                .await
                .unwrap();
            }
            assert_eq!(performed(&w, &id).await, 0, "{tool} raced to a decision");
        }
        eprintln!("race: {tool} while a tab opens on {url}: {ATTEMPTS} attempts, answers {tally:?}");
        assert!(
            tally.get("permission_denied").copied().unwrap_or(0) > 0,
            "the race never reached the opened tab: {tally:?}"
        );
    }

    // A trusted click on the joined tab while a navigation moves it onto the operation's page.
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut delay = Duration::from_millis(20);
    for _ in 0..ATTEMPTS {
        call(
            &w.server,
            &a,
            "browser_navigate",
            json!({"target": joined, "url": "https://shop.example/"}),
        )
        .await
        .unwrap();
        let moving = call(
            &w.server,
            &a,
            "browser_navigate",
            json!({"target": joined, "url": page}),
        );
        let click = async {
            tokio::time::sleep(delay).await;
            race_call(
                &w.server,
                &a,
                "browser_click",
                json!({"target": joined, "selector": "button[value=confirm]", "trusted": true}),
            )
            .await
        };
        let (_, said) = tokio::join!(moving, click);
        match said.as_str() {
            "not_found" => delay += Duration::from_millis(15),
            // Refused on the operation's page, or its document went mid-call: later than the
            // window.
            "permission_denied" | "internal" => delay = delay.saturating_sub(Duration::from_millis(10)),
            _ => {}
        }
        *tally.entry(said).or_default() += 1;
        assert_eq!(performed(&w, &id).await, 0, "a trusted click raced to a decision");
    }
    eprintln!(
        "race: a trusted click while the tab navigates onto the operation's page: {ATTEMPTS} attempts, answers {tally:?}, requests the browser refused {}",
        w.tools.persons().refused()
    );

    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

/// S1 against the release shape: `pap-agent host serve` proposes through device A, device B
/// (the same account) and the CLI (another process, with no host running), is restarted, and
/// then no tool of either device performs any of the three; the person's own confirm through
/// the CLI (`confirm-on-page`, the operator's channel) performs one, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn after_a_restart_and_from_another_process_no_tool_performs_an_operation() {
    use support::cli_agent::{
        agent_and_company, host_serve, mcp_call, mcp_device, pair_over_http, pap, stop_host, test_network,
    };
    let mut stage = Stage::new("aip7-restart", &["shop.example", "atlas.example"]).await;
    let (state, company, shop) = agent_and_company(&mut stage).await;
    let net = test_network(&stage, shop);
    let with_net = |args: &[&str]| -> Vec<String> {
        net.iter()
            .cloned()
            .chain(args.iter().map(|a| (*a).to_owned()))
            .collect()
    };
    let run = |args: &[&str]| pap(&state, &with_net(args).iter().map(String::as_str).collect::<Vec<_>>());
    let propose = ["propose", "shop.example", "POST", "/api/orders/ord_7Hk2/exchanges"];

    // The CLI, another process, signs in and proposes while no host runs.
    run(&["session", "shop.example"]);
    let mut signin = tokio::process::Command::new(support::cli_agent::AGENT)
        .args(["--state-dir", state.to_str().unwrap()])
        .args(with_net(&["signin", "shop.example"]))
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let code = {
        use tokio::io::AsyncBufReadExt as _;
        let mut lines = tokio::io::BufReader::new(signin.stderr.take().unwrap()).lines();
        let code = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some((_, code)) = line.split_once("approve the code ") {
                    return code.trim().to_owned();
                }
            }
            panic!("signin ended before it named a code");
        })
        .await
        .unwrap();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        code
    };
    company.approve_device(&code, "acct_ada", None).await.unwrap();
    assert!(signin.wait().await.unwrap().success());
    let by_cli: Value = serde_json::from_str(&run(&propose)).unwrap();

    let (host, addr) = host_serve(&state, &net).await;
    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    let mut bearers = Vec::new();
    let mut operations = vec![by_cli];
    for name in ["device-a", "device-b"] {
        let (id, bearer) = pair_over_http(&http, addr, &state, name).await;
        pap(
            &state,
            &["consent", "grant", "--domain", "shop.example", "--device", &id],
        );
        let device = mcp_device(addr, &bearer).await;
        let shop_domain = json!({"domain": "shop.example"});
        mcp_call(&device, "pap_session_start", shop_domain.clone())
            .await
            .unwrap();
        let signin = mcp_call(&device, "pap_signin_start", shop_domain.clone())
            .await
            .unwrap();
        company
            .approve_device(signin["userCode"].as_str().unwrap(), "acct_ada", None)
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while mcp_call(&device, "pap_signin_status", shop_domain.clone())
            .await
            .unwrap()["state"]
            != "signed_in"
        {
            assert!(tokio::time::Instant::now() < deadline, "no sign-in in 30 s");
            tick.tick().await;
        }
        let operation = mcp_call(
            &device,
            "pap_propose",
            json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges", "body": {}}),
        )
        .await
        .unwrap();
        operations.push(operation);
        bearers.push(bearer);
    }

    // The host restarts (SIGTERM, then the same state directory).
    stop_host(host, &state).await;
    let (host, addr) = host_serve(&state, &net).await;
    let mut tried = 0;
    for bearer in &bearers {
        let device = mcp_device(addr, bearer).await;
        let joined = mcp_call(
            &device,
            "pap_join",
            json!({"domain": "shop.example", "returnTo": "https://shop.example/"}),
        )
        .await
        .unwrap();
        let target = joined["target"].clone();
        for operation in &operations {
            mcp_call(
                &device,
                "browser_navigate",
                json!({"target": target, "url": operation["url"]}),
            )
            .await
            .unwrap();
            for trusted in [false, true] {
                refused_by_aip7(
                    mcp_call(
                        &device,
                        "browser_click",
                        json!({"target": target, "selector": "button[value=confirm]", "trusted": trusted}),
                    )
                    .await,
                    "a click after the restart",
                );
                tried += 1;
            }
            refused_by_aip7(
                mcp_call(
                    &device,
                    "browser_evaluate",
                    json!({"target": target, "expression": "document.forms[0].submit()"}),
                )
                .await,
                "a script after the restart",
            );
            tried += 1;
        }
    }
    for operation in &operations {
        let id = operation["operation_id"].as_str().unwrap();
        assert_eq!(company.performed(id).await.unwrap(), Some(0), "{id} performed");
    }
    eprintln!(
        "after a restart: {tried} tool calls on 3 operations (proposed by the CLI, device A, device B), 0 performed"
    );
    stop_host(host, &state).await;

    // The person's own confirm, on the operator's channel (its own grant, its own browser): once.
    pap(&state, &["consent", "grant", "--domain", "shop.example"]);
    let url = operations[1]["url"].as_str().unwrap();
    let confirmed: Value = serde_json::from_str(&run(&["confirm-on-page", "shop.example", url])).unwrap();
    assert_eq!(confirmed["after_confirm"]["state"], "succeeded", "{confirmed}");
    let id = operations[1]["operation_id"].as_str().unwrap();
    assert_eq!(company.performed(id).await.unwrap(), Some(1));
    let _ = std::fs::remove_dir_all(&stage.work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn each_device_holds_its_own_sessions_and_unpairing_signs_them_out() {
    let w = world("mcp-devices").await;
    let (a, b) = (AgentCaller::paired("dev_A"), AgentCaller::paired("dev_B"));
    let shop = json!({"domain": "shop.example"});
    let domain = CompanyDomain::try_from("shop.example").unwrap();
    let propose = json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges"});
    signed_in(&w, &a, "acct_ada").await;
    let a_operation = call(&w.server, &a, "pap_propose", propose.clone()).await.unwrap();
    let a_id = a_operation["operation_id"].as_str().unwrap();

    // B holds nothing of A's: it reads, proposes on and signs out no Session.
    for (tool, input) in [
        ("pap_operation", json!({"domain": "shop.example", "id": a_id})),
        ("pap_propose", propose.clone()),
        ("pap_signout", shop.clone()),
        ("pap_signin_start", shop.clone()),
    ] {
        let error = call(&w.server, &b, tool, input).await.unwrap_err();
        assert_eq!(error["code"], "not_found", "{tool} as B: {error}");
    }
    // B's own Session leaves A's as it was.
    signed_in(&w, &b, "acct_ada").await;
    call(
        &w.server,
        &a,
        "pap_operation",
        json!({"domain": "shop.example", "id": a_id}),
    )
    .await
    .unwrap();
    let a_first = Wallet::load_held(&w.state, &domain, &Holder::Device("dev_A".into()), &w.sealing)
        .unwrap()
        .unwrap()
        .session
        .unwrap();
    let b_session = Wallet::load_held(&w.state, &domain, &Holder::Device("dev_B".into()), &w.sealing)
        .unwrap()
        .unwrap()
        .session
        .unwrap();
    assert_ne!(a_first.session_id, b_session.session_id);
    assert_eq!(
        a_first.user, b_session.user,
        "one agent, one pairwise user at the company"
    );

    // A replaces its own signed-in Session: the replaced one's Account Token is revoked, so it
    // is signed out at the company.
    let fresh = call(&w.server, &a, "pap_session_start", shop.clone()).await.unwrap();
    assert_eq!(fresh["signedIn"], false);
    let stale = w
        .client
        .propose(&w.shop, &a_first, "POST", "/api/orders/ord_7Hk2/exchanges", &json!({}))
        .await;
    assert!(stale.is_err(), "the replaced Session still acts signed in: {stale:?}");
    // B is untouched by A's replacement.
    call(&w.server, &b, "pap_propose", propose.clone()).await.unwrap();

    // Unpairing B signs its Session out at the company and removes its record.
    let failed = sign_out_device(&w.client, &w.state, &w.sealing, "dev_B").await.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    assert!(Wallet::held_by_device(&w.state, "dev_B").unwrap().is_empty());
    let after = w
        .client
        .propose(
            &w.shop,
            &b_session,
            "POST",
            "/api/orders/ord_7Hk2/exchanges",
            &json!({}),
        )
        .await;
    assert!(
        after.is_err(),
        "an unpaired device's Session still acts signed in: {after:?}"
    );

    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

/// Waits (at most 10 s) until a tab opened ahead waits in `w`'s browser.
async fn tab_ahead_waits(w: &World) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    while !w.tools.tabs_ahead().0 {
        assert!(tokio::time::Instant::now() < deadline, "no tab opened ahead in 10 s");
        tick.tick().await;
    }
}

/// The tools' join leaves a tab opened ahead, and the device's next join takes it (issue 42),
/// through the MCP server as a device calls it; another device's join does not, nor ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_devices_next_join_takes_the_tab_its_last_join_opened_ahead() {
    let w = world("mcp-ahead").await;
    let (a, b) = (AgentCaller::paired("dev_A"), AgentCaller::paired("dev_B"));
    signed_in(&w, &a, "acct_ada").await;
    let propose = json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges"});
    let operation = call(&w.server, &a, "pap_propose", propose).await.unwrap();
    let join = json!({"domain": "shop.example", "returnTo": operation["url"]});
    assert_eq!(w.tools.tabs_ahead(), (false, 0));

    let first = call(&w.server, &a, "pap_join", join.clone()).await.unwrap();
    tab_ahead_waits(&w).await;
    let second = call(&w.server, &a, "pap_join", join.clone()).await.unwrap();
    assert_eq!(w.tools.tabs_ahead().1, 1, "the second join opened a tab of its own");
    assert_eq!(second["status"], 200, "{second}");
    assert_ne!(second["target"], first["target"]);
    // The tab it took is the device's, at the operation's page, in the Session.
    let dom = call(&w.server, &a, "browser_get_dom", json!({"target": second["target"]}))
        .await
        .unwrap();
    let html = dom["html"].as_str().unwrap();
    assert!(html.contains(operation["operation_id"].as_str().unwrap()), "{html}");
    let tabs = call(&w.server, &a, "browser_tabs", json!({})).await.unwrap();
    assert_eq!(tabs["targets"].as_array().map(Vec::len), Some(2), "{tabs}");

    // Device B's join, in B's own context, opens its own tab: A's tab ahead is not B's.
    tab_ahead_waits(&w).await;
    signed_in(&w, &b, "acct_ada").await;
    let b_operation = call(
        &w.server,
        &b,
        "pap_propose",
        json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges"}),
    )
    .await
    .unwrap();
    let b_joined = call(
        &w.server,
        &b,
        "pap_join",
        json!({"domain": "shop.example", "returnTo": b_operation["url"]}),
    )
    .await
    .unwrap();
    assert_eq!(b_joined["status"], 200, "{b_joined}");
    assert_eq!(w.tools.tabs_ahead().1, 1, "device B's join took device A's tab ahead");
    // A's tab ahead waited on beside B's: A's next join takes it.
    let third = call(&w.server, &a, "pap_join", join).await.unwrap();
    assert_eq!(third["status"], 200, "{third}");
    assert_eq!(w.tools.tabs_ahead().1, 2, "device B's join ended device A's tab ahead");

    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_device_is_held_to_its_tabs_and_its_rate_and_no_other_device_notices() {
    let w = world("mcp-limits").await;
    let (c, d) = (AgentCaller::paired("dev_C"), AgentCaller::paired("dev_D"));
    let open = json!({"action": "open"});
    for _ in 0..pap_browser::tools::MAX_TABS_PER_DEVICE {
        call(&w.server, &c, "browser_tabs", open.clone()).await.unwrap();
    }
    let refused = call(&w.server, &c, "browser_tabs", open.clone()).await.unwrap_err();
    assert_eq!(refused["code"], "permission_denied", "{refused}");
    assert_eq!(refused["cause"]["rule"], "tabs-per-device", "{refused}");
    call(&w.server, &d, "browser_tabs", open).await.unwrap();

    // A burst past the rate limit: refused at once, retryable, saying when; D is not slowed.
    let mut limited = None;
    for _ in 0..=(pap_host::rate::BURST as usize) {
        if let Err(error) = call(&w.server, &c, "browser_tabs", json!({})).await {
            limited = Some(error);
            break;
        }
    }
    let limited = limited.expect("no call was rate limited");
    assert_eq!(limited["code"], "rate_limited", "{limited}");
    assert_eq!(limited["retryable"], true, "{limited}");
    assert!(limited["cause"]["retryAfterMs"].as_u64().unwrap() >= 1, "{limited}");
    call(&w.server, &d, "browser_tabs", json!({})).await.unwrap();

    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

/// Waits (30 s at most) until the console page's live picture is up: as tall as a page (its alt
/// text alone is one line). Read through DevTools' DOM, which follows the page across its
/// navigation (a script could run in the document the page just left).
async fn picture_up(page: &chromiumoxide::Page) -> chromiumoxide::layout::BoundingBox {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if let Ok(element) = page.find_element(".live").await
            && let Ok(bounds) = element.bounding_box().await
            && bounds.height > 100.0
        {
            return bounds;
        }
        assert!(tokio::time::Instant::now() < deadline, "the live picture did not show");
    }
}

/// The person's console decides (issue 40): an operation device A proposed is listed in the
/// console beside the tool host; the person opens it on its page (a tab of their own, in A's
/// jar, where A's join left the website Session) and clicks Confirm on the live picture with
/// their own mouse: the company performs it once, a second click performs nothing, and A learns
/// the outcome through `pap_operation`, and, paired over streamable HTTP, through
/// `notifications/resources/updated` on the operation's resource: to a client of the official
/// Rust SDK that subscribed (`resources/subscribe`, 2025-11-25) and to one of the official Python
/// SDK that listens (`subscriptions/listen`, 2026-07-28); the latencies from the person's click
/// are printed. The list no longer shows it. Needs `PAP_MCP_PYTHON` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_person_confirms_from_the_console_once_and_the_device_learns_it() {
    use chromiumoxide::{Browser, BrowserConfig};
    use futures_util::StreamExt as _;
    use pap_host::console::{Console, HostUnpair};
    use rmcp::model::{ReadResourceRequestParams, ResourceContents, SubscribeRequestParams};
    let w = world("mcp-aip7-console").await;
    // Device A, paired, granted the shop, and a client of its own on the host's HTTP endpoint.
    let devices = pap_host::pairing::Devices::at(&w.state);
    let (device, bearer) = devices.mint("laptop", "install", &SystemClock, &SystemRng).unwrap();
    let mut grant = GrantRequest::native_login("aip7", &["shop.example"]);
    grant.device_id = Some(device.id.clone());
    w.tools
        .consent()
        .grant(&Operator::from_operator_channel("test"), grant)
        .unwrap();
    let a = AgentCaller::paired(device.id.clone());
    let resources = PapTools::new(
        w.client.clone(),
        w.state.clone(),
        SealingKey::open(&w.state, &SystemRng).unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mcp_addr = listener.local_addr().unwrap();
    let guard = pap_host::http::Exposure::check(mcp_addr, false, false, &[], &[])
        .unwrap()
        .guard(mcp_addr.port());
    let limits = pap_host::http::Limits::default();
    let app = pap_host::http::router(w.server.clone().with_resources(resources), devices, guard, limits);
    let mcp_serving = tokio::spawn(pap_host::http::serve(listener, app, limits, std::future::pending()));
    let (updates, mut updated) = tokio::sync::mpsc::unbounded_channel();
    let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(format!(
        "http://{mcp_addr}/mcp"
    ))
    .auth_header(bearer.expose());
    let subscriber = rmcp::ServiceExt::serve(
        Updates(updates),
        rmcp::transport::StreamableHttpClientTransport::from_config(config),
    )
    .await
    .unwrap();
    signed_in(&w, &a, "acct_ada").await;
    let operation = call(
        &w.server,
        &a,
        "pap_propose",
        json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges", "body": {}}),
    )
    .await
    .unwrap();
    let id = operation["operation_id"].as_str().unwrap().to_owned();
    let page_url = operation["url"].as_str().unwrap().to_owned();
    call(
        &w.server,
        &a,
        "pap_join",
        json!({"domain": "shop.example", "returnTo": page_url}),
    )
    .await
    .unwrap();
    // The device lists its operation as a resource and subscribes to it.
    let uri = format!("pap://shop.example/operations/{id}");
    let listed = subscriber.list_resources(None).await.unwrap();
    assert!(listed.resources.iter().any(|r| r.uri == uri), "{listed:?}");
    #[allow(deprecated, reason = "resources/subscribe is what a 2025-11-25 client speaks")]
    subscriber.subscribe(SubscribeRequestParams::new(&uri)).await.unwrap();
    let state_of = |read: rmcp::model::ReadResourceResult| match &read.contents[..] {
        [ResourceContents::TextResourceContents { text, .. }] => {
            serde_json::from_str::<Value>(text).unwrap()["state"].clone()
        }
        other => panic!("{other:?}"),
    };
    let read = subscriber
        .read_resource(ReadResourceRequestParams::new(&uri))
        .await
        .unwrap();
    assert_eq!(state_of(read), "proposed");
    // And the official Python SDK, at protocol 2026-07-28, listens for it (`subscriptions/listen`).
    let python = std::env::var("PAP_MCP_PYTHON").expect(
        "PAP_MCP_PYTHON must name a Python with conformance/interop/mcp-requirements.txt (bash .ci/run sets it up)",
    );
    let bearer_file = w.stage.work.join("laptop.bearer");
    std::fs::write(&bearer_file, bearer.expose()).unwrap();
    let mut python_listener = tokio::process::Command::new(python)
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/interop/mcp_client.py"))
        .args([
            "watch",
            &format!("http://{mcp_addr}"),
            bearer_file.to_str().unwrap(),
            &uri,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut said = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(python_listener.stderr.take().unwrap()));
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = said.next_line().await.unwrap() {
            if line == "mcp_client: watching" {
                return;
            }
            eprintln!("{line}");
        }
        panic!("the Python SDK's listener ended before it watched");
    })
    .await
    .expect("the Python SDK's listener did not watch within 60 s");

    // The console, in process, beside the tool host.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let decisions = PapTools::new(
        w.client.clone(),
        w.state.clone(),
        SealingKey::open(&w.state, &SystemRng).unwrap(),
    );
    let console = Arc::new(
        Console::new(
            &w.state,
            port,
            Arc::new(HostUnpair::new(&w.state, Arc::new(SystemClock), Arc::new(SystemRng))),
            Arc::new(SystemClock),
            Arc::new(SystemRng),
        )
        .with_tools(w.tools.clone())
        .with_decisions(decisions),
    );
    let link = console.link().expose().to_owned();
    let serving = tokio::spawn(pap_host::http::serve(
        listener,
        console.clone().router(),
        pap_host::http::Limits::default(),
        std::future::pending(),
    ));

    let config = BrowserConfig::builder()
        .chrome_executable("/usr/bin/chromium")
        .no_sandbox()
        .new_headless_mode()
        .viewport(None)
        .window_size(1200, 1000)
        .user_data_dir(w.stage.work.join("person"))
        .build()
        .unwrap();
    let (mut browser, mut handler) = Browser::launch(config).await.unwrap();
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let page = browser.new_page(link.as_str()).await.unwrap();
    page.wait_for_navigation().await.unwrap();
    let listed: String = page
        .evaluate("document.body.innerText")
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert!(
        listed.contains("Waiting for your decision") && listed.contains("shop.example"),
        "{listed}"
    );
    let row = format!("tr[data-decision=\"{id}\"]");
    page.find_element(row.as_str()).await.unwrap();
    let png = page
        .screenshot(chromiumoxide::page::ScreenshotParams::builder().full_page(true).build())
        .await
        .unwrap();
    std::fs::write(support::artefacts().join("console-decisions.png"), png).unwrap();

    // Opened on its page, in the person's own tab; the person clicks Confirm on the picture.
    let opened = support::click_until_answered(&page, &format!("{row} button")).await;
    let key = opened.rsplit('/').next().unwrap().to_owned();
    assert!(key.starts_with('p'), "{key}");
    picture_up(&page).await;
    let persons = w.tools.persons_tab_page(&key).await.unwrap();
    let confirm = persons
        .find_element("button[value=confirm]")
        .await
        .unwrap()
        .bounding_box()
        .await
        .unwrap();
    let png = page
        .screenshot(chromiumoxide::page::ScreenshotParams::builder().full_page(true).build())
        .await
        .unwrap();
    std::fs::write(support::artefacts().join("console-confirm.png"), png).unwrap();
    let picture = page
        .find_element("input.live")
        .await
        .unwrap()
        .bounding_box()
        .await
        .unwrap();
    let on_confirm = chromiumoxide::layout::Point::new(
        picture.x + confirm.x + confirm.width / 2.0,
        picture.y + confirm.y + confirm.height / 2.0,
    );
    assert_eq!(performed(&w, &id).await, 0, "nothing before the person's click");
    assert!(updated.try_recv().is_err(), "nothing changed yet, nothing said");
    let clicked = std::time::Instant::now();
    page.click(on_confirm).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while performed(&w, &id).await == 0 {
        tick.tick().await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the person's confirm did not perform it"
        );
    }
    assert_eq!(performed(&w, &id).await, 1, "the person's click performed it once");
    // The device learns it.
    let read = call(
        &w.server,
        &a,
        "pap_operation",
        json!({"domain": "shop.example", "id": id}),
    )
    .await
    .unwrap();
    assert_ne!(read["state"], "proposed", "{read}");
    // And the subscribed client hears it, then reads the outcome.
    let heard = tokio::time::timeout(Duration::from_secs(30), updated.recv())
        .await
        .expect("no notifications/resources/updated within 30 s of the person's click")
        .unwrap();
    let latency = clicked.elapsed();
    assert_eq!(heard, uri);
    eprintln!(
        "notifications/resources/updated reached the subscribed client {} ms after the person's click",
        latency.as_millis()
    );
    let read = subscriber
        .read_resource(ReadResourceRequestParams::new(&uri))
        .await
        .unwrap();
    assert_eq!(state_of(read), "succeeded");
    let listened = tokio::time::timeout(Duration::from_secs(60), python_listener.wait_with_output())
        .await
        .expect("the Python SDK's listener did not finish within 60 s of the person's click")
        .unwrap();
    let python_latency = clicked.elapsed();
    assert!(listened.status.success(), "the Python SDK's listener failed");
    let heard: Value = serde_json::from_slice(&listened.stdout).unwrap();
    assert_eq!(heard["protocolVersion"], "2026-07-28", "{heard}");
    assert_eq!(heard["heard"], uri.as_str(), "{heard}");
    assert_eq!(heard["state"], "succeeded", "{heard}");
    eprintln!(
        "the Python SDK's subscriptions/listen heard it and read the outcome within {} ms of the person's click",
        python_latency.as_millis()
    );
    // A second click on the same place performs nothing: the page offers no confirm now.
    page.goto(format!("{}/tabs/{key}", console.origin())).await.ok();
    picture_up(&page).await;
    let next = support::NextDocument::of(&page).await;
    page.click(on_confirm).await.unwrap();
    // The console answers the click (303 to the tab's page, then 200) once it is sent on.
    next.answered().await;
    assert!(
        !persons.content().await.unwrap().contains("value=\"confirm\""),
        "a confirmed operation offers no form"
    );
    assert_eq!(performed(&w, &id).await, 1, "at most once");
    // Closed, and no longer listed.
    page.goto(format!("{}/", console.origin())).await.unwrap();
    let listed: String = page
        .evaluate("document.body.innerText")
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert!(listed.contains("No operation waits for your decision"), "{listed}");

    // Settled: said once, never again.
    assert!(updated.try_recv().is_err(), "one notification for one decision");

    subscriber.cancel().await.unwrap();
    mcp_serving.abort();
    browser.close().await.unwrap();
    events.abort();
    serving.abort();
    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

/// An MCP client that passes on each `notifications/resources/updated` it hears.
#[derive(Clone, Debug)]
struct Updates(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}
