//! Every refusal of `Verifier::verify`, each with its exact variant (PAP §5, company checks).

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::sync::Arc;

use pap_company::resolver::StaticClientKeys;
use pap_company::verify::{Verifier, VerifierParts, VerifyError};
use pap_shared::{BROWSER_ASSERTION_TYP, ClaimsError, CompactJws, HttpsUrl, JoseError, SigningKey, SystemRng};
use serde_json::json;
use support::{Agent, NOW, World};

async fn verify(world: &World, assertion: &CompactJws) -> Result<(), VerifyError> {
    world.state.verifier().verify(assertion).await.map(|_| ())
}

#[tokio::test]
async fn accepts_a_valid_assertion_and_returns_its_session() {
    let world = World::new();
    let verified = world.state.verifier().verify(&world.assertion()).await.unwrap();
    assert_eq!(verified.session_id(), &world.session);
    assert_eq!(verified.user(), &world.user);
    assert_eq!(verified.return_to().as_str(), "https://shop.example/operations/op_1");
}

#[tokio::test]
async fn refuses_malformed_compact_serialisations() {
    let world = World::new();
    for text in ["", "abc", "a.b", "a.b.c.d", "!!.e30.sig"] {
        let err = verify(&world, &CompactJws::new(text.to_owned())).await.unwrap_err();
        assert_eq!(err, VerifyError::Malformed(JoseError::Malformed), "{text:?}");
    }
}

#[tokio::test]
async fn refuses_other_algorithms() {
    let world = World::new();
    let valid = world.assertion();
    let rest = valid.secret().split_once('.').unwrap().1;
    for alg in ["none", "HS256", "ES384", "es256", "PS256"] {
        let header = base64_json(&json!({"alg": alg, "typ": BROWSER_ASSERTION_TYP, "kid": "key-1"}));
        let err = verify(&world, &CompactJws::new(format!("{header}.{rest}")))
            .await
            .unwrap_err();
        assert_eq!(err, VerifyError::UnsupportedAlgorithm, "{alg}");
    }
}

#[tokio::test]
async fn refuses_another_type_including_a_session_assertion() {
    let world = World::new();
    for typ in ["JWT", "POPPY-BROWSER+JWT", "dpop+jwt", "poppy-browser+jwt "] {
        let assertion = world.agent.sign(typ, &world.claims());
        assert_eq!(
            verify(&world, &assertion).await.unwrap_err(),
            VerifyError::WrongType,
            "{typ}"
        );
    }
}

#[tokio::test]
async fn refuses_missing_and_malformed_claims() {
    let world = World::new();
    for name in ["iss", "sub", "aud", "session_id", "return_to", "iat", "exp", "jti"] {
        let mut claims = world.claims();
        claims.as_object_mut().unwrap().remove(name);
        let assertion = world.agent.sign(BROWSER_ASSERTION_TYP, &claims);
        assert_eq!(
            verify(&world, &assertion).await.unwrap_err(),
            VerifyError::Claims(ClaimsError::Missing(name))
        );
    }
    let string_exp = world.with("exp", json!((NOW + 55).to_string()));
    assert_eq!(
        verify(&world, &string_exp).await.unwrap_err(),
        VerifyError::Claims(ClaimsError::Invalid("exp"))
    );
    let float_iat = world.with("iat", json!(NOW as f64 - 5.0));
    assert_eq!(
        verify(&world, &float_iat).await.unwrap_err(),
        VerifyError::Claims(ClaimsError::Invalid("iat"))
    );
    let short_jti = world.with("jti", json!("A".repeat(21)));
    assert_eq!(
        verify(&world, &short_jti).await.unwrap_err(),
        VerifyError::Claims(ClaimsError::Invalid("jti"))
    );
    let array_aud = world.with("aud", json!([support::ENDPOINT]));
    assert_eq!(
        verify(&world, &array_aud).await.unwrap_err(),
        VerifyError::Claims(ClaimsError::Invalid("aud"))
    );
}

#[tokio::test]
async fn refuses_a_lifetime_over_sixty_seconds() {
    let world = World::new();
    let mut claims = world.claims();
    claims["iat"] = json!(NOW - 5);
    claims["exp"] = json!(NOW - 5 + 61);
    let assertion = world.agent.sign(BROWSER_ASSERTION_TYP, &claims);
    assert_eq!(
        verify(&world, &assertion).await.unwrap_err(),
        VerifyError::Claims(ClaimsError::Lifetime)
    );
    claims["exp"] = json!(NOW - 5 + 600);
    let assertion = world.agent.sign(BROWSER_ASSERTION_TYP, &claims);
    assert_eq!(
        verify(&world, &assertion).await.unwrap_err(),
        VerifyError::Claims(ClaimsError::Lifetime)
    );
}

#[tokio::test]
async fn refuses_another_audience_exactly() {
    let world = World::new();
    for aud in [
        "https://shop.example/poppy/browser-session/",
        "https://shop.example/elsewhere",
        "https://shop.example",
        "https://SHOP.example/poppy/browser-session",
        "https://shop.example:443/poppy/browser-session",
    ] {
        let assertion = world.with("aud", json!(aud));
        assert_eq!(
            verify(&world, &assertion).await.unwrap_err(),
            VerifyError::WrongAudience,
            "{aud}"
        );
    }
}

#[tokio::test]
async fn expiry_is_exclusive_and_checked_against_the_injected_clock() {
    let world = World::new();
    let mut claims = world.claims();
    claims["iat"] = json!(NOW - 30);
    claims["exp"] = json!(NOW + 10);
    let sign = |c: &serde_json::Value| world.agent.sign(BROWSER_ASSERTION_TYP, c);
    // exp - 1: accepted.
    world.clock.set(NOW + 9);
    assert_eq!(verify(&world, &sign(&claims)).await, Ok(()));
    // exp: refused (exp must be strictly after now).
    world.clock.set(NOW + 10);
    claims["jti"] = json!("BBBBBBBBBBBBBBBBBBBBBB");
    assert_eq!(verify(&world, &sign(&claims)).await.unwrap_err(), VerifyError::Expired);
    // exp + 1: refused, no leeway.
    world.clock.set(NOW + 11);
    assert_eq!(verify(&world, &sign(&claims)).await.unwrap_err(), VerifyError::Expired);
}

#[tokio::test]
async fn iat_may_be_at_most_the_documented_skew_ahead() {
    let world = World::new();
    let skew = pap_company::verify::IAT_SKEW_SECONDS;
    let at = |iat: i64| {
        let mut claims = world.claims();
        claims["iat"] = json!(iat);
        claims["exp"] = json!(iat + 60);
        world.agent.sign(BROWSER_ASSERTION_TYP, &claims)
    };
    assert_eq!(verify(&world, &at(NOW + skew)).await, Ok(()));
    assert_eq!(
        verify(&world, &at(NOW + skew + 1)).await.unwrap_err(),
        VerifyError::IssuedInFuture
    );
}

#[tokio::test]
async fn refuses_a_foreign_return_to() {
    let world = World::new();
    for url in [
        "https://evil.example/",
        "https://evilshop.example/",
        "https://shop.example.evil.com/",
        "https://127.0.0.1/",
    ] {
        let assertion = world.with("return_to", json!(url));
        assert_eq!(
            verify(&world, &assertion).await.unwrap_err(),
            VerifyError::ForeignReturnTo,
            "{url}"
        );
    }
    for url in ["https://shop.example@evil.com/", "http://shop.example/"] {
        let assertion = world.with("return_to", json!(url));
        assert_eq!(
            verify(&world, &assertion).await.unwrap_err(),
            VerifyError::Claims(ClaimsError::Invalid("return_to"))
        );
    }
    for url in [
        "https://SHOP.EXAMPLE./x",
        "https://www.shop.example/x",
        "https://shop.example:8443/x",
    ] {
        assert_eq!(
            verify(&world, &world.with("return_to", json!(url))).await,
            Ok(()),
            "{url}"
        );
    }
}

#[tokio::test]
async fn refuses_an_unknown_client() {
    let world = World::new();
    let stranger = pap_shared::ClientId::parse("https://stranger.example/agent.json").unwrap();
    // Without a live Session of its own, a stranger is refused before any key is looked up (H1).
    let assertion = world.with("iss", json!(stranger.as_str()));
    assert_eq!(
        verify(&world, &assertion).await.unwrap_err(),
        VerifyError::SessionOwnerMismatch
    );
    // With one, its keys are looked up, and it has none.
    let session = world
        .sessions
        .start(stranger.clone(), world.user.clone(), 3_600)
        .unwrap();
    let mut claims = world.claims();
    claims["iss"] = json!(stranger.as_str());
    claims["session_id"] = json!(session.as_str());
    let assertion = world.agent.sign(BROWSER_ASSERTION_TYP, &claims);
    assert_eq!(
        verify(&world, &assertion).await.unwrap_err(),
        VerifyError::Client(pap_company::resolver::ResolveError::UnknownClient)
    );
}

#[tokio::test]
async fn refuses_a_signature_by_another_key_and_an_unknown_kid() {
    let world = World::new();
    let stranger = Agent::new(support::CLIENT_ID);
    let forged = stranger.sign(BROWSER_ASSERTION_TYP, &world.claims());
    assert_eq!(verify(&world, &forged).await.unwrap_err(), VerifyError::BadSignature);
    let other_kid = SigningKey::generate_es256(&SystemRng, "key-2").unwrap();
    let forged = other_kid.sign(BROWSER_ASSERTION_TYP, &world.claims()).unwrap();
    assert_eq!(verify(&world, &forged).await.unwrap_err(), VerifyError::NoMatchingKey);
}

/// Keys as a caching resolver would hold them after the agent rotated its key under the same
/// `kid`: the cached set first, the published one only when asked again after a failure.
#[derive(Debug)]
struct Rotated {
    cached: Arc<pap_shared::Jwks>,
    published: Option<Arc<pap_shared::Jwks>>,
    refetches: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl pap_company::resolver::ClientKeys for Rotated {
    async fn keys(
        &self,
        _client_id: &pap_shared::ClientId,
        _kid: Option<&str>,
    ) -> Result<Arc<pap_shared::Jwks>, pap_company::resolver::ResolveError> {
        Ok(self.cached.clone())
    }

    async fn keys_after_failure(
        &self,
        _client_id: &pap_shared::ClientId,
        _kid: Option<&str>,
    ) -> Result<Option<Arc<pap_shared::Jwks>>, pap_company::resolver::ResolveError> {
        self.refetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.published.clone())
    }
}

#[tokio::test]
async fn a_key_rotated_under_the_same_kid_verifies_after_one_refetch() {
    let world = World::new();
    let rotated = SigningKey::generate_es256(&SystemRng, "key-1").unwrap();
    let assertion = rotated.sign(BROWSER_ASSERTION_TYP, &world.claims()).unwrap();
    let verifier_with = |published: Option<Arc<pap_shared::Jwks>>| {
        let keys = Arc::new(Rotated {
            cached: Arc::new(world.agent.jwks()),
            published,
            refetches: std::sync::atomic::AtomicUsize::new(0),
        });
        let verifier = Verifier::new(VerifierParts {
            endpoint: HttpsUrl::parse(support::ENDPOINT).unwrap(),
            domain: pap_shared::CompanyDomain::try_from("shop.example").unwrap(),
            clock: world.clock.clone(),
            clients: keys.clone(),
            sessions: Arc::new(world.sessions.clone()),
            joins: world.joins(),
        });
        (verifier, keys)
    };
    // The resolver refetched and found the new key: verified.
    let published = pap_shared::Jwks::from_keys(vec![rotated.public_key().clone()]);
    let (verifier, keys) = verifier_with(Some(Arc::new(published)));
    assert!(verifier.verify(&assertion).await.is_ok());
    assert_eq!(keys.refetches.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The resolver did not refetch (rate limit): still a bad signature, nothing consumed.
    let fresh = rotated.sign(BROWSER_ASSERTION_TYP, &world.claims()).unwrap();
    let (verifier, _) = verifier_with(None);
    assert_eq!(verifier.verify(&fresh).await.unwrap_err(), VerifyError::BadSignature);
}

#[tokio::test]
async fn refuses_an_rs256_assertion_when_only_an_ec_key_is_published_and_accepts_rs256_keys() {
    let world = World::new();
    let rsa = SigningKey::generate_rs256(&SystemRng, 2048, "key-1").unwrap();
    let assertion = rsa.sign(BROWSER_ASSERTION_TYP, &world.claims()).unwrap();
    assert_eq!(
        verify(&world, &assertion).await.unwrap_err(),
        VerifyError::NoMatchingKey
    );

    // The same company with the agent's RSA key published accepts it.
    let clients = StaticClientKeys::new().with_client(
        world.agent.client_id.clone(),
        pap_shared::Jwks::from_keys(vec![rsa.public_key().clone()]),
    );
    let verifier = Verifier::new(VerifierParts {
        endpoint: HttpsUrl::parse(support::ENDPOINT).unwrap(),
        domain: pap_shared::CompanyDomain::try_from("shop.example").unwrap(),
        clock: world.clock.clone(),
        clients: Arc::new(clients),
        sessions: Arc::new(world.sessions.clone()),
        joins: world.joins(),
    });
    assert!(verifier.verify(&assertion).await.is_ok());
}

#[tokio::test]
async fn refuses_a_session_that_is_not_live() {
    let world = World::new();
    let unknown = world.with("session_id", json!("ses_unknown"));
    assert_eq!(verify(&world, &unknown).await.unwrap_err(), VerifyError::SessionNotLive);
    world.sessions.end(&world.session);
    assert_eq!(
        verify(&world, &world.assertion()).await.unwrap_err(),
        VerifyError::SessionNotLive
    );
}

#[tokio::test]
async fn refuses_an_expired_session() {
    let world = World::new();
    let expired = world
        .sessions
        .start(world.agent.client_id.clone(), world.user.clone(), 1)
        .unwrap();
    world.clock.set(NOW + 1);
    let assertion = world.with("session_id", json!(expired.as_str()));
    assert_eq!(
        verify(&world, &assertion).await.unwrap_err(),
        VerifyError::SessionNotLive
    );
}

#[tokio::test]
async fn accepts_a_signed_out_session() {
    let world = World::new();
    world.sessions.sign_out(&world.session);
    assert_eq!(verify(&world, &world.assertion()).await, Ok(()));
}

#[tokio::test]
async fn refuses_another_users_or_clients_session() {
    let world = World::new();
    let other_user = world.with("sub", json!("usr_someone_else"));
    assert_eq!(
        verify(&world, &other_user).await.unwrap_err(),
        VerifyError::SessionOwnerMismatch
    );
    let other = world
        .sessions
        .start(
            pap_shared::ClientId::parse("https://other.example/agent.json").unwrap(),
            world.user.clone(),
            3_600,
        )
        .unwrap();
    let other_client = world.with("session_id", json!(other.as_str()));
    assert_eq!(
        verify(&world, &other_client).await.unwrap_err(),
        VerifyError::SessionOwnerMismatch
    );
}

#[tokio::test]
async fn refuses_a_replay_and_does_not_consume_refused_assertions() {
    let world = World::new();
    // Refused for its Session: the jti is not consumed, so the same jti can still be used once
    // the Session problem is gone (here: a fresh assertion with the same jti and a good Session).
    let mut claims = world.claims();
    claims["session_id"] = json!("ses_unknown");
    let refused = world.agent.sign(BROWSER_ASSERTION_TYP, &claims);
    assert_eq!(verify(&world, &refused).await.unwrap_err(), VerifyError::SessionNotLive);
    claims["session_id"] = json!(world.session.as_str());
    let good = world.agent.sign(BROWSER_ASSERTION_TYP, &claims);
    assert_eq!(verify(&world, &good).await, Ok(()));
    assert_eq!(verify(&world, &good).await.unwrap_err(), VerifyError::Replayed);
}

fn base64_json(value: &serde_json::Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap())
}

/// Review S3: the verifier vouches for a client to its resolver only when a person signed it in
/// here (a join to a signed-in Session), never for a join to a signed-out one, which the
/// client's own signature can start.
#[tokio::test]
async fn a_join_to_a_signed_in_session_vouches_for_its_client_and_a_signed_out_one_does_not() {
    #[derive(Debug)]
    struct Vouches {
        keys: StaticClientKeys,
        vouched: std::sync::Mutex<Vec<String>>,
    }
    #[async_trait::async_trait]
    impl pap_company::resolver::ClientKeys for Vouches {
        async fn keys(
            &self,
            client_id: &pap_shared::ClientId,
            kid: Option<&str>,
        ) -> Result<Arc<pap_shared::Jwks>, pap_company::resolver::ResolveError> {
            self.keys.keys(client_id, kid).await
        }
        fn vouch(&self, client_id: &pap_shared::ClientId, _account: &str) {
            self.vouched.lock().unwrap().push(client_id.as_str().to_owned());
        }
    }
    let world = World::new();
    let clients = Arc::new(Vouches {
        keys: StaticClientKeys::new().with_client(world.agent.client_id.clone(), world.agent.jwks()),
        vouched: std::sync::Mutex::default(),
    });
    let verifier = Verifier::new(VerifierParts {
        endpoint: HttpsUrl::parse(support::ENDPOINT).unwrap(),
        domain: pap_shared::CompanyDomain::try_from("shop.example").unwrap(),
        clock: world.clock.clone(),
        clients: clients.clone(),
        sessions: Arc::new(world.sessions.clone()),
        joins: world.joins(),
    });
    world.sessions.sign_out(&world.session);
    verifier.verify(&world.assertion()).await.unwrap();
    assert!(
        clients.vouched.lock().unwrap().is_empty(),
        "signed out: no one let it in"
    );
    world
        .sessions
        .sign_in(&world.session, "ada", vec!["orders:read".into()]);
    verifier.verify(&world.assertion()).await.unwrap();
    assert_eq!(*clients.vouched.lock().unwrap(), [world.agent.client_id.as_str()]);
}
