//! The requirement ledger stays true: every test it names exists, every reference-runner case
//! it names is one CI runs.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::Path;

use pap_conformance::Ledger;

#[test]
fn every_named_test_and_case_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ledger = Ledger::parse(&std::fs::read_to_string(root.join("conformance/requirements.toml")).unwrap()).unwrap();
    let script = std::fs::read_to_string(root.join("conformance/interop/pairing.sh")).unwrap();
    let cases: Vec<&str> = [
        "lifecycle.browser-joins-session",
        "lifecycle.browser-assertion-refused",
        "operations.web-confirm-at-most-once",
        "security.browser-assertion-at-token-endpoint",
    ]
    .into_iter()
    .filter(|case| script.contains(case))
    .collect();
    let problems = ledger.check(&root, &cases);
    assert!(
        problems.is_empty(),
        "the ledger is out of date:\n{}",
        problems.join("\n")
    );
    assert!(ledger.rules.len() >= 40);
    // Every requirement a pap-conformance case names is a rule of the ledger that lists the case.
    for case in pap_conformance::pap::CASES {
        for id in case.requirements {
            let rule = ledger.rules.iter().find(|r| r.id == *id);
            let listed = rule.is_some_and(|r| r.tests.iter().any(|t| t == &format!("pap-conformance:{}", case.id)));
            assert!(
                listed,
                "{} names {id}, whose ledger entry does not list the case",
                case.id
            );
        }
    }
    // Every AIP-63 rule (or review finding, `SEC-...`) a suite hook tests lists the hook.
    for hook in pap_conformance::browser::HOOKS {
        for rule in hook.rule {
            let id = if rule.starts_with("SEC-") {
                (*rule).to_owned()
            } else {
                format!("AIP63-{rule}")
            };
            let entry = ledger.rules.iter().find(|r| r.id == id);
            let listed = entry.is_some_and(|r| r.tests.iter().any(|t| t == &format!("aip63-suite:{}", hook.id)));
            assert!(
                listed,
                "{} tests {id}, whose ledger entry does not list the hook",
                hook.id
            );
        }
    }
}

#[test]
fn the_check_finds_a_missing_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ledger = Ledger::parse(
        r#"
[[rule]]
id = "X-1"
role = "company"
statement = "s"
status = "implemented"
code = ["company/src/verify.rs"]
tests = ["company/tests/verify.rs::no_such_test", "python-runner:not.run"]
"#,
    )
    .unwrap();
    let problems = ledger.check(&root, &[]);
    assert_eq!(problems.len(), 2, "{problems:?}");
}
