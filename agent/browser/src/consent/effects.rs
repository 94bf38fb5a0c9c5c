//! What consent does to browsers (AIP-63 C1, C8): the material an injection carries, the
//! permit a join needs, the scope a revoke covers, and what running instances report back.

use async_trait::async_trait;

use super::grant::Grant;
use super::ledger::{Derived, RemoteOutcome};
use super::material::{Cookie, Origin};
use pap_shared::GrantDomain;

/// What a revoke covers.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// These domains and their subdomains.
    Domains(&'a [GrantDomain]),
    /// Everything (a full-profile grant).
    Everything,
}

impl Scope<'_> {
    /// Whether `host` is in scope.
    pub fn covers(&self, host: &str) -> bool {
        match self {
            Self::Domains(domains) => domains.iter().any(|d| d.covers(host)),
            Self::Everything => true,
        }
    }
}

/// What a live instance gave up for a revoke.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Cookies deleted.
    pub cookies: usize,
    /// Tabs and contexts closed.
    pub tabs: usize,
}

impl std::ops::AddAssign for Forgotten {
    fn add_assign(&mut self, other: Self) {
        self.cookies += other.cookies;
        self.tabs += other.tabs;
    }
}

/// The running browsers a revoke must reach (C8): the agent's own [`crate::BrowserHost`], or the
/// state directory's browsers over their DevTools port when the CLI revokes.
#[async_trait]
pub trait LiveInstances: Send + Sync {
    /// Deletes the cookies and storage `scope` covers from every running instance and closes
    /// the tabs showing it. `origins` are the storage origins the grant's material held in scope
    /// (`https://host:port`): cleared too, as a port is not in the scope's host names.
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, LiveError>;
    /// Puts granted material into the running instances (C1); how many cookies went in.
    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError>;
    /// Asks remote provider `provider_id` to end its session for the grant.
    async fn end_remote(&self, provider_id: &str) -> RemoteOutcome {
        let _ = provider_id;
        RemoteOutcome::Unavailable
    }
}

/// Why a running instance did not do what consent asked of it. Names the step, never a value:
/// what a browser answers is cut before anything it may have quoted back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LiveError {
    /// The step took longer than it may.
    #[error("{step}: no answer in time")]
    Timeout {
        /// What was being done (`deleting a cookie`).
        step: &'static str,
    },
    /// The browser refused the step; `detail` is its answer up to the first quote or bracket.
    #[error("{step}: {detail}")]
    Refused {
        /// What was being done.
        step: &'static str,
        /// The head of the browser's answer.
        detail: String,
    },
    /// The browser answered something that does not fit.
    #[error("{step}: an unexpected answer")]
    Unexpected {
        /// What was being done.
        step: &'static str,
    },
    /// The browser's owning process (reached over its control socket from another process,
    /// review M7) reported a failure, or gave no usable answer.
    #[error("the browser's owner: {detail}")]
    Owner {
        /// What the owner said (an error of this enum, as text).
        detail: String,
    },
    /// Several browsers failed; every one of them is listed (the others did what was asked).
    #[error("{} browsers failed: {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<LiveError>),
}

impl LiveError {
    /// The failures of a fan-out as one error: none, the one, or all of them.
    pub fn all(mut failures: Vec<LiveError>) -> Option<LiveError> {
        match failures.len() {
            0 => None,
            1 => failures.pop(),
            _ => Some(LiveError::Several(failures)),
        }
    }
}

/// No running instance (a host with nothing launched).
#[derive(Debug, Default)]
pub struct NoInstances;

#[async_trait]
impl LiveInstances for NoInstances {
    async fn forget(&self, _scope: Scope<'_>, _origins: &[String]) -> Result<Forgotten, LiveError> {
        Ok(Forgotten::default())
    }

    async fn inject(&self, _injection: &Injection) -> Result<usize, LiveError> {
        Ok(0)
    }
}

/// Granted material on its way into an instance (C1): only the consent host builds one, for an
/// active grant and a sink it may reach. Never printed.
pub struct Injection {
    pub(super) grant_id: String,
    pub(super) cookies: Vec<Cookie>,
    pub(super) origins: Vec<Origin>,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("grant", &self.grant_id)
            .field("cookies", &self.cookies.len())
            .field("storage_items", &self.storage_item_count())
            .finish()
    }
}

impl Injection {
    /// The grant it comes from.
    pub fn grant_id(&self) -> &str {
        &self.grant_id
    }

    /// How many cookies it carries.
    pub fn cookie_count(&self) -> usize {
        self.cookies.len()
    }

    /// Its cookies as (name, domain): never their values.
    pub fn cookie_names(&self) -> Vec<(String, String)> {
        self.cookies
            .iter()
            .map(|c| (c.name.clone(), c.domain.clone()))
            .collect()
    }

    pub(crate) fn cookies(&self) -> &[Cookie] {
        &self.cookies
    }

    /// Local storage by origin.
    pub(crate) fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// How many local-storage items it carries.
    pub fn storage_item_count(&self) -> usize {
        self.origins.iter().map(|o| o.local_storage.len()).sum()
    }

    /// The injection as a browser's control socket carries it to the browser's owner (a 0600
    /// socket of this user, review M7): values included, so the caller keeps it off every log.
    pub(crate) fn to_wire(&self) -> serde_json::Value {
        serde_json::json!({
            "grantId": self.grant_id,
            "cookies": self.cookies,
            "origins": self.origins,
        })
    }

    /// An injection as [`Self::to_wire`] wrote it, read by the browser's owner.
    pub(crate) fn from_wire(wire: serde_json::Value) -> Result<Self, serde_json::Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            grant_id: String,
            cookies: Vec<Cookie>,
            origins: Vec<Origin>,
        }
        let wire: Wire = serde_json::from_value(wire)?;
        Ok(Self {
            grant_id: wire.grant_id,
            cookies: wire.cookies,
            origins: wire.origins,
        })
    }
}

/// Leave to join a company's website from this host's browser (the join needs a grant).
#[derive(Clone, Debug)]
pub struct JoinPermit {
    pub(super) grant_id: String,
    pub(super) host: String,
}

impl JoinPermit {
    /// Whether the permit covers `host`.
    pub fn covers(&self, host: &str) -> bool {
        self.host.eq_ignore_ascii_case(host)
    }

    /// The grant behind it.
    pub fn grant_id(&self) -> &str {
        &self.grant_id
    }
}

/// The result of a refresh.
#[derive(Clone, Debug)]
pub struct Refreshed {
    /// The grant as it stands.
    pub grant: Grant,
    /// The domains re-read.
    pub domains: Vec<GrantDomain>,
}

/// The result of a revoke.
#[derive(Clone, Debug)]
pub struct Revoked {
    /// The grant as it stands (revoked, or narrowed).
    pub grant: Grant,
    /// What the live instances gave up.
    pub forgotten: Forgotten,
    /// The ledger's `derived`.
    pub derived: Derived,
}

/// What a refresh reports, to a tool caller and on the command line alike.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RefreshReport {
    /// The grant as it stands.
    pub grant: Grant,
    /// Cookies put into the running browsers.
    pub injected: usize,
}

/// What a revoke reports, to a tool caller and on the command line alike.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokeReport {
    /// The grant as it stands (revoked, or narrowed).
    pub grant: Grant,
    /// The ledger's `derived`.
    pub derived: Derived,
    /// Cookies deleted from the running browsers.
    pub cookies_deleted: usize,
    /// Tabs and contexts closed.
    pub tabs_closed: usize,
}

impl Revoked {
    /// The report of this revoke.
    pub fn report(self) -> RevokeReport {
        RevokeReport {
            grant: self.grant,
            derived: self.derived,
            cookies_deleted: self.forgotten.cookies,
            tabs_closed: self.forgotten.tabs,
        }
    }
}
