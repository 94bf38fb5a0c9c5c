//! What consent costs on the agent's hot paths: `ConsentHost::redact`, which every tool result
//! passes (C9), and `permit_join`, which every join asks. Both read the grants file; redact also
//! opens each active grant's sealed material (AES-256-GCM). And what one ledger append costs as
//! the ledger grows (every grant, refresh, revoke and recorded deny appends).
//!
//! Run with `cargo bench -p pap-browser --bench consent`.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use pap_browser::consent::{
    Actor, ActorKind, Caller, ConsentHost, Entry, Event, GrantRequest, Ledger, Operator, SourceSpec,
};
use pap_shared::{Clock as _, SystemClock, SystemRng};
use serde_json::json;

/// A consent store with `grants` grants of 10 cookies each.
fn store(grants: usize) -> (ConsentHost, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("pap-bench-consent-{}-{grants}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let host = ConsentHost::open(&dir.join("state"), Arc::new(SystemClock), Arc::new(SystemRng)).unwrap();
    for g in 0..grants {
        let domain = format!("shop{g}.example");
        let cookies: Vec<_> = (0..10)
            .map(|c| json!({"name": format!("c{c}"), "value": format!("value-{g}-{c}-0123456789abcdef"), "domain": domain, "path": "/"}))
            .collect();
        let source = dir.join(format!("state-{g}.json"));
        std::fs::write(&source, json!({"cookies": cookies, "origins": []}).to_string()).unwrap();
        host.grant(
            &Operator::from_operator_channel("bench"),
            GrantRequest::for_domains(SourceSpec::StorageState(source), &[&domain]),
        )
        .unwrap();
    }
    (host, dir)
}

fn benches(c: &mut Criterion) {
    // A 10 KB page's worth of text in a tool result.
    let page = "<p>an ordinary page with nothing granted in it</p>".repeat(200);
    let mut group = c.benchmark_group("consent");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    for grants in [1, 10] {
        let (host, dir) = store(grants);
        group.bench_function(format!("redact a 10 KB result, {grants} grant(s)"), |b| {
            b.iter(|| {
                let mut result = json!({ "target": "t1", "html": page });
                host.redact(&mut result).unwrap()
            });
        });
        group.bench_function(format!("permit_join, {grants} grant(s)"), |b| {
            b.iter(|| host.permit_join(&Caller::local_agent(), "shop0.example").unwrap());
        });
        let _ = std::fs::remove_dir_all(dir);
    }
    for records in [1_000, 4_000] {
        let dir = std::env::temp_dir().join(format!("pap-bench-ledger-{}-{records}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ledger = Ledger::open(&dir).unwrap();
        let deny = Entry {
            actor: Actor {
                kind: ActorKind::Agent,
                via: None,
                device_id: None,
            },
            event: Event::Deny {
                grant_id: None,
                reason: "no grant covers evil.example".into(),
            },
        };
        for _ in 0..records {
            ledger.append(&deny, SystemClock.now()).unwrap();
        }
        group.bench_function(format!("ledger append, {records} records before"), |b| {
            b.iter(|| ledger.append(&deny, SystemClock.now()).unwrap());
        });
        let _ = std::fs::remove_dir_all(dir);
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
}
