//! Review L5: `LiveProfiles` (how `pap-agent consent refresh` and `revoke` reach the running
//! browsers of a state directory from another process) follows a profile's `DevToolsActivePort`
//! only while that profile's own browser runs. A killed browser leaves its port file behind;
//! whoever listens on that port next is sent nothing.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, CHROMIUM, ChromiumConfig, LiveProfiles, StandaloneChromium};
use pap_browser::consent::{Caller, ConsentHost, GrantRequest, LiveInstances as _, Operator, SourceSpec};
use pap_shared::{SystemClock, SystemRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_cookies_go_only_to_a_browser_that_runs_now_in_its_profile() {
    let dir = std::env::temp_dir().join(format!("pap-stale-profiles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("storage-state.json");
    std::fs::write(
        &source,
        serde_json::json!({"cookies": [
            {"name": "sid", "value": "GRANTED-VALUE", "domain": "shop.example", "path": "/", "secure": true, "httpOnly": true}
        ], "origins": []})
        .to_string(),
    )
    .unwrap();
    let state = dir.join("state");
    let consent = ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap();
    consent
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::for_domains(SourceSpec::StorageState(source), &["shop.example"]),
        )
        .unwrap();
    let injection = consent.local_injections(&Caller::local_agent()).unwrap().remove(0);

    // Someone else's DevTools listener, and a profile of the state directory whose port file
    // names it, as a killed browser's would once the port is taken.
    let mut stranger = StandaloneChromium::start(
        &PathBuf::from(CHROMIUM),
        &dir.join("stranger-profile"),
        0,
        &[],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    // Chromium writes its port file just after DevTools answers: wait for it, with a deadline.
    let port_file = dir.join("stranger-profile/DevToolsActivePort");
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while !port_file.exists() {
            tick.tick().await;
        }
    })
    .await
    .expect("the stranger never wrote its DevToolsActivePort");
    let stale = state.join("browsers/killed");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::copy(&port_file, stale.join("DevToolsActivePort")).unwrap();

    let live = LiveProfiles::new(&state);
    assert_eq!(
        live.inject(&injection).await.unwrap(),
        0,
        "a stale port file was followed"
    );
    let mut config = ChromiumConfig::new(dir.join("observer"));
    config.attach_to = Some(stranger.endpoint());
    let observer = BrowserHost::new();
    let seen = observer.launch(&config, "stranger", &|_| {}).await.unwrap().browser;
    let names = seen.cookie_names().await.unwrap();
    assert!(
        !names.iter().any(|(_, domain)| domain.ends_with("shop.example")),
        "the stranger received {names:?}"
    );
    drop(seen);
    observer.stop_forced("stranger", Duration::from_secs(2)).await.unwrap();
    assert!(stranger.exited_within(Duration::from_secs(10)).await);

    // The state directory's own running browser is still reached.
    let host = BrowserHost::new();
    let own = host
        .launch(&ChromiumConfig::new(state.clone()), "own", &|_| {})
        .await
        .unwrap()
        .browser;
    assert_eq!(live.inject(&injection).await.unwrap(), 1);
    let names = own.cookie_names().await.unwrap();
    assert!(
        names.iter().any(|(_, domain)| domain.ends_with("shop.example")),
        "{names:?}"
    );
    drop(own);
    host.stop("own", Duration::from_secs(2)).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
