//! `pap-agent consent ...`, the operator's channel (AIP-63 §4): grants by name, interactively
//! after a presence scan, or not at all; `ledger verify` reports an edited, deleted or truncated
//! line; and a revoke from the command line reaches a browser another process runs.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use pap_browser::chromium::{BrowserHost, ChromiumConfig};
use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator, SourceSpec};
use pap_shared::{SystemClock, SystemRng};
use serde_json::{Value, json};

const PLANTED: &str = "PLANTED-CLI-CONSENT-VALUE";

fn run(state: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pap-agent"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    for stream in [&output.stdout, &output.stderr] {
        assert!(
            !String::from_utf8_lossy(stream).contains(PLANTED),
            "{args:?} printed a cookie value"
        );
    }
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn scratch(label: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("pap-cli-consent-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("storage-state.json");
    std::fs::write(
        &source,
        json!({"cookies": [
            {"name": "sid", "value": PLANTED, "domain": "shop.example", "path": "/", "secure": true, "httpOnly": true},
            {"name": "pref", "value": PLANTED, "domain": ".shop.example", "path": "/", "secure": true},
            {"name": "t", "value": PLANTED, "domain": "tracker.example", "path": "/", "secure": true}
        ], "origins": []})
        .to_string(),
    )
    .unwrap();
    (dir.join("state"), source)
}

#[test]
fn the_operator_grants_by_name_interactively_or_not_at_all() {
    let (state, source) = scratch("grant");
    let source_arg = source.to_str().unwrap();

    // C4: no domains, not interactive, not the full profile by name: refused, nothing recorded.
    let refused = run(&state, &["consent", "grant", "--source", source_arg], "");
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("never defaults to all domains"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!state.join("consent/ledger.jsonl").exists());

    // C5: the scan's counts first, then a question per domain; only the answered domain is read.
    let asked = run(
        &state,
        &["consent", "grant", "--source", source_arg, "--interactive"],
        "y\nn\n",
    );
    assert!(asked.status.success(), "{}", text(&asked.stderr));
    let shown = text(&asked.stderr);
    assert!(
        shown.contains("shop.example: 2 cookie(s)") && shown.contains("tracker.example: 1 cookie(s)"),
        "{shown}"
    );
    assert!(shown.find("cookie(s)").unwrap() < shown.find("grant shop.example?").unwrap());
    let grant: Value = serde_json::from_slice(&asked.stdout).unwrap();
    assert_eq!(grant["domains"], json!(["shop.example"]));
    assert_eq!(
        (grant["grantedVia"].as_str(), grant["cookieCount"].as_u64()),
        (Some("interactive"), Some(2))
    );

    // C3: the full profile only by name, with its warning.
    let full = run(
        &state,
        &["consent", "grant", "--source", source_arg, "--full-profile"],
        "",
    );
    assert!(full.status.success(), "{}", text(&full.stderr));
    assert!(text(&full.stderr).contains("every domain"), "{}", text(&full.stderr));
    let grant: Value = serde_json::from_slice(&full.stdout).unwrap();
    assert_eq!(
        (grant["fullProfile"].as_bool(), grant["cookieCount"].as_u64()),
        (Some(true), Some(3))
    );

    let listed: Value = serde_json::from_slice(&run(&state, &["consent", "list"], "").stdout).unwrap();
    assert_eq!(listed["grants"].as_array().unwrap().len(), 2);

    // C10: intact, then each kind of tampering is reported with its line.
    let verified = run(&state, &["consent", "ledger", "verify"], "");
    assert!(verified.status.success());
    assert!(
        text(&verified.stderr).contains("2 record(s), intact"),
        "{}",
        text(&verified.stderr)
    );
    let ledger = state.join("consent/ledger.jsonl");
    let original = std::fs::read_to_string(&ledger).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    for (what, tampered, line) in [
        ("truncated", format!("{}\n", lines[0]), "line 2"),
        ("deleted", format!("{}\n", lines[1]), "line 1"),
        ("edited", original.replacen("\"grant\"", "\"grant\" ", 1), "line 2"),
    ] {
        std::fs::write(&ledger, tampered).unwrap();
        let broken = run(&state, &["consent", "ledger", "verify"], "");
        assert!(!broken.status.success(), "a {what} ledger verified");
        assert!(text(&broken.stderr).contains(line), "{what}: {}", text(&broken.stderr));
    }
    std::fs::write(&ledger, &original).unwrap();
    assert!(run(&state, &["consent", "ledger", "verify"], "").status.success());
    std::fs::remove_dir_all(state.parent().unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn the_cli_revoke_reaches_a_running_browser() {
    let (state, source) = scratch("revoke");
    let consent = ConsentHost::open(&state, Arc::new(SystemClock), Arc::new(SystemRng)).unwrap();
    let grant = consent
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::for_domains(SourceSpec::StorageState(source.clone()), &["shop.example"]),
        )
        .unwrap();
    // This process runs the browser; the CLI is another process.
    let host = BrowserHost::new();
    let browser = host
        .launch(&ChromiumConfig::new(state.clone()), "live", &|_| {})
        .await
        .unwrap()
        .browser;
    for injection in consent.local_injections(&Caller::local_agent()).unwrap() {
        browser.inject(&injection).await.unwrap();
    }
    // The only tab: the revoke closes it, and its own blank tabs go too (the agent's browser
    // starts without a window and runs on with none; only an attached one keeps a last tab).
    let page = browser.new_page().await.unwrap();
    // shop.example does not resolve here: the tab shows its error page at that URL.
    let _ = tokio::time::timeout(Duration::from_secs(10), page.goto("https://shop.example/")).await;
    // The revoke (another process) finds tabs by their URL: wait until the browser lists this
    // one at it (under load the error page may commit after goto returns).
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while !browser
            .tab_urls()
            .await
            .unwrap()
            .iter()
            .any(|u| u.contains("shop.example"))
        {
            tick.tick().await;
        }
    })
    .await
    .expect("the tab never showed shop.example");
    let before = browser.cookie_names().await.unwrap();
    let tabs_before = browser.tab_urls().await.unwrap().len();
    assert_eq!(
        before.iter().filter(|(_, d)| d.ends_with("shop.example")).count(),
        2,
        "{before:?}"
    );

    let revoked = run(&state, &["consent", "revoke", &grant.id], "");
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let report: Value = serde_json::from_slice(&revoked.stdout).unwrap();
    assert_eq!(
        (report["cookiesDeleted"].as_u64(), report["tabsClosed"].as_u64()),
        (Some(2), Some(1)),
        "{report}"
    );
    let after = browser.cookie_names().await.unwrap();
    assert!(!after.iter().any(|(_, d)| d.ends_with("shop.example")), "{after:?}");
    let tabs = browser.tab_urls().await.unwrap();
    assert!(!tabs.iter().any(|t| t.contains("shop.example")), "{tabs:?}");
    assert_eq!(tabs_before, 1, "the browser had a tab besides the test's");
    assert!(tabs.is_empty(), "the revoke left a tab of its own: {tabs:?}");
    assert!(browser.is_healthy().await, "the revoke left the browser running");
    drop((page, browser));
    host.stop("live", Duration::from_secs(2)).await.unwrap();
    std::fs::remove_dir_all(state.parent().unwrap()).unwrap();
}
