//! `pap-company`: the reference company, a small shop speaking PAP draft 0.2 whose website
//! follows the PAP Session through the browser-session bridge.
//!
//! Run with `cargo run -p pap-shop --bin pap-company -- serve --config company/shop/shop.example.toml`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use pap_company::resolver::{HttpClientResolver, ResolverConfig};
use pap_net::serve::{ServeLimits, serve_tls_with};
use pap_net::tls::ReloadableCert;
use pap_shared::{SystemClock, SystemRng};
use pap_shop::{CompanyConfig, CompanyStores, ReferenceCompany};

#[derive(Parser)]
#[command(
    name = "pap-company",
    version,
    about = "The PAP reference company (draft 0.2) with the browser-session bridge"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serves the company over HTTPS (and the operator API, when asked, on loopback HTTP).
    #[command(
        after_help = "Example:\n  pap-company serve --config company/shop/shop.example.toml --listen 127.0.0.1:8443 \\\n      --cert certs/cert.pem --key certs/key.pem"
    )]
    Serve(Box<Serve>),
    /// Reads a password from standard input and prints its Argon2 hash for a config file.
    #[command(after_help = "Example:\n  echo 'correct horse battery staple' | pap-company hash-password")]
    HashPassword,
    /// Writes a throwaway CA and one leaf for NAMES (valid one day) to DIR: for tests and demos
    /// on 127.0.0.1 only.
    #[command(after_help = "Example:\n  pap-company dev-certs certs shop.example atlas.example")]
    DevCerts {
        /// Where to write ca.pem, cert.pem and key.pem.
        dir: PathBuf,
        /// The names the leaf covers, e.g. shop.example atlas.example.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

#[derive(clap::Args)]
struct Serve {
    /// The configuration file (TOML); see company/shop/shop.example.toml.
    #[arg(long)]
    config: PathBuf,
    /// Where to listen for HTTPS, e.g. 127.0.0.1:8443.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// PEM certificate chain covering the company's domain.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// PEM private key of that certificate.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Where to serve the operator API (plain HTTP; loopback addresses only).
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Where to write the operator API's credential (mode 0600, replaced at each start); needed
    /// with --admin-listen. Callers send it as a Bearer token or a Basic password.
    #[arg(long)]
    admin_credential_file: Option<PathBuf>,
    /// Where the company keeps what it knows: `redis://HOST:PORT/DB` (or `rediss://` for TLS)
    /// for replicas that share it (each key under the company's domain as prefix), or a Redis
    /// Cluster by some of its nodes, `redis-cluster://HOST:PORT[,HOST:PORT...]` (or
    /// `rediss-cluster://`); the default keeps it in this process. Redis (every primary) must
    /// run with `maxmemory-policy noeviction`.
    #[arg(long, value_name = "redis://HOST:PORT/DB")]
    store: Option<String>,
    /// A file whose first line is Redis's password; without it, the environment's
    /// PAP_COMPANY_STORE_PASSWORD, if set. Not in --store's URL: every local user can read a
    /// command line.
    #[arg(long, value_name = "FILE")]
    store_password_file: Option<PathBuf>,
    /// PEM certificates of the CA that signed Redis's certificate, for a `rediss://` store
    /// with a private CA; the system's roots otherwise.
    #[arg(long, value_name = "FILE")]
    store_ca: Option<PathBuf>,
    /// How many Redis replicas must hold each write before it counts (`WAIT`, 500 ms): a
    /// replay mark or a confirm only the primary held is lost with it when a replica takes its
    /// place. 0 (the default) takes the primary's word: one round trip per join; 1 or more adds
    /// a round trip per write, and a write no replica acknowledged answers 503.
    #[arg(long, value_name = "REPLICAS", default_value_t = 0)]
    store_wait_replicas: u32,
    /// How many live replay marks (assertions' and proofs' `jti`s, kept until they expire) the
    /// clients of one registrable domain may hold once the shares bind (--replay-pressure), in
    /// memory or in Redis: past it that domain's joins and token requests are refused (429)
    /// and no one else's are.
    #[arg(long, value_name = "MARKS", default_value_t = pap_shop::limits::REPLAY_SHARE, value_parser = clap::value_parser!(u64).range(1..))]
    replay_share: u64,
    /// How many live replay marks one client address (an IPv6 address by its /64; behind
    /// --trusted-proxy, the address it forwards) may make through this process, whatever the
    /// domains it signs for, once the shares bind: past it that address's joins and token
    /// requests are refused (429). Counted per process: N replicas let an address hold N times
    /// as many.
    #[arg(long, value_name = "MARKS", default_value_t = pap_shop::limits::REPLAY_SHARE, value_parser = clap::value_parser!(u64).range(1..))]
    replay_share_per_address: u64,
    /// From how many live replay marks made through this process the shares above bind (0:
    /// always). Below it a domain or an address takes what others leave, so one popular agent
    /// is not capped while no one else needs the room; above it each keeps its share. The
    /// default is half the in-memory guard.
    #[arg(long, value_name = "MARKS", default_value_t = pap_shop::limits::REPLAY_PRESSURE, value_parser = clap::value_parser!(u64).range(0..=pap_shop::limits::REPLAY_CAPACITY))]
    replay_pressure: u64,
    /// Longest an agent's client metadata and JWKS are cached, in seconds, whatever their
    /// `max-age` (60 to 86400): how long a key the agent removed keeps verifying here.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(60..=86_400))]
    jwks_max_age: u64,
    /// A load balancer in front of the company, trusted for `X-Forwarded-For` (repeatable;
    /// added to the configuration's `trusted_proxies`): the `/device` throttle then counts the
    /// address it forwards, not its own.
    #[arg(long, value_name = "ADDR")]
    trusted_proxy: Vec<std::net::IpAddr>,
    /// Test only (the config must set `testing = true`): an extra trusted root for outbound
    /// fetches of agents' documents.
    #[arg(long)]
    trust_ca: Option<PathBuf>,
    /// Test only (the config must set `testing = true`): connect NAME to ADDR:PORT for outbound
    /// fetches, like curl's --resolve; repeatable. Such names may resolve to loopback.
    #[arg(long, value_name = "NAME=ADDR:PORT")]
    resolve: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::HashPassword => hash_password(),
        Command::DevCerts { dir, names } => {
            let certs = pap_net::dev_certs::write_dev_certs(&dir, &names).context("writing the certificates")?;
            eprintln!(
                "wrote {}, {} and {}",
                certs.ca.display(),
                certs.cert.display(),
                certs.key.display()
            );
            Ok(())
        }
        Command::Serve(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::io::stderr)
                .init();
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(serve(*args))
        }
    }
}

fn hash_password() -> anyhow::Result<()> {
    use argon2::PasswordHasher as _;
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .context("reading the password from standard input")?;
    let password = password.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        bail!("the password is empty");
    }
    let salt = argon2::password_hash::SaltString::generate(&mut rand_core_adapter::OsRng);
    let hash = argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing failed: {e}"))?;
    #[allow(clippy::print_stdout, reason = "the command's output")]
    {
        println!("{hash}");
    }
    Ok(())
}

/// argon2's salt generator takes a `rand_core` 0.6 RNG; the OS RNG is one.
mod rand_core_adapter {
    pub(crate) use argon2::password_hash::rand_core::OsRng;
}

async fn serve(args: Serve) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config).with_context(|| {
        format!(
            "cannot read the configuration {}: give --config an existing file (company/shop/shop.example.toml documents every setting)",
            args.config.display()
        )
    })?;
    let mut config = CompanyConfig::parse(&text).with_context(|| format!("loading {}", args.config.display()))?;
    config.trusted_proxies.extend(args.trusted_proxy.iter().copied());
    if !config.testing && (args.trust_ca.is_some() || !args.resolve.is_empty()) {
        bail!("--trust-ca and --resolve are for tests only; the configuration does not set testing = true");
    }
    let listen = args
        .listen
        .or(config.listen)
        .context("no listen address (--listen or `listen` in the config)")?;
    let cert = args
        .cert
        .clone()
        .or(config.cert.clone())
        .context("no certificate (--cert or `cert`)")?;
    let key = args
        .key
        .clone()
        .or(config.key.clone())
        .context("no private key (--key or `key`)")?;
    let admin = args.admin_listen.or(config.admin_listen);
    if let Some(admin) = admin.filter(|a| !a.ip().is_loopback()) {
        bail!("the operator API listens on loopback addresses only, not {admin}");
    }

    let mut resolver = ResolverConfig {
        max_cache_lifetime: std::time::Duration::from_secs(args.jwks_max_age),
        ..ResolverConfig::default()
    };
    if let Some(ca) = &args.trust_ca {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        for cert in rustls_pemfile::certs(&mut &pem[..]) {
            resolver
                .extra_roots
                .push(cert.with_context(|| format!("parsing {}", ca.display()))?);
        }
    }
    resolver.overrides = parse_resolve(&args.resolve)?;
    let clock = Arc::new(SystemClock);
    let clients = Arc::new(HttpClientResolver::new(resolver, clock.clone()).context("building the HTTPS client")?);
    pap_shop::install_metrics().context("installing the metrics recorder")?;
    let stores = match &args.store {
        None => CompanyStores::in_memory_with_replay_share(clock.clone(), args.replay_share, args.replay_pressure),
        Some(url) => redis_stores(url, &config.domain.to_string(), &args, clock.clone()).await?,
    }
    .with_address_share(args.replay_share_per_address);
    let company = ReferenceCompany::with_stores(config, clock, Arc::new(SystemRng), clients, stores);
    let _maintenance = company.start_maintenance(MAINTENANCE_EVERY);
    let certificate = ReloadableCert::load(&cert, &key).with_context(|| {
        format!(
            "cannot load the TLS certificate {} and key {}: check both paths, or make a throwaway pair with `pap-company dev-certs certs {}`",
            cert.display(),
            key.display(),
            company.config().domain
        )
    })?;
    let tls = certificate.server_config().context("building the TLS configuration")?;
    certificate.reload_on_hangup();

    match pap_net::serve::raise_open_file_limit() {
        Ok(files) => tracing::info!(files, "open-file limit"),
        Err(error) => tracing::warn!(%error, "could not raise the open-file limit"),
    }
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| {
        format!("cannot listen on {listen}: is another server using that port? choose another with --listen")
    })?;
    let domain = company.config().domain.clone();
    tracing::info!(%listen, public = %format!("https://{domain}"), "serving the company over HTTPS");
    eprintln!("{}", how_to_reach(&domain.to_string(), listen, &cert));
    // Behind load balancers every connection comes from theirs: they cap their clients, not us.
    let limits = if company.config().trusted_proxies.is_empty() {
        ServeLimits::default()
    } else {
        ServeLimits {
            max_connections_per_address: usize::MAX,
            ..ServeLimits::default()
        }
    };
    // SIGTERM or Ctrl-C: stop accepting, answer the requests in flight (10 s at most), then end.
    let public = serve_tls_with(listener, company.router(), tls, limits, shutdown_signal());
    match admin {
        Some(admin) => {
            let credential_file = args
                .admin_credential_file
                .as_deref()
                .context("--admin-listen needs --admin-credential-file: where to write the operator's credential")?;
            write_private(credential_file, company.operator_credential().secret())
                .with_context(|| format!("writing {}", credential_file.display()))?;
            let admin_listener = tokio::net::TcpListener::bind(admin)
                .await
                .with_context(|| format!("binding {admin}"))?;
            tracing::info!(%admin, "serving the operator API over loopback HTTP");
            let operator = axum::serve(admin_listener, company.operator_router());
            tokio::select! {
                () = public => {}
                result = operator => result.context("operator API")?,
            }
        }
        None => public.await,
    }
    tracing::info!("stopped");
    Ok(())
}

/// The environment variable that may hold Redis's password.
const STORE_PASSWORD_ENV: &str = "PAP_COMPANY_STORE_PASSWORD";

/// The company's stores in Redis at `url`, its keys under `prefix`, with the password and CA
/// that `args` name.
#[cfg(feature = "redis")]
async fn redis_stores(url: &str, prefix: &str, args: &Serve, clock: Arc<SystemClock>) -> anyhow::Result<CompanyStores> {
    use zeroize::Zeroizing;
    if url::Url::parse(url).is_ok_and(|u| u.password().is_some()) {
        tracing::warn!(
            "the --store URL holds a password, which every local user can read on the command line: use --store-password-file or {STORE_PASSWORD_ENV}"
        );
    }
    let password = match &args.store_password_file {
        Some(file) => {
            let text = Zeroizing::new(
                std::fs::read_to_string(file)
                    .with_context(|| format!("reading --store-password-file {}", file.display()))?,
            );
            Some(Zeroizing::new(text.lines().next().unwrap_or_default().to_owned()))
        }
        None => std::env::var(STORE_PASSWORD_ENV).ok().map(Zeroizing::new),
    };
    let ca_pem = match &args.store_ca {
        Some(file) => Some(std::fs::read(file).with_context(|| format!("reading --store-ca {}", file.display()))?),
        None => None,
    };
    let options = pap_company::stores::RedisOptions {
        password,
        ca_pem,
        clock,
        replay_share: args.replay_share,
        replay_pressure: args.replay_pressure,
        records_share: pap_company::limits::RECORDS_SHARE,
        wait_replicas: args.store_wait_replicas,
    };
    let store = pap_company::stores::RedisStore::connect_with(url, prefix, options)
        .await
        .context("connecting to the store (--store)")?;
    tracing::info!(
        prefix,
        "keeping Sessions, tokens, operations, replay marks and cookies in Redis"
    );
    CompanyStores::redis(&store, &SystemRng, &SystemClock)
        .await
        .context("reading the replicas' shared secrets from the store")
}

#[cfg(not(feature = "redis"))]
async fn redis_stores(
    _url: &str,
    _prefix: &str,
    _args: &Serve,
    _clock: Arc<SystemClock>,
) -> anyhow::Result<CompanyStores> {
    bail!("--store needs the `redis` feature; this pap-company was built without it")
}

/// How often expired records are swept from every store.
const MAINTENANCE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// How a person reaches the company from a browser or curl: its public URL and, when it
/// listens on a loopback address, the exact `curl --connect-to` line (the name must reach this
/// address; certificates from `dev-certs` need their CA, written beside them).
fn how_to_reach(domain: &str, listen: SocketAddr, cert: &std::path::Path) -> String {
    let mut text = format!("serving https://{domain} on {listen}");
    if listen.ip().is_loopback() || listen.ip().is_unspecified() {
        let ca = cert.with_file_name("ca.pem");
        let cacert = if ca.exists() {
            format!(" --cacert {}", ca.display())
        } else {
            String::new()
        };
        let port = listen.port();
        text.push_str(&format!(
            "\n  from this machine: curl --connect-to {domain}:443:127.0.0.1:{port}{cacert} https://{domain}/.well-known/poppy.json\n  a browser: map {domain} to 127.0.0.1:{port} (e.g. chromium --host-resolver-rules=\"MAP {domain}:443 127.0.0.1:{port}\") and trust that CA"
        ));
    }
    text
}

/// Writes `text` to `path`, readable and writable by this user only (0600), replacing it.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    // A fresh file renamed into place: no link at the name, no descriptor a previous owner of
    // the file kept, reaches the credential (review N16).
    pap_shared::fs::write_private(path, text.as_bytes())
}

fn parse_resolve(entries: &[String]) -> anyhow::Result<HashMap<String, SocketAddr>> {
    entries
        .iter()
        .map(|entry| {
            let (name, addr) = entry
                .split_once('=')
                .with_context(|| format!("--resolve {entry}: expected NAME=ADDR:PORT"))?;
            let addr: SocketAddr = addr
                .parse()
                .with_context(|| format!("--resolve {entry}: bad address"))?;
            Ok((name.to_ascii_lowercase(), addr))
        })
        .collect()
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
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
