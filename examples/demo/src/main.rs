//! Run with `cargo run --release -p example-demo` (as root it installs Debian's Chromium first
//! when it is missing).
//!
//! The whole bridge, told with timings: the reference company starts on 127.0.0.1 with fresh
//! certificates and its embedded store; an agent identity is created; the agent starts a PAP
//! Session, the user signs in on the company's device page, the agent proposes an operation,
//! its own Chromium joins the company's website, the operation's page is shown in the Session
//! (a screenshot is written), the confirm button is clicked on the page, the operation reads
//! back `succeeded`, the agent signs out, and the page is gone. Every process it starts is
//! stopped at the end, and on Ctrl-C.

#![allow(clippy::print_stdout, reason = "the demo tells its story on standard output")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chromiumoxide::cdp::browser_protocol::network::{EventResponseReceived, ResourceType};
use futures_util::StreamExt as _;
use pap_agent::testkit::{approve_on_device_page, plain_http_client};
use pap_agent::{ClientConfig, Identity, PapClient, documents_router, join, new_pairwise_user, spki_pin};
use pap_browser::chromium::{BrowserHost, BrowserUserPolicy, ChromiumConfig, TestNetwork, click_and_land};
use pap_browser::persons::{Persons, StaticSites};
use pap_net::listener::TlsListener;
use pap_net::tls::trust_roots;
use pap_shared::{CompanyDomain, HttpsUrl, SystemClock, SystemRng};
use pap_shop::{CompanyConfig, LocalCompany};

const PASSWORD: &str = "correct horse battery staple";
const INSTANCE: &str = "demo";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) if error.to_string() == "interrupted" => {
            println!("interrupted: every process the demo started is stopped");
            std::process::ExitCode::from(130)
        }
        Err(error) => {
            eprintln!("the demo failed: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(pap_browser::chromium::log_filter("error,chromiumoxide=off"))
        .with_writer(std::io::stderr)
        .init();
    ensure_chromium()?;
    ensure_browser_user()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let host = BrowserHost::new();
        let work = std::env::temp_dir().join(format!("pap-demo-{}", std::process::id()));
        // Passable by the browser's unprivileged user, which Chromium runs as when this runs as
        // root: the state directory below it is the agent's (0700, or 0710 for that user).
        std::fs::create_dir_all(&work)?;
        let outcome = tokio::select! {
            result = story(&host, &work) => result,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        };
        // Whatever happened: the browser stopped, its profile and the scratch files removed.
        let _ = host.stop(INSTANCE, Duration::from_secs(2)).await;
        let _ = std::fs::remove_dir_all(&work);
        outcome
    })
}

/// Debian's Chromium, and a font for readable screenshots (with no recommended packages,
/// Chromium brings none: pages would render as boxes).
const PACKAGES: [&str; 2] = ["chromium", "fonts-liberation"];

/// Installs Chromium when it is missing: one line per step on the terminal, apt's own output in
/// a log file, named (with its last lines) only when a step fails.
fn ensure_chromium() -> anyhow::Result<()> {
    if std::path::Path::new(pap_browser::chromium::CHROMIUM).exists() {
        return Ok(());
    }
    let log_path = std::env::temp_dir().join("pap-demo-install.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    println!(
        "Chromium is missing: installing Debian's {} (no recommended packages; log: {})",
        PACKAGES.join(" and "),
        log_path.display()
    );
    let install: Vec<&str> = ["install", "-y", "--no-install-recommends"]
        .into_iter()
        .chain(PACKAGES)
        .collect();
    for (what, args) in [("updating the package lists", vec!["update"]), ("installing", install)] {
        println!("  {what}…");
        let status = std::process::Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log.try_clone()?)
            .status()
            .context("running apt-get (installing needs root: sudo, or install chromium yourself)")?;
        if !status.success() {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for line in &lines[lines.len().saturating_sub(15)..] {
                eprintln!("  | {line}");
            }
            bail!("apt-get failed {what}; the whole log is {}", log_path.display());
        }
    }
    Ok(())
}

/// As root, the agent's Chromium runs sandboxed as an unprivileged user: the demo's state
/// directory is a new one each run, so it uses the shared one
/// (`pap_browser::chromium::BROWSER_USER`), created here, once, if it is missing.
fn ensure_browser_user() -> anyhow::Result<()> {
    use pap_browser::chromium::{BROWSER_USER, BrowserUser, SandboxError};
    match BrowserUser::shared() {
        Err(SandboxError::NoUser { name }) if name == BROWSER_USER => {
            println!("creating the system user {name}: as root, the agent's Chromium runs sandboxed as it");
            let status = std::process::Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    BROWSER_USER,
                ])
                .status()
                .context("running useradd")?;
            if !status.success() {
                bail!("useradd could not create {name}");
            }
            Ok(())
        }
        other => other.map(|_| ()).map_err(Into::into),
    }
}

struct Clock(Instant);

impl Clock {
    fn step(&self, what: &str) {
        println!("{:>7.0} ms  {what}", self.0.elapsed().as_secs_f64() * 1_000.0);
    }
}

async fn story(host: &BrowserHost, work: &std::path::Path) -> anyhow::Result<()> {
    let clock = Clock(Instant::now());
    let certs =
        pap_net::dev_certs::write_dev_certs(&work.join("certs"), &["shop.example".into(), "atlas.example".into()])?;
    let (cert_pem, key_pem) = (std::fs::read(&certs.cert)?, std::fs::read(&certs.key)?);
    let ca = rustls_pemfile::certs(&mut &std::fs::read(&certs.ca)?[..])
        .next()
        .context("the CA")??;

    // The agent and its public documents.
    let identity = Arc::new(Identity::init(
        &work.join("agent"),
        CompanyDomain::try_from("atlas.example")?,
        "Atlas",
        &SystemRng,
    )?);
    let documents = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let documents_addr = documents.local_addr()?;
    tokio::spawn(
        axum::serve(
            TlsListener::new(documents, &cert_pem, &key_pem)?,
            documents_router(identity.clone()),
        )
        .into_future(),
    );

    // The company, with its embedded store, reaching the agent's documents on 127.0.0.1.
    let config = CompanyConfig::parse(include_str!("../../../company/shop/shop.example.toml"))?;
    let agents = [("atlas.example".to_owned(), documents_addr)].into();
    let LocalCompany { company: _, addr } = LocalCompany::start(config, &certs, agents, |router| router).await?;
    clock.step(&format!(
        "Shop Example is up at https://shop.example (127.0.0.1:{}), agent {} created",
        addr.port(),
        identity.client_id()
    ));

    let client_config = ClientConfig {
        extra_roots: vec![ca],
        connect: [("shop.example".to_owned(), addr)].into(),
    };
    let client = PapClient::new(identity, &client_config, Arc::new(SystemClock), Arc::new(SystemRng))?;
    let shop = client.discover(&CompanyDomain::try_from("shop.example")?).await?;
    let mut session = client
        .start_session(&shop, &new_pairwise_user(&SystemRng), client.new_dpop_key()?)
        .await?;
    clock.step(&format!("PAP Session {} started (signed out)", session.session_id));

    // The user, in their own HTTP client (never the agent's browser), approves on the device page.
    let device = client.device_begin(&shop, &["orders:read", "orders:write"]).await?;
    let user_http = plain_http_client(trust_roots(&client_config.extra_roots)?, &client_config.connect)
        .map_err(anyhow::Error::msg)?;
    approve_on_device_page(&user_http, "https://shop.example", &device.user_code, "ada", PASSWORD)
        .await
        .map_err(anyhow::Error::msg)?;
    client.device_wait(&shop, &mut session, &device).await?;
    clock.step(&format!(
        "the user (ada) approved code {} on the company's device page: signed in",
        device.user_code
    ));

    let operation = client
        .propose(
            &shop,
            &session,
            "POST",
            "/api/orders/ord_7Hk2/exchanges",
            &serde_json::json!({}),
        )
        .await?;
    let page_url = HttpsUrl::parse(operation.url.as_deref().context("the operation has no page")?)?;
    clock.step(&format!("operation proposed: {}", operation.summary));

    let mut browser_config = ChromiumConfig::new(work.join("agent"));
    // A throwaway state directory on each run: the shared browser user, not one per run.
    browser_config.browser_user = BrowserUserPolicy::shared();
    browser_config.test_network = TestNetwork {
        map: [("shop.example".to_owned(), addr)].into(),
        spki_pins: vec![spki_pin(&cert_pem)?],
    };
    // shop.example is where the person decides (AIP-7): the browser sends no state-changing
    // request there but the join's own and the person's.
    browser_config.persons = Persons::new(Arc::new(StaticSites::new(["shop.example"])));
    let browser = host.launch(&browser_config, INSTANCE, &|_| {}).await?.browser;
    let page = browser.new_page().await?;
    clock.step("the agent's own Chromium is running");
    // The join needs a grant (AIP-63 C1): the person, on the operator's channel, grants the
    // agent's browser shop.example; the agent takes its permit.
    let consent =
        pap_browser::consent::ConsentHost::open(&work.join("agent"), Arc::new(SystemClock), Arc::new(SystemRng))?;
    consent.grant(
        &pap_browser::consent::Operator::from_operator_channel("demo"),
        pap_browser::consent::GrantRequest::native_login(INSTANCE, &["shop.example"]),
    )?;
    let permit = consent.permit_join(&pap_browser::consent::Caller::local_agent(), "shop.example")?;
    clock.step("the person granted the agent's browser shop.example (a grant record in the consent ledger)");
    let joined = join(
        &client,
        &shop,
        &session,
        &page_url,
        pap_agent::JoinTab::New(&page),
        &permit,
        &browser_config.persons,
        Duration::from_secs(15),
    )
    .await?;
    clock.step(&format!(
        "the browser joined the Session and landed on {} ({})",
        joined.landed, joined.status
    ));

    let shot = screenshot_path();
    std::fs::write(
        &shot,
        page.screenshot(chromiumoxide::page::ScreenshotParams::builder().build())
            .await?,
    )?;
    clock.step(&format!("the operation page, shown in the Session: {}", shot.display()));

    // The person confirms, in a tab the person holds: in this demo no tool drives the browser,
    // so the joined tab is handed to the person as it is. (The MCP host opens a tab of the
    // person's own instead, which no tool has a handle to: `ToolHost::persons_page`.)
    let persons_hold = browser_config
        .persons
        .hold_for_person(page.target_id().inner().clone())?;
    click_and_land(&page, "button[value=confirm]", Duration::from_secs(15)).await?;
    drop(persons_hold);
    clock.step("the person clicked the confirm button on the page");
    let read = client.read_operation(&shop, &session, &operation.operation_id).await?;
    clock.step(&format!(
        "read back through the operations endpoint: {}",
        read.state.as_str()
    ));

    client
        .revoke(&shop, session.account_token.as_ref().context("no Account Token")?)
        .await?;
    let mut responses = page.event_listener::<EventResponseReceived>().await?;
    page.reload().await?;
    let status = next_document_status(&mut responses).await;
    clock.step(&format!(
        "signed out: the page now answers {}",
        status.map_or("nothing".into(), |s| s.to_string())
    ));
    drop((page, browser));
    host.stop(INSTANCE, Duration::from_secs(2)).await?;
    clock.step("the browser stopped; done");
    Ok(())
}

fn screenshot_path() -> PathBuf {
    std::env::var_os("PAP_DEMO_SCREENSHOT").map_or_else(
        || std::env::temp_dir().join("pap-demo-operation-page.png"),
        PathBuf::from,
    )
}

/// The status of the next document response, within 10 s.
async fn next_document_status(
    events: &mut chromiumoxide::listeners::EventStream<EventResponseReceived>,
) -> Option<i64> {
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if event.r#type == ResourceType::Document {
                return Some(event.response.status);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
}
