//! AIP-63 §2, the tool table: the reserved tool ids with their capability gates and the
//! conformance level that tests each (T1), and the resolver that considers only providers
//! declaring a needed capability, in AIP-30's preference order (T2).

use super::manifest::{BrowserManifest, DriverKind};

/// The conformance level that tests a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Every provider.
    Core,
    /// Input tools.
    Interaction,
    /// CDP network tools.
    Network,
    /// Downloads.
    Download,
    /// Consent and profiles.
    Profile,
}

impl Level {
    /// The level's name, as a manifest claims it in `browser.conformance`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Core => "core",
            Self::Interaction => "interaction",
            Self::Network => "network",
            Self::Download => "download",
            Self::Profile => "profile",
        }
    }
}

/// A reserved tool: its id, the capability gate of the tool (or of one of its options), its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    /// The AIP-14 tool id.
    pub id: &'static str,
    /// The capability the tool needs at all, if any.
    pub gate: Option<&'static str>,
    /// The level that tests it.
    pub level: Level,
}

/// The tool ids AIP-63 reserves (T1), with gates and levels. No tool creates or widens a grant.
pub const RESERVED_TOOLS: &[ToolSpec] = &[
    ToolSpec {
        id: "browser.navigate",
        gate: None,
        level: Level::Core,
    },
    ToolSpec {
        id: "browser.evaluate",
        gate: None,
        level: Level::Core,
    },
    ToolSpec {
        id: "browser.get_dom",
        gate: None,
        level: Level::Core,
    },
    ToolSpec {
        id: "browser.screenshot",
        gate: None,
        level: Level::Core,
    },
    ToolSpec {
        id: "browser.click",
        gate: None,
        level: Level::Interaction,
    },
    ToolSpec {
        id: "browser.fill",
        gate: None,
        level: Level::Interaction,
    },
    ToolSpec {
        id: "browser.act",
        gate: Some("aiActions"),
        level: Level::Interaction,
    },
    ToolSpec {
        id: "browser.tabs",
        gate: None,
        level: Level::Interaction,
    },
    ToolSpec {
        id: "browser.list_requests",
        gate: Some("cdp"),
        level: Level::Network,
    },
    ToolSpec {
        id: "browser.get_request_body",
        gate: Some("cdp"),
        level: Level::Network,
    },
    ToolSpec {
        id: "browser.cdp_send",
        gate: Some("cdp"),
        level: Level::Network,
    },
    ToolSpec {
        id: "browser.download",
        gate: Some("downloads"),
        level: Level::Download,
    },
    ToolSpec {
        id: "browser.profile.list",
        gate: Some("cookies|storageState"),
        level: Level::Profile,
    },
    ToolSpec {
        id: "browser.profile.refresh",
        gate: Some("cookies|storageState"),
        level: Level::Profile,
    },
    ToolSpec {
        id: "browser.profile.revoke",
        gate: Some("cookies|storageState"),
        level: Level::Profile,
    },
];

/// The reserved spec of `tool`, if it is reserved.
pub fn tool_spec(tool: &str) -> Option<&'static ToolSpec> {
    RESERVED_TOOLS.iter().find(|t| t.id == tool)
}

/// T2: among `providers`, the one to serve `tool` when the call needs `capability`: only
/// providers that list the tool and declare the capability, in AIP-30's preference order
/// (builtin, sdk, http, mcp, cli), the first listed winning a tie.
pub fn resolve<'a>(
    providers: &'a [BrowserManifest],
    tool: &str,
    capability: Option<&str>,
) -> Option<&'a BrowserManifest> {
    providers
        .iter()
        .filter(|p| p.implements.iter().any(|i| i.tool == tool))
        .filter(|p| capability.is_none_or(|c| p.browser.capabilities.has(c)))
        .min_by_key(|p| kind_rank(p.kind))
}

fn kind_rank(kind: DriverKind) -> u8 {
    match kind {
        DriverKind::Builtin => 0,
        DriverKind::Sdk => 1,
        DriverKind::Http => 2,
        DriverKind::Mcp => 3,
        DriverKind::Cli => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::manifest::parse_manifest;

    fn manifest(id: &str, kind: &str, cdp: bool) -> BrowserManifest {
        let tools = if cdp {
            "  - { tool: browser.navigate, version: \"1\" }\n  - { tool: browser.list_requests, version: \"1\" }\n"
        } else {
            "  - { tool: browser.navigate, version: \"1\" }\n"
        };
        let endpoints = if cdp {
            "  endpoints: { cdp: { discovered: true } }\n"
        } else {
            ""
        };
        let text = format!(
            "---\nname: {id}\nid: {id}\ndescription: test\nversion: 1.0.0\nkind: {kind}\nimplements:\n{tools}browser:\n  location: local\n  display: [headless]\n  instances: single\n{endpoints}  capabilities: {{ cdp: {cdp} }}\n  profiles: {{ modes: [ephemeral] }}\n---\n"
        );
        parse_manifest(&text, None).unwrap()
    }

    #[test]
    fn reserved_ids_keep_their_gates_and_none_creates_a_grant() {
        assert_eq!(RESERVED_TOOLS.len(), 15);
        assert_eq!(tool_spec("browser.list_requests").unwrap().gate, Some("cdp"));
        assert_eq!(tool_spec("browser.download").unwrap().gate, Some("downloads"));
        assert_eq!(tool_spec("browser.act").unwrap().gate, Some("aiActions"));
        assert!(
            RESERVED_TOOLS
                .iter()
                .all(|t| !t.id.contains("grant") && !t.id.ends_with(".create"))
        );
        for spec in RESERVED_TOOLS {
            assert_eq!(
                crate::spec::manifest::implements_gate(spec.id).is_some(),
                matches!(spec.gate, Some("cdp" | "downloads" | "aiActions")),
                "{}",
                spec.id
            );
        }
    }

    #[test]
    fn the_resolver_considers_only_providers_declaring_the_capability_in_preference_order() {
        let providers = [
            manifest("cli-cdp", "cli", true),
            manifest("http-plain", "http", false),
            manifest("sdk-cdp", "sdk", true),
        ];
        assert_eq!(
            resolve(&providers, "browser.list_requests", Some("cdp")).unwrap().id,
            "sdk-cdp"
        );
        assert_eq!(resolve(&providers, "browser.navigate", None).unwrap().id, "sdk-cdp");
        let plain_only = [manifest("http-plain", "http", false)];
        assert!(resolve(&plain_only, "browser.list_requests", Some("cdp")).is_none());
        let cli_only = [manifest("http-plain", "http", false), manifest("cli-cdp", "cli", true)];
        assert_eq!(
            resolve(&cli_only, "browser.list_requests", Some("cdp")).unwrap().id,
            "cli-cdp"
        );
    }
}
