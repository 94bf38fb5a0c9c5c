//! Operations v1: the store (propose, read, confirm at most once, cancel) and the operations
//! endpoint `/poppy/operations/{id}[/confirm|/cancel]`.
//!
//! Confirmation is one compare-and-set under the store's lock: of any number of confirms,
//! through the endpoint or the website, concurrent or not, exactly one moves the operation out
//! of `proposed` and performs it (OPS-6-02); the others read it unchanged.

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use pap_shared::{
    ClientId, Confirmation, OAuthErrorCode, Operation, OperationResult, OperationState, PairwiseUserId, UnixTime,
};
use serde_json::{Value, json};

use super::caller::Caller;
use super::protocol::{ApiError, json_response, read_json};
use super::{ReferenceCompany, lock};
use crate::store::StoreError;

/// A proposal stays confirmable for 15 minutes.
const PROPOSAL_LIFETIME: i64 = 15 * 60;

/// How long an operation's record (its state, and whether it was performed) is kept after it
/// was proposed, in seconds: a week. Nothing drops a record before that.
pub const OPERATION_RETENTION: i64 = 7 * 86_400;

/// Most operation records one account holds at once (within [`OPERATION_RETENTION`]); past
/// it, a new proposal is refused with 429 until old records go.
pub const OPERATIONS_PER_ACCOUNT: usize = 1_000;

/// Most operation records held at once; past it, new proposals are refused with 429.
pub const OPERATION_CAPACITY: usize = 1_000_000;

/// Who may see an operation, what it needs, and how often it was performed.
#[derive(Clone, Debug)]
struct Record {
    operation: Operation,
    client_id: ClientId,
    user: PairwiseUserId,
    account: String,
    action: String,
    scopes: Vec<String>,
    expires_at: UnixTime,
    /// When the record is dropped: [`OPERATION_RETENTION`] after the proposal.
    kept_until: UnixTime,
    performed: u32,
}

impl Record {
    /// Who proposed what: two proposals with the same key are the same operation while it is
    /// proposed (OPS-4-01).
    fn proposal_key(&self) -> ProposalKey {
        ProposalKey::of(
            &self.client_id,
            &self.user,
            &self.account,
            &self.action,
            &self.operation.summary,
        )
    }
}

/// A digest of (client, user, account, action, summary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ProposalKey([u8; 32]);

impl ProposalKey {
    fn of(client_id: &ClientId, user: &PairwiseUserId, account: &str, action: &str, summary: &str) -> Self {
        use sha2::{Digest, Sha256};
        let mut digest = Sha256::new();
        for part in [client_id.as_str(), user.as_str(), account, action, summary] {
            digest.update(part.len().to_be_bytes());
            digest.update(part.as_bytes());
        }
        Self(digest.finalize().into())
    }
}

/// The operations, by id, with an index of the proposed ones (so a proposal is found without a
/// scan) and a count per account (so no account fills the store).
#[derive(Default)]
pub(crate) struct Operations {
    records: HashMap<String, Record>,
    proposed: HashMap<ProposalKey, String>,
    per_account: HashMap<String, usize>,
}

impl Operations {
    /// Drops every record past its retention.
    pub(crate) fn sweep(&mut self, now: UnixTime) {
        let Self {
            records,
            proposed,
            per_account,
        } = self;
        records.retain(|id, record| {
            if now < record.kept_until {
                return true;
            }
            let key = record.proposal_key();
            if proposed.get(&key) == Some(id) {
                proposed.remove(&key);
            }
            if let Some(count) = per_account.get_mut(&record.account) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    per_account.remove(&record.account);
                }
            }
            false
        });
    }

    /// How many records it holds: operations, indexed proposals, accounts.
    pub(crate) fn sizes(&self) -> [(&'static str, u64); 3] {
        let n = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        [
            ("operations", n(self.records.len())),
            ("proposed_index", n(self.proposed.len())),
            ("operation_accounts", n(self.per_account.len())),
        ]
    }

    /// Leaves the index when a record stops being proposed.
    fn settled(&mut self, id: &str) {
        if let Some(record) = self.records.get(id) {
            let key = record.proposal_key();
            if self.proposed.get(&key).is_some_and(|indexed| indexed == id) {
                self.proposed.remove(&key);
            }
        }
    }
}

/// What a proposing API call asks for.
pub(crate) struct NewOperation<'a> {
    pub(crate) caller: &'a Caller,
    pub(crate) action: &'a str,
    pub(crate) summary: String,
    pub(crate) terms: Value,
    pub(crate) user_approval_required: bool,
    pub(crate) scopes: Vec<String>,
}

/// Why a confirm or cancel was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConfirmError {
    NotFound,
    SignInRequired,
    InsufficientScope(String),
    TermsChanged(Box<Operation>),
    InvalidRequest,
    UserApprovalRequired,
}

impl ConfirmError {
    pub(crate) fn code(&self) -> OAuthErrorCode {
        match self {
            Self::NotFound => OAuthErrorCode::OperationNotFound,
            Self::SignInRequired => OAuthErrorCode::SignInRequired,
            Self::InsufficientScope(_) => OAuthErrorCode::InsufficientScope,
            Self::TermsChanged(_) => OAuthErrorCode::TermsChanged,
            Self::InvalidRequest => OAuthErrorCode::InvalidRequest,
            Self::UserApprovalRequired => OAuthErrorCode::UserApprovalRequired,
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::SignInRequired | Self::InsufficientScope(_) | Self::UserApprovalRequired => StatusCode::FORBIDDEN,
            Self::TermsChanged(_) => StatusCode::CONFLICT,
            Self::InvalidRequest => StatusCode::BAD_REQUEST,
        }
    }

    fn into_api_error(self) -> ApiError {
        let status = self.status();
        match self {
            Self::TermsChanged(current) => {
                ApiError::new(status, OAuthErrorCode::TermsChanged).with("operation", json!(current))
            }
            Self::InsufficientScope(scope) => {
                ApiError::challenge(status, OAuthErrorCode::InsufficientScope).with_scope(scope)
            }
            Self::SignInRequired => ApiError::challenge(status, OAuthErrorCode::SignInRequired),
            other => ApiError::new(status, other.code()),
        }
    }
}

/// Who is looking: from a Session Token or from the website's cookie.
pub(crate) struct Viewer<'a> {
    pub(crate) client_id: &'a ClientId,
    pub(crate) user: &'a PairwiseUserId,
    pub(crate) account: Option<&'a str>,
    pub(crate) scopes: &'a [String],
}

impl ReferenceCompany {
    /// Proposes an operation, or returns the same one when the same action is still proposed
    /// for the same account (OPS-4-01).
    pub(crate) fn propose_operation(&self, new: NewOperation<'_>) -> Result<Operation, StoreError> {
        let now = self.now();
        let account = new.caller.record.account.clone().unwrap_or_default();
        let key = ProposalKey::of(
            &new.caller.client_id,
            &new.caller.record.user,
            &account,
            new.action,
            &new.summary,
        );
        let mut store = lock(&self.inner.operations);
        let existing = store
            .proposed
            .get(&key)
            .and_then(|id| store.records.get(id))
            .filter(|r| r.operation.state == OperationState::Proposed && now < r.expires_at);
        if let Some(record) = existing {
            return Ok(record.operation.clone());
        }
        if store.records.len() >= OPERATION_CAPACITY
            || store
                .per_account
                .get(&account)
                .is_some_and(|n| *n >= OPERATIONS_PER_ACCOUNT)
        {
            return Err(StoreError::Full);
        }
        let id = self.random_token("op");
        let expires_at = now.plus(PROPOSAL_LIFETIME);
        let operation = Operation {
            operation_id: id.clone(),
            revision: 1,
            state: OperationState::Proposed,
            summary: new.summary,
            terms: Some(new.terms),
            expires_at: Some(expires_at.to_rfc3339()),
            user_approval_required: new.user_approval_required,
            url: Some(format!("{}/operations/{id}", self.inner.base)),
            confirmation: None,
            result: None,
        };
        *store.per_account.entry(account.clone()).or_default() += 1;
        store.proposed.insert(key, id.clone());
        store.records.insert(
            id,
            Record {
                operation: operation.clone(),
                client_id: new.caller.client_id.clone(),
                user: new.caller.record.user.clone(),
                account,
                action: new.action.to_owned(),
                scopes: new.scopes,
                expires_at,
                kept_until: now.plus(OPERATION_RETENTION),
                performed: 0,
            },
        );
        Ok(operation)
    }

    /// The operation as `viewer` may see it: another client's or user's, or one proposed under
    /// another account, is not found; a signed-out viewer must sign in. A proposal past its
    /// expiry turns `expired` first.
    pub(crate) fn read_operation(&self, id: &str, viewer: &Viewer<'_>) -> Result<Operation, ConfirmError> {
        let now = self.now();
        let mut store = lock(&self.inner.operations);
        let record = usable(&mut store, id, viewer, now)?;
        Ok(record.operation.clone())
    }

    /// Confirms `revision` as `approved_by`, performing the operation at most once.
    pub(crate) fn confirm_operation(
        &self,
        id: &str,
        viewer: &Viewer<'_>,
        revision: Option<u32>,
        approved_by: &str,
    ) -> Result<Operation, ConfirmError> {
        let now = self.now();
        let mut store = lock(&self.inner.operations);
        let record = usable(&mut store, id, viewer, now)?;
        if let Some(missing) = record.scopes.iter().find(|s| !viewer.scopes.contains(s)) {
            return Err(ConfirmError::InsufficientScope(missing.clone()));
        }
        if record.operation.state != OperationState::Proposed {
            // Already confirmed (or final): the same record, unchanged, performed no second time.
            return Ok(record.operation.clone());
        }
        if revision != Some(record.operation.revision) {
            return Err(ConfirmError::TermsChanged(Box::new(record.operation.clone())));
        }
        if approved_by != "user" && approved_by != "standing_permission" {
            return Err(ConfirmError::InvalidRequest);
        }
        if approved_by == "standing_permission" && record.operation.user_approval_required {
            return Err(ConfirmError::UserApprovalRequired);
        }
        // The compare-and-set: proposed -> performed, under the lock.
        record.operation.confirmation = Some(Confirmation {
            revision: record.operation.revision,
            approved_by: approved_by.to_owned(),
            confirmed_at: now.to_rfc3339(),
        });
        record.operation.expires_at = None;
        record.performed += 1;
        record.operation.state = OperationState::Succeeded;
        record.operation.result = Some(OperationResult {
            summary: format!("Done: {}", record.operation.summary),
        });
        tracing::info!(operation = %record.operation.operation_id, approved_by, "operation performed");
        let operation = record.operation.clone();
        store.settled(id);
        Ok(operation)
    }

    /// Cancels a proposed operation; a final one is returned unchanged.
    pub(crate) fn cancel_operation(&self, id: &str, viewer: &Viewer<'_>) -> Result<Operation, ConfirmError> {
        let now = self.now();
        let mut store = lock(&self.inner.operations);
        let record = usable(&mut store, id, viewer, now)?;
        if record.operation.state == OperationState::Proposed {
            record.operation.state = OperationState::Cancelled;
            record.operation.expires_at = None;
            record.operation.result = Some(OperationResult {
                summary: "Nothing was changed.".into(),
            });
        }
        let operation = record.operation.clone();
        store.settled(id);
        Ok(operation)
    }

    /// How many times the operation was performed (the operator API).
    pub fn performed(&self, id: &str) -> Option<u32> {
        lock(&self.inner.operations).records.get(id).map(|r| r.performed)
    }
}

fn usable<'a>(
    store: &'a mut Operations,
    id: &str,
    viewer: &Viewer<'_>,
    now: UnixTime,
) -> Result<&'a mut Record, ConfirmError> {
    let record = store.records.get_mut(id).ok_or(ConfirmError::NotFound)?;
    if &record.client_id != viewer.client_id || &record.user != viewer.user {
        return Err(ConfirmError::NotFound);
    }
    let Some(account) = viewer.account else {
        return Err(ConfirmError::SignInRequired);
    };
    if account != record.account {
        return Err(ConfirmError::NotFound);
    }
    if record.operation.state == OperationState::Proposed && now >= record.expires_at {
        record.operation.state = OperationState::Expired;
        record.operation.expires_at = None;
        record.operation.result = Some(OperationResult {
            summary: "Nothing was changed; the proposal expired.".into(),
        });
    }
    Ok(record)
}

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new()
        .route("/poppy/operations/{id}", get(read))
        .route("/poppy/operations/{id}/{action}", post(act))
}

async fn endpoint_caller(
    company: &ReferenceCompany,
    headers: &HeaderMap,
    method: &Method,
    uri: &Uri,
) -> Result<Caller, ApiError> {
    let caller = company.caller(headers, method, uri).await?;
    if !company.supports_operations(&caller.client_id).await {
        return Err(
            ApiError::challenge(StatusCode::FORBIDDEN, OAuthErrorCode::ExtensionRequired)
                .with("extension", json!("operations")),
        );
    }
    Ok(caller)
}

fn viewer(caller: &Caller) -> Viewer<'_> {
    Viewer {
        client_id: &caller.client_id,
        user: &caller.record.user,
        account: caller.record.account.as_deref(),
        scopes: &caller.record.scopes,
    }
}

fn operation_response(operation: &Operation) -> Response {
    let mut response = json_response(StatusCode::OK, &json!(operation));
    if operation.state == OperationState::InProgress {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    response
}

async fn read(
    State(company): State<ReferenceCompany>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let caller = endpoint_caller(&company, &headers, &method, &uri).await?;
        company
            .read_operation(&id, &viewer(&caller))
            .map_err(ConfirmError::into_api_error)
    };
    result
        .await
        .map_or_else(IntoResponse::into_response, |op| operation_response(&op))
}

/// `POST /poppy/operations/{id}/confirm` with `{revision, approved_by}`, or `/cancel`.
async fn act(
    State(company): State<ReferenceCompany>,
    Path((id, action)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let caller = endpoint_caller(&company, &headers, &method, &uri).await?;
        let viewer = viewer(&caller);
        match action.as_str() {
            "confirm" => {
                let body = read_json(body).await?;
                let revision = body
                    .get("revision")
                    .and_then(Value::as_u64)
                    .and_then(|r| u32::try_from(r).ok());
                let approved_by = body.get("approved_by").and_then(Value::as_str).unwrap_or("user");
                company.confirm_operation(&id, &viewer, revision, approved_by)
            }
            "cancel" => company.cancel_operation(&id, &viewer),
            _ => Err(ConfirmError::NotFound),
        }
        .map_err(ConfirmError::into_api_error)
    };
    result
        .await
        .map_or_else(IntoResponse::into_response, |op| operation_response(&op))
}
