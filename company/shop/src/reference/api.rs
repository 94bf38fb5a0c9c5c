//! The company's OpenAPI API: calls authenticated by a DPoP-bound Session Token (PAP §4.3),
//! among them the configured calls that propose an operation (Operations v1 §4), answering 202.

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, Method, StatusCode, Uri};
use pap_shared::{ClientId, OAuthErrorCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::ReferenceCompany;
use super::config::{CompanyConfig, ProposalConfig};
use super::operations::NewOperation;
use super::protocol::{ApiError, json_response, read_json};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_company::records::{Commit, Expect, read};
use pap_company::slot::{self, SlotTag};
use pap_company::stores::Owner;

pub(super) fn routes(config: &CompanyConfig) -> Router<ReferenceCompany> {
    let mut router = Router::new().route("/api/openapi.json", get(openapi));
    for (index, proposal) in config.proposals.iter().enumerate() {
        router = router.route(
            &proposal.path,
            post(
                move |state: State<ReferenceCompany>,
                      params: Path<HashMap<String, String>>,
                      uri: Uri,
                      method: Method,
                      headers: HeaderMap,
                      body: Body| { propose(state, index, params, uri, method, headers, body) },
            ),
        );
    }
    for (index, read) in config.reads.iter().enumerate() {
        router = router.route(
            &read.path,
            get(
                move |state: State<ReferenceCompany>, uri: Uri, method: Method, headers: HeaderMap| {
                    read_call(state, index, uri, method, headers)
                },
            ),
        );
    }
    router
}

/// A configured read: a signed-in Session with the read's scope gets its document.
async fn read_call(
    State(company): State<ReferenceCompany>,
    index: usize,
    uri: Uri,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let caller = company.caller(&headers, &method, &uri).await?;
        if !caller.record.is_signed_in() {
            return Err(ApiError::challenge(
                StatusCode::FORBIDDEN,
                OAuthErrorCode::SignInRequired,
            ));
        }
        let read = &company.inner.config.reads[index];
        if !caller.record.scopes.contains(&read.scope) {
            return Err(
                ApiError::challenge(StatusCode::FORBIDDEN, OAuthErrorCode::InsufficientScope)
                    .with_scope(read.scope.clone()),
            );
        }
        let body: Value = serde_json::from_str(&read.body).unwrap_or(Value::Null);
        Ok(json_response(StatusCode::OK, &body))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

impl ReferenceCompany {
    /// Whether the agent declared Operations v1 in its metadata (OPS-2-01).
    pub(crate) async fn supports_operations(&self, client_id: &ClientId) -> bool {
        self.inner
            .clients
            .metadata(client_id)
            .await
            .is_ok_and(|m| m.extension_version("operations") == Some("1"))
    }
}

async fn openapi(State(company): State<ReferenceCompany>) -> Response {
    let mut paths = serde_json::Map::new();
    for proposal in &company.inner.config.proposals {
        paths.insert(
            proposal.path.clone(),
            json!({"post": {
                "summary": proposal.description.clone().unwrap_or_else(|| proposal.summary.clone()),
                "x-poppy-operation": {"user_approval_required": proposal.user_approval_required, "scopes": proposal.scopes},
                "responses": {"202": {"description": "An operation is proposed; confirm it through the operations endpoint or its page."}}
            }}),
        );
    }
    let body = json!({
        "openapi": "3.1.0",
        "info": {"title": format!("{} API", company.inner.config.name), "version": "1"},
        "servers": [{"url": company.inner.base}],
        "paths": paths,
    });
    json_response(StatusCode::OK, &body)
}

/// How long an `Idempotency-Key`'s answer is remembered, in seconds: a day, well past any
/// retry. Past it, a retried proposal is still the same operation while it is proposed
/// (OPS-4-01).
const IDEMPOTENCY_LIFETIME: i64 = 86_400;

/// What one `Idempotency-Key` answered (key `idempotency:{digest of client, Session, key}`):
/// the request's fingerprint and the answer.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Remembered {
    fingerprint: String,
    status: u16,
    body: Value,
}

async fn propose(
    State(company): State<ReferenceCompany>,
    index: usize,
    Path(params): Path<HashMap<String, String>>,
    uri: Uri,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        // A path parameter lands in the summary the user reads on the confirm page: an
        // identifier only, so an agent cannot write "(free, no charge)" there (review L11).
        if !params.values().all(|v| is_identifier(v)) {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest));
        }
        let caller = company.caller(&headers, &method, &uri).await?;
        if !caller.record.is_signed_in() {
            return Err(ApiError::challenge(
                StatusCode::FORBIDDEN,
                OAuthErrorCode::SignInRequired,
            ));
        }
        if !company.supports_operations(&caller.client_id).await {
            return Err(
                ApiError::challenge(StatusCode::FORBIDDEN, OAuthErrorCode::ExtensionRequired)
                    .with("extension", json!("operations")),
            );
        }
        let body = read_json(body).await?;
        let key = idempotency_key(&headers)?;
        let fingerprint: [u8; 32] = Sha256::new()
            .chain_update(uri.path().as_bytes())
            .chain_update(b"\0")
            .chain_update(Value::Object(body.clone()).to_string().as_bytes())
            .finalize()
            .into();
        // Remembered per client and Session, by a digest of the three (never the key itself).
        let remember_as: Option<String> = key.map(|k| {
            let digest: [u8; 32] = Sha256::new()
                .chain_update(caller.client_id.as_str().as_bytes())
                .chain_update(b"\0")
                .chain_update(caller.session.as_str().as_bytes())
                .chain_update(b"\0")
                .chain_update(k.as_bytes())
                .finalize()
                .into();
            let tag = SlotTag::of(Owner::of_client(&caller.client_id));
            slot::key("idempotency", Some(tag), &URL_SAFE_NO_PAD.encode(digest))
        });
        let seen = match &remember_as {
            Some(key) => read::<Remembered>(company.records(), key)
                .await
                .map_err(ApiError::store)?
                .map(|(_, seen)| seen),
            None => None,
        };
        if let Some(seen) = seen {
            if seen.fingerprint != URL_SAFE_NO_PAD.encode(fingerprint) {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    OAuthErrorCode::IdempotencyKeyConflict,
                ));
            }
            let status = StatusCode::from_u16(seen.status).unwrap_or(StatusCode::ACCEPTED);
            return Ok(json_response(status, &seen.body));
        }
        let proposal: &ProposalConfig = &company.inner.config.proposals[index];
        let operation = company
            .propose_operation(NewOperation {
                caller: &caller,
                action: uri.path(),
                summary: fill(&proposal.summary, &params),
                terms: json!({ "action": uri.path(), "parameters": params }),
                user_approval_required: proposal.user_approval_required,
                scopes: proposal.scopes.clone(),
            })
            .await
            .map_err(ApiError::store)?;
        let answer = json!({ "operation": operation });
        if let Some(id) = remember_as {
            let remembered = Remembered {
                fingerprint: URL_SAFE_NO_PAD.encode(fingerprint),
                status: StatusCode::ACCEPTED.as_u16(),
                body: answer.clone(),
            };
            let until = company.now().plus(IDEMPOTENCY_LIFETIME);
            Commit::new(Owner::of_client(&caller.client_id))
                .put(id, Expect::Any, &remembered, until)
                .apply(company.records())
                .await
                .map_err(ApiError::store)?;
        }
        Ok(json_response(StatusCode::ACCEPTED, &answer))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `Idempotency-Key`: 1-255 visible ASCII characters, at most one header.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (first, second) = (values.next(), values.next());
    match (first, second) {
        (None, _) => Ok(None),
        (Some(v), None) => {
            let text = v
                .to_str()
                .map_err(|_| ApiError::bad_request(OAuthErrorCode::InvalidRequest))?;
            let visible = text.bytes().all(|b| (0x21..=0x7e).contains(&b));
            if (1..=255).contains(&text.len()) && visible {
                Ok(Some(text.to_owned()))
            } else {
                Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest))
            }
        }
        (Some(_), Some(_)) => Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest)),
    }
}

/// 1 to 64 ASCII letters, digits, `_` or `-`: what an id in a path may be.
fn is_identifier(text: &str) -> bool {
    pap_shared::is_base64url(text, 1, 64)
}

/// Fills `{name}` placeholders from the path parameters.
fn fill(template: &str, params: &HashMap<String, String>) -> String {
    params.iter().fold(template.to_owned(), |text, (name, value)| {
        text.replace(&format!("{{{name}}}"), value)
    })
}
