use super::*;

const AT: UnixTime = UnixTime::from_secs(1_796_032_800);

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pap-ledger-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn actor(kind: ActorKind) -> Actor {
    Actor {
        kind,
        via: Some("cli".into()),
        device_id: None,
    }
}

fn grant() -> Entry {
    Entry {
        actor: actor(ActorKind::Human),
        event: Event::Grant {
            grant_id: "g1".into(),
            session_id: "s1".into(),
            domains: Some(vec!["shop.example".into()]),
            cookie_count: 2,
            name_hashes: Vec::new(),
        },
    }
}

fn deny() -> Entry {
    Entry {
        actor: actor(ActorKind::Agent),
        event: Event::Deny {
            grant_id: None,
            reason: "widening refused".into(),
        },
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
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert!(first.get("prev").is_none());
    assert_eq!(first["at"], "2026-11-30T10:00:00Z");
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
        actor: actor(ActorKind::Agent),
        ..grant()
    };
    assert!(matches!(
        ledger.append(&by_agent, AT),
        Err(LedgerError::Invalid(RecordError::ActorMayNot { .. }))
    ));
    let sink_ack_by_system = Entry {
        actor: actor(ActorKind::System),
        event: Event::SinkAck {
            grant_id: "g1".into(),
            sink_id: "cloud".into(),
            reason: None,
        },
    };
    assert!(matches!(
        ledger.append(&sink_ack_by_system, AT),
        Err(LedgerError::Invalid(_))
    ));
    let long_reason = Entry {
        event: Event::Deny {
            grant_id: None,
            reason: "x".repeat(MAX_REASON + 1),
        },
        ..deny()
    };
    assert!(matches!(
        ledger.append(&long_reason, AT),
        Err(LedgerError::Invalid(RecordError::ReasonTooLong))
    ));
    for bad in ["*.shop.example", ".shop.example", "Shop.example", "example", "10.0.0.1"] {
        let wildcard = Entry {
            event: Event::Grant {
                grant_id: "g1".into(),
                session_id: "s1".into(),
                domains: Some(vec![bad.into()]),
                cookie_count: 2,
                name_hashes: Vec::new(),
            },
            ..grant()
        };
        assert!(
            matches!(
                ledger.append(&wildcard, AT),
                Err(LedgerError::Invalid(RecordError::Domain))
            ),
            "{bad}"
        );
    }
    assert_eq!(lines(&ledger), before);
    assert_eq!(ledger.verify().unwrap().records, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_line_the_schema_refuses_is_not_a_record_either() {
    // Lines the schema refuses (each checked against it too), by hand: a deny without a
    // reason, a grant with both scopes, fullProfile false, an unknown field, a time that is
    // not RFC 3339, an agent granting.
    let base = r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"deny","actor":{"kind":"agent"},"reason":"r"}"#;
    assert!(Record::parse_line(base).is_ok());
    for bad in [
        r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"deny","actor":{"kind":"agent"}}"#,
        r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"grant","actor":{"kind":"human"},"grantId":"g","sessionId":"s","cookieCount":1,"domains":["shop.example"],"fullProfile":true}"#,
        r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"grant","actor":{"kind":"human"},"grantId":"g","sessionId":"s","cookieCount":1,"fullProfile":false}"#,
        r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"deny","actor":{"kind":"agent"},"reason":"r","value":"x"}"#,
        r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"grant","actor":{"kind":"agent"},"grantId":"g","sessionId":"s","cookieCount":1,"domains":["shop.example"]}"#,
        r#"{"seq":0,"at":"2026-12-01T10:00:00Z","event":"revoke","actor":{"kind":"human"},"grantId":"g"}"#,
    ] {
        assert!(Record::parse_line(bad).is_err(), "{bad}");
        let value: serde_json::Value = serde_json::from_str(bad).unwrap();
        assert!(
            crate::spec::schema::check_def("ledgerRecord", &value).is_err(),
            "the schema takes {bad}"
        );
    }
    // The schema's `format: date-time` is an annotation its validators need not assert; the
    // ledger reads only RFC 3339 in UTC.
    let vague = r#"{"seq":0,"at":"yesterday","event":"deny","actor":{"kind":"agent"},"reason":"r"}"#;
    assert!(Record::parse_line(vague).is_err());
}

#[test]
fn every_event_the_host_writes_fits_the_schema() {
    // Lockstep: one record of each event, with every optional field, serialised by the typed
    // writer and checked against `$defs/ledgerRecord`.
    let hash = "ab".repeat(32);
    let events = [
        (
            ActorKind::Human,
            Event::Grant {
                grant_id: "g".into(),
                session_id: "s".into(),
                domains: Some(vec!["shop.example".into()]),
                cookie_count: 2,
                name_hashes: vec![hash.clone()],
            },
        ),
        (
            ActorKind::Human,
            Event::Grant {
                grant_id: "g".into(),
                session_id: "s".into(),
                domains: None,
                cookie_count: 2,
                name_hashes: Vec::new(),
            },
        ),
        (
            ActorKind::Agent,
            Event::Refresh {
                grant_id: "g".into(),
                domains: vec!["shop.example".into()],
                full_profile: false,
                cookie_count: 1,
                name_hashes: vec![hash.clone()],
            },
        ),
        (
            ActorKind::Human,
            Event::Refresh {
                grant_id: "g".into(),
                domains: Vec::new(),
                full_profile: true,
                cookie_count: 1,
                name_hashes: Vec::new(),
            },
        ),
        (
            ActorKind::System,
            Event::Revoke {
                grant_id: "g".into(),
                domains: Some(vec!["www.shop.example".into()]),
                derived: Derived {
                    local: LocalOutcome::Deleted,
                    remote: RemoteOutcome::NotApplicable,
                },
                reason: Some("a running browser could not be cleaned".into()),
            },
        ),
        (
            ActorKind::Human,
            Event::SinkAck {
                grant_id: "g".into(),
                sink_id: "cloud".into(),
                reason: Some("operated by Example Inc".into()),
            },
        ),
        (
            ActorKind::Agent,
            Event::Deny {
                grant_id: Some("g".into()),
                reason: "widening refused".into(),
            },
        ),
    ];
    for (seq, (kind, event)) in events.into_iter().enumerate() {
        let record = Record {
            seq: seq as u64,
            at: AT,
            prev: (seq > 0).then(|| hash.clone()),
            entry: Entry {
                actor: Actor {
                    kind,
                    via: Some("cli".into()),
                    device_id: Some("phone".into()),
                },
                event,
            },
        };
        let line = record.to_line();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        crate::spec::schema::check_def("ledgerRecord", &value).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(Record::parse_line(&line).unwrap(), record, "{line}");
    }
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

/// Rewrites every line from `lines`, re-chaining `prev` and rewriting the head file, as someone
/// with write access to the ledger (but not the agent's key) would.
fn rewrite_consistently(ledger: &Ledger, lines: &[String]) {
    let mut prev: Option<String> = None;
    let mut out = Vec::new();
    for (seq, line) in lines.iter().enumerate() {
        let mut record = Record::parse_line(line).unwrap();
        record.seq = seq as u64;
        record.prev = prev.clone();
        let text = record.to_line();
        prev = Some(hex(&Sha256::digest(text.as_bytes())));
        out.push(text);
    }
    write_lines(ledger, &out);
    let head = Head {
        seq: out.len() as u64 - 1,
        sha256: prev.unwrap(),
    };
    std::fs::write(&ledger.head, serde_json::to_vec(&head).unwrap()).unwrap();
}

#[test]
fn a_consistent_rewrite_without_the_key_does_not_verify() {
    let (dir, ledger) = three("rewrite");
    let mut all = lines(&ledger);
    all[0] = all[0].replace("\"cookieCount\":2", "\"cookieCount\":9");
    rewrite_consistently(&ledger, &all);
    // The chain and the head agree with each other: a copy's check is fooled...
    assert!(Ledger::in_dir(&dir.join("consent")).unwrap().verify().is_ok());
    // ...the agent's anchored ledger is not.
    let broken = ledger.verify().unwrap_err();
    assert!(broken.why.contains("anchor"), "{broken}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn deleting_both_ledger_files_does_not_verify() {
    let (dir, ledger) = three("both-gone");
    std::fs::remove_file(ledger.path()).unwrap();
    std::fs::remove_file(&ledger.head).unwrap();
    let broken = ledger.verify().unwrap_err();
    assert!(broken.why.contains("truncated"), "{broken}");
    assert!(matches!(ledger.append(&deny(), AT), Err(LedgerError::Broken(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The line an append would write next, and its anchor marks.
fn next_line(ledger: &Ledger) -> (String, Option<Mark>, Mark) {
    let summary = ledger.verify().unwrap();
    let record = Record {
        seq: summary.records,
        at: AT,
        prev: summary.last_hash.clone(),
        entry: deny(),
    };
    let line = record.to_line();
    let committed = summary.last_hash.map(|sha256| Mark {
        seq: summary.records - 1,
        sha256,
    });
    let pending = Mark {
        seq: summary.records,
        sha256: hex(&Sha256::digest(line.as_bytes())),
    };
    (line, committed, pending)
}

fn anchor_key(ledger: &Ledger) -> Vec<u8> {
    ledger.anchor.as_ref().unwrap().key(false).unwrap().unwrap().to_vec()
}

#[test]
fn a_crash_between_the_line_and_its_commit_leaves_a_sound_ledger() {
    let (dir, ledger) = three("crash-after-line");
    let (line, committed, pending) = next_line(&ledger);
    // The anchor says "pending", the line is written and synced, then the process dies: the
    // head file and the anchor still name the line before.
    let anchor = ledger.anchor.clone().unwrap();
    anchor.write(&anchor_key(&ledger), committed, Some(pending)).unwrap();
    let mut all = lines(&ledger);
    all.push(line);
    write_lines(&ledger, &all);
    // Before: "the last line does not match the head anchor", and no append ever again.
    assert_eq!(ledger.verify().unwrap().records, 4);
    assert_eq!(ledger.append(&deny(), AT).unwrap(), 4);
    assert_eq!(ledger.verify().unwrap().records, 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_torn_last_line_is_cut_off_at_the_next_append() {
    let (dir, ledger) = three("torn");
    let (line, committed, pending) = next_line(&ledger);
    let anchor = ledger.anchor.clone().unwrap();
    anchor.write(&anchor_key(&ledger), committed, Some(pending)).unwrap();
    // Half the line reached the disk, with no newline.
    let mut text = std::fs::read_to_string(ledger.path()).unwrap();
    text.push_str(&line[..line.len() / 2]);
    std::fs::write(ledger.path(), text).unwrap();
    assert_eq!(ledger.verify().unwrap().records, 3, "the torn line is not a record");
    assert_eq!(ledger.append(&deny(), AT).unwrap(), 3);
    assert_eq!(ledger.verify().unwrap().records, 4);
    assert_eq!(lines(&ledger).len(), 4);
    // A torn line the anchor was not told of is an edit, reported as such.
    let mut text = std::fs::read_to_string(ledger.path()).unwrap();
    text.push_str("{\"seq\":");
    std::fs::write(ledger.path(), text).unwrap();
    assert_eq!(ledger.verify().unwrap_err().line, 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_whole_last_line_without_its_line_end_is_ended_before_the_next() {
    let (dir, ledger) = three("no-line-end");
    let (line, committed, pending) = next_line(&ledger);
    let anchor = ledger.anchor.clone().unwrap();
    anchor.write(&anchor_key(&ledger), committed, Some(pending)).unwrap();
    // The whole line reached the disk, its line end did not.
    let mut text = std::fs::read_to_string(ledger.path()).unwrap();
    text.push_str(&line);
    std::fs::write(ledger.path(), text).unwrap();
    assert_eq!(ledger.verify().unwrap().records, 4);
    assert_eq!(ledger.append(&deny(), AT).unwrap(), 4);
    assert_eq!(ledger.verify().unwrap().records, 5);
    assert_eq!(lines(&ledger).len(), 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_append_reads_only_the_end_and_an_earlier_edit_stays_reported() {
    let (dir, ledger) = three("end-only");
    for _ in 0..200 {
        ledger.append(&deny(), AT).unwrap();
    }
    // An edit far back: the end is sound, so the append goes through (it reads only the end)…
    let mut all = lines(&ledger);
    all[10] = all[10].replacen("\"deny\"", "\"deny\" ", 1);
    write_lines(&ledger, &all);
    assert_eq!(ledger.append(&deny(), AT).unwrap(), 203);
    // …and the edit is reported (line 11 still reads as a record; line 12's prev no longer
    // names it) however much is appended after it.
    assert_eq!(ledger.verify().unwrap_err().line, 12);
    // An edit at the end is caught by the append itself (the full walk names it).
    let (dir2, ledger2) = three("end-edit");
    let mut all = lines(&ledger2);
    all[2] = all[2].replacen("\"deny\"", "\"deny\" ", 1);
    write_lines(&ledger2, &all);
    assert!(matches!(ledger2.append(&deny(), AT), Err(LedgerError::Broken(b)) if b.line == 3));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}
