//! The reference company: a small shop that speaks PAP draft 0.2 (discovery, token endpoint
//! with `private_key_jwt` and DPoP, jwt-bearer Sessions, Device Sign-In, Account Tokens and
//! revocation, an OpenAPI API that proposes operations, Operations v1) and whose website
//! follows the PAP Session through the browser-session bridge.
//!
//! Everything is in memory behind the crate's store traits; [`ReferenceCompany::router`] is the
//! public HTTPS surface and [`ReferenceCompany::operator_router`] the loopback-only operator API.

mod api;
mod caller;
mod client_address;
mod client_auth;
mod config;
mod csrf_key;
mod device;
mod discovery;
mod front;
mod layout;
mod operations;
mod operator;
mod protocol;
mod token;
mod website;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use pap_shared::{ClientId, Clock, DpopRequest, OAuthErrorCode, Rng, SecretToken, UnixTime, verify_dpop_proof};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

pub use self::config::{AccountConfig, CompanyConfig, ConfigError, ProposalConfig, ReadConfig, ScopeConfig};
use self::csrf_key::CsrfKeys;
use self::device::Devices;
pub use self::device::{ACCOUNT_ATTEMPTS, ADDRESS_ATTEMPTS, ATTEMPT_WINDOW, LOOKUP_ATTEMPTS, PENDING_PER_CLIENT};
pub use self::operations::{OPERATION_RETENTION, OPERATIONS_PER_ACCOUNT};
use self::protocol::ApiError;
pub use self::token::SESSION_TOKENS_PER_SESSION;
use pap_company::limits::{REPLAY_CAPACITY, REPLAY_PRESSURE, REPLAY_SHARE};
use pap_company::records::{MemoryRecords, Records};
use pap_company::resolver::ClientRegistry;
use pap_company::route::{BROWSER_SESSION_PATH, BrowserSession, browser_session_router};
use pap_company::slot::SlotTag;
use pap_company::stores::{CookieBindings, MemoryCookieBindings, Owner};
use pap_company::stores::{JoinStore, PerRequester, RecordSessions, RequesterShares, SeparateStores};
use pap_company::stores::{MemoryReplayGuard, ReplayGuard, ReplayKey};
use pap_company::verify::{Verifier, VerifierParts};

/// Most records the in-memory reference company holds (Sessions, tokens, device codes,
/// operations, idempotency answers, attempt counts together); past it new ones are refused
/// with 429 until expired ones are swept.
pub const RECORD_CAPACITY: usize = 2_000_000;

/// Where the reference company keeps what it knows: versioned records, replay marks and cookie
/// bindings. In this process ([`CompanyStores::in_memory`]), or in Redis for several replicas
/// (`CompanyStores::redis`, feature `redis`).
#[derive(Clone)]
pub struct CompanyStores {
    records: Arc<dyn Records>,
    replay: Arc<dyn ReplayGuard>,
    cookies: Arc<dyn CookieBindings>,
    /// What a join reads and writes, when the store does it as one (Redis: one script per
    /// join); otherwise the three stores above, one after the other.
    joins: Option<Arc<dyn JoinStore>>,
    /// The embedded stores, which expired records leave only when swept.
    memory: Option<MemoryStores>,
    /// The Redis store, asked whether it answers.
    #[cfg(feature = "redis")]
    redis: Option<pap_company::stores::RedisStore>,
    /// The device page's CSRF keys, when replicas share them (a page one replica served is
    /// posted to another).
    device_csrf: Option<Arc<CsrfKeys>>,
    /// How many live replay marks one client address may hold through this process, whatever
    /// the domains it signs for (review N3), once the shares bind...
    address_share: u64,
    /// ...at this many live marks made through this process.
    replay_pressure: u64,
}

#[derive(Clone)]
struct MemoryStores {
    records: Arc<MemoryRecords>,
    replay: MemoryReplayGuard,
    cookies: MemoryCookieBindings,
}

impl CompanyStores {
    /// Everything in this process, bounded (see [`crate::limits`]).
    pub fn in_memory(clock: Arc<dyn Clock>) -> Self {
        Self::in_memory_with_replay_share(clock, REPLAY_SHARE, REPLAY_PRESSURE)
    }

    /// Everything in this process, one owner (a client's registrable domain, or a client
    /// address) holding at most `replay_share` replay marks once `replay_pressure` marks are
    /// live (0: always; see [`pap_company::limits::REPLAY_PRESSURE`]).
    pub fn in_memory_with_replay_share(clock: Arc<dyn Clock>, replay_share: u64, replay_pressure: u64) -> Self {
        let memory = MemoryStores {
            records: Arc::new(MemoryRecords::new(RECORD_CAPACITY, clock.clone())),
            replay: MemoryReplayGuard::with_pressure(REPLAY_CAPACITY, replay_share, replay_pressure, clock.clone()),
            cookies: MemoryCookieBindings::new(clock),
        };
        Self {
            records: memory.records.clone(),
            replay: Arc::new(memory.replay.clone()),
            cookies: Arc::new(memory.cookies.clone()),
            joins: None,
            memory: Some(memory),
            #[cfg(feature = "redis")]
            redis: None,
            device_csrf: None,
            address_share: REPLAY_SHARE,
            replay_pressure,
        }
    }

    /// The same stores, one client address holding at most `marks` live replay marks through
    /// this process (default [`REPLAY_SHARE`]).
    pub fn with_address_share(mut self, marks: u64) -> Self {
        self.address_share = marks;
        self
    }

    /// Everything in Redis, shared by every replica given the same store.
    #[cfg(feature = "redis")]
    pub async fn redis(
        store: &pap_company::stores::RedisStore,
        rng: &dyn Rng,
        clock: &dyn Clock,
    ) -> Result<Self, pap_company::stores::StoreError> {
        let shared = Arc::new(store.clone());
        let device_csrf = CsrfKeys::shared(shared.clone(), rng, clock.now()).await?;
        Ok(Self {
            records: shared.clone(),
            replay: shared.clone(),
            cookies: shared.clone(),
            joins: Some(shared),
            memory: None,
            redis: Some(store.clone()),
            device_csrf: Some(Arc::new(device_csrf)),
            address_share: REPLAY_SHARE,
            replay_pressure: store.replay_pressure(),
        })
    }

    /// Which store it is, and whether it answers now.
    pub async fn ready(&self) -> (&'static str, Result<(), pap_company::stores::StoreError>) {
        #[cfg(feature = "redis")]
        if let Some(redis) = &self.redis {
            return ("redis", redis.ping().await);
        }
        ("memory", Ok(()))
    }
}

impl fmt::Debug for CompanyStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompanyStores")
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

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
    stores: CompanyStores,
    sessions: RecordSessions,
    browser: BrowserSession,
    devices: Devices,
    /// The device page's CSRF keys, rotated with an overlap.
    csrf: Arc<CsrfKeys>,
    /// What the operator API asks of its callers.
    operator_credential: SecretToken,
    /// The live replay marks each client address made through this process.
    requesters: Arc<RequesterShares>,
}

impl ReferenceCompany {
    /// A company from its configuration, with injected time, randomness and client resolution,
    /// keeping everything in this process.
    pub fn new(
        config: CompanyConfig,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
        clients: Arc<dyn ClientRegistry>,
    ) -> Self {
        let stores = CompanyStores::in_memory(clock.clone());
        Self::with_stores(config, clock, rng, clients, stores)
    }

    /// A company keeping what it knows in `stores`: replicas given the same Redis store agree.
    pub fn with_stores(
        config: CompanyConfig,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
        clients: Arc<dyn ClientRegistry>,
        mut stores: CompanyStores,
    ) -> Self {
        let base = config.base();
        // Every mark a request makes counts against its client address too (review N3: domains
        // are cheap): the join's and the company's own (client assertions, DPoP proofs).
        let requesters = RequesterShares::new(stores.address_share, stores.replay_pressure, clock.clone());
        let own_marks = stores.replay.clone();
        stores.replay = Arc::new(PerRequester::new(own_marks.clone(), requesters.clone()));
        let sessions = RecordSessions::new(stores.records.clone(), clock.clone(), rng.clone());
        let endpoint = pap_shared::HttpsUrl::parse(&format!("{base}{BROWSER_SESSION_PATH}"))
            .expect("https://{a valid domain}/poppy/browser-session is a valid HTTPS URL");
        let verifier = Verifier::new(VerifierParts {
            endpoint,
            domain: config.domain.clone(),
            clock: clock.clone(),
            clients: clients.clone(),
            sessions: Arc::new(sessions.clone()),
            joins: Arc::new(PerRequester::new(
                stores.joins.clone().unwrap_or_else(|| {
                    Arc::new(SeparateStores::new(
                        Arc::new(sessions.clone()),
                        own_marks,
                        stores.cookies.clone(),
                    ))
                }),
                requesters.clone(),
            )),
        });
        let browser = BrowserSession::new(verifier, stores.cookies.clone(), rng.clone());
        let csrf = stores
            .device_csrf
            .clone()
            .unwrap_or_else(|| Arc::new(CsrfKeys::local(rng.as_ref(), clock.now())));
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
                stores,
                sessions,
                browser,
                devices: Devices::new(),
                csrf,
                operator_credential,
                requesters,
            }),
        }
    }

    /// Which store it keeps its state in, and whether that store answers now.
    pub async fn store_ready(&self) -> (&'static str, Result<(), pap_company::stores::StoreError>) {
        self.inner.stores.ready().await
    }

    /// Where its records live.
    pub(crate) fn records(&self) -> &dyn Records {
        self.inner.stores.records.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &CompanyConfig {
        &self.inner.config
    }

    /// The Sessions (for tests and operators).
    pub fn sessions(&self) -> &RecordSessions {
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
            .merge(front::routes())
            .merge(layout::routes())
            .merge(browser_session_router())
            .layer(axum::middleware::from_fn_with_state(self.clone(), as_requester))
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

    /// Every store's record count, by kind: what the week simulation and the load tool watch
    /// return to their baseline once records expire. Empty over Redis, where every key expires
    /// on its own.
    pub fn store_sizes(&self) -> BTreeMap<String, u64> {
        let Some(memory) = &self.inner.stores.memory else {
            return BTreeMap::new();
        };
        let mut sizes: BTreeMap<String, u64> = memory.records.sizes().into_iter().collect();
        sizes.insert("replay_marks".into(), memory.replay.len());
        sizes.insert("cookie_bindings".into(), memory.cookies.len());
        sizes
    }

    /// Drops every expired record of the embedded stores. moka drops its records as real time
    /// passes on its own; the records need this, and so does a test's clock.
    pub fn sweep(&self) {
        self.inner.requesters.sweep();
        if let Some(memory) = &self.inner.stores.memory {
            memory.records.sweep();
            memory.replay.sweep();
            memory.cookies.sweep();
        }
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
                let company = ReferenceCompany { inner };
                company.sweep();
                let now = company.now();
                if let Err(error) = company.inner.csrf.rotate_if_due(company.inner.rng.as_ref(), now).await {
                    tracing::warn!(%error, "the device page's CSRF key could not be rotated; the next tick tries again");
                }
            }
        })
    }

    /// A random token of `client_id`'s with `prefix`: `prefix_`, the hash tag of the client's
    /// owner (4 hex digits, [`pap_company::slot`]: its records' slot in a Redis Cluster), then
    /// 22 base64url characters (128 bits).
    fn random_token(&self, prefix: &str, client_id: &ClientId) -> String {
        // Zeroized once minted: the token itself is the only copy left.
        let mut bytes = zeroize::Zeroizing::new([0u8; 16]);
        self.inner.rng.fill(bytes.as_mut());
        SlotTag::of(Owner::of_client(client_id)).mint(&format!("{prefix}_"), bytes.as_ref())
    }

    fn now(&self) -> UnixTime {
        self.inner.clock.now()
    }

    /// Checks the request's one DPoP proof for `method path` (RFC 9449 §4.3), with the access
    /// token when one is sent, and marks its `jti` once per key (PAP-4.3-06), against the share
    /// of `client_id` (authenticated already: the proof is only checked once the client is
    /// known, so a stranger's proofs mark nothing). Returns the key's thumbprint.
    async fn check_dpop(
        &self,
        headers: &HeaderMap,
        method: &str,
        path: &str,
        token: Option<&str>,
        client_id: &ClientId,
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
        let key = ReplayKey::of("dpop", &verified.thumbprint, &verified.jti, client_id);
        let first = self
            .inner
            .stores
            .replay
            .mark_once(key, verified.iat.plus(pap_shared::DPOP_IAT_WINDOW))
            .await
            .map_err(ApiError::store)?;
        if !first {
            pap_company::metrics::replay_hit();
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

/// The one place a request's client address is worked out (from the peer, or from trusted
/// proxies' `X-Forwarded-For`): it goes into the request's extensions for the throttles
/// (`/device`), and the request runs as one from that address (review N1), so the agents'
/// documents it makes the company fetch count against the address's share of the resolver.
async fn as_requester(
    axum::extract::State(company): axum::extract::State<ReferenceCompany>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0);
    let trusted = &company.inner.config.trusted_proxies;
    match client_address::ClientAddress::of(peer, request.headers(), trusted) {
        Some(address) => {
            request.extensions_mut().insert(address);
            pap_company::resolver::as_requester(address.key(), next.run(request)).await
        }
        None => next.run(request).await,
    }
}
