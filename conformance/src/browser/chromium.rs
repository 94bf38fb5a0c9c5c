//! Our Chromium provider under the suite: the real [`BrowserHost`] and [`ToolHost`] over a real
//! Chromium, real processes in the real process table, and the real [`Supervisor`] for the
//! timing hooks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pap_browser::chromium::{
    BrowserHost, ChromiumConfig, HOST_MARKER, ORPHAN_MARKER, ProcTable, ProcessTable, StandaloneChromium,
};
use pap_browser::consent::{Caller, ConsentHost, Grant, GrantRequest, LiveInstances, Operator, SourceSpec};
use pap_browser::spec::{
    AgentCaller, CallGate, Health, InstanceKey, Launch, OperatorReset, Policy, Stalled, Supervisor, load_manifest,
};
use pap_browser::spec::{NamedOrigin, ToolError, ToolErrorCode, ToolResult};
use pap_browser::tools::ToolHost;
use serde_json::Value;
use tokio::sync::Mutex;

use super::{Launched, ProfileUnderTest, ProviderUnderTest, SupervisionUnderTest, ToolsUnderTest};

/// The instance the suite drives.
const INSTANCE: &str = "conformance";

/// A pid no host has: Linux caps pids at 4,194,304 (`pid_max`), so this one never runs.
const DEAD_HOST: u32 = 4_194_304;

/// What a planted process runs: it sleeps, and names itself by this text.
const PLANTED: &str = "import time; time.sleep(600)";

/// Our Chromium provider, driven by the suite.
pub struct ChromiumUnderTest {
    manifest_text: String,
    host: BrowserHost,
    tools: Arc<ToolHost>,
    state_dir: PathBuf,
    planted: Mutex<Vec<u32>>,
    /// For the attach provider: the Chromium the host did not start, kept running by the
    /// harness (as an operator would) on one port.
    foreign: Option<Foreign>,
}

/// The attach provider's instance, which the harness (not the host) starts.
struct Foreign {
    port: u16,
    user_data_dir: PathBuf,
    running: Mutex<Option<StandaloneChromium>>,
}

impl std::fmt::Debug for ChromiumUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromiumUnderTest")
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl ChromiumUnderTest {
    /// The provider `manifest` describes, launched as `config` says (its profiles and downloads
    /// under `config.state_dir`).
    pub fn new(manifest: &Path, config: ChromiumConfig) -> anyhow::Result<Self> {
        Self::build(manifest, config, None)
    }

    /// The attach provider `manifest` describes: the harness runs a dedicated Chromium on a free
    /// loopback port (restarting it when a forced stop ended it) and the host attaches to it.
    pub fn attached(manifest: &Path, mut config: ChromiumConfig) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        config.attach_to = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        let foreign = Foreign {
            port,
            // Beside the agent's state directory, not in it: run as root, the operator's
            // browser runs sandboxed as an unprivileged user the agent's state is closed to.
            user_data_dir: config.state_dir.with_extension("foreign-profile"),
            running: Mutex::default(),
        };
        Self::build(manifest, config, Some(foreign))
    }

    fn build(manifest: &Path, config: ChromiumConfig, foreign: Option<Foreign>) -> anyhow::Result<Self> {
        let manifest_text =
            std::fs::read_to_string(manifest).map_err(|e| anyhow::anyhow!("reading {}: {e}", manifest.display()))?;
        let parsed = load_manifest(manifest).map_err(|diagnostics| {
            let all: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
            anyhow::anyhow!("{} does not load: {}", manifest.display(), all.join("; "))
        })?;
        // The host runs by the manifest's lifecycle: its supervisor's policy, and (through
        // the config) the stop grace and the health timeout.
        let host = BrowserHost::with_policy(parsed.browser.lifecycle.policy());
        let mut config = config.with_lifecycle(&parsed.browser.lifecycle);
        // The suite serves its pages on loopback HTTP: the one origin the run names (H3).
        config.navigation.name(NamedOrigin::every_port(super::SUITE_ORIGIN)?);
        let state_dir = config.state_dir.clone();
        let consent = Arc::new(ConsentHost::open(
            &state_dir,
            Arc::new(pap_shared::SystemClock),
            Arc::new(pap_shared::SystemRng),
        )?);
        let instance = InstanceKey::try_from(INSTANCE)?;
        let tools = ToolHost::new(parsed, host.clone(), config, instance, consent);
        Ok(Self {
            manifest_text,
            host,
            tools,
            state_dir,
            planted: Mutex::default(),
            foreign,
        })
    }

    /// Starts the attach provider's Chromium if it is not running.
    async fn foreign_running(&self) -> Result<(), ToolError> {
        let Some(foreign) = &self.foreign else { return Ok(()) };
        let mut running = foreign.running.lock().await;
        if running.as_mut().is_some_and(StandaloneChromium::is_running) {
            return Ok(());
        }
        let started = StandaloneChromium::start(
            &PathBuf::from(pap_browser::chromium::CHROMIUM),
            &foreign.user_data_dir,
            foreign.port,
            &[],
            Duration::from_secs(60),
        )
        .await
        .map_err(|e| {
            ToolError::new(
                ToolErrorCode::Internal,
                format!("the attached Chromium did not start: {e}"),
            )
        })?;
        *running = Some(started);
        Ok(())
    }

    /// Ends what the suite planted and the browser, if still running.
    pub async fn shut_down(&self) {
        let _ = self.host.stop(INSTANCE, Duration::from_secs(2)).await;
        if let Some(foreign) = &self.foreign
            && let Some(mut running) = foreign.running.lock().await.take()
        {
            running.kill().await;
        }
        if let Some(foreign) = &self.foreign {
            let _ = std::fs::remove_dir_all(&foreign.user_data_dir);
        }
        for pid in self.planted.lock().await.drain(..) {
            // Only if it is still the process we planted: a swept pid may have been reused.
            let planted = ProcTable.list().is_ok_and(|processes| {
                processes
                    .iter()
                    .any(|p| p.pid == pid && p.args.iter().any(|a| a == PLANTED))
            });
            if planted {
                let _ = ProcTable.terminate(pid, true);
            }
        }
    }

    /// Starts `python3` sleeping, with `args` on its command line, in its own session and left
    /// to init (so a kill leaves no zombie of ours), and returns its pid.
    async fn plant(&self, args: &[String]) -> Result<u32, String> {
        let script = format!(
            "import subprocess, sys; p = subprocess.Popen(['python3', '-c', '{PLANTED}'] + sys.argv[1:], \
             start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, \
             stderr=subprocess.DEVNULL); print(p.pid)"
        );
        let output = tokio::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .output()
            .await
            .map_err(|e| format!("python3 could not start: {e}"))?;
        let pid = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<u32>()
            .map_err(|_| {
                format!(
                    "python3 did not report a pid: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })?;
        self.planted.lock().await.push(pid);
        Ok(pid)
    }
}

#[async_trait]
impl ToolsUnderTest for ChromiumUnderTest {
    fn offers(&self, tool: pap_browser::spec::ToolId) -> bool {
        self.tools.served().contains(&tool)
    }

    async fn launch(&self) -> Result<Launched, ToolError> {
        self.foreign_running().await?;
        // What the provider itself reports (L2), nothing inferred.
        let instance = self.tools.launch().await?;
        Ok(Launched {
            pid: instance.pid,
            boot_id: instance.boot_id,
            was_already_running: instance.was_already_running,
        })
    }

    async fn call(&self, tool: &str, input: Value) -> ToolResult {
        self.tools.call(tool, &input).await
    }
}

#[async_trait]
impl ProviderUnderTest for ChromiumUnderTest {
    fn manifest_text(&self) -> String {
        self.manifest_text.clone()
    }

    async fn health(&self) -> Health {
        self.host.health(INSTANCE)
    }

    async fn stop(&self) -> Result<(), ToolError> {
        self.tools.stop(false).await.map(|_| ())
    }

    async fn stop_forced(&self) -> Result<(), ToolError> {
        self.tools.stop(true).await?;
        // The harness reaps the process it started (the host never owned it).
        if let Some(foreign) = &self.foreign
            && let Some(running) = foreign.running.lock().await.as_mut()
        {
            running.exited_within(Duration::from_secs(5)).await;
        }
        Ok(())
    }

    async fn target_count(&self) -> Option<usize> {
        self.host.attach(INSTANCE).await?.target_count().await.ok()
    }

    fn is_running(&self, pid: u32) -> bool {
        // The agent's own process table: it lists no zombie (ended, only its status left).
        ProcTable
            .list()
            .is_ok_and(|processes| processes.iter().any(|p| p.pid == pid))
    }

    async fn plant_unmarked(&self) -> Result<u32, String> {
        self.plant(&["--user-data-dir=/nonexistent/not-ours".to_owned()]).await
    }

    async fn plant_orphan(&self) -> Result<u32, String> {
        let profile = self.state_dir.join(format!("browsers/orphan-{DEAD_HOST}"));
        let _ = std::fs::create_dir_all(&profile);
        self.plant(&[
            format!("--user-data-dir={}", profile.display()),
            format!("{ORPHAN_MARKER}=orphan"),
            format!("{HOST_MARKER}={DEAD_HOST}"),
        ])
        .await
    }

    async fn host_start(&self) {
        let _ = self
            .host
            .sweep_previous_run(&self.state_dir, Duration::from_secs(2))
            .await;
    }

    async fn reap_idle(&self) {
        // The reaper's round as if every target had been idle for a day: whatever it may close
        // it closes, and a keepAlive target must survive it (L11).
        self.tools
            .reap_idle(tokio::time::Instant::now() + Duration::from_secs(86_400))
            .await;
    }

    async fn user_data_dir(&self) -> Option<PathBuf> {
        Some(self.host.attach(INSTANCE).await?.user_data_dir().to_owned())
    }

    fn supervision(&self) -> Box<dyn SupervisionUnderTest> {
        // A supervisor with the policy this provider's host runs by (its manifest's), so the
        // timing hooks judge the provider's own numbers.
        Box::new(RealSupervisor(Supervisor::new(self.host.policy())))
    }

    fn profile(&self) -> Option<&dyn ProfileUnderTest> {
        Some(self)
    }
}

fn agent(device: Option<&str>) -> AgentCaller {
    device.map_or_else(AgentCaller::local, AgentCaller::paired)
}

fn operator() -> Operator {
    Operator::from_operator_channel("conformance")
}

/// The profile level through the agent's real consent host, tool surface and Chromium.
#[async_trait]
impl ProfileUnderTest for ChromiumUnderTest {
    fn scratch(&self) -> PathBuf {
        let dir = self.state_dir.join("scratch");
        let _ = std::fs::create_dir_all(&dir);
        dir
    }

    fn grant(&self, request: GrantRequest) -> Result<Grant, String> {
        self.tools
            .consent()
            .grant(&operator(), request)
            .map_err(|e| e.to_string())
    }

    fn full_profile_warning(&self) -> String {
        pap_browser::consent::FULL_PROFILE_WARNING.to_owned()
    }

    fn scan(&self, source: &Path) -> Result<BTreeMap<String, u64>, String> {
        self.tools
            .consent()
            .scan(&SourceSpec::StorageState(source.to_owned()))
            .map_err(|e| e.to_string())
    }

    fn acknowledge_sink(&self, grant: &str, provider: &str) -> Result<Grant, String> {
        self.tools
            .consent()
            .acknowledge_sink(&operator(), grant, provider, "the conformance suite")
            .map_err(|e| e.to_string())
    }

    fn remote_injection(&self, grant: &str, provider: &str) -> Result<usize, ToolError> {
        self.tools
            .consent()
            .remote_injection(&agent(None).into(), grant, provider)
            .map(|i| i.cookie_count())
            .map_err(|e| e.to_tool_error())
    }

    fn permit_join(&self, device: Option<&str>, host: &str) -> Result<(), ToolError> {
        self.tools
            .consent()
            .permit_join(&agent(device).into(), host)
            .map(|_| ())
            .map_err(|e| e.to_tool_error())
    }

    async fn pairing_revoked(&self, device: &str) -> Result<(), String> {
        self.tools
            .consent()
            .revoke_pairing(&operator(), device, self.tools.as_ref())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn call_as(&self, device: Option<&str>, tool: &str, input: Value) -> ToolResult {
        self.tools.call_as(&agent(device), tool, &input).await
    }

    async fn inject_granted(&self) -> Result<(), String> {
        let injections = self
            .tools
            .consent()
            .local_injections(&Caller::local_agent())
            .map_err(|e| e.to_string())?;
        for injection in &injections {
            LiveInstances::inject(self.tools.as_ref(), injection)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn cookies(&self) -> Vec<(String, String)> {
        match self.host.attach(INSTANCE).await {
            Some(browser) => browser.cookie_names().await.unwrap_or_default(),
            None => Vec::new(),
        }
    }

    async fn target_jar(&self, target: &str) -> Result<Vec<(String, String)>, String> {
        self.tools
            .target_cookie_names(target)
            .await
            .map_err(|e| format!("{} {}", e.code.as_str(), e.message))
    }

    async fn tabs(&self) -> Vec<String> {
        match self.host.attach(INSTANCE).await {
            Some(browser) => browser.tab_urls().await.unwrap_or_default(),
            None => Vec::new(),
        }
    }

    async fn open_tab(&self, url: &str) -> Result<(), String> {
        let browser = self.host.attach(INSTANCE).await.ok_or("the browser is not running")?;
        let page = browser.new_page().await.map_err(|e| e.to_string())?;
        // The host need not resolve: the tab shows its error page at `url`.
        let _ = tokio::time::timeout(Duration::from_secs(10), page.goto(url)).await;
        Ok(())
    }

    fn consent_dir(&self) -> PathBuf {
        self.tools.consent().dir().to_owned()
    }

    fn verify_ledger(&self, dir: &Path) -> Result<u64, String> {
        let ledger = pap_browser::consent::Ledger::in_dir(dir).map_err(|e| e.to_string())?;
        ledger.verify().map(|s| s.records).map_err(|e| e.to_string())
    }
}

/// The agent's own supervisor, with the provider's policy.
struct RealSupervisor(Supervisor);

impl SupervisionUnderTest for RealSupervisor {
    fn policy(&self) -> Policy {
        self.0.policy()
    }
    fn launch(&mut self, now: u64) -> Result<Launch, ToolError> {
        self.0.launch(INSTANCE, now)
    }
    fn progress(&mut self, now: u64) {
        self.0.progress(INSTANCE, now);
    }
    fn ready(&mut self) {
        self.0.probe_succeeded(INSTANCE, 0);
    }
    fn launch_failed(&mut self, now: u64, reason: &str) -> bool {
        self.0.launch_failed(INSTANCE, now, reason)
    }
    fn tick(&mut self, now: u64) -> Option<Stalled> {
        self.0.tick(INSTANCE, now)
    }
    fn call(&mut self, now: u64) -> CallGate {
        self.0.call(INSTANCE, now)
    }
    fn operator_reset(&mut self, now: u64) -> Result<Launch, ToolError> {
        self.0.reset(
            INSTANCE,
            now,
            OperatorReset::new(&pap_browser::spec::Operator::from_operator_channel("suite")),
        )
    }
    fn health(&self) -> Health {
        self.0.health(INSTANCE)
    }
}
