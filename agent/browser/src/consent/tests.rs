use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;

use super::*;
use crate::spec::ToolErrorCode;
use pap_shared::{SystemRng, UnixTime};

const T0: i64 = 1_796_040_000;
const STATE: &str = r#"{"cookies":[
    {"name":"sid","value":"CANARY-COOKIE-VALUE","domain":".shop.example","path":"/","httpOnly":true,"secure":true,"sameSite":"Lax"},
    {"name":"pref","value":"CANARY-PREF","domain":"www.shop.example","path":"/"},
    {"name":"t","value":"CANARY-TRACKER","domain":"tracker.example","path":"/"}],
  "origins":[
    {"origin":"https://shop.example:8443","localStorage":[{"name":"k","value":"CANARY-STORED"}]},
    {"origin":"https://www.shop.example","localStorage":[{"name":"k","value":"CANARY-STORED"}]},
    {"origin":"https://tracker.example","localStorage":[{"name":"k","value":"CANARY-STORED"}]}]}"#;

#[derive(Debug)]
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now(&self) -> UnixTime {
        UnixTime::from_secs(self.0.load(Ordering::SeqCst))
    }
}

#[derive(Default)]
struct Live {
    forgotten: Mutex<Vec<String>>,
    origins: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl LiveInstances for Live {
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, LiveError> {
        let label = match scope {
            Scope::Domains(d) => names(d).join(","),
            Scope::Everything => "*".into(),
        };
        self.forgotten.lock().unwrap().push(label);
        self.origins.lock().unwrap().push(origins.to_vec());
        Ok(Forgotten { cookies: 1, tabs: 1 })
    }

    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError> {
        Ok(injection.cookie_count())
    }
}

struct Fixture {
    dir: PathBuf,
    clock: Arc<TestClock>,
    host: ConsentHost,
    source: PathBuf,
}

/// A test's directory goes with its fixture (each run left one per test in the temp dir).
impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(label: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("pap-consent-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("storage-state.json");
    std::fs::write(&source, STATE).unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(T0)));
    let host = ConsentHost::open(&dir.join("state"), clock.clone(), Arc::new(SystemRng)).unwrap();
    Fixture {
        dir,
        clock,
        host,
        source,
    }
}

fn operator() -> Operator {
    Operator::from_operator_channel("cli")
}

fn request(f: &Fixture, domains: &[&str]) -> GrantRequest {
    GrantRequest::for_domains(SourceSpec::StorageState(f.source.clone()), domains)
}

fn events(f: &Fixture) -> Vec<String> {
    f.host
        .ledger()
        .records()
        .unwrap()
        .iter()
        .map(|r| {
            serde_json::to_value(r.entry.event.kind())
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_grant_holds_only_its_domains_sealed_and_records_names_as_salted_hashes() {
    let f = fixture("grant");
    let grant = f.host.grant(&operator(), request(&f, &["shop.example"])).unwrap();
    assert_eq!(grant.cookie_count, 2, "the tracker's cookie is not granted");
    assert_eq!(grant.sinks, vec![Sink::Local]);
    let injections = f.host.local_injections(&Caller::local_agent()).unwrap();
    assert_eq!(injections.len(), 1);
    assert!(
        injections[0]
            .cookies()
            .iter()
            .all(|c| c.host().ends_with("shop.example"))
    );
    // Nothing on disk or in the ledger holds a value or a cookie name in clear.
    for entry in walk(&f.dir.join("state")) {
        let bytes = std::fs::read(&entry).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("CANARY"), "{} holds a value", entry.display());
        assert!(!text.contains("\"sid\""), "{} holds a cookie name", entry.display());
    }
    let records = f.host.ledger().records().unwrap();
    match &records[0].entry.event {
        Event::Grant { name_hashes, .. } => assert_eq!(name_hashes.len(), 2),
        other => panic!("the first record is {other:?}"),
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn requests_without_domains_public_suffixes_and_wildcards_are_refused_and_change_nothing() {
    let f = fixture("refused");
    for bad in [
        &[][..],
        &["*"],
        &["*.shop.example"],
        &[".shop.example"],
        &["co.uk"],
        &["com"],
        &["github.io"],
    ] {
        let error = f.host.grant(&operator(), request(&f, bad)).unwrap_err();
        assert!(
            matches!(error, ConsentError::NoDomains | ConsentError::InvalidDomain { .. }),
            "{bad:?}: {error}"
        );
    }
    assert!(f.host.all().unwrap().is_empty());
    assert!(events(&f).is_empty());
}

#[test]
fn the_full_profile_is_its_own_request_with_local_sinks_only() {
    let f = fixture("full");
    let mut asked = request(&f, &[]);
    asked.scope = ScopeRequest::FullProfile;
    let grant = f.host.grant(&operator(), asked).unwrap();
    assert!(grant.is_full_profile());
    assert_eq!(grant.cookie_count, 3);
    assert!(matches!(
        f.host.ledger().records().unwrap()[0].entry.event,
        Event::Grant { domains: None, .. }
    ));
    let error = f
        .host
        .acknowledge_sink(&operator(), &grant.id, "cloud-1", "Cloud Ltd")
        .unwrap_err();
    assert!(matches!(error, ConsentError::FullProfileRemote), "{error}");
}

#[test]
fn an_agent_refreshes_within_its_grant_and_every_widening_is_denied_and_recorded() {
    let f = fixture("widen");
    let grant = f.host.grant(&operator(), request(&f, &["shop.example"])).unwrap();
    let agent = Caller::local_agent();
    let (refreshed, injection) = f.host.refresh(&agent, &grant.id, None, None).unwrap();
    assert_eq!(refreshed.grant.cookie_count, 2);
    assert_eq!(injection.cookie_count(), 2);
    let narrower = ["www.shop.example".to_owned()];
    let (refreshed, _) = f.host.refresh(&agent, &grant.id, Some(&narrower), None).unwrap();
    assert_eq!(
        refreshed.grant.cookie_count, 2,
        "the rest of the grant's material stays"
    );
    let wider = ["shop.example".to_owned(), "tracker.example".to_owned()];
    let error = f.host.refresh(&agent, &grant.id, Some(&wider), None).unwrap_err();
    assert_eq!(error.to_tool_error().code, ToolErrorCode::PermissionDenied);
    let other = SourceSpec::StorageState(f.dir.join("other.json"));
    assert!(matches!(
        f.host.refresh(&agent, &grant.id, None, Some(&other)),
        Err(ConsentError::Refused(_))
    ));
    assert_eq!(events(&f), ["grant", "refresh", "refresh", "deny", "deny"]);
    let after = &f.host.list(&agent).unwrap()[0];
    assert_eq!(after.scope, grant.scope, "nothing widened");
    assert_eq!(after.source, grant.source);
}

#[tokio::test]
async fn revoke_by_domain_narrows_and_whole_revoke_ends_with_both_outcomes_recorded() {
    let f = fixture("revoke");
    let grant = f
        .host
        .grant(&operator(), request(&f, &["shop.example", "tracker.example"]))
        .unwrap();
    let live = Live::default();
    let agent = Caller::local_agent();
    let narrowed = f
        .host
        .revoke(&agent, &grant.id, Some(&["tracker.example".to_owned()]), &live)
        .await
        .unwrap();
    assert_eq!(narrowed.grant.domains().unwrap().len(), 1);
    assert_eq!(narrowed.grant.cookie_count, 2);
    assert_eq!(narrowed.derived.local, LocalOutcome::Deleted);
    assert!(f.host.permit_join(&agent, "tracker.example").is_err());
    assert!(f.host.permit_join(&agent, "www.shop.example").is_ok());
    let whole = f.host.revoke(&agent, &grant.id, None, &live).await.unwrap();
    assert!(whole.grant.revoked_at.is_some());
    assert_eq!(*live.forgotten.lock().unwrap(), ["tracker.example", "shop.example"]);
    // The material's storage origins in each scope reach the live instances, ports included.
    assert_eq!(
        *live.origins.lock().unwrap(),
        [
            vec!["https://tracker.example".to_owned()],
            vec![
                "https://shop.example:8443".to_owned(),
                "https://www.shop.example".to_owned()
            ],
        ]
    );
    let error = f.host.permit_join(&agent, "shop.example").unwrap_err();
    let tool = error.to_tool_error();
    assert_eq!(tool.code, ToolErrorCode::ConsentRequired);
    assert_eq!(tool.cause.unwrap()["domain"], "shop.example");
    assert!(f.host.local_injections(&agent).unwrap().is_empty());
    let records = f.host.ledger().records().unwrap();
    assert!(matches!(
        records[2].entry.event,
        Event::Revoke {
            derived: Derived {
                remote: RemoteOutcome::NotApplicable,
                ..
            },
            ..
        }
    ));
    assert!(
        !f.host
            .dir()
            .join("material")
            .join(format!("{}.sealed", grant.id))
            .exists()
    );
}

#[tokio::test]
async fn device_scope_expiry_and_pairing_revocation() {
    let f = fixture("device");
    let mut asked = request(&f, &["shop.example"]);
    asked.device_id = Some("phone".into());
    asked.expires_at = Some(UnixTime::from_secs(T0 + 60));
    let grant = f.host.grant(&operator(), asked).unwrap();
    let phone = Caller::Agent(AgentCaller::paired("phone"));
    let laptop = Caller::Agent(AgentCaller::paired("laptop"));
    assert!(f.host.permit_join(&phone, "shop.example").is_ok());
    assert!(matches!(
        f.host.permit_join(&laptop, "shop.example"),
        Err(ConsentError::ConsentRequired { .. })
    ));
    assert!(f.host.list(&laptop).unwrap().is_empty(), "absent, not forbidden (C12)");
    assert!(matches!(
        f.host.refresh(&laptop, &grant.id, None, None),
        Err(ConsentError::UnknownGrant(_))
    ));
    // Expiry: unusable at once, revoked by the sweep.
    f.clock.0.store(T0 + 60, Ordering::SeqCst);
    assert!(f.host.permit_join(&phone, "shop.example").is_err());
    assert_eq!(f.host.expire(&NoInstances).await.unwrap(), 1);
    let last = f.host.ledger().records().unwrap().pop().unwrap();
    assert_eq!(
        (last.entry.event.kind(), last.entry.actor.kind),
        (EventKind::Revoke, ActorKind::System)
    );
    // Pairing revocation.
    f.clock.0.store(T0, Ordering::SeqCst);
    let mut asked = request(&f, &["shop.example"]);
    asked.device_id = Some("phone".into());
    let second = f.host.grant(&operator(), asked).unwrap();
    let revoked = f.host.revoke_pairing(&operator(), "phone", &NoInstances).await.unwrap();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].grant.id, second.id);
    assert!(f.host.permit_join(&phone, "shop.example").is_err());
}

#[test]
fn a_remote_sink_needs_a_human_sink_ack() {
    let f = fixture("sink");
    let grant = f.host.grant(&operator(), request(&f, &["shop.example"])).unwrap();
    let agent = Caller::local_agent();
    assert!(matches!(
        f.host.remote_injection(&agent, &grant.id, "cloud-1"),
        Err(ConsentError::SinkNotAcknowledged { .. })
    ));
    let acked = f
        .host
        .acknowledge_sink(&operator(), &grant.id, "cloud-1", "Cloud Ltd")
        .unwrap();
    assert!(acked.sinks.contains(&Sink::Remote {
        provider_id: "cloud-1".into(),
        ack_seq: 1
    }));
    assert_eq!(
        f.host
            .remote_injection(&agent, &grant.id, "cloud-1")
            .unwrap()
            .cookie_count(),
        2
    );
    assert!(f.host.remote_injection(&agent, &grant.id, "cloud-2").is_err());
}

#[cfg(unix)]
#[test]
fn loose_files_and_directories_are_tightened_on_open() {
    use std::os::unix::fs::PermissionsExt as _;
    let f = fixture("perms");
    f.host.grant(&operator(), request(&f, &["shop.example"])).unwrap();
    let consent = f.host.dir().to_path_buf();
    std::fs::set_permissions(&consent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(consent.join("grants.json"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let sealed = std::fs::read_dir(consent.join("material"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::set_permissions(&sealed, std::fs::Permissions::from_mode(0o664)).unwrap();
    std::fs::set_permissions(consent.join("material"), std::fs::Permissions::from_mode(0o775)).unwrap();
    std::fs::set_permissions(
        f.dir.join("state/keys/store.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let _ = ConsentHost::open(&f.dir.join("state"), f.clock.clone(), Arc::new(SystemRng)).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&consent), 0o700);
    for file in walk(&f.dir.join("state")) {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        assert_eq!(mode(file.parent().unwrap()), 0o700, "{}", file.display());
    }
}

#[test]
fn granted_values_are_redacted_from_results_wherever_they_appear() {
    let f = fixture("redact");
    f.host.grant(&operator(), request(&f, &["shop.example"])).unwrap();
    let mut result = serde_json::json!({
        "value": "sid=CANARY-COOKIE-VALUE; pref=CANARY-PREF",
        "nested": [{"body": "<p>CANARY-COOKIE-VALUE</p>"}],
        "untouched": "CANARY-TRACKER is not granted",
        "number": 7,
    });
    assert_eq!(f.host.redact(&mut result).unwrap(), 3);
    let text = result.to_string();
    assert!(
        !text.contains("CANARY-COOKIE-VALUE") && !text.contains("CANARY-PREF"),
        "{text}"
    );
    assert_eq!(
        result["value"],
        "sid=[granted value redacted]; pref=[granted value redacted]"
    );
    assert_eq!(
        result["untouched"], "CANARY-TRACKER is not granted",
        "only granted material"
    );
}

#[test]
fn refused_attempts_past_the_minutes_budget_are_refused_but_not_recorded() {
    let f = fixture("deny-budget");
    let agent = Caller::local_agent();
    for _ in 0..100 {
        let refused = f.host.deny(&agent, "", "no grant covers evil.example");
        assert!(matches!(refused, ConsentError::Refused(_)), "{refused}");
    }
    let denies = |f: &Fixture| events(f).iter().filter(|e| *e == "deny").count();
    assert_eq!(denies(&f), DENY_RECORDS_PER_MINUTE as usize);
    // A minute on: recorded again, with how many went unrecorded.
    f.clock.0.fetch_add(60, Ordering::SeqCst);
    let _ = f.host.deny(&agent, "", "no grant covers evil.example");
    assert_eq!(denies(&f), DENY_RECORDS_PER_MINUTE as usize + 1);
    let records = f.host.ledger().records().unwrap();
    let Event::Deny { reason, .. } = &records.last().unwrap().entry.event else {
        panic!("the last record is not a deny");
    };
    assert_eq!(
        reason,
        "[70 earlier refusal(s) not recorded] no grant covers evil.example"
    );
    assert!(f.host.ledger().verify().is_ok());
}

/// Running browsers that fail to forget every time (an owner that hangs up).
struct Unreachable(std::sync::atomic::AtomicUsize);

#[async_trait]
impl LiveInstances for Unreachable {
    async fn forget(&self, _scope: Scope<'_>, _origins: &[String]) -> Result<Forgotten, LiveError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(LiveError::Owner {
            detail: "no answer".into(),
        })
    }

    async fn inject(&self, _injection: &Injection) -> Result<usize, LiveError> {
        Ok(0)
    }
}

#[tokio::test]
async fn a_pairing_revoke_revokes_every_grant_of_the_device_when_a_browser_fails() {
    // Review N12: the first grant's cleaning fails; the second grant is revoked all the same,
    // its cleaning asked for too, and both failures are reported.
    let f = fixture("pairing-fan-out");
    for domain in ["shop.example", "tracker.example"] {
        let mut asked = request(&f, &[domain]);
        asked.device_id = Some("phone".into());
        f.host.grant(&operator(), asked).unwrap();
    }
    let live = Unreachable(std::sync::atomic::AtomicUsize::new(0));
    let failed = f.host.revoke_pairing(&operator(), "phone", &live).await.unwrap_err();
    assert_eq!(
        live.0.load(Ordering::SeqCst),
        2,
        "the second grant's browsers were not asked"
    );
    assert!(
        matches!(&failed, ConsentError::Live(LiveError::Several(all)) if all.len() == 2),
        "{failed:?}"
    );
    let grants = f.host.grants.load().unwrap();
    assert_eq!(grants.len(), 2);
    assert!(
        grants.iter().all(|g| g.revoked_at.is_some()),
        "a grant of the device stayed active"
    );
}
