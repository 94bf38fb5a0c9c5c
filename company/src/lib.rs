//! The company side of the PAP browser-session bridge (PAP §5).
//!
//! A personal agent's own browser form-POSTs a 60-second `poppy-browser+jwt` to the company's
//! `web.browser_session_endpoint`. This crate verifies it and turns it into the company's own
//! cookie, bound to the live PAP Session:
//!
//! ```text
//!  POST /poppy/browser-session  assertion=<jws>
//!     -> parse, alg, typ, claims, aud, time, return_to      (cheap, local)
//!     -> Session live and the same client and user          (SessionDirectory)
//!     -> client_id -> metadata -> JWKS, signature           (ClientKeys)
//!     -> (client_id, jti) marked once until exp             (ReplayGuard)
//!  303 Location: return_to
//!  Set-Cookie: __Host-poppy_session=<32 random bytes>; Path=/; Secure; HttpOnly; SameSite=Lax
//!
//!  later requests: WebSession extractor -> cookie hash -> Session, live and signed in? (or 401)
//! ```
//!
//! Everything that stores state is a trait ([`SessionDirectory`], [`ReplayGuard`],
//! [`CookieBindings`], [`ClientKeys`]) with an embedded implementation, so a distributed store
//! can replace it. Time and randomness are injected.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod browser_session;
mod client;
mod dev_certs;
mod expiry;
mod local;
mod metrics;
mod page;
mod records;
#[cfg(feature = "redis")]
mod redis_store;
mod reference;
mod replay;
mod serve;
mod session;
mod store;
mod tls;
mod verify;
mod web_cookie;
mod web_session;

/// Every bound the company puts on what strangers can make it hold or do, in one place: each
/// store's capacity and per-owner caps, the throttles, the resolver's and the server's limits
/// ([`ServeLimits`], [`ResolverConfig`] hold the configurable ones). A store at its capacity
/// refuses new work (429 or 503) rather than drop what must not be lost.
pub mod limits {
    pub use crate::client::FAILURE_CAPACITY;
    pub use crate::reference::{
        ACCOUNT_ATTEMPTS, ADDRESS_ATTEMPTS, ATTEMPT_WINDOW, OPERATION_RETENTION, OPERATIONS_PER_ACCOUNT,
        PENDING_PER_CLIENT, RECORD_CAPACITY, SESSION_TOKENS_PER_SESSION,
    };
    pub use crate::replay::REPLAY_CAPACITY;
    pub use crate::serve::RESERVED_FILES;
    pub use crate::session::{SESSION_CAPACITY, SESSIONS_PER_CLIENT};
    pub use crate::web_cookie::{BINDINGS_PER_SESSION, COOKIE_CAPACITY};
    pub use pap_shared::MAX_JWKS_KEYS;
}

// The public interface is:
pub use browser_session::{
    BROWSER_SESSION_PATH, BrowserSession, JoinRefusal, MAX_FORM_BYTES, RequestError, browser_session_router,
};
pub use client::{
    ClientKeys, ClientMetadata, ClientRegistry, HttpClientResolver, ResolveError, ResolverBuildError, ResolverConfig,
    ResolverHolds, StaticClientKeys,
};
pub use dev_certs::{DevCerts, DevCertsError, write_dev_certs};
pub use local::{LocalCompany, LocalCompanyError};
pub use metrics::{MetricsError, install_metrics};
pub use page::escape_html;
pub use records::{Change, Expect, MemoryRecords, Records, Stored, Write};
#[cfg(feature = "redis")]
pub use redis_store::{RedisSetupError, RedisStore};
pub use reference::{
    AccountConfig, CompanyConfig, CompanyStores, ConfigError, ProposalConfig, ReadConfig, ReferenceCompany, ScopeConfig,
};
pub use replay::{MemoryReplayGuard, ReplayGuard, ReplayKey};
pub use serve::{ServeLimits, raise_open_file_limit, serve_tls, serve_tls_with};
pub use session::{MemorySessionDirectory, RecordSessions, SessionDirectory, SessionRecord};
pub use store::StoreError;
pub use tls::{TlsError, load_server_config, server_config_from_pem};
pub use verify::{IAT_SKEW_SECONDS, VerifiedAssertion, Verifier, VerifierParts, VerifyError};
pub use web_cookie::{Binding, CookieBindings, CookieHash, MemoryCookieBindings, SESSION_COOKIE_NAME, SessionCookie};
pub use web_session::{WebSession, WebSessionRejection};
