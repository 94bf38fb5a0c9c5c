//! Resolving the agent behind an assertion's `iss`: `client_id` -> Client ID Metadata Document
//! -> JWKS (PAP §4.1; wire doc §2.3).

mod budget;
mod http;
mod metadata;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use pap_shared::{ClientId, Jwks};

pub(crate) use self::budget::requester;
pub use self::budget::{KNOWN_CLIENTS, VOUCHES_PER_ACCOUNT, as_requester};
pub use self::http::{
    DEFAULT_MAX_CACHE_LIFETIME, FAILURE_CAPACITY, HttpClientResolver, NO_STORE_SECONDS, ResolverBuildError,
    ResolverConfig, ResolverHolds, STALE_IF_BUSY_SECONDS,
};
pub use self::metadata::ClientMetadata;

/// Where the verifier gets an agent's public keys.
#[async_trait]
pub trait ClientKeys: Send + Sync + fmt::Debug {
    /// The current key set of `client_id`. `kid` is the assertion header's `kid`: a resolver
    /// that caches may refetch once when the cached set lacks it.
    async fn keys(&self, client_id: &ClientId, kid: Option<&str>) -> Result<Arc<Jwks>, ResolveError>;

    /// Fresh keys after none of the current ones verified an assertion's signature: the agent
    /// may have rotated its key under the same `kid`. A resolver that caches refetches, at most
    /// as often as it refetches for an unknown `kid`; `None` when it did not (the default).
    async fn keys_after_failure(
        &self,
        client_id: &ClientId,
        kid: Option<&str>,
    ) -> Result<Option<Arc<Jwks>>, ResolveError> {
        let _ = (client_id, kid);
        Ok(None)
    }

    /// The company accepted work of `client_id`'s that the person of `account` let in (a join
    /// to a Session signed in to it, tokens for one): a resolver that budgets its fetches counts
    /// it as known from now on, so its refetches no longer compete with strangers' first
    /// contacts (security review S3: answering a fetch quickly once is no longer enough). One
    /// account vouches for a few clients at most (`limits::VOUCHES_PER_ACCOUNT`), so an account
    /// holder cannot make a fleet known. Nothing by default.
    fn vouch(&self, client_id: &ClientId, account: &str) {
        let _ = (client_id, account);
    }
}

/// Where the reference company gets an agent's metadata as well as its keys.
#[async_trait]
pub trait ClientRegistry: ClientKeys {
    /// The validated Client ID Metadata Document of `client_id`.
    async fn metadata(&self, client_id: &ClientId) -> Result<Arc<ClientMetadata>, ResolveError>;
}

/// Why an agent's keys could not be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The metadata document breaks a rule: `client_id` differs from the URL fetched, no
    /// `client_name`, `jwks_uri` or a redirect URI on another host, another auth method.
    #[error("the client metadata is invalid: {0}")]
    InvalidMetadata(&'static str),
    /// The JWKS was refused (private members, other curves, no usable key, ...).
    #[error("the client's key set is invalid")]
    InvalidKeys(#[source] pap_shared::JwkError),
    /// A fetch failed: transport, TLS, status, content type, size or time limit.
    #[error("fetching {what} failed: {why}")]
    Fetch {
        /// Which document.
        what: &'static str,
        /// What went wrong, without response bodies.
        why: String,
    },
    /// The `client_id` (or `jwks_uri`) is not a URL this company may fetch: not HTTPS, an IP
    /// literal, or a name resolving to a non-public address outside the test allow-list.
    #[error("the client's URL may not be fetched: {0}")]
    Forbidden(&'static str),
    /// The client is not known to a static resolver, or recently failed to resolve.
    #[error("unknown client")]
    UnknownClient,
    /// Too many clients' documents are being fetched at once; nothing was fetched for this one.
    /// Answered with 503 and `Retry-After`: the client may try again shortly.
    #[error("too many client documents are being fetched; try again shortly")]
    Busy,
}

/// A fixed map of `client_id` to key set: for unit tests and for companies that register their
/// agents' keys out of band.
#[derive(Clone, Debug, Default)]
pub struct StaticClientKeys {
    clients: HashMap<ClientId, Arc<Jwks>>,
    metadata: HashMap<ClientId, Arc<ClientMetadata>>,
}

impl StaticClientKeys {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) `client_id`'s key set.
    pub fn with_client(mut self, client_id: ClientId, keys: Jwks) -> Self {
        self.clients.insert(client_id, Arc::new(keys));
        self
    }

    /// Adds (or replaces) a client's metadata document.
    pub fn with_metadata(mut self, metadata: ClientMetadata) -> Self {
        self.metadata.insert(metadata.client_id().clone(), Arc::new(metadata));
        self
    }
}

#[async_trait]
impl ClientKeys for StaticClientKeys {
    async fn keys(&self, client_id: &ClientId, _kid: Option<&str>) -> Result<Arc<Jwks>, ResolveError> {
        self.clients.get(client_id).cloned().ok_or(ResolveError::UnknownClient)
    }
}

#[async_trait]
impl ClientRegistry for StaticClientKeys {
    async fn metadata(&self, client_id: &ClientId) -> Result<Arc<ClientMetadata>, ResolveError> {
        self.metadata.get(client_id).cloned().ok_or(ResolveError::UnknownClient)
    }
}
