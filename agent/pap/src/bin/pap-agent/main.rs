//! `pap-agent`: a personal agent that holds PAP Sessions with companies and joins their
//! websites from its own Chromium.
//!
//! Run with `cargo run -p pap-agent -- --help`.

mod agent;
mod browser;
mod cli;
mod consent_cli;
mod host;
mod identity;
mod tunnel;
mod util;

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser as _;
use pap_browser::chromium;

use crate::agent::Agent;
use crate::browser::browser_command;
use crate::cli::{Cli, Command, PairCommand, state_dir};
use crate::consent_cli::consent_command;
use crate::host::{console, devices_command, install_mcp, pair};
use crate::identity::identity;
use crate::tunnel::{install_tunnel, pair_accept, pair_connect, pair_offer, pair_page, pair_stdio};
use crate::util::shutdown_signal;

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

/// Runs the command `cli` names, in its area's module.
async fn run(cli: Cli) -> anyhow::Result<()> {
    let state = state_dir(&cli);
    let network = cli.network();
    match cli.command {
        Command::Identity { command } => identity(&state, &command).await,
        Command::Consent { command } => consent_command(&state, &command).await,
        Command::Browser { command } => browser_command(&state, &command).await,
        Command::Pair { over: None, name, ttl } => pair(&state, &name, ttl),
        Command::Pair { over: Some(over), .. } => match over {
            PairCommand::Offer {
                rendezvous,
                ttl,
                pair_page,
                name,
            } => pair_offer(&state, &rendezvous, ttl, pair_page.as_deref(), name.as_deref()),
            PairCommand::Accept { name, yes } => pair_accept(&state, &network, &name, yes).await,
            PairCommand::Connect { fingerprint, listen } => pair_connect(&state, &network, &fingerprint, listen).await,
            PairCommand::Stdio { fingerprint } => pair_stdio(&state, &network, &fingerprint).await,
            PairCommand::Page { listen } => pair_page(listen).await,
        },
        Command::Rendezvous {
            listen,
            max_sockets_per_address,
            cert,
            key,
        } => rendezvous(listen, max_sockets_per_address, cert.zip(key)).await,
        Command::Devices { command } => devices_command(&state, &network, &command).await,
        Command::Console { listen } => console(&state, &network, listen).await,
        Command::InstallMcp { client, config, tunnel } => {
            // The global options it runs with are the host's too (--connect and --trust-ca:
            // a test stage's routing reaches the spawned host as it reached this command).
            let mut global = Vec::new();
            for entry in &cli.connect {
                global.extend(["--connect".to_owned(), entry.clone()]);
            }
            if let Some(ca) = &cli.trust_ca {
                global.extend(["--trust-ca".to_owned(), std::path::absolute(ca)?.display().to_string()]);
            }
            // The directories the person named for uploads are theirs to keep: the host the
            // client spawns gets them too.
            for dir in &cli.upload_dirs {
                global.extend([
                    "--upload-dir".to_owned(),
                    std::path::absolute(dir)?.display().to_string(),
                ]);
            }
            // --name-origin is a test exemption of the navigation rule: it is never made
            // permanent in a client's configuration (review N17).
            if !cli.named_origins.is_empty() {
                eprintln!("note: --name-origin is not written into the client's configuration");
            }
            match tunnel {
                Some(fingerprint) => install_tunnel(&state, client, config, &global, &fingerprint),
                None => install_mcp(&state, &network, client, config, &global).await,
            }
        }
        Command::Pap(command) => {
            let mut agent = Agent::open(state, &cli.connect, cli.trust_ca.as_deref(), cli.attach)?;
            for origin in &cli.named_origins {
                agent.named_origins.push(pap_browser::spec::NamedOrigin::parse(origin)?);
            }
            for dir in &cli.upload_dirs {
                agent.upload_dirs.push(std::path::absolute(dir)?);
            }
            agent.run(command).await
        }
    }
}

/// `pap-agent rendezvous`: the broker until Ctrl-C or SIGTERM; over TLS with `tls` (a
/// certificate and its key, PEM, read again on SIGHUP).
async fn rendezvous(
    listen: SocketAddr,
    max_sockets_per_address: usize,
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> anyhow::Result<()> {
    let certificate = match &tls {
        Some((cert, key)) => {
            let certificate = pap_net::tls::ReloadableCert::load(cert, key).with_context(|| {
                format!(
                    "cannot load the TLS certificate {} and key {}: check both paths",
                    cert.display(),
                    key.display()
                )
            })?;
            certificate.reload_on_hangup();
            Some(certificate.server_config().context("building the TLS configuration")?)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let address = listener.local_addr()?;
    let scheme = if certificate.is_some() { "wss" } else { "ws" };
    eprintln!("rendezvous broker on {scheme}://{address}/ (any path; hosts and devices add ?side=…&t=…)");
    if certificate.is_none() && !address.ip().is_loopback() {
        eprintln!(
            "warning: plain WebSocket off loopback: hosts and devices dial wss:// only, so put TLS in front of this (or give --cert and --key)"
        );
    }
    let stats = std::sync::Arc::new(pap_pair::broker::BrokerStats::default());
    let limits = pap_pair::broker::BrokerLimits {
        max_connections_per_address: max_sockets_per_address.max(1),
        ..pap_pair::broker::BrokerLimits::default()
    };
    match certificate {
        Some(tls) => pap_pair::broker::serve_tls(listener, tls, limits, stats, shutdown_signal()).await,
        None => pap_pair::broker::serve(listener, limits, stats, shutdown_signal()).await,
    }
    Ok(())
}
