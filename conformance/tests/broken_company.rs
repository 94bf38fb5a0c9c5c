//! The runner catches broken companies: our reference company with a deliberately broken layer
//! in front of its browser-session route fails exactly the refusal case, with a message naming
//! the requirement; the same company unbroken passes it.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::{Next, from_fn};
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use pap_agent::{ClientConfig, Identity, PapClient, documents_router};
use pap_browser::chromium::{BrowserHost, ChromiumConfig};
use pap_conformance::pap::{self, Approver, Context, Outcome, Scenario};
use pap_net::listener::TlsListener;
use pap_shared::{CompanyDomain, SystemClock, SystemRng};
use pap_shop::{CompanyConfig, LocalCompany};

const REFUSED: &str = "lifecycle.browser-assertion-refused";

/// The 303 answers given, by request body.
type Answered = HashMap<Vec<u8>, (StatusCode, http::HeaderMap)>;

/// A test's directory (certificates, the browser's state), removed when dropped: after the
/// context, which is declared after it.
struct Work(std::path::PathBuf);

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A company whose public router is `wrap`ped by a broken layer, and a runner context for it.
async fn context_for(label: &str, wrap: impl FnOnce(Router) -> Router) -> (Work, Context) {
    let work = std::env::temp_dir().join(format!("pap-broken-{label}-{}", std::process::id()));
    let certs = pap_net::dev_certs::write_dev_certs(&work, &["shop.example".into(), "atlas.example".into()]).unwrap();
    let (cert_pem, key_pem) = (std::fs::read(&certs.cert).unwrap(), std::fs::read(&certs.key).unwrap());
    let ca = rustls_pemfile::certs(&mut &std::fs::read(&certs.ca).unwrap()[..])
        .next()
        .unwrap()
        .unwrap();

    let identity =
        Arc::new(Identity::ephemeral(CompanyDomain::try_from("atlas.example").unwrap(), "Atlas", &SystemRng).unwrap());
    let documents = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let documents_addr = documents.local_addr().unwrap();
    tokio::spawn(
        axum::serve(
            TlsListener::new(documents, &cert_pem, &key_pem).unwrap(),
            documents_router(identity.clone()),
        )
        .into_future(),
    );

    let config = CompanyConfig::parse(include_str!("../../company/shop/shop.example.toml")).unwrap();
    let agents = [("atlas.example".to_owned(), documents_addr)].into();
    let addr = LocalCompany::start(config, &certs, agents, wrap).await.unwrap().addr;

    let client = PapClient::new(
        identity,
        &ClientConfig {
            extra_roots: vec![ca.clone()],
            connect: [("shop.example".to_owned(), addr)].into(),
        },
        Arc::new(SystemClock),
        Arc::new(SystemRng),
    )
    .unwrap();
    let shop = client
        .discover(&CompanyDomain::try_from("shop.example").unwrap())
        .await
        .unwrap();
    let roots = pap_net::tls::trust_roots(&[ca]).unwrap();
    let http = pap_agent::testkit::plain_http_client(roots, &[("shop.example".to_owned(), addr)].into()).unwrap();
    let scenario = Scenario::parse(include_str!("../interop/shop.example.scenario.json")).unwrap();
    let context = Context {
        client,
        company: shop,
        scenario,
        approver: Approver::Operator,
        operator: None,
        http,
        browser: ChromiumConfig::new(work.join("state")),
        host: BrowserHost::new(),
    };
    (Work(work), context)
}

async fn refused_case(ctx: &Context) -> pap::CaseResult {
    let report = pap::run(ctx, &[REFUSED.to_owned()]).await;
    assert_eq!(report.results.len(), 1);
    report.results[0].clone()
}

#[tokio::test]
async fn the_unbroken_company_passes_the_refusal_case() {
    let (_work, ctx) = context_for("control", |router| router).await;
    let result = refused_case(&ctx).await;
    assert_eq!(result.outcome, Outcome::Passed, "{}", result.message);
}

#[tokio::test]
async fn a_company_that_accepts_a_replay_fails_on_pap_5_07() {
    // In front of the route: a body seen before with a 303 gets that 303 again, a new cookie
    // and all, without the verifier.
    let seen: Arc<Mutex<Answered>> = Arc::default();
    let (_work, ctx) = context_for("replay", move |router| {
        router.layer(from_fn(move |request: Request, next: Next| {
            let seen = seen.clone();
            async move {
                if request.uri().path() != "/poppy/browser-session" {
                    return next.run(request).await;
                }
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, 64 * 1024).await.unwrap().to_vec();
                if let Some((status, headers)) = seen.lock().unwrap().get(&bytes).cloned() {
                    let mut replay = Response::new(Body::empty());
                    *replay.status_mut() = status;
                    *replay.headers_mut() = headers;
                    return replay;
                }
                let response = next.run(Request::from_parts(parts, Body::from(bytes.clone()))).await;
                if response.status() == StatusCode::SEE_OTHER {
                    seen.lock()
                        .unwrap()
                        .insert(bytes, (response.status(), response.headers().clone()));
                }
                response
            }
        }))
    })
    .await;
    let result = refused_case(&ctx).await;
    assert_eq!(result.outcome, Outcome::Failed);
    assert!(result.message.starts_with("PAP-5-07:"), "{}", result.message);
    assert!(result.message.contains("replayed"), "{}", result.message);
}

#[tokio::test]
async fn a_company_that_sets_a_cookie_on_refusal_fails_naming_the_first_refusal() {
    let (_work, ctx) = context_for("cookie", |router| {
        router.layer(from_fn(|request: Request, next: Next| async move {
            let mut response = next.run(request).await;
            if response.status() == StatusCode::BAD_REQUEST {
                response
                    .headers_mut()
                    .append(header::SET_COOKIE, HeaderValue::from_static("lb=1; Path=/; Secure"));
            }
            response
        }))
    })
    .await;
    let result = refused_case(&ctx).await;
    assert_eq!(result.outcome, Outcome::Failed);
    // The first refusal the runner sends is a foreign return_to.
    assert!(
        result.message.starts_with("PAP-5-09:") && result.message.contains("Set-Cookie"),
        "{}",
        result.message
    );
}
