//! The MCP host and its devices: `pair`, `devices`, `install-mcp`, and the supervision of the
//! host's browser.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use pap_browser::consent;
use pap_host::pairing::Devices;
use pap_shared::{SystemClock, SystemRng};

use crate::agent::Agent;
use crate::cli::{DevicesCommand, Network};
use crate::util::print_json;

/// `pap-agent pair`: a one-time code, on stdout alone (how to use it on stderr).
#[allow(clippy::print_stdout, reason = "the command's output")]
pub(crate) fn pair(state: &std::path::Path, name: &str, ttl: u64) -> anyhow::Result<()> {
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

/// `pap-agent devices ...`.
pub(crate) async fn devices_command(
    state: &std::path::Path,
    network: &Network,
    command: &DevicesCommand,
) -> anyhow::Result<()> {
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

/// `pap-agent console`: the person's console on loopback `listen`, until SIGINT or SIGTERM. The
/// one-time link goes to stdout alone (how to use it, and the `listening on` line, to stderr).
pub(crate) async fn console(
    state: &std::path::Path,
    network: &Network,
    listen: std::net::SocketAddr,
) -> anyhow::Result<()> {
    // With an identity, the operations the agent's Sessions proposed are listed (each a link to
    // its page: opening it in the agent's browser needs `host serve --console`).
    let decisions: Option<Arc<dyn pap_host::console::Decisions>> =
        match crate::agent::Agent::open(state.to_path_buf(), &network.connect, network.trust_ca.as_deref(), None) {
            Ok(agent) => Some(agent.pap_tools()?),
            Err(_) => None,
        };
    let (listeners, console) = bind_console(state, network, listen, None, decisions).await?;
    eprintln!("listening on {}/", console.origin());
    let limits = pap_host::http::Limits::default();
    let [v4, v6] = listeners;
    let v6 = v6.map(|v6| {
        tokio::spawn(pap_host::http::serve(
            v6,
            console.clone().router(),
            limits,
            std::future::pending(),
        ))
    });
    if let Some(v4) = v4 {
        pap_host::http::serve(v4, console.router(), limits, crate::util::shutdown_signal()).await;
    }
    if let Some(v6) = v6 {
        v6.abort();
    }
    Ok(())
}

/// The console beside `host serve`, on loopback `listen`, with the browser's `tools`: its task.
pub(crate) async fn console_beside(
    state: &std::path::Path,
    network: &Network,
    listen: std::net::SocketAddr,
    tools: Arc<pap_browser::ToolHost>,
    decisions: Arc<dyn pap_host::console::Decisions>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let (listeners, console) = bind_console(state, network, listen, Some(tools), Some(decisions)).await?;
    eprintln!("console on {}/", console.origin());
    let limits = pap_host::http::Limits::default();
    Ok(tokio::spawn(async move {
        let serving = listeners
            .into_iter()
            .flatten()
            .map(|listener| pap_host::http::serve(listener, console.clone().router(), limits, std::future::pending()));
        futures_util::future::join_all(serving).await;
    }))
}

/// The console's listeners: on 127.0.0.1, and on the same port of ::1 where the machine has IPv6.
type ConsoleListeners = [Option<tokio::net::TcpListener>; 2];

/// Binds the console on `listen` (127.0.0.1) and on the same port of `[::1]`, and prints its
/// one-time link (stdout alone). Browsers send the console's `pap-….localhost` name to `::1`
/// first: a port of `::1` left free would let any local process take it and receive the link's
/// code (security review of the console, second reading). So a `::1` port held by someone else
/// refuses the start; only a machine without IPv6 serves on 127.0.0.1 alone.
#[allow(clippy::print_stdout, reason = "the command's output")]
async fn bind_console(
    state: &std::path::Path,
    network: &Network,
    listen: std::net::SocketAddr,
    tools: Option<Arc<pap_browser::ToolHost>>,
    decisions: Option<Arc<dyn pap_host::console::Decisions>>,
) -> anyhow::Result<(ConsoleListeners, Arc<pap_host::console::Console>)> {
    // The console answers at its own `pap-….localhost` name, which browsers send to 127.0.0.1
    // (or ::1 first, then 127.0.0.1): another address would leave its link pointing elsewhere.
    if listen.ip() != std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) {
        bail!("{listen}: the console listens on 127.0.0.1 only (it is for the person at this machine)");
    }
    pap_browser::store::private_dir(state)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the console on {listen}"))?;
    let bound = listener.local_addr()?;
    let v6_addr = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, bound.port()));
    let v6 = match tokio::net::TcpListener::bind(v6_addr).await {
        Ok(v6) => Some(v6),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "{v6_addr} is taken by another process: browsers try it first for the console's name, \
             so the console does not start (choose another port with --listen)"
        ),
        Err(e) => {
            eprintln!("note: no IPv6 loopback here ({e}); the console serves 127.0.0.1 alone");
            None
        }
    };
    let unpair = Arc::new(ConsoleUnpair {
        state: state.to_path_buf(),
        network: network.clone(),
    });
    let mut console =
        pap_host::console::Console::new(state, bound.port(), unpair, Arc::new(SystemClock), Arc::new(SystemRng));
    if let Some(tools) = tools {
        console = console.with_tools(tools);
    }
    if let Some(decisions) = decisions {
        console = console.with_decisions(decisions);
    }
    let console = Arc::new(console);
    eprintln!("open the console's link in your own browser (once, within 10 minutes; it signs that browser in):");
    println!("{}", console.link().expose());
    Ok(([Some(listener), v6], console))
}

/// The console's unpairing: [`unpair`], Sessions signed out included.
struct ConsoleUnpair {
    state: PathBuf,
    network: Network,
}

#[async_trait::async_trait]
impl pap_host::console::Unpair for ConsoleUnpair {
    async fn unpair(&self, device_id: &str) -> Result<serde_json::Value, String> {
        unpair(&self.state, &self.network, device_id)
            .await
            .map_err(|e| format!("{e:#}"))
    }
}

/// Unpairs the device `id` everywhere it reached: its credential refused from its next
/// request; its grants revoked under C8 with what they put in the browsers (C13); its PAP
/// Sessions signed out at each company and their records removed (review N5). What could not
/// be signed out is reported (its record kept, so a later run can try again).
pub(crate) async fn unpair(state: &std::path::Path, network: &Network, id: &str) -> anyhow::Result<serde_json::Value> {
    if !Devices::at(state).revoke(id, pap_shared::Clock::now(&pap_shared::SystemClock))? {
        bail!("no paired device {id} (see `pap-agent devices list`)");
    }
    finish_unpairing(state, network, id).await
}

/// [`unpair`] for a device already out of the devices file (one `install-mcp` replaced).
pub(crate) async fn finish_unpairing(
    state: &std::path::Path,
    network: &Network,
    id: &str,
) -> anyhow::Result<serde_json::Value> {
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
        failed = pap_agent::sign_out_device(&agent.client, state, &agent.sealing, id).await?;
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
pub(crate) async fn install_mcp(
    state: &std::path::Path,
    network: &Network,
    client: pap_host::install::Client,
    config: Option<PathBuf>,
    global: &[String],
) -> anyhow::Result<()> {
    let config = match config {
        Some(path) => path,
        None => client.default_config()?,
    };
    pap_browser::store::private_dir(state)?;
    let program = std::env::current_exe().context("where this pap-agent is")?;
    let installed = pap_host::install::install(
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
