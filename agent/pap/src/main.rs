//! `pap-agent`: a personal agent that holds PAP Sessions with companies and joins their
//! websites from its own Chromium.
//!
//! Run with `cargo run -p pap-agent -- --help`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use pap_agent::pairing::{Bearer, Devices};
use pap_agent::{ClientConfig, Company, Identity, PapClient, Wallet, documents_router, join, join_tab, new_pairwise_user, pin_served_leaf};
use pap_net::listener::TlsListener;
use pap_browser::chromium::{self, BrowserHost, ChromiumConfig, TestNetwork, click_and_land};
use pap_browser::consent;
use pap_browser::spec::{InstanceKey, InstanceState, Lifecycle, OperatorReset};
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_shared::{CompanyDomain, HttpsUrl, SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

#[derive(Parser)]
#[command(
    name = "pap-agent",
    version,
    about = "A personal agent for PAP draft 0.2 that joins company websites from its own Chromium"
)]
struct Cli {
    /// The agent's state directory (identity, company records, browser profiles); made 0700.
    /// Default: $XDG_STATE_HOME/pap-agent or ~/.local/state/pap-agent; as root
    /// /var/lib/pap-agent, which the browser's unprivileged user can reach.
    #[arg(long, global = true, env = "PAP_AGENT_STATE")]
    state_dir: Option<PathBuf>,
    /// Test only: connect NAME (port 443) to ADDR:PORT, for both HTTP and the browser.
    #[arg(long, global = true, value_name = "NAME=ADDR:PORT")]
    connect: Vec<String>,
    /// Test only: trust this CA for companies (the browser pins the leaf it checks against it).
    #[arg(long, global = true, value_name = "PEM")]
    trust_ca: Option<PathBuf>,
    /// Join from a dedicated Chromium already running with DevTools on this loopback address
    /// (its own --user-data-dir) instead of launching one; it is left running afterwards.
    #[arg(long, global = true, value_name = "ADDR:PORT")]
    attach: Option<SocketAddr>,
    /// Let the agent's browser load ORIGIN although the navigation rule (https: to public hosts
    /// only) refuses it: `http://127.0.0.1` (any port) or `https://10.0.0.5:8443` (that port),
    /// e.g. a local test server or the AIP-63 suite's pages; repeat for more.
    #[arg(long = "name-origin", global = true, value_name = "ORIGIN")]
    named_origins: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The agent's identity: its key, client metadata and JWKS.
    Identity {
        #[command(subcommand)]
        command: IdentityCommand,
    },
    /// Consent for the agent's browser (AIP-63 §4).
    Consent {
        #[command(subcommand)]
        command: ConsentCommand,
    },
    /// The agent's browsers (AIP-63 status surface and operator stop).
    Browser {
        #[command(subcommand)]
        command: BrowserCommand,
    },
    /// Starts an AIP-59 pairing: prints a one-time code that a device exchanges for its
    /// credential at the host (`POST /pair {"code": ...}` on `pap-agent host serve`).
    #[command(after_help = "Example:\n  pap-agent pair --name phone")]
    Pair {
        /// What to call the device (`devices list` shows it).
        #[arg(long, default_value = "device")]
        name: String,
        /// How long the code works, in seconds (at most 900).
        #[arg(long, value_name = "SECONDS", default_value_t = pap_agent::pairing::CODE_LIFETIME)]
        ttl: u64,
    },
    /// The paired devices (AIP-59): the only clients that reach the agent's browser.
    Devices {
        #[command(subcommand)]
        command: DevicesCommand,
    },
    /// Configures a local MCP client to spawn `pap-agent host stdio` as a freshly paired device
    /// (its credential in a 0600 file, never printed); run again to replace it, which unpairs
    /// the device it configured before.
    #[command(after_help = "Example:\n  pap-agent install-mcp --client cursor")]
    InstallMcp {
        /// The client: claude-code, claude-desktop, cursor or vscode.
        #[arg(long)]
        client: pap_agent::mcp::install::Client,
        /// Its MCP config file, when not where the client keeps it by default.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    #[command(flatten)]
    Pap(PapCommand),
}

/// What the agent does with companies: PAP Sessions and joins.
#[derive(Subcommand)]
enum PapCommand {
    /// Discovers a company and prints what it offers.
    #[command(after_help = "Example:\n  pap-agent discover shop.example")]
    Discover { domain: String },
    /// Starts a (signed-out) PAP Session with a company.
    #[command(after_help = "Example:\n  pap-agent session shop.example")]
    Session { domain: String },
    /// Signs the Session in with Device Sign-In: prints where the user approves, then waits.
    #[command(after_help = "Example:\n  pap-agent signin shop.example --scope \"orders:read orders:write\"")]
    Signin {
        domain: String,
        /// Scopes to ask for, space-separated.
        #[arg(long, default_value = "orders:read orders:write")]
        scope: String,
    },
    /// Calls the company's API to propose an operation; prints it.
    #[command(
        after_help = "Example:\n  pap-agent propose shop.example POST /api/orders/ord_7Hk2/exchanges --body '{}'"
    )]
    Propose {
        domain: String,
        method: String,
        path: String,
        /// The JSON body.
        #[arg(long, default_value = "{}")]
        body: String,
    },
    /// Reads an operation through the operations endpoint.
    #[command(after_help = "Example:\n  pap-agent operation shop.example op_A5PzkijL1aTCZ7UF9Hy8Vw")]
    Operation { domain: String, id: String },
    /// Joins the agent's own Chromium to the Session and opens RETURN_TO.
    #[command(after_help = "Example:\n  pap-agent join shop.example https://shop.example/ --screenshot shop.png")]
    Join {
        domain: String,
        return_to: String,
        /// Write a PNG of the landed page here.
        #[arg(long)]
        screenshot: Option<PathBuf>,
    },
    /// Joins, opens the operation's page and clicks its own confirm button in Chromium.
    #[command(
        after_help = "Example:\n  pap-agent confirm-on-page shop.example https://shop.example/operations/op_A5PzkijL1aTCZ7UF9Hy8Vw"
    )]
    ConfirmOnPage {
        domain: String,
        operation_url: String,
        /// Write a PNG of the page after confirming here.
        #[arg(long)]
        screenshot: Option<PathBuf>,
    },
    /// Revokes the Account Token: the company signs the Session out.
    #[command(after_help = "Example:\n  pap-agent revoke shop.example")]
    Revoke { domain: String },
    /// Serves the agent's browser to agent runtimes over MCP.
    #[command(after_help = "Example:\n  pap-agent host stdio")]
    Host {
        #[command(subcommand)]
        command: HostCommand,
    },
}

/// How the agent's browser is served over MCP.
#[derive(Subcommand)]
enum HostCommand {
    /// On stdin/stdout, for an MCP client that spawns its servers, as the paired device whose
    /// credential is in BEARER_FILE (`install-mcp` writes both); logs go to stderr.
    #[command(
        after_help = "Example:\n  pap-agent --state-dir /var/lib/pap-agent host stdio --bearer-file /var/lib/pap-agent/devices/cursor.bearer"
    )]
    Stdio {
        /// The device's credential (a file, 0600; never an argument, which `ps` shows).
        #[arg(long, value_name = "FILE", env = "PAP_AGENT_BEARER_FILE")]
        bearer_file: PathBuf,
    },
    /// Streamable HTTP at /mcp (and /health, /pair), for paired devices only. Binds loopback
    /// unless --allow-remote (then over TLS); refuses a request whose Host or Origin it does not
    /// expect.
    #[command(after_help = "Example:\n  pap-agent host serve --listen 127.0.0.1:7878")]
    Serve {
        /// Where to listen (port 0: any free port; the line `listening on URL` says which).
        #[arg(long, default_value = "127.0.0.1:7878")]
        listen: SocketAddr,
        /// Allow a non-loopback --listen address (over TLS only; pairing stays required).
        #[arg(long)]
        allow_remote: bool,
        /// Serve over TLS with this certificate chain (PEM); needs --tls-key.
        #[arg(long, value_name = "PEM", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM).
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// A further Host value to answer (NAME or NAME:PORT), e.g. the name a remote device
        /// uses; repeat for more.
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// An Origin allowed to call (a paired web client's); repeat for more.
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        allow_origins: Vec<String>,
    },
}

#[derive(Subcommand)]
enum DevicesCommand {
    /// Lists the paired devices (never a credential).
    #[command(after_help = "Example:\n  pap-agent devices list")]
    List,
    /// Unpairs a device, named by id or by name: its credential is refused from its next
    /// request, the grants scoped to it are revoked (C13), and its PAP Sessions are signed out
    /// at each company.
    #[command(after_help = "Example:\n  pap-agent devices revoke dev_3q2-AbCdEfGh\n  pap-agent devices revoke phone")]
    Revoke {
        /// The device's id (`dev_...`) or its name (one device must bear it).
        device: String,
    },
}

/// The browser instance an MCP host runs.
const MCP_INSTANCE: &str = "mcp";

#[derive(Subcommand)]
enum BrowserCommand {
    /// Lists this state directory's instances with failed launches (stopped, or crash-looping
    /// with the last failure), then its running browsers: instance, state (L1: starting, healthy
    /// or degraded, by probing its DevTools port), pid, launching agent (running or gone),
    /// profile. Starts, opens and ends nothing.
    #[command(after_help = "Example:\n  pap-agent browser status")]
    Status,
    /// Ends every browser of this state directory, whether or not the agent that launched it
    /// still runs (SIGTERM, 2 s, SIGKILL), and removes their profiles.
    #[command(after_help = "Example:\n  pap-agent browser stop")]
    Stop,
    /// The operator's reset of a crash-looping instance (L7): launches it once (a fresh
    /// Chromium), and on success stops it again; its failures are forgotten.
    #[command(after_help = "Example:\n  pap-agent browser reset e2e")]
    Reset { instance: String },
}

#[derive(Subcommand)]
enum ConsentCommand {
    /// Grants the agent's browser session material for named domains (the operator's channel:
    /// no agent tool can do this). Without --interactive, name the domains or ask for
    /// --full-profile; nothing defaults to all domains.
    #[command(after_help = "Example:\n  pap-agent consent grant --domain shop.example")]
    Grant {
        /// A domain to grant (with its subdomains); repeat for more.
        #[arg(long = "domain", value_name = "DOMAIN")]
        domains: Vec<String>,
        /// A storage-state file ({cookies, origins}) to import from. Without it (or
        /// --chromium-profile), the grant lets the browser sign in itself (the PAP join) and
        /// imports nothing.
        #[arg(long, value_name = "FILE")]
        source: Option<PathBuf>,
        /// A Chromium profile directory on Linux (e.g. ~/.config/chromium/Default) to import
        /// from: scanned by host only; only granted hosts are read and decrypted.
        #[arg(long, value_name = "DIR", conflicts_with = "source")]
        chromium_profile: Option<PathBuf>,
        /// Show per-domain counts from a scan that reads no values, then ask per domain.
        #[arg(long)]
        interactive: bool,
        /// Grant the WHOLE profile (every domain): named on purpose, never implied.
        #[arg(long, conflicts_with = "domains")]
        full_profile: bool,
        /// Scope the grant to this paired device.
        #[arg(long, value_name = "ID")]
        device: Option<String>,
        /// End the grant by itself after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        expires_in: Option<i64>,
    },
    /// Lists the grants in force (never values).
    #[command(after_help = "Example:\n  pap-agent consent list")]
    List,
    /// Re-reads a grant's domains (all, or some) from its own source.
    #[command(after_help = "Example:\n  pap-agent consent refresh GRANT_ID --domain shop.example")]
    Refresh {
        grant: String,
        #[arg(long = "domain", value_name = "DOMAIN")]
        domains: Vec<String>,
    },
    /// Revokes a grant, or some of its domains: deletes the stored material, and the cookies,
    /// storage and tabs of the state directory's running browsers; then records it.
    #[command(after_help = "Example:\n  pap-agent consent revoke GRANT_ID --domain shop.example")]
    Revoke {
        grant: String,
        #[arg(long = "domain", value_name = "DOMAIN")]
        domains: Vec<String>,
    },
    /// Acknowledges a remote sink (its id and who operates it) for a grant.
    #[command(
        after_help = "Example:\n  pap-agent consent sink-ack GRANT_ID PROVIDER_ID --operated-by \"Example Cloud\""
    )]
    SinkAck {
        grant: String,
        provider: String,
        #[arg(long = "operated-by", value_name = "NAME")]
        operated_by: String,
    },
    /// AIP-59 revoked a device's pairing: its grants end now.
    #[command(after_help = "Example:\n  pap-agent consent pairing-revoked DEVICE_ID")]
    PairingRevoked { device: String },
    /// The append-only consent ledger.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Checks every line (seq, prev hash, record shape) and the head anchor; reports the first
    /// broken line and exits 1 if there is one.
    #[command(after_help = "Example:\n  pap-agent consent ledger verify")]
    Verify,
}

#[derive(Subcommand)]
enum IdentityCommand {
    /// Creates the identity (or shows the existing one) for DOMAIN, where its documents live.
    #[command(after_help = "Example:\n  pap-agent identity init atlas.example --name Atlas")]
    Init {
        domain: String,
        #[arg(long, default_value = "Atlas")]
        name: String,
    },
    /// Serves /agent.json and /jwks.json over HTTPS.
    #[command(
        after_help = "Example:\n  pap-agent identity serve --listen 127.0.0.1:9443 --cert certs/cert.pem --key certs/key.pem"
    )]
    Serve {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        cert: PathBuf,
        #[arg(long)]
        key: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // chromiumoxide warns once per CDP message it cannot parse (harmless on this Chromium) and
    // errors when the browser closes its socket at stop; RUST_LOG brings them back.
    let base = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,chromiumoxide::handler=off".into());
    tracing_subscriber::fmt()
        .with_env_filter(chromium::log_filter(&base))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(cli))
}

struct Agent {
    state_dir: PathBuf,
    client: PapClient,
    sealing: SealingKey,
    test_network: Option<(HashMap<String, SocketAddr>, rustls::RootCertStore)>,
    attach: Option<SocketAddr>,
    /// Origins the operator lets the browser load beyond the navigation rule (`--name-origin`).
    named_origins: Vec<pap_browser::spec::NamedOrigin>,
}

/// `pap-agent browser status|stop`: what the process table shows of this state directory's
/// browsers, and the operator's stop. The per-instance supervisor state (crash-looping, and the
/// operator reset out of it) lives in one agent process today; see the README.
#[allow(clippy::print_stdout, reason = "the report is the command's output")]
async fn browser_command(state: &std::path::Path, command: &BrowserCommand) -> anyhow::Result<()> {
    match command {
        BrowserCommand::Status => {
            let browsers = chromium::browsers_of(&chromium::ProcTable, state)?;
            if browsers.is_empty() {
                println!("no browsers of {}", state.display());
            }
            let host = BrowserHost::persistent(state, lifecycle()?.policy())?;
            for (instance, health) in host.recorded() {
                let reason = health.reason.unwrap_or_default();
                println!("{instance}\t{}\t{reason}", health.state);
            }
            for b in browsers {
                let host = match (b.host, b.host_alive) {
                    (Some(pid), true) => format!("agent {pid} running"),
                    (Some(pid), false) => format!("agent {pid} gone (an orphan: the next start sweeps it)"),
                    (None, _) => "agent unknown".to_owned(),
                };
                let state = chromium::probe_profile(&b.user_data_dir, Duration::from_secs(5)).await;
                println!(
                    "{}\t{state}\tpid {}\t{host}\t{}",
                    b.instance,
                    b.pid,
                    b.user_data_dir.display()
                );
            }
            Ok(())
        }
        BrowserCommand::Stop => {
            let scope = chromium::SweepScope::StateDir {
                state_dir: state.to_owned(),
            };
            let ended = chromium::sweep(&chromium::ProcTable, &scope, Duration::from_secs(2)).await?;
            println!("ended {ended} process(es)");
            Ok(())
        }
        BrowserCommand::Reset { instance } => {
            let host = BrowserHost::persistent(state, lifecycle()?.policy())?;
            let now = host.health(instance).state;
            if now != InstanceState::CrashLooping {
                bail!("{instance} is {now}, not crash-looping: there is nothing to reset");
            }
            let started = Instant::now();
            let config = ChromiumConfig::new(state.to_owned()).with_lifecycle(&lifecycle()?);
            let reset = OperatorReset::new(&consent::Operator::from_operator_channel("cli"));
            host.reset(&config, instance, reset, &|_| {}).await?;
            let launched = started.elapsed().as_millis();
            host.stop(instance, Duration::from_secs(2)).await?;
            println!("{instance}: reset; Chromium launched in {launched} ms and was stopped; it may launch again");
            Ok(())
        }
    }
}

/// The lifecycle the agent's Chromium runs by: its shipped manifest's (AIP-63 §3).
fn lifecycle() -> anyhow::Result<Lifecycle> {
    let manifest = chromium::manifest().map_err(|diagnostics| {
        let all: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("the shipped Chromium manifest does not load: {}", all.join("; "))
    })?;
    Ok(manifest.browser.lifecycle)
}

fn state_dir(cli: &Cli) -> PathBuf {
    if let Some(dir) = &cli.state_dir {
        return dir.clone();
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    let home_default = base.unwrap_or_else(|| PathBuf::from(".")).join("pap-agent");
    let (dir, hint) = default_state_dir(nix::unistd::geteuid().is_root(), home_default);
    if let Some(hint) = hint {
        eprintln!("{hint}");
    }
    dir
}

/// Root's home is closed to the unprivileged user its Chromium runs as (review H4), so as root
/// the default is `/var/lib/pap-agent`. An identity at the home default (where earlier versions
/// kept it as root) is pointed out, never moved: starting afresh beside it would be silent.
fn default_state_dir(root: bool, home_default: PathBuf) -> (PathBuf, Option<String>) {
    if !root {
        return (home_default, None);
    }
    let system = PathBuf::from("/var/lib/pap-agent");
    let hint = (!system.join("identity").exists() && home_default.join("identity").exists()).then(|| {
        format!(
            "note: as root the state directory is now {} (the browser's unprivileged user cannot reach \
             your home); an earlier one is at {}: move it there, or pass --state-dir {}",
            system.display(),
            home_default.display(),
            home_default.display()
        )
    });
    (system, hint)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let state = state_dir(&cli);
    let network = cli.network();
    match cli.command {
        Command::Identity { command } => identity(&state, &command).await,
        Command::Consent { command } => consent_command(&state, &command).await,
        Command::Browser { command } => browser_command(&state, &command).await,
        Command::Pair { name, ttl } => pair(&state, &name, ttl),
        Command::Devices { command } => devices_command(&state, &network, &command).await,
        Command::InstallMcp { client, config } => {
            // The global options it runs with are the host's too (--connect and --trust-ca:
            // a test stage's routing reaches the spawned host as it reached this command).
            let mut global = Vec::new();
            for entry in &cli.connect {
                global.extend(["--connect".to_owned(), entry.clone()]);
            }
            if let Some(ca) = &cli.trust_ca {
                global.extend(["--trust-ca".to_owned(), std::path::absolute(ca)?.display().to_string()]);
            }
            // --name-origin is a test exemption of the navigation rule: it is never made
            // permanent in a client's configuration (review N17).
            if !cli.named_origins.is_empty() {
                eprintln!("note: --name-origin is not written into the client's configuration");
            }
            install_mcp(&state, &network, client, config, &global).await
        }
        Command::Pap(command) => {
            let mut agent = Agent::open(state, &cli.connect, cli.trust_ca.as_deref(), cli.attach)?;
            for origin in &cli.named_origins {
                agent.named_origins.push(pap_browser::spec::NamedOrigin::parse(origin)?);
            }
            agent.run(command).await
        }
    }
}

impl Agent {
    /// The agent of `state`, reaching companies as the test-only `--connect`/`--trust-ca` say.
    fn open(
        state: PathBuf,
        connect: &[String],
        trust_ca: Option<&std::path::Path>,
        attach: Option<SocketAddr>,
    ) -> anyhow::Result<Self> {
        let identity = Arc::new(Identity::load(&state)?);
        let connect = parse_connect(connect)?;
        let mut extra_roots: Vec<CertificateDer<'static>> = Vec::new();
        if let Some(ca) = trust_ca {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            for cert in rustls_pemfile::certs(&mut &pem[..]) {
                extra_roots.push(cert.with_context(|| format!("parsing {}", ca.display()))?);
            }
        }
        let test_network = (!connect.is_empty())
            .then(|| pap_net::tls::trust_roots(&extra_roots).map(|roots| (connect.clone(), roots)))
            .transpose()?;
        let config = ClientConfig { extra_roots, connect };
        let client = PapClient::new(identity, &config, Arc::new(SystemClock), Arc::new(SystemRng))?;
        let sealing = SealingKey::open(&state, &SystemRng)?;
        Ok(Self {
            state_dir: state,
            client,
            sealing,
            test_network,
            attach,
            named_origins: Vec::new(),
        })
    }

    async fn run(&self, command: PapCommand) -> anyhow::Result<()> {
        match command {
            PapCommand::Discover { domain } => {
                let company = self.client.discover(&parse_domain(&domain)?).await?;
                print_json(&serde_json::json!({
                    "domain": company.domain.as_str(), "name": company.name, "issuer": company.issuer,
                    "browser_session_endpoint": company.browser_session_endpoint.as_ref().map(HttpsUrl::as_str),
                    "operations_endpoint": company.operations_endpoint.as_ref().map(HttpsUrl::as_str),
                    "device_sign_in": company.device_authorization_endpoint.is_some(),
                }));
                Ok(())
            }
            PapCommand::Session { domain } => session(self, &domain).await,
            PapCommand::Signin { domain, scope } => signin(self, &domain, &scope).await,
            PapCommand::Propose {
                domain,
                method,
                path,
                body,
            } => {
                let (company, wallet) = self.company(&domain).await?;
                let session = wallet
                    .session
                    .as_ref()
                    .context("no Session: run `pap-agent session` first")?;
                let body: serde_json::Value = serde_json::from_str(&body).context("--body is not JSON")?;
                let operation = self.client.propose(&company, session, &method, &path, &body).await?;
                print_json(&serde_json::to_value(&operation)?);
                Ok(())
            }
            PapCommand::Operation { domain, id } => {
                let (company, wallet) = self.company(&domain).await?;
                let session = wallet
                    .session
                    .as_ref()
                    .context("no Session: run `pap-agent session` first")?;
                print_json(&serde_json::to_value(
                    self.client.read_operation(&company, session, &id).await?,
                )?);
                Ok(())
            }
            PapCommand::Join {
                domain,
                return_to,
                screenshot,
            } => browse(self, &domain, &return_to, false, screenshot).await,
            PapCommand::ConfirmOnPage {
                domain,
                operation_url,
                screenshot,
            } => browse(self, &domain, &operation_url, true, screenshot).await,
            PapCommand::Host {
                command: HostCommand::Stdio { bearer_file },
            } => self.host_stdio(&bearer_file).await,
            PapCommand::Host {
                command:
                    HostCommand::Serve {
                        listen,
                        allow_remote,
                        tls_cert,
                        tls_key,
                        allow_hosts,
                        allow_origins,
                    },
            } => {
                let tls = match (tls_cert, tls_key) {
                    (Some(cert), Some(key)) => Some((read_file(&cert)?, zeroize::Zeroizing::new(read_file(&key)?))),
                    _ => None,
                };
                let exposure = pap_agent::mcp::http::Exposure::check(
                    listen,
                    allow_remote,
                    tls.is_some(),
                    &allow_hosts,
                    &allow_origins,
                )?;
                self.host_serve(listen, exposure, tls).await
            }
            PapCommand::Revoke { domain } => {
                let (company, mut wallet) = self.company(&domain).await?;
                let session = wallet.session.as_mut().context("no Session")?;
                let token = session.account_token.take().context("the Session is not signed in")?;
                self.client.revoke(&company, &token).await?;
                session.signed_in = false;
                wallet.save(&self.sealing, &SystemRng)?;
                eprintln!("revoked: the company signed the Session out");
                Ok(())
            }
        }
    }

    /// How this agent launches (or attaches to) its Chromium: the manifest's lifecycle, the
    /// test-only routing of `--connect` with the one leaf each name serves pinned, `--attach`.
    async fn browser_config(&self) -> anyhow::Result<ChromiumConfig> {
        let mut config = ChromiumConfig::new(self.state_dir.clone()).with_lifecycle(&lifecycle()?);
        if let Some((map, roots)) = &self.test_network {
            let mut pins = Vec::new();
            for (name, addr) in map {
                pins.push(pin_served_leaf(name, *addr, roots.clone()).await?);
            }
            config.test_network = TestNetwork {
                map: map.clone(),
                spki_pins: pins,
            };
        }
        config.attach_to = self.attach;
        for origin in &self.named_origins {
            config.navigation.name(origin.clone());
        }
        Ok(config)
    }

    /// `pap-agent host stdio`: the agent's browser as an MCP server on stdin/stdout, for a client
    /// that spawns its servers. Its tools run as the paired device of `bearer_file`; its browser
    /// (instance `mcp`) starts with the first call that needs it and stops when the client goes.
    async fn host_stdio(&self, bearer_file: &std::path::Path) -> anyhow::Result<()> {
        use rmcp::ServiceExt as _;
        let devices = Devices::at(&self.state_dir);
        let bearer = Bearer::presented(&zeroize::Zeroizing::new(
            std::fs::read_to_string(bearer_file)
                .with_context(|| format!("reading the device credential {}", bearer_file.display()))?,
        ));
        let Some(device) = devices.authenticate(&bearer)? else {
            bail!(
                "{} holds no paired device's credential: pair it (pap-agent install-mcp, or pap-agent pair)",
                bearer_file.display()
            );
        };
        let (host, tools) = self.mcp_tools().await?;
        let _supervision = supervise(&host, &tools)?;
        let server =
            pap_agent::mcp::BrowserServer::stdio(tools, devices, bearer, device.id).with_pap(self.pap_tools()?);
        let served = server.serve(rmcp::transport::stdio()).await?;
        let ended = served.waiting().await;
        host.stop(MCP_INSTANCE, Duration::from_secs(2)).await?;
        ended?;
        Ok(())
    }

    /// `pap-agent host serve`: the agent's browser over streamable HTTP for paired devices,
    /// until SIGINT or SIGTERM; its browser stops with it.
    async fn host_serve(
        &self,
        listen: SocketAddr,
        exposure: pap_agent::mcp::http::Exposure,
        tls: Option<(Vec<u8>, zeroize::Zeroizing<Vec<u8>>)>,
    ) -> anyhow::Result<()> {
        use pap_agent::mcp::http;
        let (host, tools) = self.mcp_tools().await?;
        let _supervision = supervise(&host, &tools)?;
        let server = pap_agent::mcp::BrowserServer::per_request(tools).with_pap(self.pap_tools()?);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let bound = listener.local_addr()?;
        let guard = exposure.guard(bound.port());
        let limits = http::Limits::default();
        let app = http::router(server, Devices::at(&self.state_dir), guard, limits);
        // Readiness: this line, once the socket is bound.
        match tls {
            Some((cert, key)) => {
                let listener = TlsListener::new(listener, &cert, &key).context("the TLS certificate and key")?;
                eprintln!("listening on https://{bound}/mcp");
                http::serve(listener, app, limits, shutdown_signal()).await;
            }
            None => {
                eprintln!("listening on http://{bound}/mcp");
                http::serve(listener, app, limits, shutdown_signal()).await;
            }
        }
        host.stop(MCP_INSTANCE, Duration::from_secs(2)).await?;
        Ok(())
    }

    /// The PAP steps as tools, for an MCP host.
    fn pap_tools(&self) -> anyhow::Result<Arc<pap_agent::mcp::pap::PapTools>> {
        let sealing = SealingKey::open(&self.state_dir, &SystemRng)?;
        Ok(pap_agent::mcp::pap::PapTools::new(
            self.client.clone(),
            self.state_dir.clone(),
            sealing,
        ))
    }

    /// The tool host an MCP host serves: instance `mcp`, launched by the first call that needs
    /// it, after a sweep of what an earlier run left.
    async fn mcp_tools(&self) -> anyhow::Result<(BrowserHost, Arc<ToolHost>)> {
        let config = self.browser_config().await?;
        let host = BrowserHost::persistent(&self.state_dir, lifecycle()?.policy())?;
        host.sweep_previous_run(&self.state_dir, Duration::from_secs(2)).await?;
        let consent = Arc::new(consent::ConsentHost::open(
            &self.state_dir,
            Arc::new(SystemClock),
            Arc::new(SystemRng),
        )?);
        let manifest = chromium::manifest().map_err(|d| anyhow::anyhow!("the shipped manifest: {d:?}"))?;
        let instance = InstanceKey::try_from(MCP_INSTANCE)?;
        let tools = ToolHost::new(manifest, host.clone(), config, instance, consent);
        Ok((host, tools))
    }

    async fn company(&self, domain: &str) -> anyhow::Result<(Company, Wallet)> {
        let domain = parse_domain(domain)?;
        let company = self.client.discover(&domain).await?;
        let wallet = Wallet::load(&self.state_dir, &domain, &self.sealing)?
            .context("no record of this company: run `pap-agent session` first")?;
        Ok((company, wallet))
    }
}

async fn identity(state: &std::path::Path, command: &IdentityCommand) -> anyhow::Result<()> {
    match command {
        IdentityCommand::Init { domain, name } => {
            let identity = Identity::init(state, parse_domain(domain)?, name, &SystemRng)?;
            print_json(&identity.metadata());
            Ok(())
        }
        IdentityCommand::Serve { listen, cert, key } => {
            let identity = Identity::load(state)?;
            let cert_pem = std::fs::read(cert).with_context(|| {
                format!(
                    "cannot read the certificate {}: check the path (for a test on 127.0.0.1, `pap-company dev-certs certs {}` makes one)",
                    cert.display(),
                    identity.domain()
                )
            })?;
            let key = zeroize::Zeroizing::new(
                std::fs::read(key)
                    .with_context(|| format!("cannot read the private key {}: check the path", key.display()))?,
            );
            let tcp = tokio::net::TcpListener::bind(listen).await.with_context(|| {
                format!("cannot listen on {listen}: is another server using that port? choose another with --listen")
            })?;
            let tls = pap_net::tls::server_config_from_pem(&cert_pem, &key)
                .context("the certificate and key do not make a TLS configuration")?;
            let domain = identity.domain();
            eprintln!("serving {} on {listen}", identity.client_id());
            if listen.ip().is_loopback() || listen.ip().is_unspecified() {
                let port = listen.port();
                eprintln!(
                    "  from this machine: curl --connect-to {domain}:443:127.0.0.1:{port} --cacert CA.pem {}\n  a company on this machine reaches it with `pap-company serve --resolve {domain}=127.0.0.1:{port} --trust-ca CA.pem` (testing = true)",
                    identity.client_id()
                );
            }
            // Strangers (every company) fetch these: the bounded server (a connection cap, handshake,
            // header, idle and request deadlines; review N14), until Ctrl-C or SIGTERM.
            pap_net::serve::serve_tls(tcp, documents_router(&identity), tls, shutdown_signal()).await;
            Ok(())
        }
    }
}

async fn session(agent: &Agent, domain: &str) -> anyhow::Result<()> {
    let domain = parse_domain(domain)?;
    let company = agent.client.discover(&domain).await?;
    let mut wallet = match Wallet::load(&agent.state_dir, &domain, &agent.sealing)? {
        Some(wallet) => wallet,
        None => Wallet::new(
            &agent.state_dir,
            &domain,
            new_pairwise_user(&SystemRng),
            agent.client.new_dpop_key()?,
        )?,
    };
    let session = agent
        .client
        .start_session(&company, &wallet.user, wallet.dpop_key.clone())
        .await?;
    eprintln!(
        "Session {} started with {} (signed in: {})",
        session.session_id,
        printable(&company.name),
        session.signed_in
    );
    wallet.session = Some(session);
    wallet.save(&agent.sealing, &SystemRng)?;
    Ok(())
}

async fn signin(agent: &Agent, domain: &str, scope: &str) -> anyhow::Result<()> {
    let (company, mut wallet) = agent.company(domain).await?;
    let session = wallet
        .session
        .as_mut()
        .context("no Session: run `pap-agent session` first")?;
    let scopes: Vec<&str> = scope.split(' ').filter(|s| !s.is_empty()).collect();
    let device = agent.client.device_begin(&company, &scopes).await?;
    let url = device
        .verification_uri_complete
        .as_ref()
        .unwrap_or(&device.verification_uri);
    eprintln!(
        "to sign in, open {url} and approve the code {}",
        printable(&device.user_code)
    );
    agent.client.device_wait(&company, session, &device).await?;
    eprintln!("signed in (scopes: {})", printable(&session.scope));
    wallet.save(&agent.sealing, &SystemRng)?;
    Ok(())
}

/// Launches Chromium, joins the Session landing on `url`, optionally clicks the page's confirm
/// button, optionally saves a screenshot, stops Chromium.
async fn browse(
    agent: &Agent,
    domain: &str,
    url: &str,
    confirm: bool,
    screenshot: Option<PathBuf>,
) -> anyhow::Result<()> {
    let (company, wallet) = agent.company(domain).await?;
    let session = wallet
        .session
        .as_ref()
        .context("no Session: run `pap-agent session` first")?;
    let return_to = HttpsUrl::parse(url).context("the page is not an HTTPS URL")?;
    let config = agent.browser_config().await?;
    let host = BrowserHost::persistent(&agent.state_dir, lifecycle()?.policy())?;
    // L8: before the first launch, end what a killed run of this agent left (never the browsers
    // of another agent process running now).
    let swept = host
        .sweep_previous_run(&agent.state_dir, Duration::from_secs(2))
        .await?;
    if swept > 0 {
        eprintln!("browser: ended {swept} process(es) left by a previous run");
    }
    let started = Instant::now();
    let browser = host
        .launch(&config, "cli", &|step| {
            eprintln!("browser: {step} ({} ms)", started.elapsed().as_millis())
        })
        .await?
        .browser;
    let result = async {
        // The join needs a grant for the company's domain (`pap-agent consent grant`), and the
        // granted material goes in first.
        let consent = consent::ConsentHost::open(&agent.state_dir, Arc::new(SystemClock), Arc::new(SystemRng))?;
        let caller = consent::Caller::local_agent();
        let permit = consent.permit_join(&caller, company.domain.as_str())?;
        if browser.was_already_running() {
            // An operator-run Chromium (--attach) takes no granted material (review F1): only the
            // join's own cookie, which the company sets.
            eprintln!("browser: attached; no granted material goes into a browser the agent did not start");
        }
        // A context of its own, holding the company's grant only (review M5).
        let page = join_tab(&browser, &consent, &caller, company.domain.as_str()).await?;
        let outcome = join(
            &agent.client,
            &company,
            session,
            &return_to,
            &page,
            &permit,
            Duration::from_secs(20),
        )
        .await?;
        eprintln!(
            "joined: {} answered {} ({} ms)",
            outcome.landed,
            outcome.status,
            started.elapsed().as_millis()
        );
        let mut report = serde_json::json!({
            "endpoint": outcome.endpoint.as_str(), "landed": outcome.landed.as_str(),
            "status": outcome.status, "assertion_expires_at": outcome.expires_at.as_secs(),
        });
        if confirm {
            let status = click_and_land(&page, "button[value=confirm]", Duration::from_secs(20)).await?;
            let state = page
                .evaluate("document.querySelector('[data-state]')?.getAttribute('data-state')")
                .await?
                .into_value::<Option<String>>()
                .unwrap_or_default();
            report["after_confirm"] = serde_json::json!({"status": status, "state": state});
        }
        if let Some(path) = &screenshot {
            let png = page
                .screenshot(chromiumoxide::page::ScreenshotParams::builder().build())
                .await?;
            std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))?;
            report["screenshot"] = serde_json::json!(path.display().to_string());
        }
        anyhow::Ok(report)
    }
    .await;
    drop(browser);
    host.stop("cli", Duration::from_secs(2)).await?;
    print_json(&result?);
    Ok(())
}

/// `pap-agent consent ...`: the operator's channel (C7).
async fn consent_command(state: &std::path::Path, command: &ConsentCommand) -> anyhow::Result<()> {
    use pap_browser::chromium::LiveProfiles;
    use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator, ScopeRequest, SourceSpec};
    // The ledger is checked as it stands: nothing is opened (or made) to do it.
    let open = || ConsentHost::open(state, Arc::new(SystemClock), Arc::new(SystemRng));
    let operator = Operator::from_operator_channel("cli");
    let live = LiveProfiles::new(state);
    let report = match command {
        ConsentCommand::Ledger {
            command: LedgerCommand::Verify,
        } => {
            let ledger = consent::Ledger::open(state)?;
            return match ledger.verify() {
                Ok(summary) => {
                    eprintln!("{}: {} record(s), intact", ledger.path().display(), summary.records);
                    Ok(())
                }
                Err(broken) => bail!("{}: {broken}", ledger.path().display()),
            };
        }
        ConsentCommand::Grant {
            domains,
            source,
            chromium_profile,
            interactive,
            full_profile,
            device,
            expires_in,
        } => {
            let host = open()?;
            let source = match (source, chromium_profile) {
                (Some(path), _) => SourceSpec::StorageState(path.clone()),
                (None, Some(dir)) => SourceSpec::ChromiumProfile(dir.clone()),
                (None, None) => SourceSpec::NativeLogin("cli".into()),
            };
            let scope = if *full_profile {
                eprintln!("{}", consent::FULL_PROFILE_WARNING);
                ScopeRequest::FullProfile
            } else if *interactive && domains.is_empty() {
                ScopeRequest::Domains(ask_per_domain(&host.scan(&source)?)?)
            } else {
                ScopeRequest::Domains(domains.clone())
            };
            let grant = host.grant(
                &operator,
                GrantRequest {
                    source,
                    scope,
                    interactive: *interactive,
                    device_id: device.clone(),
                    expires_at: expires_in.map(|s| pap_shared::Clock::now(&SystemClock).plus(s)),
                },
            )?;
            serde_json::to_value(&grant)?
        }
        ConsentCommand::List => {
            let host = open()?;
            // Grants past their expiresAt are revoked (C8) before the list is shown.
            host.expire(&live).await?;
            serde_json::json!({ "grants": host.list(&Caller::Operator(operator))? })
        }
        ConsentCommand::Refresh { grant, domains } => {
            let host = open()?;
            let domains = (!domains.is_empty()).then_some(domains.as_slice());
            let (refreshed, injection) = host.refresh(&Caller::Operator(operator), grant, domains, None)?;
            // The fresh material goes into the state directory's running browsers too.
            let injected = consent::LiveInstances::inject(&live, &injection)
                .await
                .map_err(|e| anyhow::anyhow!("the refresh is recorded, but a running browser did not take it: {e}"))?;
            serde_json::json!({ "grant": refreshed.grant, "injected": injected })
        }
        ConsentCommand::Revoke { grant, domains } => {
            let host = open()?;
            let domains = (!domains.is_empty()).then_some(domains.as_slice());
            let revoked = host.revoke(&Caller::Operator(operator), grant, domains, &live).await?;
            serde_json::json!({
                "grant": revoked.grant, "derived": revoked.derived,
                "cookiesDeleted": revoked.forgotten.cookies, "tabsClosed": revoked.forgotten.tabs,
            })
        }
        ConsentCommand::SinkAck {
            grant,
            provider,
            operated_by,
        } => {
            let host = open()?;
            eprintln!("acknowledging remote sink {provider}, operated by {operated_by}, for grant {grant}");
            serde_json::to_value(host.acknowledge_sink(&operator, grant, provider, operated_by)?)?
        }
        ConsentCommand::PairingRevoked { device } => {
            let host = open()?;
            let revoked = host.revoke_pairing(&operator, device, &live).await?;
            serde_json::json!({ "revoked": revoked.iter().map(|r| r.grant.id.clone()).collect::<Vec<_>>() })
        }
    };
    print_json(&report);
    Ok(())
}

/// `pap-agent pair`: a one-time code, on stdout alone (how to use it on stderr).
#[allow(clippy::print_stdout, reason = "the command's output")]
fn pair(state: &std::path::Path, name: &str, ttl: u64) -> anyhow::Result<()> {
    pap_browser::store::private_dir(state)?;
    let code = Devices::at(state).start_pairing(name, ttl, &SystemClock, &SystemRng)?;
    let left = code.expires_at.since(pap_shared::Clock::now(&SystemClock));
    eprintln!(
        "pairing code for {name:?}, valid once for {left} s: the device sends it to the host \
         (POST /pair {{\"code\": \"...\"}} on `pap-agent host serve`) and receives its credential"
    );
    println!("{}", code.expose());
    Ok(())
}

/// A long-running host's supervision of its browser: the health loop probing it every
/// `lifecycle.health.intervalMs` (L1, L4), and the recovery that relaunches it when it exits
/// on its own. Both end when the returned handles drop.
fn supervise(
    host: &BrowserHost,
    tools: &Arc<ToolHost>,
) -> anyhow::Result<(pap_browser::chromium::HealthLoop, pap_browser::tools::Recovery)> {
    let interval = Duration::from_millis(lifecycle()?.health.interval_ms);
    Ok((host.start_health_loop(interval), tools.start_recovery()))
}

/// `pap-agent devices ...`.
async fn devices_command(state: &std::path::Path, network: &Network, command: &DevicesCommand) -> anyhow::Result<()> {
    let devices = Devices::at(state);
    match command {
        DevicesCommand::List => print_json(&serde_json::json!({ "devices": devices.list()? })),
        DevicesCommand::Revoke { device } => {
            let id = devices.resolve(device)?;
            print_json(&unpair(state, network, &id).await?);
        }
    }
    Ok(())
}

/// The test-only network options (`--connect`, `--trust-ca`) a command reaches companies with.
#[derive(Clone, Debug, Default)]
struct Network {
    connect: Vec<String>,
    trust_ca: Option<PathBuf>,
}

impl Cli {
    fn network(&self) -> Network {
        Network {
            connect: self.connect.clone(),
            trust_ca: self.trust_ca.clone(),
        }
    }
}

/// Unpairs the device `id` everywhere it reached: its credential refused from its next
/// request; its grants revoked under C8 with what they put in the browsers (C13); its PAP
/// Sessions signed out at each company and their records removed (review N5). What could not
/// be signed out is reported (its record kept, so a later run can try again).
async fn unpair(state: &std::path::Path, network: &Network, id: &str) -> anyhow::Result<serde_json::Value> {
    if !Devices::at(state).revoke(id)? {
        bail!("no paired device {id} (see `pap-agent devices list`)");
    }
    finish_unpairing(state, network, id).await
}

/// [`unpair`] for a device already out of the devices file (one `install-mcp` replaced).
async fn finish_unpairing(state: &std::path::Path, network: &Network, id: &str) -> anyhow::Result<serde_json::Value> {
    let consent = consent::ConsentHost::open(state, Arc::new(SystemClock), Arc::new(SystemRng))?;
    let operator = consent::Operator::from_operator_channel("cli");
    let live = pap_browser::chromium::LiveProfiles::new(state);
    let revoked = consent.revoke_pairing(&operator, id, &live).await?;
    let mut signed_out = Vec::new();
    let mut failed = Vec::new();
    let holds = pap_agent::Wallet::held_by_device(state, id).is_ok_and(|held| !held.is_empty());
    if holds {
        let agent = Agent::open(state.to_path_buf(), &network.connect, network.trust_ca.as_deref(), None)?;
        let held = pap_agent::Wallet::held_by_device(state, id)?;
        failed = pap_agent::mcp::pap::sign_out_device(&agent.client, state, &agent.sealing, id).await?;
        signed_out = held
            .iter()
            .map(|d| d.as_str().to_owned())
            .filter(|d| !failed.iter().any(|(f, _)| f == d))
            .collect();
    }
    if !failed.is_empty() {
        eprintln!("some of the device's Sessions could not be signed out; their records are kept:");
        for (domain, why) in &failed {
            eprintln!("  {domain}: {why}");
        }
    }
    Ok(serde_json::json!({
        "unpaired": id,
        "grantsRevoked": revoked.iter().map(|r| r.grant.id.clone()).collect::<Vec<_>>(),
        "sessionsSignedOut": signed_out,
        "sessionsNotSignedOut": failed.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(),
    }))
}

/// `pap-agent install-mcp`: a fresh device for the client, its credential in
/// `STATE/devices/CLIENT.bearer` (0600), and the client's config pointing at `host stdio`.
async fn install_mcp(
    state: &std::path::Path,
    network: &Network,
    client: pap_agent::mcp::install::Client,
    config: Option<PathBuf>,
    global: &[String],
) -> anyhow::Result<()> {
    let config = match config {
        Some(path) => path,
        None => client.default_config()?,
    };
    pap_browser::store::private_dir(state)?;
    let program = std::env::current_exe().context("where this pap-agent is")?;
    let installed = pap_agent::mcp::install::install(
        &Devices::at(state),
        state,
        client,
        &config,
        &program,
        global,
        &SystemClock,
        &SystemRng,
    )?;
    eprintln!(
        "configured {} in {} as device {}{}",
        client.name(),
        config.display(),
        installed.device.id,
        installed
            .replaced
            .as_ref()
            .map(|old| format!(" (device {old}, configured before, is unpaired)"))
            .unwrap_or_default()
    );
    // The device configured before is unpaired as `devices revoke` would (C13: its grants too).
    if let Some(old) = &installed.replaced {
        finish_unpairing(state, network, old).await?;
    }
    if !state.join("identity").exists() {
        eprintln!(
            "note: {} has no agent identity yet; run `pap-agent identity init DOMAIN` before the client starts the host",
            state.display()
        );
    }
    Ok(())
}

/// Completes at SIGINT or SIGTERM (at SIGINT only where SIGTERM cannot be watched).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// C5: the scan's per-domain counts first (no value read yet), then a question per domain; only
/// the domains answered `y` are granted (and only then are values read).
fn ask_per_domain(counts: &std::collections::BTreeMap<String, u64>) -> anyhow::Result<Vec<String>> {
    use std::io::BufRead as _;
    if counts.is_empty() {
        bail!("the source holds no cookies or storage");
    }
    eprintln!("the source holds (a presence scan: no value has been read):");
    for (host, count) in counts {
        eprintln!("  {host}: {count} cookie(s)");
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut chosen = Vec::new();
    for host in counts.keys() {
        eprint!("grant {host}? [y/N] ");
        let answer = lines.next().transpose()?.unwrap_or_default();
        if answer.trim().eq_ignore_ascii_case("y") || answer.trim().eq_ignore_ascii_case("yes") {
            chosen.push(host.clone());
        }
    }
    Ok(chosen)
}

fn read_file(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn parse_domain(domain: &str) -> anyhow::Result<CompanyDomain> {
    CompanyDomain::try_from(domain).with_context(|| format!("{domain:?} is not a company domain"))
}

fn parse_connect(entries: &[String]) -> anyhow::Result<HashMap<String, SocketAddr>> {
    entries
        .iter()
        .map(|entry| {
            let (name, addr) = entry
                .split_once('=')
                .with_context(|| format!("--connect {entry}: expected NAME=ADDR:PORT"))?;
            if name.is_empty() {
                bail!("--connect {entry}: the name is empty");
            }
            Ok((
                name.to_ascii_lowercase(),
                addr.parse()
                    .with_context(|| format!("--connect {entry}: bad address"))?,
            ))
        })
        .collect()
}

/// `text` from a company, safe for a terminal: every control character (an ANSI or OSC escape
/// that would rewrite what the operator sees, security review L8) shown as U+FFFD.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { char::REPLACEMENT_CHARACTER } else { c })
        .collect()
}

#[allow(clippy::print_stdout, reason = "the command's output")]
fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    #[test]
    fn as_root_the_state_moves_to_var_lib_and_an_earlier_one_is_pointed_out() {
        let home = std::env::temp_dir().join(format!("pap-state-default-{}", std::process::id()));
        let earlier = home.join("pap-agent");
        let _ = std::fs::remove_dir_all(&home);
        assert_eq!(
            super::default_state_dir(false, earlier.clone()),
            (earlier.clone(), None)
        );
        let (dir, hint) = super::default_state_dir(true, earlier.clone());
        assert_eq!(dir, std::path::PathBuf::from("/var/lib/pap-agent"));
        assert!(hint.is_none(), "no earlier identity, nothing to say");
        std::fs::create_dir_all(earlier.join("identity")).unwrap();
        let (_, hint) = super::default_state_dir(true, earlier.clone());
        if !dir.join("identity").exists() {
            let hint = hint.unwrap();
            assert!(hint.contains(&format!("--state-dir {}", earlier.display())), "{hint}");
        }
        let _ = std::fs::remove_dir_all(&home);
    }

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

    #[test]
    fn a_companys_text_reaches_the_terminal_without_escapes() {
        // An OSC title change and a cursor move that would overwrite the line above.
        let hostile = "Shop\u{1b}]0;owned\u{7}\u{1b}[1A\rcode: WXYZ-1234";
        let shown = super::printable(hostile);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.starts_with("Shop") && shown.ends_with("WXYZ-1234"));
    }
}
