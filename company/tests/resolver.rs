//! The HTTPS client resolver against a real TLS server on 127.0.0.1 (rcgen certificates),
//! reached through the test allow-list, as a company reaches an agent's documents.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pap_company::limits::STALE_IF_BUSY_SECONDS;
use pap_company::resolver::{ClientKeys, ClientRegistry, HttpClientResolver, ResolveError, ResolverConfig};
use pap_net::serve::serve_tls;
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
    /// Held for writing by a test, it keeps every answer waiting.
    hold: Arc<tokio::sync::RwLock<()>>,
    /// Told each time a request arrives, before it waits on `hold`.
    arrived: Arc<tokio::sync::Notify>,
}

impl Served {
    fn hits(&self, path: &'static str) -> usize {
        *self.hits.lock().unwrap().get(path).unwrap_or(&0)
    }
}

async fn answer(served: &Served, path: &'static str, host: Option<&str>) -> Response {
    *served.hits.lock().unwrap().entry(path).or_default() += 1;
    served.arrived.notify_one();
    let _held = served.hold.read().await;
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
    // Every name of the certificate serves the same agent, under its own name.
    let body = body
        .to_string()
        .replace("atlas.example", host.unwrap_or("atlas.example"));
    (headers, body).into_response()
}

/// The name the request was sent to: HTTP/2's `:authority`, or HTTP/1.1's `Host`.
fn host(uri: &axum::http::Uri, headers: &HeaderMap) -> Option<String> {
    uri.host().map(str::to_owned).or_else(|| {
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
    })
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

/// Names the test site also answers as, each a distinct agent.
const MANY: usize = 64;

fn many(i: usize) -> String {
    format!("a{i}.many.example")
}

async fn harness_with(overrides: bool) -> Harness {
    harness_configured(overrides, ResolverConfig::default()).await
}

async fn harness_configured(overrides: bool, config: ResolverConfig) -> Harness {
    // A CA and one leaf for the agent's names, as in the interop harness.
    let pki = support::test_pki(&["atlas.example", "localhost", "*.many.example"]);

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
        hold: Arc::default(),
        arrived: Arc::default(),
    };
    let app = Router::new()
        .route(
            "/agent.json",
            get(|State(s): State<Served>, u: axum::http::Uri, h: HeaderMap| async move {
                answer(&s, "/agent.json", host(&u, &h).as_deref()).await
            }),
        )
        .route(
            "/jwks.json",
            get(|State(s): State<Served>, u: axum::http::Uri, h: HeaderMap| async move {
                answer(&s, "/jwks.json", host(&u, &h).as_deref()).await
            }),
        )
        .route(
            "/moved/jwks.json",
            get(|State(s): State<Served>, u: axum::http::Uri, h: HeaderMap| async move {
                answer(&s, "/moved/jwks.json", host(&u, &h).as_deref()).await
            }),
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
        ..config
    };
    if overrides {
        config.overrides.insert("atlas.example".to_owned(), addr);
        config.overrides.extend((0..MANY).map(|i| (many(i), addr)));
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

/// Whether the keys the resolver gives for `kid` hold it.
async fn gives(h: &Harness, kid: &str) -> bool {
    h.resolver.keys(&h.client_id, Some(kid)).await.unwrap().has_kid(kid)
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
    // Before the last fifth of the lifetime, when a use refreshes it ahead of expiry.
    h.clock.set(NOW + 47);
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    assert_eq!((h.served.hits("/agent.json"), h.served.hits("/jwks.json")), (1, 1));
    h.clock.set(NOW + 60);
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    assert_eq!((h.served.hits("/agent.json"), h.served.hits("/jwks.json")), (2, 2));
}

#[tokio::test]
async fn cache_control_sets_the_lifetime_and_no_store_a_floor_of_seconds() {
    let h = harness_configured(
        true,
        ResolverConfig {
            max_cache_lifetime: Duration::from_secs(3_600),
            ..ResolverConfig::default()
        },
    )
    .await;
    edit(&h, |s| s.cache_control = Some("max-age=600"));
    h.resolver.keys(&h.client_id, None).await.unwrap();
    h.clock.set(NOW + 479);
    h.resolver.keys(&h.client_id, None).await.unwrap();
    assert_eq!(h.served.hits("/jwks.json"), 1);

    // Review N1: `no-store` is used for a floor of a few seconds, not fetched per request.
    let h = harness().await;
    edit(&h, |s| s.cache_control = Some("no-store"));
    h.resolver.keys(&h.client_id, None).await.unwrap();
    h.clock.set(NOW + pap_company::limits::NO_STORE_SECONDS - 2);
    h.resolver.keys(&h.client_id, None).await.unwrap();
    assert_eq!(h.served.hits("/jwks.json"), 1);
    h.clock.set(NOW + pap_company::limits::NO_STORE_SECONDS);
    h.resolver.keys(&h.client_id, None).await.unwrap();
    assert_eq!(h.served.hits("/jwks.json"), 2);
}

/// Issue 25: a key the agent removed stops verifying within the cap (5 minutes by default),
/// whatever `max-age` the agent published.
#[tokio::test]
async fn a_removed_key_stops_verifying_within_the_cache_cap() {
    let h = harness().await;
    edit(&h, |s| s.cache_control = Some("max-age=86400"));
    assert!(gives(&h, "key-1").await);
    // The agent retires key-1 for key-2.
    let rotated = SigningKey::generate_es256(&SystemRng, "key-2").unwrap();
    edit(&h, |s| s.jwks = json!({"keys": [rotated.public_key().jwk()]}));
    h.clock.set(NOW + 239);
    assert!(gives(&h, "key-1").await);
    assert_eq!(h.served.hits("/jwks.json"), 1);
    h.clock.set(NOW + 300);
    assert!(!gives(&h, "key-1").await);
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
    assert!(gives(&h, "key-2").await);
    assert_eq!(h.served.hits("/jwks.json"), 2);
    // A kid nobody published: no second refetch within 60 s of the last.
    h.clock.set(NOW + 30);
    assert!(!gives(&h, "key-9").await);
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

#[tokio::test]
async fn concurrent_requests_for_one_client_share_one_fetch() {
    let h = Arc::new(harness().await);
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move { h.resolver.keys(&h.client_id, Some("key-1")).await.is_ok() })
        })
        .collect();
    for caller in callers {
        assert!(caller.await.unwrap());
    }
    assert_eq!((h.served.hits("/agent.json"), h.served.hits("/jwks.json")), (1, 1));
}

/// Issue 25: an agent that rotated its key under load. Every join carrying the new `kid` while
/// the one refetch runs waits for it and gets the new key; none is refused for want of a
/// fetch permit (one permit here: a second fetch would be `Busy`).
#[tokio::test]
async fn callers_of_a_rotated_kid_share_one_refetch() {
    let config = ResolverConfig {
        max_in_flight: 1,
        ..ResolverConfig::default()
    };
    let h = Arc::new(harness_configured(true, config).await);
    h.resolver.keys(&h.client_id, Some("key-1")).await.unwrap();
    let rotated = SigningKey::generate_es256(&SystemRng, "key-2").unwrap();
    edit(&h, |s| {
        s.jwks = json!({"keys": [h.key.public_key().jwk(), rotated.public_key().jwk()]})
    });
    h.clock.set(NOW + 1);
    let held = h.served.hold.write().await;
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move {
                h.resolver
                    .keys(&h.client_id, Some("key-2"))
                    .await
                    .is_ok_and(|keys| keys.has_kid("key-2"))
            })
        })
        .collect();
    h.served.arrived.notified().await;
    drop(held);
    for caller in callers {
        assert!(caller.await.unwrap(), "a caller of the new kid did not get it");
    }
    assert_eq!(h.served.hits("/jwks.json"), 2);
}

#[tokio::test]
async fn fetches_past_the_global_limit_fail_at_once_and_are_not_remembered() {
    let config = ResolverConfig {
        max_in_flight: 1,
        ..ResolverConfig::default()
    };
    let h = Arc::new(harness_configured(true, config).await);
    let held = h.served.hold.write().await;
    let first = {
        let h = h.clone();
        tokio::spawn(async move { h.resolver.keys(&h.client_id, None).await.is_ok() })
    };
    h.served.arrived.notified().await;
    // The one permit is taken: another client's fetch fails at once, with nothing sent.
    let other = ClientId::parse(&format!("https://{}/agent.json", many(0))).unwrap();
    assert_eq!(h.resolver.keys(&other, None).await.unwrap_err(), ResolveError::Busy);
    assert_eq!(h.served.hits("/agent.json"), 1);
    drop(held);
    assert!(first.await.unwrap());
    // Busy was not remembered as the client's failure: it resolves now.
    assert!(h.resolver.keys(&other, None).await.is_ok());
}

#[tokio::test]
async fn the_document_cache_holds_at_most_its_bytes_and_failures_at_most_their_count() {
    // Room for about four agents' documents (each ~1 KiB here).
    let config = ResolverConfig {
        cache_bytes: 4 * 1024,
        ..ResolverConfig::default()
    };
    let h = harness_configured(true, config).await;
    for i in 0..MANY {
        let client = ClientId::parse(&format!("https://{}/agent.json", many(i))).unwrap();
        let resolved = h.resolver.keys(&client, None).await;
        assert!(resolved.is_ok(), "{i}: {resolved:?}");
    }
    let held = h.resolver.held().await;
    assert!(held.bytes <= 4 * 1024, "{held:?}");
    assert!((1..MANY as u64 / 4).contains(&held.clients), "{held:?}");
    assert_eq!(held.failures, 0);
    // Failed clients are remembered up to FAILURE_CAPACITY; past it the least used go.
    // (IP literals: refused before any network, so the loop costs no DNS.)
    for i in 0..pap_company::limits::FAILURE_CAPACITY + 100 {
        let client = ClientId::parse(&format!("https://10.0.{}.{}/agent.json", i / 256, i % 256)).unwrap();
        assert!(h.resolver.keys(&client, None).await.is_err());
    }
    let held = h.resolver.held().await;
    assert!(held.failures <= pap_company::limits::FAILURE_CAPACITY, "{held:?}");
}

/// Waits (at most 10 s) until the site has been asked for `path` `count` times.
async fn arrivals(h: &Harness, path: &'static str, count: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while h.served.hits(path) < count {
            h.served.arrived.notified().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{count} requests for {path} did not arrive"));
}

fn many_client(i: usize) -> ClientId {
    ClientId::parse(&format!("https://{}/agent.json", many(i))).unwrap()
}

/// Review N1: strangers' first contacts hold at most their share of the fetch slots; an agent
/// the resolver knows, whose documents expired, is fetched beside them.
#[tokio::test]
async fn first_contacts_hold_only_their_share_and_a_known_agent_is_fetched_beside_them() {
    let config = ResolverConfig {
        max_in_flight: 4,
        max_first_contacts_in_flight: 2,
        max_in_flight_per_domain: 8,
        ..ResolverConfig::default()
    };
    let h = Arc::new(harness_configured(true, config).await);
    h.resolver.keys(&h.client_id, None).await.unwrap();
    // A person let it in here (a signed-in join, tokens): it is known.
    h.resolver.vouch(&h.client_id, "acct_ada");
    h.clock.set(NOW + 60 + STALE_IF_BUSY_SECONDS);
    let held = h.served.hold.write().await;
    let strangers: Vec<_> = (0..2)
        .map(|i| {
            let h = h.clone();
            tokio::spawn(async move { h.resolver.keys(&many_client(i), None).await.is_ok() })
        })
        .collect();
    arrivals(&h, "/agent.json", 3).await;
    // Their share is held: a third stranger is refused at once, with nothing sent.
    assert_eq!(
        h.resolver.keys(&many_client(2), None).await.unwrap_err(),
        ResolveError::Busy
    );
    assert_eq!(h.served.hits("/agent.json"), 3);
    // The known agent's fetch goes out beside them.
    let known = {
        let h = h.clone();
        tokio::spawn(async move { h.resolver.keys(&h.client_id, None).await.is_ok() })
    };
    arrivals(&h, "/agent.json", 4).await;
    drop(held);
    assert!(known.await.unwrap());
    for stranger in strangers {
        assert!(stranger.await.unwrap());
    }
}

/// Review N1: every name under one registrable domain shares that domain's slots (a wildcard
/// certificate names any number of clients); another domain's first contact goes beside them.
#[tokio::test]
async fn one_registrable_domain_holds_at_most_its_share_of_fetches() {
    let h = Arc::new(harness().await);
    let held = h.served.hold.write().await;
    let same_domain: Vec<_> = (0..2)
        .map(|i| {
            let h = h.clone();
            tokio::spawn(async move { h.resolver.keys(&many_client(i), None).await.is_ok() })
        })
        .collect();
    arrivals(&h, "/agent.json", 2).await;
    assert_eq!(
        h.resolver.keys(&many_client(2), None).await.unwrap_err(),
        ResolveError::Busy,
        "a third name under many.example"
    );
    let other_domain = {
        let h = h.clone();
        tokio::spawn(async move { h.resolver.keys(&h.client_id, None).await.is_ok() })
    };
    arrivals(&h, "/agent.json", 3).await;
    drop(held);
    assert!(other_domain.await.unwrap());
    for fetch in same_domain {
        assert!(fetch.await.unwrap());
    }
}

/// Review N1: when no fetch slot is free, an agent whose documents just expired keeps its keys
/// for up to STALE_IF_BUSY_SECONDS more, rather than be refused.
#[tokio::test]
async fn expired_keys_are_used_while_no_fetch_slot_is_free_for_a_bounded_time() {
    let config = ResolverConfig {
        max_in_flight: 1,
        ..ResolverConfig::default()
    };
    let h = Arc::new(harness_configured(true, config).await);
    h.resolver.keys(&h.client_id, None).await.unwrap();
    let held = h.served.hold.write().await;
    let stranger = {
        let h = h.clone();
        tokio::spawn(async move { h.resolver.keys(&many_client(0), None).await.is_ok() })
    };
    arrivals(&h, "/agent.json", 2).await;
    h.clock.set(NOW + 60);
    assert!(
        h.resolver
            .keys(&h.client_id, Some("key-1"))
            .await
            .unwrap()
            .has_kid("key-1")
    );
    h.clock.set(NOW + 60 + STALE_IF_BUSY_SECONDS - 1);
    assert!(
        h.resolver.keys(&h.client_id, None).await.is_ok(),
        "still within the bound"
    );
    h.clock.set(NOW + 60 + STALE_IF_BUSY_SECONDS);
    assert_eq!(
        h.resolver.keys(&h.client_id, None).await.unwrap_err(),
        ResolveError::Busy,
        "past the bound"
    );
    drop(held);
    assert!(stranger.await.unwrap());
    assert!(
        h.resolver.keys(&h.client_id, None).await.is_ok(),
        "fetched again once free"
    );
}

/// Review N1: a client's documents get one deadline, however the site spends it (here it
/// accepts and stays silent, with the read timeout set longer than the deadline).
#[tokio::test]
async fn a_client_s_documents_are_fetched_within_one_deadline() {
    let config = ResolverConfig {
        timeout: Duration::from_secs(1),
        read_timeout: Duration::from_secs(30),
        ..ResolverConfig::default()
    };
    let h = harness_configured(true, config).await;
    let _held = h.served.hold.write().await;
    let started = std::time::Instant::now();
    let failed = h.resolver.keys(&h.client_id, None).await.unwrap_err();
    assert!(
        matches!(&failed, ResolveError::Fetch { why, .. } if why == "timed out"),
        "{failed:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "took {took:?}"
    );
}

/// Review S3: answering a fetch quickly is not being known. A client resolved once but never
/// vouched for (no person let it in) still takes a first contact's slot when its documents
/// expire, so strangers cannot make themselves known and hold the slots kept for known agents.
#[tokio::test]
async fn a_fast_answer_alone_makes_no_client_known() {
    let config = ResolverConfig {
        max_in_flight: 4,
        max_first_contacts_in_flight: 1,
        max_in_flight_per_domain: 8,
        ..ResolverConfig::default()
    };
    let h = Arc::new(harness_configured(true, config).await);
    // Two strangers resolve at once, fast.
    h.resolver.keys(&many_client(0), None).await.unwrap();
    h.resolver.keys(&many_client(1), None).await.unwrap();
    h.clock.set(NOW + 60 + STALE_IF_BUSY_SECONDS);
    let held = h.served.hold.write().await;
    // One holds the one first-contact slot with a slow refetch...
    let slow = {
        let h = h.clone();
        tokio::spawn(async move { h.resolver.keys(&many_client(0), None).await.is_ok() })
    };
    arrivals(&h, "/agent.json", 3).await;
    // ...and the other, though it answered fast before, is still a first contact: refused.
    assert_eq!(
        h.resolver.keys(&many_client(1), None).await.unwrap_err(),
        ResolveError::Busy
    );
    // An agent no one vouched for is a first contact too; vouched for, it is fetched beside.
    assert_eq!(
        h.resolver.keys(&h.client_id, None).await.unwrap_err(),
        ResolveError::Busy
    );
    h.resolver.vouch(&h.client_id, "acct_ada");
    let known = {
        let h = h.clone();
        tokio::spawn(async move { h.resolver.keys(&h.client_id, None).await.is_ok() })
    };
    arrivals(&h, "/agent.json", 4).await;
    drop(held);
    assert!(known.await.unwrap());
    assert!(slow.await.unwrap());
}

/// Review S3: an agent in use is refreshed in the background in the last fifth of its
/// documents' lifetime, while its cached keys keep serving (the call that starts it does not
/// wait, even on a stalled site); a caller that finds the entry expired takes that refresh's
/// outcome rather than fetch again.
#[tokio::test]
async fn an_agent_in_use_is_refreshed_ahead_of_expiry_and_never_waits_for_it() {
    let h = harness().await;
    h.resolver.keys(&h.client_id, None).await.unwrap();
    h.resolver.vouch(&h.client_id, "acct_ada");
    let held = h.served.hold.write().await;
    h.clock.set(NOW + 48);
    assert!(
        gives(&h, "key-1").await,
        "served from the cache at once, the site stalled"
    );
    arrivals(&h, "/agent.json", 2).await;
    h.clock.set(NOW + 60);
    let expired_caller = {
        let (resolver, client_id) = (h.resolver.clone(), h.client_id.clone());
        tokio::spawn(async move { resolver.keys(&client_id, Some("key-1")).await.is_ok() })
    };
    drop(held);
    assert!(expired_caller.await.unwrap());
    assert_eq!(
        (h.served.hits("/agent.json"), h.served.hits("/jwks.json")),
        (2, 2),
        "one refresh, shared"
    );
    // Refreshed at NOW + 48: fresh until NOW + 108, and not due again before NOW + 96.
    h.clock.set(NOW + 95);
    assert!(gives(&h, "key-1").await);
    assert_eq!(h.served.hits("/agent.json"), 2);
}
