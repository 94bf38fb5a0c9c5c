//! Serving the agent's two public documents over HTTPS: `/agent.json` (the Client ID Metadata
//! Document) and `/jwks.json`, so companies can resolve the agent's `client_id`.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::identity::Identity;

/// The documents as a router: JSON, `Cache-Control: no-store` so a company sees a rotated key
/// at once.
pub fn documents_router(identity: &Identity) -> Router {
    let metadata = identity.metadata().to_string();
    let jwks = identity.jwks().to_string();
    let json = |body: String| {
        move || {
            let body = body.clone();
            async move {
                let mut response = body.into_response();
                let headers = response.headers_mut();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                response
            }
        }
    };
    Router::new()
        .route("/agent.json", get(json(metadata)))
        .route("/jwks.json", get(json(jwks)))
}
