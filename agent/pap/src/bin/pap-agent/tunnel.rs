//! `pap-agent pair offer|accept|connect`: AIP-59 `pair/v2` over a rendezvous, from the
//! operator's terminal (offer) and the device's (accept, connect).

use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use pap_host::tunnel::{device, mint_offer};
use pap_shared::{SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

use crate::cli::Network;
use crate::util::shutdown_signal;

/// The name a host shows its devices: this machine's.
pub(crate) fn host_label() -> String {
    let name = nix::unistd::gethostname()
        .ok()
        .and_then(|n| n.into_string().ok())
        .unwrap_or_default();
    if name.is_empty() {
        "pap-agent".to_owned()
    } else {
        format!("pap-agent on {name}")
    }
}

/// `pap-agent pair offer`: mints an offer and prints it (stdout: the canonical form; stderr:
/// the fingerprint, the web form, a QR code, the expiry).
#[allow(clippy::print_stdout, reason = "the command's output")]
pub(crate) fn pair_offer(
    state: &std::path::Path,
    rendezvous: &str,
    ttl: u64,
    pair_page: Option<&str>,
    name: Option<&str>,
) -> anyhow::Result<()> {
    let parsed = url::Url::parse(rendezvous).context("--rendezvous is not a URL")?;
    if !matches!(parsed.scheme(), "ws" | "wss") {
        bail!("--rendezvous must be a ws: or wss: URL (wss: for any broker not on this machine)");
    }
    pap_browser::store::private_dir(state)?;
    let offer = mint_offer(state, rendezvous, ttl, name, &SystemClock, &SystemRng)?;
    let web = pair_page.map(|template| offer.to_web_url(template)).transpose()?;
    let canonical = offer.to_url();
    let shown = web.as_deref().unwrap_or(&canonical);
    eprintln!("fingerprint {}", offer.fingerprint);
    if let Some(web) = &web {
        eprintln!("web form (open on a phone): {}", web.as_str());
    }
    match qrcode::QrCode::new(shown.as_bytes()) {
        Ok(code) => eprintln!(
            "{}",
            code.render::<qrcode::render::unicode::Dense1x2>()
                .quiet_zone(true)
                .build()
        ),
        Err(error) => eprintln!("(no QR code: {error})"),
    }
    eprintln!(
        "single use, until {}: the device runs `pap-agent pair accept` and pastes it; a running \
         `pap-agent host serve` answers it",
        UnixTimeText(offer.exp)
    );
    println!("{}", canonical.as_str());
    Ok(())
}

struct UnixTimeText(i64);

impl std::fmt::Display for UnixTimeText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&pap_shared::UnixTime::from_secs(self.0).to_rfc3339())
    }
}

/// `pap-agent pair accept`: reads the offer from stdin (never an argument, which `ps` shows),
/// pairs, shows the fingerprint and the host's name, and keeps the credential once the person
/// types `yes` (or at once with `--yes`). Prints the fingerprint on stdout.
#[allow(clippy::print_stdout, reason = "the command's output")]
pub(crate) async fn pair_accept(
    state: &std::path::Path,
    network: &Network,
    name: &str,
    yes: bool,
) -> anyhow::Result<()> {
    eprintln!("paste the offer (agentproto://pair?… or the web form), then Enter:");
    let mut stdin = std::io::stdin().lock();
    let mut line = zeroize::Zeroizing::new(String::new());
    stdin.read_line(&mut line).context("reading the offer from stdin")?;
    let now = pap_shared::Clock::now(&SystemClock).as_secs();
    let offer = pap_pair::offer::Offer::parse(&line, now)?;
    // §3.6: the fingerprint before any network I/O.
    eprintln!(
        "host fingerprint {}: pairing through {}",
        offer.fingerprint, offer.rendezvous
    );
    pap_browser::store::private_dir(state)?;
    let dialer = pap_pair::link::Dialer::new(&extra_roots(network)?)?;
    let confirm = |paired: &device::Paired| {
        eprintln!(
            "paired with {:?}, fingerprint {}",
            paired.label.as_deref().unwrap_or("(no name)"),
            paired.fingerprint
        );
        if yes {
            return true;
        }
        eprint!("keep this pairing? type yes: ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        stdin.read_line(&mut answer).is_ok() && answer.trim().eq_ignore_ascii_case("yes")
    };
    let paired = device::accept(state, &offer, name, &dialer, confirm, &SystemClock, &SystemRng).await?;
    eprintln!(
        "kept: `pap-agent pair connect {}` serves this host's MCP on loopback",
        paired.fingerprint
    );
    println!("{}", paired.fingerprint);
    Ok(())
}

/// `pap-agent pair connect`: the loopback MCP endpoint that tunnels to the host, until Ctrl-C
/// or SIGTERM, or until the host revokes the pairing (then it says so and fails).
pub(crate) async fn pair_connect(
    state: &std::path::Path,
    network: &Network,
    fingerprint: &str,
    listen: SocketAddr,
) -> anyhow::Result<()> {
    if !listen.ip().is_loopback() {
        bail!("--listen {listen} is not loopback: the endpoint serves the MCP clients of this machine only");
    }
    // The pairing's tunnel first: a second `pair connect` on the same pairing is told which
    // process holds it, not that the first one's port is taken.
    let (client, kept, label, _hold) = tunnel_client(state, network, fingerprint)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let bound = listener.local_addr()?;
    let bearer_file = device::endpoint_bearer_path(state, fingerprint);
    let bearer = device::EndpointBearer::mint(&bearer_file, &SystemRng)?;
    eprintln!("tunnel to {label:?} ({fingerprint})");
    eprintln!(
        "clients present the bearer in {} (0600, made fresh each run)",
        bearer_file.display()
    );
    eprintln!("listening on http://{bound}/mcp");
    let serving = device::serve_endpoint(listener, client, &bearer, shutdown_signal());
    let ended = until_revoked(serving, kept).await;
    // The endpoint's bearer lives as long as the endpoint.
    let _ = std::fs::remove_file(&bearer_file);
    ended
}

/// The tunnel client of the credential for `fingerprint`, started; its keeper (which ends only
/// on a revocation), the host's name, and this process's hold on the pairing's tunnel (another
/// process holding it is refused before anything starts: AIP-59 §5.3).
fn tunnel_client(
    state: &std::path::Path,
    network: &Network,
    fingerprint: &str,
) -> anyhow::Result<(
    Arc<device::TunnelClient>,
    tokio::task::JoinHandle<device::DeviceError>,
    String,
    device::TunnelHold,
)> {
    let credential = device::load_credential(state, fingerprint)?;
    let hold = device::hold_tunnel(state, fingerprint)?;
    let label = credential.label.clone().unwrap_or_default();
    let dialer = pap_pair::link::Dialer::new(&extra_roots(network)?)?;
    let (client, kept) = device::TunnelClient::start(
        state.to_path_buf(),
        credential,
        dialer,
        Arc::new(SystemClock),
        Arc::new(SystemRng),
    );
    Ok((client, kept, label, hold))
}

/// Serves until `serving` ends, or the host revokes the pairing (`kept` ends): then it fails,
/// saying so.
async fn until_revoked(
    serving: impl std::future::Future<Output = Result<(), device::DeviceError>>,
    kept: tokio::task::JoinHandle<device::DeviceError>,
) -> anyhow::Result<()> {
    tokio::select! {
        served = serving => served.map_err(anyhow::Error::from),
        revoked = kept => match revoked {
            Ok(error) => Err(anyhow::Error::from(error)),
            Err(failed) => Err(anyhow::Error::from(failed).context("the tunnel task failed")),
        },
    }
}

/// `pap-agent pair stdio`: the paired host's MCP on stdin/stdout (logs on stderr), until the
/// client closes stdin, or the host revokes the pairing (then it says so and fails).
pub(crate) async fn pair_stdio(state: &std::path::Path, network: &Network, fingerprint: &str) -> anyhow::Result<()> {
    let (client, kept, _, _hold) = tunnel_client(state, network, fingerprint)?;
    until_revoked(
        device::serve_stdio(client, tokio::io::stdin(), tokio::io::stdout()),
        kept,
    )
    .await
}

/// `pap-agent install-mcp --tunnel FINGERPRINT`.
pub(crate) fn install_tunnel(
    state: &std::path::Path,
    client: pap_host::install::Client,
    config: Option<PathBuf>,
    global: &[String],
    fingerprint: &str,
) -> anyhow::Result<()> {
    // The credential must be there (and not revoked) before a client is told to use it.
    device::load_credential(state, fingerprint)?;
    let config = match config {
        Some(path) => path,
        None => client.default_config()?,
    };
    let program = std::env::current_exe().context("where this pap-agent is")?;
    let name = pap_host::install::install_tunnel(state, client, &config, &program, global, fingerprint)?;
    eprintln!(
        "configured {} in {} to reach the host {fingerprint} through the tunnel (entry {name:?})",
        client.name(),
        config.display()
    );
    Ok(())
}

/// `pap-agent pair page`: the pair page until Ctrl-C or SIGTERM.
pub(crate) async fn pair_page(listen: SocketAddr) -> anyhow::Result<()> {
    if !listen.ip().is_loopback() {
        bail!("--listen {listen} is not loopback: serve the pair page to others through a TLS proxy in front of it");
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let bound = listener.local_addr()?;
    eprintln!("pair page on http://{bound}/pair (offers: pap-agent pair offer --pair-page http://{bound}/pair)");
    // The host's bounded server: a connection cap, header and body deadlines.
    let limits = pap_host::http::Limits::default();
    pap_host::http::serve(listener, pap_host::tunnel::page::router(), limits, shutdown_signal()).await;
    Ok(())
}

fn extra_roots(network: &Network) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let mut roots = Vec::new();
    if let Some(ca) = &network.trust_ca {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        for cert in rustls_pemfile::certs(&mut &pem[..]) {
            roots.push(cert.with_context(|| format!("parsing {}", ca.display()))?);
        }
    }
    Ok(roots)
}
