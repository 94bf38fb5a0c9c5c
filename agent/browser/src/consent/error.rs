//! Why a consent operation failed, and what an agent's tool call sees of it (AIP-14).

use serde_json::json;

use super::effects::LiveError;
use super::ledger::LedgerError;
use super::material::SourceError;
use crate::spec::{ToolError, ToolErrorCode};
use crate::store::SealError;

/// Why a consent operation failed. Never carries a value.
#[derive(Debug, thiserror::Error)]
pub enum ConsentError {
    /// C4: no domains and no named full-profile request.
    #[error("name the domains to grant (or ask for the full profile by name): a grant never defaults to all domains")]
    NoDomains,
    /// C2.
    #[error("{domain:?} cannot be granted: {why}")]
    InvalidDomain {
        /// As given.
        domain: String,
        /// Why.
        why: pap_shared::InvalidGrantDomain,
    },
    /// C3: a full-profile grant has local sinks only.
    #[error("a full-profile grant cannot have a remote sink")]
    FullProfileRemote,
    /// No such grant (or not visible to this caller, C12).
    #[error("no grant {0}")]
    UnknownGrant(String),
    /// C7: an agent asked for more than its grant (a deny record was appended).
    #[error("refused: {0}")]
    Refused(String),
    /// C1, C12: no active grant covers the domain for this caller and sink.
    #[error("no active grant covers {domain}")]
    ConsentRequired {
        /// The domain.
        domain: String,
    },
    /// C6: the remote sink has no human acknowledgement.
    #[error("the remote sink {provider_id} has no human acknowledgement")]
    SinkNotAcknowledged {
        /// The sink.
        provider_id: String,
    },
    /// A full-profile grant is revoked whole, never by domain.
    #[error("a full-profile grant is revoked whole, not by domain")]
    FullProfileByDomain,
    /// A domain-level revoke names a domain the grant does not.
    #[error("the grant does not name {domain}")]
    NotInGrant {
        /// The domain asked for.
        domain: String,
    },
    /// The grant's source cannot be re-read here (a Firefox profile).
    #[error("a {kind:?} source cannot be re-read here")]
    SourceNotReadable {
        /// Its kind.
        kind: super::grant::SourceKind,
    },
    /// A consent file does not parse: it was edited, or damaged. Nothing was changed.
    #[error("{file} is damaged (line {line})")]
    Damaged {
        /// The file (`grants.json`).
        file: &'static str,
        /// Where it stops making sense.
        line: usize,
    },
    /// The source could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The sealed store failed.
    #[error("the material store: {0}")]
    Store(#[from] SealError),
    /// A running instance could not be reached for a revoke; the grant is revoked regardless.
    #[error("the revoke is recorded, but a running browser could not be cleaned")]
    Live(#[source] LiveError),
    /// A file operation failed.
    #[error("the consent store: {0}")]
    Io(#[from] std::io::Error),
}

impl ConsentError {
    /// The AIP-14 error an agent's tool call sees.
    pub fn to_tool_error(&self) -> ToolError {
        let message = self.to_string();
        match self {
            Self::ConsentRequired { domain } => {
                ToolError::new(ToolErrorCode::ConsentRequired, message).with_cause(json!({ "domain": domain }))
            }
            Self::UnknownGrant(id) => {
                ToolError::new(ToolErrorCode::NotFound, message).with_cause(json!({ "grant": id }))
            }
            Self::Refused(_) | Self::SinkNotAcknowledged { .. } => {
                ToolError::new(ToolErrorCode::PermissionDenied, message)
            }
            Self::NoDomains
            | Self::InvalidDomain { .. }
            | Self::FullProfileRemote
            | Self::FullProfileByDomain
            | Self::NotInGrant { .. }
            | Self::SourceNotReadable { .. } => ToolError::new(ToolErrorCode::InputInvalid, message),
            Self::Live(cause) => ToolError::new(ToolErrorCode::Internal, format!("{message}: {cause}")),
            Self::Damaged { .. } | Self::Source(_) | Self::Ledger(_) | Self::Store(_) | Self::Io(_) => {
                ToolError::new(ToolErrorCode::Internal, message)
            }
        }
    }
}
