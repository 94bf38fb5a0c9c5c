//! The end-to-end story both e2e tests tell, against whichever company: discover, Session,
//! Device Sign-In approved by the user, propose, join in the agent's own Chromium, the page
//! shown (screenshot), confirm clicked on the page, the operation read back `succeeded` and
//! performed once, sign-out, the page gone; then what the browser sent and what was logged.
#![allow(dead_code, unreachable_pub, reason = "each test binary uses part of the fixtures")]
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "fixtures fail the test loudly and say where artefacts are"
)]

pub mod cli_agent;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::network::{EventRequestWillBeSent, EventResponseReceived, ResourceType};
use chromiumoxide::cdp::browser_protocol::page::GetNavigationHistoryParams;
use futures_util::StreamExt as _;
use pap_agent::{ClientConfig, Identity, PapClient, documents_router, join, new_pairwise_user, spki_pin};
use pap_browser::chromium::{BrowserHost, ChromiumConfig, TestNetwork, click_and_land};
use pap_net::listener::TlsListener;
use pap_shared::{CompanyDomain, HttpsUrl, OperationState, SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

/// Log lines captured from every thread.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

impl Captured {
    /// Installs a DEBUG subscriber with the agent's secret-safe filter, process-wide.
    pub fn install() -> Self {
        let logs = Self::default();
        tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_writer(logs.clone())
                .with_env_filter(pap_browser::chromium::log_filter("debug"))
                .with_ansi(false)
                .finish(),
        )
        .unwrap();
        logs
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// What a page's next navigation answered, watched from before the act that causes it.
pub struct NextDocument {
    responses:
        chromiumoxide::listeners::EventStream<chromiumoxide::cdp::browser_protocol::network::EventResponseReceived>,
    navigated: chromiumoxide::listeners::EventStream<chromiumoxide::cdp::browser_protocol::page::EventFrameNavigated>,
    page: chromiumoxide::Page,
}

impl NextDocument {
    /// Starts watching `page` (before the click that navigates it).
    pub async fn of(page: &chromiumoxide::Page) -> Self {
        Self {
            responses: page.event_listener().await.unwrap(),
            navigated: page.event_listener().await.unwrap(),
            page: page.clone(),
        }
    }

    /// Waits (30 s at most) until the document the act led to answered 200 (after any
    /// redirects), was committed to the page and parsed (`DOMContentLoaded`), not until it
    /// loaded: a page of the console whose picture is an `<input type="image">` streams on. Its
    /// URL.
    pub async fn answered(mut self) -> String {
        use chromiumoxide::cdp::browser_protocol::network::ResourceType;
        use futures_util::StreamExt as _;
        tokio::time::timeout(std::time::Duration::from_secs(30), async {
            let url = loop {
                let response = self.responses.next().await.unwrap();
                if response.r#type == ResourceType::Document && !(300..400).contains(&response.response.status) {
                    assert_eq!(response.response.status, 200, "{}", response.response.url);
                    break response.response.url.clone();
                }
            };
            loop {
                let event = self.navigated.next().await.expect("the page closed");
                if event.frame.parent_id.is_none() && event.frame.url == url {
                    break;
                }
            }
            // Parsed: the document at that address says so (a script may still run in the
            // document it replaced for a moment, and answer for that one: asked again).
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(20));
            let wanted = format!("{url} ");
            loop {
                tick.tick().await;
                let state = self
                    .page
                    .evaluate("location.href + ' ' + document.readyState")
                    .await
                    .ok()
                    .and_then(|v| v.into_value::<String>().ok())
                    .unwrap_or_default();
                if state.strip_prefix(&wanted).is_some_and(|s| s != "loading") {
                    return url;
                }
            }
        })
        .await
        .unwrap()
    }
}

/// Clicks `selector` on `page` (a real mouse click) and waits for the document it leads to
/// ([`NextDocument::answered`]). Its URL.
pub async fn click_until_answered(page: &chromiumoxide::Page, selector: &str) -> String {
    let next = NextDocument::of(page).await;
    // A document just committed may still be replacing the one DevTools resolved the element
    // in ("Could not find node with given id"): the element is found again, within 30 s.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
    loop {
        tick.tick().await;
        let clicked = match page.find_element(selector).await {
            Ok(element) => element.click().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match clicked {
            Ok(()) => break,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "{selector}: {e}"),
        }
    }
    next.answered().await
}

pub fn artefacts() -> PathBuf {
    let dir = std::env::var_os("PAP_ARTIFACTS").map_or_else(|| std::env::temp_dir().join("pap-artifacts"), Into::into);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A scratch directory, the test PKI for `names`, and the agent's documents served over TLS.
pub struct Stage {
    pub work: PathBuf,
    pub cert_pem: Vec<u8>,
    pub ca_pem: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca_der: CertificateDer<'static>,
    pub identity: Arc<Identity>,
    pub documents_addr: SocketAddr,
}

impl Stage {
    pub async fn new(label: &str, names: &[&str]) -> Self {
        let work = std::env::temp_dir().join(format!("pap-{label}-{}", std::process::id()));
        // Made before the certificates' 0700 directory: as root, the agent's Chromium runs as
        // an unprivileged user that must pass through it to the state directory.
        std::fs::create_dir_all(&work).unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let certs = pap_net::dev_certs::write_dev_certs(&work.join("certs"), &names).unwrap();
        let cert_pem = std::fs::read(&certs.cert).unwrap();
        let key_pem = std::fs::read(&certs.key).unwrap();
        let ca_der = rustls_pemfile::certs(&mut &std::fs::read(&certs.ca).unwrap()[..])
            .next()
            .unwrap()
            .unwrap();
        let identity = Arc::new(
            Identity::ephemeral(CompanyDomain::try_from("atlas.example").unwrap(), "Atlas", &SystemRng).unwrap(),
        );
        let documents = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let documents_addr = documents.local_addr().unwrap();
        let listener = TlsListener::new(documents, &cert_pem, &key_pem).unwrap();
        tokio::spawn(axum::serve(listener, documents_router(identity.clone())).into_future());
        Self {
            work,
            cert_pem,
            ca_pem: certs.ca,
            cert: certs.cert,
            key: certs.key,
            ca_der,
            identity,
            documents_addr,
        }
    }
}

pub type Approve = Box<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;
pub type Performed = Box<dyn Fn(String) -> Pin<Box<dyn Future<Output = u64> + Send>> + Send + Sync>;

/// The company under test.
pub struct Target {
    pub domain: &'static str,
    pub addr: SocketAddr,
    pub proposal_path: &'static str,
    /// Plays the user approving a Device Sign-In user code.
    pub approve: Approve,
    /// How many times an operation was performed.
    pub performed: Performed,
}

/// The user approving on the company's `/device` page with their password, from their own
/// HTTP client (not the agent's browser).
pub async fn approve_on_device_page(
    stage_ca: &CertificateDer<'static>,
    domain: &str,
    addr: SocketAddr,
    user_code: &str,
    username: &str,
    password: &str,
) {
    let roots = pap_net::tls::trust_roots(std::slice::from_ref(stage_ca)).unwrap();
    let http = pap_agent::testkit::plain_http_client(roots, &[(domain.to_owned(), addr)].into()).unwrap();
    pap_agent::testkit::approve_on_device_page(&http, &format!("https://{domain}"), user_code, username, password)
        .await
        .unwrap();
}

/// The agent's PAP client for the company `domain` served at `addr`, trusting the stage's CA,
/// and the company discovered.
pub async fn client_for(stage: &Stage, domain: &str, addr: SocketAddr) -> (PapClient, pap_agent::Company) {
    client_on(stage, domain, addr, Arc::new(SystemClock)).await
}

/// [`client_for`] on `clock`.
pub async fn client_on(
    stage: &Stage,
    domain: &str,
    addr: SocketAddr,
    clock: Arc<dyn pap_shared::Clock>,
) -> (PapClient, pap_agent::Company) {
    let config = ClientConfig {
        extra_roots: vec![stage.ca_der.clone()],
        connect: [(domain.to_owned(), addr)].into(),
    };
    let client = PapClient::new(stage.identity.clone(), &config, clock, Arc::new(SystemRng)).unwrap();
    let company = client
        .discover(&CompanyDomain::try_from(domain).unwrap())
        .await
        .unwrap();
    (client, company)
}

/// Tells the whole story against `target`; returns the browser's cookie value for log checks.
pub async fn story(stage: &Stage, target: &Target, logs: &Captured) {
    let (client, company) = client_for(stage, target.domain, target.addr).await;

    let user = new_pairwise_user(&SystemRng);
    let mut session = client
        .start_session(&company, &user, client.new_dpop_key().unwrap())
        .await
        .unwrap();
    assert!(!session.signed_in);
    let device = client
        .device_begin(&company, &["orders:read", "orders:write"])
        .await
        .unwrap();
    (target.approve)(device.user_code.clone()).await;
    client.device_wait(&company, &mut session, &device).await.unwrap();
    assert!(session.signed_in);

    let operation = client
        .propose(&company, &session, "POST", target.proposal_path, &serde_json::json!({}))
        .await
        .unwrap();
    let page_url = HttpsUrl::parse(operation.url.as_deref().unwrap()).unwrap();

    let mut browser_config = ChromiumConfig::new(stage.work.join("state"));
    browser_config.test_network = TestNetwork {
        map: [(target.domain.to_owned(), target.addr)].into(),
        spki_pins: vec![spki_pin(&stage.cert_pem).unwrap()],
    };
    let host = BrowserHost::new();
    let launched = host.launch(&browser_config, "e2e", &|_| {}).await.unwrap();
    let again = host.launch(&browser_config, "e2e", &|_| {}).await.unwrap();
    // L2: the second launch returns the same browser and says it was already running.
    assert!(!launched.was_already_running && again.was_already_running);
    let browser = launched.browser;
    assert_eq!(
        browser.pid(),
        again.browser.pid(),
        "launch is idempotent per instance key"
    );
    let page = browser.new_page().await.unwrap();
    let mut requests = page.event_listener::<EventRequestWillBeSent>().await.unwrap();

    let permit = permit(&stage.work.join("state"), target.domain);
    let outcome = join(
        &client,
        &company,
        &session,
        &page_url,
        pap_agent::JoinTab::New(&page),
        &permit,
        &browser_config.persons,
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, 200);
    assert_eq!(outcome.landed, page_url);
    let html = page.content().await.unwrap();
    assert!(
        html.contains(&company.name) && html.contains("data-state=\"proposed\""),
        "{html}"
    );
    let shot = artefacts().join(format!("e2e-{}-operation-page.png", target.domain));
    std::fs::write(
        &shot,
        page.screenshot(chromiumoxide::page::ScreenshotParams::builder().build())
            .await
            .unwrap(),
    )
    .unwrap();
    eprintln!("screenshot of the operation page in the Session: {}", shot.display());
    let cookies = page.get_cookies().await.unwrap();
    let cookie = cookies
        .iter()
        .find(|c| c.name == "__Host-poppy_session")
        .expect("the company's session cookie")
        .clone();
    assert!(cookie.secure && cookie.http_only);

    // The user's confirm, clicked in Chromium on the page's own button.
    let status = click_and_land(&page, "button[value=confirm]", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(page.content().await.unwrap().contains("data-state=\"succeeded\""));
    let read = client
        .read_operation(&company, &session, &operation.operation_id)
        .await
        .unwrap();
    assert_eq!(read.state, OperationState::Succeeded);
    assert_eq!(
        (target.performed)(operation.operation_id.clone()).await,
        1,
        "performed exactly once"
    );

    // Sign-out: the very next page request is refused.
    client
        .revoke(&company, session.account_token.as_ref().unwrap())
        .await
        .unwrap();
    let mut responses = page.event_listener::<EventResponseReceived>().await.unwrap();
    page.reload().await.unwrap();
    let status = loop {
        let event = responses.next().await.unwrap();
        if event.r#type == ResourceType::Document {
            break event.response.status;
        }
    };
    assert!(
        [401, 403, 404].contains(&status),
        "after sign-out the page answered {status}"
    );

    // The assertion (a compact JWS: `holds_jws`) in no URL, no header (`Referer`), no history
    // entry; the join a POST to the published endpoint.
    let history = page.execute(GetNavigationHistoryParams::default()).await.unwrap();
    for entry in &history.result.entries {
        // The URL itself is not printed: it could hold the assertion.
        assert!(!holds_jws(&entry.url), "a history entry holds the assertion");
    }
    drop(page);
    drop((browser, again));
    host.stop("e2e", Duration::from_secs(2)).await.unwrap();
    let endpoint = company.browser_session_endpoint.as_ref().unwrap().as_str().to_owned();
    let mut posted = false;
    while let Some(event) = requests.next().await {
        let headers = serde_json::to_value(&event.request.headers).unwrap().to_string();
        assert!(!holds_jws(&event.request.url), "a URL holds the assertion");
        assert!(!holds_jws(&event.document_url), "a document URL holds the assertion");
        assert!(!holds_jws(&headers), "a request header holds the assertion");
        if event.request.url == endpoint {
            assert_eq!(event.request.method, "POST");
            posted = true;
        }
    }
    assert!(posted, "the join was a POST to the published endpoint");

    let logged = logs.text();
    assert!(!holds_jws(&logged), "a JWS reached the logs");
    assert!(!logged.contains(&cookie.value), "the cookie value reached the logs");
}

/// Whether `text` holds a compact JWS, whole or cut short. Either `eyJ` (the base64url of a
/// JSON object's `{"`), base64url characters, a dot, more of them and a second dot; or a first
/// segment that decodes to a JOSE header (it names `"alg"`) followed by a dot: the start of an
/// assertion that a log or a URL cut short. A bare `eyJ` is not enough: a random id, cookie
/// value or port in a URL, header or log holds one about once in 262,144 places, and a check
/// for it alone failed tests by chance. Random bytes decode to `"alg"` about once in 2^40 places.
pub fn holds_jws(text: &str) -> bool {
    use base64::Engine as _;
    let base64url = |c: &&u8| c.is_ascii_alphanumeric() || **c == b'-' || **c == b'_';
    let segment = |bytes: &[u8]| bytes.iter().take_while(base64url).count();
    let names_alg = |header: &[u8]| {
        // The longest prefix base64url decodes whole: a cut-short header still shows its start.
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&header[..header.len() / 4 * 4])
            .is_ok_and(|json| json.windows(5).any(|w| w == b"\"alg\""))
    };
    text.match_indices("eyJ").any(|(at, _)| {
        let rest = &text.as_bytes()[at..];
        let header = segment(rest);
        let Some(after) = rest.get(header + 1..).filter(|_| rest.get(header) == Some(&b'.')) else {
            return false;
        };
        let payload = segment(after);
        (payload > 0 && after.get(payload) == Some(&b'.')) || names_alg(&rest[..header])
    })
}

/// Our reference company in process over TLS on 127.0.0.1, reaching the stage's agent documents
/// through its test allow-list.
pub async fn start_reference_company(stage: &Stage) -> (pap_shop::ReferenceCompany, SocketAddr) {
    start_reference_company_on(stage, Arc::new(SystemClock), |router| router).await
}

/// [`start_reference_company`] on `clock`, with `wrap`'s layers in front of its router.
pub async fn start_reference_company_on(
    stage: &Stage,
    clock: Arc<dyn pap_shared::Clock>,
    wrap: impl FnOnce(axum::Router) -> axum::Router,
) -> (pap_shop::ReferenceCompany, SocketAddr) {
    let config = pap_shop::CompanyConfig::parse(include_str!("../../../../company/shop/shop.example.toml")).unwrap();
    let certs = pap_net::dev_certs::DevCerts {
        ca: stage.ca_pem.clone(),
        cert: stage.cert.clone(),
        key: stage.key.clone(),
    };
    let agents = [("atlas.example".to_owned(), stage.documents_addr)].into();
    let local = pap_shop::LocalCompany::start_with_clock(config, &certs, agents, clock, wrap)
        .await
        .unwrap();
    (local.company, local.addr)
}

/// The operator grants the agent's browsers `domain` (AIP-63 C1: the join needs a grant) and the
/// agent takes its permit.
pub fn permit(state_dir: &std::path::Path, domain: &str) -> pap_browser::consent::JoinPermit {
    use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator};
    let consent = ConsentHost::open(
        state_dir,
        std::sync::Arc::new(pap_shared::SystemClock),
        std::sync::Arc::new(pap_shared::SystemRng),
    )
    .unwrap();
    consent
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::native_login("e2e", &[domain]),
        )
        .unwrap();
    consent.permit_join(&Caller::local_agent(), domain).unwrap()
}

/// A signed-in Session with our reference company (the sign-in approved through its operator
/// API) and an operation proposed on it: the Session and the operation's page.
pub async fn signed_in_with_operation(
    company: &pap_shop::ReferenceCompany,
    client: &PapClient,
    shop: &pap_agent::Company,
) -> (pap_agent::Session, HttpsUrl) {
    let mut session = client
        .start_session(shop, &new_pairwise_user(&SystemRng), client.new_dpop_key().unwrap())
        .await
        .unwrap();
    let device = client
        .device_begin(shop, &["orders:read", "orders:write"])
        .await
        .unwrap();
    company
        .approve_device(&device.user_code, "acct_ada", None)
        .await
        .unwrap();
    client.device_wait(shop, &mut session, &device).await.unwrap();
    let operation = client
        .propose(
            shop,
            &session,
            "POST",
            "/api/orders/ord_7Hk2/exchanges",
            &serde_json::json!({}),
        )
        .await
        .unwrap();
    let page = HttpsUrl::parse(operation.url.as_deref().unwrap()).unwrap();
    (session, page)
}

/// The agent's browser configuration for the stage's company at `addr`: its name routed there,
/// the one leaf the stage's CA issued pinned (never a blanket bypass).
pub fn pinned_browser(stage: &Stage, state_dir: PathBuf, addr: SocketAddr) -> ChromiumConfig {
    let mut config = ChromiumConfig::new(state_dir);
    config.test_network = TestNetwork {
        map: [("shop.example".to_owned(), addr)].into(),
        spki_pins: vec![spki_pin(&stage.cert_pem).unwrap()],
    };
    config
}

/// For the benches: `what`'s p50, least and most of `samples`, in ms, on one line.
#[allow(clippy::print_stdout, reason = "the benches' output")]
pub fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    println!(
        "{what}: p50 {:.1} ms (min {:.1} ms, max {:.1} ms)",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1])
    );
}
