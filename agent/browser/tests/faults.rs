//! Fault tests with real processes (AIP-63 L6, L7, L8): a launcher that dies at once ends in
//! `crash-looping` after three failures and spawns no fourth; an operator reset launches again;
//! browsers left by a killed host are swept on the next start; a launch that never binds its
//! DevTools port is ended by the supervisor at its budget (L9), not by a timer of its own; a
//! browser that stops answering fails its health probe within `health.timeoutMs` (L4).

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, CHROMIUM, ChromiumConfig, LaunchError, ProcTable, ProcessTable};
use pap_browser::spec::ToolErrorCode;
use pap_browser::spec::{InstanceState, Operator, OperatorReset, Policy};

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pap-faults-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_launcher_that_dies_at_once_crash_loops_after_three_and_spawns_no_fourth() {
    let dir = scratch("crash");
    // A "browser" that notes each start and exits at once.
    let count = dir.join("starts");
    // Writable by the browser's user too: as root, the launcher runs as that user, sandboxed.
    std::fs::write(&count, "").unwrap();
    std::fs::set_permissions(&count, std::fs::Permissions::from_mode(0o666)).unwrap();
    let launcher = dir.join("dies-at-once");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\necho started >> {}\necho 'cannot start' >&2\nexit 1\n",
            count.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = ChromiumConfig::new(dir.join("state"));
    config.executable = launcher;

    let host = BrowserHost::new();
    for attempt in 1..=3 {
        let error = host.launch(&config, "crashy", &|_| {}).await.unwrap_err();
        assert!(
            matches!(error, LaunchError::NoDevTools(ref printed) if printed.contains("cannot start")),
            "attempt {attempt}: {error}"
        );
    }
    let health = host.health("crashy");
    assert_eq!(health.state, InstanceState::CrashLooping);
    assert!(health.reason.as_deref().unwrap_or_default().contains("cannot start"));
    match host.launch(&config, "crashy", &|_| {}).await.unwrap_err() {
        LaunchError::Refused(error) => {
            assert_eq!(error.code, ToolErrorCode::CrashLooping);
            assert!(error.message.contains("cannot start"), "{}", error.message);
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count(),
        3,
        "a fourth process was spawned"
    );

    // Only an operator's reset leaves crash-looping; with a working browser it launches.
    let mut working = config.clone();
    working.executable = PathBuf::from(CHROMIUM);
    let browser = host
        .reset(
            &working,
            "crashy",
            OperatorReset::new(&Operator::from_operator_channel("test")),
            &|_| {},
        )
        .await
        .unwrap();
    assert_eq!(host.health("crashy").state, InstanceState::Healthy);
    drop(browser);
    host.stop("crashy", Duration::from_secs(2)).await.unwrap();
    assert_eq!(host.health("crashy").state, InstanceState::Stopped);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium and python3; .ci/run runs it"]
async fn browsers_left_by_a_killed_host_are_swept_on_the_next_start() {
    let dir = scratch("orphans");
    let state = dir.join("state");
    // Named like every profile, `<instance>-<host pid>`, for a host pid that no longer exists.
    let profile = state.join("browsers/left-behind-4194304");
    std::fs::create_dir_all(&profile).unwrap();
    // A host that dies without stopping its browser: Python starts Chromium with our marker in a
    // new session and exits at once, leaving it to init.
    let spawn = format!(
        "import subprocess; subprocess.Popen([{CHROMIUM:?}, '--headless=new', '--no-sandbox', '--disable-gpu', \
         '--no-first-run', '--remote-debugging-port=0', '--user-data-dir={}', '--pap-agent-browser=left-behind', \
         'about:blank'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)",
        profile.display()
    );
    let status = std::process::Command::new("python3")
        .args(["-c", &spawn])
        .status()
        .unwrap();
    assert!(status.success());
    let marker = "--pap-agent-browser=left-behind";
    let ours = || {
        ProcTable
            .list()
            .unwrap()
            .into_iter()
            .filter(|p| p.args.iter().any(|a| a == marker))
            .count()
    };
    // The orphan is there (it may take a moment to exec; wait on the process table, 10 s at most).
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while ours() == 0 {
            tick.tick().await;
        }
    })
    .await
    .expect("the orphaned Chromium never appeared");

    let host = BrowserHost::new();
    let swept = host.sweep_previous_run(&state, Duration::from_secs(5)).await.unwrap();
    assert!(swept >= 1, "swept {swept}");
    assert_eq!(ours(), 0, "a marked browser survived the sweep");
    let profile_arg = format!("--user-data-dir={}", profile.display());
    assert!(
        !ProcTable.list().unwrap().iter().any(|p| p.args.contains(&profile_arg)),
        "a child of the orphan survived"
    );
    assert!(!profile.exists(), "the orphan's profile was left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_launch_that_never_binds_its_port_is_ended_by_the_supervisor_at_its_budget() {
    let dir = scratch("stall");
    // A "browser" that starts, keeps Chromium's flags on its command line, and never prints a
    // DevTools address.
    let launcher = dir.join("hangs");
    std::fs::write(
        &launcher,
        "#!/bin/sh\nexec python3 -c 'import time; time.sleep(600)' \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = ChromiumConfig::new(dir.join("state"));
    config.executable = launcher;
    // The launch's own backstop is far away: only the supervisor can end it first.
    config.launch_timeout = Duration::from_secs(120);
    let policy = Policy {
        budget: 1_000,
        progress_window: 300,
        hard_ceiling: 3_000,
        ..Policy::default()
    };
    let host = BrowserHost::with_policy(policy);
    let error = host.launch(&config, "stall", &|_| {}).await.unwrap_err();
    assert!(
        matches!(error, LaunchError::Stalled(ref why) if why.contains("budget")),
        "{error}"
    );
    // It counted as a failed launch, and nothing of it is left.
    let health = host.health("stall");
    assert_eq!(health.state, InstanceState::Stopped);
    assert!(
        health.reason.as_deref().unwrap_or_default().contains("no progress"),
        "{health:?}"
    );
    let marker = "--pap-agent-browser=stall";
    assert!(
        !ProcTable
            .list()
            .unwrap()
            .iter()
            .any(|p| p.args.iter().any(|a| a == marker)),
        "the stalled launch's process survived"
    );
    assert_eq!(std::fs::read_dir(dir.join("state/browsers")).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_browser_that_stops_answering_is_not_healthy_within_the_health_timeout() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = scratch("frozen");
    let mut config = ChromiumConfig::new(dir.join("state"));
    config.health_timeout = Duration::from_millis(300);
    let host = BrowserHost::new();
    let browser = host.launch(&config, "frozen", &|_| {}).await.unwrap().browser;
    assert!(host.attach("frozen").await.is_some());
    // Frozen, the browser keeps its socket open and never answers: the probe must give up by
    // itself (the outer deadline is only there so a regression fails instead of hanging).
    let pid = Pid::from_raw(i32::try_from(browser.pid().unwrap()).unwrap());
    kill(pid, Signal::SIGSTOP).unwrap();
    let attached = tokio::time::timeout(Duration::from_secs(30), host.attach("frozen")).await;
    kill(pid, Signal::SIGCONT).unwrap();
    assert!(
        matches!(attached, Ok(None)),
        "a frozen browser was reported usable or hung the probe"
    );
    assert_eq!(host.health("frozen").state, InstanceState::Degraded);
    // Thawed, it answers again.
    assert!(host.attach("frozen").await.is_some());
    assert_eq!(host.health("frozen").state, InstanceState::Healthy);
    host.stop("frozen", Duration::from_secs(2)).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
