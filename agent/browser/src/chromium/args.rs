//! How the agent's Chromium is started: the arguments every instance gets (headless, DevTools
//! on loopback only, no background traffic), the markers a sweep recognises it by, its fresh
//! profile directory (AIP-63 L13), and the default profiles of the user's own browsers, which
//! are never used.
//!
//! Tests reach companies on 127.0.0.1 without weakening TLS for anything else: a
//! `--host-resolver-rules` map for the test names, and `--ignore-certificate-errors-spki-list`
//! pinning the test leaf's key. Both are passed in explicitly ([`TestNetwork`]), never implied.

use std::path::{Path, PathBuf};

use super::config::{ChromiumConfig, TestNetwork};

/// The directory under the state directory that the agent's browsers get as their
/// `CHROME_CONFIG_HOME` (where Chromium's crash handler keeps its database).
pub const CHROMIUM_HOME: &str = "chromium-home";

/// The argument that marks a process as one of this agent's browsers, for the orphan sweep.
pub const ORPHAN_MARKER: &str = "--pap-agent-browser";

/// The argument naming the host process that launched a browser: a sweep at start ends only
/// browsers whose host is gone, never those of another agent process running now.
pub const HOST_MARKER: &str = "--pap-agent-host";

/// The profile directory of `instance` in this agent process: unique per host process, so a
/// previous run's is never reused (L13) and a sweep can find its children by it.
pub(super) fn profile_dir(config: &ChromiumConfig, instance: &str) -> PathBuf {
    config
        .state_dir
        .join("browsers")
        .join(format!("{instance}-{}", std::process::id()))
}

/// Whether `dir` is in one of the user's own Chromium or Chrome profiles (L13: an instance must
/// run on a fresh, non-default user-data directory). Compared as given and resolved through
/// symlinks (both `dir` and the home directory), so `~/.config/../.config/chromium` and a home
/// reached through a link are caught too.
pub fn is_default_profile(dir: &Path) -> bool {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        return false;
    };
    let xdg_config = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
    let resolved = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let dirs = [dir.to_path_buf(), resolved(dir)];
    [home.clone(), resolved(&home)]
        .iter()
        .flat_map(|home| default_profiles(home, xdg_config.as_deref()))
        .any(|default| dirs.iter().any(|dir| dir.starts_with(&default)))
}

/// The default user-data directories on Linux: Chromium's and each Chrome channel's under the
/// XDG config directory (`$XDG_CONFIG_HOME`, absolute, or `~/.config`; both when they differ),
/// and the snap and flatpak packages' own.
fn default_profiles(home: &Path, xdg_config: Option<&Path>) -> Vec<PathBuf> {
    const NAMES: [&str; 5] = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-beta",
        "google-chrome-unstable",
    ];
    let mut configs = vec![home.join(".config")];
    if let Some(xdg) = xdg_config.filter(|x| x.is_absolute() && *x != home.join(".config")) {
        configs.push(xdg.to_path_buf());
    }
    let mut out: Vec<PathBuf> = configs
        .iter()
        .flat_map(|config| NAMES.iter().map(move |name| config.join(name)))
        .collect();
    out.extend([
        home.join("snap/chromium/common/chromium"),
        home.join(".var/app/org.chromium.Chromium/config/chromium"),
        home.join(".var/app/com.google.Chrome/config/google-chrome"),
    ]);
    out
}

/// What every Chromium the agent runs or has an operator run gets: headless, no first-run or
/// background traffic. Never `--no-sandbox` (review H4): as root, the agent runs Chromium as an
/// unprivileged user instead (`sandbox`). DevTools: on a pipe for the agent's own (M7), on a
/// loopback port for an operator's (`standalone`).
///
/// A spare renderer kept started, as desktop Chrome keeps one: a new tab, and a page of a site
/// with no renderer yet, take it instead of waiting for a process to start (issue 42). In
/// `join_timing`, two alternating rounds of 20: a join in a new tab 184.8 and 179.9 ms at p50
/// with it, 215.8 and 208.4 ms without; opening the tab 92.4 and 88.9 against 106.9 and 99.7
/// ms. It costs one idle renderer process while the browser runs.
pub(super) const HEADLESS_ARGS: [&str; 9] = [
    "--headless=new",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--enable-features=SpareRendererForSitePerProcess",
];

pub(super) fn chromium_args(user_data_dir: &Path, instance: &str, test: &TestNetwork) -> Vec<String> {
    let mut args: Vec<String> = HEADLESS_ARGS.iter().map(|a| (*a).to_owned()).collect();
    args.extend([
        super::pipe::PIPE_SWITCH.to_owned(),
        // No first tab (issue 42): every tab the agent uses it opens itself, in the context it
        // belongs to, and a headless Chromium without windows keeps running. Measured by hand
        // (the same Chromium 156, 10 alternating launches each): DevTools answered at 217 ms
        // against 370 ms with the `about:blank` tab Chromium otherwise opens at start, and its
        // first tab came 73 ms sooner (361 against 443 ms from the spawn).
        STARTUP_WITHOUT_WINDOW.to_owned(),
        format!("--user-data-dir={}", user_data_dir.display()),
        format!("{ORPHAN_MARKER}={instance}"),
        format!("{HOST_MARKER}={}", std::process::id()),
    ]);
    if !test.map.is_empty() {
        let rules: Vec<String> = test
            .map
            .iter()
            .map(|(name, addr)| format!("MAP {name}:443 {addr}"))
            .collect();
        args.push(format!("--host-resolver-rules={}", rules.join(", ")));
    }
    if !test.spki_pins.is_empty() {
        args.push(format!(
            "--ignore-certificate-errors-spki-list={}",
            test.spki_pins.join(",")
        ));
    }
    args
}

/// Chromium starts with no window, so with no tab of its own (see [`chromium_args`]).
pub(super) const STARTUP_WITHOUT_WINDOW: &str = "--no-startup-window";

/// The variables of the agent's environment a launched browser keeps: where programs are,
/// the locale and time zone, fonts, and a display when one is used. Everything else is cleared
/// (review N11); `HOME` is the browser's own.
pub const BROWSER_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "FONTCONFIG_FILE",
    "FONTCONFIG_PATH",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
];

/// Whether the variable `name` is passed to a launched browser: one of [`BROWSER_ENV`], or a
/// locale category (`LC_*`).
pub fn passed_to_browser(name: &str) -> bool {
    BROWSER_ENV.contains(&name) || name.starts_with("LC_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_profiles_cover_each_channel_the_xdg_config_and_the_snap_and_flatpak_packages() {
        let home = Path::new("/home/u");
        let defaults = default_profiles(home, Some(Path::new("/cfg")));
        let is_default = |dir: &str| defaults.iter().any(|d| Path::new(dir).starts_with(d));
        for dir in [
            "/home/u/.config/chromium/Default",
            "/home/u/.config/google-chrome-unstable",
            "/cfg/google-chrome/Profile 1",
            "/home/u/snap/chromium/common/chromium/Default",
            "/home/u/.var/app/com.google.Chrome/config/google-chrome",
        ] {
            assert!(is_default(dir), "{dir}");
        }
        for dir in [
            "/home/u/.config/chromium-copy",
            "/state/browsers/a-1",
            "/home/u/profiles/chromium",
        ] {
            assert!(!is_default(dir), "{dir}");
        }
        // A relative XDG_CONFIG_HOME is ignored (the XDG spec says so): ~/.config alone.
        assert_eq!(default_profiles(home, Some(Path::new("cfg"))).len(), 8);
    }

    #[test]
    fn arguments_carry_the_marker_piped_devtools_and_only_the_given_test_routing() {
        let plain = chromium_args(Path::new("/state/browsers/a-1"), "a", &TestNetwork::default());
        assert!(plain.contains(&"--pap-agent-browser=a".to_owned()));
        // DevTools on the pipe only: no port for any local process to find (M7).
        assert!(plain.contains(&"--remote-debugging-pipe".to_owned()));
        assert!(!plain.iter().any(|a| a.starts_with("--remote-debugging-port")));
        assert!(!plain.iter().any(|a| a.starts_with("--remote-debugging-address")));
        assert!(plain.contains(&"--user-data-dir=/state/browsers/a-1".to_owned()));
        // No blanket certificate bypass, ever; no routing unless asked.
        assert!(!plain.iter().any(|a| a.starts_with("--ignore-certificate-errors")));
        assert!(!plain.iter().any(|a| a.starts_with("--host-resolver-rules")));
        // Every flag is written once with its own dashes (no `----x=y`).
        assert!(plain.iter().all(|a| !a.starts_with("---")));
        // No first tab: no URL to open, and no window at start.
        assert!(plain.iter().all(|a| a.starts_with("--")), "{plain:?}");
        assert!(plain.contains(&STARTUP_WITHOUT_WINDOW.to_owned()));

        let test = TestNetwork {
            map: [("shop.example".to_owned(), "127.0.0.1:8443".parse().unwrap())].into(),
            spki_pins: vec!["pin=".into()],
        };
        let routed = chromium_args(Path::new("/p"), "a", &test);
        assert!(routed.contains(&"--host-resolver-rules=MAP shop.example:443 127.0.0.1:8443".to_owned()));
        assert!(routed.contains(&"--ignore-certificate-errors-spki-list=pin=".to_owned()));
        assert!(!routed.contains(&"--ignore-certificate-errors".to_owned()));
    }
}
