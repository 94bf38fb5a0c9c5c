//! The MCP surface against AIP-7 (agents never decide) and per-device Sessions, in real
//! Chromium against our reference company, through the host's own dispatch
//! ([`BrowserServer::call`], the code `host serve` and `host stdio` run for every MCP call):
//!
//! - review N2, route 1: `pap_propose` sends only the proposals the company's OpenAPI declares:
//!   the confirm endpoint, dot segments, another host or port, a query, an undeclared path and
//!   an undeclared method are each refused `permission_denied` (rule AIP-7), and the operator
//!   API reads the operation performed 0 times;
//! - review N2, route 2: once `pap_join` lands on the operation's page, click (page-level and
//!   trusted), fill, evaluate and cdp_send on it are refused, a second tab on the same page is
//!   refused too, and script on any page of the joined origin is refused; reading (get_dom,
//!   screenshot) works; performed 0 times; then the person's own click on the page performs it
//!   exactly once;
//! - review N5: device B reads, proposes on, signs out and replaces none of device A's
//!   Sessions; a replaced Session's Account Token is revoked; unpairing signs a device's
//!   Sessions out at the company and removes its records.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use pap_agent::mcp::BrowserServer;
use pap_agent::mcp::pap::{PapTools, sign_out_device};
use pap_agent::{Holder, Wallet};
use pap_browser::chromium::{self, click_and_land};
use pap_browser::consent::{ConsentHost, GrantRequest};
use pap_browser::spec::{AgentCaller, InstanceKey, Operator, is_mcp_name};
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_shared::{CompanyDomain, SystemClock, SystemRng};
use serde_json::{Value, json};
use support::{Stage, client_for, pinned_browser, start_reference_company};

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

/// Asserts `outcome` is AIP-7's refusal.
fn refused_by_aip7(outcome: Result<Value, Value>, what: &str) {
    let error = outcome.expect_err(what);
    assert_eq!(error["code"], "permission_denied", "{what}: {error}");
    assert_eq!(error["cause"]["rule"], "AIP-7", "{what}: {error}");
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

async fn world(label: &str) -> World {
    let stage = Stage::new(label, &["shop.example", "atlas.example"]).await;
    let (company, addr) = start_reference_company(&stage).await;
    let state = stage.work.join("state");
    let consent = Arc::new(ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap());
    let mut grant = GrantRequest::native_login("aip7", &["shop.example"]);
    grant.device_id = Some("dev_A".to_owned());
    consent.grant(&Operator::from_operator_channel("test"), grant).unwrap();
    let tools = ToolHost::new(
        chromium::manifest().unwrap(),
        pap_browser::BrowserHost::new(),
        pinned_browser(&stage, state.clone(), addr),
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
    let server = BrowserServer::per_request(tools.clone()).with_pap(pap);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tool_sequence_performs_an_operation_and_the_persons_own_click_does_once() {
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

    // Route 1: pap_propose as a generic API call.
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
        refused_by_aip7(outcome, &format!("{method} {path}"));
    }
    assert_eq!(performed(&w, &id).await, 0, "a proposal call performed the operation");
    // Route 2: the operation's page in a tab the device holds.
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
        .unwrap();
    assert!(
        html["html"].as_str().unwrap().contains("value=\"confirm\""),
        "reading the page still works"
    );
    call(&w.server, &a, "browser_screenshot", json!({"target": target}))
        .await
        .unwrap();
    let on_page = [
        (
            "browser_click",
            json!({"target": target, "selector": "button[value=confirm]"}),
        ),
        (
            "browser_click",
            json!({"target": target, "selector": "button[value=confirm]", "trusted": true}),
        ),
        (
            "browser_fill",
            json!({"target": target, "selector": "input", "value": "x"}),
        ),
        (
            "browser_evaluate",
            json!({"target": target, "expression": "document.forms[0].submit()"}),
        ),
        (
            "browser_cdp_send",
            json!({"target": target, "method": "Runtime.evaluate", "params": {"expression": "document.forms[0].submit()"}}),
        ),
    ];
    for (tool, input) in on_page {
        refused_by_aip7(
            call(&w.server, &a, tool, input.clone()).await,
            &format!("{tool} {input}"),
        );
    }
    // The same page in a new tab of the device's: refused the same way.
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
    // Any page of the joined origin: a script there could fetch the page and post its form.
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
        "a script on the joined origin",
    );
    assert_eq!(performed(&w, &id).await, 0, "a tool performed the operation");
    // The person confirms on the page: performed exactly once.
    let persons_page = w.tools.persons_page(&target).await.unwrap();
    let status = click_and_land(&persons_page, "button[value=confirm]", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(performed(&w, &id).await, 1, "the person's confirm performed it once");

    w.tools.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&w.stage.work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    for _ in 0..=(pap_agent::mcp::rate::BURST as usize) {
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
