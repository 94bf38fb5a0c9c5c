//! [`BrowserHost`]: the agent's browsers by instance key under the AIP-63 supervisor (§3), and
//! the revoke's reach into them (C8).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use super::args::profile_dir;
use super::cdp;
use super::launch::{BrowserError, ChromiumConfig, ControlledBrowser, LaunchError, STEP_DEVTOOLS_BOUND};
use super::sweep::{ProcTable, SweepScope, sweep};
use crate::consent::{Forgotten, Injection, LiveInstances, Scope};
use crate::spec::{Health, InstanceRecord, OperatorReset, Policy, Supervisor};
use crate::store::private_dir;

/// The supervisor's records under `browsers/`, for a persistent host.
const SUPERVISOR_RECORDS: &str = "supervisor.json";

/// How often a running launch reports to the supervisor.
const LAUNCH_TICK: Duration = Duration::from_millis(250);

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
                let records: HashMap<String, InstanceRecord> = serde_json::from_slice(&bytes).map_err(|e| {
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

#[async_trait]
impl LiveInstances for BrowserHost {
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, String> {
        let mut total = Forgotten::default();
        for browser in self.running().await {
            total += cdp::forget(browser.cdp(), scope, origins).await?;
        }
        Ok(total)
    }

    async fn inject(&self, injection: &Injection) -> Result<usize, String> {
        let mut total = 0;
        for browser in self.running().await {
            total += cdp::inject(browser.cdp(), injection).await?;
        }
        Ok(total)
    }
}
