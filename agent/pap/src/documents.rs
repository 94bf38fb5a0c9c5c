//! Serving the agent's two public documents over HTTPS: `/agent.json` (the Client ID Metadata
//! Document) and `/jwks.json`, so companies can resolve the agent's `client_id`.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::identity::Identity;

/// The documents' `Cache-Control`. A minute, not `no-store`: a company then fetches them once a
/// minute per agent rather than on every token request and join (a `no-store` agent costs a
/// company a fetch each time, and one whose fetches are busy cannot join at all); a rotated key
/// still shows at once, since a company refetches the JWKS on a `kid` it does not know, and a
/// removed one is gone from every company within the minute.
pub const DOCUMENTS_CACHE_CONTROL: &str = "max-age=60";

/// The documents as a router: JSON, cached a minute ([`DOCUMENTS_CACHE_CONTROL`]). The JWKS is
/// built at each request, so a rotation (`pap-agent identity rotate`) and the end of a retired
/// key's window show without a restart.
pub fn documents_router(identity: Arc<Identity>) -> Router {
    let metadata = identity.metadata().to_string();
    Router::new()
        .route("/agent.json", get(move || async move { json(metadata.clone()) }))
        .route(
            "/jwks.json",
            get(move || async move { json(identity.jwks().to_string()) }),
        )
}

fn json(body: String) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(DOCUMENTS_CACHE_CONTROL));
    response
}
