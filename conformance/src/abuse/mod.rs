//! `pap-conformance abuse`: a hostile load run against a real `pap-company serve` process
//! (security review H1, H2, H5, M1), printing what it measured and failing when a stated bound
//! is broken.
//!
//! 1. A flood of unsigned browser assertions, each naming a new `iss`: junk names, then names
//!    that serve valid documents at their largest. The company's memory stays bounded, it
//!    fetches nothing for an `iss` without a live Session, and honest joins keep flowing.
//! 2. Idle TLS connections and a slowloris: each closed within the server's limits, the CPU
//!    share low, an honest join in the middle quick.
//! 3. Password guessing on `/device` from 64 addresses at once: 429 with `Retry-After` past the
//!    limits, a made-up code learns nothing, known and unknown names take the same time, and
//!    the other routes' p99 stays within twice its idle value.
//! 4. An agent whose JWKS lists 1,000 keys is refused.
//! 5. The honest agent rotates its key (`pap-agent identity rotate`) while joins run 8 at a
//!    time (1,000 answered before the rotation, 2,000 after): no join is refused, the new key is in use within the run, and the company fetched
//!    the rotated JWKS once.
//! 6. Review N1: unauthenticated token requests from one address naming a fresh `client_id`
//!    each, 20 a second, whose documents are slow (a silent server, a JWKS that redirects
//!    slowly hop after hop), first under one wildcard domain, then under ten: meanwhile an
//!    agent the company has never seen gets its token and joins, and the honest agent's joins
//!    go on.
//! 7. Review N3: a self-hosted agent fills its share of the replay guard (`--replay-share`
//!    125,000, with `--replay-pressure 0`: the shares bind from the first mark, as they do
//!    once a flood has filled half the guard) with validly signed revocation requests, each a
//!    fresh client assertion, until the company refuses it (429); meanwhile, and after, an
//!    agent the company has never seen gets its token and joins, and the honest agent joins,
//!    while the filler's own next token request is refused. Against a release from before the
//!    shares (its `serve --help` has no `--replay-share`) the filler fills the whole guard,
//!    1,000,000 marks.
//!
//! 8. Review S3: clients that make themselves look known. From 8 addresses, token requests
//!    name 16 clients under a free public suffix (`s3-N.duckdns.org`, each its own registrable
//!    domain), 20 a second for 130 s; each client's documents answer fast and `no-store` once,
//!    then stay silent past the company's deadline at every refetch. Beside them an agent a
//!    person signed in here (a Device Sign-In approved through the operator API: the company
//!    knows it) joins 4 times a second, its documents expiring every 60 s (no `Cache-Control`):
//!    none of its joins may be refused. (Before S3's fix a fast answer made a client known, the
//!    attackers held all 32 fetch slots, and the known agent was refused once its documents had
//!    been stale for 60 s.)
//!
//! The fifth figure of the issue, a simulated week returning every store to its baseline,
//! needs an injected clock, so it is a test (`company/shop/tests/hostile.rs`), not part of this run.

mod agents;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_agent::{ClientConfig, Identity, PapClient, Session};
use pap_shared::{
    BROWSER_ASSERTION_TYP, BrowserAssertionClaims, BrowserAssertionRequest, CompanyDomain, HttpsUrl, Jti, SystemClock,
    SystemRng,
};
use rustls::pki_types::CertificateDer;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::process::{CompanyProcess, CpuShare, Launch, PeakRss};

/// The company's domain in the run.
const DOMAIN: &str = "shop.example";

/// The replay share the run's company is started with: 125,000 marks per registrable domain
/// (the default before issue 42; the default now, 187,500, would make scenario 7 half as long
/// again for the same check). The honest agent's probes in scenario 3 leave some 20,000 live
/// marks in CI's run, so a share much smaller would refuse the honest agent.
const REPLAY_SHARE_IN_RUN: u64 = 125_000;
/// The pressure it is started with: the shares bind from the first mark.
const REPLAY_PRESSURE_IN_RUN: u64 = 0;
/// The guard of a release from before the shares.
const GUARD_BEFORE_SHARES: u64 = 1_000_000;
/// The share of one client address in this run: the whole guard (every agent here is 127.0.0.1).
const ADDRESS_SHARE_IN_RUN: u64 = pap_shop::limits::REPLAY_CAPACITY;
/// Its password for `ada` (company/shop/shop.example.toml).
const PASSWORD: &str = "correct horse battery staple";
/// Requests in flight at once in the floods.
const CONCURRENCY: usize = 64;
/// Below this, a p99 under a flood is scheduler noise, not starvation (see test 3).
const LATENCY_FLOOR: Duration = Duration::from_millis(5);

/// The small run's guesses: six past the address limit from each of the flood's addresses.
const GUESSES_SMALL: usize = CONCURRENCY * (pap_shop::limits::ADDRESS_ATTEMPTS as usize + 6);

/// How big a run is.
#[derive(Clone, Copy, Debug)]
pub enum Size {
    /// A few thousand requests: for CI, under a minute and a half.
    Small,
    /// The issue's figures: 100,000 assertions, 3,000 idle connections.
    Full,
}

struct Scale {
    junk: usize,
    attacker: usize,
    idle: usize,
    slowloris: usize,
    guesses: usize,
}

impl Size {
    fn scale(self) -> Scale {
        match self {
            Self::Small => Scale {
                junk: 5_000,
                attacker: 2_000,
                idle: 300,
                slowloris: 20,
                // Each of the 64 addresses past its limit of 30 (review N8: the limits count per
                // address, and per account name from one address).
                guesses: GUESSES_SMALL,
            },
            Self::Full => Scale {
                junk: 100_000,
                attacker: 100_000,
                idle: 3_000,
                slowloris: 100,
                guesses: 6_400,
            },
        }
    }
}

/// What a run needs.
#[derive(Debug)]
pub struct Plan {
    /// The `pap-company` binary.
    pub company_bin: PathBuf,
    /// Its configuration (`company/shop/shop.example.toml`: testing on, `ada`'s password known).
    pub config: PathBuf,
    /// Where certificates, logs and the credential go.
    pub work: PathBuf,
    /// How big.
    pub size: Size,
    /// The company predates the operator credential (to measure a "before").
    pub before_credential: bool,
}

/// One figure: what was measured, the bound it must keep, and whether it did.
#[derive(Debug, serde::Serialize)]
pub struct Figure {
    /// The scenario, 1 to 5.
    pub scenario: u8,
    /// What.
    pub name: String,
    /// How much.
    pub value: String,
    /// The bound stated for it, if any.
    pub bound: String,
    /// Whether the bound held.
    pub ok: bool,
}

/// Everything a run measured.
#[derive(Debug, Default, serde::Serialize)]
pub struct Figures(pub Vec<Figure>);

impl Figures {
    #[allow(
        clippy::needless_pass_by_value,
        reason = "a figure is any printable value, taken as the caller has it"
    )]
    pub(crate) fn add(&mut self, scenario: u8, name: &str, value: impl ToString, bound: &str, ok: bool) {
        self.0.push(Figure {
            scenario,
            name: name.to_owned(),
            value: value.to_string(),
            bound: bound.to_owned(),
            ok,
        });
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "a figure is any printable value, taken as the caller has it"
    )]
    pub(crate) fn info(&mut self, scenario: u8, name: &str, value: impl ToString) {
        self.add(scenario, name, value, "", true);
    }

    /// Whether every bound held.
    pub fn all_held(&self) -> bool {
        self.0.iter().all(|f| f.ok)
    }

    /// The figures as an aligned table.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.0 {
            let mark = if f.bound.is_empty() {
                "    "
            } else if f.ok {
                "ok  "
            } else {
                "FAIL"
            };
            out.push_str(&format!(
                "{mark} {} {:<58} {:>16}  {}\n",
                f.scenario, f.name, f.value, f.bound
            ));
        }
        out
    }
}

/// The run's parts: the company process, the agents' server, an honest agent with a live
/// Session, and HTTP clients that reach the company.
struct Stage {
    company: CompanyProcess,
    fetches: Arc<agents::Fetches>,
    agent: PapClient,
    /// Agents of [`agents::KEYED_AGENTS`].
    keyed_agents: Vec<PapClient>,
    pap_company: pap_agent::Company,
    session: Session,
    roots: rustls::RootCertStore,
    http: reqwest::Client,
    /// The honest agent's state directory (its identity), for the rotation.
    honest_state: PathBuf,
    /// Agents the company has never seen, one for each flood of scenario 6.
    newcomers: Vec<PapClient>,
}

/// Runs every scenario; the figures.
pub async fn run(plan: &Plan) -> anyhow::Result<Figures> {
    // Thousands of sockets on both ends: the connection cap must bound the company, not
    // the file table.
    pap_net::serve::raise_open_file_limit().context("raising the open-file limit")?;
    std::fs::create_dir_all(&plan.work)?;
    let names: Vec<String> = [
        DOMAIN,
        "atlas.example",
        &format!("*.{}", agents::ATTACKER_PARENT),
        agents::KEYED_AGENTS[0].0,
        agents::KEYED_AGENTS[1].0,
        &format!("*.{}", agents::FREE_SUFFIX),
    ]
    .iter()
    .map(|n| (*n).to_owned())
    .chain(agents::NEWCOMERS.iter().map(|n| (*n).to_owned()))
    .chain((1..agents::ATTACKER_DOMAINS).map(|i| format!("*.{}", agents::attacker_domain(i))))
    .collect();
    let has_shares = offers_flag(&plan.company_bin, "--replay-share")?;
    let has_address_shares = offers_flag(&plan.company_bin, "--replay-share-per-address")?;
    let has_pressure = offers_flag(&plan.company_bin, "--replay-pressure")?;
    let certs_dir = plan.work.join("certs");
    let certs = pap_net::dev_certs::write_dev_certs(&certs_dir, &names)?;
    let ca_pem = std::fs::read(&certs.ca)?;
    let mut roots = rustls::RootCertStore::empty();
    let mut extra_roots: Vec<CertificateDer<'static>> = Vec::new();
    for cert in rustls_pemfile::certs(&mut &ca_pem[..]) {
        let cert = cert?;
        roots.add(cert.clone())?;
        extra_roots.push(cert);
    }

    // On disk, as `pap-agent identity init` makes it, so that scenario 5 can rotate its key.
    let honest_state = plan.work.join("honest-agent");
    let _ = std::fs::remove_dir_all(&honest_state);
    let honest = Arc::new(Identity::init(
        &honest_state,
        CompanyDomain::try_from("atlas.example")?,
        "Atlas (abuse run)",
        &SystemRng,
    )?);
    let keyed: Vec<Identity> = agents::KEYED_AGENTS
        .iter()
        .map(|(name, _)| {
            Identity::ephemeral(CompanyDomain::try_from(*name)?, "Many keys", &SystemRng).map_err(anyhow::Error::from)
        })
        .collect::<anyhow::Result<_>>()?;
    let newcomers = agents::NEWCOMERS
        .iter()
        .map(|name| {
            let domain = CompanyDomain::try_from(*name)?;
            Ok(Arc::new(Identity::ephemeral(
                domain,
                "Newcomer (abuse run)",
                &SystemRng,
            )?))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let agents_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let fetches = agents::serve(
        agents_addr,
        honest.clone(),
        newcomers.clone(),
        &keyed,
        &std::fs::read(&certs.cert)?,
        &std::fs::read(&certs.key)?,
    )
    .await?;
    let company = CompanyProcess::start(Launch {
        binary: &plan.company_bin,
        config: &plan.config,
        certs: &certs_dir,
        work: &plan.work,
        resolve: vec![
            format!("atlas.example={agents_addr}"),
            format!("*.{}={agents_addr}", agents::ATTACKER_PARENT),
            format!("*.{}={agents_addr}", agents::FREE_SUFFIX),
            format!("{}={agents_addr}", agents::KEYED_AGENTS[0].0),
            format!("{}={agents_addr}", agents::KEYED_AGENTS[1].0),
        ]
        .into_iter()
        .chain(agents::NEWCOMERS.iter().map(|n| format!("{n}={agents_addr}")))
        .chain((1..agents::ATTACKER_DOMAINS).map(|i| format!("*.{}={agents_addr}", agents::attacker_domain(i))))
        .collect(),
        before_credential: plan.before_credential,
        store: None,
        name: "abuse",
        // A company from before the shares has no such flag.
        replay_share: has_shares.then_some(REPLAY_SHARE_IN_RUN),
        // Every agent of this run, attacker and honest, dials from 127.0.0.1: one address
        // share would make them one client. The address share is the guard's size here (off in
        // effect); `company/shop/tests/hostile.rs` shows it.
        replay_share_per_address: has_address_shares.then_some(ADDRESS_SHARE_IN_RUN),
        replay_pressure: has_pressure.then_some(REPLAY_PRESSURE_IN_RUN),
    })
    .await?;

    let client_config = ClientConfig {
        extra_roots,
        connect: [(DOMAIN.to_owned(), company.addr)].into(),
    };
    let agent = PapClient::new(honest, &client_config, Arc::new(SystemClock), Arc::new(SystemRng))?;
    let newcomers = newcomers
        .into_iter()
        .map(|identity| PapClient::new(identity, &client_config, Arc::new(SystemClock), Arc::new(SystemRng)))
        .collect::<Result<Vec<_>, _>>()?;
    let keyed_agents = keyed
        .into_iter()
        .map(|identity| {
            PapClient::new(
                Arc::new(identity),
                &client_config,
                Arc::new(SystemClock),
                Arc::new(SystemRng),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pap_company = agent.discover(&CompanyDomain::try_from(DOMAIN)?).await?;
    let user = pap_agent::new_pairwise_user(&SystemRng);
    let session = agent
        .start_session(&pap_company, &user, agent.new_dpop_key()?)
        .await
        .context("starting the honest agent's Session")?;
    let http = https_client(&roots, company.addr, None)?;
    let stage = Stage {
        company,
        fetches,
        agent,
        keyed_agents,
        pap_company,
        session,
        roots,
        http,
        honest_state,
        newcomers,
    };

    let stage = Arc::new(stage);
    let scale = plan.size.scale();
    let mut figures = Figures::default();
    flood_of_strangers(&stage, &scale, &mut figures).await?;
    idle_and_slow_connections(&stage, &scale, &mut figures).await?;
    password_guessing(&stage, &scale, &mut figures).await?;
    oversized_jwks(&stage, &mut figures).await;
    rotation_under_load(&stage, &mut figures).await?;
    slow_documents_under_many_names(&stage, 1, &mut figures).await?;
    slow_documents_under_many_names(&stage, agents::ATTACKER_DOMAINS, &mut figures).await?;
    // A company from before the shares has one bound: its whole guard.
    let share = if has_shares {
        REPLAY_SHARE_IN_RUN
    } else {
        GUARD_BEFORE_SHARES
    };
    one_client_filling_its_replay_share(&stage, share, &mut figures).await?;
    self_made_known_clients_beside_a_known_agent(&stage, &mut figures).await?;
    // The company process ends with the stage (it is killed on drop).
    drop(stage);
    Ok(figures)
}

/// Whether `pap-company serve --help` lists `flag`: a release from before it (measured for a
/// "before") is started without it.
fn offers_flag(company_bin: &std::path::Path, flag: &str) -> anyhow::Result<bool> {
    let help = std::process::Command::new(company_bin)
        .args(["serve", "--help"])
        .output()
        .with_context(|| format!("running {} serve --help", company_bin.display()))?;
    Ok(String::from_utf8_lossy(&help.stdout).contains(flag))
}

fn https_client(
    roots: &rustls::RootCertStore,
    company: SocketAddr,
    from: Option<IpAddr>,
) -> anyhow::Result<reqwest::Client> {
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    let mut builder = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve(DOMAIN, company)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .no_proxy();
    if let Some(from) = from {
        builder = builder.local_address(from);
    }
    Ok(builder.build()?)
}

impl Stage {
    fn endpoint(&self) -> String {
        format!("https://{DOMAIN}/poppy/browser-session")
    }

    /// One honest join: a fresh assertion for the live Session, POSTed; its status and time.
    async fn join(&self) -> anyhow::Result<(u16, Duration)> {
        self.join_as(&self.agent, &self.session).await
    }

    /// A join of `agent`'s `session`: a fresh assertion, POSTed; its status and time.
    async fn join_as(&self, agent: &PapClient, session: &Session) -> anyhow::Result<(u16, Duration)> {
        let endpoint = HttpsUrl::parse(&self.endpoint())?;
        let return_to = HttpsUrl::parse(&format!("https://{DOMAIN}/"))?;
        let domain = CompanyDomain::try_from(DOMAIN)?;
        let request = BrowserAssertionRequest {
            client_id: agent.identity().client_id(),
            user: &session.user,
            endpoint: &endpoint,
            session_id: &session.session_id,
            return_to: &return_to,
            company_domain: &domain,
        };
        let now = agent.clock().now().plus(-5);
        let claims = BrowserAssertionClaims::build(&request, now, 60, Jti::generate(&SystemRng))?;
        let assertion = agent.identity().key().sign(BROWSER_ASSERTION_TYP, &claims)?;
        let started = Instant::now();
        let status = self.post_assertion(&self.http, assertion.secret()).await?;
        Ok((status, started.elapsed()))
    }

    async fn post_assertion(&self, http: &reqwest::Client, assertion: &str) -> anyhow::Result<u16> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("assertion", assertion)
            .finish();
        let answer = http
            .post(self.endpoint())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await?;
        Ok(answer.status().as_u16())
    }

    /// The p99 of `samples` honest joins and of as many discovery reads, one after another.
    async fn probe_p99(&self, samples: usize) -> anyhow::Result<(Duration, Duration)> {
        let mut joins = Vec::with_capacity(samples);
        let mut reads = Vec::with_capacity(samples);
        for _ in 0..samples {
            let (status, took) = self.join().await?;
            anyhow::ensure!(status == 303, "an honest join got {status}");
            joins.push(took);
            let started = Instant::now();
            let read = self
                .http
                .get(format!("https://{DOMAIN}/.well-known/poppy.json"))
                .send()
                .await?;
            anyhow::ensure!(read.status() == 200, "discovery got {}", read.status());
            read.bytes().await?;
            reads.push(started.elapsed());
        }
        Ok((p99(&mut reads), p99(&mut joins)))
    }
}

fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples
        .get((samples.len() * 99 / 100).min(samples.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// An unsigned browser assertion (a junk signature) naming `iss`: it passes every cheap check
/// but the Session's, which is where the company must stop.
fn stranger_assertion(iss: &str, now: i64, n: usize) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","typ":"poppy-browser+jwt"}"#);
    let claims = json!({
        "iss": iss, "sub": "usr_stranger", "aud": format!("https://{DOMAIN}/poppy/browser-session"),
        "session_id": format!("ses_stranger{n:0>16}"), "return_to": format!("https://{DOMAIN}/"),
        "iat": now - 5, "exp": now + 55, "jti": format!("{n:0>22}"),
    });
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signature = URL_SAFE_NO_PAD.encode([7u8; 64]);
    format!("{header}.{payload}.{signature}")
}

/// Sends `total` assertions from `make(i)` at [`CONCURRENCY`]; the count of each status.
async fn flood(
    stage: &Stage,
    total: usize,
    make: impl Fn(usize) -> String + Send + Sync + 'static,
) -> BTreeMap<u16, usize> {
    let next = Arc::new(AtomicUsize::new(0));
    let make = Arc::new(make);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (next, make, http, endpoint) = (next.clone(), make.clone(), stage.http.clone(), stage.endpoint());
        tasks.spawn(async move {
            let mut statuses = BTreeMap::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return statuses;
                }
                let body = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("assertion", &make(i))
                    .finish();
                let status = post_form(&http, &endpoint, body).await;
                *statuses.entry(status).or_insert(0) += 1;
            }
        });
    }
    let mut all = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        for (status, n) in done.unwrap_or_default() {
            *all.entry(status).or_insert(0) += n;
        }
    }
    all
}

/// Scenario 1.
async fn flood_of_strangers(stage: &Arc<Stage>, scale: &Scale, figures: &mut Figures) -> anyhow::Result<()> {
    // Warm up, then the baseline.
    for _ in 0..20 {
        stage.join().await?;
    }
    let baseline = stage.company.rss()?;
    let peak = PeakRss::start(&stage.company);
    let probe = HonestProbe::start(stage);
    let now = unix_now();
    let started = Instant::now();
    let junk = flood(stage, scale.junk, move |i| {
        stranger_assertion(&format!("https://nx{i}.invalid/agent.json"), now, i)
    })
    .await;
    let junk_rate = scale.junk as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let parent = agents::ATTACKER_PARENT;
    let attacker = flood(stage, scale.attacker, move |i| {
        stranger_assertion(&format!("https://a{i}.{parent}/agent.json"), now, i)
    })
    .await;
    let attacker_rate = scale.attacker as f64 / started.elapsed().as_secs_f64();
    let (_, mut joins) = probe.finish().await;
    let peak = peak.peak().await;
    let after = stage.company.rss()?;
    figures.add(
        1,
        "honest joins during the floods (all 303), p99",
        format!("{} in {}", joins.len(), ms(p99(&mut joins))),
        "> 0, p99 < 100 ms",
        !joins.is_empty() && p99(&mut joins) < Duration::from_millis(100),
    );
    let refused = |s: &BTreeMap<u16, usize>| s.get(&400).copied().unwrap_or(0);
    figures.add(
        1,
        &format!("junk iss assertions refused (400) of {}", scale.junk),
        refused(&junk),
        "all",
        refused(&junk) == scale.junk,
    );
    figures.info(1, "junk iss rate", format!("{junk_rate:.0}/s"));
    figures.add(
        1,
        &format!("valid-document iss assertions refused (400) of {}", scale.attacker),
        refused(&attacker),
        "all",
        refused(&attacker) == scale.attacker,
    );
    figures.info(1, "valid-document iss rate", format!("{attacker_rate:.0}/s"));
    let attacker_fetches = stage.fetches.attacker.load(Ordering::Relaxed);
    figures.add(
        1,
        "fetches of an iss without a live Session",
        attacker_fetches,
        "= 0",
        attacker_fetches == 0,
    );
    figures.info(1, "company RSS before", mib(baseline));
    let growth = peak.saturating_sub(baseline);
    figures.add(
        1,
        "company RSS peak over before",
        mib(growth),
        "< 64 MiB",
        growth < 64 * 1024 * 1024,
    );
    figures.info(1, "company RSS after", mib(after));
    if let Some(operator) = &stage.company.operator {
        let stores = https_client(&stage.roots, stage.company.addr, None)?
            .get(format!("{operator}/stores"))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        let stores: serde_json::Value = serde_json::from_slice(&stores)?;
        figures.info(
            1,
            "company stores after: sessions / replay marks / cookies",
            format!(
                "{} / {} / {}",
                stores["sessions"], stores["replay_marks"], stores["cookie_bindings"]
            ),
        );
    }
    let (status, took) = stage.join().await?;
    figures.add(
        1,
        "honest join after the flood",
        format!("{status} in {}", ms(took)),
        "303",
        status == 303,
    );
    Ok(())
}

/// Now, in Unix seconds.
fn unix_now() -> i64 {
    pap_shared::Clock::now(&SystemClock).as_secs()
}

/// Scenario 2.
async fn idle_and_slow_connections(stage: &Stage, scale: &Scale, figures: &mut Figures) -> anyhow::Result<()> {
    let limits = pap_net::serve::ServeLimits::default();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(stage.roots.clone())
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let cpu = CpuShare::start(&stage.company)?;
    let files_before = stage.company.open_files();
    let opened = Instant::now();
    // Each connection waits, reading, for the server to close it: when, from the open.
    let mut watchers = tokio::task::JoinSet::new();
    let mut established = 0;
    for batch in 0..scale.idle.div_ceil(100) {
        let mut handshakes = tokio::task::JoinSet::new();
        for _ in (batch * 100)..((batch + 1) * 100).min(scale.idle) {
            let (connector, addr) = (connector.clone(), stage.company.addr);
            handshakes.spawn(async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
                let name = rustls::pki_types::ServerName::try_from(DOMAIN).ok()?;
                connector.connect(name, tcp).await.ok()
            });
        }
        while let Some(done) = handshakes.join_next().await {
            if let Ok(Some(mut stream)) = done {
                established += 1;
                watchers.spawn(async move {
                    let mut sink = [0u8; 256];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                    (false, opened.elapsed())
                });
            }
        }
    }
    for i in 0..scale.slowloris {
        let (connector, addr) = (connector.clone(), stage.company.addr);
        watchers.spawn(async move {
            let started = Instant::now();
            let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
                return (true, Duration::MAX);
            };
            let Ok(name) = rustls::pki_types::ServerName::try_from(DOMAIN) else {
                return (true, Duration::MAX);
            };
            let Ok(mut stream) = connector.connect(name, tcp).await else {
                return (true, Duration::MAX);
            };
            let head = format!("GET / HTTP/1.1\r\nHost: {DOMAIN}\r\nX-Slow-{i}: ");
            if stream.write_all(head.as_bytes()).await.is_err() {
                return (true, started.elapsed());
            }
            // A byte a second, forever: only the server can end it.
            let mut ticks = tokio::time::interval(Duration::from_secs(1));
            loop {
                ticks.tick().await;
                if stream.write_all(b"a").await.is_err() || stream.flush().await.is_err() {
                    return (true, started.elapsed());
                }
            }
        });
    }
    let held = stage.company.open_files();
    let (status, took) = stage.join().await?;
    figures.add(
        2,
        &format!("idle TLS connections held ({} asked) + slowloris", scale.idle),
        format!("{established} + {}", scale.slowloris),
        "",
        true,
    );
    figures.info(
        2,
        "company open files before / while held",
        format!("{files_before} / {held}"),
    );
    figures.add(
        2,
        "honest join while they are held",
        format!("{status} in {}", ms(took)),
        "303 in < 100 ms",
        status == 303 && took < Duration::from_millis(100),
    );
    let deadline = limits.idle_timeout + limits.handshake_timeout + Duration::from_secs(5);
    let (mut idle_last, mut slow_last, mut unclosed) = (Duration::ZERO, Duration::ZERO, 0usize);
    let waited = tokio::time::timeout(deadline, async {
        while let Some(done) = watchers.join_next().await {
            match done {
                Ok((false, at)) => idle_last = idle_last.max(at),
                Ok((true, at)) => slow_last = slow_last.max(at),
                Err(_) => unclosed += 1,
            }
        }
    })
    .await;
    if waited.is_err() {
        unclosed += watchers.len();
        watchers.abort_all();
    }
    let share = cpu.share(&stage.company)?;
    figures.add(
        2,
        "connections still open past the limits",
        unclosed,
        "= 0",
        unclosed == 0,
    );
    let idle_bound = limits.idle_timeout.min(limits.header_read_timeout) + Duration::from_secs(2);
    figures.add(
        2,
        "last idle connection closed after",
        format!("{:.1} s", idle_last.as_secs_f64()),
        &format!("<= {:.0} s", idle_bound.as_secs_f64()),
        idle_last <= idle_bound,
    );
    // The client sees the close on its next byte after it, a second apart: two late at most.
    let slow_bound = limits.header_read_timeout + Duration::from_secs(3);
    figures.add(
        2,
        "last slowloris closed after",
        format!("{:.1} s", slow_last.as_secs_f64()),
        &format!("<= {:.0} s", slow_bound.as_secs_f64()),
        slow_last <= slow_bound,
    );
    figures.add(
        2,
        "company CPU while held (share of one core)",
        format!("{:.1} %", share * 100.0),
        "< 25 %",
        share < 0.25,
    );
    Ok(())
}

/// The `/device` page for `user_code`: its CSRF cookie and hidden inputs.
async fn device_form(http: &reqwest::Client, user_code: &str) -> anyhow::Result<(String, Vec<(String, String)>)> {
    let page = http
        .get(format!("https://{DOMAIN}/device"))
        .query(&[("user_code", user_code)])
        .send()
        .await?;
    let cookie = page
        .headers()
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .context("the device page set no cookie")?
        .to_owned();
    let inputs = pap_agent::testkit::hidden_inputs(&page.text().await?);
    Ok((cookie, inputs))
}

/// One approval attempt on `/device`: status, `Retry-After`, time.
async fn attempt(
    http: &reqwest::Client,
    form: &(String, Vec<(String, String)>),
    username: &str,
    password: &str,
) -> anyhow::Result<(u16, Option<String>, Duration)> {
    let mut fields = form.1.clone();
    fields.extend([
        ("username".to_owned(), username.to_owned()),
        ("password".to_owned(), password.to_owned()),
        ("decision".to_owned(), "approve".to_owned()),
    ]);
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&fields)
        .finish();
    let started = Instant::now();
    let answer = http
        .post(format!("https://{DOMAIN}/device"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("https://{DOMAIN}"))
        .header("sec-fetch-site", "same-origin")
        .header("cookie", &form.0)
        .body(body)
        .send()
        .await?;
    let status = answer.status().as_u16();
    let retry = answer
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    answer.bytes().await?;
    Ok((status, retry, started.elapsed()))
}

/// Scenario 3.
async fn password_guessing(stage: &Arc<Stage>, scale: &Scale, figures: &mut Figures) -> anyhow::Result<()> {
    let (idle_read, idle_join) = stage.probe_p99(100).await?;

    // A made-up code: the right password answers as a wrong one.
    let made_up = device_form(&stage.http, "BBBB-BBBB").await?;
    let (right, _, _) = attempt(&stage.http, &made_up, "ada", PASSWORD).await?;
    let (wrong, _, _) = attempt(&stage.http, &made_up, "ada", "guess").await?;
    figures.add(
        3,
        "made-up code: right / wrong password",
        format!("{right} / {wrong}"),
        "equal",
        right == wrong,
    );

    // Known and unknown names, alternately, within the limits.
    let device = stage.agent.device_begin(&stage.pap_company, &["orders:read"]).await?;
    let form = device_form(&stage.http, &device.user_code).await?;
    let (mut known, mut unknown) = (Vec::new(), Vec::new());
    for i in 0..pap_shop::limits::ACCOUNT_ATTEMPTS {
        let (status, _, took) = attempt(&stage.http, &form, "ada", "guess").await?;
        anyhow::ensure!(status == 401, "a wrong password got {status}");
        known.push(took);
        let (status, _, took) = attempt(&stage.http, &form, &format!("nobody{i}"), "guess").await?;
        anyhow::ensure!(status == 401, "an unknown name got {status}");
        unknown.push(took);
    }
    let (known, unknown) = (median(&mut known), median(&mut unknown));
    let ratio = known.as_secs_f64() / unknown.as_secs_f64().max(1e-6);
    figures.add(
        3,
        "median wrong password, known / unknown name",
        format!("{} / {}", ms(known), ms(unknown)),
        "ratio 0.5..2",
        (0.5..=2.0).contains(&ratio),
    );

    // The flood: 64 addresses at once, each past its limits, while an honest agent joins and
    // reads discovery as fast as it can.
    let probe = HonestProbe::start(stage);
    let next = Arc::new(AtomicUsize::new(0));
    let form = Arc::new(form);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CONCURRENCY {
        let http = https_client(&stage.roots, stage.company.addr, Some(loopback(i)))?;
        let (next, form, total) = (next.clone(), form.clone(), scale.guesses);
        tasks.spawn(async move {
            let mut seen: BTreeMap<u16, usize> = BTreeMap::new();
            let mut bare = 0usize;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return (seen, bare);
                }
                let name = if n % 8 == 0 {
                    "ada".to_owned()
                } else {
                    format!("guess{n}")
                };
                let (status, retry) = match attempt(&http, &form, &name, "guess").await {
                    Ok((status, retry, _)) => (status, retry),
                    Err(_) => (0, None),
                };
                if matches!(status, 429 | 503) && retry.is_none() {
                    bare += 1;
                }
                *seen.entry(status).or_insert(0) += 1;
            }
        });
    }
    let (mut statuses, mut bare) = (BTreeMap::new(), 0);
    while let Some(done) = tasks.join_next().await {
        let (seen, unmarked) = done.unwrap_or_default();
        bare += unmarked;
        for (status, n) in seen {
            *statuses.entry(status).or_insert(0) += n;
        }
    }
    let (mut reads, mut joins) = probe.finish().await;
    let (busy_read, busy_join) = (p99(&mut reads), p99(&mut joins));
    let count = |s: u16| statuses.get(&s).copied().unwrap_or(0);
    // 503 is the page's own answer when a password check waited 5 s for its turn (the Argon2
    // pool saturated: a slower or busier machine), with Retry-After like a 429; anything else
    // (a 200, a 500, a dropped connection) fails.
    let other = scale.guesses - count(401) - count(429) - count(503);
    figures.add(
        3,
        &format!(
            "{} guesses from {CONCURRENCY} addresses: 401 / 429 / 503 busy / other",
            scale.guesses
        ),
        format!("{} / {} / {} / {other}", count(401), count(429), count(503)),
        "429s, no other",
        count(429) > 0 && other == 0,
    );
    figures.info(3, "answers by status (0: no answer)", format!("{statuses:?}"));
    figures.add(3, "429 and 503 answers without Retry-After", bare, "= 0", bare == 0);
    // The floor is 5 ms, not the idle figure alone: at sub-millisecond latencies a p99 on two
    // shared cores moves by a millisecond with the scheduler (CI saw 0.56 -> 2.20 ms for
    // discovery once). Starvation, which this guards against, was 83 ms (discovery) and 185 ms
    // (a join) before guesses ran on their own pool, so the floor still catches it.
    let within = |busy: Duration, idle: Duration| busy <= 2 * idle.max(LATENCY_FLOOR);
    figures.add(
        3,
        "p99 of /.well-known/poppy.json, idle / under guessing",
        format!("{} / {}", ms(idle_read), ms(busy_read)),
        "<= 2 x max(idle, 5 ms)",
        within(busy_read, idle_read),
    );
    figures.add(
        3,
        "p99 of an honest join, idle / under guessing",
        format!("{} / {}", ms(idle_join), ms(busy_join)),
        "<= 2 x max(idle, 5 ms)",
        within(busy_join, idle_join),
    );
    figures.info(3, "honest probes under guessing", joins.len());
    Ok(())
}

/// Honest joins and discovery reads, one after another, on a task of their own until
/// finished: what the other routes see while a flood runs.
struct HonestProbe {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<(Vec<Duration>, Vec<Duration>)>,
}

impl HonestProbe {
    fn start(stage: &Arc<Stage>) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let stage = stage.clone();
        let task = tokio::spawn(async move {
            let (mut reads, mut joins) = (Vec::new(), Vec::new());
            while !*stopped.borrow_and_update() {
                if let Ok((303, took)) = stage.join().await {
                    joins.push(took);
                }
                let started = Instant::now();
                if let Ok(read) = stage
                    .http
                    .get(format!("https://{DOMAIN}/.well-known/poppy.json"))
                    .send()
                    .await
                    && read.bytes().await.is_ok()
                {
                    reads.push(started.elapsed());
                }
            }
            (reads, joins)
        });
        Self { stop, task }
    }

    /// Stops it; the discovery reads' times and the joins' times.
    async fn finish(self) -> (Vec<Duration>, Vec<Duration>) {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The `i`th client address of the guessing flood: 127.0.1.1 and on (all of 127/8 is this
/// machine's), so the company sees 64 addresses.
fn loopback(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, u8::try_from(i % 250 + 1).unwrap_or(1)))
}

/// Scenario 4.
async fn oversized_jwks(stage: &Stage, figures: &mut Figures) {
    for ((agent, (name, keys)), (fetched, bytes)) in stage
        .keyed_agents
        .iter()
        .zip(agents::KEYED_AGENTS)
        .zip(&stage.fetches.keyed)
    {
        let user = pap_agent::new_pairwise_user(&SystemRng);
        let outcome = match agent.new_dpop_key() {
            Ok(key) => agent.start_session(&stage.pap_company, &user, key).await,
            Err(error) => Err(error),
        };
        let refused = matches!(
            &outcome,
            Err(pap_agent::ClientError::Protocol { code, .. }) if *code == pap_shared::OAuthErrorCode::InvalidClient
        );
        figures.add(
            4,
            &format!("{name}: a {keys}-key JWKS of {} bytes", bytes.load(Ordering::Relaxed)),
            match &outcome {
                Ok(_) => "Session started".to_owned(),
                Err(_) => "refused 401".to_owned(),
            },
            &format!("invalid_client (cap {})", pap_shared::MAX_JWKS_KEYS),
            refused,
        );
        figures.info(
            4,
            &format!("{name}: documents fetched"),
            fetched.load(Ordering::Relaxed),
        );
    }
}

/// A revocation request from `filler`, validly signed, whose client assertion lives the most
/// the company accepts (300 s: its mark is kept until `exp` plus 30 s), as review N3's attack
/// sends them; its form body.
fn long_lived_revocation(filler: &PapClient, audience: &str) -> anyhow::Result<String> {
    let now = pap_shared::Clock::now(filler.clock().as_ref()).as_secs();
    let client_id = filler.identity().client_id().as_str();
    let claims = json!({
        "iss": client_id, "sub": client_id, "aud": audience,
        "iat": now, "exp": now + pap_shared::MAX_JWT_ASSERTION_LIFETIME,
        "jti": Jti::generate(&SystemRng).as_str(),
    });
    let assertion = filler.identity().key().sign("JWT", &claims)?;
    Ok(url::form_urlencoded::Serializer::new(String::new())
        .append_pair("client_id", client_id)
        .append_pair("client_assertion_type", pap_shared::CLIENT_ASSERTION_TYPE)
        .append_pair("client_assertion", assertion.secret())
        .append_pair("token", "acct_not-a-token")
        .append_pair("token_type_hint", "refresh_token")
        .finish())
}

/// What a legitimate agent measured beside an attack: its first token (the company has never
/// seen it) and its join, and the honest agent's join.
struct Beside {
    session: Result<Session, pap_agent::ClientError>,
    token_took: Duration,
    join: (u16, Duration),
    honest_join: (u16, Duration),
}

impl Stage {
    /// `newcomer` discovers the company, gets its token and joins; then the honest agent joins.
    async fn beside(&self, newcomer: &PapClient) -> anyhow::Result<Beside> {
        let company = newcomer.discover(&CompanyDomain::try_from(DOMAIN)?).await?;
        let user = pap_agent::new_pairwise_user(&SystemRng);
        let began = Instant::now();
        let session = newcomer.start_session(&company, &user, newcomer.new_dpop_key()?).await;
        let token_took = began.elapsed();
        let join = match &session {
            Ok(session) => self.join_as(newcomer, session).await?,
            Err(_) => (0, Duration::ZERO),
        };
        let honest_join = self.join().await?;
        Ok(Beside {
            session,
            token_took,
            join,
            honest_join,
        })
    }
}

impl Beside {
    /// The three figures of `scenario`, `when` naming the attack: the token granted and the
    /// join 303, each within `bound`; the honest agent's join 303.
    fn report(&self, scenario: u8, when: &str, bound: Duration, figures: &mut Figures) {
        let within = format!("< {} s", bound.as_secs());
        figures.add(
            scenario,
            &format!("a new agent's token (first contact) {when}"),
            match &self.session {
                Ok(_) => ms(self.token_took),
                Err(error) => format!("refused: {error}"),
            },
            &format!("granted, {within}"),
            self.session.is_ok() && self.token_took < bound,
        );
        let (status, took) = self.join;
        figures.add(
            scenario,
            &format!("its join {when}"),
            format!("{status} in {}", ms(took)),
            &format!("303, {within}"),
            status == 303 && took < bound,
        );
        let (status, took) = self.honest_join;
        figures.add(
            scenario,
            &format!("the honest agent's join {when}"),
            format!("{status} in {}", ms(took)),
            "303",
            status == 303,
        );
    }
}

/// Scenario 5: the honest agent rotates its key with joins 8 at a time before, during and
/// after (the rotation once [`JOINS_BEFORE`] joins were answered, the end once
/// [`JOINS_AFTER`] more were); every one must be accepted.
async fn rotation_under_load(stage: &Arc<Stage>, figures: &mut Figures) -> anyhow::Result<()> {
    const JOINERS: usize = 8;
    const JOINS_BEFORE: usize = 1_000;
    const JOINS_AFTER: usize = 2_000;
    /// How long either count may take: far past what a loaded 2-core machine needs.
    const DEADLINE: Duration = Duration::from_secs(120);
    let old_kid = stage.agent.identity().key().kid().to_owned();
    let fetched_before = stage.fetches.honest.load(Ordering::Relaxed);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (answer, mut answered) = tokio::sync::watch::channel(0_usize);
    let answer = Arc::new(answer);
    let tasks: Vec<_> = (0..JOINERS)
        .map(|_| {
            let stage = stage.clone();
            let mut stopped = stopped.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let (mut accepted, mut refused, mut times) = (0_usize, Vec::new(), Vec::new());
                while !*stopped.borrow_and_update() {
                    let joined = stage.join().await;
                    answer.send_modify(|n| *n += 1);
                    match joined {
                        Ok((303, took)) => {
                            accepted += 1;
                            times.push(took);
                        }
                        Ok((status, _)) => refused.push(status.to_string()),
                        Err(error) => refused.push(error.to_string()),
                    }
                }
                (accepted, refused, times)
            })
        })
        .collect();
    tokio::time::timeout(DEADLINE, answered.wait_for(|n| *n >= JOINS_BEFORE))
        .await
        .context("the joins before the rotation did not finish in time")??;
    let now = pap_shared::Clock::now(&SystemClock);
    let report =
        Identity::rotate(&stage.honest_state, 3_600, now, &SystemRng).context("rotating the honest agent's key")?;
    let at_rotation = *answered.borrow();
    tokio::time::timeout(DEADLINE, answered.wait_for(|n| *n >= at_rotation + JOINS_AFTER))
        .await
        .context("the joins after the rotation did not finish in time")??;
    let _ = stop.send(true);
    let (mut accepted, mut refused, mut times) = (0, Vec::new(), Vec::new());
    for task in tasks {
        let (a, r, t) = task.await?;
        accepted += a;
        refused.extend(r);
        times.extend(t);
    }
    let new_kid = stage.agent.identity().key().kid().to_owned();
    let fetched = stage.fetches.honest.load(Ordering::Relaxed) - fetched_before;
    figures.add(
        5,
        "joins while the key rotated, accepted (303)",
        accepted,
        "> 0",
        accepted > 0,
    );
    figures.add(
        5,
        "joins refused",
        format!(
            "{} {}",
            refused.len(),
            refused.first().map(String::as_str).unwrap_or_default()
        ),
        "0",
        refused.is_empty(),
    );
    figures.add(
        5,
        &format!("signing kid after the rotation (was {old_kid})"),
        &new_kid,
        &report.current,
        new_kid == report.current,
    );
    // One JWKS refetch for the new kid, shared by every join that carried it; two more when
    // the documents' 60 s cache ran out within the window.
    figures.add(
        5,
        "honest documents fetched during the rotation",
        fetched,
        "<= 3",
        fetched <= 3,
    );
    figures.info(5, "join p99 across the rotation", ms(p99(&mut times)));
    Ok(())
}

/// An unauthenticated token request for `client_id`, with an unsigned client assertion whose
/// `iss`, `sub`, `aud` and times are right: the company must fetch the client's keys to refuse
/// it (review N1's attack). Its status.
async fn stranger_token_request(http: &reqwest::Client, client_id: &str, n: usize) -> u16 {
    let now = pap_shared::Clock::now(&SystemClock).as_secs();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","typ":"JWT"}"#);
    let claims = json!({
        "iss": client_id, "sub": client_id, "aud": format!("https://{DOMAIN}"),
        "iat": now - 5, "exp": now + 55, "jti": format!("stranger-token-{n:0>16}"),
    });
    let assertion = format!(
        "{header}.{}.{}",
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode([7u8; 64])
    );
    let body = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("grant_type", pap_shared::grant_type::JWT_BEARER)
        .append_pair("client_id", client_id)
        .append_pair("client_assertion_type", pap_shared::CLIENT_ASSERTION_TYPE)
        .append_pair("client_assertion", &assertion)
        .append_pair("assertion", "x")
        .finish();
    post_form(http, &format!("https://{DOMAIN}/oauth/token"), body).await
}

/// POSTs a form body to `url`; the answer's status, 0 for none.
async fn post_form(http: &reqwest::Client, url: &str, body: String) -> u16 {
    match http
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
    {
        Ok(answer) => answer.status().as_u16(),
        Err(_) => 0,
    }
}

/// Scenario 6 (review N1): a flood of token requests from one address (not the agents'),
/// naming fresh `client_id`s under `domains` of the attacker's wildcard domains in turn, their
/// documents slow (`/slow/`: silent; `/chain/`: a JWKS that redirects slowly, hop after hop),
/// 20 a second. Once the company is fetching the attacker's documents, an agent it has never
/// seen discovers it, gets its token and joins; the honest agent joins too. Both must succeed,
/// each within the company's fetch deadline.
async fn slow_documents_under_many_names(
    stage: &Arc<Stage>,
    domains: usize,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    /// The flood's pace: 20 token requests a second, each naming a new client.
    const EVERY: Duration = Duration::from_millis(50);
    /// How long the attacker's fetches may take to start reaching its server.
    const DEADLINE: Duration = Duration::from_secs(30);
    /// Requests sent before the newcomer starts: 5 s of flood, so every fetch slot the
    /// attacker could take is taken (each of its fetches holds one for 2 to 5 s).
    const BEFORE: usize = 100;
    /// What the newcomer's token and join may take: the company's fetch deadline (5 s) and a
    /// loaded machine's margin.
    const BOUND: Duration = Duration::from_secs(6);
    let round = usize::from(domains > 1);
    let label = |what: &str| format!("{what} ({domains} domain{})", if domains > 1 { "s" } else { "" });
    let slow_before = stage.fetches.attacker_slow.load(Ordering::Relaxed);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let (sent, mut sent_so_far) = tokio::sync::watch::channel(0_usize);
    let flood = {
        // One address of the attacker's own, the company sees it apart from the agents'.
        let http = https_client(&stage.roots, stage.company.addr, Some(loopback(CONCURRENCY + round)))?;
        tokio::spawn(async move {
            let mut pace = tokio::time::interval(EVERY);
            let mut requests = tokio::task::JoinSet::new();
            let mut n = 0_usize;
            loop {
                tokio::select! {
                    _ = pace.tick() => {}
                    _ = stopped.changed() => break,
                }
                let path = if n.is_multiple_of(2) { "slow" } else { "chain" };
                let domain = agents::attacker_domain(n % domains);
                let client_id = format!("https://r{round}-{n}.{domain}/{path}/agent.json");
                let http = http.clone();
                requests.spawn(async move { stranger_token_request(&http, &client_id, n).await });
                n += 1;
                let _ = sent.send(n);
            }
            let mut statuses = BTreeMap::<u16, usize>::new();
            while let Some(status) = requests.join_next().await {
                *statuses.entry(status.unwrap_or(0)).or_default() += 1;
            }
            statuses
        })
    };
    // The attacker's documents are being fetched: the company's fetch slots are under attack.
    tokio::time::timeout(DEADLINE, async {
        while stage.fetches.attacker_slow.load(Ordering::Relaxed) < slow_before + 2 {
            stage.fetches.attacker_slow_seen.notified().await;
        }
    })
    .await
    .context("the attacker's documents were never fetched")?;
    tokio::time::timeout(DEADLINE, sent_so_far.wait_for(|n| *n >= BEFORE))
        .await
        .context("the flood did not get going")??;
    let beside = stage.beside(&stage.newcomers[round]).await?;
    let _ = stop.send(true);
    let statuses = flood.await?;
    let requests: usize = statuses.values().sum();
    figures.info(6, &label("attacker token requests (fresh client_id each)"), requests);
    figures.info(
        6,
        &label("answered 503 busy / 401 invalid_client / other"),
        format!(
            "{} / {} / {}",
            statuses.get(&503).unwrap_or(&0),
            statuses.get(&401).unwrap_or(&0),
            requests - statuses.get(&503).unwrap_or(&0) - statuses.get(&401).unwrap_or(&0)
        ),
    );
    figures.info(
        6,
        &label("attacker document requests that reached its server"),
        stage.fetches.attacker_slow.load(Ordering::Relaxed) - slow_before,
    );
    beside.report(6, &label("during the flood"), BOUND, figures);
    Ok(())
}

/// Scenario 7 (review N3): a self-hosted agent ([`agents::FILLER`]) sends validly signed
/// revocation requests, 32 at a time, each with a fresh client assertion living 300 s (a replay
/// mark kept 330 s), until
/// its `share` of the guard ([`REPLAY_SHARE_IN_RUN`]; a company from before the shares: the
/// whole guard) is full and the company refuses it. While the share is full (its marks live a
/// minute), an agent the company has never seen gets its token and joins, and the honest agent
/// joins: neither may be refused.
async fn one_client_filling_its_replay_share(
    stage: &Arc<Stage>,
    share: u64,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    const FILLERS: usize = 32;
    /// Requests past the share: every filler sees refusals before it stops.
    const PAST_THE_SHARE: usize = 2_000;
    /// What the newcomer's token and join may take on a loaded machine.
    const BOUND: Duration = Duration::from_secs(2);
    let (newcomer_index, filler_index) = agents::SCENARIO_7;
    let filler = Arc::new(stage.newcomers.get(filler_index).context("no filler agent")?.clone());
    let company = filler.discover(&CompanyDomain::try_from(DOMAIN)?).await?;
    let total = usize::try_from(share)?.saturating_add(PAST_THE_SHARE);
    let next = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let tasks: Vec<_> = (0..FILLERS)
        .map(|_| {
            let (filler, next, http) = (filler.clone(), next.clone(), stage.http.clone());
            let (audience, endpoint) = (company.issuer.clone(), company.revocation_endpoint.to_string());
            tokio::spawn(async move {
                let mut statuses = BTreeMap::<u16, usize>::new();
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let status = match long_lived_revocation(&filler, &audience) {
                        Ok(body) => post_form(&http, &endpoint, body).await,
                        Err(_) => 0,
                    };
                    *statuses.entry(status).or_default() += 1;
                }
                statuses
            })
        })
        .collect();
    let mut statuses = BTreeMap::<u16, usize>::new();
    for task in tasks {
        for (status, n) in task.await? {
            *statuses.entry(status).or_default() += n;
        }
    }
    let flood_took = began.elapsed();
    let accepted = statuses.get(&200).copied().unwrap_or(0);
    let refused = total - accepted;
    // While the filler's marks live: a first contact's token and join, the honest agent's join.
    let beside = stage
        .beside(stage.newcomers.get(newcomer_index).context("no newcomer")?)
        .await?;
    let user = pap_agent::new_pairwise_user(&SystemRng);
    let filler_token = filler.start_session(&company, &user, filler.new_dpop_key()?).await;
    figures.info(
        7,
        "filler's signed requests (a fresh client assertion each)",
        format!("{total} in {:.1} s", flood_took.as_secs_f64()),
    );
    figures.add(
        7,
        "of them accepted (the share) / refused",
        format!("{accepted} / {refused}"),
        &format!("{share} / {PAST_THE_SHARE}"),
        u64::try_from(accepted)? == share && refused == PAST_THE_SHARE,
    );
    figures.info(
        7,
        "refusals by status",
        statuses
            .iter()
            .filter(|(status, _)| **status != 200)
            .map(|(status, n)| format!("{n} x {status}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    figures.add(
        7,
        "the filler's own token request, share full",
        match &filler_token {
            Ok(_) => "granted".to_owned(),
            Err(error) => format!("refused: {error}"),
        },
        "refused",
        filler_token.is_err(),
    );
    beside.report(7, "with the filler's share full", BOUND, figures);
    Ok(())
}

/// Scenario 8 (review S3): clients under a free public suffix that answered fast once (so that
/// a resolver counting a fast answer as "known" would let them past the first contacts' share)
/// hold fetch slots with silent refetches, from 8 addresses, for longer than the known agent's
/// documents live plus the 60 s they may be used stale; the known agent's joins go on.
async fn self_made_known_clients_beside_a_known_agent(stage: &Arc<Stage>, figures: &mut Figures) -> anyhow::Result<()> {
    /// The attack's length: past two lifetimes (60 s) of the known agent's documents and the
    /// 60 s they may be used stale while the resolver is busy.
    const LENGTH: Duration = Duration::from_secs(130);
    /// Its pace: 20 token requests a second, over [`CLIENTS`] clients from [`ADDRESSES`].
    const EVERY: Duration = Duration::from_millis(50);
    const CLIENTS: usize = 16;
    const ADDRESSES: usize = 8;
    /// The known agent's pace.
    const JOIN_EVERY: Duration = Duration::from_millis(250);
    let Some(operator) = stage.company.operator.clone() else {
        figures.info(
            8,
            "not run",
            "the company has no operator API to sign the known agent in",
        );
        return Ok(());
    };
    // The known agent: a Session a person signed in (approved through the operator API), and
    // one join to it, which makes the company vouch for the agent.
    let user = pap_agent::new_pairwise_user(&SystemRng);
    let mut session = stage
        .agent
        .start_session(&stage.pap_company, &user, stage.agent.new_dpop_key()?)
        .await
        .context("starting the known agent's Session")?;
    let device = stage.agent.device_begin(&stage.pap_company, &["orders:read"]).await?;
    crate::process::approve_device(&stage.http, &operator, &device.user_code)
        .await
        .context("the operator's approval")?;
    stage
        .agent
        .device_wait(&stage.pap_company, &mut session, &device)
        .await
        .context("signing the known agent in")?;
    let (status, _) = stage.join_as(&stage.agent, &session).await?;
    anyhow::ensure!(status == 303, "the known agent's first join got {status}");

    let silent_before = stage.fetches.once_silent.load(Ordering::Relaxed);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut attackers = tokio::task::JoinSet::new();
    for a in 0..ADDRESSES {
        let http = https_client(&stage.roots, stage.company.addr, Some(loopback(200 + a)))?;
        let mut stopped = stopped.clone();
        attackers.spawn(async move {
            // Each address sends its share of the pace, naming the clients in turn.
            let mut pace = tokio::time::interval(EVERY * u32::try_from(ADDRESSES).unwrap_or(8));
            let mut requests = tokio::task::JoinSet::new();
            let mut n = a;
            loop {
                tokio::select! {
                    _ = pace.tick() => {}
                    _ = stopped.changed() => break,
                }
                let client_id = agents::free_suffix_client(n % CLIENTS);
                let http = http.clone();
                requests.spawn(async move { stranger_token_request(&http, &client_id, 1_000_000 + n).await });
                n += ADDRESSES;
            }
            let mut statuses = BTreeMap::<u16, usize>::new();
            while let Some(status) = requests.join_next().await {
                *statuses.entry(status.unwrap_or(0)).or_default() += 1;
            }
            statuses
        });
    }
    let began = Instant::now();
    let mut joins = BTreeMap::<u16, usize>::new();
    let mut slowest = Duration::ZERO;
    let mut pace = tokio::time::interval(JOIN_EVERY);
    while began.elapsed() < LENGTH {
        pace.tick().await;
        let (status, took) = stage.join_as(&stage.agent, &session).await?;
        *joins.entry(status).or_default() += 1;
        slowest = slowest.max(took);
    }
    let _ = stop.send(true);
    let mut statuses = BTreeMap::<u16, usize>::new();
    while let Some(answered) = attackers.join_next().await {
        for (status, n) in answered? {
            *statuses.entry(status).or_default() += n;
        }
    }
    let requests: usize = statuses.values().sum();
    figures.info(
        8,
        "attacker token requests (16 free-suffix clients, 8 addresses, 130 s)",
        format!(
            "{requests}: {}",
            statuses
                .iter()
                .map(|(s, n)| format!("{n} x {s}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    figures.info(
        8,
        "the attacker's documents answered fast / held silent",
        format!(
            "{} / {}",
            stage.fetches.once_fast.load(Ordering::Relaxed),
            stage.fetches.once_silent.load(Ordering::Relaxed) - silent_before
        ),
    );
    let total: usize = joins.values().sum();
    let refused = total - joins.get(&303).copied().unwrap_or(0);
    figures.add(
        8,
        "the known agent's joins during the attack (its documents expiring every 60 s): refused",
        format!("{refused} of {total} (slowest {})", ms(slowest)),
        "0",
        refused == 0,
    );
    Ok(())
}
