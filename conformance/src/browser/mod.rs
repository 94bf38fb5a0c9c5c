//! The AIP-63 conformance suite (agentbrowser/v1 §5): hooks by their ids, run against any
//! provider through [`ProviderUnderTest`] — our Chromium provider, an in-memory fake, and fakes
//! broken on purpose, each of which must turn exactly its hook red — and the hooks that need
//! only the tools, through [`ToolsUnderTest`], against any MCP browser host ([`McpHost`]).

mod chromium;
mod defect;
mod fake;
mod fake_profile;
mod hooks;
mod mcp;
mod pages;
mod profile;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use pap_browser::consent::{Grant, GrantRequest};
/// A conformance level: the levels of AIP-63's tool table, as the agent's tool host knows them.
pub use pap_browser::spec::Level;
use pap_browser::spec::{CallGate, Health, Launch, Policy, Stalled};
use pap_browser::spec::{ToolError, ToolResult};
use serde_json::Value;

pub use self::chromium::ChromiumUnderTest;
pub use self::defect::Defect;
pub use self::fake::FakeProvider;
pub use self::hooks::HOOKS;
pub use self::mcp::McpHost;
pub use self::pages::{SUITE_ORIGIN, serve_pages_on};
use crate::report::{CaseResult, Report};

/// What a launch reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    /// The browser process, if the provider has one.
    pub pid: Option<u32>,
    /// Changes at every real launch.
    pub boot_id: u64,
    /// An instance already ran (L2).
    pub was_already_running: bool,
}

/// What the tool hooks need of a browser: that it runs, and tool calls. A provider has it
/// ([`ProviderUnderTest`]); so has an MCP host the suite reaches as a paired device.
#[async_trait]
pub trait ToolsUnderTest: Send + Sync {
    /// `launch` (L2); for a host that launches on first use, a no-op that says so.
    async fn launch(&self) -> Result<Launched, ToolError>;
    /// An AIP-14 tool call as an agent caller.
    async fn call(&self, tool: &str, input: Value) -> ToolResult;
    /// Whether it offers `tool` (its manifest's `implements[]`, an MCP host's `tools/list`): a
    /// vendor tool's hook runs only where it is offered, and is not reported elsewhere.
    fn offers(&self, tool: pap_browser::spec::ToolId) -> bool;
}

/// A provider, as the suite drives it. One instance key per provider under test.
#[async_trait]
pub trait ProviderUnderTest: ToolsUnderTest {
    /// Its `BROWSER.md`.
    fn manifest_text(&self) -> String;
    /// `health()` (L1, L4).
    async fn health(&self) -> Health;
    /// `stop` (L5).
    async fn stop(&self) -> Result<(), ToolError>;
    /// `stop` with `force: true` (L5: the only stop that ends an instance the host did not
    /// launch). For a provider that only launches its own, the same as `stop`.
    async fn stop_forced(&self) -> Result<(), ToolError> {
        self.stop().await
    }
    /// How many targets the running instance has (L4: health must not add one).
    async fn target_count(&self) -> Option<usize>;
    /// Whether process `pid` still runs.
    fn is_running(&self, pid: u32) -> bool;
    /// Starts a process that is *not* the provider's (no marker): stop must leave it (L5).
    async fn plant_unmarked(&self) -> Result<u32, String>;
    /// Leaves a marked process as a killed host would (L8); returns its pid.
    async fn plant_orphan(&self) -> Result<u32, String>;
    /// What the host does when it starts, before its first launch (L8).
    async fn host_start(&self);
    /// Runs the provider's idle reaper now, if it has one (L11).
    async fn reap_idle(&self);
    /// The provider's profile directory for the running instance (L13), if it has one.
    async fn user_data_dir(&self) -> Option<std::path::PathBuf>;
    /// A supervisor harness with AIP-63's default policy, driven at exact times (L6-L10).
    fn supervision(&self) -> Box<dyn SupervisionUnderTest>;
    /// The profile level's surface (C1-C13), for a provider with `cookies` or `storageState`.
    fn profile(&self) -> Option<&dyn ProfileUnderTest> {
        None
    }
}

/// The profile level's surface (AIP-63 §4): the operator's channel, an agent's calls from a
/// device, and what can be read from outside (the instance's cookies and tabs, the consent
/// store's files).
#[async_trait]
pub trait ProfileUnderTest: Send + Sync {
    /// A scratch directory for the source files the hooks write.
    fn scratch(&self) -> PathBuf;
    /// The operator's grant: the grant, or the refusal's text.
    fn grant(&self, request: GrantRequest) -> Result<Grant, String>;
    /// What the operator is shown before a full-profile grant (C3).
    fn full_profile_warning(&self) -> String;
    /// The presence scan of a storage-state file (C5): per-host counts.
    fn scan(&self, source: &Path) -> Result<BTreeMap<String, u64>, String>;
    /// The operator acknowledges remote sink `provider` for `grant` (C6).
    fn acknowledge_sink(&self, grant: &str, provider: &str) -> Result<Grant, String>;
    /// `grant`'s material handed to remote provider `provider` (C6): how many cookies.
    fn remote_injection(&self, grant: &str, provider: &str) -> Result<usize, ToolError>;
    /// The join's permit for `host`, for an agent on `device` (C1, C12).
    fn permit_join(&self, device: Option<&str>, host: &str) -> Result<(), ToolError>;
    /// AIP-59 revoked `device`'s pairing (C13).
    async fn pairing_revoked(&self, device: &str) -> Result<(), String>;
    /// A tool call as an agent on `device`.
    async fn call_as(&self, device: Option<&str>, tool: &str, input: Value) -> ToolResult;
    /// Puts the material of the grants in force into the running instance (what a launch does).
    async fn inject_granted(&self) -> Result<(), String>;
    /// The running instance's cookies as (name, domain), read over CDP or its equivalent.
    async fn cookies(&self) -> Vec<(String, String)>;
    /// The cookies (name, domain) of the jar tab `target` runs in: what its page's requests can
    /// carry anywhere (review M5).
    async fn target_jar(&self, target: &str) -> Result<Vec<(String, String)>, String>;
    /// The running instance's tab URLs.
    async fn tabs(&self) -> Vec<String>;
    /// Opens a tab on `url` in the running instance (it need not load).
    async fn open_tab(&self, url: &str) -> Result<(), String>;
    /// The consent store's directory (ledger, grants, sealed material).
    fn consent_dir(&self) -> PathBuf;
    /// `ledger verify` on the ledger files in `dir`: the record count, or the first break.
    fn verify_ledger(&self, dir: &Path) -> Result<u64, String>;
}

/// The provider's supervisor, driven at exact millisecond times, with the policy the provider
/// runs by (its manifest's `lifecycle`): the hooks take their times from [`Self::policy`].
pub trait SupervisionUnderTest: Send {
    /// The policy the provider's supervisor runs by.
    fn policy(&self) -> Policy;
    /// `launch` at `now`.
    fn launch(&mut self, now: u64) -> Result<Launch, ToolError>;
    /// A progress signal at `now`.
    fn progress(&mut self, now: u64);
    /// The health probe answered.
    fn ready(&mut self);
    /// The launch failed at `now`.
    fn launch_failed(&mut self, now: u64, reason: &str) -> bool;
    /// Time passed.
    fn tick(&mut self, now: u64) -> Option<Stalled>;
    /// A tool call arrives at `now`.
    fn call(&mut self, now: u64) -> CallGate;
    /// An operator's reset.
    fn operator_reset(&mut self, now: u64) -> Result<Launch, ToolError>;
    /// `health()`.
    fn health(&self) -> Health;
}

/// A hook's body: a result and, when red, what went wrong.
type HookFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// How a hook runs: against a whole provider, or against the tools alone.
#[derive(Clone, Copy)]
enum Body {
    Provider(for<'a> fn(&'a dyn ProviderUnderTest) -> HookFuture<'a>),
    Tools(for<'a> fn(&'a dyn ToolsUnderTest) -> HookFuture<'a>),
}

/// One hook: its id, the rule it tests, its level.
pub struct Hook {
    /// The hook id (`core.lifecycle.launch-idempotent`).
    pub id: &'static str,
    /// The rule (`L2`).
    pub rule: &'static [&'static str],
    /// Its level.
    pub level: Level,
    run: Body,
    /// The vendor tool it tests, when it tests one: it runs only where that is offered.
    pub needs: Option<pap_browser::spec::ToolId>,
}

impl Hook {
    /// Whether it needs only the tools (it runs through [`run_over_tools`] too).
    pub fn over_tools(&self) -> bool {
        matches!(self.run, Body::Tools(_))
    }
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("id", &self.id).finish_non_exhaustive()
    }
}

/// The longest a hook may take.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the hooks of `levels` against `provider`, in order. With no levels given, `core` and
/// the levels the manifest claims in `browser.conformance` (a claim is what the suite checks).
pub async fn run(provider: &dyn ProviderUnderTest, levels: &[Level]) -> Report {
    let claimed = pap_browser::spec::parse_manifest(&provider.manifest_text(), None)
        .map(|m| m.browser.conformance)
        .unwrap_or_default();
    let selected = |hook: &&Hook| {
        if hook.needs.is_some_and(|tool| !provider.offers(tool)) {
            return false;
        }
        if levels.is_empty() {
            hook.level == Level::Core || claimed.contains(&hook.level)
        } else {
            levels.contains(&hook.level)
        }
    };
    let mut report = Report::default();
    for hook in HOOKS.iter().filter(selected) {
        let body = async {
            let outcome = match hook.run {
                Body::Provider(run) => run(provider).await,
                Body::Tools(run) => run(provider).await,
            };
            outcome.map_err(|m| format!("{}: {m}", hook.rule.join(", ")))
        };
        report
            .results
            .push(CaseResult::timed(hook.id, hook.rule, HOOK_TIMEOUT, body).await);
    }
    report
}

/// Runs the hooks of `levels` that need only the tools against `tools` (an MCP host), in order.
/// The pages they load are served on this machine's loopback ([`SUITE_ORIGIN`]): the host must
/// run here and let its browser reach that origin.
pub async fn run_over_tools(tools: &dyn ToolsUnderTest, levels: &[Level]) -> Report {
    let mut report = Report::default();
    for hook in HOOKS
        .iter()
        .filter(|h| levels.contains(&h.level) && h.needs.is_none_or(|tool| tools.offers(tool)))
    {
        let Body::Tools(run) = hook.run else { continue };
        let body = async { run(tools).await.map_err(|m| format!("{}: {m}", hook.rule.join(", "))) };
        report
            .results
            .push(CaseResult::timed(hook.id, hook.rule, HOOK_TIMEOUT, body).await);
    }
    report
}
