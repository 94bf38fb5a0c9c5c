//! `pap-agent browser status|stop` against real browsers: status reads the process table and
//! changes nothing; stop ends every browser of the state directory, even one whose agent still
//! runs, and removes its profile.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::process::Command;
use std::time::Duration;

use pap_agent::{BrowserHost, ChromiumConfig};

fn cli(state: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_pap-agent"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn status_shows_the_running_browser_and_stop_ends_it() {
    let state = std::env::temp_dir().join(format!("pap-cli-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    assert!(cli(&state, &["browser", "status"]).starts_with("no browsers of "));

    let host = BrowserHost::new();
    let browser = host
        .launch(&ChromiumConfig::new(state.clone()), "probe", &|_| {})
        .await
        .unwrap();
    let pid = browser.pid().unwrap();
    let status = cli(&state, &["browser", "status"]);
    let line = format!("probe\thealthy\tpid {pid}\tagent {} running\t", std::process::id());
    assert!(status.contains(&line), "{status}");
    // Status changed nothing.
    assert!(host.attach("probe").await.is_some());

    let stopped = cli(&state, &["browser", "stop"]);
    let ended: usize = stopped
        .trim()
        .strip_prefix("ended ")
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(ended >= 1, "{stopped}");
    assert!(cli(&state, &["browser", "status"]).starts_with("no browsers of "));
    assert!(
        host.attach("probe").await.is_none(),
        "the browser survived the operator's stop"
    );
    assert!(!browser.user_data_dir().exists(), "its profile was left");
    let _ = host.stop("probe", Duration::from_secs(2)).await;
    std::fs::remove_dir_all(&state).unwrap();
}
