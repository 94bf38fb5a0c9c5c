//! AIP-63 §3, the instance lifecycle: seven states and one transition function (L1).
//!
//! ```text
//! absent -> starting -> healthy <-> degraded -> stopping -> stopped
//!               |                                   ^           |
//!               +-----------> crash-looping         +-----------+  (stopped -> starting on relaunch)
//! ```
//!
//! Every state change goes through [`InstanceState::on`]; a move the table does not list is an
//! [`IllegalTransition`], never a silent change. Leaving `crash-looping` takes an
//! [`OperatorReset`], which agent tool calls have no way to make (L7).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::principal::Operator;

/// An instance's state (L1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// Never launched.
    Absent,
    /// Launched, not yet answering its health probe.
    Starting,
    /// Answering.
    Healthy,
    /// Answering partly, or its probe failed after it was healthy.
    Degraded,
    /// Being stopped.
    Stopping,
    /// Gone, its orphans swept.
    Stopped,
    /// Failed to launch too often in a row; terminal until an operator resets it (L6, L7).
    CrashLooping,
}

impl InstanceState {
    /// The wire name (`crash-looping`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Absent => "absent",
            Self::Starting => "starting",
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
            Self::CrashLooping => "crash-looping",
        }
    }

    /// Whether tools may use the instance (L3).
    pub fn is_usable(self) -> bool {
        matches!(self, Self::Healthy | Self::Degraded)
    }

    /// The state after `event`, or why the table forbids it (AIP-63 §3 transitions).
    pub fn on(self, event: &LifecycleEvent) -> Result<Self, IllegalTransition> {
        use InstanceState::{Absent, CrashLooping, Degraded, Healthy, Starting, Stopped, Stopping};
        use LifecycleEvent::{
            CrashLoopThreshold, Gone, Launch, LaunchFailed, ProbeFailed, ProbeSucceeded, Reset, Stop,
        };
        let next = match (self, event) {
            (Absent | Stopped, Launch) => Starting,
            (Starting | Degraded | Healthy, ProbeSucceeded) => Healthy,
            (Healthy | Degraded, ProbeFailed) => Degraded,
            (Starting, LaunchFailed) => Stopped,
            (Starting, CrashLoopThreshold) => CrashLooping,
            (Healthy | Degraded, Stop) => Stopping,
            (Stopping, Gone) => Stopped,
            (CrashLooping, Reset(_)) => Starting,
            (from, event) => {
                return Err(IllegalTransition {
                    from,
                    event: event.name(),
                });
            }
        };
        Ok(next)
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can happen to an instance.
#[derive(Debug)]
pub enum LifecycleEvent {
    /// `launch` was called.
    Launch,
    /// The health probe answered.
    ProbeSucceeded,
    /// The health probe failed (or the provider reports partial service).
    ProbeFailed,
    /// The launch failed or exhausted its budget (L9).
    LaunchFailed,
    /// The consecutive-failure threshold was reached (L6).
    CrashLoopThreshold,
    /// `stop` was called.
    Stop,
    /// The process tree is gone and the orphan sweep done.
    Gone,
    /// An operator reset a crash-looping instance (L7).
    Reset(OperatorReset),
}

impl LifecycleEvent {
    fn name(&self) -> &'static str {
        match self {
            Self::Launch => "launch",
            Self::ProbeSucceeded => "probe-succeeded",
            Self::ProbeFailed => "probe-failed",
            Self::LaunchFailed => "launch-failed",
            Self::CrashLoopThreshold => "crash-loop-threshold",
            Self::Stop => "stop",
            Self::Gone => "gone",
            Self::Reset(_) => "operator-reset",
        }
    }
}

/// Proof that a human operator, on an operator channel, asked to leave `crash-looping` (L7).
/// Only an [`Operator`] makes one: timers, retries and agent tool calls cannot.
#[derive(Debug)]
pub struct OperatorReset(());

impl OperatorReset {
    /// The reset `operator` asks for.
    pub fn new(operator: &Operator) -> Self {
        let _ = operator;
        Self(())
    }
}

/// A move the lifecycle table does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an instance that is {from} cannot take {event}")]
pub struct IllegalTransition {
    /// The state it was in.
    pub from: InstanceState,
    /// The event refused.
    pub event: &'static str,
}

#[cfg(test)]
mod tests {
    use super::InstanceState::*;
    use super::*;

    fn events() -> Vec<LifecycleEvent> {
        vec![
            LifecycleEvent::Launch,
            LifecycleEvent::ProbeSucceeded,
            LifecycleEvent::ProbeFailed,
            LifecycleEvent::LaunchFailed,
            LifecycleEvent::CrashLoopThreshold,
            LifecycleEvent::Stop,
            LifecycleEvent::Gone,
            LifecycleEvent::Reset(OperatorReset::new(&Operator::from_operator_channel("test"))),
        ]
    }

    #[test]
    fn the_table_and_nothing_else() {
        let states = [Absent, Starting, Healthy, Degraded, Stopping, Stopped, CrashLooping];
        let mut allowed = Vec::new();
        for from in states {
            for event in events() {
                if let Ok(to) = from.on(&event) {
                    allowed.push((from, event.name(), to));
                }
            }
        }
        assert_eq!(
            allowed,
            [
                (Absent, "launch", Starting),
                (Starting, "probe-succeeded", Healthy),
                (Starting, "launch-failed", Stopped),
                (Starting, "crash-loop-threshold", CrashLooping),
                (Healthy, "probe-succeeded", Healthy),
                (Healthy, "probe-failed", Degraded),
                (Healthy, "stop", Stopping),
                (Degraded, "probe-succeeded", Healthy),
                (Degraded, "probe-failed", Degraded),
                (Degraded, "stop", Stopping),
                (Stopping, "gone", Stopped),
                (Stopped, "launch", Starting),
                (CrashLooping, "operator-reset", Starting),
            ]
        );
    }

    #[test]
    fn crash_looping_is_left_only_by_an_operator_reset() {
        for event in events() {
            let after = CrashLooping.on(&event);
            match event {
                LifecycleEvent::Reset(_) => assert_eq!(after, Ok(Starting)),
                _ => assert!(after.is_err(), "{event:?} left crash-looping"),
            }
        }
    }

    #[test]
    fn names_are_the_wire_names() {
        assert_eq!(serde_json::to_value(CrashLooping).unwrap(), "crash-looping");
        assert_eq!(CrashLooping.to_string(), "crash-looping");
        assert!(Degraded.is_usable() && Healthy.is_usable() && !Starting.is_usable());
    }
}
