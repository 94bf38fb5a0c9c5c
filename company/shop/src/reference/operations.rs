//! Operations v1: the store (propose, read, confirm at most once, cancel) and the operations
//! endpoint `/poppy/operations/{id}[/confirm|/cancel]`.
//!
//! Confirmation is one commit against the version read (a compare-and-set in the records, in
//! this process or in Redis): of any number of confirms, through the endpoint or the website,
//! on any replicas, exactly one moves the operation out of `proposed` and performs it
//! (OPS-6-02); the others read it moved and answer it unchanged.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use pap_shared::{
    ClientId, Confirmation, OAuthErrorCode, Operation, OperationResult, OperationState, PairwiseUserId, UnixTime,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ReferenceCompany;
use super::caller::Caller;
use super::protocol::{ApiError, json_response, read_json};
use pap_company::records::{self, Commit, Expect, expect_of, retrying};
use pap_company::slot::{self, SlotTag};
use pap_company::stores::{Owner, StoreError};

/// A proposal stays confirmable for 15 minutes.
const PROPOSAL_LIFETIME: i64 = 15 * 60;

/// How long an operation's record (its state, and whether it was performed) is kept after it
/// was proposed, in seconds: a week. Nothing drops a record before that.
pub const OPERATION_RETENTION: i64 = 7 * 86_400;

/// Most operation records one account holds at once from the clients of one owner (within
/// [`OPERATION_RETENTION`]); past it, that owner's new proposals are refused with 429 until old
/// records go.
pub const OPERATIONS_PER_ACCOUNT: usize = 1_000;

/// Most entries of an account's operation list one listing reads (the front page): a page view
/// costs a bounded number of store reads.
const RECENT_SCANNED: usize = 50;

/// Who may see an operation, what it needs, and how often it was performed (key
/// `operation:{id}`), kept [`OPERATION_RETENTION`] after the proposal.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    fn proposal_key(&self) -> String {
        proposal_key(
            &self.client_id,
            &self.user,
            &self.account,
            &self.action,
            &self.operation.summary,
        )
    }
}

fn operation_key(id: &str) -> String {
    slot::key("operation", SlotTag::of_minted(id, "op_"), id)
}

/// The index of a proposal (key `proposal:{digest of client, user, account, action, summary}`),
/// naming the operation while it is proposed: found without a scan.
fn proposal_key(client_id: &ClientId, user: &PairwiseUserId, account: &str, action: &str, summary: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    for part in [client_id.as_str(), user.as_str(), account, action, summary] {
        digest.update(part.len().to_be_bytes());
        digest.update(part.as_bytes());
    }
    let tag = SlotTag::of(Owner::of_client(client_id));
    slot::key("proposal", Some(tag), &URL_SAFE_NO_PAD.encode(digest.finalize()))
}

/// An account's operations proposed by the clients of one owner (key
/// `account-operations:{tag}digest`), at most [`OPERATIONS_PER_ACCOUNT`] within their
/// retention. Per owner, so that the list shares its slot with the operations it names (a Redis
/// Cluster), and one agent's proposals never crowd out another's (review N3).
fn account_operations_key(account: &str, client_id: &ClientId) -> String {
    use sha2::{Digest, Sha256};
    let owner = Owner::of_client(client_id);
    let digest = Sha256::new()
        .chain_update(owner.as_bytes())
        .chain_update(account.as_bytes())
        .finalize();
    slot::key(
        "account-operations",
        Some(SlotTag::of(owner)),
        &URL_SAFE_NO_PAD.encode(digest),
    )
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
    /// The store could not answer: nothing was changed.
    Store(StoreError),
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
            Self::Store(_) => OAuthErrorCode::TemporarilyUnavailable,
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
            Self::Store(StoreError::Full | StoreError::OverShare) => StatusCode::TOO_MANY_REQUESTS,
            Self::Store(StoreError::Unavailable) => StatusCode::SERVICE_UNAVAILABLE,
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
            Self::Store(error) => ApiError::store(error),
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
    pub(crate) async fn propose_operation(&self, new: NewOperation<'_>) -> Result<Operation, StoreError> {
        let account = new.caller.record.account.clone().unwrap_or_default();
        let index_key = proposal_key(
            &new.caller.client_id,
            &new.caller.record.user,
            &account,
            new.action,
            &new.summary,
        );
        let list_key = account_operations_key(&account, &new.caller.client_id);
        let records = self.records();
        let id = self.random_token("op", &new.caller.client_id);
        retrying(|| async {
            let now = self.now();
            let index = records::read::<String>(records, &index_key).await?;
            if let Some((_, existing)) = &index
                && let Some((_, record)) = records::read::<Record>(records, &operation_key(existing)).await?
                && record.operation.state == OperationState::Proposed
                && now < record.expires_at
            {
                return Ok(Some(record.operation));
            }
            let held = records::read::<Vec<(String, UnixTime)>>(records, &list_key).await?;
            let mut live: Vec<(String, UnixTime)> = held
                .as_ref()
                .map(|(_, list)| list.iter().filter(|(_, until)| now < *until).cloned().collect())
                .unwrap_or_default();
            if live.len() >= OPERATIONS_PER_ACCOUNT {
                return Err(StoreError::Full);
            }
            let expires_at = now.plus(PROPOSAL_LIFETIME);
            let kept_until = now.plus(OPERATION_RETENTION);
            live.push((id.clone(), kept_until));
            let operation = Operation {
                operation_id: id.clone(),
                revision: 1,
                state: OperationState::Proposed,
                summary: new.summary.clone(),
                terms: Some(new.terms.clone()),
                expires_at: Some(expires_at.to_rfc3339()),
                user_approval_required: new.user_approval_required,
                url: Some(format!("{}/operations/{id}", self.inner.base)),
                confirmation: None,
                result: None,
            };
            let record = Record {
                operation: operation.clone(),
                client_id: new.caller.client_id.clone(),
                user: new.caller.record.user.clone(),
                account: account.clone(),
                action: new.action.to_owned(),
                scopes: new.scopes.clone(),
                expires_at,
                kept_until,
                performed: 0,
            };
            let committed = Commit::new(Owner::of_client(&record.client_id))
                .put(operation_key(&id), Expect::Absent, &record, kept_until)
                .put(index_key.clone(), expect_of(&index), &id, expires_at)
                .put(list_key.clone(), expect_of(&held), &live, kept_until)
                .apply(records)
                .await?;
            Ok(committed.then_some(operation))
        })
        .await
    }

    /// The operation as `viewer` may see it: another client's or user's, or one proposed under
    /// another account, is not found; a signed-out viewer must sign in. A proposal past its
    /// expiry turns `expired` first.
    pub(crate) async fn read_operation(&self, id: &str, viewer: &Viewer<'_>) -> Result<Operation, ConfirmError> {
        Ok(self.change_operation(id, viewer, |_| Ok(())).await?.0)
    }

    /// Confirms `revision` as `approved_by`, performing the operation at most once: of any
    /// number of confirms, through the endpoint or the website, on any replicas, exactly one
    /// commits the move out of `proposed` (OPS-6-02); the others read it moved and answer it
    /// unchanged.
    pub(crate) async fn confirm_operation(
        &self,
        id: &str,
        viewer: &Viewer<'_>,
        revision: Option<u32>,
        approved_by: &str,
    ) -> Result<Operation, ConfirmError> {
        let now = self.now();
        self.change_operation(id, viewer, |record| {
            if let Some(missing) = record.scopes.iter().find(|s| !viewer.scopes.contains(s)) {
                return Err(ConfirmError::InsufficientScope(missing.clone()));
            }
            if record.operation.state != OperationState::Proposed {
                // Already confirmed (or final): the same record, unchanged, performed no second time.
                return Ok(());
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
            Ok(())
        })
        .await
        .map(|(operation, changed)| {
            if changed && operation.state == OperationState::Succeeded {
                tracing::info!(operation = %operation.operation_id, approved_by, "operation performed");
            }
            operation
        })
    }

    /// Cancels a proposed operation; a final one is returned unchanged.
    pub(crate) async fn cancel_operation(&self, id: &str, viewer: &Viewer<'_>) -> Result<Operation, ConfirmError> {
        self.change_operation(id, viewer, |record| {
            if record.operation.state == OperationState::Proposed {
                record.operation.state = OperationState::Cancelled;
                record.operation.expires_at = None;
                record.operation.result = Some(OperationResult {
                    summary: "Nothing was changed.".into(),
                });
            }
            Ok(())
        })
        .await
        .map(|(operation, _)| operation)
    }

    /// How many times the operation was performed (the operator API).
    pub async fn performed(&self, id: &str) -> Result<Option<u32>, StoreError> {
        Ok(records::read::<Record>(self.records(), &operation_key(id))
            .await?
            .map(|(_, r)| r.performed))
    }

    /// The newest operations `viewer` may see, at most `limit`, newest first, as they stand now
    /// (a stale proposal reads expired; nothing is written). At most [`RECENT_SCANNED`] of the
    /// entries of the account and the viewer's owner are read, whatever other clients or users
    /// of that owner proposed.
    pub(crate) async fn recent_operations(
        &self,
        viewer: &Viewer<'_>,
        limit: usize,
    ) -> Result<Vec<Operation>, StoreError> {
        let Some(account) = viewer.account else {
            return Ok(Vec::new());
        };
        let records = self.records();
        let now = self.now();
        let Some((_, list)) =
            records::read::<Vec<(String, UnixTime)>>(records, &account_operations_key(account, viewer.client_id))
                .await?
        else {
            return Ok(Vec::new());
        };
        let mut recent = Vec::new();
        for (id, _) in list.iter().rev().filter(|(_, until)| now < *until).take(RECENT_SCANNED) {
            if recent.len() == limit {
                break;
            }
            let Some((_, record)) = records::read::<Record>(records, &operation_key(id)).await? else {
                continue;
            };
            if visible(&record, viewer).is_err() {
                continue;
            }
            let mut operation = record.operation;
            if operation.state == OperationState::Proposed && now >= record.expires_at {
                operation.state = OperationState::Expired;
            }
            recent.push(operation);
        }
        Ok(recent)
    }

    /// Reads the operation as `viewer` may see it (expiring a stale proposal), lets `change`
    /// decide, and commits what changed against the version read: a writer that moved it first
    /// makes this read again. The operation as it now stands, and whether this call changed it.
    async fn change_operation(
        &self,
        id: &str,
        viewer: &Viewer<'_>,
        change: impl Fn(&mut Record) -> Result<(), ConfirmError>,
    ) -> Result<(Operation, bool), ConfirmError> {
        let records = self.records();
        let key = operation_key(id);
        retrying(|| async {
            let now = self.now();
            let Some((version, mut record)) = records::read::<Record>(records, &key).await? else {
                return Ok(Some(Err(ConfirmError::NotFound)));
            };
            if let Err(refused) = visible(&record, viewer) {
                return Ok(Some(Err(refused)));
            }
            let before = record.operation.clone();
            if record.operation.state == OperationState::Proposed && now >= record.expires_at {
                record.operation.state = OperationState::Expired;
                record.operation.expires_at = None;
                record.operation.result = Some(OperationResult {
                    summary: "Nothing was changed; the proposal expired.".into(),
                });
            }
            if let Err(refused) = change(&mut record) {
                return Ok(Some(Err(refused)));
            }
            if record.operation == before {
                return Ok(Some(Ok((record.operation, false))));
            }
            let mut commit = Commit::new(Owner::of_client(&record.client_id)).put(
                key.clone(),
                Expect::Version(version),
                &record,
                record.kept_until,
            );
            if record.operation.state != OperationState::Proposed {
                // Settled: it leaves the proposal index (if the index still names it).
                let index_key = record.proposal_key();
                if let Some((index_version, indexed)) = records::read::<String>(records, &index_key).await?
                    && indexed == id
                {
                    commit = commit.delete(index_key, Expect::Version(index_version));
                }
            }
            Ok(commit.apply(records).await?.then_some(Ok((record.operation, true))))
        })
        .await
        .map_err(ConfirmError::Store)?
    }
}

/// Whether `viewer` may see `record`: another client's or user's is not found, a signed-out
/// viewer must sign in, another account's is not found.
fn visible(record: &Record, viewer: &Viewer<'_>) -> Result<(), ConfirmError> {
    if &record.client_id != viewer.client_id || &record.user != viewer.user {
        return Err(ConfirmError::NotFound);
    }
    let Some(account) = viewer.account else {
        return Err(ConfirmError::SignInRequired);
    };
    if account != record.account {
        return Err(ConfirmError::NotFound);
    }
    Ok(())
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
            .await
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
                company.confirm_operation(&id, &viewer, revision, approved_by).await
            }
            "cancel" => company.cancel_operation(&id, &viewer).await,
            _ => Err(ConfirmError::NotFound),
        }
        .map_err(ConfirmError::into_api_error)
    };
    result
        .await
        .map_or_else(IntoResponse::into_response, |op| operation_response(&op))
}
