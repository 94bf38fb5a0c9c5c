//! The profile level's tools (AIP-63 §2): `browser.profile.list`, `.refresh` and `.revoke`, as
//! an agent calls them. An agent lists, refreshes within its grant and revokes; it never creates
//! or widens one (C7), and what it cannot see (another device's grant, C12) is absent.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Caller, ConsentHost, LiveInstances, RefreshReport, SourceSpec};
use crate::spec::{AgentCaller, Gate, ToolError, ToolErrorCode, ToolId};

/// `browser.profile.list`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ProfileList {}

/// `browser.profile.refresh`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileRefresh {
    /// The grant.
    grant_id: String,
    /// Some of its domains; absent: all.
    #[serde(default)]
    domains: Option<Vec<String>>,
    /// The source (a storage-state path); absent: the grant's own.
    #[serde(default)]
    source: Option<PathBuf>,
}

/// `browser.profile.revoke`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileRevoke {
    /// The grant.
    grant_id: String,
    /// Some of its domains; absent: the whole grant.
    #[serde(default)]
    domains: Option<Vec<String>>,
}

/// The JSON Schema of a profile tool's input (`None` for another tool).
pub(crate) fn input_schema(tool: ToolId) -> Option<schemars::Schema> {
    Some(match tool {
        ToolId::ProfileList => schemars::schema_for!(ProfileList),
        ToolId::ProfileRefresh => schemars::schema_for!(ProfileRefresh),
        ToolId::ProfileRevoke => schemars::schema_for!(ProfileRevoke),
        _ => return None,
    })
}

/// Serves profile tool `tool` for the agent `caller`, reaching running instances through
/// `live`: the refreshed material goes into them, a revoke takes it out before the call answers
/// (C8).
pub async fn profile_tool(
    consent: &ConsentHost,
    caller: &AgentCaller,
    tool: ToolId,
    input: &Value,
    live: &dyn LiveInstances,
) -> Result<Value, ToolError> {
    let caller = Caller::Agent(caller.clone());
    match tool {
        ToolId::ProfileList => {
            let ProfileList {} = tool.parse_input(input)?;
            consent.expire(live).await.map_err(|e| e.to_tool_error())?;
            let grants = consent.list(&caller).map_err(|e| e.to_tool_error())?;
            Ok(json!({ "grants": grants }))
        }
        ToolId::ProfileRefresh => {
            let asked: ProfileRefresh = tool.parse_input(input)?;
            let source = asked.source.map(SourceSpec::StorageState);
            let (refreshed, injection) = consent
                .refresh(&caller, &asked.grant_id, asked.domains.as_deref(), source.as_ref())
                .map_err(|e| e.to_tool_error())?;
            let injected = live
                .inject(&injection)
                .await
                .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
            report(&RefreshReport {
                grant: refreshed.grant,
                injected,
            })
        }
        ToolId::ProfileRevoke => {
            let asked: ProfileRevoke = tool.parse_input(input)?;
            let revoked = consent
                .revoke(&caller, &asked.grant_id, asked.domains.as_deref(), live)
                .await
                .map_err(|e| e.to_tool_error())?;
            report(&revoked.report())
        }
        other => Err(ToolError::unsupported(other.as_str(), Gate::SessionMaterial.name())),
    }
}

/// A report as the tool's JSON result.
fn report(value: &impl serde::Serialize) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))
}
