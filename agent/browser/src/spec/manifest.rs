//! AIP-63 §1: the `BROWSER.md` manifest. YAML frontmatter (AIP-30 DRIVER fields plus the
//! `browser:` block), validated against `schemas/BROWSER.schema.json` (M1), then M2-M6 checked
//! in code with `implements[].tool` paths resolved to tool ids first. Every diagnostic names its
//! rule.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::supervisor::Policy;
use super::tool::{Capability, Gate, Level, ToolId};

/// Where the schema states M2-M6: its top-level `allOf[1]`, a `$ref` to `$defs/manifestRules`.
const MANIFEST_RULES_PATH: &str = "/allOf/1/";

/// The schema every manifest must validate against (M1), as shipped in `schemas/`.
pub const BROWSER_SCHEMA: &str = include_str!("../../schemas/BROWSER.schema.json");

/// A loaded, checked manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct BrowserManifest {
    /// Display name.
    pub name: String,
    /// Provider id.
    pub id: String,
    /// What it is.
    pub description: String,
    /// Semver.
    pub version: String,
    /// AIP-30 transport kind.
    pub kind: DriverKind,
    /// The tools it serves (ids, after path resolution).
    pub implements: Vec<Implements>,
    /// The `browser:` block.
    pub browser: BrowserBlock,
}

impl BrowserManifest {
    /// Whether `implements[]` lists the tool `id` (a reserved id or a vendor one).
    pub fn lists(&self, id: &str) -> bool {
        self.implements.iter().any(|i| i.tool == id)
    }
}

/// AIP-30's transport axis, in its preference order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// In the host.
    Builtin,
    /// A library in process.
    Sdk,
    /// An HTTP service.
    Http,
    /// An MCP server.
    Mcp,
    /// A command.
    Cli,
}

/// One `implements[]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implements {
    /// A tool id (`browser.navigate`, or a vendor's own), or a path to a TOOL.md before
    /// resolution.
    pub tool: String,
    /// The tool contract's version.
    pub version: String,
}

impl Implements {
    /// The reserved tool it names, if it names one (T1).
    pub fn reserved(&self) -> Option<ToolId> {
        ToolId::parse(&self.tool)
    }
}

/// The `browser:` block (AIP-63 §1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrowserBlock {
    /// `local` or `remote`.
    pub location: Location,
    /// `headless` / `headed`.
    pub display: Vec<Display>,
    /// `single` or `multi`.
    pub instances: Instances,
    /// REST and CDP endpoints.
    #[serde(default)]
    pub endpoints: Endpoints,
    /// What it can do.
    pub capabilities: Capabilities,
    /// Profile modes and who stores session material.
    pub profiles: Profiles,
    /// Lifecycle settings, with the spec's defaults for what is absent.
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// Where session material may go.
    #[serde(default)]
    pub sinks: Vec<ManifestSink>,
    /// Claimed conformance levels.
    #[serde(default)]
    pub conformance: Vec<Level>,
}

/// `local` or `remote` (a third party's machine: a credential sink).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Location {
    /// The host's machine.
    Local,
    /// Someone else's.
    Remote,
}

/// How an instance shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Display {
    /// No window.
    Headless,
    /// A window.
    Headed,
}

/// Whether the provider runs one instance or several.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Instances {
    /// One.
    Single,
    /// Several, by instance key.
    Multi,
}

/// `browser.endpoints`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoints {
    /// The REST endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest: Option<Endpoint>,
    /// The CDP endpoint (M3: exactly when `capabilities.cdp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdp: Option<Endpoint>,
}

/// An endpoint: a fixed URL, or discovered at launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// It is found at launch (a DevTools port the browser chose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered: Option<bool>,
}

/// `browser.capabilities`: an absent boolean is false.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Capabilities {
    /// A CDP endpoint.
    pub cdp: bool,
    /// Downloads land in a host path.
    pub downloads: bool,
    /// `none`, `screencast` or `video` (absent: `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording: Option<String>,
    /// A design goal, never a promise.
    pub stealth: bool,
    /// Full-page screenshots.
    pub full_page_screenshot: bool,
    /// Input at browser or OS level.
    pub trusted_input: bool,
    /// More than one target per instance.
    pub multi_target: bool,
    /// Natural-language actions.
    pub ai_actions: bool,
    /// The host can set and read cookies on a context.
    pub cookies: bool,
    /// Full storage state can be loaded.
    pub storage_state: bool,
    /// A named profile survives stop.
    pub persistent_profile: bool,
}

impl Capabilities {
    /// Whether `capability` is declared.
    pub fn has(&self, capability: Capability) -> bool {
        match capability {
            Capability::Cdp => self.cdp,
            Capability::Downloads => self.downloads,
            Capability::Stealth => self.stealth,
            Capability::FullPageScreenshot => self.full_page_screenshot,
            Capability::TrustedInput => self.trusted_input,
            Capability::MultiTarget => self.multi_target,
            Capability::AiActions => self.ai_actions,
            Capability::Cookies => self.cookies,
            Capability::StorageState => self.storage_state,
            Capability::PersistentProfile => self.persistent_profile,
        }
    }

    /// Whether `gate` is open.
    pub fn opens(&self, gate: Gate) -> bool {
        match gate {
            Gate::One(capability) => self.has(capability),
            Gate::SessionMaterial => self.cookies || self.storage_state,
        }
    }
}

/// `browser.profiles`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profiles {
    /// How an instance may be seeded.
    pub modes: Vec<ProfileMode>,
    /// Who persists session material between runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_by: Option<StoredBy>,
}

/// A profile mode (AIP-63 §1, §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileMode {
    /// A fresh profile each launch.
    Ephemeral,
    /// A named profile that survives stop.
    Persistent,
    /// Material imported from a source under a grant.
    Import,
    /// The instance signs in itself (a PAP join's cookie).
    NativeLogin,
    /// A copy of a whole profile.
    Clone,
}

/// Who persists session material between runs (C11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoredBy {
    /// The host's store (sealed, 0600/0700).
    Host,
    /// The provider's own jar, outside the host's protections.
    Provider,
}

/// One `browser.sinks[]` entry: where session material may go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSink {
    /// The sink's id.
    pub id: String,
    /// `local` or `remote`.
    pub kind: SinkKind,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Where it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Vec<String>>,
    /// Whether a human must acknowledge it (M2: `required` for a remote sink).
    pub ack: Ack,
}

/// A sink's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    /// This machine.
    Local,
    /// A third party's.
    Remote,
}

/// Whether a sink needs a human acknowledgement (C6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ack {
    /// No.
    None,
    /// Yes.
    Required,
}

/// `browser.lifecycle` (AIP-63 §3), every value with the schema's default when absent. A host
/// runs its instances by these: [`Lifecycle::policy`] for the supervisor, the health loop's
/// interval and timeout, the stop grace, the idle reaper.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lifecycle {
    /// `launch`.
    #[serde(default)]
    pub launch: LaunchSettings,
    /// `health`.
    #[serde(default)]
    pub health: HealthSettings,
    /// `stop`.
    #[serde(default)]
    pub stop: StopSettings,
    /// `supervision`.
    #[serde(default)]
    pub supervision: SupervisionSettings,
}

impl Lifecycle {
    /// The supervisor's policy these settings give (L6, L9).
    pub fn policy(&self) -> Policy {
        let budget = self.launch.budget_ms;
        Policy {
            budget,
            progress_window: self.launch.progress_window_ms,
            hard_ceiling: self.launch.hard_ceiling_ms.unwrap_or(budget.saturating_mul(3)),
            max_failures: self.supervision.crash_loop.max_failures,
            failure_window: self.supervision.crash_loop.window_ms,
        }
    }
}

/// `lifecycle.launch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaunchSettings {
    /// Always `true` when present (L2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// The soft deadline of a launch (L9).
    #[serde(default = "defaults::budget")]
    pub budget_ms: u64,
    /// Progress within this trailing window keeps a launch alive.
    #[serde(default = "defaults::progress_window")]
    pub progress_window_ms: u64,
    /// No launch lasts longer; absent: three times the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_ceiling_ms: Option<u64>,
}

impl Default for LaunchSettings {
    fn default() -> Self {
        Self {
            idempotent: None,
            budget_ms: defaults::budget(),
            progress_window_ms: defaults::progress_window(),
            hard_ceiling_ms: None,
        }
    }
}

/// `lifecycle.health`: the supervisor's loop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthSettings {
    /// An HTTP path to probe (REST providers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// How often the supervisor probes a running instance.
    #[serde(default = "defaults::health_interval")]
    pub interval_ms: u64,
    /// How long one probe may take (L4).
    #[serde(default = "defaults::health_timeout")]
    pub timeout_ms: u64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self {
            path: None,
            interval_ms: defaults::health_interval(),
            timeout_ms: defaults::health_timeout(),
        }
    }
}

/// `lifecycle.stop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StopSettings {
    /// How long a graceful stop may take before it is forced (L5).
    #[serde(default = "defaults::grace")]
    pub grace_ms: u64,
}

impl Default for StopSettings {
    fn default() -> Self {
        Self {
            grace_ms: defaults::grace(),
        }
    }
}

/// `lifecycle.supervision`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SupervisionSettings {
    /// `crashLoop` (L6).
    #[serde(default)]
    pub crash_loop: CrashLoopSettings,
    /// The argument that marks the provider's processes (L5, L8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphan_marker: Option<String>,
    /// Targets idle this long are closed, never `keepAlive` ones (L11); absent: no reaper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_reap_ms: Option<u64>,
}

/// `supervision.crashLoop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CrashLoopSettings {
    /// Consecutive failed launches that make an instance crash-looping.
    #[serde(default = "defaults::max_failures")]
    pub max_failures: usize,
    /// The window they are counted in.
    #[serde(default = "defaults::failure_window")]
    pub window_ms: u64,
}

impl Default for CrashLoopSettings {
    fn default() -> Self {
        Self {
            max_failures: defaults::max_failures(),
            window_ms: defaults::failure_window(),
        }
    }
}

/// The schema's defaults (`$defs/browser/properties/lifecycle`), in one place.
mod defaults {
    pub(super) fn budget() -> u64 {
        120_000
    }
    pub(super) fn progress_window() -> u64 {
        10_000
    }
    pub(super) fn health_interval() -> u64 {
        10_000
    }
    pub(super) fn health_timeout() -> u64 {
        5_000
    }
    pub(super) fn grace() -> u64 {
        5_000
    }
    pub(super) fn max_failures() -> usize {
        3
    }
    pub(super) fn failure_window() -> u64 {
        300_000
    }
}

/// A manifest rule a manifest breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// `M1` … `M6`.
    pub rule: &'static str,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule, self.message)
    }
}

/// Loads `BROWSER.md` at `path`: frontmatter, M1 (the schema), path resolution, M2-M6.
pub fn load_manifest(path: &Path) -> Result<BrowserManifest, Vec<Diagnostic>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![m1(format!("cannot read {}: {e}", path.display()))])?;
    parse_manifest(&text, path.parent())
}

fn m1(message: String) -> Diagnostic {
    Diagnostic { rule: "M1", message }
}

/// Parses and checks a manifest's text; `dir` resolves `implements[].tool` paths.
pub fn parse_manifest(text: &str, dir: Option<&Path>) -> Result<BrowserManifest, Vec<Diagnostic>> {
    let front = frontmatter(text).ok_or_else(|| vec![m1("no YAML frontmatter between --- lines".into())])?;
    let mut value: Value =
        serde_yaml_ng::from_str(front).map_err(|e| vec![m1(format!("the frontmatter is not YAML: {e}"))])?;
    resolve_tool_paths(&mut value, dir).map_err(|e| vec![e])?;
    let schema: Value =
        serde_json::from_str(BROWSER_SCHEMA).map_err(|e| vec![m1(format!("the schema is not JSON: {e}"))])?;
    let validator =
        crate::spec::schema::compile(&schema).map_err(|e| vec![m1(format!("the schema does not compile: {e}"))])?;
    // The schema's own statement of M2-M6 (under `manifestRules`) is reported by the code checks
    // below, which name the rule; every other schema error is M1.
    let mut diagnostics: Vec<Diagnostic> = validator
        .iter_errors(&value)
        .filter(|e| !e.schema_path.to_string().starts_with(MANIFEST_RULES_PATH))
        .map(|e| m1(format!("{} (at {})", e, e.instance_path)))
        .collect();
    let manifest: Option<BrowserManifest> = serde_json::from_value(value).ok();
    if let Some(manifest) = &manifest {
        diagnostics.extend(rule_errors(manifest));
    }
    match (manifest, diagnostics.is_empty()) {
        (Some(manifest), true) => Ok(manifest),
        (_, false) => Err(diagnostics),
        (None, true) => Err(vec![m1("the manifest does not fit the manifest types".into())]),
    }
}

fn frontmatter(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---")?;
    Some(&rest[..end])
}

/// Replaces `implements[].tool` values that are paths to a TOOL.md by the id in its frontmatter.
fn resolve_tool_paths(value: &mut Value, dir: Option<&Path>) -> Result<(), Diagnostic> {
    let Some(items) = value.get_mut("implements").and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for item in items {
        let Some(tool) = item.get("tool").and_then(Value::as_str) else {
            continue;
        };
        if !tool.ends_with(".md") {
            continue;
        }
        let path = dir.map_or_else(|| Path::new(tool).to_path_buf(), |d| d.join(tool));
        let text = std::fs::read_to_string(&path).map_err(|e| m1(format!("implements[].tool {tool}: {e}")))?;
        let front: Value = frontmatter(&text)
            .and_then(|f| serde_yaml_ng::from_str(f).ok())
            .ok_or_else(|| m1(format!("implements[].tool {tool} has no frontmatter")))?;
        let id = front
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| m1(format!("implements[].tool {tool} names no id")))?;
        item["tool"] = Value::String(id.to_owned());
    }
    Ok(())
}

/// M2-M6 on a typed manifest.
pub fn rule_errors(manifest: &BrowserManifest) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let b = &manifest.browser;
    let caps = &b.capabilities;
    let mut diag = |rule: &'static str, message: String| out.push(Diagnostic { rule, message });
    let remote_sinks: Vec<&ManifestSink> = b.sinks.iter().filter(|s| s.kind == SinkKind::Remote).collect();
    if b.location == Location::Remote && remote_sinks.is_empty() {
        diag("M2", "a remote provider declares no remote sink".into());
    }
    for sink in remote_sinks.iter().filter(|s| s.ack != Ack::Required) {
        diag(
            "M2",
            format!(
                "remote sink {:?} does not require a human acknowledgement (ack: required)",
                sink.id
            ),
        );
    }
    if caps.cdp != b.endpoints.cdp.is_some() {
        diag("M3", "capabilities.cdp and endpoints.cdp must appear together".into());
    }
    for implements in &manifest.implements {
        if let Some(gate) = implements.reserved().and_then(ToolId::implements_gate)
            && !caps.has(gate)
        {
            diag(
                "M4",
                format!("{} is listed but its gate {gate} is closed", implements.tool),
            );
        }
    }
    let modes = &b.profiles.modes;
    if modes.contains(&ProfileMode::Persistent) && !caps.persistent_profile {
        diag(
            "M5",
            "profiles.modes has persistent without capabilities.persistentProfile".into(),
        );
    }
    if (modes.contains(&ProfileMode::Import) || modes.contains(&ProfileMode::Clone))
        && !caps.opens(Gate::SessionMaterial)
    {
        diag(
            "M5",
            "profiles.modes has import or clone without cookies or storageState".into(),
        );
    }
    for level in &b.conformance {
        if let Some(gate) = level.gate()
            && !caps.opens(gate)
        {
            diag(
                "M6",
                format!("conformance level {} is claimed without {gate}", level.name()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests;
