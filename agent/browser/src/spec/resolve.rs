//! T2, the tool resolver: which of several providers serves a tool call. Its own module, above
//! both the tool table and the manifest it reads, so neither of those imports the other.

use super::manifest::{BrowserManifest, DriverKind};
use super::tool::Gate;

/// T2: among `providers`, the one to serve `tool` when the call needs `gate`: only providers
/// that list the tool and declare the gate, in AIP-30's preference order (builtin, sdk, http,
/// mcp, cli), the first listed winning a tie.
pub fn resolve<'a>(providers: &'a [BrowserManifest], tool: &str, gate: Option<Gate>) -> Option<&'a BrowserManifest> {
    providers
        .iter()
        .filter(|p| p.lists(tool))
        .filter(|p| gate.is_none_or(|g| p.browser.capabilities.opens(g)))
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
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use crate::spec::manifest::parse_manifest;
    use crate::spec::tool::Capability;

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
    fn the_resolver_considers_only_providers_declaring_the_capability_in_preference_order() {
        let cdp = Some(Gate::One(Capability::Cdp));
        let providers = [
            manifest("cli-cdp", "cli", true),
            manifest("http-plain", "http", false),
            manifest("sdk-cdp", "sdk", true),
        ];
        assert_eq!(resolve(&providers, "browser.list_requests", cdp).unwrap().id, "sdk-cdp");
        assert_eq!(resolve(&providers, "browser.navigate", None).unwrap().id, "sdk-cdp");
        let plain_only = [manifest("http-plain", "http", false)];
        assert!(resolve(&plain_only, "browser.list_requests", cdp).is_none());
        let cli_only = [manifest("http-plain", "http", false), manifest("cli-cdp", "cli", true)];
        assert_eq!(resolve(&cli_only, "browser.list_requests", cdp).unwrap().id, "cli-cdp");
    }
}
