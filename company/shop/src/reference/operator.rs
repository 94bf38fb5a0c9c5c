//! The operator API: test and support hooks, served only on a loopback address over plain
//! HTTP (the binary refuses any other address). Agent callers cannot reach it.
//!
//! Being local is not enough (review M6): every request must carry the operator credential,
//! as `Authorization: Bearer <credential>` or as the password of HTTP Basic (so a URL such as
//! `http://operator:<credential>@127.0.0.1:8444` works), and name a loopback `Host`, so a web
//! page that rebinds a name of its own to 127.0.0.1 is refused. `pap-company serve` writes the
//! credential to a file only its user can read (`--admin-credential-file`).

use std::net::IpAddr;

use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;

use super::ReferenceCompany;
use super::protocol::json_response;

#[derive(Deserialize)]
struct Approve {
    user_code: String,
    account: String,
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

pub(super) fn routes(company: &ReferenceCompany) -> Router<ReferenceCompany> {
    let operator = Router::new()
        .route("/approve-device", post(approve))
        .route("/performed/{id}", get(performed))
        .route("/stores", get(stores))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(company.clone(), operator_only));
    // Readiness says only "ready or not" (and which store): a balancer's probe needs no
    // credential; the loopback Host check still applies.
    let probe = Router::new()
        .route("/ready", get(ready))
        .route_layer(middleware::from_fn(loopback_only));
    operator.merge(probe)
}

async fn loopback_only(request: Request, next: Next) -> Response {
    if !loopback_host(request.headers()) {
        return json_response(
            StatusCode::MISDIRECTED_REQUEST,
            &json!({"error": "not a loopback host"}),
        );
    }
    next.run(request).await
}

/// `GET /ready`: 200 when the company's store answers, 503 when it does not.
async fn ready(State(company): State<ReferenceCompany>) -> Response {
    let (store, answered) = company.store_ready().await;
    let status = if answered.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &json!({"ready": answered.is_ok(), "store": store}))
}

/// `GET /metrics`: Prometheus text, when the process installed the recorder.
async fn metrics() -> Response {
    match crate::metrics::render() {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            text,
        )
            .into_response(),
        None => json_response(StatusCode::NOT_FOUND, &json!({"error": "metrics are not installed"})),
    }
}

/// Lets through only a request with a loopback `Host` and the operator credential.
async fn operator_only(State(company): State<ReferenceCompany>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !loopback_host(headers) {
        return json_response(
            StatusCode::MISDIRECTED_REQUEST,
            &json!({"error": "not a loopback host"}),
        );
    }
    let presented = credential(headers);
    let expected = company.inner.operator_credential.secret().as_bytes();
    if !presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(expected))) {
        let mut refused = json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"error": "operator credential required"}),
        );
        refused.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"operator\", Basic realm=\"operator\""),
        );
        return refused;
    }
    next.run(request).await
}

/// Whether `Host` names a loopback address or `localhost` (any port).
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Ok(authority) = host.parse::<http::uri::Authority>() else {
        return false;
    };
    let name = authority.host().trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The credential of a Bearer or Basic `Authorization`.
fn credential(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.trim().to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        return text.split_once(':').map(|(_, password)| password.to_owned());
    }
    None
}

async fn approve(State(company): State<ReferenceCompany>, Json(body): Json<Approve>) -> Response {
    match company
        .approve_device(&body.user_code, &body.account, body.scopes)
        .await
    {
        Ok(()) => json_response(StatusCode::OK, &json!({"approved": true})),
        Err(error @ super::device::ApprovalError::Store(_)) => {
            json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"error": error.to_string()}))
        }
        Err(error) => json_response(StatusCode::NOT_FOUND, &json!({"error": error.to_string()})),
    }
}

async fn stores(State(company): State<ReferenceCompany>) -> Response {
    json_response(StatusCode::OK, &json!(company.store_sizes()))
}

async fn performed(State(company): State<ReferenceCompany>, Path(id): Path<String>) -> Response {
    match company.performed(&id).await {
        Ok(Some(count)) => json_response(StatusCode::OK, &json!({"count": count})),
        Ok(None) => (StatusCode::NOT_FOUND, Json(json!({"error": "operation_not_found"}))).into_response(),
        Err(_) => json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"error": "store_unavailable"})),
    }
}
