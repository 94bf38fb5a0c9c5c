//! An MCP browser host under test (`pap-conformance browser --mcp URL --bearer-file F`): the
//! suite reaches it over streamable HTTP as a paired device, with the official Rust SDK's
//! client, and runs the hooks that need only the tools ([`super::run_over_tools`]).
//!
//! A tool's result is read from the call's structured content (or, failing that, its text as
//! JSON); a tool error's structured content is the AIP-14 error object (`code`, `message`,
//! `retryable`, `cause`), as AIP-63 hosts answer it over MCP.

use async_trait::async_trait;
use std::time::Duration;

use pap_browser::spec::{Level, MCP_NAME_PATTERN, ToolError, ToolErrorCode, ToolId, ToolResult, is_mcp_name};
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;

use super::{Launched, ToolsUnderTest};
use crate::report::CaseResult;

/// An MCP host, connected as one paired device.
pub struct McpHost {
    client: RunningService<RoleClient, ()>,
    listed: Vec<String>,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("listed", &self.listed)
            .finish_non_exhaustive()
    }
}

/// Why the suite could not reach the host.
#[derive(Debug, thiserror::Error)]
pub enum McpHostError {
    /// The MCP handshake failed (a refused bearer shows here as the host's 401).
    #[error("the MCP host at {url} did not start a session: {why}")]
    Connect {
        /// The endpoint.
        url: String,
        /// What the SDK said.
        why: String,
    },
    /// `tools/list` failed.
    #[error("the MCP host did not list its tools: {0}")]
    List(String),
}

impl McpHost {
    /// Connects to the streamable HTTP endpoint `url` with the device bearer `bearer`.
    pub async fn connect(url: &str, bearer: &str) -> Result<Self, McpHostError> {
        let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(bearer.to_owned());
        let client =
            ().serve(StreamableHttpClientTransport::from_config(config))
                .await
                .map_err(|e| McpHostError::Connect {
                    url: url.to_owned(),
                    why: e.to_string(),
                })?;
        let listed = client
            .list_all_tools()
            .await
            .map_err(|e| McpHostError::List(e.to_string()))?
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        Ok(Self { client, listed })
    }

    /// The tools it lists.
    pub fn listed(&self) -> &[String] {
        &self.listed
    }

    /// The MCP surface's own case: every tool it lists has a name MCP clients accept
    /// ([`MCP_NAME_PATTERN`]): Claude Desktop withholds the *whole* tool set when one name
    /// fails, and OpenAI-backed clients refuse the request.
    pub async fn names_case(&self) -> CaseResult {
        let listed = &self.listed;
        CaseResult::timed("mcp.tool-names", &["AIP63-MCP-NAMES"], Duration::from_secs(1), async {
            let refused: Vec<&String> = listed.iter().filter(|name| !is_mcp_name(name)).collect();
            if listed.is_empty() {
                return Err("the host lists no tools".to_owned());
            }
            if refused.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "tool names MCP clients refuse (outside {MCP_NAME_PATTERN}): {refused:?}"
                ))
            }
        })
        .await
    }

    /// The levels its tools cover: `core` and `interaction` always (their tools are what a
    /// browser host is), `network` and `download` when it lists their tools.
    pub fn levels(&self) -> Vec<Level> {
        let lists = |tool: ToolId| self.listed.iter().any(|t| *t == tool.mcp_name());
        let mut levels = vec![Level::Core, Level::Interaction];
        if lists(ToolId::ListRequests) && lists(ToolId::CdpSend) {
            levels.push(Level::Network);
        }
        if lists(ToolId::Download) {
            levels.push(Level::Download);
        }
        levels
    }
}

#[async_trait]
impl ToolsUnderTest for McpHost {
    fn offers(&self, tool: ToolId) -> bool {
        self.listed.iter().any(|t| *t == tool.mcp_name())
    }

    /// The host launches its browser for the first call that needs it: nothing to do, and no
    /// process of its is visible from here.
    async fn launch(&self) -> Result<Launched, ToolError> {
        Ok(Launched {
            pid: None,
            boot_id: 0,
            was_already_running: true,
        })
    }

    /// A `rate_limited` answer is waited out (its `retryAfterMs`, a few times at most), as a
    /// well-behaved client does: the suite's polling hooks ask faster than a host's limit.
    async fn call(&self, tool: &str, input: Value) -> ToolResult {
        let mut tries = 0;
        loop {
            let result = self.call_once(tool, input.clone()).await;
            let wait = match &result {
                ToolResult::Err(error) if error.code == ToolErrorCode::RateLimited && tries < RATE_LIMITED_TRIES => {
                    error
                        .cause
                        .as_ref()
                        .and_then(|c| c["retryAfterMs"].as_u64())
                        .unwrap_or(100)
                }
                _ => return result,
            };
            tries += 1;
            tokio::time::sleep(Duration::from_millis(wait.min(1_000))).await;
        }
    }
}

/// How often one call waits out a `rate_limited` answer before it reports it.
const RATE_LIMITED_TRIES: u32 = 20;

impl McpHost {
    async fn call_once(&self, tool: &str, input: Value) -> ToolResult {
        let Value::Object(arguments) = input else {
            return ToolResult::Err(ToolError::new(ToolErrorCode::InputInvalid, "arguments are an object"));
        };
        // The suite speaks AIP-14 ids; an MCP host names its tools by the kit's one mapping.
        let name = ToolId::parse(tool).map_or_else(|| tool.to_owned(), ToolId::mcp_name);
        let request = CallToolRequestParams::new(name).with_arguments(arguments);
        let result = match self.client.call_tool(request).await {
            Ok(result) => result,
            Err(e) => {
                return ToolResult::Err(ToolError::new(
                    ToolErrorCode::Internal,
                    format!("the MCP call failed: {e}"),
                ));
            }
        };
        let value = result.structured_content.clone().or_else(|| {
            result.content.iter().find_map(|block| match block {
                ContentBlock::Text(text) => serde_json::from_str(&text.text).ok(),
                _ => None,
            })
        });
        match (result.is_error == Some(true), value) {
            (false, Some(value)) => ToolResult::Ok(value),
            (false, None) => ToolResult::Ok(Value::Null),
            (true, Some(error)) => ToolResult::Err(serde_json::from_value(error.clone()).unwrap_or_else(|_| {
                ToolError::new(
                    ToolErrorCode::Internal,
                    format!("a tool error that is not AIP-14: {error}"),
                )
            })),
            (true, None) => ToolResult::Err(ToolError::new(ToolErrorCode::Internal, "a tool error with no content")),
        }
    }
}
