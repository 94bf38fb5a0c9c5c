//! Shares that never cap an honest big agent (issue 42, item 5): one agent domain joining at
//! full speed against the shipped defaults, then the same beside an attacker that already
//! holds half the replay guard.
//!
//! Run with `cargo bench -p pap-company --bench shares` (optionally `-- SECONDS`, default 60).
//! The route behind rustls on 127.0.0.1 with the embedded stores at their defaults
//! (`MemoryReplayGuard::new`: 3,000,000 marks, shares of 187,500 binding from 1,500,000 live),
//! 8 clients, each signing a fresh assertion per join as an agent does. The clock is the
//! fixture's fixed time, so no mark expires during the run: every join's mark counts for the
//! whole run, as it does in any run shorter than a mark's 65 s.
//!
//! 1. One agent domain alone: every join is answered 303 (before issue 42 its share refused
//!    it past 125,000 live marks, 503).
//! 2. An attacker's domain first fills the guard to the pressure (1,500,000 marks, through the
//!    guard as its joins would make them), then the honest agent joins as in 1: it keeps its
//!    share (187,500 joins answered 303), then gets 429 with `Retry-After`, never 503.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pap_company::limits::{REPLAY_CAPACITY, REPLAY_PRESSURE, REPLAY_SHARE};
use pap_company::stores::{ReplayGuard as _, ReplayKey, StoreError};
use pap_shared::{ClientId, Jti, SystemRng, UnixTime};
use support::World;

/// Clients joining at once.
const CLIENTS: usize = 8;

fn main() {
    let seconds: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(60);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "one agent domain at full speed for {seconds} s, {CLIENTS} clients over TLS on 127.0.0.1; \
             defaults: guard {REPLAY_CAPACITY} marks, share {REPLAY_SHARE} binding from {REPLAY_PRESSURE} live"
        );
        let length = Duration::from_secs(seconds);
        run("alone", Arc::new(World::new()), length).await;
        let beside = Arc::new(World::new());
        let before = resident_bytes();
        let (filled, next) = fill_to_the_pressure(&beside).await;
        let per_mark = resident_bytes().saturating_sub(before) / filled.max(1);
        println!(
            "the attacker's domain made {filled} marks ({per_mark} bytes a mark, the process's RSS growth, \
             shares' tally included); its next: {next:?}"
        );
        run("beside an attacker holding half the guard", beside, length).await;
    });
}

/// This process's resident memory (`VmRSS`), bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Marks of another domain's agent, through the world's guard, until the shares bind; how many
/// it made and what its next mark gets.
async fn fill_to_the_pressure(world: &World) -> (u64, Result<bool, StoreError>) {
    let attacker = ClientId::parse("https://agent.attacker.example/agent.json").unwrap();
    let exp = UnixTime::from_secs(support::NOW + 60);
    let mark = || ReplayKey::browser_assertion(&attacker, &Jti::generate(&SystemRng));
    let mut made = 0;
    loop {
        match world.replay.mark_once(mark(), exp).await {
            Ok(true) => made += 1,
            refused => return (made, refused),
        }
    }
}

/// Joins of the world's agent from [`CLIENTS`] clients for `length`; prints the answers.
async fn run(label: &str, world: Arc<World>, length: Duration) {
    let pki = support::test_pki(&["shop.example"]);
    let client = support::serve_over_tls(world.app(), &pki).await;
    let stop = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, world, stop) = (client.clone(), world.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answers = BTreeMap::<u16, u64>::new();
                let mut first_refusal: Option<(Duration, String)> = None;
                while !stop.load(Ordering::Relaxed) {
                    let assertion = world.assertion();
                    let response = client
                        .post("https://shop.example/poppy/browser-session")
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(format!("assertion={}", assertion.secret()))
                        .send()
                        .await
                        .unwrap();
                    let status = response.status().as_u16();
                    if status != 303 && first_refusal.is_none() {
                        let retry = response
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("none")
                            .to_owned();
                        first_refusal = Some((began.elapsed(), retry));
                    }
                    *answers.entry(status).or_default() += 1;
                }
                (answers, first_refusal)
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = BTreeMap::<u16, u64>::new();
    let mut first_refusal: Option<(Duration, String)> = None;
    for worker in workers {
        let (mine, refusal) = worker.await.unwrap();
        for (status, n) in mine {
            *answers.entry(status).or_default() += n;
        }
        first_refusal = match (first_refusal, refusal) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
    }
    let wall = began.elapsed().as_secs_f64();
    let total: u64 = answers.values().sum();
    let joined = answers.get(&303).copied().unwrap_or(0);
    let refused: Vec<String> = answers
        .iter()
        .filter(|(status, _)| **status != 303)
        .map(|(status, n)| format!("{n} x {status}"))
        .collect();
    let refused = if refused.is_empty() {
        "none".to_owned()
    } else {
        refused.join(", ")
    };
    let first = match first_refusal {
        Some((at, retry)) => format!("; first refusal at {:.1} s, Retry-After {retry}", at.as_secs_f64()),
        None => String::new(),
    };
    println!(
        "{label}: {total} joins in {wall:.1} s ({:.0}/s), {joined} x 303, refused: {refused}{first}",
        total as f64 / wall
    );
}
