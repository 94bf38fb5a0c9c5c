#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod browser_session;
mod client;
mod expiry;
mod join_store;
mod mark_set;
pub mod metrics;
pub mod page;
pub mod records;
#[cfg(feature = "redis")]
mod redis_store;
mod replay;
mod requester_share;
mod session;
mod share;
pub mod slot;
mod store;
pub mod verify;
mod web_cookie;
mod web_form;
mod web_session;

/// The browser-session route (PAP §5, company side) and what a website reads from it.
///
/// ```text
///  POST /poppy/browser-session  assertion=<jws>     browser_session_router / BrowserSession::join
///  303 Location: return_to, Set-Cookie: __Host-poppy_session=…
///  later requests                                     the WebSession extractor (or 401)
///  a decision form's POST                             SameOrigin, then WebSession::check_csrf
/// ```
pub mod route {
    pub use crate::browser_session::{
        BROWSER_SESSION_PATH, BrowserSession, JoinRefusal, MAX_FORM_BYTES, RequestError, browser_session_router,
        store_refused, unavailable,
    };
    pub use crate::web_form::{CsrfMismatch, SameOrigin, SameOriginRejection};
    pub use crate::web_session::{WebSession, WebSessionRejection};
}

/// Where state lives: a trait per store, an in-memory implementation of each, and Redis ones
/// (feature `redis`) for several replicas. A store that cannot answer fails closed
/// ([`stores::StoreError::Unavailable`]).
pub mod stores {
    pub use crate::join_store::{Committed, Freshness, JoinCommit, JoinStore, SeenSession, SeparateStores};
    #[cfg(feature = "redis")]
    pub use crate::redis_store::{RedisOptions, RedisSetupError, RedisStore};
    pub use crate::replay::{MemoryReplayGuard, ReplayGuard, ReplayKey};
    pub use crate::requester_share::{PerRequester, RequesterShares};
    pub use crate::session::{MemorySessionDirectory, RecordSessions, SessionDirectory, SessionRecord};
    pub use crate::share::Owner;
    pub use crate::store::StoreError;
    pub use crate::web_cookie::{
        Binding, CookieBindings, CookieHash, MemoryCookieBindings, SESSION_COOKIE_NAME, SessionCookie,
    };
}

/// From a `client_id` to the agent's metadata and keys: fetched over HTTPS through a
/// public-only resolver, cached, bounded ([`resolver::HttpClientResolver`]), or given
/// ([`resolver::StaticClientKeys`]).
pub mod resolver {
    pub use crate::client::{
        ClientKeys, ClientMetadata, ClientRegistry, HttpClientResolver, ResolveError, ResolverBuildError,
        ResolverConfig, ResolverHolds, StaticClientKeys, as_requester,
    };
}

/// Every bound the verifier's stores put on what strangers can make them hold: each store's
/// capacity and per-owner caps, the resolver's failure memory. A store at its capacity refuses
/// new work (429 or 503) rather than drop what must not be lost.
pub mod limits {
    pub use crate::client::{
        DEFAULT_MAX_CACHE_LIFETIME, FAILURE_CAPACITY, KNOWN_CLIENTS, NO_STORE_SECONDS, STALE_IF_BUSY_SECONDS,
        VOUCHES_PER_ACCOUNT,
    };
    #[cfg(feature = "redis")]
    pub use crate::redis_store::{RECORDS_SHARE, SESSION_COPIES, SESSION_COPY_LIFETIME, WAIT_TIMEOUT};
    pub use crate::replay::{REPLAY_CAPACITY, REPLAY_PRESSURE, REPLAY_SHARE, REPLAY_SHARE_DIVISOR};
    pub use crate::requester_share::REQUESTER_ADDRESSES;
    pub use crate::session::{SESSION_CAPACITY, SESSIONS_PER_CLIENT};
    pub use crate::share::{OWNER_SHARE_DIVISOR, SHARE_BUCKET_SECONDS};
    pub use crate::web_cookie::{BINDINGS_PER_SESSION, COOKIE_CAPACITY};
    pub use pap_shared::MAX_JWKS_KEYS;
}

// The paved path: what mounting the route takes.
pub use route::{BrowserSession, WebSession, browser_session_router};
pub use verify::{Verifier, VerifierParts};
