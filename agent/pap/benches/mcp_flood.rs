//! The MCP host's bounds under review N4's flood, measured: a paired device's tool calls and
//! `/health`, first with the host to itself, then while 64 connections hold slow `/pair`
//! bodies and 256 more sit silent (320 strangers for 256 connection slots). The host is the
//! one `pap-agent host serve` runs (its router and accept loop, default limits) on loopback;
//! the device is rmcp's client with a paired bearer. The calls (`browser_profile_list`: the
//! host's own work, no browser and no company) are paced at 8 a second, under the per-tool
//! rate limit.
//!
//! Run with `cargo bench -p pap-agent --bench mcp_flood` (optionally `-- CALLS`, default 100).
//! Prints p50, p99 and the worst of each, and how many calls failed (0 is the bound held).

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use pap_browser::chromium::{self, BrowserHost, ChromiumConfig};
use pap_browser::consent::ConsentHost;
use pap_browser::spec::InstanceKey;
use pap_browser::tools::ToolHost;
use pap_host::BrowserServer;
use pap_host::http::{Exposure, Limits, router, serve};
use pap_host::pairing::Devices;
use pap_host::testkit::Flood;
use pap_shared::{SystemClock, SystemRng};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

fn main() {
    let calls: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(calls));
}

async fn run(calls: usize) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let state = std::env::temp_dir().join(format!("pap-mcp-flood-{}", std::process::id()));
    std::fs::create_dir_all(&state).unwrap();
    let consent = Arc::new(ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap());
    let tools = ToolHost::new(
        chromium::manifest().unwrap(),
        BrowserHost::new(),
        ChromiumConfig::new(state.clone()),
        InstanceKey::try_from("flood").unwrap(),
        consent,
    );
    let devices = Devices::at(&state);
    let (_, bearer) = devices.mint("bench", "install", &SystemClock, &SystemRng).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let guard = Exposure::check(addr, false, false, &[], &[])
        .unwrap()
        .guard(addr.port());
    let limits = Limits::default();
    let app = router(BrowserServer::per_request(tools), devices, guard, limits);
    tokio::spawn(serve(listener, app, limits, std::future::pending()));
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(bearer.expose());
    let device = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    println!(
        "a paired device's tool calls and /health, {calls} each ({} cores), default limits",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    for flooded in [false, true] {
        let flood = if flooded {
            Some(
                Flood::open(addr, &format!("127.0.0.1:{}", addr.port()), 64, 256)
                    .await
                    .unwrap(),
            )
        } else {
            None
        };
        let (mut tool_times, mut health_times, mut failed) = (Vec::new(), Vec::new(), 0);
        let mut pace = tokio::time::interval(Duration::from_millis(1000 / 8));
        for _ in 0..calls {
            pace.tick().await;
            let started = Instant::now();
            let request = CallToolRequestParams::new("browser_profile_list");
            match device.call_tool(request).await {
                Ok(result) if result.is_error != Some(true) => tool_times.push(started.elapsed()),
                _ => failed += 1,
            }
            let started = Instant::now();
            match http.get(format!("http://{addr}/health")).send().await {
                Ok(answer) if answer.status() == 200 => health_times.push(started.elapsed()),
                _ => failed += 1,
            }
        }
        let label = if flooded {
            "under the flood (64 slow /pair bodies, 256 silent connections)"
        } else {
            "the host to itself"
        };
        println!("{label}: {failed} failed");
        report("  tool call", &mut tool_times);
        report("  /health", &mut health_times);
        drop(flood);
    }
    drop(device);
    std::fs::remove_dir_all(&state).unwrap();
}

fn report(what: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        println!("{what}: no sample");
        return;
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} samples)",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}
