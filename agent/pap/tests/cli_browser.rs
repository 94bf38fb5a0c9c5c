//! `pap-agent browser status|stop` against real browsers: status reads the process table and
//! changes nothing; stop ends every browser of the state directory, even one whose agent still
//! runs, and removes its profile.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::process::Command;
use std::time::Duration;

use pap_browser::chromium::{
    BrowserHost, CHROMIUM_HOME, ChromiumConfig, LaunchError, ProcTable, ProcessInfo, ProcessTable,
};
use pap_browser::spec::{InstanceState, Policy};

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

// Two workers: this process owns the browser, and its control socket (how `browser status`
// reaches the browser, review M7) is served while a worker waits on the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn status_shows_the_running_browser_and_stop_ends_it() {
    let state = std::env::temp_dir().join(format!("pap-cli-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    assert!(cli(&state, &["browser", "status"]).starts_with("no browsers of "));

    let host = BrowserHost::new();
    let browser = host
        .launch(&ChromiumConfig::new(state.clone()), "probe", &|_| {})
        .await
        .unwrap()
        .browser;
    let pid = browser.pid().unwrap();
    // Chromium's crash handler keeps its database in the agent's state directory, not in the
    // user's ~/.config/chromium.
    let database = format!(
        "--database={}",
        state.join(CHROMIUM_HOME).join("chromium/Crash Reports").display()
    );
    let processes = ProcTable.list().unwrap();
    assert!(
        processes.iter().any(|p| p.has_arg(&database)),
        "no crash handler with {database}: {:?}",
        processes
            .iter()
            .filter(|p| p.args.iter().any(|a| a.starts_with("--database=")))
            .collect::<Vec<_>>()
    );
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
    // Every process of the profile ended before stop reported, the children (whose rewritten
    // titles carry the profile) too: none is left to write into the profile as it is removed.
    let profile_arg = format!("--user-data-dir={}", browser.user_data_dir().display());
    let left: Vec<ProcessInfo> = ProcTable
        .list()
        .unwrap()
        .into_iter()
        .filter(|p| p.has_arg(&profile_arg))
        .collect();
    assert!(
        left.is_empty(),
        "stop reported with processes of the profile running: {left:?}"
    );
    assert!(!browser.user_data_dir().exists(), "its profile was left");
    let _ = host.stop("probe", Duration::from_secs(2)).await;
    std::fs::remove_dir_all(&state).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn crash_looping_outlives_the_agent_process_until_the_operator_resets_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("pap-cli-crashy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let launcher = dir.join("dies-at-once");
    std::fs::write(&launcher, "#!/bin/sh\necho 'cannot start' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = ChromiumConfig::new(state.clone());
    config.executable = launcher;

    // Three agent runs, one failed launch each: the third crash-loops (L6 across processes).
    for run in 1..=3 {
        let host = BrowserHost::persistent(&state, Policy::default()).unwrap();
        assert!(host.launch(&config, "crashy", &|_| {}).await.is_err(), "run {run}");
    }
    let records = state.join("browsers/supervisor.json");
    assert_eq!(std::fs::metadata(&records).unwrap().permissions().mode() & 0o777, 0o600);
    let fourth = BrowserHost::persistent(&state, Policy::default()).unwrap();
    assert_eq!(fourth.health("crashy").state, InstanceState::CrashLooping);
    assert!(matches!(
        fourth.launch(&config, "crashy", &|_| {}).await,
        Err(LaunchError::Refused(ref e)) if e.message.contains("cannot start")
    ));
    let status = cli(&state, &["browser", "status"]);
    assert!(status.contains("crashy\tcrash-looping\t"), "{status}");
    assert!(status.contains("cannot start"), "{status}");

    // The operator resets it: the CLI launches Debian's Chromium once and stops it.
    let reset = cli(&state, &["browser", "reset", "crashy"]);
    assert!(reset.starts_with("crashy: reset;"), "{reset}");
    let after = BrowserHost::persistent(&state, Policy::default()).unwrap();
    assert_ne!(after.health("crashy").state, InstanceState::CrashLooping);
    assert!(after.recorded().is_empty(), "the failures were not forgotten");
    // A second reset has nothing to reset, and says so.
    let again = Command::new(env!("CARGO_BIN_EXE_pap-agent"))
        .arg("--state-dir")
        .arg(&state)
        .args(["browser", "reset", "crashy"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not crash-looping"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn records_that_do_not_parse_are_refused_and_left_as_they_are() {
    let state = std::env::temp_dir().join(format!("pap-cli-records-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(state.join("browsers")).unwrap();
    let records = state.join("browsers/supervisor.json");
    std::fs::write(&records, "{ not json").unwrap();
    let error = BrowserHost::persistent(&state, Policy::default()).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("supervisor.json"), "{error}");
    assert_eq!(std::fs::read_to_string(&records).unwrap(), "{ not json");
    std::fs::remove_dir_all(&state).unwrap();
}
