//! DPoP proofs (RFC 9449) as PAP §4.3 uses them: the agent proves possession of the key its
//! Session Token is bound to on every token-endpoint and API request.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::jose::{Algorithm, PublicKey, SigningKey, UnverifiedJws};
use crate::secret::CompactJws;
use crate::time::UnixTime;

/// The protected-header `typ` of a DPoP proof (RFC 9449 §4.2).
pub const DPOP_TYP: &str = "dpop+jwt";

/// How far a proof's `iat` may be from now, either way, in seconds (PAP-4.3-05).
pub const DPOP_IAT_WINDOW: i64 = 60;

/// The request a proof must match.
#[derive(Clone, Copy, Debug)]
pub struct DpopRequest<'a> {
    /// The HTTP method, e.g. `POST`.
    pub method: &'a str,
    /// `scheme://host/path` of the request's public URL, no query, no default port.
    pub htu: &'a str,
    /// The access token sent with the request, if any (then `ath` must match it).
    pub access_token: Option<&'a str>,
    /// The nonce the company requires, if any.
    pub nonce: Option<&'a str>,
}

/// A proof that passed every check but replay, which the caller keeps (per thumbprint and `jti`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedDpop {
    /// RFC 7638 thumbprint of the proof's key: what tokens are bound to.
    pub thumbprint: String,
    /// The proof's `jti`.
    pub jti: String,
    /// The proof's `iat`.
    pub iat: UnixTime,
}

#[derive(Deserialize)]
struct ProofClaims {
    jti: Option<serde_json::Value>,
    htm: Option<serde_json::Value>,
    htu: Option<serde_json::Value>,
    iat: Option<serde_json::Value>,
    #[serde(default)]
    ath: Option<serde_json::Value>,
    #[serde(default)]
    nonce: Option<serde_json::Value>,
}

/// The `ath` for `access_token`: unpadded base64url of its SHA-256.
pub fn access_token_hash(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(access_token.as_bytes()))
}

/// Checks one DPoP header value against `request` at `now` (RFC 9449 §4.3): one compact JWS,
/// `typ` `dpop+jwt`, ES256/RS256, a public `jwk` that verifies the signature, `jti` of 16-256
/// characters, `htm` and `htu` equal to the request's, an integer `iat` within 60 s, `ath`
/// exactly when a token is sent, and the nonce when one is required.
pub fn verify_dpop_proof(proof: &str, request: &DpopRequest<'_>, now: UnixTime) -> Result<VerifiedDpop, DpopError> {
    if proof.bytes().any(|b| matches!(b, b',' | b' ' | b'\t')) {
        return Err(DpopError::Malformed);
    }
    let jws = UnverifiedJws::parse(proof).map_err(|_| DpopError::Malformed)?;
    let alg = Algorithm::from_name(&jws.header().alg).ok_or(DpopError::UnsupportedAlgorithm)?;
    if jws.header().typ.as_deref() != Some(DPOP_TYP) {
        return Err(DpopError::WrongType);
    }
    let jwk = jws.header().jwk.as_ref().ok_or(DpopError::BadKey)?;
    let key = PublicKey::from_jwk(jwk)
        .map_err(|_| DpopError::BadKey)?
        .ok_or(DpopError::BadKey)?;
    if !jws.verify_with(alg, &key) {
        return Err(DpopError::BadSignature);
    }
    let claims: ProofClaims = serde_json::from_slice(jws.payload()).map_err(|_| DpopError::Malformed)?;
    let jti = match claims.jti {
        Some(serde_json::Value::String(j)) if (16..=256).contains(&j.chars().count()) => j,
        _ => return Err(DpopError::InvalidClaim("jti")),
    };
    // RFC 9449 §4.2: integer seconds; a float such as 1791709200.0 is refused.
    let iat = match claims.iat {
        Some(serde_json::Value::Number(n)) => n.as_i64().ok_or(DpopError::InvalidClaim("iat"))?,
        _ => return Err(DpopError::InvalidClaim("iat")),
    };
    // Saturating: an `iat` near i64::MIN must neither overflow nor wrap into the window (L1).
    if now.since(UnixTime::from_secs(iat)).unsigned_abs() > DPOP_IAT_WINDOW.unsigned_abs() {
        return Err(DpopError::OutsideWindow);
    }
    if claims.htm.as_ref().and_then(|v| v.as_str()) != Some(request.method) {
        return Err(DpopError::WrongRequest("htm"));
    }
    if claims.htu.as_ref().and_then(|v| v.as_str()) != Some(request.htu) {
        return Err(DpopError::WrongRequest("htu"));
    }
    let ath = claims
        .ath
        .as_ref()
        .map(|v| v.as_str().ok_or(DpopError::InvalidClaim("ath")))
        .transpose()?;
    match (request.access_token, ath) {
        (Some(token), Some(ath)) if ath == access_token_hash(token) => {}
        (None, None) => {}
        _ => return Err(DpopError::WrongRequest("ath")),
    }
    if let Some(required) = request.nonce
        && claims.nonce.as_ref().and_then(|v| v.as_str()) != Some(required)
    {
        return Err(DpopError::NonceRequired);
    }
    Ok(VerifiedDpop {
        thumbprint: key.thumbprint(),
        jti,
        iat: UnixTime::from_secs(iat),
    })
}

/// Makes a DPoP proof for `request` with `key`, issued at `iat`, with `jti` (the agent side).
pub fn create_dpop_proof(
    key: &SigningKey,
    request: &DpopRequest<'_>,
    iat: UnixTime,
    jti: &str,
) -> Result<CompactJws, DpopError> {
    let mut jwk = serde_json::to_value(key.public_key().jwk()).map_err(|_| DpopError::BadKey)?;
    if let Some(object) = jwk.as_object_mut() {
        for optional in ["kid", "alg", "use"] {
            object.remove(optional);
        }
    }
    let header = serde_json::json!({ "alg": key.alg().name(), "typ": DPOP_TYP, "jwk": jwk });
    let mut claims = serde_json::json!({ "jti": jti, "htm": request.method, "htu": request.htu, "iat": iat.as_secs() });
    if let Some(token) = request.access_token {
        claims["ath"] = serde_json::Value::String(access_token_hash(token));
    }
    if let Some(nonce) = request.nonce {
        claims["nonce"] = serde_json::Value::String(nonce.to_owned());
    }
    key.sign_with_header(&header, &claims).map_err(|_| DpopError::BadKey)
}

/// Why a DPoP proof was refused (all answered `invalid_dpop_proof`, except the nonce).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DpopError {
    /// The header's `jwk` is missing, private, or not an EC P-256 / RSA key.
    #[error("the proof's key is missing or invalid")]
    BadKey,
    /// The signature does not verify with the header's key.
    #[error("the proof's signature does not verify")]
    BadSignature,
    /// A claim is missing or of the wrong type.
    #[error("proof claim {0} is invalid")]
    InvalidClaim(&'static str),
    /// Not one compact JWS.
    #[error("the proof is not one compact JWS")]
    Malformed,
    /// The company requires a nonce and the proof lacks it (answered `use_dpop_nonce`).
    #[error("the proof lacks the required nonce")]
    NonceRequired,
    /// `iat` is more than 60 s from now.
    #[error("the proof was not made within the acceptance window")]
    OutsideWindow,
    /// `alg` is not ES256 or RS256.
    #[error("the proof's algorithm is not accepted")]
    UnsupportedAlgorithm,
    /// `htm`, `htu` or `ath` does not match the request.
    #[error("the proof does not match the request ({0})")]
    WrongRequest(&'static str),
    /// `typ` is not `dpop+jwt`.
    #[error("the proof's type is not dpop+jwt")]
    WrongType,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SystemRng;

    const NOW: i64 = 1_800_000_000;

    fn request(token: Option<&'static str>) -> DpopRequest<'static> {
        DpopRequest {
            method: "POST",
            htu: "https://shop.example/oauth/token",
            access_token: token,
            nonce: None,
        }
    }

    fn key() -> SigningKey {
        SigningKey::generate_es256(&SystemRng, "dpop").unwrap()
    }

    #[test]
    fn a_fresh_proof_verifies_and_names_the_key() {
        let key = key();
        let proof = create_dpop_proof(&key, &request(None), UnixTime::from_secs(NOW), "jti-0123456789abcdef").unwrap();
        let verified = verify_dpop_proof(proof.secret(), &request(None), UnixTime::from_secs(NOW)).unwrap();
        assert_eq!(verified.thumbprint, key.public_key().thumbprint());
        assert_eq!(verified.jti, "jti-0123456789abcdef");
    }

    #[test]
    fn binds_to_method_url_token_and_time() {
        let key = key();
        let now = UnixTime::from_secs(NOW);
        let with_token = create_dpop_proof(&key, &request(Some("sat_x")), now, "jti-0123456789abcdef").unwrap();
        let check = |proof: &CompactJws, req: &DpopRequest<'_>, at: i64| {
            verify_dpop_proof(proof.secret(), req, UnixTime::from_secs(at))
        };
        assert!(check(&with_token, &request(Some("sat_x")), NOW).is_ok());
        assert_eq!(
            check(&with_token, &request(Some("sat_y")), NOW),
            Err(DpopError::WrongRequest("ath"))
        );
        assert_eq!(
            check(&with_token, &request(None), NOW),
            Err(DpopError::WrongRequest("ath"))
        );
        let get = DpopRequest {
            method: "GET",
            ..request(Some("sat_x"))
        };
        assert_eq!(check(&with_token, &get, NOW), Err(DpopError::WrongRequest("htm")));
        let port = DpopRequest {
            htu: "https://shop.example:443/oauth/token",
            ..request(Some("sat_x"))
        };
        assert_eq!(check(&with_token, &port, NOW), Err(DpopError::WrongRequest("htu")));
        assert!(check(&with_token, &request(Some("sat_x")), NOW + 60).is_ok());
        assert_eq!(
            check(&with_token, &request(Some("sat_x")), NOW + 61),
            Err(DpopError::OutsideWindow)
        );
        assert_eq!(
            check(&with_token, &request(Some("sat_x")), NOW - 61),
            Err(DpopError::OutsideWindow)
        );
        let nonce = DpopRequest {
            nonce: Some("n-1"),
            ..request(Some("sat_x"))
        };
        assert_eq!(check(&with_token, &nonce, NOW), Err(DpopError::NonceRequired));
    }

    #[test]
    fn an_iat_at_the_ends_of_the_integers_is_outside_the_window() {
        let key = key();
        // i64::MIN overflowed `iat - now` (a panic in debug); i64::MIN + now wrapped to
        // i64::MIN, whose `abs()` is negative, so the window check passed (review L1).
        for iat in [i64::MIN, i64::MIN + NOW, i64::MAX, -NOW] {
            let proof =
                create_dpop_proof(&key, &request(None), UnixTime::from_secs(iat), "jti-0123456789abcdef").unwrap();
            assert_eq!(
                verify_dpop_proof(proof.secret(), &request(None), UnixTime::from_secs(NOW)),
                Err(DpopError::OutsideWindow),
                "iat {iat}"
            );
        }
    }

    #[test]
    fn refuses_other_types_short_jtis_and_two_proofs() {
        let key = key();
        let now = UnixTime::from_secs(NOW);
        let short = create_dpop_proof(&key, &request(None), now, "short").unwrap();
        assert_eq!(
            verify_dpop_proof(short.secret(), &request(None), now),
            Err(DpopError::InvalidClaim("jti"))
        );
        let jwt = key
            .sign("JWT", &serde_json::json!({"jti": "jti-0123456789abcdef"}))
            .unwrap();
        assert_eq!(
            verify_dpop_proof(jwt.secret(), &request(None), now),
            Err(DpopError::WrongType)
        );
        let good = create_dpop_proof(&key, &request(None), now, "jti-0123456789abcdef").unwrap();
        let two = format!("{}, {}", good.secret(), good.secret());
        assert_eq!(verify_dpop_proof(&two, &request(None), now), Err(DpopError::Malformed));
    }
}
