//! The operator API: test and support hooks, served only on a loopback address over plain
//! HTTP (the binary refuses any other address). Agent callers cannot reach it.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::ReferenceCompany;
use super::protocol::json_response;

#[derive(Deserialize)]
struct Approve {
    user_code: String,
    account: String,
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new()
        .route("/approve-device", post(approve))
        .route("/performed/{id}", get(performed))
}

async fn approve(State(company): State<ReferenceCompany>, Json(body): Json<Approve>) -> Response {
    match company.approve_device(&body.user_code, &body.account, body.scopes) {
        Ok(()) => json_response(StatusCode::OK, &json!({"approved": true})),
        Err(error) => json_response(StatusCode::NOT_FOUND, &json!({"error": error.to_string()})),
    }
}

async fn performed(State(company): State<ReferenceCompany>, Path(id): Path<String>) -> Response {
    match company.performed(&id) {
        Some(count) => json_response(StatusCode::OK, &json!({"count": count})),
        None => (StatusCode::NOT_FOUND, Json(json!({"error": "operation_not_found"}))).into_response(),
    }
}
