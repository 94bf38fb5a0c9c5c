//! The AIP-14 tool result envelope and AIP-63's browser error codes (T4).
//!
//! `{ "ok": true, "value": … }` or `{ "ok": false, "error": { "code", "message", "retryable"?,
//! "cause"? } }`. Browser codes carry the `browser:` domain prefix.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// AIP-63's browser error codes (T4), with AIP-14's standard ones the tools also use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ToolErrorCode {
    /// The provider lacks the tool or its capability gate (T3); `cause.capability` names it.
    #[serde(rename = "browser:unsupported")]
    Unsupported,
    /// The instance is still starting and the wait budget ran out (L10); retryable.
    #[serde(rename = "browser:starting")]
    Starting,
    /// The instance is not healthy or degraded (L3); `cause.state` names its state.
    #[serde(rename = "browser:not_ready")]
    NotReady,
    /// The supervisor stopped launching after repeated failures (L6); `cause.lastFailure`.
    #[serde(rename = "browser:crash_looping")]
    CrashLooping,
    /// A target handle from a previous boot (L12).
    #[serde(rename = "browser:target_gone")]
    TargetGone,
    /// No active grant covers the domain (C1, C12); `cause.domain` names it.
    #[serde(rename = "browser:consent_required")]
    ConsentRequired,
    /// The input does not fit the tool's contract.
    #[serde(rename = "input_invalid")]
    InputInvalid,
    /// Nothing by that id.
    #[serde(rename = "not_found")]
    NotFound,
    /// The caller may not do this (an agent widening a grant, C7; an unacknowledged sink, C6).
    #[serde(rename = "permission_denied")]
    PermissionDenied,
    /// The call took too long.
    #[serde(rename = "timeout")]
    Timeout,
    /// The caller called this tool too often; `cause.retryAfterMs` says when to try again.
    #[serde(rename = "rate_limited")]
    RateLimited,
    /// Something failed inside the host or provider.
    #[serde(rename = "internal")]
    Internal,
}

impl ToolErrorCode {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsupported => "browser:unsupported",
            Self::Starting => "browser:starting",
            Self::NotReady => "browser:not_ready",
            Self::CrashLooping => "browser:crash_looping",
            Self::TargetGone => "browser:target_gone",
            Self::ConsentRequired => "browser:consent_required",
            Self::InputInvalid => "input_invalid",
            Self::NotFound => "not_found",
            Self::PermissionDenied => "permission_denied",
            Self::Timeout => "timeout",
            Self::RateLimited => "rate_limited",
            Self::Internal => "internal",
        }
    }

    /// Whether a caller may retry the same call later.
    pub fn retryable(self) -> bool {
        matches!(self, Self::Starting | Self::Timeout | Self::RateLimited)
    }
}

/// A tool error in the AIP-14 envelope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// The code.
    pub code: ToolErrorCode,
    /// What went wrong, for people. Never a secret (C9).
    pub message: String,
    /// Whether retrying may succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// Structured detail (`capability`, `state`, `lastFailure`, `domain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Value>,
}

impl ToolError {
    /// An error with `code` and `message`, `retryable` set from the code.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: code.retryable().then_some(true),
            cause: None,
        }
    }

    /// Marked retryable whatever its code (a `browser:not_ready` while the host relaunches a
    /// browser that exited: retrying soon succeeds).
    #[must_use]
    pub fn retryable(mut self) -> Self {
        self.retryable = Some(true);
        self
    }

    /// With a structured cause.
    pub fn with_cause(mut self, cause: Value) -> Self {
        self.cause = Some(cause);
        self
    }

    /// `browser:unsupported` naming `capability` (T3).
    pub fn unsupported(tool: &str, capability: &str) -> Self {
        Self::new(
            ToolErrorCode::Unsupported,
            format!("{tool} is not supported here: it needs the capability {capability}"),
        )
        .with_cause(serde_json::json!({ "capability": capability }))
    }
}

/// An AIP-14 tool result.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolResult {
    /// `{ok: true, value}`.
    Ok(Value),
    /// `{ok: false, error}`.
    Err(ToolError),
}

impl ToolResult {
    /// The envelope as JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Ok(value) => serde_json::json!({ "ok": true, "value": value }),
            Self::Err(error) => serde_json::json!({ "ok": false, "error": error }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn envelopes_are_aip_14() {
        let ok = ToolResult::Ok(json!({"url": "https://shop.example/"}));
        assert_eq!(
            ok.to_json(),
            json!({"ok": true, "value": {"url": "https://shop.example/"}})
        );
        let unsupported = ToolResult::Err(ToolError::unsupported("browser.list_requests", "cdp"));
        let json = unsupported.to_json();
        assert_eq!(json["ok"], false);
        assert_eq!(json["error"]["code"], "browser:unsupported");
        assert_eq!(json["error"]["cause"], json!({"capability": "cdp"}));
        assert!(json["error"]["message"].as_str().unwrap().contains("cdp"));
        assert!(json["error"].get("retryable").is_none());
        let starting = ToolResult::Err(ToolError::new(ToolErrorCode::Starting, "still starting")).to_json();
        assert_eq!(starting["error"]["retryable"], true);
    }

    #[test]
    fn the_six_browser_codes_carry_the_domain_prefix() {
        let codes = [
            ToolErrorCode::Unsupported,
            ToolErrorCode::Starting,
            ToolErrorCode::NotReady,
            ToolErrorCode::CrashLooping,
            ToolErrorCode::TargetGone,
            ToolErrorCode::ConsentRequired,
        ];
        for code in codes {
            assert!(code.as_str().starts_with("browser:"));
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        }
        assert_eq!(
            codes.iter().filter(|c| c.retryable()).count(),
            1,
            "only browser:starting is retryable"
        );
    }
}
