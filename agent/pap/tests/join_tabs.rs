//! Where a join builds the form that carries its assertion (issue 42, the agent's side): at once
//! in a tab the agent just opened, which the browser confirms is still on the `about:blank` a
//! new tab starts with; after a fresh `about:blank` in any other tab. A page that replaced
//! itself with `about:blank` leaves its origin in that document, so its tab is not taken for
//! new, and the join there still lands.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::page::{EventFrameNavigated, GetFrameTreeParams, GetNavigationHistoryParams};
use chromiumoxide::listeners::EventStream;
use futures_util::StreamExt as _;
use pap_agent::{JoinTab, join, still_new};
use pap_browser::chromium::BrowserHost;
use support::{Stage, client_for, permit, pinned_browser, signed_in_with_operation};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_join_builds_its_form_at_once_only_in_a_tab_still_new() {
    let stage = Stage::new("join-tabs", &["shop.example", "atlas.example"]).await;
    let (company, addr) = support::start_reference_company(&stage).await;
    let (client, shop) = client_for(&stage, "shop.example", addr).await;
    let (session, operation_page) = signed_in_with_operation(&company, &client, &shop).await;
    let state = stage.work.join("state");
    let host = BrowserHost::new();
    let config = pinned_browser(&stage, state.clone(), addr);
    let browser = host.launch(&config, "join-tabs", &|_| {}).await.unwrap().browser;
    let permit = permit(&state, "shop.example");
    // Every join here is the same but for its tab.
    macro_rules! joined {
        ($tab:expr) => {
            join(
                &client,
                &shop,
                &session,
                &operation_page,
                $tab,
                &permit,
                &config.persons,
                Duration::from_secs(15),
            )
            .await
            .unwrap()
        };
    }

    let landing = operation_page.as_str();

    // A tab just opened: new, and the join lands from its first document, with no navigation
    // before the landing.
    let page = browser.new_page().await.unwrap();
    let mut navigated = page.event_listener::<EventFrameNavigated>().await.unwrap();
    assert!(still_new(&page).await.unwrap(), "a tab just opened is new");
    assert_eq!(joined!(JoinTab::New(&page)).status, 200);
    assert_eq!(navigations_until(&mut navigated, landing).await, [landing]);
    assert!(
        !still_new(&page).await.unwrap(),
        "a tab that landed on the company's page is no longer new"
    );
    // The same tab again, as a used one: sent to a fresh about:blank first, and it lands.
    assert_eq!(joined!(JoinTab::Used(&page)).status, 200);
    assert_eq!(
        navigations_until(&mut navigated, landing).await,
        ["about:blank", landing]
    );

    // A page that replaced itself with about:blank: one entry of history, on about:blank, but
    // of the company's origin, which another window of its could script. Not new: the join
    // called with `New` sends it to a fresh about:blank first, and lands. (The tab reaches the
    // page by `location.replace` too, so its first entry is replaced, not kept.)
    let replaced = browser.new_page().await.unwrap();
    let mut navigated = replaced.event_listener::<EventFrameNavigated>().await.unwrap();
    for url in [operation_page.as_str(), "about:blank"] {
        let script = format!("location.replace({})", serde_json::to_string(url).unwrap());
        replaced.evaluate(script).await.unwrap();
        navigations_until(&mut navigated, url).await;
        // Committed is not yet loaded: until then DevTools may answer "Not attached to an
        // active page" while it moves the tab's session to the new document.
        tokio::time::timeout(Duration::from_secs(10), replaced.wait_for_navigation())
            .await
            .expect("the page the tab replaced itself with did not load in 10 s")
            .unwrap();
    }
    // What only the document's origin tells apart from a new tab: its history is one blank
    // entry, and DevTools gives its frame the same `securityOrigin` as a new tab's.
    let history = replaced.execute(GetNavigationHistoryParams::default()).await.unwrap();
    let entries: Vec<&str> = history.result.entries.iter().map(|e| e.url.as_str()).collect();
    assert_eq!(entries, ["about:blank"]);
    let fresh = browser.new_page().await.unwrap();
    let mut origins = Vec::new();
    for tab in [&replaced, &fresh] {
        let tree = tab.execute(GetFrameTreeParams::default()).await.unwrap();
        origins.push(tree.result.frame_tree.frame.security_origin.clone());
    }
    assert_eq!(origins[0], origins[1]);
    assert!(still_new(&fresh).await.unwrap());
    fresh.close().await.unwrap();
    assert!(
        !still_new(&replaced).await.unwrap(),
        "a blank document a page left behind is not new"
    );
    // Called with `New`, the join still sends it to a fresh about:blank before the POST.
    assert_eq!(joined!(JoinTab::New(&replaced)).status, 200);
    assert_eq!(
        navigations_until(&mut navigated, landing).await,
        ["about:blank", landing]
    );

    drop((page, replaced, browser));
    host.stop("join-tabs", Duration::from_secs(2)).await.unwrap();
    std::fs::remove_dir_all(&stage.work).unwrap();
}

/// The URLs the tab's main frame committed, from `events` (seen since the last call), up to
/// the one on `landing`, within 10 s.
async fn navigations_until(events: &mut EventStream<EventFrameNavigated>, landing: &str) -> Vec<String> {
    let mut urls = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if event.frame.parent_id.is_none() {
                urls.push(event.frame.url.clone());
                if event.frame.url == landing {
                    return;
                }
            }
        }
    })
    .await
    .expect("the tab reached the page");
    urls
}
