//! Review H4: the agent's Chromium runs with its sandbox on, always. Seen from outside, as the
//! kernel reports it: every renderer of the agent's browser is under a seccomp-bpf filter
//! (`Seccomp: 2`) in a user namespace other than the agent's, and (where the agent is root, as
//! in CI) runs as the unprivileged browser user, never root.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::Duration;

use pap_browser::chromium::{BrowserUser, ChromiumConfig, ControlledBrowser, passed_to_browser};

fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn every_renderer_of_the_agents_browser_is_sandboxed() {
    let dir = std::env::temp_dir().join(format!("pap-sandbox-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = ChromiumConfig::new(dir.join("state"));
    let browser = ControlledBrowser::launch(&config, "sandbox", &|_| {}).await.unwrap();
    let page = browser.new_page().await.unwrap();
    page.goto("data:text/html,<p>a renderer</p>").await.unwrap();

    let profile = format!("--user-data-dir={}", browser.user_data_dir().display());
    let our_namespace = std::fs::read_link("/proc/self/ns/user").unwrap();
    let browser_user = BrowserUser::recorded(&config.state_dir).unwrap();
    // The renderer is up once the page loaded; its process is listed with its flags.
    let renderers: Vec<(u32, String)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            // A zygote's child rewrites its command line as one string: split on spaces too.
            let args: Vec<String> = String::from_utf8_lossy(&cmdline)
                .split(['\0', ' '])
                .map(str::to_owned)
                .collect();
            let ours = args.contains(&profile) && args.iter().any(|a| a == "--type=renderer");
            ours.then(|| {
                (
                    pid,
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default(),
                )
            })
        })
        .collect();
    assert!(!renderers.is_empty(), "no renderer of the agent's browser found");
    for (pid, status) in &renderers {
        assert_eq!(
            field(status, "Seccomp:"),
            Some("2"),
            "renderer {pid} has no seccomp-bpf filter"
        );
        let namespace = std::fs::read_link(format!("/proc/{pid}/ns/user")).unwrap();
        assert_ne!(
            namespace, our_namespace,
            "renderer {pid} shares the agent's user namespace"
        );
        let uid = field(status, "Uid:").and_then(|u| u.split_whitespace().next()).unwrap();
        assert_ne!(uid, "0", "renderer {pid} runs as root");
        if let Some(user) = &browser_user {
            assert_eq!(uid, user.uid.to_string(), "renderer {pid} is not the browser user's");
        }
    }
    eprintln!(
        "{} renderers sandboxed (seccomp-bpf, own user namespace)",
        renderers.len()
    );
    browser.stop(Duration::from_secs(2)).await.unwrap();
    assert!(!browser.user_data_dir().exists(), "the profile outlived the stop");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_browser_holds_none_of_the_agents_environment() {
    // Review N11: cargo runs this test with its own variables (CARGO_*, and whatever CI holds);
    // the browser process started from it keeps only the allowlist and a HOME of its own.
    assert!(
        std::env::vars().any(|(name, _)| !passed_to_browser(&name) && name != "HOME"),
        "nothing to leave behind"
    );
    let dir = std::env::temp_dir().join(format!("pap-sandbox-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = ChromiumConfig::new(dir.join("state"));
    let browser = ControlledBrowser::launch(&config, "environment", &|_| {})
        .await
        .unwrap();
    let pid = browser.pid().unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v.split(|b| *b == b'=').next().unwrap_or_default()).into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "HOME"), "{names:?}");
    // The launch's own: the browser's HOME and config home, and what `sh` (the wrapper that
    // hands Chromium its pipe) sets itself.
    let own = ["HOME", "CHROME_CONFIG_HOME", "PWD", "OLDPWD", "SHLVL", "_"];
    let kept: Vec<&String> = names
        .iter()
        .filter(|n| !own.contains(&n.as_str()) && !passed_to_browser(n))
        .collect();
    assert!(kept.is_empty(), "the browser inherited {kept:?}");
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some() && !names.iter().any(|n| n == "CARGO_MANIFEST_DIR"));
    let home = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let home = String::from_utf8_lossy(&home);
    let home = home.split('\0').find_map(|v| v.strip_prefix("HOME=")).unwrap();
    assert!(home.starts_with(dir.to_str().unwrap()), "the browser's HOME is {home}");
    browser.stop(Duration::from_secs(2)).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Removes the users a test created, whatever happened (`userdel` also removes their groups).
struct CreatedUsers(Vec<String>);

impl Drop for CreatedUsers {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = std::process::Command::new("userdel").arg(name).output();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn each_state_directory_runs_its_browser_as_a_user_of_its_own() {
    use pap_browser::chromium::BrowserUserPolicy;
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::process::CommandExt as _;

    // Review N11: one browser uid for every state directory let a browser compromised through
    // one agent read another's profile and trace its processes.
    let dir = std::env::temp_dir().join(format!("pap-browser-users-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let states = [dir.join("a/state"), dir.join("b/state")];
    if !nix::unistd::geteuid().is_root() {
        // Not root: Chromium runs as the agent's own user and sandboxes itself; no user is made.
        for state in &states {
            let user = BrowserUser::for_state_dir(state, &BrowserUserPolicy::PerStateDirectory).unwrap();
            assert_eq!(user, None);
        }
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let names: Vec<String> = states.iter().map(|s| BrowserUser::name_for(s)).collect();
    assert_ne!(names[0], names[1]);
    let _cleanup = CreatedUsers(names.clone());
    // A home left by another user (the directory's user changed) is not handed over as it is.
    let kept_home = states[0].join("chromium-home");
    std::fs::create_dir_all(kept_home.join("planted")).unwrap();
    std::os::unix::fs::chown(&kept_home, Some(65534), Some(65534)).unwrap();

    let mut browsers = Vec::new();
    for state in &states {
        let mut config = ChromiumConfig::new(state.clone());
        config.browser_user = BrowserUserPolicy::PerStateDirectory;
        browsers.push(ControlledBrowser::launch(&config, "own-user", &|_| {}).await.unwrap());
    }
    let mut users = Vec::new();
    for ((state, name), browser) in states.iter().zip(&names).zip(&browsers) {
        let user = BrowserUser::recorded(state).unwrap().unwrap();
        assert_eq!(&user.name, name, "the state directory's own user, recorded");
        assert_eq!(std::fs::read_to_string(state.join("browser-user")).unwrap(), *name);
        let status = std::fs::read_to_string(format!("/proc/{}/status", browser.pid().unwrap())).unwrap();
        let uid = field(&status, "Uid:")
            .and_then(|u| u.split_whitespace().next())
            .unwrap();
        assert_eq!(
            uid,
            user.uid.to_string(),
            "the browser runs as its state directory's user"
        );
        assert_eq!(std::fs::metadata(browser.user_data_dir()).unwrap().uid(), user.uid);
        users.push(user);
    }
    assert_ne!(users[0].uid, users[1].uid, "two state directories share a browser uid");
    assert!(
        !kept_home.join("planted").exists(),
        "another user's home was handed over as it was"
    );
    assert_eq!(std::fs::metadata(&kept_home).unwrap().uid(), users[0].uid);

    // Seen from b's browser user: a's profile cannot even be listed.
    let listed = std::process::Command::new("ls")
        .arg(browsers[0].user_data_dir())
        .uid(users[1].uid)
        .gid(users[1].gid)
        .output()
        .unwrap();
    assert!(!listed.status.success(), "b's browser user lists a's profile");

    for browser in browsers {
        browser.stop(Duration::from_secs(2)).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
