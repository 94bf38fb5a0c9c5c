//! The consent ledger (AIP-63 C10, C11): one JSON record per line, a monotonic `seq`, `prev` the
//! SHA-256 of the previous line, appended under an exclusive file lock with fsync, plus a head
//! anchor (the last `seq` and the last line's hash) so a truncated ledger is detected too.
//! `verify` reports the first broken line. Records have the closed shape of the schema's
//! `$defs/ledgerRecord`: no field can hold a cookie or storage value (C9).
//!
//! The SHA-256 chain alone can be rewritten consistently by anyone who can write the file
//! (security review L9). So the agent's own ledger ([`Ledger::open`]) is also anchored apart, in
//! `keys/ledger.anchor`: the last committed `(seq, hash)` and the one being written, under an
//! HMAC whose key (`keys/ledger.key`) only the agent reads. A consistent rewrite, or deleting
//! both ledger files, no longer verifies; and an append is two-phase (anchor "pending", line,
//! anchor "committed"), so a crash at any point leaves a ledger that verifies, and a torn last
//! line the pending anchor names is cut off at the next append rather than bricking it.
//!
//! An append to the agent's own ledger reads only its end (the last two lines, found backwards):
//! the keyed anchor vouches for the last line, the line before it for its `seq` and `prev`, so an
//! append costs the same at ten records or a million. Lines further back are `verify`'s to check:
//! an edit there breaks the chain at that line whatever is appended after it. Anything unusual at
//! the end (a line that does not parse, a chain that does not hold) falls back to the full walk,
//! which names the broken line.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use pap_shared::UnixTime;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::store::{private_dir, write_private};

/// Who caused a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actor {
    /// A person, an agent's tool call, or the host itself.
    pub kind: ActorKind,
    /// The channel (`cli`, `tool`, `expiry`, `pairing-revoked`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The paired device, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
}

/// The kind of actor (`$defs/ledgerRecord` `actor.kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorKind {
    /// A person on an operator channel.
    Human,
    /// An agent's tool call (C7: it may refresh, revoke and be denied, nothing else).
    Agent,
    /// The host itself (an expiry, a revoked pairing).
    System,
}

/// What a revoke did to material derived for the scope (C8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derived {
    /// On this host.
    pub local: LocalOutcome,
    /// At remote sinks.
    pub remote: RemoteOutcome,
}

/// What a revoke did locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalOutcome {
    /// Stored or live material was deleted.
    Deleted,
    /// There was nothing to delete.
    None,
}

/// What a remote sink said when asked to end its session (C8). Ordered from best to worst, so
/// the record of a grant with several sinks carries the worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteOutcome {
    /// The grant had no remote sink.
    NotApplicable,
    /// The remote provider confirmed it ended the session.
    Confirmed,
    /// It could not be reached.
    Unavailable,
    /// It answered with a failure.
    Failed,
}

/// What a record says happened: each event carries what `$defs/ledgerRecord` requires of it,
/// and no field can hold a cookie or storage value (C9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A grant was made (C1-C5).
    Grant {
        /// The grant.
        grant_id: String,
        /// The consent session it was given in.
        session_id: String,
        /// Its domains, or `None` for the full profile (C3).
        domains: Option<Vec<String>>,
        /// How many cookies it took.
        cookie_count: u64,
        /// Salted SHA-256 of the cookie names.
        name_hashes: Vec<String>,
    },
    /// Material was re-read within a grant (C7).
    Refresh {
        /// The grant.
        grant_id: String,
        /// The domains re-read (empty with `full_profile`).
        domains: Vec<String>,
        /// The whole profile was re-read.
        full_profile: bool,
        /// How many cookies the grant holds now.
        cookie_count: u64,
        /// Salted SHA-256 of the names re-read.
        name_hashes: Vec<String>,
    },
    /// A grant, or some of its domains, was revoked (C8).
    Revoke {
        /// The grant.
        grant_id: String,
        /// The domains revoked; `None` for the whole grant.
        domains: Option<Vec<String>>,
        /// Both outcomes.
        derived: Derived,
        /// Why something could not be cleaned, if so.
        reason: Option<String>,
    },
    /// A human acknowledged a remote sink (C6).
    SinkAck {
        /// The grant.
        grant_id: String,
        /// The sink.
        sink_id: String,
        /// Who operates it.
        reason: Option<String>,
    },
    /// An agent's attempt was refused (C7).
    Deny {
        /// The grant it concerned, if any.
        grant_id: Option<String>,
        /// What was refused.
        reason: String,
    },
}

impl Event {
    /// The event's name (`sink-ack`).
    pub fn kind(&self) -> EventKind {
        match self {
            Self::Grant { .. } => EventKind::Grant,
            Self::Refresh { .. } => EventKind::Refresh,
            Self::Revoke { .. } => EventKind::Revoke,
            Self::SinkAck { .. } => EventKind::SinkAck,
            Self::Deny { .. } => EventKind::Deny,
        }
    }

    /// The grant concerned, if any.
    pub fn grant_id(&self) -> Option<&str> {
        match self {
            Self::Grant { grant_id, .. }
            | Self::Refresh { grant_id, .. }
            | Self::Revoke { grant_id, .. }
            | Self::SinkAck { grant_id, .. } => Some(grant_id),
            Self::Deny { grant_id, .. } => grant_id.as_deref(),
        }
    }
}

/// The five events (C10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// `grant`.
    Grant,
    /// `refresh`.
    Refresh,
    /// `revoke`.
    Revoke,
    /// `sink-ack`.
    SinkAck,
    /// `deny`.
    Deny,
}

/// A record to append: who, and what; the ledger sets `seq`, `at` and `prev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Who.
    pub actor: Actor,
    /// What.
    pub event: Event,
}

/// A record as the ledger holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its place, from 0 without gaps.
    pub seq: u64,
    /// When it was appended.
    pub at: UnixTime,
    /// The SHA-256 of the line before (absent on the first).
    pub prev: Option<String>,
    /// Who and what.
    pub entry: Entry,
}

/// The longest `reason` a record carries (`$defs/ledgerRecord`).
pub const MAX_REASON: usize = 500;

/// One line of the ledger, field for field `$defs/ledgerRecord` (closed): what is written and
/// read. [`Record`] is made from it only when the event's rules hold.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line {
    seq: u64,
    #[serde(with = "pap_shared::rfc3339")]
    at: UnixTime,
    event: EventKind,
    actor: Actor,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    grant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    domains: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    full_profile: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cookie_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name_hashes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sink_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    derived: Option<Derived>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prev: Option<String>,
}

impl From<&Record> for Line {
    fn from(record: &Record) -> Self {
        let mut line = Line {
            seq: record.seq,
            at: record.at,
            event: record.entry.event.kind(),
            actor: record.entry.actor.clone(),
            grant_id: record.entry.event.grant_id().map(str::to_owned),
            session_id: None,
            domains: None,
            full_profile: None,
            cookie_count: None,
            name_hashes: None,
            sink_id: None,
            derived: None,
            reason: None,
            prev: record.prev.clone(),
        };
        match &record.entry.event {
            Event::Grant {
                session_id,
                domains,
                cookie_count,
                name_hashes,
                ..
            } => {
                line.session_id = Some(session_id.clone());
                line.full_profile = domains.is_none().then_some(true);
                line.domains = domains.clone();
                line.cookie_count = Some(*cookie_count);
                line.name_hashes = Some(name_hashes.clone());
            }
            Event::Refresh {
                domains,
                full_profile,
                cookie_count,
                name_hashes,
                ..
            } => {
                line.domains = Some(domains.clone());
                line.full_profile = full_profile.then_some(true);
                line.cookie_count = Some(*cookie_count);
                line.name_hashes = Some(name_hashes.clone());
            }
            Event::Revoke {
                domains,
                derived,
                reason,
                ..
            } => {
                line.domains = domains.clone();
                line.derived = Some(*derived);
                line.reason = reason.clone();
            }
            Event::SinkAck { sink_id, reason, .. } => {
                line.sink_id = Some(sink_id.clone());
                line.reason = reason.clone();
            }
            Event::Deny { reason, .. } => line.reason = Some(reason.clone()),
        }
        line
    }
}

/// Why a line is not a record of `$defs/ledgerRecord`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not JSON of the closed shape; serde's words, without the line's text.
    #[error("not a record: {0}")]
    Shape(String),
    /// The event lacks a field it requires.
    #[error("a {event:?} record needs {field}")]
    Missing {
        /// The event.
        event: EventKind,
        /// The field (`grantId`).
        field: &'static str,
    },
    /// This kind of actor cannot cause this event (C7: an agent never grants).
    #[error("a {actor:?} actor cannot cause a {event:?} record")]
    ActorMayNot {
        /// Who.
        actor: ActorKind,
        /// What.
        event: EventKind,
    },
    /// `fullProfile` is `false` (it is `true` or absent), or beside `domains` on a grant.
    #[error("a record names its domains or the full profile (true), never both or false")]
    Scope,
    /// A hash is not SHA-256 in lowercase hex.
    #[error("{0} must be SHA-256 in lowercase hex")]
    Hash(&'static str),
    /// The reason is longer than [`MAX_REASON`].
    #[error("a reason has at most {MAX_REASON} characters")]
    ReasonTooLong,
    /// A domain is not a lowercase host name of two labels or more (`$defs/domain`): no
    /// wildcard, no leading dot, no IP literal.
    #[error("a domain is a lowercase host name (no wildcard)")]
    Domain,
}

/// `$defs/domain`'s syntax: lowercase labels of letters, digits and inner hyphens, at least
/// two, a top label of letters (or a punycode one), 253 characters at most. (The Public Suffix
/// List is checked when a grant is made, not when a record is read back: a later list must not
/// break an old ledger.)
fn is_domain(name: &str) -> bool {
    let labels: Vec<&str> = name.split('.').collect();
    let label = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let top = labels.last().is_some_and(|top| {
        (2..=63).contains(&top.len()) && top.bytes().all(|b| b.is_ascii_lowercase())
            || top.strip_prefix("xn--").is_some_and(|rest| {
                (1..=59).contains(&rest.len())
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    });
    name.len() <= 253 && labels.len() >= 2 && labels.iter().all(label) && top
}

impl TryFrom<Line> for Record {
    type Error = RecordError;

    /// The schema's per-event rules: each event's required fields, `fullProfile` only `true`
    /// and never beside `domains` on a grant, an agent only refreshing, revoking or denied,
    /// a sink acknowledged only by a human, hashes in hex, a reason of at most 500 characters.
    fn try_from(line: Line) -> Result<Self, RecordError> {
        let event = line.event;
        let missing = |field: &'static str| RecordError::Missing { event, field };
        let hex64 = |h: &String| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if line.full_profile == Some(false) {
            return Err(RecordError::Scope);
        }
        if line.name_hashes.as_ref().is_some_and(|h| !h.iter().all(hex64)) {
            return Err(RecordError::Hash("nameHashes"));
        }
        if line.prev.as_ref().is_some_and(|p| !hex64(p)) {
            return Err(RecordError::Hash("prev"));
        }
        if line.reason.as_ref().is_some_and(|r| r.chars().count() > MAX_REASON) {
            return Err(RecordError::ReasonTooLong);
        }
        if line
            .domains
            .as_ref()
            .is_some_and(|d| !d.iter().all(|name| is_domain(name)))
        {
            return Err(RecordError::Domain);
        }
        let allowed = match line.actor.kind {
            ActorKind::Agent => matches!(line.event, EventKind::Refresh | EventKind::Revoke | EventKind::Deny),
            ActorKind::System => line.event != EventKind::SinkAck,
            ActorKind::Human => true,
        };
        if !allowed {
            return Err(RecordError::ActorMayNot {
                actor: line.actor.kind,
                event,
            });
        }
        let grant_id = line.grant_id.clone().ok_or_else(|| missing("grantId"));
        let event = match line.event {
            EventKind::Grant => {
                if line.domains.is_some() == line.full_profile.is_some() {
                    return Err(RecordError::Scope);
                }
                Event::Grant {
                    grant_id: grant_id?,
                    session_id: line.session_id.ok_or_else(|| missing("sessionId"))?,
                    domains: line.domains,
                    cookie_count: line.cookie_count.ok_or_else(|| missing("cookieCount"))?,
                    name_hashes: line.name_hashes.unwrap_or_default(),
                }
            }
            EventKind::Refresh => Event::Refresh {
                grant_id: grant_id?,
                domains: line.domains.ok_or_else(|| missing("domains"))?,
                full_profile: line.full_profile.is_some(),
                cookie_count: line.cookie_count.ok_or_else(|| missing("cookieCount"))?,
                name_hashes: line.name_hashes.unwrap_or_default(),
            },
            EventKind::Revoke => Event::Revoke {
                grant_id: grant_id?,
                domains: line.domains,
                derived: line.derived.ok_or_else(|| missing("derived"))?,
                reason: line.reason,
            },
            EventKind::SinkAck => {
                if line.actor.kind != ActorKind::Human {
                    return Err(RecordError::ActorMayNot {
                        actor: line.actor.kind,
                        event,
                    });
                }
                Event::SinkAck {
                    grant_id: grant_id?,
                    sink_id: line.sink_id.ok_or_else(|| missing("sinkId"))?,
                    reason: line.reason,
                }
            }
            EventKind::Deny => Event::Deny {
                grant_id: line.grant_id,
                reason: line.reason.ok_or_else(|| missing("reason"))?,
            },
        };
        Ok(Record {
            seq: line.seq,
            at: line.at,
            prev: line.prev,
            entry: Entry {
                actor: line.actor,
                event,
            },
        })
    }
}

impl Record {
    /// The record as its ledger line (JSON, no newline).
    pub fn to_line(&self) -> String {
        // A struct of strings, numbers and enums always serialises.
        serde_json::to_string(&Line::from(self)).unwrap_or_default()
    }

    /// Parses one ledger line: JSON of the closed shape, then the event's rules.
    pub fn parse_line(line: &str) -> Result<Self, RecordError> {
        let line: Line = serde_json::from_str(line).map_err(|e| {
            // serde names the field or the kind of mismatch; the line's text is never quoted.
            let text = e.to_string();
            let cut = text.find(" at line ").map_or(text.as_str(), |at| &text[..at]);
            RecordError::Shape(cut.split('"').next().unwrap_or_default().trim().to_owned())
        })?;
        Record::try_from(line)
    }
}

#[derive(Serialize, Deserialize)]
struct Head {
    seq: u64,
    sha256: String,
}

/// A line's position and hash, as an anchor records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Mark {
    seq: u64,
    sha256: String,
}

/// What `keys/ledger.anchor` holds: the last committed line, the one being written if any,
/// and the HMAC over both.
#[derive(Serialize, Deserialize)]
struct AnchorFile {
    committed: Option<Mark>,
    pending: Option<Mark>,
    mac: String,
}

/// Where the agent's ledger is anchored, apart from it.
#[derive(Clone, Debug)]
struct Anchor {
    path: PathBuf,
    key: PathBuf,
}

type HmacSha256 = hmac::Hmac<Sha256>;

impl Anchor {
    fn mac(key: &[u8], committed: Option<&Mark>, pending: Option<&Mark>) -> String {
        use hmac::Mac as _;
        let mut mac = <HmacSha256 as hmac::Mac>::new_from_slice(key).expect("HMAC takes any key length");
        for mark in [committed, pending] {
            match mark {
                Some(mark) => mac.update(format!("{}:{};", mark.seq, mark.sha256).as_bytes()),
                None => mac.update(b"-;"),
            }
        }
        hex(&mac.finalize().into_bytes())
    }

    /// The key, made (32 random bytes, 0600) when `create` and missing.
    fn key(&self, create: bool) -> io::Result<Option<zeroize::Zeroizing<Vec<u8>>>> {
        match std::fs::read(&self.key) {
            Ok(key) => Ok(Some(zeroize::Zeroizing::new(key))),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                let mut key = zeroize::Zeroizing::new(vec![0u8; 32]);
                pap_shared::Rng::fill(&pap_shared::SystemRng, &mut key);
                write_private(&self.key, &key)?;
                Ok(Some(key))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write(&self, key: &[u8], committed: Option<Mark>, pending: Option<Mark>) -> io::Result<()> {
        let mac = Self::mac(key, committed.as_ref(), pending.as_ref());
        let file = AnchorFile {
            committed,
            pending,
            mac,
        };
        write_private(&self.path, &serde_json::to_vec(&file).map_err(io::Error::from)?)
    }

    /// The anchor as written, if its MAC holds; `Ok(None)` when the agent never anchored.
    fn read(&self) -> Result<Option<AnchorFile>, String> {
        let key = self
            .key(false)
            .map_err(|e| format!("the anchor key cannot be read: {e}"))?;
        let file = match std::fs::read(&self.path) {
            Ok(bytes) => Some(serde_json::from_slice::<AnchorFile>(&bytes).map_err(|_| "the anchor is not readable")?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("the anchor cannot be read: {e}")),
        };
        match (key, file) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err("the anchor's key is missing".into()),
            (Some(_), None) => Err("the anchor is missing (the ledger was anchored)".into()),
            (Some(key), Some(file)) => {
                let expected = Self::mac(&key, file.committed.as_ref(), file.pending.as_ref());
                if expected.as_bytes().ct_eq(file.mac.as_bytes()).into() {
                    Ok(Some(file))
                } else {
                    Err("the anchor does not verify (rewritten without the key)".into())
                }
            }
        }
    }
}

/// The ledger file as read: its sound records, and a torn last line if one was found.
struct Walked {
    count: u64,
    last: Option<String>,
    /// The `prev` of the last record: the hash of the line before it.
    last_prev: Option<String>,
    /// Where a torn last line starts (no newline, not a record), to cut at the next append.
    torn_at: Option<u64>,
}

/// The ledger of one agent state directory.
#[derive(Clone, Debug)]
pub struct Ledger {
    path: PathBuf,
    head: PathBuf,
    anchor: Option<Anchor>,
}

impl Ledger {
    /// The agent's ledger: `state_dir/consent/ledger.jsonl` (made 0700; files 0600), anchored
    /// in `state_dir/keys/` (see the module's notes).
    pub fn open(state_dir: &Path) -> io::Result<Self> {
        let keys = private_dir(&state_dir.join("keys"))?;
        let mut ledger = Self::in_dir(&state_dir.join("consent"))?;
        ledger.anchor = Some(Anchor {
            path: keys.join("ledger.anchor"),
            key: keys.join("ledger.key"),
        });
        Ok(ledger)
    }

    /// The ledger in `dir` itself (`ledger.jsonl`, `ledger.head`), checked by its chain and head
    /// only: a copy to check, say, or another provider's.
    pub fn in_dir(dir: &Path) -> io::Result<Self> {
        let dir = private_dir(dir)?;
        Ok(Self {
            path: dir.join("ledger.jsonl"),
            head: dir.join("ledger.head"),
            anchor: None,
        })
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` at `at` (RFC 3339): under an exclusive lock, the next `seq`, `prev` the
    /// hash of the last line, fsynced, then the head anchor replaced (and, for the agent's own
    /// ledger, the anchor apart: pending before the line, committed after). Refuses a record
    /// that does not fit `$defs/ledgerRecord` (an agent granting, a deny without reason, …).
    pub fn append(&self, entry: &Entry, at: UnixTime) -> Result<u64, LedgerError> {
        let mut options = OpenOptions::new();
        options.create(true).append(true).read(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&self.path).map_err(LedgerError::Io)?;
        // C11: a ledger created loosely by something else is tightened, not trusted as is.
        #[cfg(unix)]
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(LedgerError::Io)?;
        file.lock().map_err(LedgerError::Io)?;
        let result = self.append_locked(&mut file, entry, at);
        let _ = file.unlock();
        result
    }

    fn append_locked(&self, file: &mut File, entry: &Entry, at: UnixTime) -> Result<u64, LedgerError> {
        // The ledger as it stands must be sound before anything is added to it: its end under
        // the keyed anchor, or else every line.
        let walked = self.checked_end(file).map_err(LedgerError::Broken)?;
        if let Some(torn_at) = walked.torn_at {
            // A crash tore the last append; the anchor never committed it: cut it off.
            file.set_len(torn_at).map_err(LedgerError::Io)?;
        }
        let (count, last) = (walked.count, walked.last);
        let record = Record {
            seq: count,
            at,
            prev: last.clone(),
            entry: entry.clone(),
        };
        let mut line = record.to_line();
        // What is written must read back as the same record (an agent granting, a deny
        // without a reason, a reason too long: refused here, and nothing is written).
        match Record::parse_line(&line) {
            Ok(read) if read == record => {}
            Ok(_) => {
                return Err(LedgerError::Invalid(RecordError::Shape(
                    "it does not read back the same".into(),
                )));
            }
            Err(error) => return Err(LedgerError::Invalid(error)),
        }
        let hash = hex(&Sha256::digest(line.as_bytes()));
        let committed = last.map(|sha256| Mark { seq: count - 1, sha256 });
        let next = Mark {
            seq: count,
            sha256: hash.clone(),
        };
        let key = match &self.anchor {
            Some(anchor) => {
                let key = anchor
                    .key(true)
                    .map_err(LedgerError::Io)?
                    .ok_or_else(|| LedgerError::Io(io::Error::other("the anchor key could not be made")))?;
                anchor
                    .write(&key, committed, Some(next.clone()))
                    .map_err(LedgerError::Io)?;
                Some(key)
            }
            None => None,
        };
        line.push('\n');
        if ends_without_line_end(file).map_err(LedgerError::Io)? {
            // A whole last line whose line end a crash cut off: end it before this one.
            line.insert(0, '\n');
        }
        file.write_all(line.as_bytes()).map_err(LedgerError::Io)?;
        file.sync_all().map_err(LedgerError::Io)?;
        let head = serde_json::to_vec(&Head {
            seq: count,
            sha256: hash,
        })
        .map_err(|e| LedgerError::Io(e.into()))?;
        write_private(&self.head, &head).map_err(LedgerError::Io)?;
        if let (Some(anchor), Some(key)) = (&self.anchor, key) {
            anchor.write(&key, Some(next), None).map_err(LedgerError::Io)?;
        }
        Ok(count)
    }

    /// The records of a sound ledger, in order (for lookups such as a sink-ack's `seq`).
    pub fn records(&self) -> Result<Vec<Record>, Broken> {
        let walked = self.checked()?;
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Broken {
                    line: 1,
                    why: format!("the ledger cannot be read: {e}"),
                });
            }
        };
        Ok(text
            .lines()
            .take(usize::try_from(walked.count).unwrap_or(usize::MAX))
            .filter_map(|line| Record::parse_line(line).ok())
            .collect())
    }

    /// Checks the whole ledger: each line a valid record, `seq` from 0 without gaps, `prev` the
    /// hash of the line before, and the last line matching the head anchor (and, for the
    /// agent's own ledger, the keyed anchor apart). Reports the first broken line (1-based).
    pub fn verify(&self) -> Result<Summary, Broken> {
        let walked = self.checked()?;
        Ok(Summary {
            records: walked.count,
            last_hash: walked.last,
        })
    }

    /// [`Self::checked`] for an append: with the keyed anchor, only the ledger's end is read
    /// (see the module's notes); without it, or when the end is anything but sound, every line.
    fn checked_end(&self, file: &mut File) -> Result<Walked, Broken> {
        if let Some(anchor) = &self.anchor {
            let anchor = anchor.read().map_err(|why| Broken { line: 1, why })?;
            if let Some(anchor) = anchor
                && let Some(end) = read_end(file, anchor.pending.as_ref())
                && check_anchor(&end, &anchor).is_ok()
            {
                return Ok(end);
            }
        }
        self.checked()
    }

    fn checked(&self) -> Result<Walked, Broken> {
        let anchor = match &self.anchor {
            Some(anchor) => anchor.read().map_err(|why| Broken { line: 1, why })?,
            None => None,
        };
        let pending = anchor.as_ref().and_then(|a| a.pending.clone());
        let walked = self.walk(pending.as_ref())?;
        match anchor {
            Some(anchor) => check_anchor(&walked, &anchor)?,
            None => self.check_head(&walked)?,
        }
        Ok(walked)
    }

    /// Reads every line: the chain, and a torn last line when `pending` names its `seq`.
    fn walk(&self, pending: Option<&Mark>) -> Result<Walked, Broken> {
        let text = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(Broken {
                    line: 1,
                    why: format!("the ledger cannot be read: {e}"),
                });
            }
        };
        let mut walked = Walked {
            count: 0,
            last: None,
            last_prev: None,
            torn_at: None,
        };
        let mut offset = 0u64;
        let mut rest = text.as_slice();
        while !rest.is_empty() {
            let number = usize::try_from(walked.count + 1).unwrap_or(usize::MAX);
            let broken = |why: String| Broken { line: number, why };
            let (raw, terminated) = match rest.iter().position(|b| *b == b'\n') {
                Some(end) => (&rest[..end], true),
                None => (rest, false),
            };
            let parsed = std::str::from_utf8(raw)
                .map_err(|_| "unreadable: not UTF-8".to_owned())
                .and_then(|line| Record::parse_line(line).map(|r| (line, r)).map_err(|e| e.to_string()));
            let (line, record) = match parsed {
                Ok(parsed) => parsed,
                // The last line, cut short mid-write, of the append the anchor was told of.
                Err(_) if !terminated && pending.is_some_and(|p| p.seq == walked.count) => {
                    walked.torn_at = Some(offset);
                    break;
                }
                Err(why) => return Err(broken(why)),
            };
            if record.seq != walked.count {
                return Err(broken(format!("seq is {}, expected {}", record.seq, walked.count)));
            }
            if record.prev != walked.last {
                return Err(broken(
                    "prev is not the hash of the line before (edited or deleted)".into(),
                ));
            }
            walked.last_prev = record.prev.clone();
            walked.last = Some(hex(&Sha256::digest(line.as_bytes())));
            walked.count += 1;
            let consumed = raw.len() + usize::from(terminated);
            offset += u64::try_from(consumed).unwrap_or(u64::MAX);
            rest = &rest[consumed..];
        }
        Ok(walked)
    }

    /// The head file next to the ledger: a copy's only anchor.
    fn check_head(&self, walked: &Walked) -> Result<(), Broken> {
        let head: Option<Head> = std::fs::read(&self.head)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let count = walked.count;
        match (&head, &walked.last) {
            (None, None) => Ok(()),
            (Some(head), Some(hash)) if head.seq + 1 == count && &head.sha256 == hash => Ok(()),
            (Some(head), _) if head.seq + 1 > count => Err(Broken {
                line: usize::try_from(count + 1).unwrap_or(usize::MAX),
                why: format!("truncated: the head anchor records {} lines", head.seq + 1),
            }),
            _ => Err(Broken {
                line: usize::try_from(count.max(1)).unwrap_or(usize::MAX),
                why: "the last line does not match the head anchor".into(),
            }),
        }
    }
}

/// Whether `file` is not empty and its last byte is not a line end.
fn ends_without_line_end(file: &mut File) -> io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// How much of the ledger's end is read at a time, going backwards.
const END_CHUNK: u64 = 16 * 1024;

/// The end of the ledger in `file`, read backwards: the last record (its `seq`, hash and
/// `prev`), checked against the line before it, and a torn last line `pending` names. `None`
/// when anything there is not as an append leaves it (the caller then walks every line).
fn read_end(file: &mut File, pending: Option<&Mark>) -> Option<Walked> {
    let len = file.metadata().ok()?.len();
    // Back from the end until three line ends are in hand (two whole lines after the first),
    // or the file's start.
    let mut start = len;
    let mut bytes: Vec<u8> = Vec::new();
    while start > 0 && bytes.iter().filter(|b| **b == b'\n').count() < 3 {
        let step = END_CHUNK.min(start);
        start -= step;
        let mut chunk = vec![0u8; usize::try_from(step).ok()?];
        file.seek(SeekFrom::Start(start)).ok()?;
        file.read_exact(&mut chunk).ok()?;
        chunk.extend_from_slice(&bytes);
        bytes = chunk;
    }
    // Not at the start: the first piece is the tail of an earlier line.
    let skip = if start > 0 {
        bytes.iter().position(|b| *b == b'\n')? + 1
    } else {
        0
    };
    let text = &bytes[skip..];
    let whole = text.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
    let (body, trailing) = text.split_at(whole);
    let mut lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    lines.pop(); // after the last line end
    let mut torn_at = None;
    if !trailing.is_empty() {
        // An unterminated last piece: a whole record written without its line end counts as a
        // line (as the full walk counts it); else it must be the torn append `pending` names.
        if std::str::from_utf8(trailing)
            .ok()
            .and_then(|t| Record::parse_line(t).ok())
            .is_some()
        {
            lines.push(trailing);
        } else {
            let next = match lines.last() {
                Some(line) => Record::parse_line(std::str::from_utf8(line).ok()?).ok()?.seq + 1,
                None => 0,
            };
            pending.filter(|p| p.seq == next)?;
            torn_at = Some(start + u64::try_from(skip + whole).ok()?);
        }
    }
    let Some((last, before)) = lines.split_last() else {
        // No whole line: an empty ledger (perhaps with a torn first append).
        return (start == 0).then_some(Walked {
            count: 0,
            last: None,
            last_prev: None,
            torn_at,
        });
    };
    let record = Record::parse_line(std::str::from_utf8(last).ok()?).ok()?;
    match before.last() {
        Some(previous) => {
            let earlier = Record::parse_line(std::str::from_utf8(previous).ok()?).ok()?;
            let chained = record.prev.as_deref() == Some(hex(&Sha256::digest(previous)).as_str());
            (earlier.seq + 1 == record.seq && chained).then_some(())?;
        }
        None => (start == 0 && record.seq == 0 && record.prev.is_none()).then_some(())?,
    }
    Some(Walked {
        count: record.seq + 1,
        last: Some(hex(&Sha256::digest(last))),
        last_prev: record.prev,
        torn_at,
    })
}

/// The keyed anchor against the ledger as read: its committed line is the last, or (a crash
/// after the line, before the commit) its pending line is the last and its committed the one
/// before.
fn check_anchor(walked: &Walked, anchor: &AnchorFile) -> Result<(), Broken> {
    let count = walked.count;
    let is = |mark: Option<&Mark>, count: u64, hash: Option<&String>| match (mark, hash) {
        (None, None) => count == 0,
        (Some(mark), Some(hash)) => mark.seq + 1 == count && &mark.sha256 == hash,
        _ => false,
    };
    if is(anchor.committed.as_ref(), count, walked.last.as_ref()) {
        return Ok(());
    }
    let last_is_pending = is(anchor.pending.as_ref(), count, walked.last.as_ref());
    if last_is_pending
        && is(
            anchor.committed.as_ref(),
            count.saturating_sub(1),
            walked.last_prev.as_ref(),
        )
    {
        return Ok(());
    }
    let recorded = anchor.committed.as_ref().map_or(0, |m| m.seq + 1);
    if recorded > count {
        return Err(Broken {
            line: usize::try_from(count + 1).unwrap_or(usize::MAX),
            why: format!("truncated: the head anchor records {recorded} lines"),
        });
    }
    Err(Broken {
        line: usize::try_from(count.max(1)).unwrap_or(usize::MAX),
        why: "the last line does not match the head anchor".into(),
    })
}

/// A sound ledger's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// How many records.
    pub records: u64,
    /// The hash of the last line.
    pub last_hash: Option<String>,
}

/// Where the ledger breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the ledger breaks at line {line}: {why}")]
pub struct Broken {
    /// The first broken line, 1-based.
    pub line: usize,
    /// What is wrong there.
    pub why: String,
}

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The ledger is already broken: nothing is appended to it.
    #[error("the ledger is broken")]
    Broken(#[source] Broken),
    /// The record does not fit `$defs/ledgerRecord`; nothing was written.
    #[error("the record is invalid")]
    Invalid(#[source] RecordError),
    /// A file operation failed.
    #[error("the ledger could not be written")]
    Io(#[source] io::Error),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
