use std::path::PathBuf;

use super::*;
use crate::spec::{Capability, Level, Policy, ProfileMode, StoredBy};

fn shipped() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers/chromium/BROWSER.md")).unwrap()
}

/// The shipped manifest with `from` replaced by `to` in its text.
fn edited(from: &str, to: &str) -> Vec<Diagnostic> {
    let text = shipped();
    assert!(text.contains(from), "{from:?} is not in the manifest");
    parse_manifest(&text.replacen(from, to, 1), None).unwrap_err()
}

fn rules(diagnostics: &[Diagnostic]) -> Vec<&'static str> {
    let mut rules: Vec<&str> = diagnostics.iter().map(|d| d.rule).collect();
    rules.dedup();
    rules
}

#[test]
fn the_shipped_chromium_manifest_is_valid() {
    let manifest =
        load_manifest(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers/chromium/BROWSER.md")).unwrap();
    assert_eq!(manifest.id, "pap.chromium");
    assert_eq!(manifest.kind, DriverKind::Sdk);
    assert!(manifest.browser.capabilities.cdp);
    assert_eq!(
        manifest.browser.conformance,
        [
            Level::Core,
            Level::Interaction,
            Level::Network,
            Level::Download,
            Level::Profile
        ]
    );
}

#[test]
fn the_chromium_manifest_lists_native_login_since_joins_use_it() {
    // A PAP join's cookie is material the instance makes by signing in itself, under a
    // native-login grant: the provider must say it supports that mode (AIP-63 §4).
    let manifest = crate::chromium::manifest().unwrap();
    assert_eq!(
        manifest.browser.profiles.modes,
        [ProfileMode::Ephemeral, ProfileMode::Import, ProfileMode::NativeLogin]
    );
    assert_eq!(manifest.browser.profiles.stored_by, Some(StoredBy::Host));
}

#[test]
fn lifecycle_values_become_the_supervisors_policy_with_the_schemas_defaults() {
    let edited = shipped().replacen(
        "launch: { idempotent: true, budgetMs: 120000, progressWindowMs: 10000, hardCeilingMs: 360000 }",
        "launch: { budgetMs: 1500 }",
        1,
    );
    let edited = edited.replacen(
        "crashLoop: { maxFailures: 3, windowMs: 300000 }",
        "crashLoop: { maxFailures: 5 }\n      idleReapMs: 60000",
        1,
    );
    let manifest = parse_manifest(&edited, None).unwrap();
    let lifecycle = &manifest.browser.lifecycle;
    assert_eq!(
        lifecycle.policy(),
        Policy {
            budget: 1_500,
            progress_window: 10_000,
            // Absent: three times the budget.
            hard_ceiling: 4_500,
            max_failures: 5,
            failure_window: 300_000,
        }
    );
    assert_eq!(lifecycle.health.interval_ms, 10_000, "the schema's default");
    assert_eq!(lifecycle.health.timeout_ms, 5_000);
    assert_eq!(lifecycle.stop.grace_ms, 2_000);
    assert_eq!(lifecycle.supervision.idle_reap_ms, Some(60_000));
    // Every value of the shipped manifest is the policy its host runs by.
    let shipped = crate::chromium::manifest().unwrap();
    assert_eq!(shipped.browser.lifecycle.policy(), Policy::default());
    assert_eq!(
        shipped.browser.lifecycle.supervision.orphan_marker.as_deref(),
        Some(crate::chromium::ORPHAN_MARKER),
        "the manifest's orphanMarker is the one the sweep matches"
    );
}

#[test]
fn every_shipped_manifest_loads() {
    let providers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers");
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(&providers).unwrap() {
        let manifest = load_manifest(&entry.unwrap().path().join("BROWSER.md")).unwrap();
        ids.push(manifest.id);
    }
    ids.sort();
    assert_eq!(ids, ["pap.chromium", "pap.chromium-attach"]);
}

#[test]
fn m1_schema_errors_are_reported() {
    assert_eq!(rules(&edited("kind: sdk", "kind: daemon")), ["M1"]);
    assert_eq!(rules(&edited("version: 0.1.0", "version: one")), ["M1"]);
    assert_eq!(
        rules(&edited(
            "    cdp: true\n    cookies",
            "    cdp: true\n    teleport: true\n    cookies"
        )),
        ["M1"]
    );
    assert_eq!(rules(&parse_manifest("no frontmatter", None).unwrap_err()), ["M1"]);
}

#[test]
fn m2_a_remote_provider_needs_an_acknowledged_remote_sink() {
    assert_eq!(rules(&edited("location: local", "location: remote")), ["M2"]);
    let unacked = edited(
        "location: local",
        "location: remote\n  sinks: [{ id: cloud, kind: remote, ack: none }]",
    );
    assert_eq!(rules(&unacked), ["M2"]);
    let text = shipped().replacen(
        "location: local",
        "location: remote\n  sinks: [{ id: cloud, kind: remote, ack: required, operator: Example Inc }]",
        1,
    );
    assert!(parse_manifest(&text, None).is_ok());
}

#[test]
fn m3_cdp_and_its_endpoint_go_together() {
    assert_eq!(
        rules(&edited("  endpoints:\n    cdp: { discovered: true }\n", "")),
        ["M3"]
    );
    let text = shipped().replacen("    cdp: true\n", "", 1);
    // Without cdp the endpoint is refused (M3), and so are the listed network tools (M4) and the
    // network level's claim (M6).
    assert_eq!(rules(&parse_manifest(&text, None).unwrap_err()), ["M3", "M4", "M6"]);
}

#[test]
fn m4_a_listed_tool_needs_its_gate() {
    let listed = edited(
        "  - { tool: browser.navigate, version: \"1\" }",
        "  - { tool: browser.navigate, version: \"1\" }\n  - { tool: browser.act, version: \"1\" }",
    );
    assert_eq!(rules(&listed), ["M4"]);
    assert!(listed[0].message.contains("aiActions"));
}

#[test]
fn m4_applies_to_tools_named_by_path_too() {
    let dir = std::env::temp_dir().join(format!("pap-manifest-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(dir.join("tools/act.md"), "---\nid: browser.act\n---\n# act\n").unwrap();
    let text = shipped().replacen(
        "  - { tool: browser.navigate, version: \"1\" }",
        "  - { tool: browser.navigate, version: \"1\" }\n  - { tool: tools/act.md, version: \"1\" }",
        1,
    );
    let diagnostics = parse_manifest(&text, Some(&dir)).unwrap_err();
    assert_eq!(rules(&diagnostics), ["M4"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn m5_profile_modes_need_their_capabilities() {
    assert_eq!(
        rules(&edited(
            "modes: [ephemeral, import, native-login]",
            "modes: [ephemeral, import, native-login, persistent]"
        )),
        ["M5"]
    );
    // Without cookies or storageState the profile tools' gate is closed as well (M4): unlist them.
    // The profile claim needs them too (M6).
    let text: String = shipped()
        .replacen("    cookies: true\n    storageState: true\n", "", 1)
        .lines()
        .filter(|line| !line.contains("browser.profile."))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(rules(&parse_manifest(&text, None).unwrap_err()), ["M5", "M6"]);
}

#[test]
fn m6_claimed_levels_need_their_capabilities() {
    let text = shipped().replacen("    downloads: true\n", "", 1);
    // The listed browser.download breaks M4 as well.
    assert_eq!(rules(&parse_manifest(&text, None).unwrap_err()), ["M4", "M6"]);
    // A claim without core is an M1 error (the schema requires core).
    assert_eq!(
        rules(&edited(
            "conformance: [core, interaction, network, download, profile]",
            "conformance: [network]"
        )),
        ["M1"]
    );
}

#[test]
fn the_schema_and_the_capability_type_name_the_same_capabilities() {
    let schema: serde_json::Value = serde_json::from_str(BROWSER_SCHEMA).unwrap();
    let in_schema: Vec<&String> = schema["$defs"]["browser"]["properties"]["capabilities"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    let all = Capabilities {
        recording: Some("none".into()),
        ..Capabilities::default()
    };
    let in_type = serde_json::to_value(all).unwrap();
    let mut in_type: Vec<&String> = in_type.as_object().unwrap().keys().collect();
    let mut in_schema = in_schema;
    in_schema.sort();
    in_type.sort();
    assert_eq!(in_schema, in_type);
    let booleans: Vec<&String> = in_schema.into_iter().filter(|n| *n != "recording").collect();
    assert_eq!(booleans.len(), Capability::ALL.len());
    for name in booleans {
        let capability = Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .unwrap_or_else(|| panic!("no Capability spells {name}"));
        let mut caps = serde_json::Map::new();
        caps.insert(name.clone(), serde_json::Value::Bool(true));
        let caps: Capabilities = serde_json::from_value(serde_json::Value::Object(caps)).unwrap();
        assert!(caps.has(capability), "{name}");
        assert!(
            Capability::ALL
                .into_iter()
                .filter(|c| *c != capability)
                .all(|c| !caps.has(c)),
            "{name}"
        );
    }
}

fn validator_for_def(def: &str) -> jsonschema::Validator {
    let mut schema: serde_json::Value = serde_json::from_str(BROWSER_SCHEMA).unwrap();
    let object = schema.as_object_mut().unwrap();
    for key in ["allOf", "required", "properties", "type"] {
        object.remove(key);
    }
    object.insert("$ref".into(), serde_json::Value::String(format!("#/$defs/{def}")));
    jsonschema::validator_for(&schema).unwrap()
}

#[test]
fn the_schema_itself_states_m2_to_m6() {
    // Not decoration: the schema alone refuses an M3 break, under its manifestRules part.
    let text = shipped().replacen("  endpoints:\n    cdp: { discovered: true }\n", "", 1);
    let value: serde_json::Value = serde_yaml_ng::from_str(frontmatter(&text).unwrap()).unwrap();
    let schema: serde_json::Value = serde_json::from_str(BROWSER_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let paths: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.schema_path.to_string())
        .collect();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.starts_with(MANIFEST_RULES_PATH)),
        "{paths:?}"
    );
}

#[test]
fn grants_name_explicit_domains_or_the_full_profile_never_a_wildcard() {
    let grant = validator_for_def("grant");
    let base = serde_json::json!({
        "id": "g1", "sessionId": "s1", "source": {"kind": "chrome", "profile": "Default"},
        "sinks": [{"kind": "local"}], "grantedAt": "2026-11-30T10:00:00Z", "grantedVia": "flag", "cookieCount": 3,
        "domains": ["shop.example"]
    });
    assert!(grant.is_valid(&base));
    for bad in ["*.shop.example", ".shop.example", "example", "Shop.Example"] {
        let mut g = base.clone();
        g["domains"] = serde_json::json!([bad]);
        assert!(!grant.is_valid(&g), "{bad}");
    }
    let mut full = base.clone();
    full.as_object_mut().unwrap().remove("domains");
    full["fullProfile"] = serde_json::json!(true);
    assert!(grant.is_valid(&full));
    full["sinks"] = serde_json::json!([{"kind": "remote", "providerId": "cloud", "ackSeq": 4}]);
    assert!(!grant.is_valid(&full), "a full-profile grant with a remote sink");
    let mut both = base.clone();
    both["fullProfile"] = serde_json::json!(true);
    assert!(!grant.is_valid(&both), "domains and fullProfile together");
}

#[test]
fn ledger_records_have_no_field_for_a_value_and_agents_cannot_grant() {
    let record = validator_for_def("ledgerRecord");
    let deny = serde_json::json!({"seq": 3, "at": "2026-11-30T10:00:00Z", "event": "deny", "actor": {"kind": "agent"}, "reason": "widening refused"});
    assert!(record.is_valid(&deny));
    let mut leaky = deny.clone();
    leaky["cookieValue"] = serde_json::json!("secret");
    assert!(!record.is_valid(&leaky), "a record with a value field");
    let grant_by_agent = serde_json::json!({"seq": 4, "at": "2026-11-30T10:00:00Z", "event": "grant", "actor": {"kind": "agent"},
        "grantId": "g", "sessionId": "s", "cookieCount": 1, "domains": ["shop.example"]});
    assert!(!record.is_valid(&grant_by_agent));
}
