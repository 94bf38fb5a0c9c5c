//! What MCP costs a tool call: `browser.navigate` + `browser.get_dom` of a local page, through
//! `pap-agent host serve`'s router over loopback HTTP (rmcp's client, a paired device's bearer,
//! the guard and the devices file read on every request) against the same two calls made in
//! process on the same tool host, alternating round by round. Then the idle memory of a
//! `pap-agent host serve` process (listening, no browser yet).
//!
//! Run with `cargo bench -p pap-agent --bench mcp_round_trip` (optionally `-- ROUNDS`, default
//! 200). Prints p50 and p99 of each, and the host's resident memory.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pap_browser::chromium::{self, BrowserHost, ChromiumConfig};
use pap_browser::consent::ConsentHost;
use pap_browser::spec::{AgentCaller, InstanceKey, NamedOrigin, ToolResult};
use pap_browser::tools::ToolHost;
use pap_host::BrowserServer;
use pap_host::http::{Exposure, Limits, router, serve};
use pap_host::pairing::Devices;
use pap_shared::{SystemClock, SystemRng};
use serde_json::{Value, json};
use support::cli_agent::{host_serve, mcp_call as call, mcp_device, pap, resident_kib};

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(200);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(rounds));
}

async fn run(rounds: usize) {
    let work = std::env::temp_dir().join(format!("pap-mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let page = local_page().await;

    let state = work.join("state");
    let mut config = ChromiumConfig::new(state.clone());
    config
        .navigation
        .name(NamedOrigin::every_port("http://127.0.0.1").unwrap());
    let consent = Arc::new(ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap());
    let tools = ToolHost::new(
        chromium::manifest().unwrap(),
        BrowserHost::new(),
        config,
        InstanceKey::try_from("bench").unwrap(),
        consent,
    );
    tools.launch().await.unwrap();

    let devices = Devices::at(&state);
    let (device, bearer) = devices.mint("bench", "install", &SystemClock, &SystemRng).unwrap();
    let caller = AgentCaller::paired(device.id);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let guard = Exposure::check(addr, false, false, &[], &[])
        .unwrap()
        .guard(addr.port());
    let app = router(
        BrowserServer::per_request(tools.clone()),
        devices,
        guard,
        Limits::default(),
    );
    tokio::spawn(serve(listener, app, Limits::default(), std::future::pending()));
    let client = mcp_device(addr, bearer.expose()).await;

    let mut in_process = Vec::with_capacity(rounds);
    let mut over_mcp = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let opened = ok(tools
            .call_as(&caller, "browser.navigate", &json!({ "url": page }))
            .await);
        let dom = ok(tools
            .call_as(&caller, "browser.get_dom", &json!({ "target": opened["target"] }))
            .await);
        in_process.push(started.elapsed());
        assert!(dom["html"].as_str().unwrap().contains("hello"));
        ok(tools
            .call_as(
                &caller,
                "browser.tabs",
                &json!({ "action": "close", "target": opened["target"] }),
            )
            .await);

        let started = Instant::now();
        let opened = call(&client, "browser_navigate", json!({ "url": page })).await.unwrap();
        let dom = call(&client, "browser_get_dom", json!({ "target": opened["target"] }))
            .await
            .unwrap();
        over_mcp.push(started.elapsed());
        assert!(dom["html"].as_str().unwrap().contains("hello"));
        call(
            &client,
            "browser_tabs",
            json!({ "action": "close", "target": opened["target"] }),
        )
        .await
        .unwrap();
    }
    drop(client);
    tools.stop(true).await.unwrap();

    println!(
        "browser.navigate + browser.get_dom of a local page, {rounds} rounds ({} cores)",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    report("in process (ToolHost::call_as)", &mut in_process);
    report("over MCP (streamable HTTP, bearer, guard)", &mut over_mcp);
    println!(
        "host serve idle, no browser yet: {} KiB resident",
        idle_host_rss(&work).await
    );
    std::fs::remove_dir_all(&work).unwrap();
}

fn ok(result: ToolResult) -> Value {
    match result {
        ToolResult::Ok(value) => value,
        ToolResult::Err(e) => panic!("{}: {}", e.code.as_str(), e.message),
    }
}

/// A page with `hello` in it, on loopback HTTP: its URL.
async fn local_page() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(|| async { axum::response::Html("<title>bench</title><h1 id=h>hello</h1>") }),
    );
    tokio::spawn(axum::serve(listener, app).into_future());
    url
}

/// `VmRSS` of a `pap-agent host serve` process once it listens.
async fn idle_host_rss(work: &std::path::Path) -> u64 {
    let state = work.join("idle");
    pap(&state, &["identity", "init", "atlas.example"]);
    let (mut host, _) = host_serve(&state, &[]).await;
    let rss = resident_kib(host.id().unwrap());
    host.kill().await.unwrap();
    rss
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!("{what}: p50 {:.1} ms, p99 {:.1} ms", ms(at(0.5)), ms(at(0.99)));
}
