//! Verified browser assertions per second on one core, against the raw ES256 verify rate of
//! the same backend: aws-lc-rs with the key parsed once (what `openssl speed` measures, and
//! what the verifier does since issue 42), and jsonwebtoken's `crypto::verify`, which parses
//! the key's point on every call.
//!
//! Run with `cargo bench -p pap-company --bench verify`. Besides criterion's usual lines it
//! prints one summary: the rates and the verifier's share of the raw rate.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use criterion::{Criterion, Throughput};
use jsonwebtoken::DecodingKey;
use pap_shared::CompactJws;
use support::World;

/// Iterations and time measured per benchmark, warm-up included.
static TOTALS: Mutex<[(u64, Duration); 3]> = Mutex::new([(0, Duration::ZERO); 3]);

fn record(slot: usize, iters: u64, elapsed: Duration) -> Duration {
    let mut totals = TOTALS.lock().unwrap();
    totals[slot].0 += iters;
    totals[slot].1 += elapsed;
    elapsed
}

fn benches(c: &mut Criterion) {
    let world = World::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("browser_assertion");
    group
        .throughput(Throughput::Elements(1))
        .sample_size(20)
        .measurement_time(Duration::from_secs(6));

    // The raw signature check of one assertion: what the verifier cannot go below.
    let sample = world.assertion();
    let (input, signature) = sample.secret().rsplit_once('.').unwrap();
    let jwk = world.agent.key.public_key().jwk().clone();
    let key = DecodingKey::from_ec_components(jwk.x.as_deref().unwrap(), jwk.y.as_deref().unwrap()).unwrap();
    group.bench_function("raw_es256_verify", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let ok =
                    jsonwebtoken::crypto::verify(signature, input.as_bytes(), &key, jsonwebtoken::Algorithm::ES256)
                        .unwrap();
                assert!(ok);
            }
            record(0, iters, start.elapsed())
        });
    });

    // The floor: the same check with the key parsed once, as `openssl speed` runs it.
    let mut sec1 = vec![0x04];
    for coordinate in [&jwk.x, &jwk.y] {
        sec1.extend(URL_SAFE_NO_PAD.decode(coordinate.as_deref().unwrap()).unwrap());
    }
    let parsed =
        aws_lc_rs::signature::ParsedPublicKey::new(&aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED, &sec1).unwrap();
    let raw_signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
    group.bench_function("raw_es256_verify_parsed_key", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                parsed.verify_sig(input.as_bytes(), &raw_signature).unwrap();
            }
            record(2, iters, start.elapsed())
        });
    });

    // The whole verifier: parse, every claim check, key lookup, signature, Session lookup and
    // the replay mark. Each iteration needs a fresh jti, so assertions are signed untimed first.
    group.bench_function("verifier_verify", |b| {
        b.iter_custom(|iters| {
            let assertions: Vec<CompactJws> = (0..iters).map(|_| world.assertion()).collect();
            let start = Instant::now();
            for assertion in &assertions {
                runtime.block_on(world.state.verifier().verify(assertion)).unwrap();
            }
            record(1, iters, start.elapsed())
        });
    });
    group.finish();

    // Where the difference goes: the untimed-in-production parts, each on its own.
    let mut parts = c.benchmark_group("verifier_parts");
    parts
        .throughput(Throughput::Elements(1))
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    parts.bench_function("parse_and_read_claims", |b| {
        b.iter(|| {
            let jws = pap_shared::UnverifiedJws::parse(sample.secret()).unwrap();
            pap_shared::BrowserAssertionClaims::from_payload(jws.payload()).unwrap()
        });
    });
    // A mark lives until its `exp` and a full guard refuses (it never evicts a live mark), so
    // each run of at most 200,000 marks gets a fresh guard, made outside the timing.
    {
        let exp = pap_shared::UnixTime::from_secs(support::NOW + 60);
        parts.bench_function("replay_mark_once", |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let run = (iters - done).min(200_000);
                    let guard = pap_company::stores::MemoryReplayGuard::new(world.clock.clone());
                    let keys: Vec<_> = (done..done + run)
                        .map(|n| {
                            pap_company::stores::ReplayKey::browser_assertion(
                                &world.agent.client_id,
                                &pap_shared::Jti::parse(&format!("{n:0>22}")).unwrap(),
                            )
                        })
                        .collect();
                    let start = Instant::now();
                    for key in keys {
                        assert!(
                            runtime
                                .block_on(pap_company::stores::ReplayGuard::mark_once(&guard, key, exp))
                                .unwrap()
                        );
                    }
                    spent += start.elapsed();
                    done += run;
                }
                spent
            });
        });
    }
    parts.bench_function("session_lookup", |b| {
        b.iter(|| {
            runtime
                .block_on(pap_company::stores::SessionDirectory::session(
                    &world.sessions,
                    &world.session,
                ))
                .unwrap()
        });
    });
    parts.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
    let totals = *TOTALS.lock().unwrap();
    let rate = |(iters, time): (u64, Duration)| iters as f64 / time.as_secs_f64().max(f64::MIN_POSITIVE);
    let (per_call, verified, parsed) = (rate(totals[0]), rate(totals[1]), rate(totals[2]));
    if totals.iter().all(|(iters, _)| *iters > 0) {
        println!(
            "summary: verified assertions/s (one core) {verified:.0}; raw ES256 verifies/s {parsed:.0} with the key parsed once ({:.2} µs), {per_call:.0} parsing it per call (jsonwebtoken); verifier at {:.1} % of raw (the first)",
            1e6 / parsed,
            100.0 * verified / parsed
        );
    }
}
