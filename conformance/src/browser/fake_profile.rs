//! The fake's profile level: the agent's real [`ConsentHost`] on a scratch directory, an
//! in-memory instance (a cookie jar of names and domains, a list of tab URLs), and the profile
//! defects bending one rule each at the boundary the hooks see.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pap_browser::consent::{
    Caller, ConsentHost, Forgotten, Grant, GrantRequest, Injection, LiveError, LiveInstances, NoInstances, Operator,
    Scope, ScopeRequest, SourceSpec,
};
use pap_browser::spec::{AgentCaller, ToolError, ToolErrorCode, ToolResult};
use pap_shared::{SystemClock, SystemRng};
use serde_json::{Value, json};

use super::ProfileUnderTest;
use super::defect::Defect;

/// The fake instance: what a browser would hold, without values.
#[derive(Debug, Default)]
struct Instance {
    cookies: Mutex<Vec<(String, String)>>,
    tabs: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn host_of(url: &str) -> Option<String> {
    url::Url::parse(url).ok()?.host_str().map(str::to_owned)
}

#[async_trait]
impl LiveInstances for Instance {
    async fn forget(&self, scope: Scope<'_>, _origins: &[String]) -> Result<Forgotten, LiveError> {
        let mut cookies = lock(&self.cookies);
        let before = cookies.len();
        cookies.retain(|(_, domain)| !scope.covers(domain.trim_start_matches('.')));
        let mut tabs = lock(&self.tabs);
        let open = tabs.len();
        tabs.retain(|url| !host_of(url).is_some_and(|h| scope.covers(&h)));
        Ok(Forgotten {
            cookies: before - cookies.len(),
            tabs: open - tabs.len(),
        })
    }

    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError> {
        let mut cookies = lock(&self.cookies);
        for cookie in injection.cookie_names() {
            if !cookies.contains(&cookie) {
                cookies.push(cookie);
            }
        }
        Ok(injection.cookie_count())
    }
}

/// The fake's profile surface.
#[derive(Debug)]
pub(super) struct FakeProfile {
    dir: PathBuf,
    consent: ConsentHost,
    instance: Instance,
    defect: Option<Defect>,
}

impl FakeProfile {
    /// A fresh consent store under a scratch directory unique to this fake.
    pub(super) fn open(defect: Option<Defect>) -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pap-fake-profile-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("scratch")).ok()?;
        let consent = ConsentHost::open(&dir.join("state"), Arc::new(SystemClock), Arc::new(SystemRng)).ok()?;
        Some(Self {
            dir,
            consent,
            instance: Instance::default(),
            defect,
        })
    }

    fn has(&self, defect: Defect) -> bool {
        self.defect == Some(defect)
    }

    /// Who the consent host is told calls: with the defect, everyone is the operator (who
    /// sees every device's grants).
    fn caller(&self, device: Option<&str>) -> Caller {
        if self.has(Defect::DeviceScopeIgnored) {
            return Caller::Operator(operator());
        }
        Caller::Agent(agent(device))
    }
}

impl Drop for FakeProfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn operator() -> Operator {
    Operator::from_operator_channel("fake")
}

fn agent(device: Option<&str>) -> AgentCaller {
    device.map_or_else(AgentCaller::local, AgentCaller::paired)
}

#[async_trait]
impl ProfileUnderTest for FakeProfile {
    fn scratch(&self) -> PathBuf {
        self.dir.join("scratch")
    }

    fn grant(&self, mut request: GrantRequest) -> Result<Grant, String> {
        let (empty, wildcard) = match &request.scope {
            ScopeRequest::Domains(domains) => (domains.is_empty(), domains.iter().any(|d| d.contains('*'))),
            ScopeRequest::FullProfile => (false, false),
        };
        if empty && self.has(Defect::DefaultAllDomains) {
            request.scope = ScopeRequest::FullProfile;
        }
        if wildcard && self.has(Defect::WildcardAccepted) {
            // A grant made up for the wildcard, as a host that never checks would.
            return Ok(Grant {
                id: "g_wildcard".into(),
                session_id: "cs_fake".into(),
                source: pap_browser::consent::Source {
                    kind: pap_browser::consent::SourceKind::File,
                    profile: String::new(),
                },
                sinks: vec![pap_browser::consent::Sink::Local],
                granted_at: pap_shared::UnixTime::from_secs(1_767_225_600),
                granted_via: pap_browser::consent::GrantedVia::Flag,
                cookie_count: 0,
                device_id: None,
                expires_at: None,
                revoked_at: Some(pap_shared::UnixTime::from_secs(1_767_225_600)),
                scope: pap_browser::consent::GrantScope::FullProfile,
            });
        }
        let grant = self.consent.grant(&operator(), request).map_err(|e| e.to_string())?;
        if self.has(Defect::LooseFiles) {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(
                self.consent.dir().join("grants.json"),
                std::fs::Permissions::from_mode(0o644),
            );
        }
        Ok(grant)
    }

    fn full_profile_warning(&self) -> String {
        if self.has(Defect::FullProfileNoWarning) {
            return String::new();
        }
        pap_browser::consent::FULL_PROFILE_WARNING.to_owned()
    }

    fn scan(&self, source: &Path) -> Result<BTreeMap<String, u64>, String> {
        let source = SourceSpec::StorageState(source.to_owned());
        let mut counts = self.consent.scan(&source).map_err(|e| e.to_string())?;
        if self.has(Defect::ScanShowsValues) {
            // A "scan" that reads the whole file, values and all.
            let SourceSpec::StorageState(path) = source else {
                return Ok(counts);
            };
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            let parsed: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            for cookie in parsed["cookies"].as_array().into_iter().flatten() {
                counts.insert(format!("{} = {}", cookie["domain"], cookie["value"]), 1);
            }
        }
        Ok(counts)
    }

    fn acknowledge_sink(&self, grant: &str, provider: &str) -> Result<Grant, String> {
        self.consent
            .acknowledge_sink(&operator(), grant, provider, "the fake's operator")
            .map_err(|e| e.to_string())
    }

    fn remote_injection(&self, grant: &str, provider: &str) -> Result<usize, ToolError> {
        if self.has(Defect::RemoteWithoutAck) {
            return Ok(1);
        }
        self.consent
            .remote_injection(&self.caller(None), grant, provider)
            .map(|i| i.cookie_count())
            .map_err(|e| e.to_tool_error())
    }

    fn permit_join(&self, device: Option<&str>, host: &str) -> Result<(), ToolError> {
        self.consent
            .permit_join(&self.caller(device), host)
            .map(|_| ())
            .map_err(|e| e.to_tool_error())
    }

    async fn pairing_revoked(&self, device: &str) -> Result<(), String> {
        if self.has(Defect::PairingIgnored) {
            return Ok(());
        }
        self.consent
            .revoke_pairing(&operator(), device, &self.instance)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn call_as(&self, device: Option<&str>, tool: &str, input: Value) -> ToolResult {
        let caller = agent(device);
        let widening = input.get("domains").is_some() || input.get("source").is_some();
        if tool == "browser.profile.refresh" && widening && self.has(Defect::AgentWidens) {
            return ToolResult::Ok(json!({ "grant": input["grantId"], "injected": 0 }));
        }
        let live: &dyn LiveInstances = if self.has(Defect::RevokeKeepsCookies) {
            &NoInstances
        } else {
            &self.instance
        };
        let Some(tool_id) = pap_browser::spec::ToolId::parse(tool) else {
            return ToolResult::Err(ToolError::unsupported(tool, tool));
        };
        let result = pap_browser::consent::profile_tool(&self.consent, &caller, tool_id, &input, live).await;
        match result {
            Ok(mut value) => {
                if tool == "browser.profile.list" && self.has(Defect::ValueInList) {
                    // A list that shows what it read from each grant's source.
                    for grant in value["grants"].as_array_mut().into_iter().flatten() {
                        let path = grant["source"]["profile"].as_str().unwrap_or_default().to_owned();
                        grant["read"] = json!(std::fs::read_to_string(path).unwrap_or_default());
                    }
                }
                ToolResult::Ok(value)
            }
            Err(error) => ToolResult::Err(error),
        }
    }

    async fn inject_granted(&self) -> Result<(), String> {
        if self.has(Defect::GrantBypass) {
            // Cookies handed over at attach, straight from every source file in reach.
            for entry in std::fs::read_dir(self.scratch()).map_err(|e| e.to_string())?.flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let parsed: Value = serde_json::from_str(&text).unwrap_or_default();
                for cookie in parsed["cookies"].as_array().into_iter().flatten() {
                    let name = cookie["name"].as_str().unwrap_or_default().to_owned();
                    let domain = cookie["domain"].as_str().unwrap_or_default().to_owned();
                    lock(&self.instance.cookies).push((name, domain));
                }
            }
        }
        let injections = self
            .consent
            .local_injections(&Caller::local_agent())
            .map_err(|e| e.to_string())?;
        for injection in &injections {
            self.instance.inject(injection).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn cookies(&self) -> Vec<(String, String)> {
        lock(&self.instance.cookies).clone()
    }

    async fn tabs(&self) -> Vec<String> {
        lock(&self.instance.tabs).clone()
    }

    async fn target_jar(&self, _target: &str) -> Result<Vec<(String, String)>, String> {
        // The fake keeps each grant's cookies apart, and no grant covers the suite's pages.
        Ok(if self.has(Defect::OneJar) {
            lock(&self.instance.cookies).clone()
        } else {
            Vec::new()
        })
    }

    async fn open_tab(&self, url: &str) -> Result<(), String> {
        lock(&self.instance.tabs).push(url.to_owned());
        Ok(())
    }

    fn consent_dir(&self) -> PathBuf {
        self.consent.dir().to_owned()
    }

    fn verify_ledger(&self, dir: &Path) -> Result<u64, String> {
        if self.has(Defect::VerifyMissesTruncation) {
            // Counts lines and checks nothing: the reference's blind spot.
            let text = std::fs::read_to_string(dir.join("ledger.jsonl")).map_err(|e| e.to_string())?;
            return Ok(u64::try_from(text.lines().count()).unwrap_or(0));
        }
        let ledger = pap_browser::consent::Ledger::in_dir(dir).map_err(|e| e.to_string())?;
        ledger.verify().map(|s| s.records).map_err(|e| e.to_string())
    }
}

/// The fake instance answers `browser.profile.*` only through the consent host; anything else
/// a profile call names is not its business.
pub(super) fn is_profile_tool(tool: &str) -> bool {
    tool.starts_with("browser.profile.")
}

/// An error for a profile surface that could not be opened.
pub(super) fn unavailable(tool: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::Internal,
        format!("{tool}: the fake's consent store could not be opened"),
    )
}
