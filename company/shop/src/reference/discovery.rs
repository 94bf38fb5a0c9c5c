//! Discovery (PAP §3): `/.well-known/poppy.json` and the issuer's OAuth Authorization Server
//! Metadata (RFC 8414), both under `https://{domain}` with no port.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use http::StatusCode;
use pap_shared::{
    Api, AuthorizationServerMetadata, DeviceSignIn, Discovery, DiscoveryAuth, Extensions, OperationsExtension,
    Organization, PROTOCOL_VERSION, Web, grant_type,
};

use super::ReferenceCompany;
use super::protocol::json_response;
use pap_company::route::BROWSER_SESSION_PATH;

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new()
        .route("/.well-known/poppy.json", get(poppy))
        .route("/.well-known/oauth-authorization-server", get(oauth_metadata))
}

async fn poppy(State(company): State<ReferenceCompany>) -> Response {
    let config = company.config();
    let base = &company.inner.base;
    let body = Discovery {
        protocol_version: PROTOCOL_VERSION.to_owned(),
        organization: Organization {
            name: config.name.clone(),
            domain: config.domain.clone(),
        },
        auth: DiscoveryAuth {
            issuer: base.clone(),
            device: Some(DeviceSignIn {
                scopes: config.scopes.iter().map(|s| s.name.clone()).collect(),
            }),
            // Each of the company's own scopes, with what it lets the agent do.
            custom_scopes: config
                .scopes
                .iter()
                .map(|s| (s.name.clone(), s.description.clone()))
                .collect(),
        },
        apis: vec![Api {
            kind: "openapi".to_owned(),
            url: format!("{base}/api/openapi.json"),
            description: Some(format!("The {} API", config.name)),
        }],
        web: Some(Web {
            browser_session_endpoint: Some(format!("{base}{BROWSER_SESSION_PATH}")),
        }),
        extensions: Extensions {
            operations: Some(OperationsExtension {
                version: "1".to_owned(),
                endpoint: format!("{base}/poppy/operations"),
            }),
        },
    };
    json_response(StatusCode::OK, &body)
}

async fn oauth_metadata(State(company): State<ReferenceCompany>) -> Response {
    let base = &company.inner.base;
    let body = AuthorizationServerMetadata {
        issuer: base.clone(),
        token_endpoint: format!("{base}/oauth/token"),
        revocation_endpoint: format!("{base}/oauth/revoke"),
        device_authorization_endpoint: Some(format!("{base}/oauth/device")),
        grant_types_supported: [
            grant_type::JWT_BEARER,
            grant_type::DEVICE_CODE,
            grant_type::REFRESH_TOKEN,
        ]
        .map(str::to_owned)
        .to_vec(),
        token_endpoint_auth_methods_supported: vec!["private_key_jwt".to_owned()],
        token_endpoint_auth_signing_alg_values_supported: vec!["ES256".to_owned(), "RS256".to_owned()],
        dpop_signing_alg_values_supported: Some(vec!["ES256".to_owned(), "RS256".to_owned()]),
        scopes_supported: company.config().scopes.iter().map(|s| s.name.clone()).collect(),
        poppy_domains: vec![company.config().domain.as_str().to_owned()],
    };
    json_response(StatusCode::OK, &body)
}
