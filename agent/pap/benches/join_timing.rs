//! A cold join (Chromium launched, its first tab opened, the join in it; the launch split into
//! the steps it reports), and a warm join (browser running) from signing the assertion to the
//! landed page loaded, against our reference company over TLS on 127.0.0.1,
//! five ways, run in turn:
//!
//! - in a new tab, as the tools (`pap_join`) and `pap-agent join` run it: the tab opened, then
//!   the join, which builds its form in the tab's first document ([`JoinTab::New`]);
//! - in a new tab treated as used, as the tools ran it before [`JoinTab::New`]: the tab opened,
//!   then sent to another `about:blank`;
//! - in the tab the previous join landed in ([`JoinTab::Used`]): the join first leaves the
//!   company's page for a fresh `about:blank`;
//! - in a tab opened ahead, before the clock starts, as the tools' join leaves one for the next
//!   join of its context (`ToolHost::open_ahead`): the join alone ([`JoinTab::New`]), at once
//!   and 0.5 s after the tab opened (a next join that comes after a pause, the tab settled).
//!
//! Run with `cargo bench -p pap-agent --bench join_timing` (optionally `-- RUNS`, default 20).
//! Prints p50, min and max of each, and of each stage.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use pap_agent::{JoinTab, join};
use pap_browser::chromium::BrowserHost;
use support::{Stage, report};

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(runs));
}

async fn run(runs: usize) {
    let stage = Stage::new("join-timing", &["shop.example", "atlas.example"]).await;
    let (company, addr) = support::start_reference_company(&stage).await;
    let (client, shop) = support::client_for(&stage, "shop.example", addr).await;
    let (session, page_url) = support::signed_in_with_operation(&company, &client, &shop).await;

    let config = support::pinned_browser(&stage, stage.work.join("state"), addr);

    let permit = support::permit(&stage.work.join("state"), "shop.example");
    // The cold join: a browser launched, its first tab opened, the join in it. Each launch step
    // the launch reports is stamped as it comes, to split the launch into its stages.
    let (mut cold, mut cold_launch, mut cold_join_stages) = (Vec::new(), Vec::new(), Vec::new());
    let mut launch_steps: Vec<Vec<(String, Duration)>> = Vec::new();
    let mut first_tab = Vec::new();
    for i in 0..runs {
        let host = BrowserHost::new();
        let instance = format!("cold{i}");
        let steps = std::sync::Mutex::new(Vec::new());
        let started = Instant::now();
        let stamp = |step: &str| steps.lock().unwrap().push((step.to_owned(), started.elapsed()));
        let browser = host.launch(&config, &instance, &stamp).await.unwrap().browser;
        let launched = started.elapsed();
        let tab = browser.new_page().await.unwrap();
        first_tab.push(started.elapsed() - launched);
        cold_launch.push(started.elapsed());
        let outcome = join(
            &client,
            &shop,
            &session,
            &page_url,
            JoinTab::New(&tab),
            &permit,
            &config.persons,
            Duration::from_secs(15),
        )
        .await
        .unwrap();
        assert_eq!(outcome.status, 200);
        cold.push(started.elapsed());
        cold_join_stages.push(outcome.stages);
        let mut steps = steps.into_inner().unwrap();
        steps.push(("(the launch returned)".to_owned(), launched));
        launch_steps.push(steps);
        drop((tab, browser));
        host.stop(&instance, Duration::from_secs(2)).await.unwrap();
    }

    let host = BrowserHost::new();
    let browser = host.launch(&config, "warm", &|_| {}).await.unwrap().browser;
    let page = browser.new_page().await.unwrap();
    // Every join here is the same but for its tab; each lands.
    macro_rules! joined {
        ($tab:expr) => {{
            let outcome = join(
                &client,
                &shop,
                &session,
                &page_url,
                $tab,
                &permit,
                &config.persons,
                Duration::from_secs(15),
            )
            .await
            .unwrap();
            assert_eq!(outcome.status, 200);
            outcome.stages
        }};
    }
    let (mut warm, mut stages) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    let (mut fresh, mut fresh_stages, mut opened) = (Vec::new(), Vec::new(), Vec::new());
    let (mut renewed, mut renewed_stages) = (Vec::new(), Vec::new());
    let (mut ahead, mut ahead_stages) = (Vec::new(), Vec::new());
    let (mut settled, mut settled_stages) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let started = Instant::now();
        let tab = browser.new_page().await.unwrap();
        opened.push(started.elapsed());
        fresh_stages.push(joined!(JoinTab::New(&tab)));
        fresh.push(started.elapsed());
        tab.close().await.unwrap();

        // What the tools did before `JoinTab::New`: a new tab sent to another about:blank.
        let started = Instant::now();
        let tab = browser.new_page().await.unwrap();
        renewed_stages.push(joined!(JoinTab::Used(&tab)));
        renewed.push(started.elapsed());
        tab.close().await.unwrap();

        let started = Instant::now();
        stages.push(joined!(JoinTab::Used(&page)));
        warm.push(started.elapsed());

        // A tab opened ahead: opened before the clock starts.
        let tab = browser.new_page().await.unwrap();
        let started = Instant::now();
        ahead_stages.push(joined!(JoinTab::New(&tab)));
        ahead.push(started.elapsed());
        tab.close().await.unwrap();

        // The same, 0.5 s after the tab opened: the tools open a context's tab ahead after a
        // join, and its next join comes later. Think time, not a readiness wait.
        let tab = browser.new_page().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        settled_stages.push(joined!(JoinTab::New(&tab)));
        settled.push(started.elapsed());
        tab.close().await.unwrap();
    }
    drop((page, browser));
    host.stop("warm", Duration::from_secs(2)).await.unwrap();

    println!(
        "Chromium timings over {runs} runs ({} cores)",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    report(
        "cold join: launch, first tab, sign, form POST, 303, landed page loaded",
        &mut cold,
    );
    report("  launch to a first tab", &mut cold_launch);
    print_launch_steps(&launch_steps);
    report("  open the first tab", &mut first_tab);
    print_stages(&cold_join_stages, "the tab still new (asked of the browser)");
    report(
        "warm join in a new tab: the tab opened, sign, form POST, 303, landed page loaded",
        &mut fresh,
    );
    report("  open the tab", &mut opened);
    print_stages(&fresh_stages, "the tab still new (asked of the browser)");
    report(
        "warm join in a new tab sent to about:blank first (as before JoinTab::New): the tab opened, sign, about:blank, form POST, 303, landed page loaded",
        &mut renewed,
    );
    print_stages(&renewed_stages, "about:blank in the tab");
    report(
        "warm join in the tab the last join landed in: sign, about:blank, form POST, 303, landed page loaded",
        &mut warm,
    );
    print_stages(&stages, "about:blank in the tab");
    report(
        "warm join in a tab opened ahead (as the tools' next join in a context): sign, form POST, 303, landed page loaded",
        &mut ahead,
    );
    print_stages(&ahead_stages, "the tab still new (asked of the browser)");
    report(
        "warm join in a tab opened ahead 0.5 s before (as the tools' next join after a pause): sign, form POST, 303, landed page loaded",
        &mut settled,
    );
    print_stages(&settled_stages, "the tab still new (asked of the browser)");
    std::fs::remove_dir_all(&stage.work).unwrap();
}

/// Each launch step's own p50: from the step before it (the first from the call) to the moment
/// the launch reported it, in the order they came.
fn print_launch_steps(runs: &[Vec<(String, Duration)>]) {
    let Some(first) = runs.first() else { return };
    for (index, (step, _)) in first.iter().enumerate() {
        let mut samples: Vec<Duration> = runs
            .iter()
            .filter_map(|steps| {
                let at = steps.get(index).filter(|(s, _)| s == step)?.1;
                let before = index.checked_sub(1).map_or(Duration::ZERO, |i| steps[i].1);
                Some(at - before)
            })
            .collect();
        if !samples.is_empty() {
            report(&format!("    until \"{step}\""), &mut samples);
        }
    }
}

/// Each stage's own p50 (they need not add up to the whole's), the blank document's as `blank`.
fn print_stages(stages: &[pap_agent::JoinStages], blank: &str) {
    let print_stage = |what: &str, of: fn(&pap_agent::JoinStages) -> Duration| {
        let mut samples: Vec<Duration> = stages.iter().map(of).collect();
        report(&format!("  {what}"), &mut samples);
    };
    print_stage("sign the assertion", |s| s.sign);
    print_stage(blank, |s| s.blank);
    print_stage("build and submit the form", |s| s.submit);
    print_stage("submit to the landing page's response (POST, 303, GET)", |s| s.landed);
    print_stage("that response to the page loaded", |s| s.loaded);
}
