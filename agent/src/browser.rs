//! The controlled browser: real Chromium, launched and owned by the agent, driven over CDP
//! (chromiumoxide). The first form of the AIP-63 Chromium provider.
//!
//! The agent spawns `/usr/lib/chromium/chromium` itself (not the `/usr/bin` wrapper) headless,
//! with a fresh user-data-dir under its 0700 state directory, `--remote-debugging-port=0` (the
//! DevTools port is loopback-only), and an orphan marker argument naming the instance. It reads
//! the DevTools address from Chromium's stderr within a deadline, connects chromiumoxide with
//! certificate errors *respected*, and owns the process until `stop`: graceful `Browser.close`,
//! then a kill after a grace period, then the user-data-dir removed.
//!
//! Tests reach companies on 127.0.0.1 without weakening TLS for anything else: a
//! `--host-resolver-rules` map for the test names, and `--ignore-certificate-errors-spki-list`
//! pinning the test leaf's key. Both are passed in explicitly ([`TestNetwork`]), never implied.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::browser::Browser;
use chromiumoxide::handler::HandlerConfig;
use futures_util::StreamExt as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::provider::lifecycle::{InstanceState, OperatorReset};
use crate::provider::processes::{ProcTable, SweepScope, end_processes, sweep};
use crate::provider::supervisor::{Health, Policy, Record as SupervisorRecord, Supervisor};
use crate::state::private_dir;

/// The directory under the state directory that the agent's browsers get as their
/// `CHROME_CONFIG_HOME` (where Chromium's crash handler keeps its database).
pub const CHROMIUM_HOME: &str = "chromium-home";

/// Where Debian's Chromium binary is (the `/usr/bin/chromium` wrapper adds its own flags).
pub const CHROMIUM: &str = "/usr/lib/chromium/chromium";

/// The argument that marks a process as one of this agent's browsers, for the orphan sweep.
pub const ORPHAN_MARKER: &str = "--pap-agent-browser";

/// The argument naming the host process that launched a browser: a sweep at start ends only
/// browsers whose host is gone, never those of another agent process running now.
pub const HOST_MARKER: &str = "--pap-agent-host";

/// Test-only routing: names mapped to loopback addresses, and the SPKI hashes of test leaves.
#[derive(Clone, Debug, Default)]
pub struct TestNetwork {
    /// `MAP name:443 addr` rules.
    pub map: HashMap<String, SocketAddr>,
    /// Base64 SHA-256 of each accepted test leaf's SubjectPublicKeyInfo.
    pub spki_pins: Vec<String>,
}

/// How to launch Chromium.
#[derive(Clone, Debug)]
pub struct ChromiumConfig {
    /// The Chromium binary.
    pub executable: PathBuf,
    /// The agent's state directory; profiles go under `browsers/`.
    pub state_dir: PathBuf,
    /// A backstop for the DevTools address to show. Under a [`BrowserHost`] the supervisor's
    /// budget decides first (L9): a quiet launch fails at `budgetMs`, a progressing one may run
    /// to `hardCeilingMs`, which is this default.
    pub launch_timeout: Duration,
    /// How long `stop` waits after `Browser.close` before killing.
    pub grace: Duration,
    /// How long the health probe may take (`health.timeoutMs`, L4): a browser that does not
    /// answer within it is not healthy, and no caller hangs on it.
    pub health_timeout: Duration,
    /// Test-only routing.
    pub test_network: TestNetwork,
    /// Attach to the Chromium whose DevTools listen here (loopback only) instead of launching
    /// one: an instance the host did not start (AIP-63 L2 `wasAlreadyRunning`), which `stop`
    /// leaves running unless forced (L5). It must run on its own, non-default user-data
    /// directory (L13), which is read from its command line.
    pub attach_to: Option<SocketAddr>,
}

impl ChromiumConfig {
    /// The defaults for a state directory: Debian's Chromium, the hard ceiling (360 s) as the
    /// launch backstop, 2 s of grace, 5 s for the health probe.
    pub fn new(state_dir: PathBuf) -> Self {
        Self {
            executable: PathBuf::from(CHROMIUM),
            state_dir,
            launch_timeout: Duration::from_millis(Policy::default().hard_ceiling),
            grace: Duration::from_secs(2),
            health_timeout: Duration::from_secs(5),
            test_network: TestNetwork::default(),
            attach_to: None,
        }
    }
}

/// One running Chromium, owned by the agent.
pub struct ControlledBrowser {
    instance: String,
    pid: Option<u32>,
    /// The process, when this host started it; `None` for an attached instance.
    child: Mutex<Option<Child>>,
    /// The host did not start it (an attach): stop leaves it running unless forced (L5).
    was_already_running: bool,
    browser: Browser,
    handler: JoinHandle<()>,
    user_data_dir: PathBuf,
    health_timeout: Duration,
}

impl fmt::Debug for ControlledBrowser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlledBrowser")
            .field("instance", &self.instance)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// The launch step that says the DevTools port is bound: from then on the live process with its
/// bound port is a progress signal (L9).
const STEP_DEVTOOLS_BOUND: &str = "connecting over CDP";

/// The supervisor's records under `browsers/`, for a persistent host.
const SUPERVISOR_RECORDS: &str = "supervisor.json";

/// How often a running launch reports to the supervisor.
const LAUNCH_TICK: Duration = Duration::from_millis(250);

/// The state of a browser seen only from outside (a status surface in another process, L1):
/// `starting` until Chromium has written the DevTools port into its profile, `healthy` when
/// `/json/version` answers within `timeout` (like `Browser.getVersion`, it opens no target;
/// HTTP/1.1, as Chromium closes an HTTP/1.0 request unanswered), `degraded` when it does not.
pub async fn probe_profile(user_data_dir: &Path, timeout: Duration) -> InstanceState {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let port = std::fs::read_to_string(user_data_dir.join("DevToolsActivePort"))
        .ok()
        .and_then(|text| text.lines().next().and_then(|line| line.trim().parse::<u16>().ok()));
    let Some(port) = port else {
        return InstanceState::Starting;
    };
    let answered = tokio::time::timeout(timeout, async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /json/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut status = [0_u8; 12];
        stream.read_exact(&mut status).await?;
        Ok::<_, std::io::Error>(status.ends_with(b" 200"))
    })
    .await;
    match answered {
        Ok(Ok(true)) => InstanceState::Healthy,
        _ => InstanceState::Degraded,
    }
}

/// The profile directory of `instance` in this agent process: unique per host process, so a
/// previous run's is never reused (L13) and a sweep can find its children by it.
fn profile_dir(config: &ChromiumConfig, instance: &str) -> PathBuf {
    config
        .state_dir
        .join("browsers")
        .join(format!("{instance}-{}", std::process::id()))
}

impl ControlledBrowser {
    /// Launches Chromium for `instance` with a fresh profile. `progress` is told each step.
    pub async fn launch(
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Self, LaunchError> {
        if !instance
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || instance.is_empty()
        {
            return Err(LaunchError::BadInstance);
        }
        if let Some(endpoint) = config.attach_to {
            return Self::attach(config, instance, endpoint, progress).await;
        }
        private_dir(&config.state_dir.join("browsers")).map_err(LaunchError::Profile)?;
        let user_data_dir = profile_dir(config, instance);
        if user_data_dir.exists() {
            std::fs::remove_dir_all(&user_data_dir).map_err(LaunchError::Profile)?;
        }
        private_dir(&user_data_dir).map_err(LaunchError::Profile)?;
        let chromium_home = private_dir(&config.state_dir.join(CHROMIUM_HOME)).map_err(LaunchError::Profile)?;
        progress("starting Chromium");
        let mut command = Command::new(&config.executable);
        command
            .args(chromium_args(&user_data_dir, instance, &config.test_network))
            // Chromium's crash handler keeps its database (minidumps: browser memory, cookies
            // included) under the config home, by default the user's own `~/.config/chromium`;
            // no switch turns the handler off. The agent's browsers keep theirs in the state
            // directory, 0700, outside `browsers/` so no profile sweep removes it under a
            // running handler.
            .env("CHROME_CONFIG_HOME", &chromium_home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&user_data_dir);
                return Err(LaunchError::Spawn(error));
            }
        };
        match Self::connect(&mut child, config, progress).await {
            Ok((browser, handler)) => {
                progress("Chromium is ready");
                Ok(Self {
                    instance: instance.to_owned(),
                    pid: child.id(),
                    child: Mutex::new(Some(child)),
                    was_already_running: false,
                    browser,
                    handler,
                    user_data_dir,
                    health_timeout: config.health_timeout,
                })
            }
            Err(error) => {
                // One place cleans up a failed launch: the process and its profile.
                let _ = child.kill().await;
                let _ = std::fs::remove_dir_all(&user_data_dir);
                Err(error)
            }
        }
    }

    async fn connect(
        child: &mut Child,
        config: &ChromiumConfig,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<(Browser, JoinHandle<()>), LaunchError> {
        let ws = devtools_address(child, config.launch_timeout).await?;
        progress(STEP_DEVTOOLS_BOUND);
        connect_cdp(ws).await
    }

    /// Attaches to a Chromium the host did not start (L2 `wasAlreadyRunning`): its DevTools
    /// address from `/json/version`, its browser process from `SystemInfo.getProcessInfo`, its
    /// user-data directory from that process's command line. A non-loopback endpoint, or a
    /// browser on a default profile (the user's own, L13 and C3), is refused.
    async fn attach(
        config: &ChromiumConfig,
        instance: &str,
        endpoint: SocketAddr,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Self, LaunchError> {
        if !endpoint.ip().is_loopback() {
            return Err(LaunchError::Attach(format!(
                "{endpoint} is not a loopback DevTools endpoint"
            )));
        }
        progress("asking the running Chromium for its DevTools address");
        let version = devtools_version(endpoint.port(), config.health_timeout)
            .await
            .ok_or_else(|| LaunchError::Attach(format!("no Chromium answers /json/version on {endpoint}")))?;
        let ws = version["webSocketDebuggerUrl"]
            .as_str()
            .ok_or_else(|| LaunchError::Attach("/json/version names no webSocketDebuggerUrl".into()))?
            .to_owned();
        progress(STEP_DEVTOOLS_BOUND);
        let (browser, handler) = connect_cdp(ws).await?;
        let refuse = |why: String| {
            handler.abort();
            Err(LaunchError::Attach(why))
        };
        let Some(pid) = browser_pid(&browser).await else {
            return refuse("the browser does not tell its process id".into());
        };
        let Some(user_data_dir) = user_data_dir_of(pid) else {
            return refuse(format!(
                "the browser (pid {pid}) runs on its default user-data directory: attach only to a \
                 dedicated Chromium started with --user-data-dir"
            ));
        };
        if is_default_profile(&user_data_dir) {
            return refuse(format!(
                "the browser (pid {pid}) runs on a default profile, {}",
                user_data_dir.display()
            ));
        }
        progress("attached to a running Chromium");
        Ok(Self {
            instance: instance.to_owned(),
            pid: Some(pid),
            child: Mutex::new(None),
            was_already_running: true,
            browser,
            handler,
            user_data_dir,
            health_timeout: config.health_timeout,
        })
    }

    /// Whether the host found this browser running rather than starting it (L2).
    pub fn was_already_running(&self) -> bool {
        self.was_already_running
    }

    /// The instance key.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The profile directory this instance runs on (fresh, under the state directory: L13).
    pub fn user_data_dir(&self) -> &Path {
        &self.user_data_dir
    }

    /// How many targets (tabs, workers) the browser has now.
    pub async fn target_count(&self) -> Result<usize, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::GetTargetsParams;
        let targets = self
            .browser
            .execute(GetTargetsParams::default())
            .await
            .map_err(|e| BrowserError::Cdp(e.to_string()))?;
        Ok(targets.result.target_infos.len())
    }

    /// The browser's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the browser answers over CDP (creates no target).
    pub async fn is_healthy(&self) -> bool {
        tokio::time::timeout(self.health_timeout, self.browser.version())
            .await
            .is_ok_and(|answer| answer.is_ok())
    }

    /// Lets pages download into `dir` (each file named by its download id), with progress events.
    pub async fn allow_downloads(&self, dir: &Path) -> Result<(), BrowserError> {
        use chromiumoxide::cdp::browser_protocol::browser::{SetDownloadBehaviorBehavior, SetDownloadBehaviorParams};
        let mut params = SetDownloadBehaviorParams::new(SetDownloadBehaviorBehavior::AllowAndName);
        params.download_path = Some(dir.display().to_string());
        params.events_enabled = Some(true);
        self.browser
            .execute(params)
            .await
            .map(|_| ())
            .map_err(|e| BrowserError::Cdp(e.to_string()))
    }

    /// The browser's download progress events.
    pub async fn download_events(
        &self,
    ) -> Result<
        chromiumoxide::listeners::EventStream<chromiumoxide::cdp::browser_protocol::browser::EventDownloadProgress>,
        BrowserError,
    > {
        self.browser
            .event_listener()
            .await
            .map_err(|e| BrowserError::Cdp(e.to_string()))
    }

    /// Puts a grant's cookies into this browser (C1): the only way session material enters it.
    pub async fn inject(&self, injection: &crate::consent::Injection) -> Result<usize, BrowserError> {
        crate::live::inject(&self.browser, injection)
            .await
            .map_err(BrowserError::Cdp)
    }

    /// The cookies the browser holds, as (name, domain): never their values.
    pub async fn cookie_names(&self) -> Result<Vec<(String, String)>, BrowserError> {
        let cookies = self
            .browser
            .get_cookies()
            .await
            .map_err(|e| BrowserError::Cdp(e.to_string()))?;
        Ok(cookies.into_iter().map(|c| (c.name, c.domain)).collect())
    }

    /// The keys of `origin`'s local storage (`https://host[:port]`): never their values. Read in a
    /// blank document of the origin that the browser answers itself, closed again.
    pub async fn local_storage_keys(&self, origin: &str) -> Result<Vec<String>, BrowserError> {
        crate::live::local_storage_keys(&self.browser, origin)
            .await
            .map_err(BrowserError::Cdp)
    }

    /// The URLs of the browser's tabs.
    pub async fn tab_urls(&self) -> Result<Vec<String>, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::GetTargetsParams;
        let targets = self
            .browser
            .execute(GetTargetsParams::default())
            .await
            .map_err(|e| BrowserError::Cdp(e.to_string()))?;
        Ok(targets
            .result
            .target_infos
            .into_iter()
            .filter(|t| t.r#type == "page")
            .map(|t| t.url)
            .collect())
    }

    pub(crate) fn cdp(&self) -> &Browser {
        &self.browser
    }

    /// A new tab, on `about:blank`.
    pub async fn new_page(&self) -> Result<Page, BrowserError> {
        self.browser
            .new_page("about:blank")
            .await
            .map_err(|e| BrowserError::Cdp(e.to_string()))
    }

    /// Stops the browser: `Browser.close`, up to `grace` for the process to exit, then a kill,
    /// then its children swept and the profile removed. Safe to call twice, or on a browser that already died; pages
    /// still held elsewhere stop working.
    pub async fn stop(&self, grace: Duration) -> Result<(), BrowserError> {
        self.stop_with(grace, false).await
    }

    /// Stops the browser; an attached one (which the host did not start) is only disconnected
    /// unless `force` (L5), and then closed, and killed after `grace`; its profile is never
    /// removed.
    pub(crate) async fn stop_with(&self, grace: Duration, force: bool) -> Result<(), BrowserError> {
        use chromiumoxide::cdp::browser_protocol::browser::CloseParams;
        let mut child = self.child.lock().await;
        match child.as_mut() {
            Some(child) => {
                // Already ended (an operator's `pap-agent browser stop`, a crash): nothing to
                // close, and no grace to wait on a connection that is gone.
                if !matches!(child.try_wait(), Ok(Some(_))) {
                    let _ = tokio::time::timeout(grace, self.browser.execute(CloseParams::default())).await;
                    if tokio::time::timeout(grace, child.wait()).await.is_err() {
                        let _ = child.kill().await;
                    }
                }
            }
            None if !force => {}
            None => {
                let _ = tokio::time::timeout(grace, self.browser.execute(CloseParams::default())).await;
                if let Some(pid) = self.pid {
                    let _ = crate::provider::processes::wait_gone(&ProcTable, &[pid], grace).await;
                }
            }
        }
        self.handler.abort();
        // The main process has ended; its children (network service, zygotes, renderers) may
        // not have yet, and one writing into the profile would make the removal fail. The sweep
        // ends what is left of this instance (found by marker or profile), then removes the
        // profile. An attached browser carries no marker of ours: its processes are ended only
        // when the operator forced its end, and its profile, which the host did not create, stays.
        let scope = SweepScope::Instance {
            instance: self.instance.clone(),
            user_data_dir: self.user_data_dir.clone(),
        };
        let ended = match (self.was_already_running, force) {
            (true, false) => return Ok(()),
            (true, true) => end_processes(&ProcTable, &scope, grace).await,
            (false, _) => sweep(&ProcTable, &scope, grace).await,
        };
        ended.map(|_| ()).map_err(BrowserError::Profile)
    }
}

/// The DevTools address Chromium prints on stderr once its port is bound, within `timeout`;
/// then stderr keeps being drained (its lines dropped) so Chromium never blocks on a full pipe.
async fn devtools_address(child: &mut Child, timeout: Duration) -> Result<String, LaunchError> {
    let stderr = child.stderr.take().ok_or(LaunchError::NoDevTools(String::new()))?;
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(timeout, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(ws) = line.strip_prefix("DevTools listening on ") {
                return Some(ws.trim().to_owned());
            }
            if seen.len() < 20 {
                seen.push(line);
            }
        }
        None
    })
    .await;
    let ws = match found {
        Ok(Some(ws)) => ws,
        Ok(None) => return Err(LaunchError::NoDevTools(seen.join("\n"))),
        Err(_) => return Err(LaunchError::Timeout(seen.join("\n"))),
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(ws)
}

/// A Chromium run on its own, outside any [`BrowserHost`]: what an operator starts for the
/// attach provider (a dedicated, headless Chromium on its own user-data directory, DevTools on
/// loopback), and what the attach tests and the AIP-63 suite start as the instance "the host
/// did not launch". It carries none of the host's markers, so no sweep of the host ends it.
#[derive(Debug)]
pub struct StandaloneChromium {
    child: Child,
    endpoint: SocketAddr,
}

impl StandaloneChromium {
    /// Starts `executable` on `user_data_dir` with DevTools on `127.0.0.1:port` (0: any free
    /// port) and `extra_args`, and waits up to `timeout` for its DevTools address (the line
    /// Chromium prints once the port is bound).
    pub async fn start(
        executable: &Path,
        user_data_dir: &Path,
        port: u16,
        extra_args: &[&str],
        timeout: Duration,
    ) -> Result<Self, LaunchError> {
        private_dir(user_data_dir).map_err(LaunchError::Profile)?;
        let mut child = Command::new(executable)
            .args(HEADLESS_ARGS)
            .args(extra_args)
            .arg(format!("--remote-debugging-port={port}"))
            .arg(format!("--user-data-dir={}", user_data_dir.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(LaunchError::Spawn)?;
        let ws = devtools_address(&mut child, timeout).await?;
        let endpoint = url::Url::parse(&ws)
            .ok()
            .and_then(|u| u.port())
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .ok_or_else(|| LaunchError::NoDevTools(format!("an unexpected DevTools address {ws}")))?;
        Ok(Self { child, endpoint })
    }

    /// Its DevTools endpoint, for [`ChromiumConfig::attach_to`].
    pub fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `timeout` for it to exit; whether it did.
    pub async fn exited_within(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.child.wait()).await.is_ok()
    }

    /// Ends it (SIGKILL) and waits for it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Connects over CDP with certificate errors respected, and drives the connection.
async fn connect_cdp(ws: String) -> Result<(Browser, JoinHandle<()>), LaunchError> {
    let handler_config = HandlerConfig {
        ignore_https_errors: false,
        ..HandlerConfig::default()
    };
    let (browser, mut handler) = Browser::connect_with_config(ws, handler_config)
        .await
        .map_err(|e| LaunchError::Cdp(e.to_string()))?;
    let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
    Ok((browser, handler))
}

/// `/json/version` on a loopback DevTools port (HTTP/1.1; Chromium closes an HTTP/1.0 request
/// unanswered, and keeps an HTTP/1.1 one open: the body is read to its Content-Length), within
/// `timeout`.
async fn devtools_version(port: u16, timeout: Duration) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let response = tokio::time::timeout(timeout, async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        // Chromium builds webSocketDebuggerUrl from the Host header: it carries the port.
        let request = format!("GET /json/version HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = stream.read(&mut chunk).await.ok()?;
            response.extend_from_slice(&chunk[..read]);
            if let Some(complete) = http_body(&response) {
                return complete;
            }
            if read == 0 || response.len() > 64 * 1024 {
                return None;
            }
        }
    })
    .await
    .ok()??;
    serde_json::from_slice(&response).ok()
}

/// The body of a complete `200` response in `bytes`: `None` while incomplete, `Some(None)` for
/// anything else.
fn http_body(bytes: &[u8]) -> Option<Option<Vec<u8>>> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    if !head.starts_with("HTTP/1.1 200") {
        return Some(None);
    }
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    })?;
    let body = &bytes[end + 4..];
    (body.len() >= length).then(|| Some(body[..length].to_vec()))
}

/// The browser process's id, from `SystemInfo.getProcessInfo`.
async fn browser_pid(browser: &Browser) -> Option<u32> {
    use chromiumoxide::cdp::browser_protocol::system_info::GetProcessInfoParams;
    let info = browser.execute(GetProcessInfoParams::default()).await.ok()?;
    info.result
        .process_info
        .iter()
        .find(|p| p.r#type == "browser")
        .and_then(|p| u32::try_from(p.id).ok())
}

/// The `--user-data-dir` on process `pid`'s command line (Linux `/proc`).
fn user_data_dir_of(pid: u32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmdline
        .split(|b| *b == 0)
        .filter_map(|arg| std::str::from_utf8(arg).ok())
        .find_map(|arg| arg.strip_prefix("--user-data-dir="))
        .map(PathBuf::from)
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
/// background traffic, DevTools on loopback only. `--no-sandbox`: root in a container has no
/// user namespace for the sandbox; the profile is the agent's own and the only pages are the
/// companies it joins.
const HEADLESS_ARGS: [&str; 10] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--remote-debugging-address=127.0.0.1",
];

pub(crate) fn chromium_args(user_data_dir: &Path, instance: &str, test: &TestNetwork) -> Vec<String> {
    let mut args: Vec<String> = HEADLESS_ARGS.iter().map(|a| (*a).to_owned()).collect();
    args.extend([
        "--remote-debugging-port=0".to_owned(),
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
    args.push("about:blank".to_owned());
    args
}

/// The agent's browsers by instance key, under the AIP-63 supervisor: launching is idempotent
/// per key (L2: a second launch returns the running browser, no second process, no config
/// change); consecutive failed launches end in `crash-looping` and no further spawn (L6) until
/// an operator resets it (L7); stop sweeps the instance's marked processes (L5).
#[derive(Clone)]
pub struct BrowserHost {
    browsers: Arc<Mutex<HashMap<String, Arc<ControlledBrowser>>>>,
    supervisor: Arc<std::sync::Mutex<Supervisor>>,
    /// Where the supervisor's records outlive this process, for a persistent host.
    records: Option<PathBuf>,
    /// The clock: the wall clock read once when the host was made, plus monotonic time since.
    clock: HostClock,
}

/// Milliseconds that never jump inside one run (a launch's budget is measured on them, L9) and
/// compare across runs (failure times in the records, L6): the wall clock at the start plus a
/// monotonic clock since.
#[derive(Clone, Copy, Debug)]
struct HostClock {
    wall_at_start: u64,
    start: tokio::time::Instant,
}

impl HostClock {
    fn start() -> Self {
        let wall_at_start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            wall_at_start,
            start: tokio::time::Instant::now(),
        }
    }

    fn now(self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.wall_at_start.saturating_add(elapsed)
    }
}

impl Default for BrowserHost {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for BrowserHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrowserHost").finish_non_exhaustive()
    }
}

impl BrowserHost {
    /// A host with AIP-63's default supervision policy.
    pub fn new() -> Self {
        Self::with_policy(Policy::default())
    }

    /// A host with `policy`.
    pub fn with_policy(policy: Policy) -> Self {
        Self {
            browsers: Arc::default(),
            supervisor: Arc::new(std::sync::Mutex::new(Supervisor::new(policy))),
            records: None,
            clock: HostClock::start(),
        }
    }

    /// A host whose failed launches and crash-looping outlive this process (L6, L7): it reads
    /// `browsers/supervisor.json` under `state_dir` now and rewrites it (0600) after every launch
    /// outcome, stop and reset. A file that does not parse is an error, and changes nothing.
    pub fn persistent(state_dir: &Path, policy: Policy) -> std::io::Result<Self> {
        let path = private_dir(&state_dir.join("browsers"))?.join(SUPERVISOR_RECORDS);
        let mut supervisor = Supervisor::new(policy);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let records: HashMap<String, SupervisorRecord> = serde_json::from_slice(&bytes).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
                })?;
                for (key, record) in records {
                    supervisor.restore(&key, record);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Self {
            browsers: Arc::default(),
            supervisor: Arc::new(std::sync::Mutex::new(supervisor)),
            records: Some(path),
            clock: HostClock::start(),
        })
    }

    /// Writes the supervisor's records, if this host keeps them: to a temporary file, then
    /// renamed over the old one, so a crash leaves the old records or the new, never half.
    fn save(&self) -> Result<(), BrowserError> {
        let Some(path) = &self.records else { return Ok(()) };
        let records = self.supervisor().records();
        let json = serde_json::to_vec_pretty(&records).map_err(|e| BrowserError::Profile(e.into()))?;
        let temp = path.with_extension("json.tmp");
        {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)
                .map_err(BrowserError::Profile)?;
            file.write_all(&json).map_err(BrowserError::Profile)?;
            file.sync_all().map_err(BrowserError::Profile)?;
        }
        std::fs::rename(&temp, path).map_err(BrowserError::Profile)
    }

    /// Sweeps what a previous run of this host left under `state_dir` (L8): call once at start,
    /// before the first launch. Returns how many processes it ended.
    pub async fn sweep_previous_run(&self, state_dir: &Path, grace: Duration) -> std::io::Result<usize> {
        sweep(
            &ProcTable,
            &SweepScope::PreviousRun {
                state_dir: state_dir.to_path_buf(),
            },
            grace,
        )
        .await
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    fn supervisor(&self) -> std::sync::MutexGuard<'_, Supervisor> {
        // Every critical section is one supervisor call that leaves it consistent.
        self.supervisor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The browser for `instance`, launched if it is not running.
    pub async fn launch(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Arc<ControlledBrowser>, LaunchError> {
        let mut browsers = self.browsers.lock().await;
        if let Some(running) = browsers.get(instance) {
            if running.is_healthy().await {
                return Ok(running.clone());
            }
            // It died under us: the supervisor learns it before anything relaunches.
            self.supervisor().probe_failed(instance);
            self.supervisor().stop(instance);
            self.supervisor().gone(instance);
            browsers.remove(instance);
        }
        let now = self.now();
        self.supervisor().launch(instance, now).map_err(LaunchError::Refused)?;
        self.spawn(config, instance, progress, &mut browsers).await
    }

    /// Spawns the browser the supervisor just agreed to start, and tells it how that went.
    async fn spawn(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
        browsers: &mut HashMap<String, Arc<ControlledBrowser>>,
    ) -> Result<Arc<ControlledBrowser>, LaunchError> {
        let outcome = self.supervised_spawn(config, instance, progress, browsers).await;
        self.keep_records();
        outcome
    }

    /// Saves the records of a persistent host; a failure to save is logged, not the launch's.
    fn keep_records(&self) {
        if let Err(error) = self.save() {
            tracing::warn!(%error, "the supervisor's records were not saved");
        }
    }

    async fn supervised_spawn(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
        browsers: &mut HashMap<String, Arc<ControlledBrowser>>,
    ) -> Result<Arc<ControlledBrowser>, LaunchError> {
        // L9: the supervisor watches the launch while it runs. Each step is a progress signal,
        // and once the DevTools port is bound the live process with its port is one at every
        // tick; the supervisor alone decides when a quiet launch has failed (and counts it).
        let bound = std::sync::atomic::AtomicBool::new(false);
        let signal = |step: &str| {
            if step == STEP_DEVTOOLS_BOUND {
                bound.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            self.supervisor().progress(instance, self.now());
            progress(step);
        };
        let outcome = {
            let launch = ControlledBrowser::launch(config, instance, &signal);
            tokio::pin!(launch);
            let mut ticks = tokio::time::interval(LAUNCH_TICK);
            loop {
                tokio::select! {
                    result = &mut launch => break Ok(result),
                    _ = ticks.tick() => {
                        let now = self.now();
                        if bound.load(std::sync::atomic::Ordering::Relaxed) {
                            self.supervisor().progress(instance, now);
                        }
                        if let Some(stalled) = self.supervisor().tick(instance, now) {
                            break Err(stalled);
                        }
                    }
                }
            }
            // Dropping the launch here kills its process (kill_on_drop).
        };
        let launched = match outcome {
            Ok(launched) => launched,
            Err(stalled) => {
                let scope = SweepScope::Instance {
                    instance: instance.to_owned(),
                    user_data_dir: profile_dir(config, instance),
                };
                let _ = sweep(&ProcTable, &scope, config.grace).await;
                return Err(LaunchError::Stalled(stalled.reason));
            }
        };
        match launched {
            Ok(launched) => {
                self.supervisor().probe_succeeded(instance);
                let launched = Arc::new(launched);
                browsers.insert(instance.to_owned(), launched.clone());
                Ok(launched)
            }
            Err(error) => {
                self.supervisor()
                    .launch_failed(instance, self.now(), &error.to_string());
                Err(error)
            }
        }
    }

    /// The instances with something on record (failed launches, crash-looping) and their health.
    pub fn recorded(&self) -> Vec<(String, Health)> {
        let supervisor = self.supervisor();
        let mut out: Vec<(String, Health)> = supervisor
            .records()
            .into_keys()
            .map(|key| {
                let health = supervisor.health(&key);
                (key, health)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// What `health()` reports for `instance` (L1).
    pub fn health(&self, instance: &str) -> Health {
        self.supervisor().health(instance)
    }

    /// An operator's reset of a crash-looping instance (L7): launches it afresh.
    pub async fn reset(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        reset: OperatorReset,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Arc<ControlledBrowser>, LaunchError> {
        let mut browsers = self.browsers.lock().await;
        let now = self.now();
        self.supervisor()
            .reset(instance, now, reset)
            .map_err(LaunchError::Refused)?;
        self.spawn(config, instance, progress, &mut browsers).await
    }

    /// Every running browser of this host.
    pub(crate) async fn running(&self) -> Vec<Arc<ControlledBrowser>> {
        self.browsers.lock().await.values().cloned().collect()
    }

    /// The running browser for `instance`, without launching one: `None` when there is none or
    /// it no longer answers.
    pub async fn attach(&self, instance: &str) -> Option<Arc<ControlledBrowser>> {
        let running = self.browsers.lock().await.get(instance).cloned()?;
        // Every probe tells the supervisor, so health() shows a browser that stopped answering
        // as degraded, and one that answers again as healthy (L1, L4).
        if running.is_healthy().await {
            self.supervisor().probe_succeeded(instance);
            Some(running)
        } else {
            self.supervisor().probe_failed(instance);
            None
        }
    }

    /// Stops `instance`, if running: graceful, then forced, then a sweep of its marked
    /// processes and profile (L5). Idempotent.
    pub async fn stop(&self, instance: &str, grace: Duration) -> Result<(), BrowserError> {
        self.stop_with(instance, grace, false).await
    }

    /// `stop` with `force: true` (L5): the only stop that ends an attached browser, one the
    /// host did not start; for the host's own browsers it is the same as [`Self::stop`].
    pub async fn stop_forced(&self, instance: &str, grace: Duration) -> Result<(), BrowserError> {
        self.stop_with(instance, grace, true).await
    }

    async fn stop_with(&self, instance: &str, grace: Duration, force: bool) -> Result<(), BrowserError> {
        let browser = self.browsers.lock().await.remove(instance);
        let Some(browser) = browser else { return Ok(()) };
        self.supervisor().stop(instance);
        let stopped = browser.stop_with(grace, force).await;
        self.supervisor().gone(instance);
        self.keep_records();
        stopped
    }
}

/// Why a browser could not be launched. Carries what Chromium printed, never page content.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The supervisor refused: crash-looping (L6), or stopping.
    #[error("the supervisor refused the launch: {}", .0.message)]
    Refused(pap_shared::ToolError),
    /// The instance key is not `[A-Za-z0-9_-]+`.
    #[error("the instance key must be letters, digits, '-' or '_'")]
    BadInstance,
    /// Connecting over CDP failed.
    #[error("connecting to Chromium over CDP failed: {0}")]
    Cdp(String),
    /// Chromium exited without a DevTools address; what it printed follows.
    #[error("Chromium exited before it was ready:\n{0}")]
    NoDevTools(String),
    /// The profile directory could not be made.
    #[error("the browser profile could not be created")]
    Profile(#[source] std::io::Error),
    /// The binary could not be started.
    #[error("Chromium could not be started")]
    Spawn(#[source] std::io::Error),
    /// The supervisor ended a launch that used its budget with no progress, or reached its
    /// hard ceiling (L9); it counted as a failed launch (L6).
    #[error("the launch stalled: {0}")]
    Stalled(String),
    /// The running Chromium could not be attached to (not on loopback, not answering, on a
    /// default profile).
    #[error("attaching to the running Chromium failed: {0}")]
    Attach(String),
    /// No DevTools address within the launch timeout; what it printed follows.
    #[error("Chromium was not ready in time:\n{0}")]
    Timeout(String),
}

/// Why a browser operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// A CDP call failed.
    #[error("a CDP call failed: {0}")]
    Cdp(String),
    /// The profile could not be removed.
    #[error("the browser profile could not be removed")]
    Profile(#[source] std::io::Error),
}

/// The base64 SHA-256 of a PEM certificate's SubjectPublicKeyInfo, for
/// `--ignore-certificate-errors-spki-list`.
pub fn spki_pin(cert_pem: &[u8]) -> Result<String, BrowserError> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let bad = || BrowserError::Cdp("no readable certificate in the PEM".into());
    let der = rustls_pemfile::certs(&mut &cert_pem[..])
        .next()
        .and_then(Result::ok)
        .ok_or_else(bad)?;
    let cert = webpki::EndEntityCert::try_from(&der).map_err(|_| bad())?;
    let spki = cert.subject_public_key_info();
    Ok(base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(spki.as_ref())))
}

/// Clicks the element at `selector` on `page` and waits, within `deadline`, for the document it
/// leads to (after any redirects) to load. Returns that document's HTTP status.
pub async fn click_and_land(page: &Page, selector: &str, deadline: Duration) -> Result<u16, BrowserError> {
    use chromiumoxide::cdp::browser_protocol::network::{EventResponseReceived, ResourceType};
    let cdp = |e: chromiumoxide::error::CdpError| BrowserError::Cdp(e.to_string());
    let mut responses = page.event_listener::<EventResponseReceived>().await.map_err(cdp)?;
    page.find_element(selector)
        .await
        .map_err(cdp)?
        .click()
        .await
        .map_err(cdp)?;
    let status = tokio::time::timeout(deadline, async {
        while let Some(event) = responses.next().await {
            let status = u16::try_from(event.response.status).unwrap_or(0);
            if event.r#type == ResourceType::Document && !(300..400).contains(&status) {
                return Some(status);
            }
        }
        None
    })
    .await
    .map_err(|_| BrowserError::Cdp("no page loaded in time".into()))?
    .ok_or_else(|| BrowserError::Cdp("the page closed".into()))?;
    tokio::time::timeout(deadline, page.wait_for_navigation())
        .await
        .map_err(|_| BrowserError::Cdp("the page did not finish loading in time".into()))?
        .map_err(cdp)?;
    Ok(status)
}

/// Test only: the base64 SPKI pin of the leaf that `name` serves at `addr`, after checking that
/// it chains to `roots` (so only a certificate the test CA issued is ever pinned).
pub async fn pin_served_leaf(
    name: &str,
    addr: SocketAddr,
    roots: rustls::RootCertStore,
) -> Result<String, BrowserError> {
    let fail = |what: &str| BrowserError::Cdp(format!("pinning the test leaf: {what}"));
    let tls = crate::interop::tls_client_config(roots).map_err(|_| fail("TLS"))?;
    let server = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|_| fail("the name"))?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|_| fail("connecting"))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(server, tcp)
        .await
        .map_err(|_| fail("the handshake (is the CA right?)"))?;
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| fail("no certificate"))?;
    use base64::Engine as _;
    use sha2::Digest as _;
    let cert = webpki::EndEntityCert::try_from(leaf).map_err(|_| fail("the certificate"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(cert.subject_public_key_info().as_ref())))
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
    fn arguments_carry_the_marker_loopback_devtools_and_only_the_given_test_routing() {
        let plain = chromium_args(Path::new("/state/browsers/a-1"), "a", &TestNetwork::default());
        assert!(plain.contains(&"--pap-agent-browser=a".to_owned()));
        assert!(plain.contains(&"--remote-debugging-port=0".to_owned()));
        assert!(plain.contains(&"--remote-debugging-address=127.0.0.1".to_owned()));
        assert!(plain.contains(&"--user-data-dir=/state/browsers/a-1".to_owned()));
        // No blanket certificate bypass, ever; no routing unless asked.
        assert!(!plain.iter().any(|a| a.starts_with("--ignore-certificate-errors")));
        assert!(!plain.iter().any(|a| a.starts_with("--host-resolver-rules")));
        // Every flag is written once with its own dashes (no `----x=y`).
        assert!(plain.iter().all(|a| !a.starts_with("---")));

        let test = TestNetwork {
            map: [("shop.example".to_owned(), "127.0.0.1:8443".parse().unwrap())].into(),
            spki_pins: vec!["pin=".into()],
        };
        let routed = chromium_args(Path::new("/p"), "a", &test);
        assert!(routed.contains(&"--host-resolver-rules=MAP shop.example:443 127.0.0.1:8443".to_owned()));
        assert!(routed.contains(&"--ignore-certificate-errors-spki-list=pin=".to_owned()));
        assert!(!routed.contains(&"--ignore-certificate-errors".to_owned()));
    }

    #[test]
    fn spki_pin_hashes_the_leaf_key() {
        let dir = std::env::temp_dir().join(format!("pap-agent-pin-{}", std::process::id()));
        let certs = pap_company::write_dev_certs(&dir, &["shop.example".into()]).unwrap();
        let pin = spki_pin(&std::fs::read(&certs.cert).unwrap()).unwrap();
        // Base64 of a SHA-256: 44 characters with one '='.
        assert_eq!(pin.len(), 44);
        assert!(pin.ends_with('='));
        assert!(spki_pin(b"not a certificate").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_missing_binary_fails_the_launch_and_leaves_no_profile() {
        let state = std::env::temp_dir().join(format!("pap-agent-launch-{}", std::process::id()));
        let mut config = ChromiumConfig::new(state.clone());
        config.executable = PathBuf::from("/nonexistent/chromium");
        let error = ControlledBrowser::launch(&config, "x", &|_| {}).await.unwrap_err();
        assert!(matches!(error, LaunchError::Spawn(_)), "{error}");
        assert_eq!(std::fs::read_dir(state.join("browsers")).unwrap().count(), 0);
        let bad = ControlledBrowser::launch(&config, "../x", &|_| {}).await.unwrap_err();
        assert!(matches!(bad, LaunchError::BadInstance));
        std::fs::remove_dir_all(&state).unwrap();
    }

    #[tokio::test]
    async fn a_process_that_never_prints_devtools_times_out_and_is_killed() {
        let state = std::env::temp_dir().join(format!("pap-agent-timeout-{}", std::process::id()));
        let mut config = ChromiumConfig::new(state.clone());
        // `sleep` rejects Chromium's flags and exits, printing why: never a DevTools line.
        config.executable = PathBuf::from("/bin/sleep");
        config.launch_timeout = Duration::from_secs(5);
        let error = ControlledBrowser::launch(&config, "y", &|_| {}).await.unwrap_err();
        assert!(
            matches!(error, LaunchError::NoDevTools(ref printed) if printed.contains("sleep")),
            "{error}"
        );
        assert_eq!(std::fs::read_dir(state.join("browsers")).unwrap().count(), 0);
        std::fs::remove_dir_all(&state).unwrap();
    }
}
