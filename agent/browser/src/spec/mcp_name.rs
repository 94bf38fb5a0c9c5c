//! AIP-14 tool ids as MCP tool names: the one mapping between the two.
//!
//! Inside the kit a tool is its AIP-14 id (`browser.navigate`, `browser.profile.list`): that is
//! the vocabulary of AIP-63, of the manifest's `implements[]` and of the conformance suite. MCP
//! clients are stricter than the MCP spec: Claude Desktop checks every tool name against
//! [`MCP_NAME_PATTERN`] and withholds the *whole* tool set when one name fails, and OpenAI's and
//! Copilot's tool APIs refuse dots outright. So on an MCP surface a tool is named by
//! [`mcp_name`]: its id with every `.` made `_` (`browser_navigate`, `browser_profile_list`).
//!
//! The page model's vendor tools (`pap.browser.snapshot`) lose their vendor prefix on MCP
//! (`browser_snapshot`): an MCP server's tools are its own namespace already, and these are the
//! names models know from the most used MCP browser server (Playwright MCP). A test keeps them
//! distinct from every reserved id's name.
//!
//! Ids use only `[a-z._]`, so the result always matches the pattern; the way back is a
//! lookup in a closed set of ids ([`ToolId::from_mcp_name`]), never string surgery, because `_`
//! also occurs inside ids (`browser.get_dom`). A test keeps every id of the kit and of the PAP
//! tools distinct after the mapping.

use super::tool::ToolId;

/// What MCP clients accept as a tool name (Claude Desktop's check, OpenAI's function names).
pub const MCP_NAME_PATTERN: &str = "^[a-zA-Z0-9_-]{1,64}$";

/// The MCP name of the AIP-14 tool id `id`: every `.` made `_`.
pub fn mcp_name(id: &str) -> String {
    id.replace('.', "_")
}

/// Whether `name` matches [`MCP_NAME_PATTERN`].
pub fn is_mcp_name(name: &str) -> bool {
    // The MCP pattern is the base64url alphabet, 1 to 64 characters.
    pap_shared::is_base64url(name, 1, 64)
}

impl ToolId {
    /// The tool's name on an MCP surface (`browser_get_dom`, `browser_snapshot`).
    pub fn mcp_name(self) -> String {
        let id = self.as_str();
        mcp_name(id.strip_prefix("pap.").filter(|_| !self.is_reserved()).unwrap_or(id))
    }

    /// The tool an MCP surface names `name`, if it is one of ours.
    pub fn from_mcp_name(name: &str) -> Option<Self> {
        Self::every().find(|tool| tool.mcp_name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reserved_tool_has_an_mcp_name_that_clients_accept_and_that_maps_back() {
        let mut seen = std::collections::HashSet::new();
        for tool in ToolId::every() {
            let name = tool.mcp_name();
            assert!(is_mcp_name(&name), "{name}");
            assert!(seen.insert(name.clone()), "{name} twice");
            assert_eq!(ToolId::from_mcp_name(&name), Some(tool));
        }
        assert_eq!(ToolId::GetDom.mcp_name(), "browser_get_dom");
        assert_eq!(ToolId::ProfileList.mcp_name(), "browser_profile_list");
        assert_eq!(ToolId::Snapshot.mcp_name(), "browser_snapshot");
        assert_eq!(ToolId::from_mcp_name("pap_browser_snapshot"), None);
        // The AIP-14 id is not an MCP name, and nothing else maps back.
        assert_eq!(ToolId::from_mcp_name("browser.navigate"), None);
        assert_eq!(ToolId::from_mcp_name("browser_Navigate"), None);
    }

    #[test]
    fn the_name_check_is_the_pattern() {
        for good in ["a", "browser_navigate", "pap-join", "X9", &"a".repeat(64)] {
            assert!(is_mcp_name(good), "{good}");
        }
        for bad in ["", "browser.navigate", "a b", "é", "a/b", &"a".repeat(65)] {
            assert!(!is_mcp_name(bad), "{bad}");
        }
    }
}
