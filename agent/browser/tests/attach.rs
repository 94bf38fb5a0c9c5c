//! The attach provider on real processes (AIP-63 L2, L5, L13): a Chromium the host did not
//! start is attached to with `wasAlreadyRunning`, launched again without a second process, left
//! running by `stop`, and ended only by a forced stop; a non-loopback endpoint is refused.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::PathBuf;
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, CHROMIUM, ChromiumConfig, LaunchError, StandaloneChromium};
use pap_browser::spec::InstanceState;

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/PID but is no longer running.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_running_chromium_is_attached_left_running_by_stop_and_ended_only_by_force() {
    let dir = std::env::temp_dir().join(format!("pap-attach-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The operator's profile's parents: reachable by the browser's user where it runs as one.
    std::fs::create_dir_all(&dir).unwrap();
    let mut foreign = StandaloneChromium::start(
        &PathBuf::from(CHROMIUM),
        &dir.join("foreign-profile"),
        0,
        &[],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let foreign_pid = foreign.pid().unwrap();
    let mut config = ChromiumConfig::new(dir.join("state"));
    config.attach_to = Some(foreign.endpoint());
    let host = BrowserHost::new();

    // L2: attached, wasAlreadyRunning, its own pid and profile; a second launch is the same one.
    let first = host.launch(&config, "attached", &|_| {}).await.unwrap();
    assert!(first.was_already_running && first.browser.was_already_running());
    assert_eq!(first.browser.pid(), Some(foreign_pid));
    assert_eq!(first.browser.user_data_dir(), dir.join("foreign-profile"));
    let second = host.launch(&config, "attached", &|_| {}).await.unwrap();
    assert!(second.was_already_running);
    assert!(
        std::sync::Arc::ptr_eq(&first.browser, &second.browser),
        "no second connection or process"
    );
    assert_eq!(host.health("attached").state, InstanceState::Healthy);
    drop((first, second));

    // L5: stop disconnects and leaves the foreign browser running, its profile untouched.
    host.stop("attached", Duration::from_secs(2)).await.unwrap();
    assert_eq!(host.health("attached").state, InstanceState::Stopped);
    assert!(
        foreign.is_running() && alive(foreign_pid),
        "stop ended a browser the host did not start"
    );
    assert!(dir.join("foreign-profile").exists());

    // Attached again, then the forced stop ends it.
    let again = host.launch(&config, "attached", &|_| {}).await.unwrap();
    assert_eq!(again.browser.pid(), Some(foreign_pid));
    drop(again);
    host.stop_forced("attached", Duration::from_secs(2)).await.unwrap();
    assert!(
        foreign.exited_within(Duration::from_secs(10)).await,
        "the forced stop left the browser running"
    );
    // Its profile is not the host's to delete: the forced stop ends processes, never data.
    assert!(
        dir.join("foreign-profile").exists(),
        "the forced stop deleted the foreign profile"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn only_a_loopback_endpoint_is_attached_to() {
    let mut config = ChromiumConfig::new(std::env::temp_dir().join(format!("pap-attach-far-{}", std::process::id())));
    config.attach_to = Some("192.0.2.1:9222".parse().unwrap());
    let error = BrowserHost::new().launch(&config, "far", &|_| {}).await.unwrap_err();
    assert!(
        matches!(error, LaunchError::Attach(ref why) if why.contains("loopback")),
        "{error}"
    );
    // Nothing answers on a closed loopback port: a clear error, no process started.
    config.attach_to = Some("127.0.0.1:9".parse().unwrap());
    let error = BrowserHost::new().launch(&config, "closed", &|_| {}).await.unwrap_err();
    assert!(
        matches!(error, LaunchError::Attach(ref why) if why.contains("no Chromium answers")),
        "{error}"
    );
}

/// Review F1: an operator-run Chromium never receives granted material, whoever offers it: its
/// manifest declares no `cookies`, and `consent revoke` could not take the material out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn an_attached_browser_takes_no_granted_material() {
    use std::sync::Arc;

    use pap_browser::chromium::BrowserError;
    use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator, SourceSpec};
    use pap_shared::{SystemClock, SystemRng};

    let dir = std::env::temp_dir().join(format!("pap-attach-material-{}", std::process::id()));
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
    let injections = consent.local_injections(&Caller::local_agent()).unwrap();
    assert_eq!(injections.len(), 1);

    let mut foreign = StandaloneChromium::start(
        &PathBuf::from(CHROMIUM),
        &dir.join("foreign-profile"),
        0,
        &[],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let mut config = ChromiumConfig::new(state);
    config.attach_to = Some(foreign.endpoint());
    let host = BrowserHost::new();
    let browser = host.launch(&config, "attached", &|_| {}).await.unwrap().browser;
    let refused = browser.inject(&injections[0]).await.unwrap_err();
    assert!(matches!(refused, BrowserError::Attached), "{refused}");
    let names = browser.cookie_names().await.unwrap();
    assert!(
        !names.iter().any(|(_, domain)| domain.ends_with("shop.example")),
        "the attached browser holds {names:?}"
    );
    drop(browser);
    host.stop_forced("attached", Duration::from_secs(2)).await.unwrap();
    assert!(foreign.exited_within(Duration::from_secs(10)).await);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_impostor_naming_another_socket_is_never_followed() {
    // Review L6, at the call site: something local answers `/json/version` on the endpoint and
    // names a DevTools socket elsewhere (its own listener). The attach is refused, and nothing
    // connects to that other socket, where the agent's grants would have gone.
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere_port = elsewhere.local_addr().unwrap().port();
    let impostor = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = impostor.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = impostor.accept().await {
            let mut request = [0_u8; 1024];
            let _ = stream.read(&mut request).await;
            let body = format!(
                r#"{{"Browser":"Chrome/156","webSocketDebuggerUrl":"ws://127.0.0.1:{elsewhere_port}/devtools/browser/x"}}"#
            );
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    let dir = std::env::temp_dir().join(format!("pap-attach-impostor-{}", std::process::id()));
    let mut config = ChromiumConfig::new(dir.clone());
    config.attach_to = Some(endpoint);
    let refused = BrowserHost::new().launch(&config, "impostor", &|_| {}).await;
    let error = match refused {
        Ok(_) => panic!("an impostor's socket was attached to"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("not on"), "{error}");
    // Nothing came to the other socket.
    let connected = tokio::time::timeout(Duration::from_millis(200), elsewhere.accept()).await;
    assert!(
        connected.is_err(),
        "the agent connected to the socket the impostor named"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
