//! Requests for access: what a device asks the person for when a tool call meets
//! `browser:consent_required` (AIP-63 C1: no grant covers the site). The host files one; the
//! person's console lists it; the person grants (a grant scoped to that device, C12, with the
//! lifetime they choose) or declines. A device never decides its own request.
//!
//! The requests live in `STATE/access-requests.json` (0600, read and written under an exclusive
//! lock), so a `host stdio` process that files one and the console process that answers it share
//! them. They are bounded: [`PENDING_PER_DEVICE`] waiting per device, [`KEPT`] in all, a waiting
//! one expires after [`WAITING`], and a refusal stands for [`DECLINED_STANDS`].

use std::fs::File;
use std::path::{Path, PathBuf};

use pap_shared::{Rng, UnixTime};
use serde::{Deserialize, Serialize};

/// How many of one device's requests may wait at once: past it the device is told so, and
/// nothing more is filed until the person answers one or one expires.
pub const PENDING_PER_DEVICE: usize = 8;
/// How many requests the file keeps (decided ones go first, oldest first).
pub const KEPT: usize = 256;
/// How long a request waits for the person, seconds.
pub const WAITING: i64 = 15 * 60;
/// How long the person's "no" answers the device's calls on that site, seconds: after it, a
/// call may ask again.
pub const DECLINED_STANDS: i64 = 60 * 60;
/// The longest reason kept, characters.
pub const WHY_CHARS: usize = 300;

/// One request for access.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccessRequest {
    /// Its id (`ar_` and 96 random bits).
    pub id: String,
    /// The site asked for (the host name the refusal named).
    pub domain: String,
    /// The device that asked.
    pub device_id: String,
    /// The tool whose call asked.
    pub tool: String,
    /// Why, in the call's own words (its `reason` argument), or what the call was.
    pub why: String,
    /// When it was filed.
    #[serde(with = "pap_shared::rfc3339")]
    pub asked_at: UnixTime,
    /// When it stops waiting.
    #[serde(with = "pap_shared::rfc3339")]
    pub expires_at: UnixTime,
    /// Where it stands.
    pub state: RequestState,
    /// When the person answered.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "pap_shared::rfc3339::option"
    )]
    pub decided_at: Option<UnixTime>,
    /// The grant the person made, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestState {
    /// Waiting for the person.
    Pending,
    /// The person granted it.
    Granted,
    /// The person declined it.
    Declined,
}

impl AccessRequest {
    /// Whether it still waits for the person at `now`.
    pub fn waiting(&self, now: UnixTime) -> bool {
        self.state == RequestState::Pending && now < self.expires_at
    }

    /// Whether the person's "no" still answers the device at `now`.
    fn declines(&self, now: UnixTime) -> bool {
        self.state == RequestState::Declined && self.decided_at.is_some_and(|at| now < at.plus(DECLINED_STANDS))
    }
}

/// What filing a request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Filed {
    /// A new request waits for the person.
    Asked(AccessRequest),
    /// The same device's request for the same site already waits.
    Waiting(AccessRequest),
    /// The person declined this device's request for this site, and that still stands.
    Declined(AccessRequest),
    /// The device has [`PENDING_PER_DEVICE`] requests waiting already.
    TooMany,
}

/// The person's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Granted (the grant is made after the request is claimed: [`AccessRequests::claim`]).
    Grant,
    /// Declined.
    Decline,
}

/// Why a request could not be filed or answered.
#[derive(Debug, thiserror::Error)]
pub enum RequestsError {
    /// Reading, writing or locking the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not what this host writes.
    #[error("{}: not a requests file: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: serde_json::Error,
    },
    /// No such request waits (it was answered, expired, or never was).
    #[error("no request {0} waits for an answer (answered already, or expired)")]
    NotWaiting(String),
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    requests: Vec<AccessRequest>,
}

/// The requests for access of one state directory.
#[derive(Clone, Debug)]
pub struct AccessRequests {
    path: PathBuf,
}

impl AccessRequests {
    /// The requests of the agent whose state is `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("access-requests.json"),
        }
    }

    /// Files `device_id`'s request for `domain`, made by a call of `tool` for `why`, unless one
    /// of its requests for the site waits or was declined and that still stands.
    pub fn file(
        &self,
        device_id: &str,
        domain: &str,
        tool: &str,
        why: &str,
        now: UnixTime,
        rng: &dyn Rng,
    ) -> Result<Filed, RequestsError> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        self.update(now, |record| {
            let same = |r: &&AccessRequest| r.device_id == device_id && r.domain == domain;
            // The person's "no" for a site holds for the sites under it too: a device does not
            // ask again, name by name, under `a.shop.example`, `b.shop.example`, ...
            if let Some(declined) = record.requests.iter().find(|r| {
                r.device_id == device_id && pap_browser::persons::host_is_under(&domain, &r.domain) && r.declines(now)
            }) {
                return Filed::Declined(declined.clone());
            }
            if let Some(waiting) = record.requests.iter().filter(same).find(|r| r.waiting(now)) {
                return Filed::Waiting(waiting.clone());
            }
            let waiting = record
                .requests
                .iter()
                .filter(|r| r.device_id == device_id && r.waiting(now))
                .count();
            if waiting >= PENDING_PER_DEVICE {
                return Filed::TooMany;
            }
            let mut id = [0_u8; 12];
            rng.fill(&mut id);
            let request = AccessRequest {
                id: format!("ar_{}", base64url(&id)),
                domain: domain.clone(),
                device_id: device_id.to_owned(),
                tool: one_line(tool, 64),
                why: one_line(why, WHY_CHARS),
                asked_at: now,
                expires_at: now.plus(WAITING),
                state: RequestState::Pending,
                decided_at: None,
                grant_id: None,
            };
            record.requests.push(request.clone());
            Filed::Asked(request)
        })
    }

    /// Every request, newest first (expired ones included, as the person may want to see them).
    pub fn list(&self) -> Result<Vec<AccessRequest>, RequestsError> {
        let mut requests = self.read()?.requests;
        requests.reverse();
        Ok(requests)
    }

    /// Takes the waiting request `id` out of waiting with the person's `answer`, once: a second
    /// answer to the same request (a double click, another tab) gets [`RequestsError::NotWaiting`].
    /// For a grant the caller then makes the grant and records it ([`AccessRequests::granted`]),
    /// or puts the request back if it could not ([`AccessRequests::reopen`]).
    pub fn claim(&self, id: &str, answer: Answer, now: UnixTime) -> Result<AccessRequest, RequestsError> {
        self.update(now, |record| {
            let request = record
                .requests
                .iter_mut()
                .find(|r| r.id == id && r.waiting(now))
                .ok_or_else(|| RequestsError::NotWaiting(id.to_owned()))?;
            request.state = match answer {
                Answer::Grant => RequestState::Granted,
                Answer::Decline => RequestState::Declined,
            };
            request.decided_at = Some(now);
            Ok(request.clone())
        })?
    }

    /// Records the grant made for the claimed request `id`.
    pub fn granted(&self, id: &str, grant_id: &str, now: UnixTime) -> Result<(), RequestsError> {
        self.update(now, |record| {
            if let Some(request) = record.requests.iter_mut().find(|r| r.id == id) {
                request.grant_id = Some(grant_id.to_owned());
            }
        })
    }

    /// Puts the claimed request `id` back to waiting (its grant could not be made).
    pub fn reopen(&self, id: &str, now: UnixTime) -> Result<(), RequestsError> {
        self.update(now, |record| {
            if let Some(request) = record.requests.iter_mut().find(|r| r.id == id) {
                request.state = RequestState::Pending;
                request.decided_at = None;
            }
        })
    }

    fn read(&self) -> Result<Record, RequestsError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| RequestsError::Format {
                path: self.path.clone(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(source) => Err(self.io(source)),
        }
    }

    /// Reads, changes and writes the file under an exclusive lock, trimmed to [`KEPT`].
    fn update<T>(&self, now: UnixTime, change: impl FnOnce(&mut Record) -> T) -> Result<T, RequestsError> {
        let _lock = self.lock()?;
        let mut record = self.read()?;
        let answer = change(&mut record);
        // Past the cap the oldest answered or expired requests go first, then the oldest.
        while record.requests.len() > KEPT {
            let drop = record.requests.iter().position(|r| !r.waiting(now)).unwrap_or(0);
            record.requests.remove(drop);
        }
        let bytes = serde_json::to_vec_pretty(&record).map_err(|source| RequestsError::Format {
            path: self.path.clone(),
            source,
        })?;
        pap_shared::fs::write_private(&self.path, &bytes).map_err(|e| self.io(e))?;
        Ok(answer)
    }

    fn lock(&self) -> Result<File, RequestsError> {
        pap_shared::fs::lock_exclusive(&self.path.with_extension("lock")).map_err(|e| self.io(e))
    }

    fn io(&self, source: std::io::Error) -> RequestsError {
        RequestsError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// `text` on one line, at most `max` characters (cut with `…`).
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let joined = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        // Control characters, and the invisible ones that reorder or hide text (bidi controls,
        // zero-width characters): what the person reads is what the device wrote.
        .filter(|c| !c.is_control() && !matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}'))
        .collect::<String>();
    if joined.chars().count() > max {
        let mut cut: String = joined.chars().take(max).collect();
        cut.push('…');
        cut
    } else {
        joined
    }
}

fn base64url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use pap_shared::SystemRng;

    fn at(seconds: i64) -> UnixTime {
        UnixTime::from_secs(1_800_000_000 + seconds)
    }

    #[test]
    fn a_request_waits_once_per_device_and_site_and_is_answered_once() {
        let dir = crate::scratch::Dir::new("pap-console");
        let requests = AccessRequests::at(dir.path());
        let Filed::Asked(asked) = requests
            .file(
                "dev_a",
                "Shop.Example.",
                "pap_join",
                "to buy the red shoes",
                at(0),
                &SystemRng,
            )
            .unwrap()
        else {
            panic!("not filed");
        };
        assert_eq!(asked.domain, "shop.example");
        // The same device asking again for the same site is told its request waits.
        let again = requests
            .file("dev_a", "shop.example", "pap_join", "again", at(5), &SystemRng)
            .unwrap();
        assert_eq!(again, Filed::Waiting(asked.clone()));
        // Another device's request is its own.
        assert!(matches!(
            requests
                .file("dev_b", "shop.example", "pap_join", "", at(5), &SystemRng)
                .unwrap(),
            Filed::Asked(_)
        ));
        let claimed = requests.claim(&asked.id, Answer::Decline, at(10)).unwrap();
        assert_eq!(claimed.state, RequestState::Declined);
        // Nor under a name beneath the declined site.
        assert!(matches!(
            requests
                .file("dev_a", "a.shop.example", "pap_join", "", at(12), &SystemRng)
                .unwrap(),
            Filed::Declined(_)
        ));
        // A second answer (a double click) changes nothing.
        assert!(matches!(
            requests.claim(&asked.id, Answer::Grant, at(11)),
            Err(RequestsError::NotWaiting(_))
        ));
        // The "no" answers the device's calls for an hour, then it may ask again.
        assert!(matches!(
            requests
                .file("dev_a", "shop.example", "pap_join", "", at(20), &SystemRng)
                .unwrap(),
            Filed::Declined(_)
        ));
        assert!(matches!(
            requests
                .file(
                    "dev_a",
                    "shop.example",
                    "pap_join",
                    "",
                    at(10 + DECLINED_STANDS),
                    &SystemRng
                )
                .unwrap(),
            Filed::Asked(_)
        ));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("access-requests.json"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn requests_are_bounded_per_device_and_expire() {
        let dir = crate::scratch::Dir::new("pap-console");
        let requests = AccessRequests::at(dir.path());
        for i in 0..PENDING_PER_DEVICE {
            let filed = requests
                .file("dev_a", &format!("s{i}.example"), "pap_join", "", at(0), &SystemRng)
                .unwrap();
            assert!(matches!(filed, Filed::Asked(_)));
        }
        assert_eq!(
            requests
                .file("dev_a", "more.example", "pap_join", "", at(1), &SystemRng)
                .unwrap(),
            Filed::TooMany
        );
        // Once the waiting ones expire, the device may ask again; an expired one cannot be answered.
        let first = requests.list().unwrap().pop().unwrap();
        assert!(matches!(
            requests
                .file("dev_a", "more.example", "pap_join", "", at(WAITING), &SystemRng)
                .unwrap(),
            Filed::Asked(_)
        ));
        assert!(matches!(
            requests.claim(&first.id, Answer::Grant, at(WAITING)),
            Err(RequestsError::NotWaiting(_))
        ));
    }

    #[test]
    fn the_file_keeps_at_most_its_cap_and_a_reason_is_one_bounded_line() {
        let dir = crate::scratch::Dir::new("pap-console");
        let requests = AccessRequests::at(dir.path());
        for i in 0..KEPT + 10 {
            // Each device files one and answers it at once: nothing stays waiting.
            if let Filed::Asked(r) = requests
                .file(
                    &format!("dev_{i}"),
                    "shop.example",
                    "t",
                    &"x\n".repeat(400),
                    at(0),
                    &SystemRng,
                )
                .unwrap()
            {
                assert_eq!(r.why.chars().count(), WHY_CHARS + 1);
                assert!(!r.why.contains('\n'));
                assert!(!r.why.contains('\u{202E}'));
                requests.claim(&r.id, Answer::Decline, at(1)).unwrap();
            }
        }
        assert_eq!(requests.list().unwrap().len(), KEPT);
    }
}
