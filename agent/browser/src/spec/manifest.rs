//! AIP-63 §1: the `BROWSER.md` manifest. YAML frontmatter (AIP-30 DRIVER fields plus the
//! `browser:` block), validated against `schemas/BROWSER.schema.json` (M1), then M2-M6 checked
//! in code with `implements[].tool` paths resolved to tool ids first. Every diagnostic names its
//! rule.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the schema states M2-M6: its top-level `allOf[1]`, a `$ref` to `$defs/manifestRules`.
const MANIFEST_RULES_PATH: &str = "/allOf/1/";

/// The schema every manifest must validate against (M1), as shipped in `schemas/`.
pub const BROWSER_SCHEMA: &str = include_str!("../../../../schemas/BROWSER.schema.json");

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
    /// A tool id (`browser.navigate`), or a path to a TOOL.md before resolution.
    pub tool: String,
    /// The tool contract's version.
    pub version: String,
}

/// The `browser:` block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrowserBlock {
    /// `local` or `remote`.
    pub location: Location,
    /// `headless` / `headed`.
    pub display: Vec<String>,
    /// `single` or `multi`.
    pub instances: String,
    /// REST and CDP endpoints.
    #[serde(default)]
    pub endpoints: Option<Value>,
    /// What it can do.
    pub capabilities: Capabilities,
    /// Profile modes.
    pub profiles: Value,
    /// Lifecycle settings.
    #[serde(default)]
    pub lifecycle: Option<Value>,
    /// Where session material may go.
    #[serde(default)]
    pub sinks: Option<Vec<Value>>,
    /// Claimed conformance levels.
    #[serde(default)]
    pub conformance: Vec<String>,
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
    /// Whether the named capability (as the spec spells it) is declared.
    pub fn has(&self, name: &str) -> bool {
        match name {
            "cdp" => self.cdp,
            "downloads" => self.downloads,
            "stealth" => self.stealth,
            "fullPageScreenshot" => self.full_page_screenshot,
            "trustedInput" => self.trusted_input,
            "multiTarget" => self.multi_target,
            "aiActions" => self.ai_actions,
            "cookies" => self.cookies,
            "storageState" => self.storage_state,
            "persistentProfile" => self.persistent_profile,
            "cookies|storageState" => self.cookies || self.storage_state,
            _ => false,
        }
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

/// The capability gate of a reserved tool in `implements[]` (M4), if any.
pub fn implements_gate(tool: &str) -> Option<&'static str> {
    match tool {
        "browser.list_requests" | "browser.get_request_body" | "browser.cdp_send" => Some("cdp"),
        "browser.download" => Some("downloads"),
        "browser.act" => Some("aiActions"),
        _ => None,
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
        jsonschema::validator_for(&schema).map_err(|e| vec![m1(format!("the schema does not compile: {e}"))])?;
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
    let sinks = b.sinks.as_deref().unwrap_or_default();
    let remote_sinks: Vec<&Value> = sinks.iter().filter(|s| s["kind"] == "remote").collect();
    if b.location == Location::Remote && remote_sinks.is_empty() {
        diag("M2", "a remote provider declares no remote sink".into());
    }
    for sink in &remote_sinks {
        if sink["ack"] != "required" {
            diag(
                "M2",
                format!(
                    "remote sink {} does not require a human acknowledgement (ack: required)",
                    sink["id"]
                ),
            );
        }
    }
    let cdp_endpoint = b.endpoints.as_ref().is_some_and(|e| e.get("cdp").is_some());
    if caps.cdp != cdp_endpoint {
        diag("M3", "capabilities.cdp and endpoints.cdp must appear together".into());
    }
    for implements in &manifest.implements {
        if let Some(gate) = implements_gate(&implements.tool)
            && !caps.has(gate)
        {
            diag(
                "M4",
                format!("{} is listed but its gate {gate} is closed", implements.tool),
            );
        }
    }
    let modes = b
        .profiles
        .get("modes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if modes.iter().any(|m| m == "persistent") && !caps.persistent_profile {
        diag(
            "M5",
            "profiles.modes has persistent without capabilities.persistentProfile".into(),
        );
    }
    if modes.iter().any(|m| m == "import" || m == "clone") && !caps.has("cookies|storageState") {
        diag(
            "M5",
            "profiles.modes has import or clone without cookies or storageState".into(),
        );
    }
    for (level, gate) in [
        ("network", "cdp"),
        ("download", "downloads"),
        ("profile", "cookies|storageState"),
    ] {
        if b.conformance.iter().any(|c| c == level) && !caps.has(gate) {
            diag("M6", format!("conformance level {level} is claimed without {gate}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
