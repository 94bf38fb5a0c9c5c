//! AIP-63 §3, the supervisor's decisions (L2, L3, L5-L10), without I/O.
//!
//! The supervisor is told what happened (a launch asked for, progress seen, the probe answered,
//! the launch failed, time passed) with the time it happened (milliseconds on the caller's
//! clock: `BrowserHost`'s is the wall clock at its start plus monotonic time since, so failure
//! times kept in its records compare across agent runs), and answers what to do (spawn, return
//! the running instance, wait, refuse, kill a launch that stalled). The code that owns processes
//! and sockets feeds it; tests feed it exact times, so every rule is tested exactly. What must
//! outlive one agent run (failures and crash-looping) comes out as [`InstanceRecord`]s and goes back in
//! with [`Supervisor::restore`].

use std::collections::HashMap;

use super::aip14::{ToolError, ToolErrorCode};
use serde_json::json;

use super::lifecycle::{InstanceState, LifecycleEvent, OperatorReset};

/// Supervision settings (`browser.lifecycle` in the manifest), with AIP-63's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `launch.budgetMs`: the soft deadline of a launch.
    pub budget: u64,
    /// `launch.progressWindowMs`: progress within this trailing window keeps a launch alive.
    pub progress_window: u64,
    /// `launch.hardCeilingMs`: no launch lasts longer.
    pub hard_ceiling: u64,
    /// `supervision.crashLoop.maxFailures`.
    pub max_failures: usize,
    /// `supervision.crashLoop.windowMs`.
    pub failure_window: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            budget: 120_000,
            progress_window: 10_000,
            hard_ceiling: 360_000,
            max_failures: 3,
            failure_window: 300_000,
        }
    }
}

/// What `launch` asks the caller to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launch {
    /// Spawn a process for this boot.
    Spawn {
        /// The new boot's id.
        boot_id: u64,
    },
    /// A healthy (or degraded) instance exists: return it, spawn nothing, change nothing (L2).
    AlreadyRunning {
        /// Its boot.
        boot_id: u64,
    },
    /// A launch is under way: wait for it, never start a second (L9).
    AlreadyStarting {
        /// Its boot.
        boot_id: u64,
    },
}

/// What a tool call that needs the instance should do (L3, L10).
#[derive(Clone, Debug, PartialEq)]
pub enum CallGate {
    /// The instance is usable.
    Proceed,
    /// Starting: wait at most this long (the launch's remaining budget), then ask again.
    Wait(u64),
    /// Refuse with this error.
    Refuse(ToolError),
}

/// What a host does after a running instance exited on its own ([`Supervisor::exited`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relaunch {
    /// Relaunch it after `delay` milliseconds (the `exits`-th exit in the crash-loop window).
    After {
        /// Milliseconds to wait.
        delay: u64,
        /// Exits in the window, this one included.
        exits: usize,
    },
    /// It exited `maxFailures` times within the crash-loop window: no relaunch by itself (no
    /// silent restart loop); the next call that needs it launches it, as after a stop.
    OnNextCall {
        /// Exits in the window, this one included.
        exits: usize,
    },
}

/// A launch that stalled or ran too long: kill it; it counted as a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stalled {
    /// Why it failed.
    pub reason: String,
    /// Whether it tipped the instance into `crash-looping`.
    pub crash_looping: bool,
}

/// What `health()` reports (L1, L6, L12), in the shape of AIP-63's `health()`:
/// `{state, reason?, checkedAt, bootId?}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The state.
    pub state: InstanceState,
    /// The last failure, while crash-looping or stopped after a failure.
    pub reason: Option<String>,
    /// When the state was last established (a probe, a launch, a stop), in the caller's
    /// milliseconds; 0 for an instance never seen.
    pub checked_at: u64,
    /// Changes at every launch, so clients can tell a restart (L12).
    pub boot_id: u64,
}

#[derive(Clone, Debug)]
struct Instance {
    state: InstanceState,
    boot_id: u64,
    started_at: u64,
    last_progress: u64,
    checked_at: u64,
    /// Times of the consecutive failed launches (cleared by a success).
    failures: Vec<u64>,
    last_failure: Option<String>,
    /// Times a running instance's process exited on its own, within the crash-loop window.
    exits: Vec<u64>,
}

impl Instance {
    fn new() -> Self {
        Self {
            state: InstanceState::Absent,
            boot_id: 0,
            started_at: 0,
            last_progress: 0,
            checked_at: 0,
            failures: Vec::new(),
            last_failure: None,
            exits: Vec::new(),
        }
    }

    fn go(&mut self, event: &LifecycleEvent) {
        // Every caller checks the state first; an illegal move here is a bug in this module.
        self.state = self
            .state
            .on(event)
            .expect("the supervisor only makes moves the lifecycle table allows");
    }
}

/// What of an instance outlives one host process: the failed launches that count toward L6
/// (their times), the last failure, and whether it is crash-looping (which only an operator
/// leaves, L7). Everything else belongs to processes, which a new host sweeps (L8).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstanceRecord {
    /// Times of the consecutive failed launches.
    pub failures: Vec<u64>,
    /// The last failure's reason.
    pub last_failure: Option<String>,
    /// Whether the instance is crash-looping.
    pub crash_looping: bool,
}

/// The supervisor of one host's instances, by instance key (provider id plus profile or label).
#[derive(Clone, Debug, Default)]
pub struct Supervisor {
    policy: Policy,
    instances: HashMap<String, Instance>,
}

impl Supervisor {
    /// A supervisor with `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            instances: HashMap::new(),
        }
    }

    /// The policy it runs by.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// What should outlive this host, by instance key: instances with failed launches or
    /// crash-looping.
    pub fn records(&self) -> HashMap<String, InstanceRecord> {
        self.instances
            .iter()
            .filter(|(_, i)| !i.failures.is_empty() || i.state == InstanceState::CrashLooping)
            .map(|(key, i)| {
                let record = InstanceRecord {
                    failures: i.failures.clone(),
                    last_failure: i.last_failure.clone(),
                    crash_looping: i.state == InstanceState::CrashLooping,
                };
                (key.clone(), record)
            })
            .collect()
    }

    /// Restores what a previous host recorded for `key`, before this host launches it: its
    /// processes are gone (swept at start), so it is `stopped` after its failures, or still
    /// `crash-looping`.
    pub fn restore(&mut self, key: &str, record: InstanceRecord) {
        let instance = self.instance(key);
        instance.state = if record.crash_looping {
            InstanceState::CrashLooping
        } else if record.failures.is_empty() {
            InstanceState::Absent
        } else {
            InstanceState::Stopped
        };
        instance.failures = record.failures;
        instance.last_failure = record.last_failure;
    }

    fn instance(&mut self, key: &str) -> &mut Instance {
        self.instances.entry(key.to_owned()).or_insert_with(Instance::new)
    }

    /// `launch` for `key` at `now` (L2, L9, L6).
    pub fn launch(&mut self, key: &str, now: u64) -> Result<Launch, ToolError> {
        let instance = self.instance(key);
        match instance.state {
            InstanceState::Healthy | InstanceState::Degraded => Ok(Launch::AlreadyRunning {
                boot_id: instance.boot_id,
            }),
            InstanceState::Starting => Ok(Launch::AlreadyStarting {
                boot_id: instance.boot_id,
            }),
            InstanceState::CrashLooping => Err(crash_looping(instance)),
            InstanceState::Stopping => Err(not_ready(InstanceState::Stopping)),
            InstanceState::Absent | InstanceState::Stopped => {
                instance.go(&LifecycleEvent::Launch);
                Ok(Self::begin(instance, now))
            }
        }
    }

    fn begin(instance: &mut Instance, now: u64) -> Launch {
        instance.boot_id += 1;
        instance.started_at = now;
        instance.last_progress = now;
        instance.checked_at = now;
        Launch::Spawn {
            boot_id: instance.boot_id,
        }
    }

    /// A progress signal from a starting instance: its process alive with a bound port, or its
    /// health reporting `starting` (L9).
    pub fn progress(&mut self, key: &str, now: u64) {
        let instance = self.instance(key);
        if instance.state == InstanceState::Starting {
            instance.last_progress = instance.last_progress.max(now);
        }
    }

    /// The health probe answered at `now`: `starting`/`degraded` become `healthy`; consecutive
    /// failures reset.
    pub fn probe_succeeded(&mut self, key: &str, now: u64) {
        let instance = self.instance(key);
        instance.checked_at = instance.checked_at.max(now);
        if matches!(
            instance.state,
            InstanceState::Starting | InstanceState::Healthy | InstanceState::Degraded
        ) {
            instance.go(&LifecycleEvent::ProbeSucceeded);
            instance.failures.clear();
            instance.last_failure = None;
        }
    }

    /// The health probe failed at `now` on a running instance: `degraded`.
    pub fn probe_failed(&mut self, key: &str, now: u64) {
        let instance = self.instance(key);
        instance.checked_at = instance.checked_at.max(now);
        if instance.state.is_usable() {
            instance.go(&LifecycleEvent::ProbeFailed);
        }
    }

    /// The launch failed (the process exited, say). Counts toward L6; returns whether the
    /// instance is now crash-looping.
    pub fn launch_failed(&mut self, key: &str, now: u64, reason: &str) -> bool {
        let policy = self.policy;
        let instance = self.instance(key);
        if instance.state != InstanceState::Starting {
            return false;
        }
        instance
            .failures
            .retain(|t| now.saturating_sub(*t) < policy.failure_window);
        instance.failures.push(now);
        instance.last_failure = Some(reason.to_owned());
        instance.checked_at = now;
        if instance.failures.len() >= policy.max_failures {
            instance.go(&LifecycleEvent::CrashLoopThreshold);
            true
        } else {
            instance.go(&LifecycleEvent::LaunchFailed);
            false
        }
    }

    /// Time passed: a starting instance that has used its budget with no progress in the
    /// trailing window, or reached the hard ceiling, has failed (L9). A slow launch that keeps
    /// progressing is left alone.
    pub fn tick(&mut self, key: &str, now: u64) -> Option<Stalled> {
        let policy = self.policy;
        let instance = self.instance(key);
        if instance.state != InstanceState::Starting {
            return None;
        }
        let elapsed = now.saturating_sub(instance.started_at);
        let quiet = now.saturating_sub(instance.last_progress);
        let reason = if elapsed >= policy.hard_ceiling {
            format!("the launch reached its hard ceiling of {} ms", policy.hard_ceiling)
        } else if elapsed >= policy.budget && quiet >= policy.progress_window {
            format!(
                "the launch used its {} ms budget with no progress for {quiet} ms",
                policy.budget
            )
        } else {
            return None;
        };
        let crash_looping = self.launch_failed(key, now, &reason);
        Some(Stalled { reason, crash_looping })
    }

    /// How a tool call arriving at `now` should proceed (L3, L10).
    pub fn call(&mut self, key: &str, now: u64) -> CallGate {
        let policy = self.policy;
        let instance = self.instance(key);
        match instance.state {
            InstanceState::Healthy | InstanceState::Degraded => CallGate::Proceed,
            InstanceState::Starting => {
                let deadline = instance.started_at.saturating_add(policy.budget);
                match deadline.checked_sub(now).filter(|remaining| *remaining > 0) {
                    Some(remaining) => CallGate::Wait(remaining),
                    None => CallGate::Refuse(
                        ToolError::new(
                            ToolErrorCode::Starting,
                            "the browser is still starting; try again shortly",
                        )
                        .with_cause(json!({ "state": "starting" })),
                    ),
                }
            }
            InstanceState::CrashLooping => CallGate::Refuse(crash_looping(instance)),
            state => CallGate::Refuse(not_ready(state)),
        }
    }

    /// `stop` on a running instance: `stopping`. Idempotent: stopping a stopped (or never
    /// launched) instance changes nothing.
    pub fn stop(&mut self, key: &str, now: u64) -> bool {
        let instance = self.instance(key);
        if instance.state.is_usable() {
            instance.checked_at = now;
            instance.go(&LifecycleEvent::Stop);
            true
        } else {
            false
        }
    }

    /// The process tree is gone and the orphans swept: `stopped`.
    pub fn gone(&mut self, key: &str, now: u64) {
        let instance = self.instance(key);
        if instance.state == InstanceState::Stopping {
            instance.checked_at = now;
            instance.go(&LifecycleEvent::Gone);
        }
    }

    /// A running instance's process exited on its own at `now` (a crash, the out-of-memory
    /// killer, a SIGKILL): it goes through the table's moves (`degraded` when it was healthy,
    /// `stopping`, `stopped`) with `reason` as its last failure, and the exit is counted in the
    /// crash-loop window. Answers how long to wait before relaunching it ([`Relaunch`]); an
    /// instance that was not running is left alone (`None`).
    pub fn exited(&mut self, key: &str, now: u64, reason: &str) -> Option<Relaunch> {
        let policy = self.policy;
        let instance = self.instance(key);
        if !instance.state.is_usable() {
            return None;
        }
        if instance.state == InstanceState::Healthy {
            instance.go(&LifecycleEvent::ProbeFailed);
        }
        instance.go(&LifecycleEvent::Stop);
        instance.go(&LifecycleEvent::Gone);
        instance.checked_at = now;
        instance.last_failure = Some(reason.to_owned());
        instance
            .exits
            .retain(|t| now.saturating_sub(*t) < policy.failure_window);
        instance.exits.push(now);
        let exits = instance.exits.len();
        Some(if exits >= policy.max_failures {
            Relaunch::OnNextCall { exits }
        } else {
            // 0 ms for the first exit in the window, then doubling from 500 ms, never past the
            // progress window.
            let shift = u32::try_from(exits.saturating_sub(1)).unwrap_or(u32::MAX).min(16);
            let delay = if exits <= 1 {
                0
            } else {
                (250_u64 << shift).min(policy.progress_window)
            };
            Relaunch::After { delay, exits }
        })
    }

    /// An operator's reset of a crash-looping instance (L7): a fresh launch, failures forgotten.
    pub fn reset(&mut self, key: &str, now: u64, reset: OperatorReset) -> Result<Launch, ToolError> {
        let instance = self.instance(key);
        if instance.state != InstanceState::CrashLooping {
            return Err(not_ready(instance.state));
        }
        instance.go(&LifecycleEvent::Reset(reset));
        instance.failures.clear();
        instance.last_failure = None;
        Ok(Self::begin(instance, now))
    }

    /// What `health()` reports for `key`.
    pub fn health(&self, key: &str) -> Health {
        self.instances.get(key).map_or(
            Health {
                state: InstanceState::Absent,
                reason: None,
                checked_at: 0,
                boot_id: 0,
            },
            |i| Health {
                state: i.state,
                reason: i.last_failure.clone(),
                checked_at: i.checked_at,
                boot_id: i.boot_id,
            },
        )
    }
}

fn not_ready(state: InstanceState) -> ToolError {
    ToolError::new(ToolErrorCode::NotReady, format!("the browser is {state}, not ready"))
        .with_cause(json!({ "state": state }))
}

fn crash_looping(instance: &Instance) -> ToolError {
    let last = instance.last_failure.clone().unwrap_or_default();
    ToolError::new(
        ToolErrorCode::CrashLooping,
        format!("the browser failed to launch repeatedly; an operator must reset it (last failure: {last})"),
    )
    .with_cause(json!({ "state": "crash-looping", "lastFailure": last }))
}

#[cfg(test)]
mod tests;
