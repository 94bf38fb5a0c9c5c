//! Review N12: a revoke reaching the running browsers of a state directory from another process
//! (`LiveProfiles`, as `pap-agent consent revoke` does) asks every browser's owner, whatever an
//! earlier one answered, reports every failure, and never asks at a path outside the state
//! directory (`STATE/browsers/../../x` passes a component-wise `starts_with`).

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::io;
use std::path::Path;
use std::sync::Arc;

use pap_browser::chromium::{LiveProfiles, ORPHAN_MARKER, ProcessInfo, ProcessTable};
use pap_browser::consent::{LiveError, LiveInstances as _, Scope};

/// Marked browsers of a state directory, as `/proc` would show them.
struct Browsers(Vec<ProcessInfo>);

impl ProcessTable for Browsers {
    fn list(&self) -> io::Result<Vec<ProcessInfo>> {
        Ok(self.0.clone())
    }
    fn terminate(&self, _pid: u32, _force: bool) -> io::Result<()> {
        Ok(())
    }
}

fn browser(pid: u32, user_data_dir: &Path) -> ProcessInfo {
    ProcessInfo {
        pid,
        args: vec![
            "chromium".into(),
            format!("--user-data-dir={}", user_data_dir.display()),
            format!("{ORPHAN_MARKER}=i{pid}"),
        ],
    }
}

/// An owner that reads each ask and answers that it failed (as an owner whose browser hung
/// answers): it counts the asks it was sent.
fn failing_owner(socket: &Path) -> (Arc<std::sync::atomic::AtomicUsize>, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = asked.clone();
    let serving = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (reading, mut writing) = stream.into_split();
            let mut ask = String::new();
            let _ = tokio::io::BufReader::new(reading).read_line(&mut ask).await;
            let _ = writing
                .write_all(b"{\"failed\":\"the browser did not answer\"}\n")
                .await;
        }
    });
    (asked, serving)
}

#[tokio::test]
async fn every_browser_is_asked_and_every_failure_reported() {
    let dir = std::env::temp_dir().join(format!("pap-revoke-fan-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let state = dir.join("state");
    let browsers = state.join("browsers");
    std::fs::create_dir_all(browsers.join("a")).unwrap();
    std::fs::create_dir_all(browsers.join("b")).unwrap();
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    let (asked_a, _a) = failing_owner(&browsers.join("a.control"));
    let (asked_b, _b) = failing_owner(&browsers.join("b.control"));
    // A marked process naming a profile outside the state directory through `..`, with an
    // owner listening there.
    let (asked_outside, _o) = failing_owner(&dir.join("outside.control"));
    let table = Browsers(vec![
        browser(101, &browsers.join("a")),
        browser(102, &browsers.join("b")),
        browser(103, &browsers.join("../../outside")),
    ]);
    let live = LiveProfiles::with_processes(&state, Arc::new(table));

    let domains = vec![pap_shared::GrantDomain::parse("shop.example").unwrap()];
    let failed = live.forget(Scope::Domains(&domains), &[]).await.unwrap_err();
    let ordering = std::sync::atomic::Ordering::SeqCst;
    assert_eq!(asked_a.load(ordering), 1, "the first browser was not asked");
    assert_eq!(
        asked_b.load(ordering),
        1,
        "a failing browser kept the next one from being asked"
    );
    assert_eq!(
        asked_outside.load(ordering),
        0,
        "a `..` profile was asked outside the state directory"
    );
    match failed {
        LiveError::Several(failures) => assert_eq!(failures.len(), 2, "{failures:?}"),
        other => panic!("one failure reported for two: {other}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
