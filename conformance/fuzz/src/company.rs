//! The company's parsers of what strangers send: the browser-session form and the assertion in
//! it, `return_to`, DPoP proofs and client assertions on the token endpoint, and the agent's
//! client metadata and JWKS its resolver fetches.

use arbitrary::{Arbitrary, Unstructured};
use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{Request, StatusCode, header};
use pap_company::resolver::ClientMetadata;
use pap_company::route::BROWSER_SESSION_PATH;
use pap_shared::{
    BROWSER_ASSERTION_TYP, BrowserAssertionClaims, CompactJws, DPOP_IAT_WINDOW, DPOP_TYP, DpopRequest, HttpsUrl,
    JWT_ASSERTION_SKEW, Jwks, JwtAssertionClaims, MAX_BROWSER_ASSERTION_LIFETIME, MAX_JWKS_KEYS,
    MAX_JWT_ASSERTION_LIFETIME, UnixTime, UnverifiedJws, access_token_hash, verify_dpop_proof,
};
use serde_json::{Map, Value, json};
use tower::ServiceExt as _;

use crate::fixture::{self, CLIENT_ID, ENDPOINT, NOW, USER};

/// `POST /poppy/browser-session` with the bytes as the form body, through the company's router:
/// a 303 sets the cookie and sends the browser to a `return_to` on the company's domain, and
/// consumes the assertion's `jti`; anything else sets no cookie and changes no store.
pub fn browser_session_form(data: &[u8]) {
    let company = fixture::company();
    let fresh = company.fresh();
    let before = company.stores(&fresh);
    let response = post_form(&fresh, data);
    let sets_cookie = response.headers().contains_key(header::SET_COOKIE);
    let after = company.stores(&fresh);
    if response.status() == StatusCode::SEE_OTHER {
        assert!(sets_cookie, "a join without a cookie");
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let target = HttpsUrl::parse(location).unwrap_or_else(|e| panic!("a join sent the browser off https: {e}"));
        assert!(
            target.is_on(&fixture::domain()),
            "a join sent the browser off the company's domain"
        );
        assert_eq!(
            after.replay_marks,
            before.replay_marks + 1,
            "a join did not consume its jti"
        );
    } else {
        assert!(response.status().is_client_error() || response.status().is_server_error());
        assert!(!sets_cookie, "a refusal set a cookie");
        assert_eq!(after, before, "a refused join changed a store");
    }
}

/// `POST /poppy/browser-session` with `body` as a form, through the route.
fn post_form(fresh: &fixture::Fresh, body: &[u8]) -> http::Response<Body> {
    let request = Request::post(BROWSER_SESSION_PATH)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body.to_vec()))
        .unwrap_or_else(|e| panic!("a request: {e}"));
    match fixture::company()
        .runtime
        .block_on(fresh.router.clone().oneshot(request))
    {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// A value the fuzzer either leaves as an honest agent would send it or replaces.
#[derive(Debug, Arbitrary)]
enum Pick<T> {
    Good,
    Other(T),
}

impl Pick<String> {
    fn or(&self, good: &str) -> Value {
        match self {
            Self::Good => Value::String(good.to_owned()),
            Self::Other(text) => Value::String(text.clone()),
        }
    }
}

/// A time claim: near now, any integer, a float, or not a number at all.
#[derive(Debug, Arbitrary)]
enum Time {
    FromNow(i16),
    Exact(i64),
    Float(f64),
    Text(String),
}

impl Time {
    fn value(&self) -> Value {
        match self {
            Self::FromNow(offset) => json!(NOW + i64::from(*offset)),
            Self::Exact(secs) => json!(secs),
            Self::Float(secs) => serde_json::Number::from_f64(*secs).map_or(Value::Null, Value::Number),
            Self::Text(text) => Value::String(text.clone()),
        }
    }
}

/// A `return_to`: the honest one, a path on the company, another host, or any text.
#[derive(Debug, Arbitrary)]
enum ReturnTo {
    Good,
    Path(String),
    Host(String),
    Text(String),
}

impl ReturnTo {
    fn value(&self) -> Value {
        Value::String(match self {
            Self::Good => "https://shop.example/operations/op_1".to_owned(),
            Self::Path(path) => format!("https://shop.example/{path}"),
            Self::Host(host) => format!("https://{host}/"),
            Self::Text(text) => text.clone(),
        })
    }
}

/// The claims and header of a browser assertion, each chosen by the fuzzer and then signed
/// with the agent's key: the fuzzer explores the checks behind the signature.
#[derive(Debug, Arbitrary)]
struct AssertionInput {
    typ: Pick<String>,
    kid: Option<Pick<String>>,
    iss: Pick<String>,
    sub: Pick<String>,
    aud: Pick<String>,
    session_id: Pick<String>,
    return_to: ReturnTo,
    iat: Time,
    exp: Time,
    jti: Pick<String>,
    left_out: Option<u8>,
    extra: Option<(String, String)>,
}

/// A browser assertion built from structured input and signed with the agent's real key, then
/// verified: a verified assertion's claims are exactly what was signed and pass every rule of
/// PAP §5 (audience, lifetime, `return_to` on the domain, the live Session's owner), and it
/// consumed its `jti`; a refused one changes no store.
pub fn browser_assertion(data: &[u8]) {
    if let Ok(input) = AssertionInput::arbitrary_take_rest(Unstructured::new(data)) {
        input.check();
    }
}

impl AssertionInput {
    /// Signs, verifies and checks the properties; whether the assertion was verified.
    fn check(&self) -> bool {
        let company = fixture::company();
        let mut claims = Map::new();
        claims.insert("iss".into(), self.iss.or(CLIENT_ID));
        claims.insert("sub".into(), self.sub.or(USER));
        claims.insert("aud".into(), self.aud.or(ENDPOINT));
        claims.insert("session_id".into(), self.session_id.or(company.session.as_str()));
        claims.insert("return_to".into(), self.return_to.value());
        claims.insert("iat".into(), self.iat.value());
        claims.insert("exp".into(), self.exp.value());
        claims.insert("jti".into(), self.jti.or("AAECAwQFBgcICQoLDA0ODw"));
        if let Some(left_out) = self.left_out {
            let names: Vec<String> = claims.keys().cloned().collect();
            claims.remove(&names[usize::from(left_out) % names.len()]);
        }
        if let Some((name, value)) = &self.extra {
            claims
                .entry(name.clone())
                .or_insert_with(|| Value::String(value.clone()));
        }
        let mut header = json!({ "alg": "ES256", "typ": self.typ.or(BROWSER_ASSERTION_TYP) });
        if let Some(kid) = &self.kid {
            header["kid"] = kid.or("key-1");
        }
        let Ok(assertion) = fixture::agent_key().sign_with_header(&header, &claims) else {
            return false;
        };
        let fresh = company.fresh();
        let before = company.stores(&fresh);
        let verified = company.runtime.block_on(fresh.verifier.verify(&assertion));
        let after = company.stores(&fresh);
        let Ok(verified) = verified else {
            assert_eq!(after, before, "a refused assertion changed a store");
            return false;
        };
        let signed = |name: &str| claims.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        assert_eq!(verified.client_id().as_str(), signed("iss"));
        assert_eq!(verified.user().as_str(), signed("sub"));
        assert_eq!(verified.session_id().as_str(), signed("session_id"));
        assert_eq!(verified.return_to().as_str(), signed("return_to"));
        assert_eq!(signed("aud"), ENDPOINT, "verified with another audience");
        assert_eq!(signed("iss"), CLIENT_ID, "verified for another client");
        assert_eq!(
            signed("session_id"),
            company.session.as_str(),
            "verified for another Session"
        );
        assert!(
            verified.return_to().is_on(&fixture::domain()),
            "verified a foreign return_to"
        );
        let time = |name: &str| claims.get(name).and_then(Value::as_f64).unwrap_or(f64::NAN);
        let (iat, exp) = (time("iat"), time("exp"));
        assert!(exp > NOW as f64, "verified an expired assertion");
        let lifetime = exp - iat;
        assert!(
            lifetime > 0.0 && lifetime <= MAX_BROWSER_ASSERTION_LIFETIME as f64,
            "verified a lifetime of {lifetime}"
        );
        assert_eq!(
            after.replay_marks,
            before.replay_marks + 1,
            "a verified assertion did not consume its jti"
        );
        true
    }
}

/// A compact JWS as any verifier first splits it: what parses has exactly three non-empty
/// segments, and its payload is the second segment's bytes.
pub fn compact_jws(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(jws) = UnverifiedJws::parse(text) else {
        return;
    };
    let segments: Vec<&str> = text.split('.').collect();
    assert_eq!(segments.len(), 3, "a JWS of {} segments parsed", segments.len());
    assert!(
        segments.iter().all(|s| !s.is_empty()),
        "a JWS with an empty segment parsed"
    );
    let payload = URL_SAFE_NO_PAD.decode(segments[1]).unwrap_or_default();
    assert_eq!(
        jws.payload(),
        payload.as_slice(),
        "the payload is not the second segment"
    );
}

/// A browser assertion's claims (the payload, after the signature): what parses writes out and
/// parses back the same, lives `0 < exp - iat <= 60` seconds and returns to https.
pub fn browser_claims(data: &[u8]) {
    let Ok(claims) = BrowserAssertionClaims::from_payload(data) else {
        return;
    };
    let written = serde_json::to_vec(&claims).unwrap_or_default();
    let again =
        BrowserAssertionClaims::from_payload(&written).unwrap_or_else(|e| panic!("written claims do not parse: {e}"));
    assert_eq!(again, claims, "claims changed on a write and a read");
    let lifetime = claims.exp().since(claims.iat());
    assert!(
        (1..=MAX_BROWSER_ASSERTION_LIFETIME).contains(&lifetime),
        "a lifetime of {lifetime}"
    );
    assert_eq!(claims.return_to().url().scheme(), "https");
}

/// A `return_to` (any URL text): one the company accepts is https, carries no user information,
/// and names a host on the company's domain, not an address.
pub fn return_to(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = HttpsUrl::parse(text) else {
        return;
    };
    assert_eq!(url.url().scheme(), "https");
    assert!(
        url.url().username().is_empty() && url.url().password().is_none(),
        "user information accepted"
    );
    if url.is_on(&fixture::domain()) {
        let host = url
            .domain()
            .unwrap_or_else(|| panic!("on the domain without a host name"));
        assert!(
            host == "shop.example" || host.ends_with(".shop.example"),
            "{host} taken for the company's"
        );
        assert_eq!(url.url().host_str().map(|h| h.trim_end_matches('.')), Some(host));
    }
}

/// A DPoP proof's header and claims, chosen by the fuzzer and signed with the agent's key, or
/// (when `raw` is given) any text.
#[derive(Debug, Arbitrary)]
struct DpopInput {
    raw: Option<String>,
    typ: Pick<String>,
    jwk: Pick<Option<String>>,
    jti: Pick<String>,
    htm: Pick<String>,
    htu: Pick<String>,
    iat: Time,
    ath: Option<Pick<String>>,
    nonce: Option<Pick<String>>,
    token_sent: bool,
    nonce_required: bool,
}

const DPOP_HTU: &str = "https://shop.example/token";
const DPOP_TOKEN: &str = "an-access-token-of-the-session";
const DPOP_NONCE: &str = "the-company-nonce";

/// A DPoP proof against a token-endpoint request: a proof that verifies was signed by the key it
/// carries, for this method and URL, within the `iat` window, with `ath` exactly when a token is
/// sent and the nonce when one is required.
pub fn dpop_proof(data: &[u8]) {
    if let Ok(input) = DpopInput::arbitrary_take_rest(Unstructured::new(data)) {
        input.check();
    }
}

impl DpopInput {
    /// Builds the proof, verifies it and checks the properties; whether it was verified.
    fn check(&self) -> bool {
        let request = DpopRequest {
            method: "POST",
            htu: DPOP_HTU,
            access_token: self.token_sent.then_some(DPOP_TOKEN),
            nonce: self.nonce_required.then_some(DPOP_NONCE),
        };
        let key = fixture::agent_key();
        let proof = match &self.raw {
            Some(raw) => CompactJws::new(raw.clone()),
            None => {
                let own = serde_json::to_value(key.public_key().jwk()).unwrap_or_default();
                let jwk = match &self.jwk {
                    Pick::Good => own,
                    Pick::Other(None) => Value::Null,
                    Pick::Other(Some(text)) => serde_json::from_str(text).unwrap_or(Value::String(text.clone())),
                };
                let header = json!({ "alg": "ES256", "typ": self.typ.or(DPOP_TYP), "jwk": jwk });
                let mut claims = json!({
                    "jti": self.jti.or("a-proof-id-of-sixteen-or-more"),
                    "htm": self.htm.or("POST"),
                    "htu": self.htu.or(DPOP_HTU),
                    "iat": self.iat.value(),
                });
                if let Some(ath) = &self.ath {
                    claims["ath"] = ath.or(&access_token_hash(DPOP_TOKEN));
                }
                if let Some(nonce) = &self.nonce {
                    claims["nonce"] = nonce.or(DPOP_NONCE);
                }
                let Ok(proof) = key.sign_with_header(&header, &claims) else {
                    return false;
                };
                proof
            }
        };
        let Ok(verified) = verify_dpop_proof(proof.secret(), &request, UnixTime::from_secs(NOW)) else {
            return false;
        };
        let jws =
            UnverifiedJws::parse(proof.secret()).unwrap_or_else(|e| panic!("a verified proof does not parse: {e}"));
        let claims: Value = serde_json::from_slice(jws.payload()).unwrap_or_default();
        assert_eq!(jws.header().typ.as_deref(), Some(DPOP_TYP));
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], DPOP_HTU);
        assert!(
            verified.iat.since(UnixTime::from_secs(NOW)).abs() <= DPOP_IAT_WINDOW,
            "iat outside the window"
        );
        assert!((16..=256).contains(&verified.jti.chars().count()));
        assert_eq!(
            claims.get("ath").is_some(),
            self.token_sent,
            "ath without a token, or a token without ath"
        );
        if self.nonce_required {
            assert_eq!(claims["nonce"], DPOP_NONCE);
        }
        if self.raw.is_none() && matches!(self.jwk, Pick::Good) {
            assert_eq!(verified.thumbprint, key.public_key().thumbprint());
        }
        true
    }
}

/// A client assertion's claims (token endpoint, `private_key_jwt`): what parses lives
/// `0 < exp - iat <= 300` seconds with a 16-256 character `jti`, and passes the time check only
/// when now is within its life (with the skew).
pub fn client_assertion(data: &[u8]) {
    let Ok(claims) = JwtAssertionClaims::from_payload(data) else {
        return;
    };
    let lifetime = claims.exp.since(claims.iat);
    assert!(
        (1..=MAX_JWT_ASSERTION_LIFETIME).contains(&lifetime),
        "a lifetime of {lifetime}"
    );
    assert!((16..=256).contains(&claims.jti.chars().count()));
    assert!(!claims.iss.is_empty() && !claims.sub.is_empty() && !claims.aud.is_empty());
    let now = UnixTime::from_secs(NOW);
    if claims.check_time(now).is_ok() {
        assert!(
            now <= claims.exp.plus(JWT_ASSERTION_SKEW),
            "an expired assertion passed"
        );
        assert!(
            claims.iat <= now.plus(JWT_ASSERTION_SKEW),
            "an assertion from the future passed"
        );
    }
}

/// An agent's client metadata document as the company's resolver fetched it from the agent's
/// `client_id`: what parses names that same `client_id` and an https `jwks_uri`.
pub fn client_metadata(data: &[u8]) {
    let fetched = fixture::client_id();
    let Ok(metadata) = ClientMetadata::parse(data, &fetched) else {
        return;
    };
    assert_eq!(metadata.client_id(), &fetched, "metadata for another client accepted");
    assert_eq!(metadata.jwks_uri().url().scheme(), "https");
}

/// An agent's JWKS: what parses holds 1 to `MAX_JWKS_KEYS` keys, and written out parses back
/// to the same keys.
pub fn jwks(data: &[u8]) {
    let Ok(jwks) = Jwks::parse(data) else {
        return;
    };
    assert!(
        (1..=MAX_JWKS_KEYS).contains(&jwks.keys().len()),
        "{} keys",
        jwks.keys().len()
    );
    let written = serde_json::to_vec(&jwks.to_json()).unwrap_or_default();
    let again = Jwks::parse(&written).unwrap_or_else(|e| panic!("a written JWKS does not parse: {e}"));
    let prints = |set: &Jwks| {
        set.keys()
            .iter()
            .map(|k| (k.alg(), k.kid().map(str::to_owned), k.thumbprint()))
            .collect::<Vec<_>>()
    };
    assert_eq!(prints(&again), prints(&jwks), "a JWKS changed on a write and a read");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_valid_join_seed_joins_once_through_the_route() {
        let assertion = crate::seeds::valid_assertion().unwrap_or_else(|e| panic!("{e}"));
        let body = format!("assertion={}", assertion.secret());
        let fresh = fixture::company().fresh();
        assert_eq!(post_form(&fresh, body.as_bytes()).status(), StatusCode::SEE_OTHER);
        assert_eq!(post_form(&fresh, body.as_bytes()).status(), StatusCode::BAD_REQUEST);
        browser_session_form(body.as_bytes());
    }

    #[test]
    fn an_honest_structured_assertion_is_verified_and_a_late_one_is_not() {
        let honest = || AssertionInput {
            typ: Pick::Good,
            kid: Some(Pick::Good),
            iss: Pick::Good,
            sub: Pick::Good,
            aud: Pick::Good,
            session_id: Pick::Good,
            return_to: ReturnTo::Good,
            iat: Time::FromNow(-5),
            exp: Time::FromNow(55),
            jti: Pick::Good,
            left_out: None,
            extra: None,
        };
        assert!(honest().check(), "the harness never reaches a verified assertion");
        let late = AssertionInput {
            exp: Time::FromNow(0),
            ..honest()
        };
        assert!(!late.check());
    }

    #[test]
    fn an_honest_structured_dpop_proof_is_verified_and_a_stale_one_is_not() {
        let honest = || DpopInput {
            raw: None,
            typ: Pick::Good,
            jwk: Pick::Good,
            jti: Pick::Good,
            htm: Pick::Good,
            htu: Pick::Good,
            iat: Time::FromNow(0),
            ath: Some(Pick::Good),
            nonce: Some(Pick::Good),
            token_sent: true,
            nonce_required: true,
        };
        assert!(honest().check(), "the harness never reaches a verified proof");
        let stale = DpopInput {
            iat: Time::FromNow(-61),
            ..honest()
        };
        assert!(!stale.check());
    }
}
