//! The operations waiting for the person (AIP-7), for the person's console: every operation a
//! Session of this agent proposed (`pap_propose`, any device) is recorded in
//! `STATE/proposals.json` (0600, under a lock; ids and pages only, never a token), and the
//! console lists those the company still says are `proposed`, read with the proposing holder's
//! own Session. The person opens one on its page and confirms or cancels there, by their own
//! click; the device learns the outcome with `pap_operation`.

use std::path::{Path, PathBuf};

use pap_shared::UnixTime;
use serde::{Deserialize, Serialize};

/// How many proposals the file keeps (the oldest go first).
pub const KEPT: usize = 256;

/// One proposal as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Proposal {
    /// The device whose Session proposed it (`None`: the agent's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// The company.
    pub domain: String,
    /// The operation's id.
    pub operation_id: String,
    /// Its page.
    pub url: String,
    /// When it was proposed.
    #[serde(with = "pap_shared::rfc3339")]
    pub proposed_at: UnixTime,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    proposals: Vec<Proposal>,
}

/// The proposals of one state directory.
#[derive(Clone, Debug)]
pub struct Proposals {
    path: PathBuf,
}

impl Proposals {
    /// The proposals of the agent whose state is `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("proposals.json"),
        }
    }

    /// Records `proposal` (once per operation).
    pub fn record(&self, proposal: Proposal) -> std::io::Result<()> {
        self.update(|record| {
            if !record.proposals.iter().any(|p| p.operation_id == proposal.operation_id) {
                record.proposals.push(proposal);
            }
        })
    }

    /// Every proposal recorded, oldest first.
    pub fn list(&self) -> std::io::Result<Vec<Proposal>> {
        Ok(self.read()?.proposals)
    }

    /// Forgets the operations `done` names (they no longer wait for anyone).
    pub fn forget(&self, done: &[String]) -> std::io::Result<()> {
        self.update(|record| record.proposals.retain(|p| !done.contains(&p.operation_id)))
    }

    fn read(&self) -> std::io::Result<Record> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(e),
        }
    }

    fn update(&self, change: impl FnOnce(&mut Record)) -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let lock = options.open(self.path.with_extension("lock"))?;
        let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| std::io::Error::from(errno))?;
        let mut record = self.read()?;
        change(&mut record);
        let excess = record.proposals.len().saturating_sub(KEPT);
        record.proposals.drain(..excess);
        let bytes = serde_json::to_vec_pretty(&record).map_err(std::io::Error::other)?;
        pap_shared::fs::write_private(&self.path, &bytes)
    }
}

/// The operations waiting for the person: the newest 32 proposals recorded here (`PENDING_READ`),
/// each read from its company with the proposing holder's own Session; those no longer
/// `proposed` are forgotten. One that cannot be read now (the company unreachable, the Session
/// gone) is left out this time and kept.
#[async_trait::async_trait]
impl pap_host::console::Decisions for crate::PapTools {
    async fn pending(&self) -> Vec<pap_host::console::Decision> {
        let proposals = Proposals::at(&self.state_dir);
        let Ok(listed) = proposals.list() else {
            return Vec::new();
        };
        let mut pending = Vec::new();
        let mut done = Vec::new();
        for proposal in listed.iter().rev().take(PENDING_READ).rev() {
            let holder = crate::Holder::of(proposal.device_id.as_deref());
            let Ok((company, wallet)) = self.record(&holder, &proposal.domain).await else {
                continue;
            };
            let Some(session) = wallet.session.as_ref() else {
                done.push(proposal.operation_id.clone());
                continue;
            };
            match self
                .client
                .read_operation(&company, session, &proposal.operation_id)
                .await
            {
                Ok(operation) if operation.state == pap_shared::OperationState::Proposed => {
                    pending.push(pap_host::console::Decision {
                        key: proposal.operation_id.clone(),
                        company: proposal.domain.clone(),
                        device_id: proposal.device_id.clone(),
                        summary: operation.summary,
                        state: "proposed".to_owned(),
                        url: operation.url.unwrap_or_else(|| proposal.url.clone()),
                        proposed_at: proposal.proposed_at,
                    });
                }
                Ok(_) => done.push(proposal.operation_id.clone()),
                Err(_) => {}
            }
        }
        if !done.is_empty()
            && let Err(error) = proposals.forget(&done)
        {
            tracing::warn!(%error, "forgetting decided proposals");
        }
        pending
    }
}

/// How many of the newest proposals the console reads from their companies per page.
const PENDING_READ: usize = 32;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn proposals_are_recorded_once_bounded_and_forgotten() {
        let dir = std::env::temp_dir().join(format!("pap-proposals-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let proposals = Proposals::at(&dir);
        let one = |i: usize| Proposal {
            device_id: Some("dev_a".to_owned()),
            domain: "shop.example".to_owned(),
            operation_id: format!("op_{i}"),
            url: format!("https://shop.example/operations/op_{i}"),
            proposed_at: UnixTime::from_secs(1_800_000_000),
        };
        proposals.record(one(0)).unwrap();
        proposals.record(one(0)).unwrap();
        assert_eq!(proposals.list().unwrap(), [one(0)]);
        for i in 1..=KEPT {
            proposals.record(one(i)).unwrap();
        }
        let listed = proposals.list().unwrap();
        assert_eq!(listed.len(), KEPT);
        assert_eq!(listed[0], one(1), "the oldest went first");
        proposals.forget(&["op_1".to_owned()]).unwrap();
        assert_eq!(proposals.list().unwrap()[0], one(2));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("proposals.json")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
