//! Shared fixtures for the company's integration tests: a settable clock, an agent with keys,
//! and a company wired from the embedded stores.
#![allow(dead_code, unreachable_pub, reason = "each test binary uses part of the fixtures")]
#![allow(clippy::unwrap_used, reason = "fixtures fail the test loudly")]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::Request;
use pap_company::resolver::StaticClientKeys;
use pap_company::route::{BrowserSession, WebSession, browser_session_router};
use pap_company::stores::{JoinStore, MemoryCookieBindings, MemoryReplayGuard, MemorySessionDirectory, SeparateStores};
use pap_company::verify::{Verifier, VerifierParts};
use pap_shared::{
    BROWSER_ASSERTION_TYP, BrowserAssertionClaims, BrowserAssertionRequest, ClientId, CompactJws, CompanyDomain,
    HttpsUrl, Jti, Jwks, PairwiseUserId, SessionId, SigningKey, SystemRng, UnixTime,
};
use serde_json::Value;

pub mod redis_server;

pub const NOW: i64 = 1_800_000_000;
pub const ENDPOINT: &str = "https://shop.example/poppy/browser-session";
pub const CLIENT_ID: &str = "https://atlas.example/agent.json";

/// A clock tests move by hand.
pub type TestClock = pap_shared::ManualClock;

/// An agent: its client id and signing key.
pub struct Agent {
    pub client_id: ClientId,
    pub key: SigningKey,
}

impl Agent {
    pub fn new(client_id: &str) -> Self {
        Self {
            client_id: ClientId::parse(client_id).unwrap(),
            key: SigningKey::generate_es256(&SystemRng, "key-1").unwrap(),
        }
    }

    pub fn jwks(&self) -> Jwks {
        Jwks::from_keys(vec![self.key.public_key().clone()])
    }

    /// Signs arbitrary claims with an arbitrary header `typ`.
    pub fn sign(&self, typ: &str, claims: &Value) -> CompactJws {
        self.key.sign(typ, claims).unwrap()
    }
}

/// Everything a test needs: the company's stores and an agent it knows.
pub struct World {
    pub clock: Arc<TestClock>,
    pub sessions: MemorySessionDirectory,
    pub replay: MemoryReplayGuard,
    pub state: BrowserSession,
    pub agent: Agent,
    pub user: PairwiseUserId,
    pub session: SessionId,
}

impl World {
    pub fn new() -> Self {
        let clock = TestClock::at(NOW);
        let agent = Agent::new(CLIENT_ID);
        let sessions = MemorySessionDirectory::new(clock.clone(), Arc::new(SystemRng));
        let replay = MemoryReplayGuard::new(clock.clone());
        let cookies = Arc::new(MemoryCookieBindings::new(clock.clone()));
        let clients = StaticClientKeys::new().with_client(agent.client_id.clone(), agent.jwks());
        let verifier = Verifier::new(VerifierParts {
            endpoint: HttpsUrl::parse(ENDPOINT).unwrap(),
            domain: CompanyDomain::try_from("shop.example").unwrap(),
            clock: clock.clone(),
            clients: Arc::new(clients),
            sessions: Arc::new(sessions.clone()),
            joins: Arc::new(SeparateStores::new(
                Arc::new(sessions.clone()),
                Arc::new(replay.clone()),
                cookies.clone(),
            )),
        });
        let state = BrowserSession::new(verifier, cookies, Arc::new(SystemRng));
        let user = PairwiseUserId::parse("usr_conf_abcdefghijklmnopqrstuv").unwrap();
        let session = sessions.start(agent.client_id.clone(), user.clone(), 3_600).unwrap();
        sessions.sign_in(&session, "ada", vec!["orders:read".into()]);
        Self {
            clock,
            sessions,
            replay,
            state,
            agent,
            user,
            session,
        }
    }

    /// The world's stores as a verifier's join store (the route's own cookie bindings).
    pub fn joins(&self) -> Arc<dyn JoinStore> {
        Arc::new(SeparateStores::new(
            Arc::new(self.sessions.clone()),
            Arc::new(self.replay.clone()),
            self.state.cookies().clone(),
        ))
    }

    /// Valid claims as the agent would send them, as JSON so tests can break any member.
    pub fn claims(&self) -> Value {
        let domain = CompanyDomain::try_from("shop.example").unwrap();
        let endpoint = HttpsUrl::parse(ENDPOINT).unwrap();
        let return_to = HttpsUrl::parse("https://shop.example/operations/op_1").unwrap();
        let request = BrowserAssertionRequest {
            client_id: &self.agent.client_id,
            user: &self.user,
            endpoint: &endpoint,
            session_id: &self.session,
            return_to: &return_to,
            company_domain: &domain,
        };
        let claims =
            BrowserAssertionClaims::build(&request, UnixTime::from_secs(NOW - 5), 60, Jti::generate(&SystemRng))
                .unwrap();
        serde_json::to_value(claims).unwrap()
    }

    pub fn assertion(&self) -> CompactJws {
        self.agent.sign(BROWSER_ASSERTION_TYP, &self.claims())
    }

    /// A valid assertion of `agent` (another than the world's) to join `session`.
    pub fn assertion_of(&self, agent: &Agent, session: &SessionId) -> CompactJws {
        let mut claims = self.claims();
        claims["iss"] = Value::from(agent.client_id.as_str());
        claims["session_id"] = Value::from(session.as_str());
        agent.sign(BROWSER_ASSERTION_TYP, &claims)
    }

    pub fn with(&self, member: &str, value: Value) -> CompactJws {
        let mut claims = self.claims();
        claims[member] = value;
        self.agent.sign(BROWSER_ASSERTION_TYP, &claims)
    }

    /// The browser-session route plus one page behind `WebSession`, as a company would mount them.
    pub fn app(&self) -> Router {
        Router::new()
            .merge(browser_session_router())
            .route(
                "/operations/{id}",
                get(|session: WebSession| async move { format!("hello {}", session.account()) }),
            )
            .with_state(self.state.clone())
    }
}

pub fn join_request(assertion: &CompactJws) -> Request<Body> {
    form_post(&format!("assertion={}", assertion.secret()))
}

pub fn form_post(body: &str) -> Request<Body> {
    Request::post("/poppy/browser-session")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// Serves `app` over TLS on a free port; a client that reaches it as shop.example.
pub async fn serve_over_tls(app: Router, pki: &TestPki) -> reqwest::Client {
    serve_over_tls_on(&tokio::runtime::Handle::current(), app, pki).await
}

/// [`serve_over_tls`] with the server (its listener, connections and handlers) on `server`'s
/// runtime and the client on the caller's: a bench counts the server's threads' CPU apart.
pub async fn serve_over_tls_on(server: &tokio::runtime::Handle, app: Router, pki: &TestPki) -> reqwest::Client {
    serve_over_tls_on_cores(server, None, app, pki).await.0
}

/// [`serve_over_tls_on`], and with `cores` each connection served on one of them
/// (`pap_net::serve::serve_tls_on_cores`; accepting stays on `server`). Beside the client: how
/// many requests each core has answered, in the order of their threads' names (none without
/// cores).
pub async fn serve_over_tls_on_cores(
    server: &tokio::runtime::Handle,
    cores: Option<pap_net::serve::CoreRuntimes>,
    app: Router,
    pki: &TestPki,
) -> (reqwest::Client, Arc<[std::sync::atomic::AtomicU64]>) {
    let config = pki.server.clone();
    let count = cores.as_ref().map_or(0, |cores| cores.count().get());
    let answered: Arc<[std::sync::atomic::AtomicU64]> =
        (0..count).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
    let counted = answered.clone();
    let app = app.layer(tower::util::MapRequestLayer::new(move |request| {
        if let Some(answered) = this_core().and_then(|n| counted.get(n)) {
            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        request
    }));
    let addr = server
        .spawn(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let forever = std::future::pending();
            match cores {
                None => tokio::spawn(pap_net::serve::serve_tls(listener, app, config, forever)),
                Some(cores) => tokio::spawn(pap_net::serve::serve_tls_on_cores(
                    listener,
                    app,
                    config,
                    pap_net::serve::ServeLimits::default(),
                    cores,
                    forever,
                )),
            };
            addr
        })
        .await
        .unwrap();
    (client_of(addr, pki), answered)
}

/// The name of the cores' threads a bench makes (`CoreRuntimes::new(_, CORE_THREADS)`).
pub const CORE_THREADS: &str = "server-core";

/// Which core the calling thread is, by its name (`CORE_THREADS-N`); none off the cores.
fn this_core() -> Option<usize> {
    std::thread::current()
        .name()?
        .strip_prefix(CORE_THREADS)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// One router that answers each request with `apps[N]` on core N: state a core's handlers use,
/// such as a store client made on that core, stays on its thread. Off the cores (which
/// `serve_tls_on_cores` does only when no core runs) it answers with the first.
pub fn app_of_each_core(apps: Vec<Router>) -> Router {
    let apps = Arc::new(apps);
    Router::new().fallback_service(tower::service_fn(move |request: http::Request<axum::body::Body>| {
        let app = apps.get(this_core().unwrap_or(0)).or(apps.first()).cloned();
        async move {
            match app {
                Some(app) => tower::ServiceExt::oneshot(app, request).await,
                None => Ok(axum::response::IntoResponse::into_response(http::StatusCode::NOT_FOUND)),
            }
        }
    }))
}

/// A client that reaches the server at `addr` as shop.example, trusting `pki`'s CA, following
/// no redirects.
fn client_of(addr: std::net::SocketAddr, pki: &TestPki) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(pki.ca_der.clone()))
        .unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve("shop.example", addr)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A throwaway CA and one leaf covering `names`, as the interop harness makes them: the CA
/// certificate (DER, to trust) and the server's TLS configuration.
pub struct TestPki {
    pub ca_der: Vec<u8>,
    pub server: Arc<rustls::ServerConfig>,
}

pub fn test_pki(names: &[&str]) -> TestPki {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let pem = pap_net::dev_certs::generate(&names).unwrap();
    TestPki {
        server: pap_net::tls::server_config_from_pem(pem.cert_pem.as_bytes(), pem.key_pem.as_bytes()).unwrap(),
        ca_der: pem.ca_der,
    }
}

#[cfg(feature = "redis")]
impl World {
    /// The route's state over `store` (Sessions, joins, cookie bindings) for the world's agent,
    /// and a Session of its user started there on the world's clock.
    pub async fn over_redis(
        &self,
        store: &pap_company::stores::RedisStore,
    ) -> (BrowserSession, pap_company::stores::RecordSessions, SessionId) {
        let (state, sessions, mut started) = self.over_redis_with(store, &[]).await;
        (state, sessions, started.remove(0))
    }

    /// [`Self::over_redis`] for the world's agent and `others` besides: a Session of the world's
    /// user with each, in the same order (the world's agent's first).
    pub async fn over_redis_with(
        &self,
        store: &pap_company::stores::RedisStore,
        others: &[Agent],
    ) -> (BrowserSession, pap_company::stores::RecordSessions, Vec<SessionId>) {
        use pap_company::stores::RecordSessions;
        let sessions = RecordSessions::new(Arc::new(store.clone()), self.clock.clone(), Arc::new(SystemRng));
        let mut clients = StaticClientKeys::new();
        let mut started = Vec::new();
        for agent in std::iter::once(&self.agent).chain(others) {
            let session = sessions
                .start(agent.client_id.clone(), self.user.clone(), 3_600)
                .await
                .unwrap();
            started.push(session);
            clients = clients.with_client(agent.client_id.clone(), agent.jwks());
        }
        let verifier = Verifier::new(VerifierParts {
            endpoint: HttpsUrl::parse(ENDPOINT).unwrap(),
            domain: CompanyDomain::try_from("shop.example").unwrap(),
            clock: self.clock.clone(),
            clients: Arc::new(clients),
            sessions: Arc::new(sessions.clone()),
            joins: Arc::new(store.clone()),
        });
        let state = BrowserSession::new(verifier, Arc::new(store.clone()), Arc::new(SystemRng));
        (state, sessions, started)
    }
}
