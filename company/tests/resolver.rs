//! The HTTPS client resolver against a real TLS server on 127.0.0.1 (rcgen certificates),
//! reached through the test allow-list, as a company reaches an agent's documents.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pap_company::{ClientKeys, ClientRegistry, HttpClientResolver, ResolveError, ResolverConfig, serve_tls};
use pap_shared::{ClientId, SigningKey, SystemRng};
use rustls::pki_types::CertificateDer;
use serde_json::{Value, json};
use support::{NOW, TestClock};

/// What the agent's site answers; tests change it between calls.
#[derive(Clone)]
struct Site {
    metadata: Value,
    jwks: Value,
    cache_control: Option<&'static str>,
    content_type: &'static str,
    metadata_redirect: Option<&'static str>,
    jwks_redirect: Option<&'static str>,
}

#[derive(Clone)]
struct Served {
    site: Arc<Mutex<Site>>,
    hits: Arc<Mutex<HashMap<&'static str, usize>>>,
}

impl Served {
    fn hits(&self, path: &'static str) -> usize {
        *self.hits.lock().unwrap().get(path).unwrap_or(&0)
    }
}

fn answer(served: &Served, path: &'static str) -> Response {
    *served.hits.lock().unwrap().entry(path).or_default() += 1;
    let site = served.site.lock().unwrap().clone();
    let (redirect, body) = match path {
        "/agent.json" => (site.metadata_redirect, site.metadata),
        "/moved/jwks.json" => (None, site.jwks),
        _ => (site.jwks_redirect, site.jwks),
    };
    if let Some(location) = redirect {
        return (StatusCode::FOUND, [(header::LOCATION, location)]).into_response();
    }
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(site.content_type));
    if let Some(cc) = site.cache_control {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cc));
    }
    (headers, body.to_string()).into_response()
}

struct Harness {
    served: Served,
    resolver: HttpClientResolver,
    clock: Arc<TestClock>,
    client_id: ClientId,
    key: SigningKey,
    addr: SocketAddr,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

async fn harness_with(overrides: bool) -> Harness {
    // A CA and one leaf for the agent's name, as in the interop harness.
    let pki = support::test_pki(&["atlas.example", "localhost"]);

    let key = SigningKey::generate_es256(&SystemRng, "key-1").unwrap();
    let served = Served {
        site: Arc::new(Mutex::new(Site {
            metadata: json!({
                "client_id": "https://atlas.example/agent.json",
                "client_name": "Atlas",
                "jwks_uri": "https://atlas.example/jwks.json",
                "redirect_uris": ["https://atlas.example/oauth/callback"],
                "token_endpoint_auth_method": "private_key_jwt"
            }),
            jwks: json!({"keys": [key.public_key().jwk()]}),
            cache_control: None,
            content_type: "application/json",
            metadata_redirect: None,
            jwks_redirect: None,
        })),
        hits: Arc::default(),
    };
    let app = Router::new()
        .route(
            "/agent.json",
            get(|State(s): State<Served>| async move { answer(&s, "/agent.json") }),
        )
        .route(
            "/jwks.json",
            get(|State(s): State<Served>| async move { answer(&s, "/jwks.json") }),
        )
        .route(
            "/moved/jwks.json",
            get(|State(s): State<Served>| async move { answer(&s, "/moved/jwks.json") }),
        )
        .with_state(served.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_tls(listener, app, pki.server, async move {
        let _ = stopped.await;
    }));

    let clock = TestClock::at(NOW);
    let mut config = ResolverConfig {
        extra_roots: vec![CertificateDer::from(pki.ca_der)],
        ..ResolverConfig::default()
    };
    if overrides {
        config.overrides.insert("atlas.example".to_owned(), addr);
    }
    let resolver = HttpClientResolver::new(config, clock.clone()).unwrap();
    let client_id = ClientId::parse("https://atlas.example/agent.json").unwrap();
    Harness {
        served,
        resolver,
        clock,
        client_id,
        key,
        addr,
        _shutdown: shutdown,
    }
}

async fn harness() -> Harness {
    harness_with(true).await
}

fn edit(h: &Harness, change: impl FnOnce(&mut Site)) {
    change(&mut h.served.site.lock().unwrap());
}

#[tokio::test]
async fn resolves_over_tls_and_caches_for_sixty_seconds_by_default() {
    let h = harness().await;
    let keys = h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    assert!(keys.has_kid("key-1"));
    assert_eq!(h.resolver.metadata(&h.client_id).await.unwrap().client_name(), "Atlas");
    h.clock.set(NOW + 59);
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    assert_eq!((h.served.hits("/agent.json"), h.served.hits("/jwks.json")), (1, 1));
    h.clock.set(NOW + 60);
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    assert_eq!((h.served.hits("/agent.json"), h.served.hits("/jwks.json")), (2, 2));
}

#[tokio::test]
async fn cache_control_sets_the_lifetime_and_no_store_disables_it() {
    let h = harness().await;
    edit(&h, |s| s.cache_control = Some("max-age=600"));
    h.resolver.keys(&h.client_id, None).await.unwrap();
    h.clock.set(NOW + 599);
    h.resolver.keys(&h.client_id, None).await.unwrap();
    assert_eq!(h.served.hits("/jwks.json"), 1);

    let h = harness().await;
    edit(&h, |s| s.cache_control = Some("no-store"));
    h.resolver.keys(&h.client_id, None).await.unwrap();
    h.resolver.keys(&h.client_id, None).await.unwrap();
    assert_eq!(h.served.hits("/jwks.json"), 2);
}

#[tokio::test]
async fn an_unknown_kid_refetches_the_jwks_at_most_once_a_minute() {
    let h = harness().await;
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    // The agent rotates its key.
    let rotated = SigningKey::generate_es256(&SystemRng, "key-2").unwrap();
    edit(&h, |s| {
        s.jwks = json!({"keys": [h.key.public_key().jwk(), rotated.public_key().jwk()]})
    });
    h.clock.set(NOW + 1);
    assert!(
        h.resolver
            .keys(&h.client_id, Some("key-2"))
            .await
            .unwrap()
            .has_kid("key-2")
    );
    assert_eq!(h.served.hits("/jwks.json"), 2);
    // A kid nobody published: no second refetch within 60 s of the last.
    h.clock.set(NOW + 30);
    assert!(
        !h.resolver
            .keys(&h.client_id, Some("key-9"))
            .await
            .unwrap()
            .has_kid("key-9")
    );
    assert_eq!(h.served.hits("/jwks.json"), 2);
    assert_eq!(h.served.hits("/agent.json"), 1);
}

#[tokio::test]
async fn a_failed_signature_refetches_the_jwks_at_most_once_a_minute() {
    let h = harness().await;
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    // The agent rotates its key under the same kid.
    let rotated = SigningKey::generate_es256(&SystemRng, "key-1").unwrap();
    edit(&h, |s| s.jwks = json!({"keys": [rotated.public_key().jwk()]}));
    h.clock.set(NOW + 1);
    let fresh = h
        .resolver
        .keys_after_failure(&h.client_id, Some("key-1"))
        .await
        .unwrap();
    let fresh = fresh.expect("a refetch");
    let claims = json!({"n": 1});
    let signed = rotated.sign("JWT", &claims).unwrap();
    let jws = pap_shared::UnverifiedJws::parse(signed.secret()).unwrap();
    let es256 = pap_shared::Algorithm::Es256;
    assert!(
        fresh
            .candidates(es256, Some("key-1"))
            .any(|k| jws.verify_with(es256, k)),
        "the rotated key"
    );
    assert_eq!(h.served.hits("/jwks.json"), 2);
    // The refetched keys are what the cache now holds; no second refetch within 60 s.
    h.clock.set(NOW + 30);
    assert!(
        h.resolver
            .keys_after_failure(&h.client_id, Some("key-1"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(h.served.hits("/jwks.json"), 2);
    h.clock.set(NOW + 61);
    assert!(
        h.resolver
            .keys_after_failure(&h.client_id, Some("key-1"))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!((h.served.hits("/jwks.json"), h.served.hits("/agent.json")), (3, 1));
}

#[tokio::test]
async fn a_failed_kid_refetch_keeps_the_cached_keys() {
    let h = harness().await;
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    edit(&h, |s| s.content_type = "text/html");
    h.clock.set(NOW + 1);
    assert!(
        h.resolver
            .keys(&h.client_id, Some("key-9"))
            .await
            .unwrap()
            .has_kid("key-1")
    );
    assert!(h.resolver.keys(&h.client_id, Some("key-1")).await.is_ok());
}

#[tokio::test]
async fn refuses_a_redirect_for_the_metadata() {
    let h = harness().await;
    edit(&h, |s| s.metadata_redirect = Some("https://atlas.example/agent.json"));
    let err = h.resolver.keys(&h.client_id, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            ResolveError::Fetch {
                what: "client metadata",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn follows_jwks_redirects_on_the_same_host_only() {
    let h = harness().await;
    edit(&h, |s| s.jwks_redirect = Some("/moved/jwks.json"));
    assert!(h.resolver.keys(&h.client_id, None).await.is_ok());
    assert_eq!(h.served.hits("/moved/jwks.json"), 1);

    let h = harness().await;
    edit(&h, |s| s.jwks_redirect = Some("https://evil.example/jwks.json"));
    let err = h.resolver.keys(&h.client_id, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            ResolveError::Fetch {
                what: "client JWKS",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn refuses_bad_documents() {
    let h = harness().await;
    edit(&h, |s| {
        s.metadata["client_id"] = json!("https://atlas.example/other.json")
    });
    assert!(matches!(
        h.resolver.keys(&h.client_id, None).await,
        Err(ResolveError::InvalidMetadata(_))
    ));

    let h = harness().await;
    edit(&h, |s| s.jwks["keys"][0]["d"] = json!("AAAA"));
    assert_eq!(
        h.resolver.keys(&h.client_id, None).await.unwrap_err(),
        ResolveError::InvalidKeys(pap_shared::JwkError::PrivateMember)
    );

    let h = harness().await;
    edit(&h, |s| s.content_type = "text/html");
    assert!(matches!(
        h.resolver.keys(&h.client_id, None).await,
        Err(ResolveError::Fetch { .. })
    ));

    let h = harness().await;
    edit(&h, |s| s.metadata["padding"] = json!("x".repeat(101 * 1024)));
    let err = h.resolver.keys(&h.client_id, None).await.unwrap_err();
    assert_eq!(
        err,
        ResolveError::Fetch {
            what: "client metadata",
            why: "the document is too large".into()
        }
    );
}

#[tokio::test]
async fn remembers_a_failure_for_thirty_seconds() {
    let h = harness().await;
    edit(&h, |s| s.content_type = "text/html");
    assert!(h.resolver.keys(&h.client_id, None).await.is_err());
    edit(&h, |s| s.content_type = "application/json");
    h.clock.set(NOW + 29);
    assert!(h.resolver.keys(&h.client_id, None).await.is_err());
    assert_eq!(h.served.hits("/agent.json"), 1);
    h.clock.set(NOW + 30);
    assert!(h.resolver.keys(&h.client_id, None).await.is_ok());
}

#[tokio::test]
async fn refuses_loopback_and_ip_literals_outside_the_allow_list() {
    // Without the allow-list the same server is out of reach: `localhost` resolves only to
    // loopback addresses, which the policy drops.
    let h = harness_with(false).await;
    let local = ClientId::parse("https://localhost/agent.json").unwrap();
    let err = h.resolver.keys(&local, None).await.unwrap_err();
    assert!(
        matches!(err, ResolveError::Fetch { ref why, .. } if why.contains("public address")),
        "{err:?}"
    );
    let literal = ClientId::parse("https://127.0.0.1/agent.json").unwrap();
    assert_eq!(
        h.resolver.keys(&literal, None).await.unwrap_err(),
        ResolveError::Forbidden("the URL names an IP address")
    );
    assert_eq!(h.served.hits("/agent.json"), 0);
}

#[tokio::test]
async fn refuses_a_server_whose_certificate_is_not_trusted() {
    let h = harness().await;
    let untrusting = HttpClientResolver::new(
        ResolverConfig {
            overrides: [("atlas.example".to_owned(), h.addr)].into(),
            ..ResolverConfig::default()
        },
        h.clock.clone(),
    )
    .unwrap();
    // The TLS handshake fails, so no request reaches the site; with the CA the same call works.
    assert!(matches!(
        untrusting.keys(&h.client_id, None).await,
        Err(ResolveError::Fetch { .. })
    ));
    assert_eq!(h.served.hits("/agent.json"), 0);
    assert!(h.resolver.keys(&h.client_id, None).await.is_ok());
    assert_eq!(h.served.hits("/agent.json"), 1);
}
