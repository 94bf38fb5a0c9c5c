//! The first tool call after a host starts (issue 42): `pap-agent host stdio` spawned as an MCP
//! client spawns it (rmcp's client, a device installed by `install-mcp`), then, after the client
//! has waited THINK ms (a runtime reading the tool list, a model deciding), `browser_navigate`
//! to the reference company's front page over TLS. By default the host launches its browser
//! with that call; with `--launch-at-start` it launched as the host started. The two alternate
//! host by host; a second call to the same page is timed beside each first.
//!
//! Run with `cargo bench -p pap-agent --bench first_call` (optionally `-- ROUNDS THINK`,
//! defaults 10 and 1000). Prints p50, min and max of each.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use support::Stage;
use support::cli_agent::{installed, stdio_host};
use support::report;

fn main() {
    let mut numbers = std::env::args().skip(1).filter_map(|a| a.parse::<u64>().ok());
    let rounds = numbers.next().unwrap_or(10) as usize;
    let think = Duration::from_millis(numbers.next().unwrap_or(1000));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(rounds, think));
}

async fn run(rounds: usize, think: Duration) {
    let stage = Stage::new("first-call", &["shop.example"]).await;
    let (_company, addr) = support::start_reference_company(&stage).await;
    let state = stage.work.join("state");
    let (bearer_file, _) = installed(&stage, &state);

    let variants: [(&str, &[&str]); 2] = [
        ("launched by the first call (the default)", &[]),
        ("--launch-at-start", &["--launch-at-start"]),
    ];
    let mut first = vec![Vec::new(); variants.len()];
    let mut second = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (i, (_, extra)) in variants.iter().enumerate() {
            let host = stdio_host(&stage, &state, addr, &bearer_file, extra);
            let client = ().serve(TokioChildProcess::new(host).unwrap()).await.unwrap();
            // The client's think time, not a wait for readiness: a launch at start not done
            // by then is waited for by the call, and timed with it.
            tokio::time::sleep(think).await;
            for samples in [&mut first[i], &mut second[i]] {
                let started = Instant::now();
                let landed = client
                    .call_tool(
                        CallToolRequestParams::new("browser_navigate")
                            .with_arguments(json!({"url": "https://shop.example/"}).as_object().unwrap().clone()),
                    )
                    .await
                    .unwrap();
                samples.push(started.elapsed());
                assert_ne!(landed.is_error, Some(true), "{landed:?}");
            }
            client.cancel().await.unwrap();
        }
    }
    println!(
        "the first tool call after the host started, {rounds} hosts each, {} ms after initialize:",
        think.as_millis()
    );
    for (i, (name, _)) in variants.iter().enumerate() {
        println!("  {name}");
        report("    first call (browser_navigate)", &mut first[i]);
        report("    second call, same page", &mut second[i]);
    }
    let _ = std::fs::remove_dir_all(&stage.work);
}
