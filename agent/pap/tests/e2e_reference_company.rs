//! End to end against our reference company (in process), over real TLS on 127.0.0.1, with
//! real Chromium: the story of `support::story`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use support::{Captured, Stage, Target, approve_on_device_page, story};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_whole_story_against_the_reference_company_in_chromium() {
    let logs = Captured::install();
    let stage = Stage::new("e2e-rust-company", &["shop.example", "atlas.example"]).await;

    let (company, addr) = support::start_reference_company(&stage).await;

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
            let counter = counter.clone();
            Box::pin(async move { u64::from(counter.performed(&id).await.unwrap().unwrap_or(0)) })
        }),
    };
    story(&stage, &target, &logs).await;
    assert!(
        logs.text().contains("browser joined its Session"),
        "the company logged the join"
    );
    certificate_errors_are_respected(&stage, addr).await;
    std::fs::remove_dir_all(&stage.work).unwrap();
}

/// Without the test leaf pinned, the same browser setup cannot reach the company: Chromium's
/// certificate checks stay on (no blanket bypass).
async fn certificate_errors_are_respected(stage: &Stage, addr: std::net::SocketAddr) {
    use std::time::Duration;

    use pap_agent::{JoinError, join, new_pairwise_user};
    use pap_browser::chromium::{BrowserHost, ChromiumConfig, TestNetwork};
    use pap_shared::{HttpsUrl, SystemRng};

    let (client, shop) = support::client_for(stage, "shop.example", addr).await;
    let session = client
        .start_session(&shop, &new_pairwise_user(&SystemRng), client.new_dpop_key().unwrap())
        .await
        .unwrap();
    let mut config = ChromiumConfig::new(stage.work.join("state-unpinned"));
    config.test_network = TestNetwork {
        map: [("shop.example".to_owned(), addr)].into(),
        spki_pins: Vec::new(),
    };
    let host = BrowserHost::new();
    let browser = host.launch(&config, "unpinned", &|_| {}).await.unwrap().browser;
    let page = browser.new_page().await.unwrap();
    let home = HttpsUrl::parse("https://shop.example/").unwrap();
    let permit = support::permit(&stage.work.join("state-unpinned"), "shop.example");
    let error = join(
        &client,
        &shop,
        &session,
        &home,
        pap_agent::JoinTab::New(&page),
        &permit,
        &config.persons,
        Duration::from_secs(15),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, JoinError::LoadFailed(ref why) if why.contains("CERT")),
        "{error}"
    );
    drop((page, browser));
    host.stop("unpinned", Duration::from_secs(2)).await.unwrap();
}
