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
/// How many one holder (a device, or the agent) may have recorded: one that proposes without
/// end pushes out its own, never another device's.
pub const PER_HOLDER: usize = 16;
/// How long the console waits for the companies' answers, all read at once.
const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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

    /// Records `proposal` (once per operation and holder: two devices whose Sessions proposed the
    /// same, which the company answers with one operation, each list it; a holder's oldest go
    /// past [`PER_HOLDER`]).
    pub fn record(&self, proposal: Proposal) -> std::io::Result<()> {
        self.update(|record| {
            if record
                .proposals
                .iter()
                .any(|p| p.operation_id == proposal.operation_id && p.device_id == proposal.device_id)
            {
                return;
            }
            let of_holder = |p: &Proposal| p.device_id == proposal.device_id;
            if record.proposals.iter().filter(|p| of_holder(p)).count() >= PER_HOLDER
                && let Some(oldest) = record.proposals.iter().position(of_holder)
            {
                record.proposals.remove(oldest);
            }
            record.proposals.push(proposal);
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
/// each read from its company with the proposing holder's own Session, all at once within 5 s;
/// those no longer `proposed` (or whose Session is gone) are forgotten, one that cannot be read
/// now is left out this time and kept, and one whose page is not on its company's site is never
/// listed.
#[async_trait::async_trait]
impl pap_host::console::Decisions for crate::PapTools {
    async fn pending(&self) -> Vec<pap_host::console::Decision> {
        let proposals = Proposals::at(&self.state_dir);
        let Ok(listed) = proposals.list() else {
            return Vec::new();
        };
        // One row per operation, however many holders proposed it (the newest proposal's).
        let mut seen = std::collections::HashSet::new();
        let newest: Vec<&Proposal> = listed
            .iter()
            .rev()
            .filter(|p| seen.insert(p.operation_id.as_str()))
            .take(PENDING_READ)
            .collect();
        // Each read from its company at once, all within READ_WAIT: a slow company leaves its
        // proposals out of this page, not the page waiting.
        let reads = futures_util::future::join_all(newest.iter().map(|proposal| async move {
            let holder = crate::Holder::of(proposal.device_id.as_deref());
            let (company, wallet) = self.record(&holder, &proposal.domain).await.ok()?;
            let Some(session) = wallet.session.as_ref() else {
                return Some(None);
            };
            let operation = self
                .client
                .read_operation(&company, session, &proposal.operation_id)
                .await
                .ok()?;
            Some(Some(operation))
        }));
        let Ok(answers) = tokio::time::timeout(READ_WAIT, reads).await else {
            return Vec::new();
        };
        let mut pending = Vec::new();
        let mut done = Vec::new();
        for (proposal, answer) in newest.into_iter().zip(answers).rev() {
            match answer {
                // Unreadable now: left out this time, kept.
                None => {}
                // No Session to read it with any more, or no longer proposed.
                Some(None) => done.push(proposal.operation_id.clone()),
                Some(Some(operation)) if operation.state != pap_shared::OperationState::Proposed => {
                    done.push(proposal.operation_id.clone());
                }
                Some(Some(operation)) => {
                    // Its page must be on its company's site: the person's tab opens it.
                    let url = operation.url.unwrap_or_else(|| proposal.url.clone());
                    if !on_company(&url, &proposal.domain) {
                        continue;
                    }
                    pending.push(pap_host::console::Decision {
                        key: proposal.operation_id.clone(),
                        company: proposal.domain.clone(),
                        device_id: proposal.device_id.clone(),
                        summary: operation.summary,
                        state: "proposed".to_owned(),
                        url,
                        proposed_at: proposal.proposed_at,
                    });
                }
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

/// The operations as MCP resources ([`pap_host::resources`]): `pap://DOMAIN/operations/ID`, read
/// with the calling device's own Session as `pap_operation` reads it (the operation as JSON: what
/// the company shows that Session, which may include an operation another device of the same
/// account proposed; nothing is fetched for a company the device holds no Session with), and
/// settled once the company no longer says `proposed`. `resources/list` names the device's own
/// proposals. A client that subscribes to the one its
/// `pap_propose` answered hears `notifications/resources/updated` when the person confirms or
/// cancels it in their console, and reads the outcome; the device decides nothing (AIP-7).
#[async_trait::async_trait]
impl pap_host::resources::ExtraResources for crate::PapTools {
    fn templates(&self) -> Vec<rmcp::model::ResourceTemplate> {
        vec![
            rmcp::model::ResourceTemplate::new(OPERATION_TEMPLATE, "operation")
                .with_title("An operation of this device's Session")
                .with_description(
                    "The operation as the company answers it (pap_operation). Subscribe to hear when the \
                     person confirms or cancels it in their console.",
                )
                .with_mime_type("application/json"),
        ]
    }

    fn names(&self, uri: &str) -> bool {
        operation_of(uri).is_some()
    }

    /// The operations this device proposed that the person's console still lists, newest
    /// first (read from `proposals.json`, no company asked).
    async fn list(&self, caller: &pap_browser::spec::AgentCaller) -> Vec<rmcp::model::Resource> {
        let Ok(listed) = Proposals::at(&self.state_dir).list() else {
            return Vec::new();
        };
        listed
            .iter()
            .rev()
            .filter(|p| p.device_id.as_deref() == caller.device_id())
            .map(|p| {
                rmcp::model::Resource::new(
                    operation_uri(&p.domain, &p.operation_id),
                    format!("operation {} at {}", p.operation_id, p.domain),
                )
                .with_description(format!(
                    "Proposed {} and waiting for the person when last read; subscribe to hear when they decide.",
                    p.proposed_at.to_rfc3339()
                ))
                .with_mime_type("application/json")
            })
            .collect()
    }

    async fn read(
        &self,
        caller: &pap_browser::spec::AgentCaller,
        uri: &str,
    ) -> Result<pap_host::resources::Reading, pap_browser::spec::ToolError> {
        let (domain, id) = operation_of(uri).ok_or_else(|| {
            pap_browser::spec::ToolError::new(
                pap_browser::spec::ToolErrorCode::NotFound,
                format!("not an operation's URI ({OPERATION_TEMPLATE})"),
            )
        })?;
        let operation = self.read_operation_as(caller, domain, id).await?;
        let settled = operation.state != pap_shared::OperationState::Proposed;
        let text = serde_json::to_string(&operation).map_err(|_| {
            pap_browser::spec::ToolError::new(pap_browser::spec::ToolErrorCode::Internal, "the operation")
        })?;
        Ok(pap_host::resources::Reading {
            text,
            mime_type: "application/json",
            settled,
        })
    }
}

/// An operation's resource URI: `pap://DOMAIN/operations/ID`.
pub fn operation_uri(domain: &str, id: &str) -> String {
    format!("pap://{domain}/operations/{id}")
}

/// What every operation's resource URI looks like.
const OPERATION_TEMPLATE: &str = "pap://{domain}/operations/{id}";

/// The company and the operation's id an operation's URI names, or `None`: a DNS name, then one
/// id of base64url characters, nothing else (no query, no fragment, no user, no port).
fn operation_of(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix("pap://")?;
    let (domain, id) = rest.split_once("/operations/")?;
    let name_ok = !domain.is_empty()
        && domain.len() <= 253
        && domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    (name_ok && pap_shared::is_base64url(id, 1, 128)).then_some((domain, id))
}

/// Whether `url` is an https page of `domain` or a site under it.
fn on_company(url: &str, domain: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| {
        u.scheme() == "https"
            && u.host_str()
                .is_some_and(|h| pap_browser::persons::host_is_under(h, domain))
    })
}

/// How many of the newest proposals the console reads from their companies per page.
const PENDING_READ: usize = 32;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn a_page_off_its_company_s_site_is_never_a_decision() {
        assert!(on_company("https://shop.example/operations/op_1", "shop.example"));
        assert!(on_company("https://www.shop.example/op", "shop.example"));
        assert!(!on_company("https://evil.example/op", "shop.example"));
        assert!(!on_company("https://shop.example.evil.example/op", "shop.example"));
        assert!(!on_company("http://shop.example/op", "shop.example"));
        assert!(!on_company("javascript:alert(1)", "shop.example"));
    }

    #[test]
    fn an_operation_s_uri_names_a_company_and_an_id_and_nothing_else() {
        let uri = operation_uri("shop.example", "op_A5PzkijL1aTCZ7UF9Hy8Vw");
        assert_eq!(uri, "pap://shop.example/operations/op_A5PzkijL1aTCZ7UF9Hy8Vw");
        assert_eq!(operation_of(&uri), Some(("shop.example", "op_A5PzkijL1aTCZ7UF9Hy8Vw")));
        for refused in [
            "pap://shop.example/operations/",
            "pap://shop.example/operations/op_1/confirm",
            "pap://shop.example/operations/op_1?x=1",
            "pap://user@shop.example/operations/op_1",
            "pap://shop.example:443/operations/op_1",
            "pap://Shop.Example/operations/op_1",
            "pap:///operations/op_1",
            "https://shop.example/operations/op_1",
            "pap://shop.example/orders/op_1",
        ] {
            assert_eq!(operation_of(refused), None, "{refused}");
        }
    }

    #[test]
    fn proposals_are_recorded_once_bounded_per_holder_and_forgotten() {
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
        // The same operation proposed by another holder is that holder's too.
        let mut theirs = one(0);
        theirs.device_id = Some("dev_c".to_owned());
        proposals.record(theirs.clone()).unwrap();
        assert_eq!(proposals.list().unwrap(), [one(0), theirs.clone()]);
        proposals.forget(&[theirs.operation_id]).unwrap();
        assert!(proposals.list().unwrap().is_empty(), "forgotten for every holder");
        proposals.record(one(0)).unwrap();
        for i in 1..=PER_HOLDER {
            proposals.record(one(i)).unwrap();
        }
        let listed = proposals.list().unwrap();
        assert_eq!(listed.len(), PER_HOLDER);
        assert_eq!(listed[0], one(1), "the holder's oldest went first");
        // Another device's are not pushed out by this one's.
        let mut other = one(999);
        other.device_id = Some("dev_b".to_owned());
        proposals.record(other.clone()).unwrap();
        for i in 1000..1010 {
            proposals.record(one(i)).unwrap();
        }
        assert!(proposals.list().unwrap().contains(&other));
        proposals.forget(&[other.operation_id.clone()]).unwrap();
        assert!(!proposals.list().unwrap().contains(&other));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("proposals.json")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
