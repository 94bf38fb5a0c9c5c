//! Review H3, every route, on real Chromium: a tool caller cannot make the agent's browser load
//! `file:` (the review's probe reads the storage-state file a grant came from, with the cookies
//! of domains the person declined), `chrome:`, a top-level `data:` document, or a loopback
//! service nobody named, whether it asks a tool to go there, opens a tab, downloads, sends CDP,
//! or has a page it loaded go there by script, frame, new window, redirect or `fetch`.
//!
//! The page server is the one loopback origin the test names (`http://127.0.0.1:PORT`); a second
//! server on another loopback port counts the requests that reach it, and must see none.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, ChromiumConfig};
use pap_browser::spec::{InstanceKey, NamedOrigin, NavigationPolicy, ToolErrorCode};
use pap_browser::testkit::{chromium_manifest, consent_at, err, ok};
use pap_browser::tools::ToolHost;
use serde_json::{Value, json};

const CANARY: &str = "DECLINED-DOMAIN-CANARY-7f3a";

async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    addr
}

/// Every tab's URL and document, as the browser has them now.
async fn every_tab(tools: &ToolHost) -> Vec<(String, String)> {
    let listed = ok(tools.call("browser.tabs", &json!({"action": "list"})).await);
    let mut tabs = Vec::new();
    for tab in listed["targets"].as_array().unwrap() {
        let target = tab["target"].as_str().unwrap();
        let seen = ok(tools
            .call(
                "browser.evaluate",
                &json!({"target": target, "expression": "location.href + '\\n' + document.documentElement.outerHTML"}),
            )
            .await);
        let text = seen["value"].as_str().unwrap_or_default().to_owned();
        let (url, html) = text.split_once('\n').unwrap_or((&text, ""));
        tabs.push((url.to_owned(), html.to_owned()));
    }
    tabs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn no_route_takes_the_agents_browser_to_local_files_internals_or_unnamed_loopback() {
    let dir = std::env::temp_dir().join(format!("pap-navigation-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The review's target: a storage-state file holding a declined domain's cookie, readable by
    // the agent (and, as root, by the browser's user: the sandbox alone does not cover it).
    let source = dir.join("storage-state.json");
    std::fs::write(
        &source,
        json!({"cookies": [{"name": "sid", "value": CANARY, "domain": "bank.example", "path": "/"}], "origins": []})
            .to_string(),
    )
    .unwrap();
    let file_url = format!("file://{}", source.display());

    // A loopback service nobody named: it counts what reaches it.
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let unnamed = serve(axum::Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { "internal service" }
    }))
    .await;
    let unnamed_http = format!("http://{unnamed}/");
    let unnamed_https = format!("https://{unnamed}/");

    // The named page server: a hostile page with every in-page route, and redirects.
    // The page writes the canary in two halves: its own source never holds it whole.
    let (head, tail) = CANARY.split_at(8);
    let hostile = format!(
        "<h1 id=h>hostile</h1>\
         <script>\
           fetch('{unnamed_http}').catch(() => {{}}); fetch('{unnamed_https}').catch(() => {{}});\
           fetch('{file_url}').catch(() => {{}});\
           try {{ window.open('{file_url}'); }} catch (e) {{}}\
           try {{ window.open('chrome://version'); }} catch (e) {{}}\
           try {{ window.open('data:text/html,<p>' + '{head}' + '{tail}</p>'); }} catch (e) {{}}\
           new Image().src = '{unnamed_http}img';\
         </script>"
    );
    // The same frames written into a page: a frame Chromium refuses never loads, and the tools'
    // navigation must not wait for it (chromiumoxide's `goto` alone waits 30 s, then fails).
    let framed = format!(
        "<h1>framed</h1><iframe src='{file_url}'></iframe><iframe src='chrome://version'></iframe>\
         <iframe src='{unnamed_http}'></iframe>"
    );
    // And added by a script the caller runs once the page is up.
    let frames = format!(
        "for (const src of ['{file_url}', 'chrome://version', '{unnamed_http}']) {{\
           const frame = document.createElement('iframe'); frame.src = src; document.body.append(frame);\
         }} true"
    );
    let (to_file, to_unnamed) = (file_url.clone(), unnamed_http.clone());
    let pages = serve(
        axum::Router::new()
            .route(
                "/",
                axum::routing::get(move || async move { axum::response::Html(hostile) }),
            )
            .route(
                "/to-file",
                axum::routing::get(move || async move { axum::response::Redirect::temporary(&to_file) }),
            )
            .route(
                "/to-loopback",
                axum::routing::get(move || async move { axum::response::Redirect::temporary(&to_unnamed) }),
            )
            .route(
                "/framed",
                axum::routing::get(move || async move { axum::response::Html(framed) }),
            )
            .route(
                "/moves",
                axum::routing::get(|| async {
                    axum::response::Html("<h1>moves</h1><script>location.href = 'chrome://version';</script>")
                }),
            ),
    )
    .await;
    let named = format!("http://{pages}");

    let mut config = ChromiumConfig::new(dir.join("state"));
    config.navigation = NavigationPolicy::naming([NamedOrigin::parse(&named).unwrap()]);
    let host = BrowserHost::new();
    let tools = ToolHost::new(
        chromium_manifest(),
        host.clone(),
        config,
        InstanceKey::try_from("navigation").unwrap(),
        consent_at(&dir.join("state")),
    );
    tools.launch().await.unwrap();

    // The tools refuse before the browser is asked: permission_denied, naming the scheme or
    // host and never the path.
    for url in [
        file_url.as_str(),
        "chrome://version",
        "data:text/html,<p>x</p>",
        "javascript:alert(1)",
        unnamed_http.as_str(),
        unnamed_https.as_str(),
        "https://localhost/",
        "https://169.254.169.254/latest/meta-data/",
    ] {
        let refused = err(tools.call("browser.navigate", &json!({"url": url})).await);
        assert_eq!(refused.code, ToolErrorCode::PermissionDenied, "navigate {url}");
        assert_eq!(refused.cause.as_ref().unwrap()["rule"], "navigation");
        assert!(!refused.message.contains("storage-state"), "{}", refused.message);
        let refused = err(tools.call("browser.tabs", &json!({"action": "open", "url": url})).await);
        assert_eq!(refused.code, ToolErrorCode::PermissionDenied, "tabs.open {url}");
    }

    // The hostile page, allowed itself, tries every in-page route.
    let opened = ok(tools
        .call("browser.navigate", &json!({"url": format!("{named}/")}))
        .await);
    let page = opened["target"].as_str().unwrap().to_owned();
    ok(tools
        .call("browser.evaluate", &json!({"target": page, "expression": frames}))
        .await);
    let refused = err(tools
        .call("browser.download", &json!({"target": page, "url": file_url}))
        .await);
    assert_eq!(refused.code, ToolErrorCode::PermissionDenied, "download");
    let refused = err(tools
        .call(
            "browser.cdp_send",
            &json!({"target": page, "method": "Page.navigate", "params": {"url": file_url}}),
        )
        .await);
    assert_eq!(refused.code, ToolErrorCode::InputInvalid, "cdp_send Page.navigate");
    // A redirect, followed by the browser itself, meets the guard.
    for hop in ["/to-file", "/to-loopback"] {
        let refused = err(tools
            .call("browser.navigate", &json!({"url": format!("{named}{hop}")}))
            .await);
        assert_eq!(
            refused.code,
            ToolErrorCode::PermissionDenied,
            "redirect {hop}: {}",
            refused.message
        );
    }
    let moved = ok(tools
        .call("browser.navigate", &json!({"url": format!("{named}/moves")}))
        .await);
    ok(tools
        .call("browser.navigate", &json!({"url": format!("{named}/framed")}))
        .await);

    // Whatever the page's script, frames and windows did has happened once the page settled: a
    // fetch answered (refused) and a window opened or not. Wait for the moving page's attempt
    // and the hostile page's windows with a deadline, then look at every tab.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let settled = loop {
        tick.tick().await;
        let done = ok(tools
            .call(
                "browser.evaluate",
                &json!({"target": moved["target"], "expression": "document.readyState === 'complete'"}),
            )
            .await);
        if done["value"] == Value::Bool(true) || tokio::time::Instant::now() > deadline {
            break done["value"] == Value::Bool(true);
        }
    };
    assert!(settled, "the moving page never finished loading");
    let browser = host.attach("navigation").await.unwrap();
    for url in browser.tab_urls().await.unwrap() {
        assert!(
            !(url.starts_with("file:") || url.starts_with("chrome:") || url.starts_with("data:")),
            "a window reached {url}"
        );
    }
    for (url, html) in every_tab(&tools).await {
        assert!(
            !(url.starts_with("file:") || url.starts_with("chrome:") || url.starts_with("data:")),
            "a tab reached {url}"
        );
        assert!(!html.contains(CANARY), "a tab shows the declined cookie: {url}");
    }
    // The browser's own view of its pages, frames included: no document from a file.
    let frames = ok(tools
        .call(
            "browser.cdp_send",
            &json!({"target": page, "method": "Page.getFrameTree"}),
        )
        .await);
    let tree = frames["result"].to_string();
    assert!(
        !tree.contains("\"url\":\"file:") && !tree.contains("\"url\":\"chrome:"),
        "{tree}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the unnamed loopback service was reached"
    );

    host.stop("navigation", Duration::from_secs(2)).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
