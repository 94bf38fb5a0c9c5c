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
    assert!(
        origin.starts_with("http://pap-") && origin.contains(".localhost:"),
        "{link}"
    );
    let http = console_client(&origin);

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
    support::click_until_answered(&page, &format!("[data-request=\"{request_a}\"] button.yes")).await;
    support::click_until_answered(&page, &format!("[data-request=\"{request_b}\"] button.no")).await;
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

/// A plain HTTP client that reaches the console at its own name (`pap-….localhost`, which
/// browsers resolve to loopback themselves) on 127.0.0.1.
fn console_client(origin: &str) -> reqwest::Client {
    let authority = origin.trim_start_matches("http://");
    let (name, port) = authority.rsplit_once(':').unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port.parse().unwrap()));
    pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &[(name.to_owned(), addr)].into()).unwrap()
}

/// A page whose counter changes every animation frame (so the screencast draws continuously),
/// with a button that tells the test server it was pressed.
const ANIMATED: &str = r#"<!doctype html><meta charset="utf-8"><title>Counter</title>
<style>body{margin:0;font:20px sans-serif}#b{position:absolute;left:20px;top:100px;width:200px;height:80px}</style>
<h1 id="n">0</h1><button id="b" onclick="fetch('/pressed', {method: 'POST'})">Press</button>
<script>let i = 0; (function tick() { document.getElementById('n').textContent = ++i; requestAnimationFrame(tick); })();</script>"#;

/// A page that shows noise (a large JPEG) or nothing (a small one), as its body's class says.
const NOISE: &str = r#"<!doctype html><meta charset="utf-8"><title>Noise</title>
<style>body{margin:0}.off canvas{visibility:hidden}</style><body class="off"><canvas id="c" width="700" height="420"></canvas>
<script>const c = document.getElementById('c').getContext('2d'); const d = c.createImageData(700, 420);
for (let i = 0; i < d.data.length; i++) d.data[i] = (i % 4 === 3) ? 255 : Math.random() * 256; c.putImageData(d, 0, 0);</script>"#;

/// Serves [`ANIMATED`] on loopback; each POST to `/pressed` sends on the channel.
async fn animated_page() -> (std::net::SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let (pressed, presses) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { axum::response::Html(ANIMATED) }))
        .route("/noise", axum::routing::get(|| async { axum::response::Html(NOISE) }))
        .route(
            "/pressed",
            axum::routing::post(move || {
                let _ = pressed.send(());
                async { "ok" }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    (addr, presses)
}

/// The frames of a live picture as they arrive: when, and how large.
fn read_frames(mut answer: reqwest::Response) -> tokio::sync::mpsc::UnboundedReceiver<(std::time::Instant, usize)> {
    let (frames, arrived) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buffer: Vec<u8> = Vec::new();
        while let Ok(Some(chunk)) = answer.chunk().await {
            let at = std::time::Instant::now();
            buffer.extend_from_slice(&chunk);
            // Each part: `--pap-frame`, its head (Content-Length), a blank line, the JPEG, CRLF.
            while let Some(head_end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                let end = head_end + 4 + length + 2;
                if buffer.len() < end {
                    break;
                }
                buffer.drain(..end);
                if frames.send((at, length)).is_err() {
                    return;
                }
            }
        }
    });
    arrived
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_person_watches_a_tab_live_takes_it_over_and_the_device_waits() {
    let work = std::env::temp_dir().join(format!("pap-console-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    // Made here (0755), not by `identity init` (0700 all the way): the sandboxed browser user
    // passes through it to the state directory.
    std::fs::create_dir_all(&work).unwrap();
    let state = work.join("state");
    support::cli_agent::pap(&state, &["identity", "init", "atlas.example"]);
    let (pages, mut presses) = animated_page().await;
    let origin_page = format!("http://127.0.0.1:{}", pages.port());
    let (host, addr, link) =
        support::cli_agent::host_serve_with_console(&state, &["--name-origin".to_owned(), origin_page.clone()]).await;
    let http = pap_agent::testkit::plain_http_client(rustls::RootCertStore::empty(), &Default::default()).unwrap();
    let (_id, bearer) = pair(&http, addr, &state, "laptop").await;
    let device = device(addr, &bearer).await;
    let opened = call(&device, "browser_navigate", json!({"url": format!("{origin_page}/")}))
        .await
        .unwrap();
    let target = opened["target"].as_str().unwrap().to_owned();
    let console = link.split("/login").next().unwrap().to_owned();
    let http = console_client(&console);

    // A device's bearer reaches none of the tab's routes.
    for path in ["", "/live"] {
        let answer = http
            .get(format!("{console}/tabs/{target}{path}"))
            .bearer_auth(&bearer)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "/tabs/{target}{path}");
    }
    for path in ["/take", "/hand-back", "/click", "/type"] {
        let answer = http
            .post(format!("{console}/tabs/{target}{path}"))
            .header("origin", &console)
            .bearer_auth(&bearer)
            .form(&[("csrf", "x")])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "/tabs/{target}{path}");
    }

    // The person signs in; the console lists the device's tab.
    let config = BrowserConfig::builder()
        .chrome_executable("/usr/bin/chromium")
        .no_sandbox()
        .new_headless_mode()
        .viewport(None)
        .window_size(1200, 900)
        .user_data_dir(work.join("person"))
        .build()
        .unwrap();
    let (mut browser, mut handler) = Browser::launch(config).await.unwrap();
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let page = browser.new_page(link.as_str()).await.unwrap();
    page.wait_for_navigation().await.unwrap();
    let listed = text(&page).await;
    assert!(listed.contains("laptop") && listed.contains("Counter"), "{listed}");
    let cookie = page
        .get_cookies()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.name == "__Host-pap-console")
        .map(|c| format!("{}={}", c.name, c.value))
        .unwrap();

    // The rate bound: the counter redraws every animation frame, the picture sends at most 10 a second.
    let live = format!("{console}/tabs/{target}/live");
    let mut frames = read_frames(http.get(&live).header("cookie", &cookie).send().await.unwrap());
    let first = tokio::time::timeout(DEADLINE, frames.recv()).await.unwrap().unwrap().0;
    let mut last = first;
    for _ in 0..30 {
        last = tokio::time::timeout(DEADLINE, frames.recv()).await.unwrap().unwrap().0;
    }
    let rate = 30.0 / (last - first).as_secs_f64();
    assert!(
        rate <= f64::from(pap_browser::tools::FRAMES_PER_SECOND) * 1.15,
        "{rate} frames a second"
    );
    drop(frames);

    // The latency from a change in the device's tab (a tool's act) to the picture's frame that
    // shows it, at the person's end of the stream: 20 changes, noise shown and hidden in turn.
    call(
        &device,
        "browser_navigate",
        json!({"target": target, "url": format!("{origin_page}/noise")}),
    )
    .await
    .unwrap();
    let noisy = target.clone();
    let answer = http
        .get(format!("{console}/tabs/{noisy}/live"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(
        answer.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("multipart/x-mixed-replace")
    );
    let mut frames = read_frames(answer);
    let plain = tokio::time::timeout(DEADLINE, frames.recv()).await.unwrap().unwrap().1;
    // 20 changes made right after a frame was sent (each waits out the rate cap's gap), then 20
    // made after the picture was still for 150 ms (the pause paces the measurement; it waits
    // for nothing to be ready).
    let (mut latencies, mut idle_latencies) = (Vec::new(), Vec::new());
    for round in 0..40 {
        if round >= 20 {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let show = round % 2 == 0;
        let class = if show { "on" } else { "off" };
        let acted = std::time::Instant::now();
        call(
            &device,
            "browser_evaluate",
            json!({"target": noisy, "expression": format!("document.body.className = '{class}'")}),
        )
        .await
        .unwrap();
        let seen = tokio::time::timeout(DEADLINE, async {
            loop {
                let (at, size) = frames.recv().await.unwrap();
                if at > acted && (size > plain * 4) == show {
                    return at;
                }
            }
        })
        .await
        .unwrap();
        let ms = (seen - acted).as_secs_f64() * 1000.0;
        if round < 20 {
            latencies.push(ms)
        } else {
            idle_latencies.push(ms)
        }
    }
    drop(frames);
    latencies.sort_by(f64::total_cmp);
    idle_latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&latencies, 50.0), percentile(&latencies, 99.0));
    let (idle_p50, idle_p99) = (percentile(&idle_latencies, 50.0), percentile(&idle_latencies, 99.0));
    std::fs::write(
        support::artefacts().join("console-live-latency.json"),
        json!({
            "afterAFrame": {"changes": latencies.len(), "p50Ms": p50, "p99Ms": p99},
            "afterStill150Ms": {"changes": idle_latencies.len(), "p50Ms": idle_p50, "p99Ms": idle_p99},
            "framesPerSecond": rate,
        })
        .to_string(),
    )
    .unwrap();
    assert!(
        p99 < 1000.0 && idle_p99 < 1000.0,
        "the person sees a change late: {p99} ms, {idle_p99} ms"
    );
    call(
        &device,
        "browser_navigate",
        json!({"target": target, "url": format!("{origin_page}/")}),
    )
    .await
    .unwrap();

    // The live view in the person's browser.
    page.goto(format!("{console}/tabs/{target}")).await.unwrap();
    // Shown: an `<img>` has a natural width; an `<input type="image">` is as tall as the picture
    // (its alt text alone is one line); else the picture's first frame is awaited.
    let shown = r#"new Promise((resolve) => { const i = document.querySelector('.live');
        if (i.naturalWidth > 0 || i.offsetHeight > 100) resolve(true);
        else i.addEventListener('load', () => resolve(true)); })"#;
    tokio::time::timeout(DEADLINE, page.evaluate(shown))
        .await
        .unwrap()
        .unwrap();
    screenshot(&page, "console-live.png").await;

    // Takeover: the device's acts wait; the person's click lands in the person's tab.
    support::click_until_answered(&page, "form[action$='/take'] button").await;
    let busy = call(&device, "browser_click", json!({"target": target, "selector": "#b"}))
        .await
        .unwrap_err();
    assert_eq!(busy["retryable"], true, "{busy}");
    assert!(
        busy["message"]
            .as_str()
            .unwrap()
            .starts_with("busy: the person has this tab"),
        "{busy}"
    );
    // Reading stays open.
    call(&device, "browser_screenshot", json!({"target": target}))
        .await
        .unwrap();
    tokio::time::timeout(DEADLINE, page.evaluate(shown))
        .await
        .unwrap()
        .unwrap();
    screenshot(&page, "console-takeover.png").await;
    let picture = page
        .find_element("input.live")
        .await
        .unwrap()
        .bounding_box()
        .await
        .unwrap();
    let next = support::NextDocument::of(&page).await;
    page.click(chromiumoxide::layout::Point::new(picture.x + 120.0, picture.y + 140.0))
        .await
        .unwrap();
    tokio::time::timeout(DEADLINE, presses.recv()).await.unwrap().unwrap();
    // The console answers the click with the tab's page again (303, then 200).
    next.answered().await;

    // Handed back, the device acts again.
    support::click_until_answered(&page, "form[action$='/hand-back'] button").await;
    call(
        &device,
        "browser_click",
        json!({"target": target, "selector": "#b", "trusted": true}),
    )
    .await
    .unwrap();
    tokio::time::timeout(DEADLINE, presses.recv()).await.unwrap().unwrap();

    browser.close().await.unwrap();
    events.abort();
    stop_host(host, &state).await;
    let _ = std::fs::remove_dir_all(&work);
}
