//! `pap-conformance`: the PAP cases of the browser-session bridge against any company, and the
//! AIP-63 suite against a browser provider.
//!
//! Run with `cargo run -p pap-conformance -- pap --help` or `-- browser --help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use pap_agent::{ClientConfig, Identity, PapClient, documents_router, pin_served_leaf};
use pap_browser::chromium::{BrowserHost, BrowserUserPolicy, ChromiumConfig, TestNetwork};
use pap_conformance::pap::{self, Approver, Context, Scenario};
use pap_conformance::{abuse, browser};
use pap_net::listener::TlsListener;
use pap_shared::{CompanyDomain, SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

#[derive(Parser)]
#[command(
    name = "pap-conformance",
    version,
    about = "Conformance runs for the PAP browser-session bridge"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the PAP cases (joins, refused, web confirm) against a company, as the agent, in Chromium.
    #[command(
        after_help = "Example:\n  pap-conformance pap --company https://shop.example --connect shop.example=127.0.0.1:8443 \\\n      --trust-ca certs/ca.pem --scenario conformance/interop/shop.example.scenario.json \\\n      --username ada --password 'correct horse battery staple' --operator http://127.0.0.1:8444 \\\n      --serve-agent 127.0.0.1:9443 --agent-cert certs/cert.pem --agent-key certs/key.pem"
    )]
    Pap(Box<PapArgs>),
    /// Runs the AIP-63 (agentbrowser/v1) suite's hooks against a browser provider, or its tool
    /// hooks against an MCP browser host (--mcp).
    #[command(
        after_help = "Example:\n  pap-conformance browser --provider chromium --junit aip63.xml\n  pap-conformance browser --mcp http://127.0.0.1:7878/mcp --bearer-file device.bearer"
    )]
    Browser(BrowserArgs),
    /// Runs a hostile load against a `pap-company serve` process it starts, and prints what it
    /// measured; fails when a stated bound is broken.
    #[command(after_help = "Example:\n  pap-conformance abuse --work /tmp/abuse --json abuse.json")]
    Abuse(AbuseArgs),
    /// Runs three `pap-company serve --store redis://…` replicas on one redis-server it starts
    /// (or on a Redis Cluster of three primaries, `--cluster`), and checks that they agree and
    /// fail closed; fails when a check does.
    #[command(
        after_help = "Example:\n  pap-conformance replicas --work /tmp/replicas --json replicas.json\n  pap-conformance replicas --cluster --work /tmp/replicas-cluster"
    )]
    Replicas(ReplicasArgs),
    /// Test only: forwards each TCP connection on LISTEN to the next of the backends in turn,
    /// as a round-robin balancer in front of a company's replicas does.
    #[command(
        after_help = "Example:\n  pap-conformance balance --listen 127.0.0.1:8443 --to 127.0.0.1:9001 --to 127.0.0.1:9002 \\\n      --cert certs/cert.pem --key certs/key.pem --ca certs/ca.pem"
    )]
    Balance(BalanceArgs),
}

#[derive(clap::Args)]
struct BalanceArgs {
    /// Where to accept HTTPS (a loopback address).
    #[arg(long)]
    listen: SocketAddr,
    /// A replica (repeatable); each request goes to the next in turn.
    #[arg(long = "to", required = true)]
    backends: Vec<SocketAddr>,
    /// The company's domain, as the replicas serve it.
    #[arg(long, default_value = "shop.example")]
    domain: String,
    /// The certificate to present (PEM), and its key.
    #[arg(long)]
    cert: PathBuf,
    #[arg(long)]
    key: PathBuf,
    /// The CA the replicas' certificate chains to.
    #[arg(long)]
    ca: PathBuf,
}

#[derive(clap::Args)]
struct ReplicasArgs {
    /// The company binary (default: `pap-company` beside this one).
    #[arg(long)]
    company_bin: Option<PathBuf>,
    /// Its configuration (testing on, `ada`'s password the shipped one).
    #[arg(long, default_value = "company/shop/shop.example.toml")]
    config: PathBuf,
    /// Where certificates, the logs, the credentials and Redis's files go (default: a new temp dir).
    #[arg(long)]
    work: Option<PathBuf>,
    /// Write what it saw as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Share a Redis Cluster of three primaries (`--store redis-cluster://…`), made with
    /// `redis-cli --cluster create`, rather than one redis-server.
    #[arg(long)]
    cluster: bool,
}

#[derive(clap::Args)]
struct AbuseArgs {
    /// The company binary (default: `pap-company` beside this one).
    #[arg(long)]
    company_bin: Option<PathBuf>,
    /// Its configuration (testing on, `ada`'s password the shipped one).
    #[arg(long, default_value = "company/shop/shop.example.toml")]
    config: PathBuf,
    /// Where certificates, the company's log and its credential go (default: a new temp dir).
    #[arg(long)]
    work: Option<PathBuf>,
    /// The full size (100,000 assertions, 3,000 connections) instead of CI's.
    #[arg(long)]
    full: bool,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The company predates the operator credential (to measure a release from before it).
    #[arg(long)]
    before_credential: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Provider {
    /// Our Chromium provider, on Debian's Chromium.
    Chromium,
    /// Our attach provider, on a Debian Chromium the suite starts as "already running".
    ChromiumAttach,
    /// The suite's in-memory fake (a self-check of the suite).
    Fake,
}

#[derive(Clone, Copy, ValueEnum)]
enum LevelArg {
    Core,
    Interaction,
    Network,
    Download,
    Profile,
}

impl From<LevelArg> for browser::Level {
    fn from(level: LevelArg) -> Self {
        match level {
            LevelArg::Core => Self::Core,
            LevelArg::Interaction => Self::Interaction,
            LevelArg::Network => Self::Network,
            LevelArg::Download => Self::Download,
            LevelArg::Profile => Self::Profile,
        }
    }
}

#[derive(clap::Args)]
struct BrowserArgs {
    /// The provider under test.
    #[arg(long, value_enum, default_value = "chromium", conflicts_with = "mcp")]
    provider: Provider,
    /// Instead of a provider: the streamable HTTP endpoint of an MCP browser host on this
    /// machine, whose browser may load the suite's pages on http://127.0.0.1 (the ports of
    /// --pages-ports). Runs the hooks that need only the tools, of the levels its tools cover
    /// (or --level).
    #[arg(long, value_name = "URL", requires = "bearer_file")]
    mcp: Option<String>,
    /// The paired device's bearer for --mcp (a file: a bearer is never an argument).
    #[arg(long, value_name = "FILE")]
    bearer_file: Option<PathBuf>,
    /// Serve the suite's pages on ports of this range (`LOW-HIGH`), the range the host under
    /// test names for its browser (`pap-agent --name-origin http://127.0.0.1:LOW-HIGH`).
    #[arg(long, value_name = "LOW-HIGH")]
    pages_ports: Option<String>,
    /// The provider's manifest (default, from the repository root:
    /// agent/browser/providers/chromium/BROWSER.md, or
    /// agent/browser/providers/chromium-attach/BROWSER.md for chromium-attach).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Only these levels (repeatable); every level when absent.
    #[arg(long = "level", value_enum)]
    levels: Vec<LevelArg>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the report as JUnit XML here.
    #[arg(long)]
    junit: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Approve {
    DevicePage,
    Operator,
}

#[derive(clap::Args)]
struct PapArgs {
    /// The company: https://DOMAIN (no port, no path).
    #[arg(long)]
    company: String,
    /// Test only: dial DOMAIN at ADDR:PORT (HTTP and the browser).
    #[arg(long, value_name = "DOMAIN=ADDR:PORT")]
    connect: Option<String>,
    /// Test only: the browser dials DOMAIN at this ADDR:PORT instead (another replica of the
    /// company than the one the API calls reach).
    #[arg(long, value_name = "DOMAIN=ADDR:PORT")]
    connect_browser: Option<String>,
    /// Test only: trust this CA for the company (the browser pins the leaf it vouches for).
    #[arg(long)]
    trust_ca: Option<PathBuf>,
    /// The company's scenario (format of conformance/interop/shop.example.scenario.json).
    #[arg(long)]
    scenario: PathBuf,
    /// How the user approves Device Sign-In.
    #[arg(long, value_enum, default_value = "device-page")]
    approve: Approve,
    /// The user name on the device page.
    #[arg(long, default_value = "ada")]
    username: String,
    /// The password on the device page.
    #[arg(long, default_value = "")]
    password: String,
    /// The operator API (approve-device, performed); default https://DOMAIN/_operator.
    #[arg(long)]
    operator: Option<String>,
    /// The agent's domain: its client_id is https://NAME/agent.json.
    #[arg(long, default_value = "atlas.example")]
    agent_domain: String,
    /// Serve the agent's metadata and JWKS over TLS here (the company must reach it).
    #[arg(long)]
    serve_agent: Option<SocketAddr>,
    /// The certificate (PEM) for the agent's documents.
    #[arg(long)]
    agent_cert: Option<PathBuf>,
    /// Its key (PEM).
    #[arg(long)]
    agent_key: Option<PathBuf>,
    /// Only these cases (repeatable).
    #[arg(long = "case")]
    cases: Vec<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the report as JUnit XML here.
    #[arg(long)]
    junit: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let base = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,chromiumoxide::handler=off".into());
    tracing_subscriber::fmt()
        .with_env_filter(pap_browser::chromium::log_filter(&base))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("pap-conformance: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        Command::Pap(args) => runtime.block_on(run_pap(*args)),
        Command::Browser(args) => runtime.block_on(run_browser(args)),
        Command::Abuse(args) => runtime.block_on(run_abuse(args)),
        Command::Replicas(args) => runtime.block_on(run_replicas(args)),
        Command::Balance(args) => runtime.block_on(run_balance(args)),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("pap-conformance: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// `pap-company` as given, or beside this binary.
fn company_bin(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(path) => Ok(path),
        None => Ok(std::env::current_exe()?
            .parent()
            .context("the runner has no directory")?
            .join("pap-company")),
    }
}

async fn run_balance(args: BalanceArgs) -> anyhow::Result<bool> {
    if !args.listen.ip().is_loopback() {
        bail!("the balancer is a test tool: it listens on loopback addresses only");
    }
    let tls = pap_net::tls::load_server_config(&args.cert, &args.key)?;
    let ca = std::fs::read(&args.ca).with_context(|| format!("reading {}", args.ca.display()))?;
    let router = pap_conformance::balance::router(&args.domain, &args.backends, &ca)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    eprintln!(
        "balancing {} over {} replicas, request by request",
        args.listen,
        args.backends.len()
    );
    pap_net::serve::serve_tls(listener, router, tls, std::future::pending()).await;
    Ok(true)
}

async fn run_replicas(args: ReplicasArgs) -> anyhow::Result<bool> {
    let plan = pap_conformance::replicas::Plan {
        company_bin: company_bin(args.company_bin)?,
        config: args.config,
        work: args
            .work
            .unwrap_or_else(|| std::env::temp_dir().join(format!("pap-replicas-{}", std::process::id()))),
        cluster: args.cluster,
    };
    let figures = pap_conformance::replicas::run(&plan).await?;
    #[allow(clippy::print_stdout, reason = "the figures are the command's output")]
    {
        if plan.cluster {
            println!("Three replicas on a Redis Cluster of three primaries:");
        }
        print!("{}", figures.text());
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)?;
    }
    Ok(figures.all_held())
}

async fn run_abuse(args: AbuseArgs) -> anyhow::Result<bool> {
    let company_bin = company_bin(args.company_bin)?;
    let plan = abuse::Plan {
        company_bin,
        config: args.config,
        work: args
            .work
            .unwrap_or_else(|| std::env::temp_dir().join(format!("pap-abuse-{}", std::process::id()))),
        size: if args.full {
            abuse::Size::Full
        } else {
            abuse::Size::Small
        },
        before_credential: args.before_credential,
    };
    let figures = abuse::run(&plan).await?;
    #[allow(clippy::print_stdout, reason = "the figures are the command's output")]
    {
        print!("{}", figures.text());
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)?;
    }
    Ok(figures.all_held())
}

async fn run_browser(args: BrowserArgs) -> anyhow::Result<bool> {
    let levels: Vec<browser::Level> = args.levels.iter().map(|l| (*l).into()).collect();
    if let Some(range) = &args.pages_ports {
        let ports = range
            .split_once('-')
            .and_then(|(low, high)| Some((low.parse::<u16>().ok()?, high.parse::<u16>().ok()?)))
            .filter(|(low, high)| *low > 0 && low <= high)
            .with_context(|| format!("--pages-ports {range}: not LOW-HIGH"))?;
        browser::serve_pages_on(ports.0, ports.1);
    }
    let report = match (&args.mcp, &args.bearer_file) {
        (Some(url), Some(bearer_file)) => {
            let bearer = std::fs::read_to_string(bearer_file)
                .with_context(|| format!("reading the bearer {}", bearer_file.display()))?;
            let host = browser::McpHost::connect(url, bearer.trim()).await?;
            let levels = if levels.is_empty() { host.levels() } else { levels };
            let names = host.names_case().await;
            let mut report = browser::run_over_tools(&host, &levels).await;
            report.results.insert(0, names);
            report
        }
        _ => run_provider(&args, &levels).await?,
    };
    #[allow(clippy::print_stdout, reason = "the report is the command's output")]
    {
        print!("{}", report.text());
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json())?)?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report.junit("pap-conformance browser"))?;
    }
    Ok(report.all_passed())
}

/// The suite against `args.provider`.
async fn run_provider(
    args: &BrowserArgs,
    levels: &[browser::Level],
) -> anyhow::Result<pap_conformance::report::Report> {
    Ok(match args.provider {
        Provider::Fake => browser::run(&browser::FakeProvider::sound(), levels).await,
        Provider::Chromium | Provider::ChromiumAttach => {
            let state = std::env::temp_dir().join(format!("pap-conformance-browser-{}", std::process::id()));
            std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
            let attach = matches!(args.provider, Provider::ChromiumAttach);
            let manifest = args.manifest.clone().unwrap_or_else(|| {
                PathBuf::from(if attach {
                    "agent/browser/providers/chromium-attach/BROWSER.md"
                } else {
                    "agent/browser/providers/chromium/BROWSER.md"
                })
            });
            let mut config = ChromiumConfig::new(state.clone());
            // A state directory of this run's: the shared browser user, not one per run.
            config.browser_user = BrowserUserPolicy::shared();
            let provider = if attach {
                browser::ChromiumUnderTest::attached(&manifest, config)?
            } else {
                browser::ChromiumUnderTest::new(&manifest, config)?
            };
            let report = browser::run(&provider, levels).await;
            provider.shut_down().await;
            let _ = std::fs::remove_dir_all(&state);
            report
        }
    })
}

/// A `DOMAIN=ADDR:PORT` argument for the company's own domain.
fn connect_arg(entry: Option<&str>, domain: &CompanyDomain, flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    let Some(entry) = entry else { return Ok(None) };
    let (name, addr) = entry
        .split_once('=')
        .with_context(|| format!("{flag}: expected DOMAIN=ADDR:PORT"))?;
    if !name.eq_ignore_ascii_case(domain.as_str()) {
        bail!("{flag} names {name}, not the company's domain {domain}");
    }
    Ok(Some(
        addr.parse::<SocketAddr>()
            .with_context(|| format!("{flag}: bad address"))?,
    ))
}

async fn run_pap(args: PapArgs) -> anyhow::Result<bool> {
    let domain_text = args
        .company
        .strip_prefix("https://")
        .context("--company must be https://DOMAIN")?
        .trim_end_matches('/');
    let domain = CompanyDomain::try_from(domain_text).context("--company names no valid domain")?;
    let scenario = Scenario::parse(
        &std::fs::read_to_string(&args.scenario).with_context(|| format!("reading {}", args.scenario.display()))?,
    )
    .context("the scenario is not valid")?;
    let mut extra_roots: Vec<CertificateDer<'static>> = Vec::new();
    if let Some(ca) = &args.trust_ca {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        for cert in rustls_pemfile::certs(&mut &pem[..]) {
            extra_roots.push(cert?);
        }
    }
    let connect = connect_arg(args.connect.as_deref(), &domain, "--connect")?;
    let browser_connect = connect_arg(args.connect_browser.as_deref(), &domain, "--connect-browser")?.or(connect);

    let identity = Arc::new(Identity::ephemeral(
        CompanyDomain::try_from(args.agent_domain.as_str())?,
        "Atlas (pap-conformance)",
        &SystemRng,
    )?);
    if let Some(listen) = args.serve_agent {
        let (cert, key) = (
            args.agent_cert.as_ref().context("--agent-cert")?,
            args.agent_key.as_ref().context("--agent-key")?,
        );
        let tcp = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let listener = TlsListener::new(tcp, &std::fs::read(cert)?, &std::fs::read(key)?)?;
        tokio::spawn(axum::serve(listener, documents_router(identity.clone())).into_future());
    }

    let client_config = ClientConfig {
        extra_roots: extra_roots.clone(),
        connect: connect.map(|a| (domain.to_string(), a)).into_iter().collect(),
    };
    let client = PapClient::new(identity, &client_config, Arc::new(SystemClock), Arc::new(SystemRng))?;
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for root in &extra_roots {
        roots.add(root.clone())?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    let mut http = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(addr) = connect {
        http = http.resolve(domain.as_str(), addr);
    }
    let http = http.build()?;

    let state = std::env::temp_dir().join(format!("pap-conformance-{}", std::process::id()));
    let mut browser = ChromiumConfig::new(state.clone());
    browser.browser_user = BrowserUserPolicy::shared();
    if let Some(addr) = browser_connect {
        let pin = pin_served_leaf(domain.as_str(), addr, roots).await?;
        browser.test_network = TestNetwork {
            map: [(domain.to_string(), addr)].into(),
            spki_pins: vec![pin],
        };
    }
    let company = client.discover(&domain).await.context("discovering the company")?;
    let approver = match args.approve {
        Approve::DevicePage => Approver::DevicePage {
            username: args.username,
            password: args.password,
        },
        Approve::Operator => Approver::Operator,
    };
    let operator = Some(
        args.operator
            .unwrap_or_else(|| format!("https://{domain}/_operator"))
            .trim_end_matches('/')
            .to_owned(),
    );
    let ctx = Context {
        client,
        company,
        scenario,
        approver,
        operator,
        http,
        browser,
        host: BrowserHost::new(),
    };

    let report = pap::run(&ctx, &args.cases).await;
    let _ = std::fs::remove_dir_all(&state);
    #[allow(clippy::print_stdout, reason = "the report is the command's output")]
    {
        print!("{}", report.text());
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json())?)?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report.junit("pap-conformance pap"))?;
    }
    Ok(report.all_passed())
}

#[cfg(test)]
mod tests {
    /// Every command a person can run shows an example of itself in its `--help`.
    #[test]
    fn every_subcommand_shows_an_example() {
        use clap::CommandFactory as _;
        let mut missing = Vec::new();
        let mut stack = vec![(String::new(), super::Cli::command())];
        while let Some((parent, command)) = stack.pop() {
            let path = format!("{parent} {}", command.get_name()).trim().to_owned();
            let subcommands: Vec<_> = command.get_subcommands().cloned().collect();
            if !subcommands.is_empty() {
                stack.extend(subcommands.into_iter().map(|c| (path.clone(), c)));
            } else if !command
                .get_after_help()
                .is_some_and(|help| help.to_string().starts_with("Example:") && help.to_string().contains(&path))
            {
                missing.push(path);
            }
        }
        assert!(missing.is_empty(), "no example in --help: {missing:?}");
    }
}
