//! The reference company: a small shop that speaks PAP draft 0.2 (discovery, token endpoint
//! with `private_key_jwt` and DPoP, jwt-bearer Sessions, Device Sign-In, Account Tokens and
//! revocation, an OpenAPI API that proposes operations, Operations v1) and whose website
//! follows the PAP Session through the browser-session bridge.
//!
//! Everything is in memory behind the crate's store traits; [`ReferenceCompany::router`] is the
//! public HTTPS surface and [`ReferenceCompany::operator_router`] the loopback-only operator API.

mod api;
mod caller;
mod client_auth;
mod config;
mod device;
mod discovery;
mod operations;
mod operator;
mod protocol;
mod token;
mod website;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use pap_shared::{Clock, DpopRequest, OAuthErrorCode, Rng, SecretToken, UnixTime, verify_dpop_proof};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

pub use self::config::{AccountConfig, CompanyConfig, ConfigError, ProposalConfig, ReadConfig, ScopeConfig};
use self::device::Devices;
pub use self::device::{ACCOUNT_ATTEMPTS, ADDRESS_ATTEMPTS, ATTEMPT_WINDOW, DEVICE_CODE_CAPACITY, PENDING_PER_CLIENT};
use self::operations::Operations;
pub use self::operations::{OPERATION_CAPACITY, OPERATION_RETENTION, OPERATIONS_PER_ACCOUNT};
use self::protocol::ApiError;
use self::token::Tokens;
pub use self::token::{SESSION_TOKENS_PER_SESSION, TOKEN_CAPACITY};
use crate::browser_session::{BROWSER_SESSION_PATH, BrowserSession, browser_session_router};
use crate::client::ClientRegistry;
use crate::replay::{MemoryReplayGuard, ReplayGuard, ReplayKey};
use crate::session::MemorySessionDirectory;
use crate::store::{Bounded, WhenFull};
use crate::verify::{Verifier, VerifierParts};
use crate::web_cookie::MemoryCookieBindings;

/// The reference company's state. Cheap to clone.
#[derive(Clone)]
pub struct ReferenceCompany {
    inner: Arc<Inner>,
}

struct Inner {
    config: CompanyConfig,
    base: String,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
    clients: Arc<dyn ClientRegistry>,
    sessions: MemorySessionDirectory,
    replay: MemoryReplayGuard,
    browser: BrowserSession,
    cookies: MemoryCookieBindings,
    tokens: Mutex<Tokens>,
    devices: Devices,
    operations: Mutex<Operations>,
    idempotency: Bounded<[u8; 32], api::Remembered>,
    /// Keys the device page's CSRF tokens.
    csrf_key: Zeroizing<[u8; 32]>,
    /// What the operator API asks of its callers.
    operator_credential: SecretToken,
}

impl ReferenceCompany {
    /// A company from its configuration, with injected time, randomness and client resolution.
    pub fn new(
        config: CompanyConfig,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
        clients: Arc<dyn ClientRegistry>,
    ) -> Self {
        let base = config.base();
        let sessions = MemorySessionDirectory::new(clock.clone(), rng.clone());
        let replay = MemoryReplayGuard::new(clock.clone());
        let endpoint = pap_shared::HttpsUrl::parse(&format!("{base}{BROWSER_SESSION_PATH}"))
            .expect("https://{a valid domain}/poppy/browser-session is a valid HTTPS URL");
        let verifier = Verifier::new(VerifierParts {
            endpoint,
            domain: config.domain.clone(),
            clock: clock.clone(),
            clients: clients.clone(),
            sessions: Arc::new(sessions.clone()),
            replay: Arc::new(replay.clone()),
        });
        let cookies = MemoryCookieBindings::new(clock.clone());
        let browser = BrowserSession::new(verifier, Arc::new(cookies.clone()), rng.clone());
        let devices = Devices::new(clock.clone());
        let idempotency = Bounded::new(api::IDEMPOTENCY_CAPACITY, WhenFull::Evict, clock.clone());
        let mut csrf_key = Zeroizing::new([0u8; 32]);
        rng.fill(csrf_key.as_mut());
        let mut credential = Zeroizing::new([0u8; 32]);
        rng.fill(credential.as_mut());
        let operator_credential = SecretToken::new(URL_SAFE_NO_PAD.encode(credential.as_ref()));
        Self {
            inner: Arc::new(Inner {
                config,
                base,
                clock,
                rng,
                clients,
                sessions,
                replay,
                browser,
                cookies,
                tokens: Mutex::default(),
                devices,
                operations: Mutex::default(),
                idempotency,
                csrf_key,
                operator_credential,
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CompanyConfig {
        &self.inner.config
    }

    /// The Session directory (for tests and operators).
    pub fn sessions(&self) -> &MemorySessionDirectory {
        &self.inner.sessions
    }

    /// The public HTTPS surface.
    pub fn router(&self) -> Router {
        Router::new()
            .merge(discovery::routes())
            .merge(token::routes())
            .merge(device::routes())
            .merge(api::routes(&self.inner.config))
            .merge(operations::routes())
            .merge(website::routes())
            .merge(browser_session_router())
            .with_state(self.clone())
    }

    /// The operator API (approve a device code, count performed operations, store sizes), for
    /// callers with [`Self::operator_credential`] and a loopback `Host`. Serve it only on a
    /// loopback address.
    pub fn operator_router(&self) -> Router {
        operator::routes(self).with_state(self.clone())
    }

    /// The operator API's credential, drawn when the company was made. Give it to the operator
    /// through a file only they can read; never log it.
    pub fn operator_credential(&self) -> &SecretToken {
        &self.inner.operator_credential
    }

    /// Every store's record count, by name: what the week simulation and the load tool watch
    /// return to their baseline once records expire.
    pub fn store_sizes(&self) -> BTreeMap<&'static str, u64> {
        let inner = &self.inner;
        let mut sizes = BTreeMap::from([
            ("sessions", inner.sessions.len()),
            ("replay_marks", inner.replay.len()),
            ("cookie_bindings", inner.cookies.len()),
            ("idempotency_keys", inner.idempotency.len()),
        ]);
        sizes.extend(inner.devices.sizes());
        sizes.extend(lock(&inner.tokens).sizes());
        sizes.extend(lock(&inner.operations).sizes());
        sizes
    }

    /// Drops every expired record of every store. moka drops its records as real time passes
    /// on its own; the maps of tokens and operations need this, and so does a test's clock.
    pub fn sweep(&self) {
        let inner = &self.inner;
        let now = self.now();
        inner.sessions.sweep();
        inner.replay.sweep();
        inner.cookies.sweep();
        inner.idempotency.sweep();
        inner.devices.sweep();
        lock(&inner.tokens).sweep(now);
        lock(&inner.operations).sweep(now);
    }

    /// Sweeps every `every` on a task of its own, until the company is dropped.
    pub fn start_maintenance(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let company = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(inner) = company.upgrade() else { return };
                ReferenceCompany { inner }.sweep();
            }
        })
    }

    /// A random token with `prefix`: `prefix_` + 22 base64url characters (128 bits).
    fn random_token(&self, prefix: &str) -> String {
        let mut bytes = [0u8; 16];
        self.inner.rng.fill(&mut bytes);
        format!("{prefix}_{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    fn now(&self) -> UnixTime {
        self.inner.clock.now()
    }

    /// Checks the request's one DPoP proof for `method path` (RFC 9449 §4.3), with the access
    /// token when one is sent, and marks its `jti` once per key (PAP-4.3-06). Returns the key's
    /// thumbprint.
    async fn check_dpop(
        &self,
        headers: &HeaderMap,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> Result<String, ApiError> {
        let invalid = |status| {
            if token.is_some() {
                ApiError::challenge(status, OAuthErrorCode::InvalidDpopProof)
            } else {
                ApiError::new(status, OAuthErrorCode::InvalidDpopProof)
            }
        };
        let status = if token.is_some() {
            http::StatusCode::UNAUTHORIZED
        } else {
            http::StatusCode::BAD_REQUEST
        };
        let mut proofs = headers.get_all("dpop").iter();
        let (Some(proof), None) = (proofs.next(), proofs.next()) else {
            return Err(invalid(status));
        };
        let proof = proof.to_str().map_err(|_| invalid(status))?;
        let htu = format!("{}{path}", self.inner.base);
        let request = DpopRequest {
            method,
            htu: &htu,
            access_token: token,
            nonce: None,
        };
        let now = self.now();
        let verified = verify_dpop_proof(proof, &request, now).map_err(|error| {
            tracing::info!(%error, "DPoP proof refused");
            invalid(status)
        })?;
        let key = ReplayKey::of("dpop", &verified.thumbprint, &verified.jti);
        let first = self
            .inner
            .replay
            .mark_once(key, verified.iat.plus(pap_shared::DPOP_IAT_WINDOW))
            .await
            .map_err(ApiError::store)?;
        if !first {
            return Err(invalid(status));
        }
        Ok(verified.thumbprint)
    }
}

impl fmt::Debug for ReferenceCompany {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReferenceCompany")
            .field("domain", &self.inner.config.domain)
            .finish_non_exhaustive()
    }
}

impl FromRef<ReferenceCompany> for BrowserSession {
    fn from_ref(company: &ReferenceCompany) -> Self {
        company.inner.browser.clone()
    }
}

/// SHA-256 of a token: what the stores keep instead of the token.
fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Critical sections are short map updates that leave the maps consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The scopes of a space-separated `scope` parameter, in order, without duplicates.
fn scopes(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in text.split(' ').filter(|s| !s.is_empty()) {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    out
}
