//! Discovery (PAP §3): `/.well-known/poppy.json` and the issuer's OAuth Authorization Server
//! Metadata (RFC 8414), both under `https://{domain}` with no port.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use http::StatusCode;
use serde_json::json;

use super::ReferenceCompany;
use super::protocol::json_response;
use crate::browser_session::BROWSER_SESSION_PATH;

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new()
        .route("/.well-known/poppy.json", get(poppy))
        .route("/.well-known/oauth-authorization-server", get(oauth_metadata))
}

async fn poppy(State(company): State<ReferenceCompany>) -> Response {
    let config = company.config();
    let base = &company.inner.base;
    // `custom_scopes` maps each of the company's own scopes to what it lets the agent do.
    let scopes: serde_json::Map<String, serde_json::Value> = config
        .scopes
        .iter()
        .map(|s| (s.name.clone(), json!(s.description)))
        .collect();
    let body = json!({
        "protocol_version": "0.2",
        "organization": {"name": config.name, "domain": config.domain.as_str()},
        "auth": {
            "issuer": base,
            "device": {"scopes": config.scopes.iter().map(|s| &s.name).collect::<Vec<_>>()},
            "custom_scopes": scopes,
        },
        "apis": [{"type": "openapi", "url": format!("{base}/api/openapi.json"), "description": format!("The {} API", config.name)}],
        "web": {"browser_session_endpoint": format!("{base}{BROWSER_SESSION_PATH}")},
        "extensions": {"operations": {"version": "1", "endpoint": format!("{base}/poppy/operations")}},
    });
    json_response(StatusCode::OK, &body)
}

async fn oauth_metadata(State(company): State<ReferenceCompany>) -> Response {
    let base = &company.inner.base;
    let body = json!({
        "issuer": base,
        "token_endpoint": format!("{base}/oauth/token"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "device_authorization_endpoint": format!("{base}/oauth/device"),
        "grant_types_supported": [super::token::JWT_BEARER, super::token::DEVICE_CODE, super::token::REFRESH_TOKEN],
        "token_endpoint_auth_methods_supported": ["private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": ["ES256", "RS256"],
        "dpop_signing_alg_values_supported": ["ES256", "RS256"],
        "scopes_supported": company.config().scopes.iter().map(|s| &s.name).collect::<Vec<_>>(),
        "poppy_domains": [company.config().domain.as_str()],
    });
    json_response(StatusCode::OK, &body)
}
