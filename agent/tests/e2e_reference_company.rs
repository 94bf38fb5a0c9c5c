//! End to end against our reference company, over real TLS on 127.0.0.1, with real Chromium:
//! discover, Session, Device Sign-In (approved by the user, here the company's operator hook),
//! propose, join in Chromium, the operation page shown in the Session (screenshot saved), the
//! confirm button clicked in Chromium, the operation read back `succeeded`, sign-out, the page
//! gone. From the CDP network events: the assertion is in no URL, `Referer` or history entry;
//! the logs hold neither the assertion nor the cookie value.

#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "tests fail loudly and report where artefacts are"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::network::{EventRequestWillBeSent, EventResponseReceived, ResourceType};
use chromiumoxide::cdp::browser_protocol::page::GetNavigationHistoryParams;
use futures_util::StreamExt as _;
use pap_agent::{
    BrowserHost, ChromiumConfig, ClientConfig, Identity, PapClient, TestNetwork, TlsListener, click_and_land,
    documents_router, join, new_pairwise_user, spki_pin,
};
use pap_company::{CompanyConfig, HttpClientResolver, ReferenceCompany, ResolverConfig};
use pap_shared::{CompanyDomain, HttpsUrl, OperationState, SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

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

fn artefacts() -> std::path::PathBuf {
    let dir = std::env::var_os("PAP_ARTIFACTS").map_or_else(|| std::env::temp_dir().join("pap-artifacts"), Into::into);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_story_against_the_reference_company_in_chromium() {
    let logs = Captured::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_env_filter(pap_agent::log_filter("debug"))
            .with_ansi(false)
            .finish(),
    )
    .unwrap();

    let work = std::env::temp_dir().join(format!("pap-e2e-{}", std::process::id()));
    let certs =
        pap_company::write_dev_certs(&work.join("certs"), &["shop.example".into(), "atlas.example".into()]).unwrap();
    let cert_pem = std::fs::read(&certs.cert).unwrap();
    let key_pem = std::fs::read(&certs.key).unwrap();
    let ca_der: CertificateDer<'static> = rustls_pemfile::certs(&mut &std::fs::read(&certs.ca).unwrap()[..])
        .next()
        .unwrap()
        .unwrap();

    // The agent's documents, over TLS, where the company will fetch them.
    let identity =
        Arc::new(Identity::ephemeral(CompanyDomain::try_from("atlas.example").unwrap(), "Atlas", &SystemRng).unwrap());
    let documents = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let documents_addr = documents.local_addr().unwrap();
    let listener = TlsListener::new(documents, &cert_pem, &key_pem).unwrap();
    tokio::spawn(axum::serve(listener, documents_router(&identity)).into_future());

    // The company, over TLS, reaching the agent's documents through its test allow-list.
    let resolver = ResolverConfig {
        extra_roots: vec![ca_der.clone()],
        overrides: [("atlas.example".to_owned(), documents_addr)].into(),
        ..ResolverConfig::default()
    };
    let clock = Arc::new(SystemClock);
    let clients = Arc::new(HttpClientResolver::new(resolver, clock.clone()).unwrap());
    let config = CompanyConfig::parse(include_str!("../../company/shop.example.toml")).unwrap();
    let company = ReferenceCompany::new(config, clock.clone(), Arc::new(SystemRng), clients);
    let company_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let company_addr = company_listener.local_addr().unwrap();
    let tls = pap_company::load_server_config(&certs.cert, &certs.key).unwrap();
    tokio::spawn(pap_company::serve_tls(
        company_listener,
        company.router(),
        tls,
        std::future::pending(),
    ));

    // The agent's PAP client: the test CA, and shop.example dialled at the company's port.
    let client_config = ClientConfig {
        extra_roots: vec![ca_der],
        connect: [("shop.example".to_owned(), company_addr)].into(),
    };
    let client = PapClient::new(identity.clone(), &client_config, clock, Arc::new(SystemRng)).unwrap();
    let domain = CompanyDomain::try_from("shop.example").unwrap();
    let shop = client.discover(&domain).await.unwrap();
    assert_eq!(shop.name, "Shop Example");

    let user = new_pairwise_user(&SystemRng);
    let mut session = client
        .start_session(&shop, &user, client.new_dpop_key().unwrap())
        .await
        .unwrap();
    assert!(!session.signed_in);
    let device = client
        .device_begin(&shop, &["orders:read", "orders:write"])
        .await
        .unwrap();
    company.approve_device(&device.user_code, "acct_ada", None).unwrap();
    client.device_wait(&shop, &mut session, &device).await.unwrap();
    assert!(session.signed_in);

    let operation = client
        .propose(
            &shop,
            &session,
            "POST",
            "/api/orders/ord_7Hk2/exchanges",
            &serde_json::json!({}),
        )
        .await
        .unwrap();
    let page_url = HttpsUrl::parse(operation.url.as_deref().unwrap()).unwrap();

    // The agent's own Chromium, reaching shop.example on 127.0.0.1 with the test leaf pinned.
    let mut browser_config = ChromiumConfig::new(work.join("state"));
    browser_config.test_network = TestNetwork {
        map: [("shop.example".to_owned(), company_addr)].into(),
        spki_pins: vec![spki_pin(&cert_pem).unwrap()],
    };
    let host = BrowserHost::new();
    let browser = host.launch(&browser_config, "e2e", &|_| {}).await.unwrap();
    let again = host.launch(&browser_config, "e2e", &|_| {}).await.unwrap();
    assert_eq!(browser.pid(), again.pid(), "launch is idempotent per instance key");
    drop(again);
    let page = browser.new_page().await.unwrap();
    let mut requests = page.event_listener::<EventRequestWillBeSent>().await.unwrap();

    let outcome = join(&client, &shop, &session, &page_url, &page, Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(outcome.status, 200);
    assert_eq!(outcome.endpoint.as_str(), "https://shop.example/poppy/browser-session");
    let html = page.content().await.unwrap();
    assert!(
        html.contains("Shop Example") && html.contains("data-state=\"proposed\""),
        "{html}"
    );
    let shot = artefacts().join("e2e-reference-company-operation-page.png");
    std::fs::write(
        &shot,
        page.screenshot(chromiumoxide::page::ScreenshotParams::builder().build())
            .await
            .unwrap(),
    )
    .unwrap();
    eprintln!("screenshot: {}", shot.display());

    let cookies = page.get_cookies().await.unwrap();
    let cookie = cookies
        .iter()
        .find(|c| c.name == "__Host-poppy_session")
        .expect("the company's cookie");
    assert!(cookie.secure && cookie.http_only);

    // The user's confirm, clicked in Chromium on the page's own button.
    let status = click_and_land(&page, "button[value=confirm]", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(page.content().await.unwrap().contains("data-state=\"succeeded\""));
    let read = client
        .read_operation(&shop, &session, &operation.operation_id)
        .await
        .unwrap();
    assert_eq!(read.state, OperationState::Succeeded);
    assert_eq!(company.performed(&operation.operation_id), Some(1));

    // Sign-out: the very next page request is refused.
    client
        .revoke(&shop, session.account_token.as_ref().unwrap())
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

    // What the browser sent and remembers: the assertion (a JWS starts `eyJ`) in no URL, no
    // Referer, no history entry; the join itself a POST to the exact endpoint.
    let history = page.execute(GetNavigationHistoryParams::default()).await.unwrap();
    for entry in &history.result.entries {
        assert!(!entry.url.contains("eyJ"), "history holds {}", entry.url);
    }
    drop(page);
    host.stop("e2e", Duration::from_secs(2)).await.unwrap();
    let mut posted_to_endpoint = false;
    while let Some(event) = requests.next().await {
        let headers = serde_json::to_value(&event.request.headers).unwrap().to_string();
        assert!(!event.request.url.contains("eyJ"), "a URL holds the assertion");
        assert!(!event.document_url.contains("eyJ"));
        assert!(
            !headers.contains("eyJ"),
            "a header (Referer?) holds the assertion: {headers}"
        );
        if event.request.url == "https://shop.example/poppy/browser-session" {
            assert_eq!(event.request.method, "POST");
            posted_to_endpoint = true;
        }
    }
    assert!(posted_to_endpoint, "the join was a POST to the published endpoint");

    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(!logged.contains("eyJ"), "a JWS reached the logs");
    let leaks: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains(&cookie.value))
        .map(|l| &l[..l.len().min(300)])
        .collect();
    assert!(leaks.is_empty(), "the cookie value reached the logs: {leaks:#?}");
    assert!(logged.contains("browser joined its Session"));
    std::fs::remove_dir_all(&work).unwrap();
}
