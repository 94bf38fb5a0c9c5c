//! The real resolver: fetches the Client ID Metadata Document and the JWKS over HTTPS, with the
//! wire doc's rules (§2.3) and caching.
//!
//! - The metadata is fetched with no redirect; the JWKS may redirect up to three times, never
//!   off the `client_id`'s host.
//! - HTTPS only, to names only (no IP literals), resolving to public addresses only, unless the
//!   test allow-list ([`ResolverConfig::overrides`]) maps the name (PAP-3-10).
//! - Each document at most [`ResolverConfig::max_bytes`]; both of a client's documents, every
//!   redirect included, within one deadline ([`ResolverConfig::timeout`], 5 s), each connection
//!   within [`ResolverConfig::connect_timeout`] and each read within
//!   [`ResolverConfig::read_timeout`] (2 s: a server that accepts and stays silent is given up
//!   early); a JWKS of at most [`pap_shared::MAX_JWKS_KEYS`] keys.
//! - Cached by `Cache-Control` (`max-age` clamped to 60 s..[`ResolverConfig::max_cache_lifetime`],
//!   5 minutes by default, 60 s when absent, [`NO_STORE_SECONDS`] with `no-store`/`no-cache`, so
//!   an agent that asks for no caching costs one fetch per few seconds, not one per request; when
//!   no fetch slot is free, documents up to [`STALE_IF_BUSY_SECONDS`] past their lifetime are used
//!   rather than refuse an agent the resolver knows); documents in use are refreshed in the
//!   background in the last fifth of their lifetime while the cached ones keep serving (review
//!   S3: an agent's requests never wait for its refetch), and a caller that finds them expired
//!   meanwhile takes that refresh's outcome; an unknown `kid`,
//!   or a signature none of the cached keys verifies, refetches the JWKS at most once per 60 s; a
//!   failed `client_id` is remembered for 30 s. The cap bounds how long a key the agent removed
//!   (rotated out, or leaked) keeps verifying here: an agent's `max-age` of a day would otherwise
//!   keep it for a day.
//!
//! What strangers can make it do is bounded (security review H1): the cached documents weigh at
//! most [`ResolverConfig::cache_bytes`] and the remembered failures number at most
//! [`FAILURE_CAPACITY`], both dropping the least used first; concurrent requests for one
//! `client_id` share one fetch; and fetches are budgeted (review N1, `budget.rs`): at most
//! [`ResolverConfig::max_in_flight`] at once, of which first contacts hold at most
//! [`ResolverConfig::max_first_contacts_in_flight`] and one registrable domain at most
//! [`ResolverConfig::max_in_flight_per_domain`]; a fetch past its share fails at once with
//! [`ResolveError::Busy`].

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::budget::FetchBudget;
use super::metadata::ClientMetadata;
use super::{ClientKeys, ClientRegistry, ResolveError};
use crate::expiry::{ExpireAt, Expiring};
use crate::store::{Bounded, WhenFull};
use async_trait::async_trait;
use pap_net::resolve::PublicOnly;
use pap_shared::{ClientId, Clock, HttpsUrl, Jwks, UnixTime};
use rustls::pki_types::CertificateDer;

/// Shortest time a fetched document is cached, in seconds.
const MIN_CACHE_SECONDS: i64 = 60;
/// Longest time a fetched document may be cached when configured, in seconds.
const MAX_CACHE_SECONDS: i64 = 86_400;
/// The default cap on a fetched document's cache lifetime.
pub const DEFAULT_MAX_CACHE_LIFETIME: Duration = Duration::from_secs(300);
/// Least time between two refetches of one JWKS for an unknown `kid`, in seconds.
const KID_REFETCH_SECONDS: i64 = 60;
/// How long documents served with `no-store` or `no-cache` are used, in seconds: a floor, so
/// that such an agent (the project's own `identity serve` did so) costs a fetch every few
/// seconds rather than one per request, each of which a stranger's flood could refuse.
pub const NO_STORE_SECONDS: i64 = 5;
/// How long past their lifetime cached documents are still used when no fetch slot is free,
/// in seconds: a flood of first contacts does not refuse an agent whose documents just expired.
/// This is how much longer a removed key may verify, and only while the resolver is busy.
pub const STALE_IF_BUSY_SECONDS: i64 = 60;
/// How long a failed `client_id` is answered from memory, in seconds.
const FAILURE_SECONDS: i64 = 30;
/// Most redirects followed for a JWKS.
const MAX_JWKS_REDIRECTS: usize = 3;
/// Most failed `client_id`s remembered at once (each at most ~2 KiB with its URL); beyond it
/// the least used is forgotten, which costs at most one more fetch.
pub const FAILURE_CAPACITY: u64 = 4_096;

/// How the resolver reaches the network, and how much it may hold.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    /// Extra trusted roots, added to the web PKI roots (a test CA).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Test allow-list: these names connect to these addresses (which may be loopback), like
    /// curl's `--resolve`; `*.parent` covers every name under `parent`. Every other name must
    /// resolve to public addresses.
    pub overrides: HashMap<String, SocketAddr>,
    /// One deadline for a client's documents: the metadata, the JWKS and every redirect, bodies
    /// included (5 s by default).
    pub timeout: Duration,
    /// Time limit for one connection, TLS included (2 s by default).
    pub connect_timeout: Duration,
    /// Time limit for each read, the first byte of an answer included (2 s by default).
    pub read_timeout: Duration,
    /// Size limit for one document.
    pub max_bytes: usize,
    /// Most bytes of fetched documents held in the cache (32 MiB by default: some 300 agents
    /// at the worst size, thousands at a usual one).
    pub cache_bytes: u64,
    /// Most fetches under way at once, over all clients (32 by default).
    pub max_in_flight: usize,
    /// Most of those for first contacts, `client_id`s the company has not vouched for (no
    /// person let them in here: `ClientKeys::vouch`; 16 by default): the rest is kept for
    /// agents it knows.
    pub max_first_contacts_in_flight: usize,
    /// Most fetches under way at once for `client_id`s under one registrable domain (2 by
    /// default).
    pub max_in_flight_per_domain: usize,
    /// Most fetches under way at once that requests from one address triggered (4 by default;
    /// see `resolver::as_requester`).
    pub max_in_flight_per_requester: usize,
    /// Longest an agent's documents are cached whatever their `max-age` says (5 minutes by
    /// default, at least 60 s, at most a day): how long a removed key may keep verifying.
    pub max_cache_lifetime: Duration,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        Self {
            extra_roots: Vec::new(),
            overrides: HashMap::new(),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(2),
            max_bytes: 100 * 1024,
            cache_bytes: 32 * 1024 * 1024,
            max_in_flight: 32,
            max_first_contacts_in_flight: 16,
            max_in_flight_per_domain: 2,
            max_in_flight_per_requester: 4,
            max_cache_lifetime: DEFAULT_MAX_CACHE_LIFETIME,
        }
    }
}

/// What a resolver holds: see [`HttpClientResolver::held`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolverHolds {
    /// Clients whose documents are cached.
    pub clients: u64,
    /// Their weight: the documents' bytes as fetched plus each `client_id`'s.
    pub bytes: u64,
    /// Failed clients remembered.
    pub failures: u64,
}

/// One client's documents as fetched, and until when each may be used.
#[derive(Debug)]
struct Entry {
    metadata: Arc<ClientMetadata>,
    metadata_until: UnixTime,
    keys: Arc<Jwks>,
    keys_until: UnixTime,
    last_kid_refetch: Option<UnixTime>,
    /// The outcome of this entry's one keys refetch: the callers that want a `kid` it lacks
    /// while the refetch runs (a rotated key under load) wait for it and share what it brings,
    /// rather than each fetch, or find the fetch permits gone and be refused.
    refetched: tokio::sync::OnceCell<Arc<Entry>>,
    /// When the documents were fetched: the refresh ahead of expiry starts four fifths of the
    /// way to it.
    fetched_at: UnixTime,
    /// Whether a refresh ahead of expiry was started...
    ahead_started: std::sync::atomic::AtomicBool,
    /// ...and its outcome: the callers that find the entry expired while it runs wait for it
    /// rather than fetch again.
    ahead: tokio::sync::OnceCell<Result<Arc<Entry>, ResolveError>>,
    /// The metadata document's size as fetched.
    metadata_bytes: u32,
    /// Both documents' size as fetched: the entry's weight in the cache.
    bytes: u32,
}

impl Entry {
    fn fresh(&self, now: UnixTime) -> bool {
        now < self.metadata_until && now < self.keys_until
    }

    /// Whether a refresh ahead of expiry is due: the last fifth of the documents' lifetime.
    fn refresh_due(&self, now: UnixTime) -> bool {
        let until = self.metadata_until.min(self.keys_until);
        let lifetime = until.since(self.fetched_at);
        now.since(self.fetched_at) >= lifetime - lifetime / 5
    }

    fn may_refetch_keys(&self, now: UnixTime) -> bool {
        self.last_kid_refetch
            .is_none_or(|t| now.since(t) >= KID_REFETCH_SECONDS)
    }

    /// The same entry with the keys refetched at `now` (`None`: the refetch failed, and the
    /// cached keys stay).
    fn after_refetch(&self, fresh: Option<(Arc<Jwks>, i64, u32)>, now: UnixTime) -> Self {
        let (keys, keys_until, bytes) = match fresh {
            Some((keys, lifetime, bytes)) => (keys, now.plus(lifetime), self.metadata_bytes.saturating_add(bytes)),
            None => (self.keys.clone(), self.keys_until, self.bytes),
        };
        Self {
            metadata: self.metadata.clone(),
            metadata_until: self.metadata_until,
            keys,
            keys_until,
            last_kid_refetch: Some(now),
            refetched: tokio::sync::OnceCell::new(),
            fetched_at: self.fetched_at,
            ahead_started: std::sync::atomic::AtomicBool::new(false),
            ahead: tokio::sync::OnceCell::new(),
            metadata_bytes: self.metadata_bytes,
            bytes,
        }
    }
}

impl Expiring for Entry {
    /// Kept past its lifetime for [`STALE_IF_BUSY_SECONDS`], to be used only when busy.
    fn expires_at(&self) -> UnixTime {
        self.metadata_until.min(self.keys_until).plus(STALE_IF_BUSY_SECONDS)
    }
}

/// Resolves `client_id` -> metadata -> JWKS over HTTPS, with bounded caching.
#[derive(Clone)]
pub struct HttpClientResolver {
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    max_bytes: usize,
    /// [`ResolverConfig::max_cache_lifetime`] in seconds.
    max_cache_seconds: i64,
    documents: moka::future::Cache<ClientId, Arc<Entry>>,
    failures: Arc<Bounded<ClientId, ResolveError>>,
    budget: Arc<FetchBudget>,
    /// [`ResolverConfig::timeout`].
    deadline: Duration,
}

impl HttpClientResolver {
    /// A resolver with its own HTTPS client.
    pub fn new(config: ResolverConfig, clock: Arc<dyn Clock>) -> Result<Self, ResolverBuildError> {
        let roots = pap_net::tls::trust_roots(&config.extra_roots).map_err(|_| ResolverBuildError::BadRoot)?;
        let mut tls = pap_net::tls::client_config(roots).map_err(|_| ResolverBuildError::Tls)?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            // No per-request timeout: one deadline covers a client's documents (`within_deadline`).
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .no_proxy()
            .dns_resolver(Arc::new(PublicOnly::with_overrides(config.overrides)))
            .build()
            .map_err(|_| ResolverBuildError::Tls)?;
        let documents = moka::future::Cache::builder()
            .max_capacity(config.cache_bytes)
            .weigher(|client_id: &ClientId, entry: &Arc<Entry>| {
                u32::try_from(client_id.as_str().len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(entry.bytes)
            })
            .expire_after(ExpireAt::new(clock.clone()))
            .build();
        Ok(Self {
            http,
            failures: Arc::new(Bounded::new(FAILURE_CAPACITY, WhenFull::Evict, clock.clone())),
            clock,
            max_bytes: config.max_bytes,
            max_cache_seconds: i64::try_from(config.max_cache_lifetime.as_secs())
                .unwrap_or(MAX_CACHE_SECONDS)
                .clamp(MIN_CACHE_SECONDS, MAX_CACHE_SECONDS),
            documents,
            budget: Arc::new(FetchBudget::new(
                config.max_in_flight,
                config.max_first_contacts_in_flight,
                config.max_in_flight_per_domain,
                config.max_in_flight_per_requester,
            )),
            deadline: config.timeout,
        })
    }

    /// What the resolver holds now (after pending work is done): for load tests and metrics.
    pub async fn held(&self) -> ResolverHolds {
        self.documents.run_pending_tasks().await;
        ResolverHolds {
            clients: self.documents.entry_count(),
            bytes: self.documents.weighted_size(),
            failures: self.failures.len(),
        }
    }

    async fn resolve(&self, client_id: &ClientId, kid: Option<&str>) -> Result<Arc<Entry>, ResolveError> {
        let now = self.clock.now();
        if let Some(entry) = self.documents.get(client_id).await {
            if entry.fresh(now) {
                let wants_kid = kid.is_some_and(|kid| !entry.keys.has_kid(kid));
                if wants_kid && entry.may_refetch_keys(now) {
                    // The agent may have rotated its key: refetch the JWKS, at most once per
                    // 60 s, shared by every caller that asks meanwhile. A failed refetch keeps
                    // the cached keys rather than lock it out.
                    return Ok(self.refetch_once(client_id, &entry, now).await);
                }
                if entry.refresh_due(now)
                    && self.budget.is_known(client_id)
                    && !entry.ahead_started.swap(true, std::sync::atomic::Ordering::AcqRel)
                {
                    // Review S3: a known agent in use is refreshed in the background before its
                    // documents expire, while its cached keys keep serving, so its requests
                    // never wait for a fetch, nor meet a busy resolver at expiry. (Strangers
                    // gain nothing from it, and are not given it.) The refresh counts against
                    // the address of the request that started it, as a fetch of its own would.
                    let (resolver, client_id, entry) = (self.clone(), client_id.clone(), entry.clone());
                    let requester = super::budget::requester();
                    tokio::spawn(async move {
                        let refresh = resolver.refresh_ahead(&client_id, &entry, now);
                        match requester {
                            Some(address) => super::budget::as_requester(address, refresh).await,
                            None => refresh.await,
                        }
                    });
                }
                return Ok(entry);
            }
            if entry.ahead_started.load(std::sync::atomic::Ordering::Acquire)
                && let Ok(fresh) = self.refresh_ahead(client_id, &entry, now).await
                && fresh.fresh(now)
            {
                // The refresh ahead of expiry is under way or done: its outcome, not a fetch
                // of our own.
                return Ok(fresh);
            }
            // Stale on the injected clock (moka's own timer runs on the real one): fetched
            // again, and used only if no fetch slot is free and it is not too old.
            self.documents.invalidate(client_id).await;
            let stale = entry;
            let fetched = self.resolve_fetching(client_id, now).await;
            return match fetched {
                Err(ResolveError::Busy) if now < stale.expires_at() => {
                    crate::metrics::resolver_stale_served();
                    // Kept for the next callers too, until a fetch replaces it.
                    self.documents.insert(client_id.clone(), stale.clone()).await;
                    Ok(stale)
                }
                other => other,
            };
        }
        self.resolve_fetching(client_id, now).await
    }

    /// The documents fetched, or the failure remembered.
    async fn resolve_fetching(&self, client_id: &ClientId, now: UnixTime) -> Result<Arc<Entry>, ResolveError> {
        if let Some(error) = self.failures.get(client_id) {
            return Err(error);
        }
        // One fetch per client however many ask at once; they all get its outcome.
        let fetched = self
            .documents
            .try_get_with_by_ref(client_id, self.fetch_entry(client_id, now))
            .await
            .map_err(|error| (*error).clone());
        if let Err(error) = &fetched
            && *error != ResolveError::Busy
        {
            self.failures
                .remember(client_id.clone(), error.clone(), now.plus(FAILURE_SECONDS));
        }
        fetched
    }

    /// `entry`'s one refresh ahead of expiry: the first caller runs it (the task the entry's
    /// use spawned, or a caller that found it expired first), the others wait for its outcome;
    /// fresh documents replace the entry. A failure (a busy budget included) leaves the entry
    /// to its expiry, when the next caller fetches as usual.
    async fn refresh_ahead(
        &self,
        client_id: &ClientId,
        entry: &Entry,
        now: UnixTime,
    ) -> Result<Arc<Entry>, ResolveError> {
        entry
            .ahead
            .get_or_init(|| async {
                let fresh = self.fetch_entry(client_id, now).await;
                match &fresh {
                    Ok(fresh) => self.documents.insert(client_id.clone(), fresh.clone()).await,
                    Err(error) => {
                        tracing::info!(%client_id, %error, "refresh ahead of expiry failed");
                        if *error != ResolveError::Busy {
                            // As a fetch's failure: answered from memory for a while, not
                            // fetched again by the caller that finds the entry expired.
                            self.failures
                                .remember(client_id.clone(), error.clone(), now.plus(FAILURE_SECONDS));
                        }
                    }
                }
                fresh
            })
            .await
            .clone()
    }

    /// Fetches both documents within the deadline, holding the fetch's slots of the budget.
    async fn fetch_entry(&self, client_id: &ClientId, now: UnixTime) -> Result<Arc<Entry>, ResolveError> {
        let _slots = self.budget.take(client_id).map_err(|share| {
            crate::metrics::resolver_busy(share.label());
            ResolveError::Busy
        })?;
        let fetched = self
            .within_deadline("client metadata", self.fetch_documents(client_id, now))
            .await;
        crate::metrics::resolver_fetch(fetched.is_ok());
        fetched
    }

    /// `fetch`, or a timeout once [`ResolverConfig::timeout`] has passed.
    async fn within_deadline<T>(
        &self,
        what: &'static str,
        fetch: impl Future<Output = Result<T, ResolveError>>,
    ) -> Result<T, ResolveError> {
        tokio::time::timeout(self.deadline, fetch).await.unwrap_or_else(|_| {
            Err(ResolveError::Fetch {
                what,
                why: "timed out".into(),
            })
        })
    }

    async fn fetch_documents(&self, client_id: &ClientId, now: UnixTime) -> Result<Arc<Entry>, ResolveError> {
        let (body, lifetime) = self.fetch(&client_id.url(), "client metadata", None).await?;
        let metadata = Arc::new(ClientMetadata::parse(&body, client_id)?);
        let metadata_bytes = u32::try_from(body.len()).unwrap_or(u32::MAX);
        let (keys, keys_lifetime, keys_bytes) = self.fetch_keys(client_id, &metadata).await?;
        Ok(Arc::new(Entry {
            metadata_bytes,
            bytes: metadata_bytes.saturating_add(keys_bytes),
            metadata,
            metadata_until: now.plus(lifetime),
            keys,
            keys_until: now.plus(keys_lifetime),
            last_kid_refetch: None,
            refetched: tokio::sync::OnceCell::new(),
            fetched_at: now,
            ahead_started: std::sync::atomic::AtomicBool::new(false),
            ahead: tokio::sync::OnceCell::new(),
        }))
    }

    /// `entry`'s one refetch: the first caller runs it, the others wait for its outcome.
    async fn refetch_once(&self, client_id: &ClientId, entry: &Entry, now: UnixTime) -> Arc<Entry> {
        entry
            .refetched
            .get_or_init(|| self.refetch_keys(client_id, entry, now))
            .await
            .clone()
    }

    /// Refetches `entry`'s JWKS and caches the outcome; the entry as it now stands.
    async fn refetch_keys(&self, client_id: &ClientId, entry: &Entry, now: UnixTime) -> Arc<Entry> {
        let fresh = match self.budget.take(client_id) {
            Err(share) => {
                crate::metrics::resolver_busy(share.label());
                Err(ResolveError::Busy)
            }
            Ok(_slots) => {
                let fetch = self.fetch_keys(client_id, &entry.metadata);
                let fetched = self.within_deadline("client JWKS", fetch).await;
                crate::metrics::resolver_fetch(fetched.is_ok());
                fetched
            }
        };
        let fresh = fresh
            .inspect_err(|error| {
                tracing::info!(%client_id, %error, "JWKS refetch failed; keeping the cached keys");
            })
            .ok();
        let updated = Arc::new(entry.after_refetch(fresh, now));
        self.documents.insert(client_id.clone(), updated.clone()).await;
        updated
    }

    async fn fetch_keys(
        &self,
        client_id: &ClientId,
        metadata: &ClientMetadata,
    ) -> Result<(Arc<Jwks>, i64, u32), ResolveError> {
        let host = client_id.url().domain().map(str::to_owned);
        let (body, lifetime) = self.fetch(metadata.jwks_uri(), "client JWKS", host.as_deref()).await?;
        let keys = Jwks::parse(&body).map_err(ResolveError::InvalidKeys)?;
        Ok((Arc::new(keys), lifetime, u32::try_from(body.len()).unwrap_or(u32::MAX)))
    }

    /// GETs `url`; follows up to three redirects only when `redirect_host` names the one host
    /// they may stay on. Returns the body and its cache lifetime in seconds (0: do not cache).
    async fn fetch(
        &self,
        url: &HttpsUrl,
        what: &'static str,
        redirect_host: Option<&str>,
    ) -> Result<(Vec<u8>, i64), ResolveError> {
        let fail = |why: String| ResolveError::Fetch { what, why };
        let mut url = url.clone();
        for _ in 0..=MAX_JWKS_REDIRECTS {
            if url.domain().is_none() {
                return Err(ResolveError::Forbidden("the URL names an IP address"));
            }
            let response = self
                .http
                .get(url.url().clone())
                .header(http::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| fail(transport_reason(&e)))?;
            let status = response.status();
            if status.is_redirection() {
                let Some(host) = redirect_host else {
                    return Err(fail("a redirect was refused".into()));
                };
                let location = response
                    .headers()
                    .get(http::header::LOCATION)
                    .and_then(|l| l.to_str().ok());
                let next = location
                    .and_then(|l| url.url().join(l).ok())
                    .and_then(|u| HttpsUrl::parse(u.as_str()).ok());
                match next {
                    Some(next) if next.domain() == Some(host) => url = next,
                    _ => return Err(fail("a redirect left the client's host".into())),
                }
                continue;
            }
            if status != reqwest::StatusCode::OK {
                return Err(fail(format!("status {}", status.as_u16())));
            }
            if !json_content_type(response.headers()) {
                return Err(fail("the content type is not JSON".into()));
            }
            let lifetime = cache_lifetime(response.headers()).min(self.max_cache_seconds);
            let body = read_limited(response, self.max_bytes).await.map_err(fail)?;
            return Ok((body, lifetime));
        }
        Err(fail("too many redirects".into()))
    }
}

#[async_trait]
impl ClientRegistry for HttpClientResolver {
    async fn metadata(&self, client_id: &ClientId) -> Result<Arc<ClientMetadata>, ResolveError> {
        self.resolve(client_id, None).await.map(|entry| entry.metadata.clone())
    }
}

#[async_trait]
impl ClientKeys for HttpClientResolver {
    async fn keys(&self, client_id: &ClientId, kid: Option<&str>) -> Result<Arc<Jwks>, ResolveError> {
        self.resolve(client_id, kid).await.map(|entry| entry.keys.clone())
    }

    fn vouch(&self, client_id: &ClientId, account: &str) {
        self.budget.vouched(client_id, account);
    }

    /// One refetch of the JWKS, under the unknown-`kid` rate limit (once per 60 s per client),
    /// so a forged-signature flood costs at most that; a failed refetch keeps the cached keys.
    async fn keys_after_failure(
        &self,
        client_id: &ClientId,
        _kid: Option<&str>,
    ) -> Result<Option<Arc<Jwks>>, ResolveError> {
        let now = self.clock.now();
        let Some(entry) = self.documents.get(client_id).await else {
            return Ok(None);
        };
        if !entry.may_refetch_keys(now) {
            return Ok(None);
        }
        let updated = self.refetch_once(client_id, &entry, now).await;
        Ok((!Arc::ptr_eq(&updated.keys, &entry.keys)).then(|| updated.keys.clone()))
    }
}

impl fmt::Debug for HttpClientResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClientResolver")
            .field("max_bytes", &self.max_bytes)
            .field("cached", &self.documents.entry_count())
            .field("fetch_slots", &self.budget.available())
            .finish_non_exhaustive()
    }
}

/// Why the resolver could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolverBuildError {
    /// An extra root certificate could not be parsed.
    #[error("an extra root certificate is invalid")]
    BadRoot,
    /// The TLS client could not be configured.
    #[error("the HTTPS client could not be configured")]
    Tls,
}

fn transport_reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "timed out".into()
    } else if error.is_connect() {
        "could not connect (or the name has no public address)".into()
    } else {
        "transport error".into()
    }
}

fn json_content_type(headers: &http::HeaderMap) -> bool {
    let Some(value) = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json") || essence.eq_ignore_ascii_case("application/jwk-set+json")
}

/// The cache lifetime `Cache-Control` allows, clamped to 60 s..1 day; [`NO_STORE_SECONDS`] for
/// `no-store`/`no-cache`.
fn cache_lifetime(headers: &http::HeaderMap) -> i64 {
    let mut max_age = None;
    for directive in headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let directive = directive.trim().to_ascii_lowercase();
        if directive == "no-store" || directive == "no-cache" {
            return NO_STORE_SECONDS;
        }
        if let Some(seconds) = directive.strip_prefix("max-age=") {
            max_age = seconds.trim_matches('"').parse::<i64>().ok();
        }
    }
    max_age
        .unwrap_or(MIN_CACHE_SECONDS)
        .clamp(MIN_CACHE_SECONDS, MAX_CACHE_SECONDS)
}

async fn read_limited(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err("the document is too large".into());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport_reason(&e))? {
        if body.len() + chunk.len() > max {
            return Err("the document is too large".into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_lifetime_is_clamped() {
        let with = |v: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static(v));
            cache_lifetime(&h)
        };
        assert_eq!(cache_lifetime(&http::HeaderMap::new()), 60);
        assert_eq!(with("max-age=5"), 60);
        assert_eq!(with("public, max-age=600"), 600);
        assert_eq!(with("max-age=999999"), 86_400);
        assert_eq!(with("no-store"), NO_STORE_SECONDS);
        assert_eq!(with("max-age=600, no-cache"), NO_STORE_SECONDS);
    }

    #[test]
    fn json_content_types() {
        let with = |v: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(v));
            json_content_type(&h)
        };
        assert!(with("application/json"));
        assert!(with("application/json; charset=utf-8"));
        assert!(with("application/jwk-set+json"));
        assert!(!with("text/html"));
        assert!(!json_content_type(&http::HeaderMap::new()));
    }
}
