//! The company the company-side targets run against, built once per process and deterministic:
//! a fixed clock, keys and ids from a counting generator, so a committed corpus entry that was a
//! valid join when it was found is a valid join (the first time) in every later run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use pap_company::resolver::StaticClientKeys;
use pap_company::route::{BrowserSession, browser_session_router};
use pap_company::stores::{
    MemoryCookieBindings, MemoryReplayGuard, MemorySessionDirectory, SeparateStores, SessionDirectory as _,
    SessionRecord,
};
use pap_company::verify::{Verifier, VerifierParts};
use pap_shared::{
    ClientId, Clock, CompanyDomain, HttpsUrl, Jwks, PairwiseUserId, Rng, SessionId, SigningKey, UnixTime,
};
use sha2::{Digest as _, Sha256};

/// Now, for every target.
pub(crate) const NOW: i64 = 1_800_000_000;
/// The company's published `web.browser_session_endpoint`.
pub(crate) const ENDPOINT: &str = "https://shop.example/poppy/browser-session";
/// The company's `organization.domain`.
pub(crate) const DOMAIN: &str = "shop.example";
/// The one agent the company knows.
pub(crate) const CLIENT_ID: &str = "https://atlas.example/agent.json";
/// The agent's pairwise user at the company.
pub(crate) const USER: &str = "usr_fuzz_abcdefghijklmnopqrstuv";

/// A clock that never moves.
#[derive(Debug)]
pub(crate) struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> UnixTime {
        UnixTime::from_secs(NOW)
    }
}

/// Bytes from SHA-256 of a seed and a counter: the same sequence in every run. Never for a
/// real key; here it makes the test agent's key and the Session's id reproducible.
#[derive(Debug)]
pub(crate) struct CountingRng {
    seed: &'static str,
    counter: AtomicU64,
}

impl CountingRng {
    pub(crate) const fn new(seed: &'static str) -> Self {
        Self {
            seed,
            counter: AtomicU64::new(0),
        }
    }
}

impl Rng for CountingRng {
    fn fill(&self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(32) {
            let n = self.counter.fetch_add(1, Ordering::Relaxed);
            let block = Sha256::new()
                .chain_update(self.seed.as_bytes())
                .chain_update(n.to_le_bytes())
                .finalize();
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
    }
}

/// The agent's ES256 key (kid `key-1`), the same in every run.
pub(crate) fn agent_key() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| {
        SigningKey::generate_es256(&CountingRng::new("pap-fuzz agent key"), "key-1")
            .unwrap_or_else(|e| panic!("the fixture key: {e}"))
    })
}

/// A company with one live, signed-in Session of the agent. What a join changes (the replay
/// guard, the cookie bindings) is made fresh for each input by [`Company::fresh`], so an input
/// does the same in every run whatever ran before it: a crash reproduces from its input alone.
pub(crate) struct Company {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) sessions: MemorySessionDirectory,
    pub(crate) session: SessionId,
    clock: Arc<dyn Clock>,
    clients: Arc<StaticClientKeys>,
}

/// The company's verifier and browser-session route over fresh join stores.
pub(crate) struct Fresh {
    pub(crate) verifier: Verifier,
    pub(crate) router: Router,
    replay: MemoryReplayGuard,
    cookies: MemoryCookieBindings,
}

/// What a refused request must leave as it was.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stores {
    pub(crate) replay_marks: u64,
    pub(crate) cookies: u64,
    pub(crate) session: Option<SessionRecord>,
}

impl Company {
    /// A verifier and route over an empty replay guard and cookie store.
    pub(crate) fn fresh(&self) -> Fresh {
        let replay = MemoryReplayGuard::new(self.clock.clone());
        let cookies = MemoryCookieBindings::new(self.clock.clone());
        let verifier = Verifier::new(VerifierParts {
            endpoint: endpoint(),
            domain: domain(),
            clock: self.clock.clone(),
            clients: self.clients.clone(),
            sessions: Arc::new(self.sessions.clone()),
            joins: Arc::new(SeparateStores::new(
                Arc::new(self.sessions.clone()),
                Arc::new(replay.clone()),
                Arc::new(cookies.clone()),
            )),
        });
        let state = BrowserSession::new(
            verifier.clone(),
            Arc::new(cookies.clone()),
            Arc::new(CountingRng::new("pap-fuzz cookies")),
        );
        Fresh {
            verifier,
            router: browser_session_router().with_state(state),
            replay,
            cookies,
        }
    }

    /// The stores as they are now.
    pub(crate) fn stores(&self, fresh: &Fresh) -> Stores {
        Stores {
            replay_marks: fresh.replay.len(),
            cookies: fresh.cookies.len(),
            session: self
                .runtime
                .block_on(self.sessions.session(&self.session))
                .unwrap_or_else(|e| panic!("the embedded Session directory failed: {e}")),
        }
    }
}

pub(crate) fn company() -> &'static Company {
    static COMPANY: OnceLock<Company> = OnceLock::new();
    COMPANY.get_or_init(build)
}

fn build() -> Company {
    let clock: Arc<dyn Clock> = Arc::new(FixedClock);
    let client_id = client_id();
    let sessions = MemorySessionDirectory::new(clock.clone(), Arc::new(CountingRng::new("pap-fuzz sessions")));
    let clients = Arc::new(StaticClientKeys::new().with_client(
        client_id.clone(),
        Jwks::from_keys(vec![agent_key().public_key().clone()]),
    ));
    let user = PairwiseUserId::parse(USER).unwrap_or_else(|e| panic!("the fixture user: {e}"));
    let session = sessions
        .start(client_id, user, 3_600)
        .unwrap_or_else(|e| panic!("the fixture Session: {e}"));
    sessions.sign_in(&session, "ada", vec!["orders:read".into()]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    Company {
        runtime,
        sessions,
        session,
        clock,
        clients,
    }
}

pub(crate) fn client_id() -> ClientId {
    ClientId::parse(CLIENT_ID).unwrap_or_else(|e| panic!("the fixture client id: {e}"))
}

pub(crate) fn endpoint() -> HttpsUrl {
    HttpsUrl::parse(ENDPOINT).unwrap_or_else(|e| panic!("the fixture endpoint: {e}"))
}

pub(crate) fn domain() -> CompanyDomain {
    CompanyDomain::try_from(DOMAIN).unwrap_or_else(|e| panic!("the fixture domain: {e}"))
}
