//! End to end against our reference company (in process), over real TLS on 127.0.0.1, with
//! real Chromium: the story of `support::story`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use support::{Captured, Stage, Target, approve_on_device_page, story};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
