//! AIP-63 §4 end to end, against our reference company over real TLS, in real Chromium: a grant
//! from a storage-state file holding a planted cookie, its injection at launch, the join with the
//! grant's permit, a refresh, a refused widening, and a revoke through the agent's tool surface.
//! After the revoke the browser holds no cookie for the domain (read over CDP), its tabs there
//! are closed and the company's page answers 401 to the browser's next request. The C9 canary: the
//! planted value and the join's assertion appear in no tool result or error, log line, ledger
//! line, report or file under the state directory.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::network::{EventRequestWillBeSent, EventResponseReceived, ResourceType};
use futures_util::StreamExt as _;
use pap_agent::join;
use pap_browser::chromium::BrowserHost;
use pap_browser::consent::{ConsentHost, GrantRequest, Operator, SourceSpec};
use pap_browser::spec::load_manifest;
use pap_browser::spec::{ToolErrorCode, ToolResult};
use pap_browser::tools::ToolHost;
use pap_shared::{Rng as _, SystemClock, SystemRng};
use serde_json::{Value, json};
use support::{Captured, Stage};

const INSTANCE: &str = "consent";

fn planted_value() -> String {
    let mut bytes = [0u8; 12];
    SystemRng.fill(&mut bytes);
    format!(
        "PLANTED{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn revoke_deletes_the_cookies_closes_the_tabs_and_the_company_refuses_the_next_request() {
    let logs = Captured::install();
    let stage = Stage::new("consent-revoke", &["shop.example", "atlas.example"]).await;
    let (company, addr) = support::start_reference_company(&stage).await;
    let (client, shop) = support::client_for(&stage, "shop.example", addr).await;
    let (session, page_url) = support::signed_in_with_operation(&company, &client, &shop).await;

    // The person's storage state: a planted cookie for shop.example, one for a domain never granted.
    let planted = planted_value();
    let state_dir = stage.work.join("state");
    let source = stage.work.join("storage-state.json");
    std::fs::write(
        &source,
        json!({
            "cookies": [
                {"name": "planted", "value": planted, "domain": "shop.example", "path": "/", "secure": true, "httpOnly": true, "sameSite": "Lax"},
                {"name": "visible", "value": planted, "domain": "shop.example", "path": "/", "secure": true, "httpOnly": false, "sameSite": "Lax"},
                {"name": "elsewhere", "value": planted, "domain": ".other.example", "path": "/", "secure": true}
            ],
            "origins": [
                {"origin": "https://shop.example", "localStorage": [{"name": "token", "value": planted}]},
                // On another port: no tab shows it and the scope's host names do not say it.
                {"origin": "https://shop.example:8443", "localStorage": [{"name": "token", "value": planted}]},
                {"origin": "https://other.example", "localStorage": [{"name": "token", "value": planted}]}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let consent = Arc::new(ConsentHost::open(&state_dir, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap());
    let grant = consent
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::for_domains(SourceSpec::StorageState(source.clone()), &["shop.example"]),
        )
        .unwrap();
    assert_eq!(grant.cookie_count, 2);

    let config = support::pinned_browser(&stage, state_dir.clone(), addr);
    let manifest = load_manifest(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../browser/providers/chromium/BROWSER.md"),
    )
    .unwrap();
    let host = BrowserHost::new();
    let instance = pap_browser::spec::InstanceKey::try_from(INSTANCE).unwrap();
    let tools = ToolHost::new(manifest, host.clone(), config, instance, consent.clone());
    let mut results: Vec<String> = Vec::new();
    let mut record = |result: ToolResult| -> Result<Value, pap_browser::spec::ToolError> {
        results.push(result.to_json().to_string());
        match result {
            ToolResult::Ok(value) => Ok(value),
            ToolResult::Err(error) => Err(error),
        }
    };

    // Launch: the granted cookie goes in, the other domain's does not.
    tools.launch().await.unwrap();
    let browser = host.attach(INSTANCE).await.unwrap();
    let names = browser.cookie_names().await.unwrap();
    assert!(names.contains(&("planted".into(), "shop.example".into())), "{names:?}");
    assert!(!names.iter().any(|(name, _)| name == "elsewhere"), "{names:?}");

    // The join, with the grant's permit; the assertion is read off the wire for the canary.
    let permit = consent
        .permit_join(&pap_browser::consent::Caller::local_agent(), "shop.example")
        .unwrap();
    let page = browser.new_page().await.unwrap();
    let mut sent = page.event_listener::<EventRequestWillBeSent>().await.unwrap();
    let joined = join(
        &client,
        &shop,
        &session,
        &page_url,
        pap_agent::JoinTab::New(&page),
        &permit,
        tools.persons(),
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    assert_eq!(joined.status, 200);
    let endpoint = shop.browser_session_endpoint.as_ref().unwrap().as_str().to_owned();
    let assertion = loop {
        let event = sent.next().await.unwrap();
        if event.request.url == endpoint {
            let body = event.request.post_data_entries.clone().unwrap_or_default();
            let bytes: Vec<u8> = body
                .iter()
                .filter_map(|e| e.bytes.as_ref())
                .flat_map(|b| {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(AsRef::<str>::as_ref(b))
                        .unwrap_or_default()
                })
                .collect();
            let form = String::from_utf8(bytes).unwrap();
            break form.strip_prefix("assertion=").unwrap().to_owned();
        }
    };
    assert!(assertion.starts_with("eyJ") && assertion.len() > 100);
    let names = browser.cookie_names().await.unwrap();
    assert!(
        names.iter().any(|(name, _)| name == "__Host-poppy_session"),
        "{names:?}"
    );
    // A second tab on the domain, opened through the tool surface.
    let opened = record(tools.call("browser.navigate", &json!({"url": page_url.as_str()})).await).unwrap();
    let tool_target = opened["target"].as_str().unwrap().to_owned();
    // The page can read the non-HttpOnly granted cookie; the tool result never carries it.
    let read = record(
        tools
            .call(
                "browser.evaluate",
                &json!({"target": tool_target, "expression": "document.cookie"}),
            )
            .await,
    )
    .unwrap();
    let shown = read["value"].as_str().unwrap();
    assert!(shown.contains("visible=[granted value redacted]"), "{shown}");
    // The granted local storage is there too (injected in a document of its origin).
    let stored = record(
        tools
            .call(
                "browser.evaluate",
                &json!({"target": tool_target, "expression": "localStorage.getItem('token')"}),
            )
            .await,
    )
    .unwrap();
    assert_eq!(stored["value"], "[granted value redacted]");
    assert_eq!(
        browser.local_storage_keys("https://shop.example:8443").await.unwrap(),
        ["token"],
        "the storage of the granted origin on port 8443 went in"
    );

    // The agent lists, refreshes within the grant, and is refused a widening (recorded).
    let listed = record(tools.call("browser.profile.list", &json!({})).await).unwrap();
    assert_eq!(listed["grants"][0]["id"], grant.id);
    let refreshed = record(
        tools
            .call("browser.profile.refresh", &json!({"grantId": grant.id}))
            .await,
    )
    .unwrap();
    assert_eq!(refreshed["injected"], 2);
    let widened = record(
        tools
            .call(
                "browser.profile.refresh",
                &json!({"grantId": grant.id, "domains": ["shop.example", "other.example"]}),
            )
            .await,
    )
    .unwrap_err();
    assert_eq!(widened.code, ToolErrorCode::PermissionDenied);

    // The revoke, through the tool surface.
    let revoked = record(
        tools
            .call("browser.profile.revoke", &json!({"grantId": grant.id}))
            .await,
    )
    .unwrap();
    assert_eq!(revoked["derived"]["local"], "deleted");
    assert!(revoked["tabsClosed"].as_u64().unwrap() >= 2, "{revoked}");
    assert!(revoked["cookiesDeleted"].as_u64().unwrap() >= 3, "{revoked}");
    let names = browser.cookie_names().await.unwrap();
    assert!(
        !names
            .iter()
            .any(|(_, domain)| domain.trim_start_matches('.').ends_with("shop.example")),
        "after revoke the browser still holds {names:?}"
    );
    let tabs = browser.tab_urls().await.unwrap();
    assert!(!tabs.iter().any(|url| url.contains("shop.example")), "{tabs:?}");
    let stale = record(tools.call("browser.get_dom", &json!({"target": tool_target})).await).unwrap_err();
    assert_eq!(stale.code, ToolErrorCode::NotFound);

    // The company refuses the browser's next request: it carries no session cookie any more.
    let again = browser.new_page().await.unwrap();
    let mut responses = again.event_listener::<EventResponseReceived>().await.unwrap();
    again.goto(page_url.as_str()).await.unwrap();
    let status = loop {
        let event = responses.next().await.unwrap();
        if event.r#type == ResourceType::Document {
            break event.response.status;
        }
    };
    assert_eq!(status, 401, "the page after revoke");
    let storage = again.evaluate("localStorage.getItem('token')").await.unwrap();
    assert!(
        storage.value().is_none_or(Value::is_null),
        "the granted storage is gone: {:?}",
        storage.value()
    );
    assert!(
        browser
            .local_storage_keys("https://shop.example:8443")
            .await
            .unwrap()
            .is_empty(),
        "the granted storage on port 8443 is gone"
    );
    // And a second join is refused before anything is signed.
    assert_eq!(
        consent
            .permit_join(&pap_browser::consent::Caller::local_agent(), "shop.example")
            .unwrap_err()
            .to_tool_error()
            .code,
        ToolErrorCode::ConsentRequired
    );
    drop((page, again, browser));
    host.stop(INSTANCE, Duration::from_secs(2)).await.unwrap();

    // The ledger: grant, refresh, deny, revoke, intact.
    use pap_browser::consent::EventKind;
    let events: Vec<EventKind> = consent
        .ledger()
        .records()
        .unwrap()
        .iter()
        .map(|r| r.entry.event.kind())
        .collect();
    assert_eq!(
        events,
        [EventKind::Grant, EventKind::Refresh, EventKind::Deny, EventKind::Revoke]
    );

    // C9: the planted value and the assertion are nowhere they must not be.
    let mut places: Vec<(String, String)> = results
        .iter()
        .map(|r| ("a tool result".to_owned(), r.clone()))
        .collect();
    places.push(("the logs".into(), logs.text()));
    places.push((
        "the error of the refused widening".into(),
        serde_json::to_string(&widened).unwrap(),
    ));
    // Every file the run left: the state directory (ledger, grants, sealed store, keys, browser
    // records) and the rest of the scratch space, but the person's own source file.
    for file in pap_browser::testkit::files_under(&stage.work)
        .into_iter()
        .filter(|f| *f != source)
    {
        let bytes = std::fs::read(&file).unwrap_or_default();
        places.push((file.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()));
    }
    assert!(places.len() > 10, "the canary looked at {} places", places.len());
    for (place, text) in &places {
        assert!(!text.contains(&planted), "the planted cookie value is in {place}");
        assert!(!text.contains(&assertion), "the join's assertion is in {place}");
    }
    std::fs::remove_dir_all(&stage.work).unwrap();
}
