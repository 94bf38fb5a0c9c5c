//! `pap-conformance replicas`: three `pap-company serve --store redis://…` processes sharing one
//! real `redis-server` (or, with `--cluster`, a real Redis Cluster of three primaries: `--store
//! redis-cluster://…`), driven as an agent, each request sent to a replica of the run's choosing
//! (what a round-robin balancer does): PAP §5's one-time `jti` and the at-most-once confirm
//! hold across replicas, a sign-out through one shows on the next request through another, and
//! the company fails closed and recovers when a replica or Redis dies. Prints what it saw and
//! fails when a check does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use pap_agent::{ClientConfig, Company, Identity, PapClient, Session, documents_router};
use pap_net::listener::TlsListener;
use pap_shared::{
    BROWSER_ASSERTION_TYP, BrowserAssertionClaims, BrowserAssertionRequest, CompanyDomain, HttpsUrl, Jti, SystemClock,
    SystemRng,
};
use rustls::pki_types::CertificateDer;
use serde_json::json;

use crate::abuse::Figures;
use crate::process::{CompanyProcess, Launch, RedisProcess};

const DOMAIN: &str = "shop.example";

/// The run's checks, by the number its figures carry (1 first): what the requirement ledger
/// names as `replicas:ID`.
pub const CHECKS: [&str; 6] = [
    "replay-race",
    "confirm-once",
    "sign-out-across",
    "replica-killed",
    "redis-down",
    "replica-restarted",
];
/// How long the company may take to serve again once Redis is back.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(15);

/// What a run needs.
#[derive(Debug)]
pub struct Plan {
    /// The `pap-company` binary.
    pub company_bin: PathBuf,
    /// Its configuration (testing on).
    pub config: PathBuf,
    /// Where certificates, logs, credentials and Redis's files go.
    pub work: PathBuf,
    /// Share a Redis Cluster of three primaries rather than one `redis-server`.
    pub cluster: bool,
}

/// One replica as the run reaches it: its process, an HTTPS client that dials it for the
/// company's name, and the agent's PAP client through it.
struct Replica {
    process: CompanyProcess,
    http: reqwest::Client,
    agent: PapClient,
}

/// What starting a replica needs.
struct Env {
    work: PathBuf,
    launch: LaunchTemplate,
    identity: Arc<Identity>,
    roots: rustls::RootCertStore,
    extra_roots: Vec<CertificateDer<'static>>,
}

struct Stage {
    env: Env,
    replicas: Vec<Replica>,
    company: Company,
}

/// What every replica is started with.
#[derive(Clone)]
struct LaunchTemplate {
    binary: PathBuf,
    config: PathBuf,
    certs: PathBuf,
    resolve: Vec<String>,
    store: String,
}

/// Runs every check; what it saw.
pub async fn run(plan: &Plan) -> anyhow::Result<Figures> {
    pap_net::serve::raise_open_file_limit().context("raising the open-file limit")?;
    std::fs::create_dir_all(&plan.work)?;
    let certs_dir = plan.work.join("certs");
    let certs = pap_net::dev_certs::write_dev_certs(&certs_dir, &[DOMAIN.to_owned(), "atlas.example".to_owned()])?;
    let ca_pem = std::fs::read(&certs.ca)?;
    let mut roots = rustls::RootCertStore::empty();
    let mut extra_roots = Vec::new();
    for cert in rustls_pemfile::certs(&mut &ca_pem[..]) {
        let cert = cert?;
        roots.add(cert.clone())?;
        extra_roots.push(cert);
    }
    let identity = Arc::new(Identity::ephemeral(
        CompanyDomain::try_from("atlas.example")?,
        "Atlas (replicas run)",
        &SystemRng,
    )?);
    let docs = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let listener = TlsListener::new(
        tokio::net::TcpListener::bind(docs).await?,
        &std::fs::read(&certs.cert)?,
        &std::fs::read(&certs.key)?,
    )?;
    tokio::spawn(axum::serve(listener, documents_router(identity.clone())).into_future());

    let mut redis = if plan.cluster {
        RedisProcess::start_cluster(&plan.work.join("redis"), true)?
    } else {
        RedisProcess::start(&plan.work.join("redis"), true)?
    };
    let launch = LaunchTemplate {
        binary: plan.company_bin.clone(),
        config: plan.config.clone(),
        certs: certs_dir,
        resolve: vec![format!("atlas.example={docs}")],
        store: redis.url(),
    };
    let env = Env {
        work: plan.work.clone(),
        launch,
        identity,
        roots,
        extra_roots,
    };
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        replicas.push(env.start_replica(name).await?);
    }
    let company = replicas[0].agent.discover(&CompanyDomain::try_from(DOMAIN)?).await?;
    let mut stage = Stage { env, replicas, company };

    let mut figures = Figures::default();
    let user = pap_agent::new_pairwise_user(&SystemRng);
    let mut session = stage.replicas[0]
        .agent
        .start_session(&stage.company, &user, stage.replicas[0].agent.new_dpop_key()?)
        .await
        .context("starting a Session through replica a")?;
    replay_race(&stage, &session, &mut figures).await?;
    sign_in_across(&stage, &mut session).await?;
    let performed_op = confirms_across(&stage, &session, &mut figures).await?;
    sign_out_shows_across(&stage, &session, &mut figures).await?;
    let session = {
        // A fresh Session for the fault checks (the first one's sign-in was revoked).
        let user = pap_agent::new_pairwise_user(&SystemRng);
        stage.replicas[1]
            .agent
            .start_session(&stage.company, &user, stage.replicas[1].agent.new_dpop_key()?)
            .await?
    };
    replica_killed_mid_load(&mut stage, &session, &mut figures).await?;
    redis_stopped_mid_load(&mut stage, &mut redis, &session, &performed_op, &mut figures).await?;
    replica_restarted(&mut stage, &session, &performed_op, &mut figures).await?;
    Ok(figures)
}

impl Env {
    async fn start_replica(&self, name: &str) -> anyhow::Result<Replica> {
        let process = CompanyProcess::start(Launch {
            binary: &self.launch.binary,
            config: &self.launch.config,
            certs: &self.launch.certs,
            work: &self.work,
            resolve: self.launch.resolve.clone(),
            before_credential: false,
            store: Some(self.launch.store.clone()),
            name,
            replay_share: None,
            replay_share_per_address: None,
            replay_pressure: None,
        })
        .await?;
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .resolve(DOMAIN, process.addr)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .no_proxy()
            .build()?;
        let config = ClientConfig {
            extra_roots: self.extra_roots.clone(),
            connect: [(DOMAIN.to_owned(), process.addr)].into(),
        };
        let agent = PapClient::new(
            self.identity.clone(),
            &config,
            Arc::new(SystemClock),
            Arc::new(SystemRng),
        )?;
        Ok(Replica { process, http, agent })
    }
}

impl Stage {
    /// A fresh browser assertion for `session`, landing on `return_to`.
    fn assertion(&self, session: &Session, return_to: &str) -> anyhow::Result<String> {
        let endpoint = HttpsUrl::parse(&format!("https://{DOMAIN}/poppy/browser-session"))?;
        let return_to = HttpsUrl::parse(return_to)?;
        let domain = CompanyDomain::try_from(DOMAIN)?;
        let request = BrowserAssertionRequest {
            client_id: self.env.identity.client_id(),
            user: &session.user,
            endpoint: &endpoint,
            session_id: &session.session_id,
            return_to: &return_to,
            company_domain: &domain,
        };
        let now = pap_shared::Clock::now(&SystemClock).plus(-5);
        let claims = BrowserAssertionClaims::build(&request, now, 60, Jti::generate(&SystemRng))?;
        Ok(self
            .env
            .identity
            .key()
            .sign(BROWSER_ASSERTION_TYP, &claims)?
            .secret()
            .to_owned())
    }

    /// The operator API of replica `i`, credential included.
    fn operator(&self, i: usize) -> anyhow::Result<&str> {
        self.replicas[i].process.operator.as_deref().context("no operator API")
    }

    /// `GET /ready` of replica `i`: its status (0 when it could not be asked).
    async fn ready(&self, i: usize) -> u16 {
        let Ok(operator) = self.operator(i) else { return 0 };
        self.replicas[i]
            .http
            .get(format!("{operator}/ready"))
            .send()
            .await
            .map_or(0, |a| a.status().as_u16())
    }

    /// `GET /metrics` of replica `i`.
    async fn metrics(&self, i: usize) -> anyhow::Result<String> {
        let answer = self.replicas[i]
            .http
            .get(format!("{}/metrics", self.operator(i)?))
            .send()
            .await?
            .error_for_status()?;
        Ok(String::from_utf8_lossy(&answer.bytes().await?).into_owned())
    }

    async fn performed(&self, i: usize, operation: &str) -> anyhow::Result<u64> {
        let answer = self.replicas[i]
            .http
            .get(format!("{}/performed/{operation}", self.operator(i)?))
            .send()
            .await?;
        let body: serde_json::Value = serde_json::from_slice(&answer.bytes().await?)?;
        body["count"].as_u64().context("no count")
    }
}

/// POSTs `assertion` to the browser-session endpoint through `http`: the status (0 when the
/// connection failed) and the cookie when one was set.
async fn post_assertion(http: &reqwest::Client, assertion: &str) -> (u16, Option<String>) {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("assertion", assertion)
        .finish();
    let sent = http
        .post(format!("https://{DOMAIN}/poppy/browser-session"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(answer) => {
            let cookie = answer
                .headers()
                .get("set-cookie")
                .and_then(|c| c.to_str().ok())
                .and_then(|c| c.split(';').next())
                .map(str::to_owned);
            (answer.status().as_u16(), cookie)
        }
        Err(_) => (0, None),
    }
}

/// The value of the sample `name` (with its labels, as written) in Prometheus text; 0 when absent.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

fn tally(statuses: &[u16]) -> BTreeMap<u16, usize> {
    let mut tally = BTreeMap::new();
    for status in statuses {
        *tally.entry(*status).or_insert(0) += 1;
    }
    tally
}

/// One assertion POSTed 200 times at once, spread over the three replicas: one 303.
async fn replay_race(stage: &Stage, session: &Session, figures: &mut Figures) -> anyhow::Result<()> {
    let assertion = stage.assertion(session, &format!("https://{DOMAIN}/"))?;
    let posts: Vec<_> = (0..200)
        .map(|i| {
            let (http, assertion) = (stage.replicas[i % 3].http.clone(), assertion.clone());
            tokio::spawn(async move { post_assertion(&http, &assertion).await.0 })
        })
        .collect();
    let mut statuses = Vec::new();
    for post in posts {
        statuses.push(post.await.unwrap_or(0));
    }
    let tally = tally(&statuses);
    let joined = tally.get(&303).copied().unwrap_or(0);
    figures.add(
        1,
        "one assertion POSTed 200 times over 3 replicas: 303 / 400",
        format!("{joined} / {}", tally.get(&400).copied().unwrap_or(0)),
        "one 303 (PAP-5-07)",
        joined == 1 && tally.get(&400).copied().unwrap_or(0) == 199,
    );
    Ok(())
}

/// Device Sign-In begun through replica a, approved through b's operator API, polled
/// through c.
async fn sign_in_across(stage: &Stage, session: &mut Session) -> anyhow::Result<()> {
    let device = stage.replicas[0]
        .agent
        .device_begin(&stage.company, &["orders:read", "orders:write"])
        .await?;
    crate::process::approve_device(&stage.replicas[1].http, stage.operator(1)?, &device.user_code)
        .await
        .context("the approval through b")?;
    stage.replicas[2]
        .agent
        .device_wait(&stage.company, session, &device)
        .await
        .context("polling through replica c")?;
    anyhow::ensure!(session.signed_in, "the Session is not signed in");
    Ok(())
}

/// 100 confirms of one operation at once, spread over the replicas: performed once. The
/// operation's id.
async fn confirms_across(stage: &Stage, session: &Session, figures: &mut Figures) -> anyhow::Result<String> {
    let operation = stage.replicas[0]
        .agent
        .propose(
            &stage.company,
            session,
            "POST",
            "/api/orders/ord_7Hk2/exchanges",
            &json!({}),
        )
        .await?;
    let confirms = (0..100).map(|i| {
        let replica = &stage.replicas[i % 3];
        replica.agent.confirm_operation(&stage.company, session, &operation)
    });
    let outcomes = futures_util::future::join_all(confirms).await;
    let answered = outcomes.iter().filter(|o| o.is_ok()).count();
    let performed = stage.performed(2, &operation.operation_id).await?;
    figures.add(
        2,
        "100 concurrent confirms over 3 replicas: answered / performed",
        format!("{answered} / {performed}"),
        "performed once (OPS-6-02)",
        performed == 1,
    );
    Ok(operation.operation_id)
}

/// Joined through c, the page read through a; revoked through b, the page refused through c.
async fn sign_out_shows_across(stage: &Stage, session: &Session, figures: &mut Figures) -> anyhow::Result<()> {
    let page = stage.replicas[0]
        .agent
        .propose(
            &stage.company,
            session,
            "POST",
            "/api/orders/ord_9Zq4/exchanges",
            &json!({}),
        )
        .await?
        .url
        .context("the operation has no page")?;
    let (status, cookie) = post_assertion(&stage.replicas[2].http, &stage.assertion(session, &page)?).await;
    anyhow::ensure!(status == 303, "the join through c got {status}");
    let cookie = cookie.context("the join set no cookie")?;
    let read = |i: usize| {
        let (http, page, cookie) = (stage.replicas[i].http.clone(), page.clone(), cookie.clone());
        async move {
            http.get(page)
                .header("cookie", cookie)
                .send()
                .await
                .map_or(0, |a| a.status().as_u16())
        }
    };
    let before = read(0).await;
    let account_token = session.account_token.as_ref().context("no Account Token")?;
    stage.replicas[1].agent.revoke(&stage.company, account_token).await?;
    let after = read(2).await;
    figures.add(
        3,
        "page through a with c's cookie; after a revoke through b, through c",
        format!("{before}; {after}"),
        "200; 401 (PAP-5-10)",
        before == 200 && after == 401,
    );
    Ok(())
}

/// Joins at full pace, each assertion sent to two replicas; replica c killed (SIGKILL) a
/// third of the way in: no assertion accepted twice, a and b keep answering 303.
async fn replica_killed_mid_load(stage: &mut Stage, session: &Session, figures: &mut Figures) -> anyhow::Result<()> {
    const JOINS: usize = 600;
    let mut per_jti_303 = Vec::with_capacity(JOINS);
    let mut after_kill_303 = 0;
    for i in 0..JOINS {
        if i == JOINS / 3 {
            stage.replicas[2].process.kill().await;
        }
        let assertion = stage.assertion(session, &format!("https://{DOMAIN}/"))?;
        let (first, second) = (&stage.replicas[i % 3].http, &stage.replicas[(i + 1) % 3].http);
        let ((a, _), (b, _)) = tokio::join!(post_assertion(first, &assertion), post_assertion(second, &assertion));
        let joined = usize::from(a == 303) + usize::from(b == 303);
        per_jti_303.push(joined);
        if i > JOINS / 3 {
            after_kill_303 += joined;
        }
    }
    let twice = per_jti_303.iter().filter(|n| **n > 1).count();
    figures.add(
        4,
        &format!(
            "{JOINS} assertions, each to two replicas, c killed at {}: accepted twice",
            JOINS / 3
        ),
        twice,
        "= 0",
        twice == 0,
    );
    figures.add(
        4,
        "303s from a and b after the kill",
        after_kill_303,
        "> 0",
        after_kill_303 > 0,
    );
    // c comes back for the next checks.
    let replica = stage.env.start_replica("c2").await?;
    stage.replicas[2] = replica;
    Ok(())
}

/// Joins through a and b while Redis is killed: only 503s (no 303, no 500); then Redis back
/// with its AOF: joins again within seconds, and the Session and the performed record kept.
async fn redis_stopped_mid_load(
    stage: &mut Stage,
    redis: &mut RedisProcess,
    session: &Session,
    operation: &str,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    redis.kill();
    let mut down = Vec::new();
    for i in 0..60 {
        let assertion = stage.assertion(session, &format!("https://{DOMAIN}/"))?;
        down.push(post_assertion(&stage.replicas[i % 2].http, &assertion).await.0);
    }
    let ready_while_down = stage.ready(0).await;
    let tally = tally(&down);
    let only_503 = tally.keys().all(|s| *s == 503);
    figures.add(
        5,
        "60 joins while Redis is down: statuses",
        format!("{tally:?}"),
        "only 503",
        only_503,
    );
    let restarted = Instant::now();
    redis.restart()?;
    let mut recovered = None;
    let mut attempts = tokio::time::interval(Duration::from_millis(100));
    while restarted.elapsed() < RECOVERY_DEADLINE {
        attempts.tick().await;
        let assertion = stage.assertion(session, &format!("https://{DOMAIN}/"))?;
        if post_assertion(&stage.replicas[0].http, &assertion).await.0 == 303 {
            recovered = Some(restarted.elapsed());
            break;
        }
    }
    figures.add(
        5,
        "first 303 after Redis is back (its Session kept by the AOF)",
        recovered.map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
        "< 15 s, no restart of the replicas",
        recovered.is_some(),
    );
    // Every replica answers again on its own (its connection reconnects at its next command).
    let mut all_ready = true;
    for i in 0..stage.replicas.len() {
        let mut ready = stage.ready(i).await;
        while ready != 200 && restarted.elapsed() < RECOVERY_DEADLINE {
            attempts.tick().await;
            ready = stage.ready(i).await;
        }
        all_ready &= ready == 200;
    }
    figures.add(
        5,
        "every replica's /ready after Redis is back (503 while it was down)",
        format!(
            "{ready_while_down} -> {} in {:.1} s",
            if all_ready { 200 } else { 503 },
            restarted.elapsed().as_secs_f64()
        ),
        "503 -> 200, < 15 s",
        ready_while_down == 503 && all_ready,
    );
    let performed = stage.performed(1, operation).await?;
    figures.add(
        5,
        "the performed record after Redis's restart",
        performed,
        "= 1",
        performed == 1,
    );
    let metrics = stage.metrics(1).await?;
    let seen = |name: &str| metric(&metrics, name);
    let unavailable = "pap_store_errors_total{error=\"unavailable\"}";
    figures.add(
        5,
        "replica b's /metrics: joins accepted / replay hits / store errors",
        format!(
            "{} / {} / {}",
            seen("pap_joins_accepted_total"),
            seen("pap_replay_hits_total"),
            seen(unavailable)
        ),
        "each > 0",
        seen("pap_joins_accepted_total") > 0.0 && seen("pap_replay_hits_total") > 0.0 && seen(unavailable) > 0.0,
    );
    Ok(())
}

/// Replica a killed and started again: it knows the Session and the performed record.
async fn replica_restarted(
    stage: &mut Stage,
    session: &Session,
    operation: &str,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    stage.replicas[0].process.kill().await;
    stage.replicas[0] = stage.env.start_replica("a2").await?;
    let assertion = stage.assertion(session, &format!("https://{DOMAIN}/"))?;
    let (status, _) = post_assertion(&stage.replicas[0].http, &assertion).await;
    let performed = stage.performed(0, operation).await?;
    figures.add(
        6,
        "a restarted replica: a join of the old Session; performed",
        format!("{status}; {performed}"),
        "303; 1",
        status == 303 && performed == 1,
    );
    Ok(())
}
