//! The PAP steps (`pap-agent pap …`): the agent opened from its state directory, its Session,
//! sign-in, proposals, operations and the join in its own Chromium.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use pap_agent::{
    ClientConfig, Company, Identity, PapClient, Wallet, WalletSites, join, join_tab, new_pairwise_user, pin_served_leaf,
};
use pap_browser::chromium::{BrowserHost, ChromiumConfig, TestNetwork, click_and_land};
use pap_browser::spec::InstanceKey;
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_browser::{chromium, consent};
use pap_host::pairing::{Bearer, Devices};
use pap_net::listener::TlsListener;
use pap_shared::{HttpsUrl, SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

use crate::browser::{launch_at_start, lifecycle, supervise};
use crate::cli::{HostCommand, HostStart, MCP_INSTANCE, PapCommand};
use crate::tunnel::host_label;
use crate::util::{parse_connect, parse_domain, print_json, printable, read_file, shutdown_signal};

pub(crate) struct Agent {
    pub(crate) state_dir: PathBuf,
    pub(crate) client: PapClient,
    pub(crate) sealing: SealingKey,
    pub(crate) test_network: Option<(HashMap<String, SocketAddr>, rustls::RootCertStore)>,
    pub(crate) attach: Option<SocketAddr>,
    /// The test-only `--trust-ca` certificates (a rendezvous broker's private CA too).
    pub(crate) extra_roots: Vec<CertificateDer<'static>>,
    /// Origins the operator lets the browser load beyond the navigation rule (`--name-origin`).
    pub(crate) named_origins: Vec<pap_browser::spec::NamedOrigin>,
    /// The directories whose files tools may upload (`--upload-dir`).
    pub(crate) upload_dirs: Vec<std::path::PathBuf>,
    /// The test-only network options as given (for the console's unpairing, which signs out).
    pub(crate) network: crate::cli::Network,
}

impl Agent {
    /// The agent of `state`, reaching companies as the test-only `--connect`/`--trust-ca` say.
    pub(crate) fn open(
        state: PathBuf,
        connect: &[String],
        trust_ca: Option<&std::path::Path>,
        attach: Option<SocketAddr>,
    ) -> anyhow::Result<Self> {
        let identity = Arc::new(Identity::load(&state)?);
        let network = crate::cli::Network {
            connect: connect.to_vec(),
            trust_ca: trust_ca.map(std::path::Path::to_path_buf),
        };
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
        let config = ClientConfig {
            extra_roots: extra_roots.clone(),
            connect,
        };
        let client = PapClient::new(identity, &config, Arc::new(SystemClock), Arc::new(SystemRng))?;
        let sealing = SealingKey::open(&state, &SystemRng)?;
        Ok(Self {
            state_dir: state,
            client,
            sealing,
            test_network,
            attach,
            extra_roots,
            network,
            named_origins: Vec::new(),
            upload_dirs: Vec::new(),
        })
    }

    pub(crate) async fn run(&self, command: PapCommand) -> anyhow::Result<()> {
        match command {
            PapCommand::Discover { domain } => {
                let company = self.client.discover(&parse_domain(&domain)?).await?;
                print_json(&serde_json::to_value(company.report())?);
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
                // The person's console lists it too, until the company says it no longer waits.
                // (The operation is proposed either way: a record that cannot be written is said,
                // and the operation still printed.)
                if let Some(url) = &operation.url {
                    let recorded =
                        pap_agent::decisions::Proposals::at(&self.state_dir).record(pap_agent::decisions::Proposal {
                            device_id: None,
                            domain: company.domain.as_str().to_owned(),
                            operation_id: operation.operation_id.clone(),
                            url: url.clone(),
                            proposed_at: pap_shared::Clock::now(&SystemClock),
                        });
                    if let Err(error) = recorded {
                        eprintln!("note: the console will not list this operation ({error})");
                    }
                }
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
                command: HostCommand::Stdio { bearer_file, start },
            } => self.host_stdio(&bearer_file, start).await,
            PapCommand::Host {
                command:
                    HostCommand::Serve {
                        listen,
                        allow_remote,
                        tls_cert,
                        tls_key,
                        allow_hosts,
                        allow_origins,
                        console,
                        start,
                    },
            } => {
                let tls = match (tls_cert, tls_key) {
                    (Some(cert), Some(key)) => Some((read_file(&cert)?, zeroize::Zeroizing::new(read_file(&key)?))),
                    _ => None,
                };
                let exposure =
                    pap_host::http::Exposure::check(listen, allow_remote, tls.is_some(), &allow_hosts, &allow_origins)?;
                self.host_serve(listen, exposure, tls, console, start).await
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
    pub(crate) async fn browser_config(&self) -> anyhow::Result<ChromiumConfig> {
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
        // The wallet's companies are the person's sites (AIP-7): the browser sends no
        // state-changing request there but the join's own and the person's.
        config.persons = WalletSites::persons(&self.state_dir);
        for origin in &self.named_origins {
            config.navigation.name(origin.clone());
        }
        config.upload_dirs.clone_from(&self.upload_dirs);
        Ok(config)
    }

    /// `pap-agent host stdio`: the agent's browser as an MCP server on stdin/stdout, for a client
    /// that spawns its servers. Its tools run as the paired device of `bearer_file`; its browser
    /// (instance `mcp`) starts with the first call that needs it (as the host starts with
    /// `--launch-at-start`) and stops when the client goes.
    pub(crate) async fn host_stdio(&self, bearer_file: &std::path::Path, start: HostStart) -> anyhow::Result<()> {
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
        let pap = self.pap_tools()?;
        // Launched once nothing before serving can fail.
        let _launching = start.launch_at_start.then(|| launch_at_start(&tools));
        let server = pap_host::BrowserServer::stdio(tools, devices, bearer, device.id)
            .named("pap-agent", env!("CARGO_PKG_VERSION"))
            .with_extra(pap.clone())
            .with_resources(pap)
            .recording_in(&self.state_dir);
        // A client ends its server by closing stdin, or by SIGTERM when it does not exit soon
        // after: either way the browser is stopped, not left to the next start's sweep.
        let ended = tokio::select! {
            ended = pap_host::jsonrpc::serve_lines(server, tokio::io::stdin(), tokio::io::stdout()) => ended,
            () = shutdown_signal() => Ok(()),
        };
        host.stop(MCP_INSTANCE, Duration::from_secs(2)).await?;
        ended.context("serving MCP on stdin/stdout")?;
        Ok(())
    }

    /// `pap-agent host serve`: the agent's browser over streamable HTTP for paired devices,
    /// until SIGINT or SIGTERM; its browser stops with it.
    pub(crate) async fn host_serve(
        &self,
        listen: SocketAddr,
        exposure: pap_host::http::Exposure,
        tls: Option<(Vec<u8>, zeroize::Zeroizing<Vec<u8>>)>,
        console: Option<SocketAddr>,
        start: HostStart,
    ) -> anyhow::Result<()> {
        use pap_host::http;
        let (host, tools) = self.mcp_tools().await?;
        let _supervision = supervise(&host, &tools)?;
        let pap = self.pap_tools()?;
        let console = match console {
            Some(addr) => Some(
                crate::host::console_beside(&self.state_dir, &self.network, addr, tools.clone(), pap.clone()).await?,
            ),
            None => None,
        };
        let launching = start.launch_at_start.then_some(tools.clone());
        let server = pap_host::BrowserServer::per_request(tools)
            .named("pap-agent", env!("CARGO_PKG_VERSION"))
            .with_extra(pap.clone())
            .with_resources(pap)
            .recording_in(&self.state_dir);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let bound = listener.local_addr()?;
        let guard = exposure.guard(bound.port());
        let limits = http::Limits::default();
        let app = http::router(server, Devices::at(&self.state_dir), guard, limits);
        // AIP-59 pair/v2: the same routes, reached over a rendezvous by devices paired there.
        let tunnel = std::sync::Arc::new(pap_host::tunnel::host::HostTunnel::new(
            Devices::at(&self.state_dir),
            pap_host::tunnel::daemon_keys(&self.state_dir, &SystemRng)?,
            pap_pair::link::Dialer::new(&self.extra_roots)?,
            app.clone(),
            format!("127.0.0.1:{}", bound.port()),
            host_label(),
            Arc::new(SystemClock),
            Arc::new(SystemRng),
        ));
        let parking = tokio::spawn(tunnel.run(std::future::pending()));
        // Readiness: this line, once the socket is bound. The launch at start begins once
        // nothing before serving can fail.
        let _launching;
        match tls {
            Some((cert, key)) => {
                let listener = TlsListener::new(listener, &cert, &key).context("the TLS certificate and key")?;
                _launching = launching.as_ref().map(launch_at_start);
                eprintln!("listening on https://{bound}/mcp");
                http::serve(listener, app, limits, shutdown_signal()).await;
            }
            None => {
                _launching = launching.as_ref().map(launch_at_start);
                eprintln!("listening on http://{bound}/mcp");
                http::serve(listener, app, limits, shutdown_signal()).await;
            }
        }
        parking.abort();
        if let Some(console) = console {
            console.abort();
        }
        host.stop(MCP_INSTANCE, Duration::from_secs(2)).await?;
        Ok(())
    }

    /// The PAP steps as tools, for an MCP host.
    pub(crate) fn pap_tools(&self) -> anyhow::Result<Arc<pap_agent::PapTools>> {
        let sealing = SealingKey::open(&self.state_dir, &SystemRng)?;
        Ok(pap_agent::PapTools::new(
            self.client.clone(),
            self.state_dir.clone(),
            sealing,
        ))
    }

    /// The tool host an MCP host serves: instance `mcp`, launched by the first call that needs
    /// it (or at start, `--launch-at-start`), after a sweep of what an earlier run left.
    pub(crate) async fn mcp_tools(&self) -> anyhow::Result<(BrowserHost, Arc<ToolHost>)> {
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

    pub(crate) async fn company(&self, domain: &str) -> anyhow::Result<(Company, Wallet)> {
        let domain = parse_domain(domain)?;
        let company = self.client.discover(&domain).await?;
        let wallet = Wallet::load(&self.state_dir, &domain, &self.sealing)?
            .context("no record of this company: run `pap-agent session` first")?;
        Ok((company, wallet))
    }
}

pub(crate) async fn session(agent: &Agent, domain: &str) -> anyhow::Result<()> {
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

pub(crate) async fn signin(agent: &Agent, domain: &str, scope: &str) -> anyhow::Result<()> {
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
pub(crate) async fn browse(
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
        // `--confirm` is the person's own click, given on the operator's channel: this tab, which
        // no tool can reach (no tool host serves this browser), is the person's from the start.
        let _persons = confirm
            .then(|| config.persons.hold_for_person(page.target_id().inner().clone()))
            .transpose()?;
        let outcome = join(
            &agent.client,
            &company,
            session,
            &return_to,
            pap_agent::JoinTab::New(&page),
            &permit,
            &config.persons,
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
