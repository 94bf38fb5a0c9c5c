//! A real Chromium profile as a grant source (AIP-63 C5): Chromium itself writes the cookie
//! database (set over CDP, flushed by a graceful close); the presence scan counts by host; a
//! grant reads and decrypts only its hosts, which this test proves by making another host's
//! value undecryptable and granting anyway; no value reaches the consent store in clear.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Browser;
use chromiumoxide::cdp::browser_protocol::browser::CloseParams;
use chromiumoxide::cdp::browser_protocol::network::CookieParam;
use futures_util::StreamExt as _;
use pap_browser::chromium::StandaloneChromium;
use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator, SourceSpec};
use pap_shared::{SystemClock, SystemRng};

const PLANTED: &str = "PLANTED-CHROMIUM-PROFILE-VALUE";

/// Chromium writes a profile with three cookies, then closes and flushes it.
async fn written_profile(user_data_dir: &std::path::Path) {
    // The basic password store: v10 values, which a host without a desktop keyring can read.
    let mut chromium = StandaloneChromium::start(
        std::path::Path::new(pap_browser::chromium::CHROMIUM),
        user_data_dir,
        0,
        &["--password-store=basic"],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let endpoint = format!("http://{}", chromium.endpoint());
    let (browser, mut handler) = Browser::connect(endpoint).await.unwrap();
    let driver = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let cookie = |name: &str, host: &str, domain_cookie: bool| {
        let mut param = CookieParam::new(name, PLANTED);
        if domain_cookie {
            param.domain = Some(format!(".{host}"));
            param.path = Some("/".into());
        } else {
            param.url = Some(format!("https://{host}/"));
        }
        param.secure = Some(true);
        param.expires = Some(chromiumoxide::cdp::browser_protocol::network::TimeSinceEpoch::new(
            4_102_444_800.0,
        ));
        param
    };
    browser
        .set_cookies(vec![
            cookie("sid", "granted.example", false),
            cookie("pref", "granted.example", true),
            cookie("t", "other.example", false),
        ])
        .await
        .unwrap();
    let _ = browser.execute(CloseParams::default()).await;
    assert!(
        chromium.exited_within(Duration::from_secs(20)).await,
        "Chromium did not exit after Browser.close"
    );
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_chromium_profile_is_scanned_by_host_and_only_granted_hosts_are_decrypted() {
    let dir = std::env::temp_dir().join(format!("pap-chromium-source-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The profile's parent: reachable by the browser's user where Chromium runs as one.
    std::fs::create_dir_all(&dir).unwrap();
    let user_data_dir = dir.join("chromium");
    written_profile(&user_data_dir).await;
    let profile = user_data_dir.join("Default");
    let source = SourceSpec::ChromiumProfile(profile.clone());

    let consent = ConsentHost::open(&dir.join("state"), Arc::new(SystemClock), Arc::new(SystemRng)).unwrap();
    let scan = consent.scan(&source).unwrap();
    assert_eq!(scan.get("granted.example"), Some(&2), "{scan:?}");
    assert_eq!(scan.get("other.example"), Some(&1), "{scan:?}");

    // Make other.example's value undecryptable: a grant that read it would fail.
    let database = ["Network/Cookies", "Cookies"]
        .iter()
        .map(|p| profile.join(p))
        .find(|p| p.is_file())
        .unwrap();
    let db = rusqlite::Connection::open(&database).unwrap();
    let changed = db
        .execute(
            "UPDATE cookies SET encrypted_value = X'7631317878' WHERE host_key = 'other.example'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);

    let grant = consent
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::for_domains(source.clone(), &["granted.example"]),
        )
        .unwrap();
    assert_eq!(grant.cookie_count, 2);
    assert_eq!(grant.source.kind, pap_browser::consent::SourceKind::Chrome);
    let injections = consent.local_injections(&Caller::local_agent()).unwrap();
    let mut names = injections[0].cookie_names();
    names.sort();
    assert_eq!(
        names,
        [
            ("pref".to_owned(), ".granted.example".to_owned()),
            ("sid".to_owned(), "granted.example".to_owned())
        ]
    );
    // Asking for other.example reaches its (broken) value and says so, without any bytes of it.
    let error = consent
        .grant(
            &Operator::from_operator_channel("test"),
            GrantRequest::for_domains(source, &["other.example"]),
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("keyring"), "{error}");

    for entry in pap_browser::testkit::files_under(&dir.join("state")) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(PLANTED),
            "{} holds a value in clear",
            entry.display()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
