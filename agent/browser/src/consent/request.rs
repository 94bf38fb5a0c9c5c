//! Who asks for what (AIP-63 C3, C4, C7): the operator's channel and an agent's calls, the
//! sources a grant reads, and the request itself.

use std::path::PathBuf;

use super::chromium_profile;
use super::grant::{Source, SourceKind};
use super::ledger::{Actor, ActorKind};
use super::material::{self, Material, SourceError};
use crate::spec::{AgentCaller, Operator};
use pap_shared::UnixTime;

/// What the operator sees before a full-profile grant (C3).
pub const FULL_PROFILE_WARNING: &str = "WARNING: a full-profile grant exposes the ENTIRE profile to the agent's \
     browser: every cookie and every site's storage, for every domain, including ones you did not name.";

/// Who calls the consent host: the operator (a human on an operator channel), or an agent's
/// tool call (C7). The tool surface only ever holds an [`AgentCaller`].
#[derive(Clone, Debug)]
pub enum Caller {
    /// A human on the operator's channel.
    Operator(Operator),
    /// An agent's tool call, from a paired device or the local runtime.
    Agent(AgentCaller),
}

impl Caller {
    /// An agent call from the local runtime (no paired device).
    pub fn local_agent() -> Self {
        Self::Agent(AgentCaller::local())
    }

    pub(super) fn device(&self) -> Option<&str> {
        match self {
            Self::Operator(_) => None,
            Self::Agent(agent) => agent.device_id(),
        }
    }

    pub(super) fn actor(&self) -> Actor {
        match self {
            Self::Operator(operator) => Actor {
                kind: ActorKind::Human,
                via: Some(operator.via().into()),
                device_id: None,
            },
            Self::Agent(agent) => Actor {
                kind: ActorKind::Agent,
                via: Some("tool".into()),
                device_id: agent.device_id().map(str::to_owned),
            },
        }
    }
}

impl From<AgentCaller> for Caller {
    fn from(agent: AgentCaller) -> Self {
        Self::Agent(agent)
    }
}

impl From<Operator> for Caller {
    fn from(operator: Operator) -> Self {
        Self::Operator(operator)
    }
}

/// The host itself revoking (an expiry, a revoked pairing): the ledger's `system` actor.
pub(super) fn system(via: &str, device_id: Option<&str>) -> Actor {
    Actor {
        kind: ActorKind::System,
        via: Some(via.into()),
        device_id: device_id.map(str::to_owned),
    }
}

/// Where a grant's material is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceSpec {
    /// A storage-state file (`{cookies, origins}`).
    StorageState(PathBuf),
    /// A Chromium profile directory on Linux (its `Cookies` SQLite database).
    ChromiumProfile(PathBuf),
    /// Material the instance makes itself by signing in (the PAP join's cookie): nothing is
    /// imported; the grant says which domains the instance may hold a session for.
    NativeLogin(String),
}

impl SourceSpec {
    pub(super) fn to_source(&self) -> Source {
        match self {
            Self::StorageState(path) => Source {
                kind: SourceKind::File,
                profile: path.display().to_string(),
            },
            Self::ChromiumProfile(path) => Source {
                kind: SourceKind::Chrome,
                profile: path.display().to_string(),
            },
            Self::NativeLogin(instance) => Source {
                kind: SourceKind::NativeLogin,
                profile: instance.clone(),
            },
        }
    }

    pub(super) fn from_source(source: &Source) -> Option<Self> {
        match source.kind {
            SourceKind::File => Some(Self::StorageState(PathBuf::from(&source.profile))),
            SourceKind::Chrome => Some(Self::ChromiumProfile(PathBuf::from(&source.profile))),
            SourceKind::NativeLogin => Some(Self::NativeLogin(source.profile.clone())),
            SourceKind::Firefox => None,
        }
    }

    /// Reads what `covers` allows (a Chromium profile's other hosts are never decrypted).
    pub(super) fn read(&self, covers: &dyn Fn(&str) -> bool) -> Result<Material, SourceError> {
        let mut material = match self {
            Self::StorageState(path) => material::read_storage_state(path)?,
            Self::ChromiumProfile(path) => chromium_profile::read(path, covers)?,
            Self::NativeLogin(_) => Material::default(),
        };
        material.retain(covers);
        Ok(material)
    }
}

/// What a grant is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeRequest {
    /// Named domains (C2); an empty list is refused (C4).
    Domains(Vec<String>),
    /// The named full-profile grant (C3): only ever asked for by this variant.
    FullProfile,
}

/// A grant request on the operator's channel.
#[derive(Clone, Debug)]
pub struct GrantRequest {
    /// The source.
    pub source: SourceSpec,
    /// The domains, or the full profile by name.
    pub scope: ScopeRequest,
    /// Asked per domain after a presence scan (C5), or given as flags.
    pub interactive: bool,
    /// Scope the grant to one paired device (C12).
    pub device_id: Option<String>,
    /// End the grant by itself then (revoked automatically).
    pub expires_at: Option<UnixTime>,
}

impl GrantRequest {
    /// A flag request (not interactive) for `domains` from `source`: no device scope, no expiry.
    pub fn for_domains(source: SourceSpec, domains: &[&str]) -> Self {
        Self {
            source,
            scope: ScopeRequest::Domains(domains.iter().map(|d| (*d).to_owned()).collect()),
            interactive: false,
            device_id: None,
            expires_at: None,
        }
    }

    /// A flag request for the domains the instance may sign in to itself (the PAP join's cookie
    /// is that material): nothing imported, local sink.
    pub fn native_login(instance: &str, domains: &[&str]) -> Self {
        Self::for_domains(SourceSpec::NativeLogin(instance.to_owned()), domains)
    }
}
