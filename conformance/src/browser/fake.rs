//! An in-memory provider that keeps every rule the hooks test, and the same provider broken in
//! one way at a time ([`Defect`]): the suite's own test is that each defect turns exactly its
//! hook red and the sound fake turns none.
//!
//! The fake's supervision is the agent's real [`Supervisor`] behind a wrapper that the timing
//! defects bend, so the sound case also checks the real supervisor a second time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use async_trait::async_trait;
use pap_browser::spec::{CallGate, Health, InstanceState, Launch, OperatorReset, Policy, Stalled, Supervisor};
use pap_browser::spec::{NamedOrigin, NavigationPolicy, ToolError, ToolErrorCode, ToolResult};
use serde_json::{Value, json};

use super::defect::Defect;
use super::fake_profile::{self, FakeProfile};
use super::{Launched, ProfileUnderTest, ProviderUnderTest, SupervisionUnderTest, ToolsUnderTest};

/// The fake's manifest: core tools and tabs, multiple targets, and cookies with the profile tools.
const MANIFEST: &str = "---
spec: agentdriver/v1
name: Conformance fake
id: conformance.fake
description: An in-memory provider for the AIP-63 suite's own tests.
version: 0.1.0
kind: sdk
implements:
  - { tool: browser.navigate, version: \"1\" }
  - { tool: browser.evaluate, version: \"1\" }
  - { tool: browser.get_dom, version: \"1\" }
  - { tool: browser.screenshot, version: \"1\" }
  - { tool: browser.click, version: \"1\" }
  - { tool: browser.fill, version: \"1\" }
  - { tool: browser.tabs, version: \"1\" }
  - { tool: browser.profile.list, version: \"1\" }
  - { tool: browser.profile.refresh, version: \"1\" }
  - { tool: browser.profile.revoke, version: \"1\" }
health_check: { method: ping }
browser:
  location: local
  display: [headless]
  instances: single
  capabilities:
    multiTarget: true
    cookies: true
  profiles:
    modes: [ephemeral]
    storedBy: host
  lifecycle:
    launch: { idempotent: true, budgetMs: 120000, progressWindowMs: 10000, hardCeilingMs: 360000 }
    health: { timeoutMs: 5000 }
    stop: { graceMs: 2000 }
    supervision:
      crashLoop: { maxFailures: 3, windowMs: 300000 }
      orphanMarker: \"--conformance-fake\"
  conformance: [core, interaction, profile]
---
";

/// A process in the fake's process table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The running instance's browser.
    Browser,
    /// Someone else's process.
    Unmarked,
    /// A marked browser a killed host left.
    Orphan,
    /// A browser someone else started, which an attach provider attaches to.
    Foreign,
}

#[derive(Debug, Default)]
struct State {
    /// The running instance: its pid and boot.
    running: Option<(u32, u64)>,
    stopped: bool,
    boots: u64,
    processes: HashMap<u32, Kind>,
    next_pid: u32,
    /// Target id -> (boot, keepAlive).
    targets: HashMap<String, (u64, bool)>,
    next_target: u64,
    /// What `browser.fill` typed (the page's `#name`).
    typed: Option<String>,
}

impl State {
    fn spawn(&mut self, kind: Kind) -> u32 {
        self.next_pid += 1;
        let pid = 1_000 + self.next_pid;
        self.processes.insert(pid, kind);
        pid
    }
}

/// The in-memory provider, sound or with one [`Defect`].
#[derive(Debug)]
pub struct FakeProvider {
    defect: Option<Defect>,
    state: Mutex<State>,
    profile: Option<FakeProfile>,
    /// An attach provider: its browser runs before any launch and outlives a plain stop.
    attached: bool,
}

impl FakeProvider {
    /// A provider that keeps every rule.
    pub fn sound() -> Self {
        Self {
            defect: None,
            state: Mutex::default(),
            profile: FakeProfile::open(None),
            attached: false,
        }
    }

    /// A sound attach provider: it attaches to a browser it did not start.
    pub fn attached() -> Self {
        Self {
            attached: true,
            ..Self::sound()
        }
    }

    /// A provider broken in exactly one way.
    pub fn broken(defect: Defect) -> Self {
        Self {
            defect: Some(defect),
            state: Mutex::default(),
            profile: FakeProfile::open(Some(defect)),
            attached: defect == Defect::ForeignStoppedWithoutForce,
        }
    }

    fn has(&self, defect: Defect) -> bool {
        self.defect == Some(defect)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn dispatch(&self, tool: &str, input: &Value) -> Result<Value, ToolError> {
        const LISTED: [&str; 7] = [
            "browser.navigate",
            "browser.evaluate",
            "browser.get_dom",
            "browser.screenshot",
            "browser.click",
            "browser.fill",
            "browser.tabs",
        ];
        if !LISTED.contains(&tool) {
            if self.has(Defect::UntypedUnsupported) {
                return Err(ToolError::new(ToolErrorCode::Internal, "no such tool"));
            }
            let gate = pap_browser::spec::ToolId::parse(tool).and_then(|t| t.spec().gate);
            return Err(ToolError::unsupported(tool, gate.map_or(tool, |g| g.name())));
        }
        let url = input.get("url").and_then(Value::as_str);
        if let Some(url) = url.filter(|_| !self.has(Defect::NavigatesAnywhere)) {
            let suite = NamedOrigin::every_port(super::SUITE_ORIGIN)
                .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
            NavigationPolicy::naming([suite])
                .navigation(url)
                .map_err(|refused| ToolError::new(ToolErrorCode::PermissionDenied, refused.to_string()))?;
        }
        let mut state = self.state();
        let Some((_, boot)) = state.running else {
            if self.has(Defect::OpaqueNotReady) && tool == "browser.navigate" {
                return Err(ToolError::new(ToolErrorCode::Internal, "connection refused"));
            }
            let now = if state.stopped {
                InstanceState::Stopped
            } else {
                InstanceState::Absent
            };
            return Err(ToolError::new(ToolErrorCode::NotReady, format!("the browser is {now}"))
                .with_cause(json!({ "state": now })));
        };
        let action = input.get("action").and_then(Value::as_str);
        if tool == "browser.tabs" && action == Some("list") {
            let targets: Vec<Value> = state
                .targets
                .iter()
                .filter(|(_, (b, _))| *b == boot)
                .map(|(id, _)| json!({ "target": id }))
                .collect();
            return Ok(json!({ "targets": targets }));
        }
        if tool == "browser.tabs" && action == Some("close") {
            let id = input.get("target").and_then(Value::as_str).unwrap_or_default();
            return match state.targets.remove(id) {
                Some(_) => Ok(json!({ "target": id })),
                None => Err(ToolError::new(ToolErrorCode::NotFound, "no such target")),
            };
        }
        let target = match input.get("target").and_then(Value::as_str) {
            Some(id) => {
                let (target_boot, _) = *state
                    .targets
                    .get(id)
                    .ok_or_else(|| ToolError::new(ToolErrorCode::NotFound, "no such target"))?;
                if target_boot != boot && !self.has(Defect::StaleHandleRebound) {
                    return Err(ToolError::new(
                        ToolErrorCode::TargetGone,
                        "the target belonged to a previous boot",
                    ));
                }
                id.to_owned()
            }
            None => {
                state.next_target += 1;
                let id = format!("t{}", state.next_target);
                let keep_alive = input.get("keepAlive").and_then(Value::as_bool).unwrap_or(false);
                state.targets.insert(id.clone(), (boot, keep_alive));
                id
            }
        };
        match tool {
            "browser.evaluate" => {
                let expression = input.get("expression").and_then(Value::as_str).unwrap_or_default();
                let value = match expression {
                    e if e.contains("'out'") => json!(state.typed.as_ref().map(|t| format!("hi {t}"))),
                    e if e.contains("textContent") => json!("hello"),
                    _ => json!(1),
                };
                Ok(json!({ "target": target, "value": value }))
            }
            "browser.fill" => {
                let value = input.get("value").and_then(Value::as_str).unwrap_or_default();
                state.typed = Some(value.to_owned());
                Ok(json!({ "target": target, "characters": value.chars().count() }))
            }
            "browser.get_dom" => Ok(json!({ "target": target, "html": "<h1 id=\"h\">hello</h1>" })),
            "browser.screenshot" => Ok(json!({ "target": target, "bytes": 68 })),
            _ => Ok(json!({ "target": target })),
        }
    }
}

#[async_trait]
impl ToolsUnderTest for FakeProvider {
    /// The fake serves no vendor tool.
    fn offers(&self, tool: pap_browser::spec::ToolId) -> bool {
        tool.is_reserved()
    }

    async fn launch(&self) -> Result<Launched, ToolError> {
        let mut state = self.state();
        if let Some((pid, boot_id)) = state.running
            && !self.has(Defect::NonIdempotentLaunch)
        {
            return Ok(Launched {
                pid: Some(pid),
                boot_id,
                was_already_running: true,
            });
        }
        if let Some((pid, _)) = state.running {
            state.processes.remove(&pid);
        }
        state.boots += 1;
        let boot_id = state.boots;
        let foreign = state
            .processes
            .iter()
            .find(|(_, kind)| **kind == Kind::Foreign)
            .map(|(pid, _)| *pid);
        let pid = match (self.attached, foreign) {
            (true, Some(pid)) => pid,
            // The operator keeps the attached browser running: started before the host needs it.
            (true, None) => state.spawn(Kind::Foreign),
            (false, _) => state.spawn(Kind::Browser),
        };
        state.running = Some((pid, boot_id));
        state.stopped = false;
        Ok(Launched {
            pid: Some(pid),
            boot_id,
            was_already_running: self.attached,
        })
    }

    async fn call(&self, tool: &str, input: Value) -> ToolResult {
        if fake_profile::is_profile_tool(tool) {
            return match &self.profile {
                Some(profile) => profile.call_as(None, tool, input).await,
                None => ToolResult::Err(fake_profile::unavailable(tool)),
            };
        }
        match self.dispatch(tool, &input) {
            Ok(value) => ToolResult::Ok(value),
            Err(error) => ToolResult::Err(error),
        }
    }
}

#[async_trait]
impl ProviderUnderTest for FakeProvider {
    fn manifest_text(&self) -> String {
        MANIFEST.to_owned()
    }

    async fn health(&self) -> Health {
        let mut state = self.state();
        let boot_id = state.boots;
        if let (true, Some((_, boot))) = (self.has(Defect::HealthOpensTarget), state.running) {
            state.next_target += 1;
            let id = format!("probe{}", state.next_target);
            state.targets.insert(id, (boot, false));
        }
        let state = match (state.running, state.stopped) {
            (Some(_), _) => InstanceState::Healthy,
            (None, true) if self.has(Defect::HealthyAfterStop) => InstanceState::Healthy,
            (None, true) => InstanceState::Stopped,
            (None, false) => InstanceState::Absent,
        };
        Health {
            state,
            reason: None,
            checked_at: 0,
            boot_id,
        }
    }

    async fn stop(&self) -> Result<(), ToolError> {
        let mut state = self.state();
        if state.running.is_none() && self.has(Defect::StopThrowsSecondTime) {
            return Err(ToolError::new(ToolErrorCode::Internal, "the browser is not running"));
        }
        if let Some((pid, _)) = state.running.take() {
            if !self.attached || self.has(Defect::ForeignStoppedWithoutForce) {
                state.processes.remove(&pid);
            }
            if self.has(Defect::StopKillsUnmarked) {
                state.processes.retain(|_, kind| *kind != Kind::Unmarked);
            }
            state.stopped = true;
        }
        Ok(())
    }

    async fn stop_forced(&self) -> Result<(), ToolError> {
        let mut state = self.state();
        if let Some((pid, _)) = state.running.take() {
            state.processes.remove(&pid);
            state.stopped = true;
        }
        Ok(())
    }

    async fn target_count(&self) -> Option<usize> {
        let state = self.state();
        let (_, boot) = state.running?;
        Some(state.targets.values().filter(|(b, _)| *b == boot).count())
    }

    fn is_running(&self, pid: u32) -> bool {
        self.state().processes.contains_key(&pid)
    }

    async fn plant_unmarked(&self) -> Result<u32, String> {
        Ok(self.state().spawn(Kind::Unmarked))
    }

    async fn plant_orphan(&self) -> Result<u32, String> {
        Ok(self.state().spawn(Kind::Orphan))
    }

    async fn host_start(&self) {
        if !self.has(Defect::NoSweepOnStart) {
            self.state().processes.retain(|_, kind| *kind != Kind::Orphan);
        }
    }

    async fn reap_idle(&self) {
        let keep_alive_too = self.has(Defect::ReaperClosesKeepAlive);
        self.state()
            .targets
            .retain(|_, (_, keep_alive)| *keep_alive && !keep_alive_too);
    }

    async fn user_data_dir(&self) -> Option<PathBuf> {
        if self.has(Defect::DefaultProfile) {
            return std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config/chromium/Default"));
        }
        Some(std::env::temp_dir())
    }

    fn profile(&self) -> Option<&dyn ProfileUnderTest> {
        self.profile.as_ref().map(|p| p as &dyn ProfileUnderTest)
    }

    fn supervision(&self) -> Box<dyn SupervisionUnderTest> {
        Box::new(FakeSupervision {
            real: Supervisor::new(Policy::default()),
            defect: self.defect,
            started_at: 0,
        })
    }
}

const KEY: &str = "fake";

/// The real supervisor, bent by the timing defects.
struct FakeSupervision {
    real: Supervisor,
    defect: Option<Defect>,
    started_at: u64,
}

impl SupervisionUnderTest for FakeSupervision {
    fn policy(&self) -> Policy {
        self.real.policy()
    }
    fn launch(&mut self, now: u64) -> Result<Launch, ToolError> {
        self.started_at = now;
        match self.real.launch(KEY, now) {
            Err(e) if e.code == ToolErrorCode::CrashLooping && self.defect == Some(Defect::CrashLoopWithoutReason) => {
                Err(ToolError::new(ToolErrorCode::CrashLooping, "crash-looping"))
            }
            other => other,
        }
    }
    fn progress(&mut self, now: u64) {
        self.real.progress(KEY, now);
    }
    fn ready(&mut self) {
        self.real.probe_succeeded(KEY, 0);
    }
    fn launch_failed(&mut self, now: u64, reason: &str) -> bool {
        self.real.launch_failed(KEY, now, reason)
    }
    fn tick(&mut self, now: u64) -> Option<Stalled> {
        let state = self.real.health(KEY).state;
        if self.defect == Some(Defect::CrashLoopClearedByTimer) && state == InstanceState::CrashLooping {
            let _ = self.real.reset(
                KEY,
                now,
                OperatorReset::new(&pap_browser::spec::Operator::from_operator_channel("suite")),
            );
            return None;
        }
        if self.defect == Some(Defect::SlowLaunchKilled)
            && state == InstanceState::Starting
            && now.saturating_sub(self.started_at) >= 120_000
        {
            let crash_looping = self.real.launch_failed(KEY, now, "the launch ran past its budget");
            return Some(Stalled {
                reason: "the launch ran past its budget".into(),
                crash_looping,
            });
        }
        self.real.tick(KEY, now)
    }
    fn call(&mut self, now: u64) -> CallGate {
        match self.real.call(KEY, now) {
            CallGate::Wait(_) if self.defect == Some(Defect::OpaqueTimeoutWhileStarting) => {
                CallGate::Refuse(ToolError::new(ToolErrorCode::Timeout, "timed out"))
            }
            other => other,
        }
    }
    fn operator_reset(&mut self, now: u64) -> Result<Launch, ToolError> {
        self.real.reset(
            KEY,
            now,
            OperatorReset::new(&pap_browser::spec::Operator::from_operator_channel("suite")),
        )
    }
    fn health(&self) -> Health {
        self.real.health(KEY)
    }
}
