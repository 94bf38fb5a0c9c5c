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
use super::config::ChromiumConfig;
use super::error::{BrowserError, LaunchError};
use super::launch::{ControlledBrowser, STEP_DEVTOOLS_BOUND};
use super::sweep::{ProcTable, SweepScope, sweep};
use crate::consent::{Forgotten, Injection, LiveError, LiveInstances, Scope};
use crate::spec::{CallGate, Health, InstanceRecord, OperatorReset, Policy, Stopped, Supervisor, ToolError};
use crate::store::private_dir;

/// The supervisor's records under `browsers/`, for a persistent host.
const SUPERVISOR_RECORDS: &str = "supervisor.json";

/// How often a running launch reports to the supervisor.
const LAUNCH_TICK: Duration = Duration::from_millis(250);

/// The agent's browsers by instance key, under the AIP-63 supervisor: launching is idempotent
/// per key (L2: a second launch returns the running browser with `was_already_running`, no
/// second process, no config change); consecutive failed launches end in `crash-looping` and no
/// further spawn (L6) until an operator resets it (L7); stop sweeps the instance's marked
/// processes (L5); a call that finds an instance starting waits for it, at most its remaining
/// budget (L10).
///
/// Launches of one instance take turns (a per-instance gate); no lock is held across a launch,
/// so other instances, and every status read, go on while Chromium starts.
#[derive(Clone)]
pub struct BrowserHost {
    browsers: Arc<std::sync::Mutex<HashMap<String, Arc<ControlledBrowser>>>>,
    /// One gate per instance key: a launch, reset or stop of that instance holds it.
    gates: Arc<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>,
    supervisor: Arc<std::sync::Mutex<Supervisor>>,
    /// Counts the supervisor's changes, for callers waiting on a starting instance (L10).
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// Where the supervisor's records outlive this process, for a persistent host.
    records: Option<PathBuf>,
    /// The clock: the wall clock read once when the host was made, plus monotonic time since.
    clock: HostClock,
    /// Tells whoever recovers browsers ([`crate::ToolHost::start_recovery`]) that one exited.
    exits: tokio::sync::broadcast::Sender<Exit>,
}

/// A running browser exited on its own (noticed when its DevTools pipe closed): the instance
/// is `stopped` with `reason`, and `relaunch` says what the supervisor advises.
#[derive(Clone, Debug)]
pub struct Exit {
    /// The instance key.
    pub instance: String,
    /// Why, as `health()` reports it (the exit status; no secrets).
    pub reason: String,
    /// When to relaunch it.
    pub relaunch: crate::spec::Relaunch,
}

/// The parts of a [`BrowserHost`] an exit watcher holds: weak, so a dropped host (and the
/// browsers it owns, killed on drop) is not kept alive by the watchers of its browsers.
struct WeakHost {
    browsers: std::sync::Weak<std::sync::Mutex<HashMap<String, Arc<ControlledBrowser>>>>,
    gates: std::sync::Weak<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>,
    supervisor: std::sync::Weak<std::sync::Mutex<Supervisor>>,
    changes: std::sync::Weak<tokio::sync::watch::Sender<u64>>,
    records: Option<PathBuf>,
    clock: HostClock,
    exits: tokio::sync::broadcast::WeakSender<Exit>,
}

impl WeakHost {
    fn upgrade(&self) -> Option<BrowserHost> {
        Some(BrowserHost {
            browsers: self.browsers.upgrade()?,
            gates: self.gates.upgrade()?,
            supervisor: self.supervisor.upgrade()?,
            changes: self.changes.upgrade()?,
            records: self.records.clone(),
            clock: self.clock,
            exits: self.exits.upgrade()?,
        })
    }
}

/// What a launch found or made.
#[derive(Clone, Debug)]
pub struct Launched {
    /// The running browser.
    pub browser: Arc<ControlledBrowser>,
    /// It already ran, healthy, under this key: nothing was spawned or changed (L2).
    pub was_already_running: bool,
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

    /// A host with `policy` (a manifest's: [`crate::spec::Lifecycle::policy`]).
    pub fn with_policy(policy: Policy) -> Self {
        Self::with_supervisor(Supervisor::new(policy), None)
    }

    fn with_supervisor(supervisor: Supervisor, records: Option<PathBuf>) -> Self {
        Self {
            browsers: Arc::default(),
            gates: Arc::default(),
            supervisor: Arc::new(std::sync::Mutex::new(supervisor)),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
            records,
            clock: HostClock::start(),
            exits: tokio::sync::broadcast::channel(16).0,
        }
    }

    fn downgrade(&self) -> WeakHost {
        WeakHost {
            browsers: Arc::downgrade(&self.browsers),
            gates: Arc::downgrade(&self.gates),
            supervisor: Arc::downgrade(&self.supervisor),
            changes: Arc::downgrade(&self.changes),
            records: self.records.clone(),
            clock: self.clock,
            exits: self.exits.downgrade(),
        }
    }

    /// The browsers that exit on their own from now on ([`Exit`]), for a host that recovers
    /// them.
    pub fn exits(&self) -> tokio::sync::broadcast::Receiver<Exit> {
        self.exits.subscribe()
    }

    /// Watches `browser`, just launched as `instance`, for an exit nobody asked for: when its
    /// DevTools pipe closes while the registry still holds it (a stop takes it out first), the
    /// exit is handled ([`Self::exited`]) within the time the pipe takes to close (measured:
    /// milliseconds after a SIGKILL).
    fn watch_exit(&self, instance: &str, browser: &Arc<ControlledBrowser>, grace: Duration) {
        let host = self.downgrade();
        let weak = Arc::downgrade(browser);
        let instance = instance.to_owned();
        // The watcher waits on the signal alone and holds the browser weakly: it must not keep
        // a browser alive that its host dropped.
        let signal = browser.closed_signal();
        tokio::spawn(async move {
            let Some(mut signal) = signal else { return };
            let _ = signal.wait_for(|closed| *closed).await;
            let (Some(host), Some(browser)) = (host.upgrade(), weak.upgrade()) else {
                return;
            };
            host.exited(&instance, &browser, grace).await;
        });
    }

    /// `browser` (the registry's `instance`) exited on its own: taken out of the registry, its
    /// leftovers swept, the supervisor told ([`Supervisor::exited`]), and the exit announced.
    async fn exited(&self, instance: &str, browser: &Arc<ControlledBrowser>, grace: Duration) {
        let gate = self.gate(instance);
        let _turn = gate.lock().await;
        let ours = self
            .registry()
            .get(instance)
            .is_some_and(|running| Arc::ptr_eq(running, browser));
        if !ours {
            // A stop (or a relaunch) took it out first: not an exit on its own.
            return;
        }
        self.registry().remove(instance);
        let reason = match browser.exit_status(grace).await {
            Some(status) => format!("the browser exited on its own ({status})"),
            None => "the browser's DevTools pipe closed on its own".to_owned(),
        };
        let relaunch = self.supervisor().exited(instance, self.now(), &reason);
        self.changed();
        tracing::warn!(instance, %reason, "the agent's browser exited under the host");
        // Its children and its profile go as at a stop (L5, L13).
        if let Err(error) = browser.stop(grace).await {
            tracing::warn!(instance, %error, "sweeping what the exited browser left");
        }
        self.keep_records();
        if let Some(relaunch) = relaunch {
            let _ = self.exits.send(Exit {
                instance: instance.to_owned(),
                reason,
                relaunch,
            });
        }
    }

    /// The policy its supervisor runs by.
    pub fn policy(&self) -> Policy {
        self.supervisor().policy()
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
        Ok(Self::with_supervisor(supervisor, Some(path)))
    }

    /// Writes the supervisor's records, if this host keeps them, whole or not at all
    /// ([`crate::store::write_private`]).
    fn save(&self) -> Result<(), BrowserError> {
        let Some(path) = &self.records else { return Ok(()) };
        let records = self.supervisor().records();
        let json = serde_json::to_vec_pretty(&records).map_err(|e| BrowserError::Profile(e.into()))?;
        crate::store::write_private(path, &json).map_err(BrowserError::Profile)
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

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ControlledBrowser>>> {
        // Every critical section is one map operation.
        self.browsers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The gate of `instance`: launches, resets and stops of one instance take turns.
    fn gate(&self, instance: &str) -> Arc<Mutex<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        gates.entry(instance.to_owned()).or_default().clone()
    }

    /// Tells whoever waits on a state change (L10) that one happened.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The browser for `instance`, launched if it is not running (L2: when it runs, healthy,
    /// it is returned as it is, `was_already_running`).
    pub async fn launch(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Launched, LaunchError> {
        let gate = self.gate(instance);
        let _turn = gate.lock().await;
        let running = self.registry().get(instance).cloned();
        if let Some(running) = running {
            if running.is_healthy().await {
                self.supervisor().probe_succeeded(instance, self.now());
                return Ok(Launched {
                    was_already_running: true,
                    browser: running,
                });
            }
            // It died under us: the supervisor learns it before anything relaunches.
            let now = self.now();
            {
                let mut supervisor = self.supervisor();
                supervisor.probe_failed(instance, now);
                supervisor.stop(instance, now);
                supervisor.gone(instance, now);
            }
            self.registry().remove(instance);
            self.changed();
        }
        let now = self.now();
        self.supervisor().launch(instance, now).map_err(LaunchError::Refused)?;
        self.changed();
        let browser = self.spawn(config, instance, progress).await?;
        Ok(Launched {
            // An attached browser is one the host did not start (L2).
            was_already_running: browser.was_already_running(),
            browser,
        })
    }

    /// Spawns the browser the supervisor just agreed to start, and tells it how that went.
    async fn spawn(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Arc<ControlledBrowser>, LaunchError> {
        let outcome = self.supervised_spawn(config, instance, progress).await;
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
            self.changed();
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
                        let stalled = self.supervisor().tick(instance, now);
                        if let Some(stalled) = stalled {
                            self.changed();
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
                let launched = Arc::new(launched);
                self.registry().insert(instance.to_owned(), launched.clone());
                self.supervisor().probe_succeeded(instance, self.now());
                self.changed();
                self.watch_exit(instance, &launched, config.grace);
                Ok(launched)
            }
            Err(error) => {
                self.supervisor()
                    .launch_failed(instance, self.now(), &error.to_string());
                self.changed();
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

    /// Waits until `instance` may take a call (L3, L10): at once when it is healthy or degraded;
    /// while it is starting, at most the launch's remaining budget, then `browser:starting`
    /// (retryable); otherwise the supervisor's refusal (`browser:not_ready` with the state,
    /// `browser:crash_looping` with the last failure). Returns the boot the call belongs to.
    pub async fn ready(&self, instance: &str) -> Result<u64, ToolError> {
        let mut changes = self.changes.subscribe();
        loop {
            let gate = self.supervisor().call(instance, self.now());
            match gate {
                CallGate::Proceed => return Ok(self.health(instance).boot_id),
                CallGate::Refuse(error) => return Err(error),
                CallGate::Wait(remaining) => {
                    // A change (the launch finished, failed or progressed) or the budget's end:
                    // either way the supervisor is asked again.
                    let _ = tokio::time::timeout(Duration::from_millis(remaining), changes.changed()).await;
                }
            }
        }
    }

    /// An operator's reset of a crash-looping instance (L7): launches it afresh.
    pub async fn reset(
        &self,
        config: &ChromiumConfig,
        instance: &str,
        reset: OperatorReset,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Arc<ControlledBrowser>, LaunchError> {
        let gate = self.gate(instance);
        let _turn = gate.lock().await;
        let now = self.now();
        self.supervisor()
            .reset(instance, now, reset)
            .map_err(LaunchError::Refused)?;
        self.changed();
        self.spawn(config, instance, progress).await
    }

    /// Every running browser of this host.
    pub(crate) fn running(&self) -> Vec<Arc<ControlledBrowser>> {
        self.registry().values().cloned().collect()
    }

    /// The running browser for `instance`, without launching one: `None` when there is none or
    /// it no longer answers.
    pub async fn attach(&self, instance: &str) -> Option<Arc<ControlledBrowser>> {
        let running = self.registry().get(instance).cloned()?;
        // Every probe tells the supervisor, so health() shows a browser that stopped answering
        // as degraded, and one that answers again as healthy (L1, L4).
        self.probe(instance, &running).await.then_some(running)
    }

    /// Probes `browser` (L4: within its health timeout, opening no target) and tells the
    /// supervisor; whether it answered.
    async fn probe(&self, instance: &str, browser: &ControlledBrowser) -> bool {
        let healthy = browser.is_healthy().await;
        let now = self.now();
        let before = self.health(instance).state;
        if healthy {
            self.supervisor().probe_succeeded(instance, now);
        } else {
            self.supervisor().probe_failed(instance, now);
        }
        if self.health(instance).state != before {
            self.changed();
        }
        healthy
    }

    /// Probes every running instance now (the health loop's one round): a browser that stopped
    /// answering shows `degraded`, one that answers again `healthy` (L1, L4).
    pub async fn probe_all(&self) {
        let running: Vec<(String, Arc<ControlledBrowser>)> =
            self.registry().iter().map(|(k, b)| (k.clone(), b.clone())).collect();
        for (instance, browser) in running {
            self.probe(&instance, &browser).await;
        }
    }

    /// Runs the supervisor's health loop (`lifecycle.health.intervalMs`): every `interval`, each
    /// running instance is probed, whether or not anything calls it. Ends when the handle drops.
    pub fn start_health_loop(&self, interval: Duration) -> HealthLoop {
        let host = self.clone();
        HealthLoop(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                host.probe_all().await;
            }
        }))
    }

    /// Stops `instance`, if running: graceful, then forced, then a sweep of its marked
    /// processes and profile (L5). Idempotent; says how many processes the sweep ended.
    pub async fn stop(&self, instance: &str, grace: Duration) -> Result<Stopped, BrowserError> {
        self.stop_with(instance, grace, false).await
    }

    /// `stop` with `force: true` (L5): the only stop that ends an attached browser, one the
    /// host did not start; for the host's own browsers it is the same as [`Self::stop`].
    pub async fn stop_forced(&self, instance: &str, grace: Duration) -> Result<Stopped, BrowserError> {
        self.stop_with(instance, grace, true).await
    }

    async fn stop_with(&self, instance: &str, grace: Duration, force: bool) -> Result<Stopped, BrowserError> {
        let gate = self.gate(instance);
        let _turn = gate.lock().await;
        let browser = self.registry().remove(instance);
        let Some(browser) = browser else {
            return Ok(Stopped::default());
        };
        self.supervisor().stop(instance, self.now());
        self.changed();
        let stopped = browser.stop_with(grace, force).await;
        self.supervisor().gone(instance, self.now());
        self.changed();
        self.keep_records();
        stopped
    }
}

/// The health loop of a [`BrowserHost`]; it ends when this is dropped.
#[derive(Debug)]
pub struct HealthLoop(tokio::task::JoinHandle<()>);

impl Drop for HealthLoop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[async_trait]
impl LiveInstances for BrowserHost {
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, LiveError> {
        let mut total = Forgotten::default();
        for browser in self.running() {
            total += cdp::forget(browser.cdp(), scope, origins, cdp::LastTab::of(&browser)).await?;
        }
        Ok(total)
    }

    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError> {
        let mut total = 0;
        for browser in self.running() {
            total += cdp::inject(browser.cdp(), injection, None).await?;
        }
        Ok(total)
    }
}
