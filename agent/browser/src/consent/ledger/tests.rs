use super::*;

const AT: &str = "2026-11-30T10:00:00Z";

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pap-ledger-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn human() -> Option<Actor> {
    Some(Actor {
        kind: "human".into(),
        via: Some("cli".into()),
        device_id: None,
    })
}

fn grant() -> Entry {
    Entry {
        event: "grant".into(),
        actor: human(),
        grant_id: Some("g1".into()),
        session_id: Some("s1".into()),
        domains: Some(vec!["shop.example".into()]),
        cookie_count: Some(2),
        ..Entry::default()
    }
}

fn deny() -> Entry {
    Entry {
        event: "deny".into(),
        actor: Some(Actor {
            kind: "agent".into(),
            via: Some("tool".into()),
            device_id: None,
        }),
        reason: Some("widening refused".into()),
        ..Entry::default()
    }
}

fn three(label: &str) -> (PathBuf, Ledger) {
    let dir = scratch(label);
    let ledger = Ledger::open(&dir).unwrap();
    assert_eq!(ledger.append(&grant(), AT).unwrap(), 0);
    assert_eq!(ledger.append(&deny(), AT).unwrap(), 1);
    assert_eq!(ledger.append(&deny(), AT).unwrap(), 2);
    (dir, ledger)
}

fn lines(ledger: &Ledger) -> Vec<String> {
    std::fs::read_to_string(ledger.path())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(ledger: &Ledger, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(ledger.path(), text).unwrap();
}

#[test]
fn appends_chain_and_verify() {
    let (dir, ledger) = three("chain");
    assert_eq!(ledger.verify().unwrap().records, 3);
    let lines = lines(&ledger);
    let first: Value = serde_json::from_str(&lines[0]).unwrap();
    let second: Value = serde_json::from_str(&lines[1]).unwrap();
    assert!(first.get("prev").is_none());
    assert_eq!(second["prev"], hex(&Sha256::digest(lines[0].as_bytes())));
    assert_eq!(second["seq"], 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("consent")), 0o700);
        assert_eq!(mode(ledger.path()), 0o600);
        assert_eq!(mode(&dir.join("consent/ledger.head")), 0o600);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn editing_any_line_is_reported_at_that_line_or_the_next() {
    for (index, expected) in [(0usize, 2usize), (1, 3), (2, 3)] {
        let (dir, ledger) = three(&format!("edit{index}"));
        let mut all = lines(&ledger);
        all[index] = all[index]
            .replace("widening refused", "nothing happened")
            .replace("\"cookieCount\":2", "\"cookieCount\":3");
        write_lines(&ledger, &all);
        let broken = ledger.verify().unwrap_err();
        assert_eq!(broken.line, expected, "editing line {}: {broken}", index + 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn deleting_a_line_or_truncating_is_reported() {
    let (dir, ledger) = three("delete");
    let mut all = lines(&ledger);
    all.remove(1);
    write_lines(&ledger, &all);
    let broken = ledger.verify().unwrap_err();
    assert_eq!(broken.line, 2, "{broken}");
    std::fs::remove_dir_all(&dir).unwrap();

    let (dir, ledger) = three("truncate");
    let mut all = lines(&ledger);
    all.pop();
    write_lines(&ledger, &all);
    let broken = ledger.verify().unwrap_err();
    assert_eq!(broken.line, 3, "{broken}");
    assert!(broken.why.contains("truncated"), "{broken}");
    // Truncated to nothing: still detected by the head anchor.
    write_lines(&ledger, &[]);
    assert_eq!(ledger.verify().unwrap_err().line, 1);
    // A broken ledger takes no more records.
    assert!(matches!(ledger.append(&deny(), AT), Err(LedgerError::Broken(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn records_outside_the_schema_are_refused_and_change_nothing() {
    let (dir, ledger) = three("schema");
    let before = lines(&ledger);
    let by_agent = Entry {
        actor: Some(Actor {
            kind: "agent".into(),
            via: None,
            device_id: None,
        }),
        ..grant()
    };
    assert!(matches!(ledger.append(&by_agent, AT), Err(LedgerError::Invalid(_))));
    let no_reason = Entry { reason: None, ..deny() };
    assert!(matches!(ledger.append(&no_reason, AT), Err(LedgerError::Invalid(_))));
    let wildcard = Entry {
        domains: Some(vec!["*.shop.example".into()]),
        ..grant()
    };
    assert!(matches!(ledger.append(&wildcard, AT), Err(LedgerError::Invalid(_))));
    assert_eq!(lines(&ledger), before);
    assert_eq!(ledger.verify().unwrap().records, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn concurrent_appends_take_turns() {
    let dir = scratch("concurrent");
    let ledger = Ledger::open(&dir).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| ledger.append(&deny(), AT).unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..40).collect::<Vec<u64>>());
    assert_eq!(ledger.verify().unwrap().records, 40);
    std::fs::remove_dir_all(&dir).unwrap();
}
