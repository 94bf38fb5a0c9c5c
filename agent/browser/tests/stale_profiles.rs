//! Review L5: `LiveProfiles` (how `pap-agent consent refresh` and `revoke` reach the running
//! browsers of a state directory from another process) asks a browser's owner at its control
//! socket only while that profile's own browser runs. A killed owner leaves its socket file
//! behind; whatever listens there next is sent nothing.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, ChromiumConfig, LiveProfiles};
use pap_browser::consent::{Caller, ConsentHost, GrantRequest, LiveInstances as _, Operator, SourceSpec};
use pap_shared::{SystemClock, SystemRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
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

    // A profile of the state directory whose browser is gone, and a listener on the socket
    // its owner left, as whatever took the path over would be.
    std::fs::create_dir_all(state.join("browsers/killed")).unwrap();
    let taken = std::os::unix::net::UnixListener::bind(state.join("browsers/killed.control")).unwrap();
    taken.set_nonblocking(true).unwrap();

    let live = LiveProfiles::new(&state);
    assert_eq!(live.inject(&injection).await.unwrap(), 0, "a stale socket was followed");
    // A connection made to it would be waiting in its backlog now.
    assert_eq!(
        taken.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the stale socket was connected to"
    );

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
