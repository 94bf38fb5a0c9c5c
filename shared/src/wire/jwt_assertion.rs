//! The JWTs an agent signs for the token endpoint (PAP §4.1-4.2): the client assertion
//! (`private_key_jwt`, RFC 7523) and the Session assertion (jwt-bearer grant).

use serde::Deserialize;
use serde_json::Value;

use crate::time::UnixTime;

/// Longest lifetime of a client or Session assertion the company accepts, in seconds.
pub const MAX_JWT_ASSERTION_LIFETIME: i64 = 300;

/// Clock skew tolerated for client and Session assertions, in seconds.
pub const JWT_ASSERTION_SKEW: i64 = 30;

/// The claims of a client or Session assertion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtAssertionClaims {
    /// Issuer: the agent's `client_id`.
    pub iss: String,
    /// Subject: the `client_id` (client assertion) or the pairwise User ID (Session assertion).
    pub sub: String,
    /// Audience: one string, the company's issuer.
    pub aud: String,
    /// Issued at (whole seconds; a fractional part is dropped).
    pub iat: UnixTime,
    /// Expires at (whole seconds).
    pub exp: UnixTime,
    /// Unique id, 16-256 characters.
    pub jti: String,
}

#[derive(Deserialize)]
struct Raw {
    iss: Option<Value>,
    sub: Option<Value>,
    aud: Option<Value>,
    iat: Option<Value>,
    exp: Option<Value>,
    jti: Option<Value>,
}

impl JwtAssertionClaims {
    /// Reads the claims: `iss sub aud iat exp jti` present, `aud` one string, times JSON
    /// numbers (not booleans or strings), `jti` 16-256 characters, `0 < exp - iat <= 300`.
    pub fn from_payload(payload: &[u8]) -> Result<Self, JwtAssertionError> {
        let raw: Raw = serde_json::from_slice(payload).map_err(|_| JwtAssertionError::Malformed)?;
        let text = |v: Option<Value>, name| match v {
            Some(Value::String(s)) if !s.is_empty() => Ok(s),
            _ => Err(JwtAssertionError::InvalidClaim(name)),
        };
        let time = |v: Option<Value>, name| match v {
            Some(Value::Number(n)) => n
                .as_f64()
                .map(|f| UnixTime::from_secs(f as i64))
                .ok_or(JwtAssertionError::InvalidClaim(name)),
            _ => Err(JwtAssertionError::InvalidClaim(name)),
        };
        let claims = Self {
            iss: text(raw.iss, "iss")?,
            sub: text(raw.sub, "sub")?,
            aud: text(raw.aud, "aud")?,
            iat: time(raw.iat, "iat")?,
            exp: time(raw.exp, "exp")?,
            jti: text(raw.jti, "jti")?,
        };
        if !(16..=256).contains(&claims.jti.chars().count()) {
            return Err(JwtAssertionError::InvalidClaim("jti"));
        }
        if !(1..=MAX_JWT_ASSERTION_LIFETIME).contains(&claims.exp.since(claims.iat)) {
            return Err(JwtAssertionError::Lifetime);
        }
        Ok(claims)
    }

    /// The time checks with [`JWT_ASSERTION_SKEW`]: not expired, not issued in the future.
    pub fn check_time(&self, now: UnixTime) -> Result<(), JwtAssertionError> {
        if now > self.exp.plus(JWT_ASSERTION_SKEW) {
            return Err(JwtAssertionError::Expired);
        }
        if self.iat > now.plus(JWT_ASSERTION_SKEW) {
            return Err(JwtAssertionError::IssuedInFuture);
        }
        Ok(())
    }
}

/// Why a client or Session assertion's claims were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwtAssertionError {
    /// Expired (beyond the skew).
    #[error("the assertion has expired")]
    Expired,
    /// A claim is missing or of the wrong type or length.
    #[error("claim {0} is invalid")]
    InvalidClaim(&'static str),
    /// Issued in the future (beyond the skew).
    #[error("the assertion is issued in the future")]
    IssuedInFuture,
    /// `exp - iat` is not in `1..=300`.
    #[error("the assertion lifetime is out of bounds")]
    Lifetime,
    /// Not a JSON object.
    #[error("the payload is not a JSON object")]
    Malformed,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[allow(clippy::needless_pass_by_value, reason = "callers build the value in place")]
    fn read(v: Value) -> Result<JwtAssertionClaims, JwtAssertionError> {
        JwtAssertionClaims::from_payload(v.to_string().as_bytes())
    }

    fn base() -> Value {
        json!({"iss": "https://a.example/agent.json", "sub": "u", "aud": "https://shop.example", "iat": 100, "exp": 160, "jti": "jti_0123456789abcdef"})
    }

    #[test]
    fn reads_and_checks() {
        let c = read(base()).unwrap();
        assert_eq!(c.check_time(UnixTime::from_secs(190)), Ok(()));
        assert_eq!(c.check_time(UnixTime::from_secs(191)), Err(JwtAssertionError::Expired));
        assert_eq!(
            c.check_time(UnixTime::from_secs(69)),
            Err(JwtAssertionError::IssuedInFuture)
        );
        let mut v = base();
        v["aud"] = json!(["https://shop.example"]);
        assert_eq!(read(v), Err(JwtAssertionError::InvalidClaim("aud")));
        let mut v = base();
        v["iat"] = json!("100");
        assert_eq!(read(v), Err(JwtAssertionError::InvalidClaim("iat")));
        let mut v = base();
        v["exp"] = json!(401);
        assert_eq!(read(v), Err(JwtAssertionError::Lifetime));
        let mut v = base();
        v["jti"] = json!("short");
        assert_eq!(read(v), Err(JwtAssertionError::InvalidClaim("jti")));
        let mut v = base();
        v["iat"] = json!(100.0);
        assert!(read(v).is_ok());
    }
}
