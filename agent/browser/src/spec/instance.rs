//! AIP-63 §3, an instance as a host reports it: its key, and the shapes of the provider
//! primitives (`BrowserInstance`, `health()`, `stop()`), which the tables fix as
//! `{id, state, endpoints, pid?, wasAlreadyRunning}`, `{state, reason?, checkedAt, bootId?}` and
//! `{swept}`.

use std::fmt;

use pap_shared::UnixTime;
use serde::{Deserialize, Serialize};

use super::lifecycle::InstanceState;
use super::supervisor::Health;

/// An instance key (provider id plus profile or label): letters, digits, `-` and `_`, at most
/// 64 of them, so it can name a profile directory and a process marker as it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InstanceKey(String);

impl InstanceKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for InstanceKey {
    type Error = InvalidInstanceKey;

    fn try_from(text: &str) -> Result<Self, InvalidInstanceKey> {
        let fits = pap_shared::is_base64url(text, 1, 64);
        fits.then(|| Self(text.to_owned())).ok_or(InvalidInstanceKey)
    }
}

impl TryFrom<String> for InstanceKey {
    type Error = InvalidInstanceKey;

    fn try_from(text: String) -> Result<Self, InvalidInstanceKey> {
        Self::try_from(text.as_str())
    }
}

impl From<InstanceKey> for String {
    fn from(key: InstanceKey) -> Self {
        key.0
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An instance key that is not `[A-Za-z0-9_-]{1,64}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an instance key is 1 to 64 letters, digits, '-' or '_'")]
pub struct InvalidInstanceKey;

/// The endpoints an instance was found on (`endpoints`, with `discovered` ones filled in).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceEndpoints {
    /// Its REST endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest: Option<String>,
    /// Its CDP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdp: Option<String>,
}

/// What `launch` returns: the `BrowserInstance` of the tables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    /// The instance key.
    pub id: InstanceKey,
    /// Its state now.
    pub state: InstanceState,
    /// Where it is reached.
    pub endpoints: InstanceEndpoints,
    /// Its process, when it has one here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// A healthy instance already ran under this key (L2): nothing was spawned or changed.
    pub was_already_running: bool,
    /// Its boot (changes at every launch, L12).
    pub boot_id: u64,
}

/// What `health()` answers on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// The state (L1).
    pub state: InstanceState,
    /// The last failure, while crash-looping or stopped after one (L6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the state was last established.
    #[serde(with = "pap_shared::rfc3339")]
    pub checked_at: UnixTime,
    /// Its boot (L12).
    pub boot_id: u64,
}

impl From<&Health> for HealthReport {
    fn from(health: &Health) -> Self {
        let seconds = i64::try_from(health.checked_at / 1000).unwrap_or(i64::MAX);
        Self {
            state: health.state,
            reason: health.reason.clone(),
            checked_at: UnixTime::from_secs(seconds),
            boot_id: health.boot_id,
        }
    }
}

/// What `stop` answers: how many processes the sweep ended (L5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopped {
    /// Processes ended by the stop and its sweep.
    pub swept: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_keys_are_letters_digits_dashes_and_underscores() {
        for good in ["cli", "e2e", "pap-chromium_1", &"a".repeat(64)] {
            assert_eq!(InstanceKey::try_from(good).unwrap().as_str(), good);
        }
        for bad in ["", "../x", "a b", "a/b", "é", &"a".repeat(65)] {
            assert_eq!(InstanceKey::try_from(bad), Err(InvalidInstanceKey), "{bad:?}");
        }
        assert!(serde_json::from_str::<InstanceKey>("\"../x\"").is_err());
    }

    #[test]
    fn the_wire_shapes_are_the_tables() {
        let info = InstanceInfo {
            id: InstanceKey::try_from("cli").unwrap(),
            state: InstanceState::Healthy,
            endpoints: InstanceEndpoints {
                rest: None,
                cdp: Some("ws://127.0.0.1:9222/devtools/browser/x".into()),
            },
            pid: Some(42),
            was_already_running: true,
            boot_id: 3,
        };
        assert_eq!(
            serde_json::to_value(&info).unwrap(),
            serde_json::json!({"id": "cli", "state": "healthy", "endpoints": {"cdp": "ws://127.0.0.1:9222/devtools/browser/x"},
                "pid": 42, "wasAlreadyRunning": true, "bootId": 3})
        );
        let health = Health {
            state: InstanceState::CrashLooping,
            reason: Some("exited".into()),
            checked_at: 1_764_504_000_250,
            boot_id: 2,
        };
        assert_eq!(
            serde_json::to_value(HealthReport::from(&health)).unwrap(),
            serde_json::json!({"state": "crash-looping", "reason": "exited", "checkedAt": "2025-11-30T12:00:00Z", "bootId": 2})
        );
        assert_eq!(
            serde_json::to_value(Stopped { swept: 4 }).unwrap(),
            serde_json::json!({"swept": 4})
        );
    }
}
