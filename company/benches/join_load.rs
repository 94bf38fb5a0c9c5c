//! Load run: joins per second and latency of the real browser-session route over TLS on
//! 127.0.0.1, at concurrency 1, 8 and 32.
//!
//! Run with `cargo bench -p pap-company --bench join_load` (optionally `-- JOINS_PER_LEVEL`,
//! default 3000). The server (the route behind rustls, HTTP/1.1 keep-alive) and the clients
//! share this machine's cores, as a company's front end and its load balancer would not: the
//! figures are a floor. Assertions are signed before the clock starts; each join is one POST
//! answered 303 with a cookie (redirects are not followed).

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pap_company::serve_tls;
use pap_shared::CompactJws;
use support::World;

fn main() {
    let joins: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(joins));
}

async fn run(joins: usize) {
    let pki = support::test_pki(&["shop.example"]);

    // The session lives past the whole run; the clock is the fixture's fixed time.
    let world = World::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_tls(listener, world.app(), pki.server, std::future::pending()));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(pki.ca_der)).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve("shop.example", addr)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    println!(
        "join load over TLS on {addr} ({joins} joins per level, {} cores)",
        available_cores()
    );
    println!(
        "{:>11} {:>10} {:>10} {:>10}",
        "concurrency", "joins/s", "p50 ms", "p99 ms"
    );
    for concurrency in [1usize, 8, 32] {
        let assertions: Vec<CompactJws> = (0..joins).map(|_| world.assertion()).collect();
        let queue = Arc::new(std::sync::Mutex::new(assertions));
        let start = Instant::now();
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, queue) = (client.clone(), queue.clone());
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    loop {
                        let Some(assertion) = queue.lock().unwrap().pop() else {
                            break;
                        };
                        let began = Instant::now();
                        let response = client
                            .post("https://shop.example/poppy/browser-session")
                            .header("content-type", "application/x-www-form-urlencoded")
                            .body(format!("assertion={}", assertion.secret()))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(response.status(), reqwest::StatusCode::SEE_OTHER);
                        latencies.push(began.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::with_capacity(joins);
        for worker in workers {
            latencies.extend(worker.await.unwrap());
        }
        let wall = start.elapsed();
        latencies.sort();
        println!(
            "{concurrency:>11} {:>10.0} {:>10.2} {:>10.2}",
            joins as f64 / wall.as_secs_f64(),
            millis(percentile(&latencies, 50)),
            millis(percentile(&latencies, 99)),
        );
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
