//! The reference shop's pages in real Chromium, as the person at the agent's browser sees them:
//! the front page, the device page and an operation page at desktop (1280 px) and phone (390 px)
//! widths, each screenshot kept in the artefacts directory (`PAP_ARTIFACTS`, CI's
//! `ci-artifacts/`). Each must load the site's stylesheet under `default-src 'self'`, fetch
//! nothing from another origin and need no sideways scrolling.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use chromiumoxide::cdp::browser_protocol::network::EventRequestWillBeSent;
use chromiumoxide::page::ScreenshotParams;
use futures_util::StreamExt as _;
use pap_agent::join;
use pap_browser::chromium::BrowserHost;
use support::{Stage, artefacts, client_for, permit, pinned_browser, signed_in_with_operation};

/// The widths shown: a laptop and a phone (CSS pixels), with a plausible height for each.
const VIEWPORTS: [(&str, i64, i64, bool); 2] = [("desktop", 1280, 800, false), ("phone", 390, 844, true)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_shop_pages_read_on_a_desktop_and_a_phone_in_chromium() {
    let stage = Stage::new("pages", &["shop.example", "atlas.example"]).await;
    let (company, addr) = support::start_reference_company(&stage).await;
    let (client, shop) = client_for(&stage, "shop.example", addr).await;
    let (session, operation_page) = signed_in_with_operation(&company, &client, &shop).await;
    // Another sign-in the person has not approved yet: the device page has an agent to name.
    let waiting = client.device_begin(&shop, &["orders:read"]).await.unwrap();

    let state = stage.work.join("state");
    let host = BrowserHost::new();
    let config = pinned_browser(&stage, state.clone(), addr);
    let browser = host.launch(&config, "pages", &|_| {}).await.unwrap().browser;
    let page = browser.new_page().await.unwrap();
    let mut requests = page.event_listener::<EventRequestWillBeSent>().await.unwrap();
    let permit = permit(&state, "shop.example");
    join(
        &client,
        &shop,
        &session,
        &operation_page,
        pap_agent::JoinTab::New(&page),
        &permit,
        &config.persons,
        Duration::from_secs(15),
    )
    .await
    .unwrap();

    let pages = [
        ("front", "https://shop.example/".to_owned(), "Signed in as ada"),
        (
            "device",
            format!("https://shop.example/device?user_code={}", waiting.user_code),
            "Atlas",
        ),
        ("operation", operation_page.as_str().to_owned(), "Confirm"),
    ];
    let mut shots = Vec::new();
    for (label, width, height, mobile) in VIEWPORTS {
        for (name, url, says) in &pages {
            // Set for each page: a full-page screenshot clears the override when it is done.
            page.execute(SetDeviceMetricsOverrideParams::new(width, height, 1.0, mobile))
                .await
                .unwrap();
            tokio::time::timeout(Duration::from_secs(15), page.goto(url.as_str()))
                .await
                .unwrap()
                .unwrap();
            let text: String = page
                .evaluate("document.body.innerText")
                .await
                .unwrap()
                .into_value()
                .unwrap();
            assert!(text.contains(says), "{name} at {width}px says {text}");
            // The stylesheet applied (so `default-src 'self'` let it in) and nothing is wider
            // than the screen.
            let laid_out: serde_json::Value = page
                .evaluate(
                    "({ maxWidth: getComputedStyle(document.querySelector('main')).maxWidth, \
                        scrollWidth: document.documentElement.scrollWidth, \
                        innerWidth: window.innerWidth, \
                        scripts: document.scripts.length })",
                )
                .await
                .unwrap()
                .into_value()
                .unwrap();
            assert_eq!(laid_out["maxWidth"], "640px", "{name}: {laid_out}");
            assert_eq!(laid_out["scripts"], 0, "{name}: {laid_out}");
            assert!(
                laid_out["scrollWidth"].as_i64() <= laid_out["innerWidth"].as_i64(),
                "{name} scrolls sideways at {width}px: {laid_out}"
            );
            let png = page
                .screenshot(ScreenshotParams::builder().full_page(true).build())
                .await
                .unwrap();
            // The PNG's own width (IHDR, bytes 16..20): the page was drawn at this width.
            let drawn = u32::from_be_bytes(png[16..20].try_into().unwrap());
            assert_eq!(i64::from(drawn), width, "{name} was drawn {drawn}px wide");
            let path = artefacts().join(format!("shop-{name}-{width}.png"));
            std::fs::write(&path, png).unwrap();
            shots.push(path);
        }
        eprintln!("{label}: {width}px wide");
    }
    for shot in &shots {
        eprintln!("screenshot: {}", shot.display());
    }
    drop(page);
    drop(browser);
    host.stop("pages", Duration::from_secs(2)).await.unwrap();
    // Every request the pages made went to the shop itself (or was the blank first page).
    while let Some(event) = requests.next().await {
        let url = &event.request.url;
        assert!(
            url.starts_with("https://shop.example/") || url == "about:blank",
            "a page fetched {url}"
        );
    }
    std::fs::remove_dir_all(&stage.work).unwrap();
}
