//! The person's console (issue 40) end to end, in real Chromium: two paired devices reach the
//! host over MCP; each one's `pap_join` meets `consent_required` and files a request for access;
//! a second headless Chromium plays the person, signs in to `pap-agent console` with the link
//! it printed, grants device A's request (1 day) and declines device B's with its own clicks.
//! A's next join lands in the Session; B's is `permission_denied`, saying the person declined.
//! Device A's bearer is refused 403 on every route of the console. The screenshots of the pages
//! go to the artefacts directory (`console-*.png`; `agent/README.md` shows them).

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures_util::StreamExt as _;
use serde_json::json;
use support::Stage;
use support::cli_agent::{
    AGENT, agent_and_company, host_serve, mcp_call as call, mcp_device as device, pair_over_http as pair, stop_host,
    test_network,
};
use tokio::io::AsyncBufReadExt as _;

const DEADLINE: Duration = Duration::from_secs(30);

/// The routes of the console a device's bearer is refused on.
const ROUTES: [(&str, &str); 8] = [
    ("GET", "/"),
    ("GET", "/?device=x&domain=shop.example"),
    ("GET", "/login?code=guessed"),
    ("POST", "/requests/ar_x/grant"),
    ("POST", "/requests/ar_x/decline"),
    ("POST", "/grants/g_x/revoke"),
    ("POST", "/devices/dev_x/unpair"),
    ("POST", "/logout"),
];

async fn text(page: &Page) -> String {
    page.evaluate("document.body.innerText")
        .await
        .unwrap()
        .into_value::<String>()
        .unwrap()
}

async fn screenshot(page: &Page, name: &str) {
    let png = page
        .screenshot(ScreenshotParams::builder().full_page(true).build())
        .await
        .unwrap();
    std::fs::write(support::artefacts().join(name), png).unwrap();
}

/// Clicks `selector` (a real mouse click) and waits for the page the form's answer loads.
async fn click_and_wait(page: &Page, selector: &str) {
    let status = pap_browser::chromium::click_and_land(page, selector, DEADLINE)
        .await
        .unwrap();
    assert_eq!(status, 200, "{selector}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_person_answers_requests_for_access_in_the_console_and_no_device_reaches_it() {
    let mut stage = Stage::new("console", &["shop.example", "atlas.example"]).await;
    let (state, company, shop) = agent_and_company(&mut stage).await;
    let (host, addr) = host_serve(&state, &test_network(&stage, shop)).await;
    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    let (a_id, a_bearer) = pair(&http, addr, &state, "laptop").await;
    let (b_id, b_bearer) = pair(&http, addr, &state, "phone").await;
    let a = device(addr, &a_bearer).await;
    let b = device(addr, &b_bearer).await;

    // Device A: a Session the person signed in at the shop, and an operation's page to land on.
    call(&a, "pap_session_start", json!({"domain": "shop.example"}))
        .await
        .unwrap();
    let signin = call(&a, "pap_signin_start", json!({"domain": "shop.example"}))
        .await
        .unwrap();
    company
        .approve_device(signin["userCode"].as_str().unwrap(), "acct_ada", None)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while call(&a, "pap_signin_status", json!({"domain": "shop.example"}))
        .await
        .unwrap()["state"]
        != "signed_in"
    {
        assert!(tokio::time::Instant::now() < deadline, "the sign-in did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let operation = call(
        &a,
        "pap_propose",
        json!({"domain": "shop.example", "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges", "body": {}}),
    )
    .await
    .unwrap();
    let page_url = operation["url"].as_str().unwrap().to_owned();
    call(&b, "pap_session_start", json!({"domain": "shop.example"}))
        .await
        .unwrap();

    // Without a grant each join files a request for access, in the device's own words.
    let join = |reason: &'static str| json!({"domain": "shop.example", "returnTo": page_url, "reason": reason});
    let asked_a = call(
        &a,
        "pap_join",
        join("to show you the exchange of order ord_7Hk2 before you confirm it"),
    )
    .await
    .unwrap_err();
    assert_eq!(asked_a["code"], "browser:consent_required", "{asked_a}");
    assert_eq!(asked_a["retryable"], true, "{asked_a}");
    let request_a = asked_a["cause"]["request"].as_str().unwrap().to_owned();
    let asked_b = call(&b, "pap_join", join("to look around the shop")).await.unwrap_err();
    let request_b = asked_b["cause"]["request"].as_str().unwrap().to_owned();
    // Asking again while it waits is the same request.
    let again = call(&a, "pap_join", join("again")).await.unwrap_err();
    assert_eq!(again["cause"]["request"], request_a.as_str());

    // The console, and its one-time link on stdout.
    let mut console = tokio::process::Command::new(AGENT)
        .args([
            "--state-dir",
            state.to_str().unwrap(),
            "console",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(console.stdout.take().unwrap()).lines();
    let link = tokio::time::timeout(DEADLINE, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let origin = link.split("/login").next().unwrap().to_owned();
    assert!(origin.starts_with("http://127.0.0.1:"), "{link}");

    // A device's bearer opens nothing of it, whatever the route.
    for (method, path) in ROUTES {
        let request = match method {
            "GET" => http.get(format!("{origin}{path}")),
            _ => http
                .post(format!("{origin}{path}"))
                .header("origin", &origin)
                .form(&[("csrf", "x"), ("lifetime", "3600")]),
        };
        let answer = request.bearer_auth(&a_bearer).send().await.unwrap();
        assert_eq!(answer.status(), 403, "{method} {path}");
    }
    // Nor does a stranger without the cookie.
    assert_eq!(http.get(format!("{origin}/")).send().await.unwrap().status(), 401);

    // The person: their own headless Chromium, signed in by the link.
    let work = stage.work.join("person");
    let config = BrowserConfig::builder()
        .chrome_executable("/usr/bin/chromium")
        .no_sandbox()
        .new_headless_mode()
        .viewport(None)
        .window_size(1200, 900)
        .user_data_dir(work)
        .build()
        .unwrap();
    let (mut browser, mut handler) = Browser::launch(config).await.unwrap();
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let page = browser.new_page(link.as_str()).await.unwrap();
    page.wait_for_navigation().await.unwrap();
    assert_eq!(page.url().await.unwrap().unwrap(), format!("{origin}/"));
    let seen = text(&page).await;
    for expected in [
        "laptop",
        "phone",
        "shop.example",
        "to show you the exchange of order ord_7Hk2 before you confirm it",
        "to look around the shop",
    ] {
        assert!(seen.contains(expected), "{expected}: {seen}");
    }
    screenshot(&page, "console-requests.png").await;
    // The link worked once: a second browser tab with it is refused.
    let reused = browser.new_page(link.as_str()).await.unwrap();
    assert!(text(&reused).await.contains("This link does not work"));
    reused.close().await.unwrap();

    // Grant A's request for a day, decline B's: the person's own clicks.
    page.evaluate(format!(
        "document.querySelector('[data-request=\"{request_a}\"] select').value = '86400'"
    ))
    .await
    .unwrap();
    click_and_wait(&page, &format!("[data-request=\"{request_a}\"] button.yes")).await;
    click_and_wait(&page, &format!("[data-request=\"{request_b}\"] button.no")).await;
    let seen = text(&page).await;
    assert!(seen.contains("No device is waiting for your answer"), "{seen}");
    assert!(
        seen.contains("laptop (") && seen.contains("Revoke"),
        "the grant is listed: {seen}"
    );
    screenshot(&page, "console-answered.png").await;

    // A's join now lands in its Session; B is told the person declined.
    let joined = call(&a, "pap_join", join("now")).await.unwrap();
    assert_eq!(joined["url"], page_url.as_str());
    assert_eq!(joined["status"], 200);
    let declined = call(&b, "pap_join", join("please")).await.unwrap_err();
    assert_eq!(declined["code"], "permission_denied", "{declined}");
    assert!(
        declined["message"].as_str().unwrap().contains("the person declined"),
        "{declined}"
    );

    // The record: the grant in the ledger, the calls in the audit, filtered by device.
    page.goto(format!("{origin}/?device={a_id}")).await.unwrap();
    let record = text(&page).await;
    assert!(record.contains("human via console"), "{record}");
    assert!(
        record.contains("pap_join") && record.contains("https://shop.example"),
        "{record}"
    );
    assert!(
        !record.contains(&format!("phone ({b_id})\tpap_join")),
        "filtered to device A: {record}"
    );
    screenshot(&page, "console-record.png").await;

    browser.close().await.unwrap();
    events.abort();
    console.kill().await.unwrap();
    stop_host(host, &state).await;
}
