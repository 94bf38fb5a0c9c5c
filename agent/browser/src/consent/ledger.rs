//! The consent ledger (AIP-63 C10, C11): one JSON record per line, a monotonic `seq`, `prev` the
//! SHA-256 of the previous line, appended under an exclusive file lock with fsync, plus a head
//! anchor (the last `seq` and the last line's hash) so a truncated ledger is detected too.
//! `verify` reports the first broken line. Records have the closed shape of the schema's
//! `$defs/ledgerRecord`: no field can hold a cookie or storage value (C9).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead as _, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::store::{private_dir, write_private};

/// Who caused a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// `human`, `agent` or `system`.
    pub kind: String,
    /// The channel (`cli`, `tool`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The paired device, if any.
    #[serde(default, rename = "deviceId", skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
}

/// What happened to session material derived for a revoke.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Derived {
    /// `deleted` or `none`.
    pub local: String,
    /// `confirmed`, `unavailable`, `failed` or `not-applicable`.
    pub remote: String,
}

/// A record to append: everything but `seq`, `at` and `prev`, which the ledger sets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// `grant`, `refresh`, `revoke`, `sink-ack` or `deny`.
    pub event: String,
    /// Who.
    pub actor: Option<Actor>,
    /// The grant concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// The session concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Domains (never values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
    /// A full-profile grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_profile: Option<bool>,
    /// How many cookies (never which values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_count: Option<u64>,
    /// Salted SHA-256 of cookie names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_hashes: Option<Vec<String>>,
    /// The sink acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_id: Option<String>,
    /// What a revoke deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived: Option<Derived>,
    /// Why (a deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Head {
    seq: u64,
    sha256: String,
}

/// The ledger of one agent state directory.
#[derive(Clone, Debug)]
pub struct Ledger {
    path: PathBuf,
    head: PathBuf,
}

impl Ledger {
    /// The ledger under `state_dir/consent/` (made 0700; files 0600).
    pub fn open(state_dir: &Path) -> io::Result<Self> {
        Self::in_dir(&state_dir.join("consent"))
    }

    /// The ledger in `dir` itself (`ledger.jsonl`, `ledger.head`): a copy to check, say.
    pub fn in_dir(dir: &Path) -> io::Result<Self> {
        let dir = private_dir(dir)?;
        Ok(Self {
            path: dir.join("ledger.jsonl"),
            head: dir.join("ledger.head"),
        })
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` at `at` (RFC 3339): under an exclusive lock, the next `seq`, `prev` the
    /// hash of the last line, fsynced, then the head anchor replaced. Refuses a record that does
    /// not fit `$defs/ledgerRecord` (an agent granting, a deny without reason, …).
    pub fn append(&self, entry: &Entry, at: &str) -> Result<u64, LedgerError> {
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

    fn append_locked(&self, file: &mut File, entry: &Entry, at: &str) -> Result<u64, LedgerError> {
        // The ledger as it stands must be sound before anything is added to it.
        let (count, last) = match self.verify() {
            Ok(summary) => (summary.records, summary.last_hash),
            Err(broken) => return Err(LedgerError::Broken(broken)),
        };
        let mut record = serde_json::to_value(entry).map_err(|_| LedgerError::Invalid("not serialisable".into()))?;
        record["seq"] = Value::from(count);
        record["at"] = Value::from(at);
        if let Some(prev) = last {
            record["prev"] = Value::from(prev);
        }
        check_record(&record).map_err(LedgerError::Invalid)?;
        let mut line = serde_json::to_string(&record).map_err(|_| LedgerError::Invalid("not serialisable".into()))?;
        let hash = hex(&Sha256::digest(line.as_bytes()));
        line.push('\n');
        file.write_all(line.as_bytes()).map_err(LedgerError::Io)?;
        file.sync_all().map_err(LedgerError::Io)?;
        let head = serde_json::to_vec(&Head {
            seq: count,
            sha256: hash,
        })
        .map_err(|_| LedgerError::Invalid("head".into()))?;
        write_private(&self.head, &head).map_err(LedgerError::Io)?;
        Ok(count)
    }

    /// The records of a sound ledger, in order (for lookups such as a sink-ack's `seq`).
    pub fn records(&self) -> Result<Vec<Value>, Broken> {
        self.verify()?;
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
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    }

    /// Checks the whole ledger: each line a valid record, `seq` from 0 without gaps, `prev` the
    /// hash of the line before, and the last line matching the head anchor. Reports the first
    /// broken line (1-based).
    pub fn verify(&self) -> Result<Summary, Broken> {
        let file = match File::open(&self.path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Broken {
                    line: 1,
                    why: format!("the ledger cannot be read: {e}"),
                });
            }
        };
        let head: Option<Head> = std::fs::read(&self.head)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let mut count = 0u64;
        let mut last: Option<String> = None;
        if let Some(file) = file {
            for (index, line) in io::BufReader::new(file).lines().enumerate() {
                let number = index + 1;
                let broken = |why: String| Broken { line: number, why };
                let line = line.map_err(|e| broken(format!("unreadable: {e}")))?;
                let record: Value = serde_json::from_str(&line).map_err(|_| broken("not a JSON record".into()))?;
                check_record(&record).map_err(broken)?;
                if record["seq"].as_u64() != Some(count) {
                    return Err(broken(format!("seq is {}, expected {count}", record["seq"])));
                }
                if record.get("prev").and_then(Value::as_str).map(str::to_owned) != last {
                    return Err(broken(
                        "prev is not the hash of the line before (edited or deleted)".into(),
                    ));
                }
                last = Some(hex(&Sha256::digest(line.as_bytes())));
                count += 1;
            }
        }
        match (&head, &last) {
            (None, None) => {}
            (Some(head), Some(hash)) if head.seq + 1 == count && &head.sha256 == hash => {}
            (Some(head), _) if head.seq + 1 > count => {
                return Err(Broken {
                    line: usize::try_from(count + 1).unwrap_or(usize::MAX),
                    why: format!("truncated: the head anchor records {} lines", head.seq + 1),
                });
            }
            _ => {
                return Err(Broken {
                    line: usize::try_from(count.max(1)).unwrap_or(usize::MAX),
                    why: "the last line does not match the head anchor".into(),
                });
            }
        }
        Ok(Summary {
            records: count,
            last_hash: last,
        })
    }
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
    /// The record does not fit `$defs/ledgerRecord`.
    #[error("the record is invalid: {0}")]
    Invalid(String),
    /// A file operation failed.
    #[error("the ledger could not be written")]
    Io(#[source] io::Error),
}

/// Checks a record against the schema's `$defs/ledgerRecord`.
fn check_record(record: &Value) -> Result<(), String> {
    crate::spec::schema::check_def("ledgerRecord", record)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
