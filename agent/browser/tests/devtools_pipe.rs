//! Review M7: the agent's Chromium serves DevTools on a pipe only the agent holds, so no other
//! local process can drive it. Seen from outside, as the kernel reports it: neither the browser's
//! processes nor the agent's hold a listening TCP socket once the browser runs, and a process of
//! another user cannot connect to the control socket the agent's own processes use. The control:
//! an operator's Chromium on `--remote-debugging-port` (what the agent's ran with before) is found
//! by the same scan and answered the other user's probe, which is what the review showed.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, CHROMIUM, ChromiumConfig, StandaloneChromium};
use pap_browser::spec::InstanceState;

/// The inodes of the listening TCP sockets of this machine (`/proc/net/tcp`, `tcp6`).
fn listening_inodes() -> HashSet<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    // `st` 0A is LISTEN; the inode is the tenth field.
                    (fields.get(3) == Some(&"0A")).then(|| fields.get(9)?.parse().ok())?
                })
                .collect::<Vec<u64>>()
        })
        .collect()
}

/// The processes whose command line names `user_data_dir` (a browser and all its children).
fn processes_of(user_data_dir: &Path) -> Vec<u32> {
    let profile = format!("--user-data-dir={}", user_data_dir.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            // A zygote's child rewrites its command line as one string: split on spaces too.
            String::from_utf8_lossy(&cmdline)
                .split(['\0', ' '])
                .any(|arg| arg == profile)
                .then_some(pid)
        })
        .collect()
}

/// Of `pids`, those holding a listening TCP socket.
fn listening(pids: &[u32]) -> Vec<u32> {
    let listening = listening_inodes();
    pids.iter()
        .copied()
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter_map(|target| {
                    let target = target.to_str()?.to_owned();
                    target.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()
                })
                .any(|inode| listening.contains(&inode))
        })
        .collect()
}

/// What a process of another user (`nobody`) sees: whether it can connect to the control
/// socket, and whether `/json/version` answers on `port` (the review's probe). Run through
/// `setpriv`, which the agent's tests need root for.
fn stranger_probe(control: &Path, port: u16) -> serde_json::Value {
    let script = r#"
import json, socket, sys, urllib.request
out = {}
try:
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); out["control"] = "connected"
except OSError as e:
    out["control"] = e.__class__.__name__
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[2]}/json/version", timeout=10).read()
    out["devtools"] = "webSocketDebuggerUrl" in json.loads(body)
except OSError as e:
    out["devtools"] = e.__class__.__name__
print(json.dumps(out))
"#;
    let output = std::process::Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(control)
        .arg(port.to_string())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn no_local_process_but_the_agent_reaches_its_browsers_devtools() {
    let dir = std::env::temp_dir().join(format!("pap-devtools-pipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let host = BrowserHost::new();
    let browser = host
        .launch(&ChromiumConfig::new(state.clone()), "piped", &|_| {})
        .await
        .unwrap()
        .browser;
    // A page loaded: the renderer and network service are up too.
    let page = browser.new_page().await.unwrap();
    page.goto("about:blank").await.unwrap();

    let mut ours = processes_of(browser.user_data_dir());
    assert!(ours.len() >= 2, "the browser's processes were not found: {ours:?}");
    ours.push(std::process::id());
    assert_eq!(
        listening(&ours),
        Vec::<u32>::new(),
        "the agent's browser (or the agent) listens on TCP"
    );

    // The agent's other processes reach the browser through its owner, as this user only.
    let control = browser.user_data_dir().with_extension("control");
    let meta = std::fs::metadata(&control).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    assert_eq!(
        pap_browser::chromium::probe_profile(browser.user_data_dir(), Duration::from_secs(5)).await,
        InstanceState::Healthy
    );

    // The control: an operator's Chromium on a DevTools port, as the agent's was.
    let mut operators = StandaloneChromium::start(
        Path::new(CHROMIUM),
        &dir.join("operator-profile"),
        0,
        &[],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let port = operators.endpoint().port();
    let theirs = processes_of(&dir.join("operator-profile"));
    assert!(
        !listening(&theirs).is_empty(),
        "the scan did not find the operator's DevTools port"
    );

    if nix::unistd::geteuid().is_root() {
        let seen = stranger_probe(&control, port);
        assert_eq!(seen["control"], "PermissionError", "{seen}");
        assert_eq!(
            seen["devtools"], true,
            "the probe could not reach a DevTools port: {seen}"
        );
    } else {
        // Without root this test cannot be another user; the socket's mode (checked above) and
        // its owner are what the kernel holds another user to.
        eprintln!("not root: the other-user probe needs setpriv as root (CI runs it)");
    }

    drop(page);
    drop(browser);
    host.stop("piped", Duration::from_secs(2)).await.unwrap();
    assert!(!control.exists(), "the control socket outlived its browser");
    operators.kill().await;
    // The operator's browser's children (renderers, the crash handler) leave after it and may
    // still write into its profile: the directory goes once none of them runs (10 s at most).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !processes_of(&dir.join("operator-profile")).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the operator's browser outlived its kill by 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
