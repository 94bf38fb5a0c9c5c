//! Operations v1 (PAP Operations extension): what a company proposes, and the agent or the
//! user confirms at most once.

use serde::{Deserialize, Serialize};

/// An operation's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    /// Proposed, waiting for confirmation.
    Proposed,
    /// Confirmed and being performed.
    InProgress,
    /// Performed.
    Succeeded,
    /// Performing failed (the result says what changed).
    Failed,
    /// Cancelled before it was performed.
    Cancelled,
    /// The proposal expired.
    Expired,
}

impl OperationState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::InProgress => "in_progress",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

/// Who confirmed, and which revision, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    /// The confirmed revision.
    pub revision: u32,
    /// `user` or `standing_permission`.
    pub approved_by: String,
    /// RFC 3339 UTC time.
    pub confirmed_at: String,
}

/// What a final operation did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationResult {
    /// Every change made (OPS-6-05).
    pub summary: String,
}

/// An operation as the wire carries it. `confirmation` and `result` are always present (null
/// allowed), as the Python reference requires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// `op_` + 22 base64url characters.
    pub operation_id: String,
    /// Revision, from 1.
    pub revision: u32,
    /// State.
    pub state: OperationState,
    /// Everything that affects the action (OPS-3-01).
    pub summary: String,
    /// Structured terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms: Option<serde_json::Value>,
    /// When the proposal expires (RFC 3339), while proposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Whether only the user may approve it.
    #[serde(default)]
    pub user_approval_required: bool,
    /// The operation's page on the company's website.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The confirmation, once confirmed.
    pub confirmation: Option<Confirmation>,
    /// The result, once final.
    pub result: Option<OperationResult>,
}
