//! Our Chromium provider under the suite: the real [`BrowserHost`] and [`ToolHost`] over a real
//! Chromium, real processes in the real process table, and the real [`Supervisor`] for the
//! timing hooks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pap_agent::{
    BrowserHost, CallGate, ChromiumConfig, ConsentHost, HOST_MARKER, Health, Launch, ORPHAN_MARKER, OperatorReset,
    Policy, ProcTable, ProcessTable, Stalled, Supervisor, ToolHost, load_manifest,
};
use pap_shared::{ToolError, ToolErrorCode, ToolResult};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{Launched, ProviderUnderTest, SupervisionUnderTest};

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
        let manifest_text =
            std::fs::read_to_string(manifest).map_err(|e| anyhow::anyhow!("reading {}: {e}", manifest.display()))?;
        let parsed = load_manifest(manifest).map_err(|diagnostics| {
            let all: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
            anyhow::anyhow!("{} does not load: {}", manifest.display(), all.join("; "))
        })?;
        let host = BrowserHost::new();
        let state_dir = config.state_dir.clone();
        let consent = Arc::new(ConsentHost::open(
            &state_dir,
            Arc::new(pap_shared::SystemClock),
            Arc::new(pap_shared::SystemRng),
        )?);
        let tools = ToolHost::new(parsed, host.clone(), config, INSTANCE, consent);
        Ok(Self {
            manifest_text,
            host,
            tools,
            state_dir,
            planted: Mutex::default(),
        })
    }

    /// Ends what the suite planted and the browser, if still running.
    pub async fn shut_down(&self) {
        let _ = self.host.stop(INSTANCE, Duration::from_secs(2)).await;
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
impl ProviderUnderTest for ChromiumUnderTest {
    fn manifest_text(&self) -> String {
        self.manifest_text.clone()
    }

    async fn launch(&self) -> Result<Launched, ToolError> {
        let before = self.host.health(INSTANCE);
        let was_running = before.state.is_usable();
        self.tools.launch().await?;
        let browser = self
            .host
            .attach(INSTANCE)
            .await
            .ok_or_else(|| ToolError::new(ToolErrorCode::Internal, "the launched browser does not answer"))?;
        let health = self.host.health(INSTANCE);
        Ok(Launched {
            pid: browser.pid(),
            boot_id: health.boot_id,
            was_already_running: was_running && before.boot_id == health.boot_id,
        })
    }

    async fn health(&self) -> Health {
        self.host.health(INSTANCE)
    }

    async fn call(&self, tool: &str, input: Value) -> ToolResult {
        self.tools.call(tool, &input).await
    }

    async fn stop(&self) -> Result<(), ToolError> {
        self.host
            .stop(INSTANCE, Duration::from_secs(2))
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("stop failed: {e}")))
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
        // Our provider has no idle reaper: every target lives until it is closed or the browser
        // stops, which keeps keepAlive (L11) by construction.
    }

    async fn user_data_dir(&self) -> Option<PathBuf> {
        Some(self.host.attach(INSTANCE).await?.user_data_dir().to_owned())
    }

    fn supervision(&self) -> Box<dyn SupervisionUnderTest> {
        Box::new(RealSupervisor(Supervisor::new(Policy::default())))
    }
}

/// The agent's own supervisor, with AIP-63's default policy.
struct RealSupervisor(Supervisor);

impl SupervisionUnderTest for RealSupervisor {
    fn launch(&mut self, now: u64) -> Result<Launch, ToolError> {
        self.0.launch(INSTANCE, now)
    }
    fn progress(&mut self, now: u64) {
        self.0.progress(INSTANCE, now);
    }
    fn ready(&mut self) {
        self.0.probe_succeeded(INSTANCE);
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
        self.0.reset(INSTANCE, now, OperatorReset::from_operator_command())
    }
    fn health(&self) -> Health {
        self.0.health(INSTANCE)
    }
}
