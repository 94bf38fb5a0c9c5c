//! The browser assertion (PAP §5): a `poppy-browser+jwt` JWS the agent signs and its controlled
//! browser form-POSTs to the company's `web.browser_session_endpoint`.
//!
//! This module holds what the claims are on their own: required members, their types and
//! formats, and the 60-second lifetime. What needs context (the clock, the endpoint, the
//! company's domain, the Session) is checked by the company's verifier and the agent's join.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{CompanyDomain, HttpsUrl};
use crate::time::UnixTime;
use crate::wire::ids::{ClientId, Jti, PairwiseUserId, SessionId};

/// The protected-header `typ` of a browser assertion, compared exactly (PAP-5-05).
pub const BROWSER_ASSERTION_TYP: &str = "poppy-browser+jwt";

/// The longest a browser assertion may live, `exp - iat`, in seconds (PAP-5-06).
pub const MAX_BROWSER_ASSERTION_LIFETIME: i64 = 60;

/// The claims of a browser assertion, each already in its validated type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrowserAssertionClaims {
    iss: ClientId,
    sub: PairwiseUserId,
    aud: String,
    session_id: SessionId,
    return_to: HttpsUrl,
    iat: UnixTime,
    exp: UnixTime,
    jti: Jti,
}

/// What the agent puts in a browser assertion.
#[derive(Clone, Debug)]
pub struct BrowserAssertionRequest<'a> {
    /// The agent's `client_id` (`iss`).
    pub client_id: &'a ClientId,
    /// The pairwise User ID of the Session (`sub`).
    pub user: &'a PairwiseUserId,
    /// The company's published `web.browser_session_endpoint` (`aud`), used verbatim.
    pub endpoint: &'a HttpsUrl,
    /// The live Session's id.
    pub session_id: &'a SessionId,
    /// The page to open afterwards.
    pub return_to: &'a HttpsUrl,
    /// The company's `organization.domain`; `return_to` must be on it.
    pub company_domain: &'a CompanyDomain,
}

impl BrowserAssertionClaims {
    /// Builds the claims the agent signs (PAP-5-02, PAP §5 agent duties): `return_to` on the
    /// company's domain, `exp - iat` in `1..=60`, a fresh `jti`.
    pub fn build(
        request: &BrowserAssertionRequest<'_>,
        iat: UnixTime,
        lifetime: i64,
        jti: Jti,
    ) -> Result<Self, ClaimsError> {
        if !request.return_to.is_on(request.company_domain) {
            return Err(ClaimsError::Invalid("return_to"));
        }
        if !(1..=MAX_BROWSER_ASSERTION_LIFETIME).contains(&lifetime) {
            return Err(ClaimsError::Lifetime);
        }
        Ok(Self {
            iss: request.client_id.clone(),
            sub: request.user.clone(),
            aud: request.endpoint.as_str().to_owned(),
            session_id: request.session_id.clone(),
            return_to: request.return_to.clone(),
            iat,
            exp: iat.plus(lifetime),
            jti,
        })
    }

    /// Reads the claims from a JWS payload: a JSON object with every required claim (`iss sub
    /// aud session_id return_to iat exp jti`) of the right type and format, integer times, and
    /// `0 < exp - iat <= 60`. A claim given twice is refused; unknown claims are ignored.
    pub fn from_payload(payload: &[u8]) -> Result<Self, ClaimsError> {
        let raw: RawClaims = serde_json::from_slice(payload).map_err(|_| ClaimsError::NotAnObject)?;
        let iss = text(raw.iss, "iss", ClientId::parse)?;
        let sub = text(raw.sub, "sub", PairwiseUserId::parse)?;
        // `aud` is only ever compared, character for character, with the published endpoint (a
        // valid URL), so it is read as a string: parsing it as a URL first would change nothing.
        let aud = text(raw.aud, "aud", |s| Ok::<_, ClaimsError>(s.to_owned()))?;
        let session_id = text(raw.session_id, "session_id", SessionId::parse)?;
        let return_to = text(raw.return_to, "return_to", HttpsUrl::parse)?;
        let iat = integer(raw.iat, "iat")?;
        let exp = integer(raw.exp, "exp")?;
        let jti = text(raw.jti, "jti", Jti::parse)?;
        if iat < 0 {
            return Err(ClaimsError::Invalid("iat"));
        }
        let lifetime = exp.saturating_sub(iat);
        if !(1..=MAX_BROWSER_ASSERTION_LIFETIME).contains(&lifetime) {
            return Err(ClaimsError::Lifetime);
        }
        Ok(Self {
            iss,
            sub,
            aud,
            session_id,
            return_to,
            iat: UnixTime::from_secs(iat),
            exp: UnixTime::from_secs(exp),
            jti,
        })
    }

    /// `iss`: the agent's `client_id`.
    pub fn iss(&self) -> &ClientId {
        &self.iss
    }
    /// `sub`: the pairwise User ID.
    pub fn sub(&self) -> &PairwiseUserId {
        &self.sub
    }
    /// `aud`: the browser-session endpoint, as sent.
    pub fn aud(&self) -> &str {
        &self.aud
    }
    /// `session_id`: the Session to join.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
    /// `return_to`: the page to open afterwards.
    pub fn return_to(&self) -> &HttpsUrl {
        &self.return_to
    }
    /// `iat`.
    pub fn iat(&self) -> UnixTime {
        self.iat
    }
    /// `exp`.
    pub fn exp(&self) -> UnixTime {
        self.exp
    }
    /// `jti`.
    pub fn jti(&self) -> &Jti {
        &self.jti
    }
}

/// The claims as JSON values, so a missing claim and a wrong type are told apart.
#[derive(Default)]
struct RawClaims {
    iss: Option<Value>,
    sub: Option<Value>,
    aud: Option<Value>,
    session_id: Option<Value>,
    return_to: Option<Value>,
    iat: Option<Value>,
    exp: Option<Value>,
    jti: Option<Value>,
}

impl<'de> Deserialize<'de> for RawClaims {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RawClaimsVisitor)
    }
}

/// Reads the claims object, refusing a known claim given twice (RFC 7519 §4 lets a parser
/// refuse duplicates; taking either copy would let two parsers disagree on the claims).
struct RawClaimsVisitor;

impl<'de> serde::de::Visitor<'de> for RawClaimsVisitor {
    type Value = RawClaims;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object of claims")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawClaims, A::Error> {
        let mut raw = RawClaims::default();
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match name.as_ref() {
                "iss" => &mut raw.iss,
                "sub" => &mut raw.sub,
                "aud" => &mut raw.aud,
                "session_id" => &mut raw.session_id,
                "return_to" => &mut raw.return_to,
                "iat" => &mut raw.iat,
                "exp" => &mut raw.exp,
                "jti" => &mut raw.jti,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(serde::de::Error::custom("duplicate claim"));
            }
            // `null` reads as absent.
            *slot = Some(map.next_value::<Value>()?).filter(|v| !v.is_null());
        }
        Ok(raw)
    }
}

/// Reads a string claim through its type's parser.
fn text<T, E>(
    value: Option<Value>,
    name: &'static str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<T, ClaimsError> {
    match value {
        None => Err(ClaimsError::Missing(name)),
        Some(Value::String(s)) => parse(&s).map_err(|_| ClaimsError::Invalid(name)),
        Some(_) => Err(ClaimsError::Invalid(name)),
    }
}

fn integer(value: Option<Value>, name: &'static str) -> Result<i64, ClaimsError> {
    match value {
        None => Err(ClaimsError::Missing(name)),
        // `as_i64` is None for floats (`1.7e9`, `1791709200.0`) and out-of-range numbers.
        Some(Value::Number(n)) => n.as_i64().ok_or(ClaimsError::Invalid(name)),
        Some(_) => Err(ClaimsError::Invalid(name)),
    }
}

/// Why a payload is not a valid set of browser-assertion claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimsError {
    /// A claim has the wrong type or format (`iat` as a string or float, a `jti` of 21
    /// characters, an `aud` array, a `return_to` off the company's domain when building).
    #[error("claim {0} is invalid")]
    Invalid(&'static str),
    /// `exp - iat` is not in `1..=60` seconds.
    #[error("the assertion lifetime is not between 1 and 60 seconds")]
    Lifetime,
    /// A required claim is missing (or null).
    #[error("claim {0} is missing")]
    Missing(&'static str),
    /// The payload is not a JSON object, or gives a claim twice.
    #[error("the payload is not a JSON object of claims")]
    NotAnObject,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn payload() -> Value {
        json!({
            "iss": "https://atlas.example/agent.json",
            "sub": "usr_conf_abc",
            "aud": "https://shop.example/poppy/browser-session",
            "session_id": "ses_1",
            "return_to": "https://shop.example/operations/op_1",
            "iat": 1_800_000_000,
            "exp": 1_800_000_060,
            "jti": "AAAAAAAAAAAAAAAAAAAAAA",
            "extra": {"ignored": true}
        })
    }

    fn read(v: &Value) -> Result<BrowserAssertionClaims, ClaimsError> {
        BrowserAssertionClaims::from_payload(&serde_json::to_vec(v).unwrap())
    }

    fn with(member: &str, value: Value) -> Result<BrowserAssertionClaims, ClaimsError> {
        let mut v = payload();
        v[member] = value;
        read(&v)
    }

    #[test]
    fn reads_a_valid_payload() {
        let claims = read(&payload()).unwrap();
        assert_eq!(claims.iss().as_str(), "https://atlas.example/agent.json");
        assert_eq!(claims.exp().since(claims.iat()), 60);
    }

    #[test]
    fn every_required_claim_is_required() {
        for name in ["iss", "sub", "aud", "session_id", "return_to", "iat", "exp", "jti"] {
            let mut v = payload();
            v.as_object_mut().unwrap().remove(name);
            assert_eq!(read(&v), Err(ClaimsError::Missing(name)), "{name}");
            assert_eq!(with(name, Value::Null), Err(ClaimsError::Missing(name)), "{name}");
        }
    }

    #[test]
    fn times_must_be_integers() {
        assert_eq!(with("iat", json!("1800000000")), Err(ClaimsError::Invalid("iat")));
        assert_eq!(with("iat", json!(1_800_000_000.0)), Err(ClaimsError::Invalid("iat")));
        assert_eq!(with("exp", json!(1.80000006e9)), Err(ClaimsError::Invalid("exp")));
        assert_eq!(with("exp", json!(true)), Err(ClaimsError::Invalid("exp")));
        assert_eq!(with("iat", json!(-5)), Err(ClaimsError::Invalid("iat")));
    }

    #[test]
    fn lifetime_is_one_to_sixty_seconds() {
        assert!(with("exp", json!(1_800_000_001)).is_ok());
        assert_eq!(with("exp", json!(1_800_000_061)), Err(ClaimsError::Lifetime));
        assert_eq!(with("exp", json!(1_800_000_000)), Err(ClaimsError::Lifetime));
        assert_eq!(with("exp", json!(1_799_999_999)), Err(ClaimsError::Lifetime));
        assert_eq!(with("exp", json!(i64::MAX)), Err(ClaimsError::Lifetime));
    }

    #[test]
    fn formats_are_checked() {
        assert_eq!(with("jti", json!("A".repeat(21))), Err(ClaimsError::Invalid("jti")));
        assert_eq!(
            with("aud", json!(["https://shop.example/poppy/browser-session"])),
            Err(ClaimsError::Invalid("aud"))
        );
        assert_eq!(
            with("return_to", json!("http://shop.example/")),
            Err(ClaimsError::Invalid("return_to"))
        );
        assert_eq!(
            with("return_to", json!("https://shop.example@evil.com/")),
            Err(ClaimsError::Invalid("return_to"))
        );
        assert_eq!(with("iss", json!("atlas")), Err(ClaimsError::Invalid("iss")));
        assert_eq!(with("sub", json!("usr 1")), Err(ClaimsError::Invalid("sub")));
        assert_eq!(with("session_id", json!(7)), Err(ClaimsError::Invalid("session_id")));
    }

    #[test]
    fn duplicate_claims_and_non_objects_are_refused() {
        let dup = br#"{"sub":"a","sub":"b"}"#;
        assert_eq!(BrowserAssertionClaims::from_payload(dup), Err(ClaimsError::NotAnObject));
        assert_eq!(
            BrowserAssertionClaims::from_payload(b"[]"),
            Err(ClaimsError::NotAnObject)
        );
        assert_eq!(
            BrowserAssertionClaims::from_payload(b"{} x"),
            Err(ClaimsError::NotAnObject)
        );
    }

    #[test]
    fn build_checks_return_to_and_lifetime_and_serialises_integers() {
        let client_id = ClientId::parse("https://atlas.example/agent.json").unwrap();
        let user = PairwiseUserId::parse("usr_1").unwrap();
        let endpoint = HttpsUrl::parse("https://shop.example/poppy/browser-session").unwrap();
        let session_id = SessionId::parse("ses_1").unwrap();
        let domain = CompanyDomain::try_from("shop.example").unwrap();
        let good = HttpsUrl::parse("https://shop.example/x").unwrap();
        let evil = HttpsUrl::parse("https://evilshop.example/x").unwrap();
        let request = |return_to| BrowserAssertionRequest {
            client_id: &client_id,
            user: &user,
            endpoint: &endpoint,
            session_id: &session_id,
            return_to,
            company_domain: &domain,
        };
        let jti = || Jti::parse("AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let iat = UnixTime::from_secs(1_800_000_000);
        assert_eq!(
            BrowserAssertionClaims::build(&request(&evil), iat, 60, jti()),
            Err(ClaimsError::Invalid("return_to"))
        );
        assert_eq!(
            BrowserAssertionClaims::build(&request(&good), iat, 61, jti()),
            Err(ClaimsError::Lifetime)
        );
        let claims = BrowserAssertionClaims::build(&request(&good), iat, 60, jti()).unwrap();
        let json = serde_json::to_value(&claims).unwrap();
        assert_eq!(json["iat"], json!(1_800_000_000));
        assert_eq!(json["exp"], json!(1_800_000_060));
        // What the agent builds, the company reads back unchanged.
        assert_eq!(
            BrowserAssertionClaims::from_payload(&serde_json::to_vec(&json).unwrap()),
            Ok(claims)
        );
    }
}
