//! The lifecycle as a host runs it, with real processes (AIP-63 §3): the manifest's values are
//! what the host runs by (a budget of 1 s ends a quiet launch at 1 s, not at the default 120 s);
//! the health loop sees a frozen browser without any call (L1, L4); a call that arrives while
//! the instance starts waits the remaining budget, then fails `browser:starting` through the
//! real tool surface (L10); a slow launch of one instance holds up no other instance.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pap_browser::chromium::{BrowserHost, ChromiumConfig, LaunchError};
use pap_browser::consent::ConsentHost;
use pap_browser::spec::{InstanceKey, InstanceState, Lifecycle, ToolErrorCode, ToolResult, parse_manifest};
use pap_browser::tools::ToolHost;
use serde_json::json;

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pap-lifecycle-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The shipped Chromium manifest with a short launch budget, as a provider might declare it.
fn quick_manifest() -> pap_browser::spec::BrowserManifest {
    let text = pap_browser::chromium::MANIFEST.replacen(
        "launch: { idempotent: true, budgetMs: 120000, progressWindowMs: 10000, hardCeilingMs: 360000 }",
        "launch: { idempotent: true, budgetMs: 1000, progressWindowMs: 300, hardCeilingMs: 4000 }",
        1,
    );
    assert_ne!(text, pap_browser::chromium::MANIFEST, "the shipped launch line moved");
    parse_manifest(&text, None).unwrap()
}

/// A "browser" that keeps Chromium's flags on its command line and never answers on its DevTools
/// pipe: a launch that makes no progress.
fn silent_launcher(dir: &Path) -> PathBuf {
    let launcher = dir.join("silent");
    std::fs::write(
        &launcher,
        "#!/bin/sh\nexec python3 -c 'import time; time.sleep(600)' \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    launcher
}

/// A "browser" that answers the first message on its DevTools pipe (fds 3 and 4, one
/// NUL-terminated JSON message each) and nothing after: a launch that progresses (process alive,
/// DevTools up) and never becomes healthy.
fn stuck_launcher(dir: &Path) -> PathBuf {
    let launcher = dir.join("stuck");
    let script = "import json, os\n\
                  first = b''\n\
                  while not first.endswith(b'\\0'):\n    first += os.read(3, 1)\n\
                  hello = json.loads(first[:-1])\n\
                  os.write(4, json.dumps({'id': hello['id'], 'result': {}}).encode() + b'\\0')\n\
                  while os.read(3, 65536):\n    pass\n";
    std::fs::write(dir.join("stuck.py"), script).unwrap();
    std::fs::write(
        &launcher,
        format!("#!/bin/sh\nexec python3 {} \"$@\"\n", dir.join("stuck.py").display()),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    launcher
}

/// Waits (polling its health, 20 ms apart) until `instance` is in `state`, at most `deadline`.
async fn wait_for(host: &BrowserHost, instance: &str, state: InstanceState, deadline: Duration) {
    tokio::time::timeout(deadline, async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while host.health(instance).state != state {
            tick.tick().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{instance} never became {state}: {:?}", host.health(instance)));
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_manifests_launch_budget_is_what_ends_a_quiet_launch() {
    let dir = scratch("budget");
    let manifest = quick_manifest();
    let lifecycle: &Lifecycle = &manifest.browser.lifecycle;
    let mut config = ChromiumConfig::new(dir.join("state")).with_lifecycle(lifecycle);
    config.executable = silent_launcher(&dir);
    assert_eq!(
        config.launch_timeout,
        Duration::from_secs(4),
        "the hard ceiling is the backstop"
    );
    let host = BrowserHost::with_policy(lifecycle.policy());
    let started = Instant::now();
    // Run by the default policy (120 s) this would outlive the 20 s deadline.
    let error = tokio::time::timeout(Duration::from_secs(20), host.launch(&config, "quiet", &|_| {}))
        .await
        .expect("the manifest's budget did not end the launch")
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(error, LaunchError::Stalled(ref why) if why.contains("1000 ms budget")),
        "{error}"
    );
    assert!(
        took >= Duration::from_millis(1_000) && took < Duration::from_millis(3_500),
        "{took:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_health_loop_sees_a_frozen_browser_without_any_call() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = scratch("loop");
    let mut config = ChromiumConfig::new(dir.join("state"));
    config.health_timeout = Duration::from_millis(300);
    let host = BrowserHost::new();
    let browser = host.launch(&config, "watched", &|_| {}).await.unwrap().browser;
    let checked = host.health("watched").checked_at;
    let _loop = host.start_health_loop(Duration::from_millis(100));
    let pid = Pid::from_raw(i32::try_from(browser.pid().unwrap()).unwrap());
    kill(pid, Signal::SIGSTOP).unwrap();
    // Nothing calls the browser: only the loop can notice.
    wait_for(&host, "watched", InstanceState::Degraded, Duration::from_secs(10)).await;
    kill(pid, Signal::SIGCONT).unwrap();
    wait_for(&host, "watched", InstanceState::Healthy, Duration::from_secs(10)).await;
    assert!(
        host.health("watched").checked_at > checked,
        "checkedAt moves with each probe"
    );
    drop(browser);
    host.stop("watched", Duration::from_secs(2)).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_call_while_starting_waits_the_remaining_budget_then_fails_starting_through_the_tools() {
    let dir = scratch("starting");
    let manifest = quick_manifest();
    let lifecycle = manifest.browser.lifecycle.clone();
    let mut config = ChromiumConfig::new(dir.join("state")).with_lifecycle(&lifecycle);
    config.executable = stuck_launcher(&dir);
    let host = BrowserHost::with_policy(lifecycle.policy());
    let consent = Arc::new(
        ConsentHost::open(
            &dir.join("state"),
            Arc::new(pap_shared::SystemClock),
            Arc::new(pap_shared::SystemRng),
        )
        .unwrap(),
    );
    let tools = ToolHost::new(
        manifest,
        host.clone(),
        config,
        InstanceKey::try_from("starting").unwrap(),
        consent,
    );
    let launching = tokio::spawn({
        let tools = tools.clone();
        async move { tools.launch().await }
    });
    let launch_started = Instant::now();
    wait_for(&host, "starting", InstanceState::Starting, Duration::from_secs(5)).await;
    let call_started = Instant::now();
    let result = tools.call("browser.navigate", &json!({ "url": "about:blank" })).await;
    let waited = call_started.elapsed();
    let ToolResult::Err(error) = result else {
        panic!("a call to a starting browser succeeded")
    };
    assert_eq!(error.code, ToolErrorCode::Starting, "{}", error.message);
    assert_eq!(error.retryable, Some(true));
    // It waited for the rest of the 1 s budget (the launch began before the call), no more.
    let budget_end = launch_started + Duration::from_millis(1_000);
    assert!(
        Instant::now() + Duration::from_millis(50) >= budget_end,
        "answered before the budget ran out"
    );
    assert!(waited < Duration::from_millis(2_500), "waited {waited:?}");
    // Still progressing (process alive, DevTools up): the supervisor ends it at its 4 s ceiling.
    let launched = tokio::time::timeout(Duration::from_secs(20), launching)
        .await
        .unwrap()
        .unwrap();
    let ended = launched.unwrap_err();
    assert!(ended.message.contains("hard ceiling"), "{}", ended.message);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_slow_launch_holds_up_no_other_instance() {
    let dir = scratch("gates");
    let mut slow = ChromiumConfig::new(dir.join("state"));
    slow.executable = silent_launcher(&dir);
    let quick = ChromiumConfig::new(dir.join("state"));
    let policy = pap_browser::spec::Policy {
        budget: 20_000,
        progress_window: 20_000,
        hard_ceiling: 20_000,
        ..pap_browser::spec::Policy::default()
    };
    let host = BrowserHost::with_policy(policy);
    let stalling = tokio::spawn({
        let host = host.clone();
        async move { host.launch(&slow, "slow", &|_| {}).await.map(|_| ()) }
    });
    wait_for(&host, "slow", InstanceState::Starting, Duration::from_secs(5)).await;
    // Another instance launches, is probed and stops while "slow" is still starting: no lock
    // of the host is held across a launch (it used to be, up to the hard ceiling).
    let started = Instant::now();
    let launched = tokio::time::timeout(Duration::from_secs(15), host.launch(&quick, "quick", &|_| {}))
        .await
        .expect("the second instance waited for the first one's launch")
        .unwrap();
    assert!(!launched.was_already_running);
    assert!(host.attach("quick").await.is_some());
    drop(launched);
    host.stop("quick", Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        host.health("slow").state,
        InstanceState::Starting,
        "took {:?}",
        started.elapsed()
    );
    stalling.abort();
    let _ = stalling.await;
    let _ = pap_browser::chromium::sweep(
        &pap_browser::chromium::ProcTable,
        &pap_browser::chromium::SweepScope::StateDir {
            state_dir: dir.join("state"),
        },
        Duration::from_secs(2),
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}
