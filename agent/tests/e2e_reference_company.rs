//! End to end against our reference company (in process), over real TLS on 127.0.0.1, with
//! real Chromium: the story of `support::story`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use std::sync::Arc;

use pap_company::{CompanyConfig, HttpClientResolver, ReferenceCompany, ResolverConfig};
use pap_shared::{SystemClock, SystemRng};
use support::{Captured, Stage, Target, approve_on_device_page, story};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_story_against_the_reference_company_in_chromium() {
    let logs = Captured::install();
    let stage = Stage::new("e2e-rust-company", &["shop.example", "atlas.example"]).await;

    // The company, over TLS, reaching the agent's documents through its test allow-list.
    let resolver = ResolverConfig {
        extra_roots: vec![stage.ca_der.clone()],
        overrides: [("atlas.example".to_owned(), stage.documents_addr)].into(),
        ..ResolverConfig::default()
    };
    let clock = Arc::new(SystemClock);
    let clients = Arc::new(HttpClientResolver::new(resolver, clock.clone()).unwrap());
    let config = CompanyConfig::parse(include_str!("../../company/shop.example.toml")).unwrap();
    let company = ReferenceCompany::new(config, clock, Arc::new(SystemRng), clients);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = pap_company::load_server_config(&stage.cert, &stage.key).unwrap();
    tokio::spawn(pap_company::serve_tls(
        listener,
        company.router(),
        tls,
        std::future::pending(),
    ));

    let ca = stage.ca_der.clone();
    let counter = company.clone();
    let target = Target {
        domain: "shop.example",
        addr,
        proposal_path: "/api/orders/ord_7Hk2/exchanges",
        approve: Box::new(move |code| {
            let ca = ca.clone();
            Box::pin(async move {
                approve_on_device_page(&ca, "shop.example", addr, &code, "ada", "correct horse battery staple").await;
            })
        }),
        performed: Box::new(move |id| {
            let count = u64::from(counter.performed(&id).unwrap_or(0));
            Box::pin(async move { count })
        }),
    };
    story(&stage, &target, &logs).await;
    assert!(
        logs.text().contains("browser joined its Session"),
        "the company logged the join"
    );
    std::fs::remove_dir_all(&stage.work).unwrap();
}
