//! The profile level's tools (AIP-63 §3): `browser.profile.list`, `.refresh` and `.revoke`, as
//! an agent calls them. An agent lists, refreshes within its grant and revokes; it never creates
//! or widens one (C7), and what it cannot see (another device's grant, C12) is absent.

use serde_json::{Value, json};

use super::{Caller, ConsentHost, LiveInstances, SourceSpec};
use crate::spec::{ToolError, ToolErrorCode};

/// Serves profile tool `tool` for `caller`, reaching running instances through `live`: the
/// refreshed material goes into them, a revoke takes it out before the call answers (C8).
pub async fn profile_tool(
    consent: &ConsentHost,
    caller: &Caller,
    tool: &str,
    input: &Value,
    live: &dyn LiveInstances,
) -> Result<Value, ToolError> {
    let internal = |e: String| ToolError::new(ToolErrorCode::Internal, e);
    match tool {
        "browser.profile.list" => {
            consent.expire(live).await.map_err(|e| e.to_tool_error())?;
            let grants = consent.list(caller).map_err(|e| e.to_tool_error())?;
            Ok(json!({ "grants": grants }))
        }
        "browser.profile.refresh" => {
            let grant = text(input, "grantId")?;
            let domains = strings(input, "domains")?;
            let source = match input.get("source") {
                None | Some(Value::Null) => None,
                Some(Value::String(path)) => Some(SourceSpec::StorageState(path.into())),
                Some(_) => return Err(ToolError::new(ToolErrorCode::InputInvalid, "source is a path")),
            };
            let (refreshed, injection) = consent
                .refresh(caller, grant, domains.as_deref(), source.as_ref())
                .map_err(|e| e.to_tool_error())?;
            let injected = live.inject(&injection).await.map_err(internal)?;
            Ok(json!({ "grant": refreshed.grant, "injected": injected }))
        }
        "browser.profile.revoke" => {
            let grant = text(input, "grantId")?;
            let domains = strings(input, "domains")?;
            let revoked = consent
                .revoke(caller, grant, domains.as_deref(), live)
                .await
                .map_err(|e| e.to_tool_error())?;
            Ok(json!({
                "grant": revoked.grant,
                "derived": revoked.derived,
                "cookiesDeleted": revoked.forgotten.cookies,
                "tabsClosed": revoked.forgotten.tabs,
            }))
        }
        other => Err(ToolError::unsupported(other, "cookies")),
    }
}

fn text<'a>(input: &'a Value, field: &str) -> Result<&'a str, ToolError> {
    input
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::new(ToolErrorCode::InputInvalid, format!("{field} is required")))
}

/// An optional array of strings.
fn strings(input: &Value, field: &str) -> Result<Option<Vec<String>>, ToolError> {
    let invalid = || ToolError::new(ToolErrorCode::InputInvalid, format!("{field} is a list of names"));
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(invalid),
        Some(_) => Err(invalid()),
    }
}
