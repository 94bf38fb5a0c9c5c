//! The PAP client stays off loopback and private networks whatever a company's documents name
//! (PAP-3-10; security review M8): an endpoint that is an IP literal fails discovery, and a name
//! that resolves only to private addresses is not dialled. The test-only `connect` map is the
//! one exception, and the company itself is reached through it here.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt as _;
use pap_agent::{ClientConfig, ClientError, PapClient};
use pap_shared::{CompanyDomain, SystemClock, SystemRng};
use support::Stage;

/// The reference company with its OAuth metadata's token endpoint rewritten to `endpoint`
/// (`{port}` in it becomes the company's own port).
async fn company_naming(stage: &Stage, endpoint: &'static str) -> std::net::SocketAddr {
    let port = Arc::new(std::sync::atomic::AtomicU16::new(0));
    let own_port = port.clone();
    let wrap = move |router: axum::Router| {
        router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            let port = own_port.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                let metadata = request
                    .uri()
                    .path()
                    .starts_with("/.well-known/oauth-authorization-server");
                let response = next.run(request).await;
                if !metadata {
                    return response;
                }
                let (parts, body) = response.into_parts();
                let mut doc: serde_json::Value =
                    serde_json::from_slice(&body.collect().await.unwrap().to_bytes()).unwrap();
                doc["token_endpoint"] = serde_json::json!(endpoint.replace("{port}", &port.to_string()));
                let mut parts = parts;
                parts.headers.remove(http::header::CONTENT_LENGTH);
                Response::from_parts(parts, Body::from(doc.to_string()))
            }
        }))
    };
    let (_, addr) = support::start_reference_company_on(stage, Arc::new(SystemClock), wrap).await;
    port.store(addr.port(), std::sync::atomic::Ordering::SeqCst);
    addr
}

fn client(stage: &Stage, addr: std::net::SocketAddr) -> PapClient {
    let config = ClientConfig {
        extra_roots: vec![stage.ca_der.clone()],
        connect: [("shop.example".to_owned(), addr)].into(),
    };
    PapClient::new(
        stage.identity.clone(),
        &config,
        Arc::new(SystemClock),
        Arc::new(SystemRng),
    )
    .unwrap()
}

#[tokio::test]
async fn an_endpoint_that_is_an_ip_literal_fails_discovery() {
    let stage = Stage::new("private-literal", &["shop.example", "atlas.example"]).await;
    let addr = company_naming(&stage, "https://127.0.0.1:9443/oauth/token").await;
    let discovered = client(&stage, addr)
        .discover(&CompanyDomain::try_from("shop.example").unwrap())
        .await;
    assert!(
        matches!(discovered, Err(ClientError::InvalidDiscovery("token_endpoint"))),
        "{discovered:?}"
    );
    std::fs::remove_dir_all(&stage.work).unwrap();
}

#[tokio::test]
async fn a_name_with_only_private_addresses_is_not_dialled() {
    let stage = Stage::new("private-name", &["shop.example", "atlas.example", "localhost"]).await;
    // `localhost` resolves to loopback only, where the company itself listens: discovery finds
    // the name acceptable; the first call to it is refused before any connection (without the
    // rule it would reach the company and be answered).
    let addr = company_naming(&stage, "https://localhost:{port}/oauth/token").await;
    let client = client(&stage, addr);
    let company = client
        .discover(&CompanyDomain::try_from("shop.example").unwrap())
        .await
        .unwrap();
    let user = pap_agent::new_pairwise_user(&SystemRng);
    let started = client
        .start_session(&company, &user, client.new_dpop_key().unwrap())
        .await;
    assert!(matches!(started, Err(ClientError::Transport(_))), "{started:?}");
    std::fs::remove_dir_all(&stage.work).unwrap();
}
