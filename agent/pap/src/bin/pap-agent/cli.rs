//! The command line: every subcommand and flag (clap) and the state directory. Nothing here
//! acts: `main.rs` dispatches each command to its area's module.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pap-agent",
    version,
    about = "A personal agent for PAP draft 0.2 that joins company websites from its own Chromium"
)]
pub(crate) struct Cli {
    /// The agent's state directory (identity, company records, browser profiles); made 0700.
    /// Default: $XDG_STATE_HOME/pap-agent or ~/.local/state/pap-agent; as root
    /// /var/lib/pap-agent, which the browser's unprivileged user can reach.
    #[arg(long, global = true, env = "PAP_AGENT_STATE")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Test only: connect NAME (port 443) to ADDR:PORT, for both HTTP and the browser.
    #[arg(long, global = true, value_name = "NAME=ADDR:PORT")]
    pub(crate) connect: Vec<String>,
    /// Test only: trust this CA for companies (the browser pins the leaf it checks against it).
    #[arg(long, global = true, value_name = "PEM")]
    pub(crate) trust_ca: Option<PathBuf>,
    /// Join from a dedicated Chromium already running with DevTools on this loopback address
    /// (its own --user-data-dir) instead of launching one; it is left running afterwards.
    #[arg(long, global = true, value_name = "ADDR:PORT")]
    pub(crate) attach: Option<SocketAddr>,
    /// Let the agent's browser load ORIGIN although the navigation rule (https: to public hosts
    /// only) refuses it: SCHEME://HOST:PORT, or a range SCHEME://HOST:LOW-HIGH (the port is
    /// required), e.g. `http://127.0.0.1:8080` or `https://10.0.0.5:8443` for a local test server
    /// or the AIP-63 suite's pages; repeat for more.
    #[arg(long = "name-origin", global = true, value_name = "ORIGIN")]
    pub(crate) named_origins: Vec<String>,
    /// A directory whose files tools may hand a page's file input (`browser_file_upload`); none
    /// by default. Repeat for more. Written into a client's configuration by install-mcp.
    #[arg(long = "upload-dir", global = true, value_name = "DIR")]
    pub(crate) upload_dirs: Vec<std::path::PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// Pairs a device with the agent's browser (AIP-59). Without a subcommand: prints a one-time
    /// code that a device on this machine's network exchanges for its credential at the host
    /// (`POST /pair {"code": ...}` on `pap-agent host serve`). `offer`, `accept` and `connect`:
    /// pair/v2 over a rendezvous broker, end to end encrypted, from anywhere.
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:\n  pap-agent pair --name phone\n  pap-agent pair offer --rendezvous wss://rendezvous.example/\n  pap-agent pair accept --name laptop\n  pap-agent pair connect 3f9c0e4b6a1d2e5f7a8b9c0d1e2f3a4b"
    )]
    Pair {
        #[command(subcommand)]
        over: Option<PairCommand>,
        /// What to call the device (`devices list` shows it).
        #[arg(long, default_value = "device")]
        name: String,
        /// How long the code works, in seconds (at most 900).
        #[arg(long, value_name = "SECONDS", default_value_t = pap_host::pairing::CODE_LIFETIME)]
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
        client: pap_host::install::Client,
        /// Its MCP config file, when not where the client keeps it by default.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Instead of this machine's host: the host paired over a rendezvous with this
        /// fingerprint (`pap-agent pair accept`), spawned as `pap-agent pair stdio FINGERPRINT`.
        #[arg(long, value_name = "FINGERPRINT")]
        tunnel: Option<String>,
    },
    /// Runs a rendezvous broker (AIP-59) for your own pairings: it pairs a host and a device
    /// that present the same route and relays their end-to-end encrypted messages, none of
    /// which it can read. Over TLS (`wss://`) with --cert and --key (read again on SIGHUP);
    /// plain `ws://` without them, which hosts and devices dial on loopback only.
    #[command(
        after_help = "Examples:\n  pap-agent rendezvous --listen 127.0.0.1:8788\n  pap-agent rendezvous --listen 0.0.0.0:443 --cert /etc/letsencrypt/live/rdv.example/fullchain.pem \\\n      --key /etc/letsencrypt/live/rdv.example/privkey.pem"
    )]
    Rendezvous {
        /// Where to listen.
        #[arg(long, value_name = "ADDR")]
        listen: SocketAddr,
        /// PEM certificate chain of the broker's domain: serve `wss://` (with --key).
        #[arg(long, value_name = "PEM", requires = "key")]
        cert: Option<PathBuf>,
        /// PEM private key of --cert.
        #[arg(long, value_name = "PEM", requires = "cert")]
        key: Option<PathBuf>,
        /// Sockets one address may hold at once (an IPv6 address counts by its /64). A host
        /// parks two per pairing and per revoked pairing's tombstone, and one per open offer.
        #[arg(long, value_name = "N", default_value_t = pap_pair::broker::BrokerLimits::default().max_connections_per_address)]
        max_sockets_per_address: usize,
    },
    /// The person's console: a web page on loopback where you answer the devices' requests for
    /// access, see the consent ledger and which device called which tool where, and revoke
    /// grants or unpair devices. Prints a one-time link on stdout (it works once, for 10
    /// minutes; restart the console for another); a device's credential never opens it.
    #[command(after_help = "Example:
  pap-agent console --listen 127.0.0.1:7879")]
    Console {
        /// Where to listen (127.0.0.1 only; port 0: any free port). The console answers at a
        /// name of its own, `pap-….localhost`, which the link carries.
        #[arg(long, default_value = "127.0.0.1:7879")]
        listen: SocketAddr,
    },
    #[command(flatten)]
    Pap(PapCommand),
}

/// What the agent does with companies: PAP Sessions and joins.
#[derive(Subcommand)]
pub(crate) enum PapCommand {
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
pub(crate) enum HostCommand {
    /// On stdin/stdout, for an MCP client that spawns its servers, as the paired device whose
    /// credential is in BEARER_FILE (`install-mcp` writes both); logs go to stderr.
    #[command(
        after_help = "Example:\n  pap-agent --state-dir /var/lib/pap-agent host stdio --bearer-file /var/lib/pap-agent/devices/cursor.bearer"
    )]
    Stdio {
        /// The device's credential (a file, 0600; never an argument, which `ps` shows).
        #[arg(long, value_name = "FILE", env = "PAP_AGENT_BEARER_FILE")]
        bearer_file: PathBuf,
        #[command(flatten)]
        start: HostStart,
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
        /// Also serve the person's console on this address (127.0.0.1 only), with the browser's tabs:
        /// their live pictures and takeover (`pap-agent console` serves it without them). Its
        /// one-time link goes to stdout.
        #[arg(long, value_name = "ADDR")]
        console: Option<SocketAddr>,
        #[command(flatten)]
        start: HostStart,
    },
}

/// When a host launches its browser.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct HostStart {
    /// Launch the browser as the host starts, in the background, instead of on the first tool
    /// call that needs it: that call then finds it running (its first call 320 to 370 ms
    /// shorter at p50 here) or waits for the launch under way. Costs a running
    /// Chromium while no tool uses it; with a Chromium that cannot start, each host start counts
    /// a failed launch toward the crash loop.
    #[arg(long)]
    pub(crate) launch_at_start: bool,
}

/// AIP-59 pair/v2 over a rendezvous broker.
#[derive(Subcommand)]
pub(crate) enum PairCommand {
    /// On the host's machine: mints a single-use offer (a 256-bit secret, 10 minutes by default)
    /// and prints it: `agentproto://pair?…` on stdout, the fingerprint, the web form and a QR
    /// code on stderr. A running `pap-agent host serve` answers it.
    #[command(
        after_help = "Example:\n  pap-agent pair offer --rendezvous wss://rendezvous.example/ --pair-page 'https://{fp}.pair.example/pair'"
    )]
    Offer {
        /// The broker both sides dial (`wss://…`; `ws://` on loopback).
        #[arg(long, env = "PAP_AGENT_RENDEZVOUS", value_name = "URL")]
        rendezvous: String,
        /// How long the offer works, in seconds (at most 3600).
        #[arg(long, value_name = "SECONDS", default_value_t = pap_host::tunnel::OFFER_LIFETIME)]
        ttl: u64,
        /// A pair page to print the web form for: an https URL in which `{fp}` is the host's
        /// fingerprint (the offer goes in its fragment).
        #[arg(long, value_name = "TEMPLATE")]
        pair_page: Option<String>,
        /// What to call the device (default: the name it gives itself).
        #[arg(long)]
        name: Option<String>,
    },
    /// On the device's machine: reads an offer from stdin, pairs, shows the host's fingerprint
    /// and name, and keeps the credential (0600, keyed by fingerprint) once you type yes.
    #[command(after_help = "Example:\n  pap-agent pair accept --name laptop")]
    Accept {
        /// What this device calls itself (the host shows it).
        #[arg(long, default_value = "device")]
        name: String,
        /// Keep the pairing without asking (for scripts that checked the fingerprint).
        #[arg(long)]
        yes: bool,
    },
    /// Serves the pair page and service worker for browsers (a phone scanning the offer's QR
    /// code): static files for `pair offer --pair-page`, on an origin of your own.
    #[command(after_help = "Example:\n  pap-agent pair page --listen 127.0.0.1:8790")]
    Page {
        /// Where to listen (port 0: any free port; the line `pair page on URL` says which). Put
        /// TLS in front of it for anything but loopback.
        #[arg(long, default_value = "127.0.0.1:8790")]
        listen: SocketAddr,
    },
    /// On the device's machine: serves the paired host's MCP on stdin/stdout through the tunnel,
    /// for an MCP client that spawns its servers (`install-mcp --tunnel` configures one).
    #[command(after_help = "Example:\n  pap-agent pair stdio 3f9c0e4b6a1d2e5f7a8b9c0d1e2f3a4b")]
    Stdio {
        /// The host's fingerprint (`pair accept` printed it).
        fingerprint: String,
    },
    /// On the device's machine: serves the paired host's MCP at a loopback address, tunnelled
    /// end to end encrypted through the broker; any MCP client here can use it.
    #[command(
        after_help = "Example:\n  pap-agent pair connect 3f9c0e4b6a1d2e5f7a8b9c0d1e2f3a4b --listen 127.0.0.1:7879"
    )]
    Connect {
        /// The host's fingerprint (`pair accept` printed it).
        fingerprint: String,
        /// Where to listen (loopback only; port 0: any free port, the line `listening on URL`
        /// says which).
        #[arg(long, default_value = "127.0.0.1:7879")]
        listen: SocketAddr,
    },
}

#[derive(Subcommand)]
pub(crate) enum DevicesCommand {
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
pub(crate) const MCP_INSTANCE: &str = "mcp";

#[derive(Subcommand)]
pub(crate) enum BrowserCommand {
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
pub(crate) enum ConsentCommand {
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
pub(crate) enum LedgerCommand {
    /// Checks every line (seq, prev hash, record shape) and the head anchor; reports the first
    /// broken line and exits 1 if there is one.
    #[command(after_help = "Example:\n  pap-agent consent ledger verify")]
    Verify,
}

#[derive(Subcommand)]
pub(crate) enum IdentityCommand {
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
    /// Rotates the signing key: a new key signs from now on; the old one stays in the JWKS for
    /// the grace window (so what it signed a moment ago still verifies), its private part is
    /// deleted. Running agent processes switch at their next signature.
    #[command(after_help = "Example:\n  pap-agent identity rotate --grace 3600")]
    Rotate {
        /// How long the old key stays published, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = pap_agent::DEFAULT_ROTATION_GRACE_SECONDS,
              value_parser = clap::value_parser!(i64).range(0..=2_592_000))]
        grace: i64,
    },
}

pub(crate) fn state_dir(cli: &Cli) -> PathBuf {
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
pub(crate) fn default_state_dir(root: bool, home_default: PathBuf) -> (PathBuf, Option<String>) {
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

/// The test-only network options (`--connect`, `--trust-ca`) a command reaches companies with.
#[derive(Clone, Debug, Default)]
pub(crate) struct Network {
    pub(crate) connect: Vec<String>,
    pub(crate) trust_ca: Option<PathBuf>,
}

impl Cli {
    /// The test-only network options it was given.
    pub(crate) fn network(&self) -> Network {
        Network {
            connect: self.connect.clone(),
            trust_ca: self.trust_ca.clone(),
        }
    }
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
            } else if !command.get_after_help().is_some_and(|help| {
                let help = help.to_string();
                (help.starts_with("Example:") || help.starts_with("Examples:")) && help.contains(&path)
            }) {
                missing.push(path);
            }
        }
        assert!(missing.is_empty(), "no example in --help: {missing:?}");
    }

    #[test]
    fn a_companys_text_reaches_the_terminal_without_escapes() {
        // An OSC title change and a cursor move that would overwrite the line above.
        let hostile = "Shop\u{1b}]0;owned\u{7}\u{1b}[1A\rcode: WXYZ-1234";
        let shown = crate::util::printable(hostile);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.starts_with("Shop") && shown.ends_with("WXYZ-1234"));
    }
}
