//! The controlled browser: real Chromium, launched and owned by the agent, driven over CDP
//! (chromiumoxide). The AIP-63 Chromium provider's instance.
//!
//! The agent spawns `/usr/lib/chromium/chromium` itself (not the `/usr/bin` wrapper) headless,
//! with a fresh user-data-dir under its 0700 state directory, DevTools on a pipe only it holds
//! (`--remote-debugging-pipe`: nothing listens, review M7; see `pipe`), and an orphan marker
//! argument naming the instance. It waits for the pipe to answer within a deadline, connects
//! chromiumoxide (through the in-process bridge) with certificate errors *respected*, serves the
//! browser's control socket for its other processes (`control`), and owns the process until
//! `stop`: graceful `Browser.close`, then a kill after a grace period, then the user-data-dir
//! removed. The browser also ends when the agent does: its pipe closes.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::browser::Browser;
use tokio::process::Child;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::args::{CHROMIUM_HOME, chromium_args, is_default_profile, profile_dir};
use super::config::ChromiumConfig;
use super::control::{self, ControlSocket};
use super::devtools::{browser_pid, connect_cdp, devtools_version, user_data_dir_of};
use super::error::{BrowserError, LaunchError};
use super::guard::RequestGuard;
use super::pipe;
use super::sandbox::BrowserUser;
use super::sweep::{ProcTable, SweepScope, end_processes, sweep, wait_gone};
use crate::spec::{InstanceEndpoints, InstanceKey, Stopped};
use crate::store::private_dir;
use pap_shared::SystemRng;

/// A browser context of a [`ControlledBrowser`] (`Target.createBrowserContext`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContextId(chromiumoxide::cdp::browser_protocol::browser::BrowserContextId);

/// One running Chromium, owned by the agent.
pub struct ControlledBrowser {
    instance: InstanceKey,
    pid: Option<u32>,
    /// Where its DevTools is: [`PIPE_ENDPOINT`], or an attached browser's websocket.
    devtools: String,
    /// The process, when this host started it; `None` for an attached instance.
    child: Mutex<Option<Child>>,
    /// The host did not start it (an attach): stop leaves it running unless forced (L5).
    was_already_running: bool,
    browser: Arc<Browser>,
    handler: JoinHandle<()>,
    /// Answers every request the browser sends by the navigation rule (H3); ends with it.
    _guard: RequestGuard,
    /// How the agent's other processes reach a launched browser (M7); none for an attached one,
    /// and none once stopped.
    control: std::sync::Mutex<Option<ControlSocket>>,
    /// Turns `true` when the DevTools pipe closed (the process exited, or was stopped); none
    /// for an attached browser, whose connection is the operator's.
    closed: Option<tokio::sync::watch::Receiver<bool>>,
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

/// What a launch connected: the CDP client and its driver, the request guard, the control
/// socket, and the pipe's closed signal.
type Connected = (
    Arc<Browser>,
    JoinHandle<()>,
    RequestGuard,
    ControlSocket,
    tokio::sync::watch::Receiver<bool>,
);

/// The launch step that says DevTools answers on its pipe: from then on the live process with
/// its answering DevTools is a progress signal (L9).
pub(super) const STEP_DEVTOOLS_BOUND: &str = "connecting over CDP";

/// `endpoints.cdp` of a launched instance: its DevTools is a pipe the provider holds (M7),
/// reached through the provider's tools (`browser.cdp_send`), not at an address.
pub const PIPE_ENDPOINT: &str = "pipe";

impl ControlledBrowser {
    /// Launches Chromium for `instance` with a fresh profile. `progress` is told each step.
    pub async fn launch(
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Self, LaunchError> {
        let instance = InstanceKey::try_from(instance).map_err(|_| LaunchError::BadInstance)?;
        let instance = &instance;
        if let Some(endpoint) = config.attach_to {
            return Self::attach(config, instance, endpoint, progress).await;
        }
        let browser_user = BrowserUser::for_state_dir(&config.state_dir, &config.browser_user)?;
        if let Some(user) = &browser_user {
            user.can_reach(&config.state_dir)?;
        }
        let browsers = private_dir(&config.state_dir.join("browsers")).map_err(LaunchError::Profile)?;
        let user_data_dir = profile_dir(config, instance.as_str());
        if user_data_dir.exists() {
            std::fs::remove_dir_all(&user_data_dir).map_err(LaunchError::Profile)?;
        }
        private_dir(&user_data_dir).map_err(LaunchError::Profile)?;
        let chromium_home = private_dir(&config.state_dir.join(CHROMIUM_HOME)).map_err(LaunchError::Profile)?;
        progress("starting Chromium");
        // The wrapper `pipe::command` runs would only say "not found" from inside the child.
        if let Err(error) = std::fs::metadata(&config.executable) {
            let _ = std::fs::remove_dir_all(&user_data_dir);
            return Err(LaunchError::Spawn {
                executable: config.executable.clone(),
                source: error,
            });
        }
        let mut command = pipe::command(
            &config.executable,
            &chromium_args(&user_data_dir, instance.as_str(), &config.test_network),
        );
        if let Some(user) = &browser_user {
            // Root: Chromium runs as its own unprivileged user, sandboxed (H4; see `sandbox`).
            let handed = user
                .pass_through(&config.state_dir)
                .and_then(|()| user.pass_through(&browsers))
                .and_then(|()| user.own(&user_data_dir))
                .and_then(|()| user.own_kept(&chromium_home));
            if let Err(error) = handed {
                let _ = std::fs::remove_dir_all(&user_data_dir);
                return Err(LaunchError::Profile(error));
            }
            command.uid(user.uid).gid(user.gid);
        }
        // The browser starts from a cleared environment (review N11): after a renderer escape,
        // the browser process holds none of the agent's variables (cloud credentials in CI,
        // tokens), only what a browser needs to run, and a home of its own.
        command.env_clear().env("HOME", &chromium_home);
        for (name, value) in std::env::vars_os() {
            if name.to_str().is_some_and(super::args::passed_to_browser) {
                command.env(name, value);
            }
        }
        command
            // Chromium's crash handler keeps its database (minidumps: browser memory, cookies
            // included) under the config home, by default the user's own `~/.config/chromium`;
            // no switch turns the handler off. The agent's browsers keep theirs in the state
            // directory, 0700, outside `browsers/` so no profile sweep removes it under a
            // running handler.
            .env("CHROME_CONFIG_HOME", &chromium_home)
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&user_data_dir);
                return Err(LaunchError::Spawn {
                    executable: config.executable.clone(),
                    source: error,
                });
            }
        };
        match Self::connect(&mut child, config, progress, &user_data_dir).await {
            Ok((browser, handler, guard, control, closed)) => {
                progress("Chromium is ready");
                Ok(Self {
                    instance: instance.clone(),
                    pid: child.id(),
                    devtools: PIPE_ENDPOINT.to_owned(),
                    child: Mutex::new(Some(child)),
                    was_already_running: false,
                    browser,
                    handler,
                    _guard: guard,
                    control: std::sync::Mutex::new(Some(control)),
                    closed: Some(closed),
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
        user_data_dir: &Path,
    ) -> Result<Connected, LaunchError> {
        let pipe = pipe::handshake(child, config.launch_timeout).await?;
        progress(STEP_DEVTOOLS_BOUND);
        let (ws, closed) = pipe::bridge(pipe, &SystemRng).await?;
        let (browser, handler) = connect_cdp(ws).await?;
        progress("installing the request guard");
        let browser = Arc::new(browser);
        let ready = async {
            let guard =
                RequestGuard::install(browser.clone(), config.navigation.clone(), config.persons.clone()).await?;
            progress("serving the control socket");
            let control = ControlSocket::serve(
                control::socket_path(user_data_dir),
                browser.clone(),
                config.health_timeout,
            )
            .map_err(LaunchError::Control)?;
            Ok((guard, control))
        };
        match ready.await {
            Ok((guard, control)) => Ok((browser, handler, guard, control, closed)),
            Err(error) => {
                handler.abort();
                Err(error)
            }
        }
    }

    /// Attaches to a Chromium the host did not start (L2 `wasAlreadyRunning`): its DevTools
    /// address from `/json/version`, its browser process from `SystemInfo.getProcessInfo`, its
    /// user-data directory from that process's command line. A non-loopback endpoint, or a
    /// browser on a default profile (the user's own, L13 and C3), is refused.
    async fn attach(
        config: &ChromiumConfig,
        instance: &InstanceKey,
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
        // The socket must be the endpoint's own: a local impostor answering /json/version must
        // not send the agent (and its grants) elsewhere (security review L6).
        if !on_endpoint(&ws, endpoint) {
            return Err(LaunchError::Attach(format!(
                "/json/version names a DevTools socket that is not on {endpoint}"
            )));
        }
        progress(STEP_DEVTOOLS_BOUND);
        let (browser, handler) = connect_cdp(ws.clone()).await?;
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
        // An operator's browser follows the rule too while the agent drives it: the tool caller
        // is the same restricted principal.
        let browser = Arc::new(browser);
        let guard =
            match RequestGuard::install(browser.clone(), config.navigation.clone(), config.persons.clone()).await {
                Ok(guard) => guard,
                Err(error) => {
                    handler.abort();
                    return Err(error);
                }
            };
        progress("attached to a running Chromium");
        Ok(Self {
            instance: instance.clone(),
            pid: Some(pid),
            devtools: ws,
            child: Mutex::new(None),
            was_already_running: true,
            browser,
            handler,
            _guard: guard,
            control: std::sync::Mutex::new(None),
            closed: None,
            user_data_dir,
            health_timeout: config.health_timeout,
        })
    }

    /// Whether the host found this browser running rather than starting it (L2): an attached
    /// browser, which takes no granted material.
    pub fn was_already_running(&self) -> bool {
        self.was_already_running
    }

    /// The instance key.
    pub fn instance(&self) -> &InstanceKey {
        &self.instance
    }

    /// Where it is reached (`endpoints.cdp`): [`PIPE_ENDPOINT`] for a launched browser (only the
    /// provider holds its DevTools), the DevTools websocket of an attached one.
    pub fn endpoints(&self) -> InstanceEndpoints {
        InstanceEndpoints {
            rest: None,
            cdp: Some(self.devtools.clone()),
        }
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
            .map_err(BrowserError::cdp)?;
        Ok(targets.result.target_infos.len())
    }

    /// Completes once the browser's DevTools pipe has closed: its process exited (a crash, the
    /// out-of-memory killer, a SIGKILL) or it was stopped. Never completes for an attached
    /// browser. What a host watches to notice a browser that died under it.
    pub async fn closed(&self) {
        match self.closed.clone() {
            Some(mut closed) => {
                // An error means the relay is gone: closed as well.
                let _ = closed.wait_for(|closed| *closed).await;
            }
            None => std::future::pending().await,
        }
    }

    /// The pipe's closed signal ([`Self::closed`]), for a watcher that must not hold the
    /// browser itself.
    pub(super) fn closed_signal(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.closed.clone()
    }

    /// How the browser's process ended, waiting at most `wait` for it to be reaped; `None`
    /// while it runs, for an attached browser, or when it was already reaped by a stop.
    pub async fn exit_status(&self, wait: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.lock().await;
        let child = child.as_mut()?;
        tokio::time::timeout(wait, child.wait()).await.ok()?.ok()
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

    /// Lets pages of `context` (the default one without) download into `dir` (each file named
    /// by its download id), with progress events. Chromium keeps this per context.
    pub async fn allow_downloads(&self, dir: &Path, context: Option<&ContextId>) -> Result<(), BrowserError> {
        use chromiumoxide::cdp::browser_protocol::browser::{SetDownloadBehaviorBehavior, SetDownloadBehaviorParams};
        let mut params = SetDownloadBehaviorParams::new(SetDownloadBehaviorBehavior::AllowAndName);
        params.download_path = Some(dir.display().to_string());
        params.events_enabled = Some(true);
        self.download_behavior(params, context).await
    }

    /// Sets `context` (the default one without) back to refusing downloads, as it was before a
    /// `browser.download` allowed them for its one download (review N18).
    pub async fn deny_downloads(&self, context: Option<&ContextId>) -> Result<(), BrowserError> {
        use chromiumoxide::cdp::browser_protocol::browser::{SetDownloadBehaviorBehavior, SetDownloadBehaviorParams};
        self.download_behavior(
            SetDownloadBehaviorParams::new(SetDownloadBehaviorBehavior::Deny),
            context,
        )
        .await
    }

    async fn download_behavior(
        &self,
        mut params: chromiumoxide::cdp::browser_protocol::browser::SetDownloadBehaviorParams,
        context: Option<&ContextId>,
    ) -> Result<(), BrowserError> {
        params.browser_context_id = context.map(|c| c.0.clone());
        self.browser
            .execute(params)
            .await
            .map(|_| ())
            .map_err(BrowserError::cdp)
    }

    /// Cancels the download `guid` in `context` (the default one without).
    pub async fn cancel_download(&self, guid: &str, context: Option<&ContextId>) -> Result<(), BrowserError> {
        use chromiumoxide::cdp::browser_protocol::browser::CancelDownloadParams;
        let params = CancelDownloadParams {
            guid: guid.to_owned(),
            browser_context_id: context.map(|c| c.0.clone()),
        };
        self.browser
            .execute(params)
            .await
            .map(|_| ())
            .map_err(BrowserError::cdp)
    }

    /// The downloads pages are about to begin (their frame and guid), browser-wide.
    pub async fn download_starts(
        &self,
    ) -> Result<
        chromiumoxide::listeners::EventStream<chromiumoxide::cdp::browser_protocol::browser::EventDownloadWillBegin>,
        BrowserError,
    > {
        self.browser.event_listener().await.map_err(BrowserError::cdp)
    }

    /// The browser's download progress events.
    pub async fn download_events(
        &self,
    ) -> Result<
        chromiumoxide::listeners::EventStream<chromiumoxide::cdp::browser_protocol::browser::EventDownloadProgress>,
        BrowserError,
    > {
        self.browser.event_listener().await.map_err(BrowserError::cdp)
    }

    /// Puts a grant's cookies into this browser's default context (C1): the only way session
    /// material enters it. Never into an attached browser ([`BrowserError::Attached`], review F1).
    pub async fn inject(&self, injection: &crate::consent::Injection) -> Result<usize, BrowserError> {
        self.inject_into(None, injection).await
    }

    /// Puts a grant's cookies and storage into `context` (the default one without): a grant's
    /// own context holds only its material (review M5). Never into an attached browser.
    pub async fn inject_into(
        &self,
        context: Option<&ContextId>,
        injection: &crate::consent::Injection,
    ) -> Result<usize, BrowserError> {
        if self.was_already_running {
            return Err(BrowserError::Attached);
        }
        Ok(super::cdp::inject(&self.browser, injection, context.map(|c| &c.0)).await?)
    }

    /// A new browser context: a cookie jar, storage and cache of its own, in memory, ended
    /// with [`Self::close_context`] (or when this connection ends). A grant's material and a
    /// join's cookie live in one each, so a page in one rides no session of another (M5).
    pub async fn open_context(&self) -> Result<ContextId, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::CreateBrowserContextParams;
        let params = CreateBrowserContextParams {
            dispose_on_detach: Some(true),
            ..CreateBrowserContextParams::default()
        };
        let created = self.browser.execute(params).await.map_err(BrowserError::cdp)?;
        Ok(ContextId(created.result.browser_context_id))
    }

    /// The browser's contexts other than the default one.
    async fn contexts(&self) -> Result<Vec<ContextId>, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::GetBrowserContextsParams;
        let listed = self
            .browser
            .execute(GetBrowserContextsParams::default())
            .await
            .map_err(BrowserError::cdp)?;
        Ok(listed
            .result
            .browser_context_ids
            .iter()
            .cloned()
            .map(ContextId)
            .collect())
    }

    /// Ends `context`: its tabs close, its cookies and storage are gone.
    pub async fn close_context(&self, context: &ContextId) -> Result<(), BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::DisposeBrowserContextParams;
        self.browser
            .execute(DisposeBrowserContextParams::new(context.0.clone()))
            .await
            .map(|_| ())
            .map_err(BrowserError::cdp)
    }

    /// The cookies of `context` (the default one without), as (name, domain): never values.
    pub async fn cookie_names_in(&self, context: Option<&ContextId>) -> Result<Vec<(String, String)>, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::storage::GetCookiesParams;
        let params = GetCookiesParams {
            browser_context_id: context.map(|c| c.0.clone()),
        };
        let cookies = self.browser.execute(params).await.map_err(BrowserError::cdp)?;
        Ok(cookies.result.cookies.into_iter().map(|c| (c.name, c.domain)).collect())
    }

    /// The cookies the browser holds in every context, as (name, domain): never their values.
    pub async fn cookie_names(&self) -> Result<Vec<(String, String)>, BrowserError> {
        let contexts = self.contexts().await?;
        let mut names = self.cookie_names_in(None).await?;
        for context in &contexts {
            names.extend(self.cookie_names_in(Some(context)).await?);
        }
        Ok(names)
    }

    /// The keys of `origin`'s local storage (`https://host[:port]`) in every context, each once:
    /// never their values. Read in a blank document of the origin that the browser answers
    /// itself, closed again.
    pub async fn local_storage_keys(&self, origin: &str) -> Result<Vec<String>, BrowserError> {
        let contexts = self.contexts().await?;
        let mut keys = super::cdp::local_storage_keys(&self.browser, origin, None).await?;
        for context in &contexts {
            keys.extend(super::cdp::local_storage_keys(&self.browser, origin, Some(&context.0)).await?);
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The URLs of the browser's tabs.
    pub async fn tab_urls(&self) -> Result<Vec<String>, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::GetTargetsParams;
        let targets = self
            .browser
            .execute(GetTargetsParams::default())
            .await
            .map_err(BrowserError::cdp)?;
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

    /// A new tab, on `about:blank`, in the default context.
    pub async fn new_page(&self) -> Result<Page, BrowserError> {
        self.new_page_in(None).await
    }

    /// A new tab, on `about:blank`, in `context` (the default one without).
    pub async fn new_page_in(&self, context: Option<&ContextId>) -> Result<Page, BrowserError> {
        self.open_page(context, false).await
    }

    /// [`Self::new_page_in`], opened behind the tab in front, which stays in front (and
    /// visible to its page): a tab opened ahead of its use.
    pub async fn new_background_page_in(&self, context: Option<&ContextId>) -> Result<Page, BrowserError> {
        self.open_page(context, true).await
    }

    async fn open_page(&self, context: Option<&ContextId>, background: bool) -> Result<Page, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::target::CreateTargetParams;
        let mut params = CreateTargetParams::new("about:blank");
        params.browser_context_id = context.map(|c| c.0.clone());
        params.background = background.then_some(true);
        self.browser.new_page(params).await.map_err(BrowserError::cdp)
    }

    /// Stops the browser: `Browser.close`, up to `grace` for the process to exit, then a kill,
    /// then its children swept and the profile removed. Safe to call twice, or on a browser that already died; pages
    /// still held elsewhere stop working.
    pub async fn stop(&self, grace: Duration) -> Result<Stopped, BrowserError> {
        self.stop_with(grace, false).await
    }

    /// Stops the browser; an attached one (which the host did not start) is only disconnected
    /// unless `force` (L5), and then closed, and killed after `grace`; its profile is never
    /// removed.
    pub(crate) async fn stop_with(&self, grace: Duration, force: bool) -> Result<Stopped, BrowserError> {
        use chromiumoxide::cdp::browser_protocol::browser::CloseParams;
        // No other process is sent anything for a browser that is going.
        drop(
            self.control
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
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
                    let _ = wait_gone(&ProcTable, &[pid], grace).await;
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
            instance: self.instance.as_str().to_owned(),
            user_data_dir: self.user_data_dir.clone(),
        };
        let ended = match (self.was_already_running, force) {
            (true, false) => return Ok(Stopped::default()),
            (true, true) => end_processes(&ProcTable, &scope, grace).await,
            (false, _) => sweep(&ProcTable, &scope, grace).await,
        };
        ended.map(|swept| Stopped { swept }).map_err(BrowserError::Profile)
    }
}

/// Whether `ws` is a `ws://` URL on exactly `endpoint` (its address and port).
fn on_endpoint(ws: &str, endpoint: SocketAddr) -> bool {
    let Ok(url) = url::Url::parse(ws) else {
        return false;
    };
    let host = match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        Some(url::Host::Domain(name)) if name.eq_ignore_ascii_case("localhost") => {
            endpoint.ip().is_loopback().then_some(endpoint.ip())
        }
        _ => None,
    };
    url.scheme() == "ws" && host == Some(endpoint.ip()) && url.port() == Some(endpoint.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_binary_fails_the_launch_and_leaves_no_profile() {
        let state = std::env::temp_dir().join(format!("pap-agent-launch-{}", std::process::id()));
        let mut config = ChromiumConfig::new(state.clone());
        config.executable = PathBuf::from("/nonexistent/chromium");
        let error = ControlledBrowser::launch(&config, "x", &|_| {}).await.unwrap_err();
        assert!(matches!(error, LaunchError::Spawn { .. }), "{error}");
        // What to do next, in the message itself.
        let said = error.to_string();
        assert!(said.contains("/nonexistent/chromium"), "{said}");
        assert!(
            said.contains("apt-get install --no-install-recommends chromium"),
            "{said}"
        );
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

    #[test]
    fn an_attach_follows_only_a_socket_on_the_endpoint_it_was_given() {
        let endpoint: SocketAddr = "127.0.0.1:9222".parse().unwrap();
        assert!(on_endpoint("ws://127.0.0.1:9222/devtools/browser/abc", endpoint));
        assert!(on_endpoint("ws://localhost:9222/devtools/browser/abc", endpoint));
        for elsewhere in [
            "ws://127.0.0.1:9333/devtools/browser/abc",
            "ws://10.0.0.5:9222/devtools/browser/abc",
            "ws://evil.example:9222/devtools/browser/abc",
            "wss://127.0.0.1:9222/devtools/browser/abc",
            "not a url",
        ] {
            assert!(!on_endpoint(elsewhere, endpoint), "{elsewhere}");
        }
    }
}
