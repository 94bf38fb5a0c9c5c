//! The OAuth vocabulary PAP speaks at its token, device and revocation endpoints: the grant-type
//! and assertion-type URNs, the error codes (RFC 6749 §5.2, RFC 8628 §3.5, RFC 6750 §3.1,
//! RFC 9449 §7, and PAP's own), and the token response (PAP §4.2, wire doc §3).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::secret::SecretToken;

/// The grant types PAP uses at the token endpoint.
pub mod grant_type {
    /// RFC 7523 §2.1: a Session assertion starts a signed-out Session (PAP §4.2).
    pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
    /// RFC 8628 §3.4: Device Sign-In.
    pub const DEVICE_CODE: &str = "urn:ietf:params:oauth:grant-type:device_code";
    /// RFC 6749 §6: the Account Token, rotating.
    pub const REFRESH_TOKEN: &str = "refresh_token";
}

/// RFC 7523 §2.2: client authentication by a signed JWT (`private_key_jwt`).
pub const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The `error` code of an OAuth-style error answer. Codes this crate does not know stay as they
/// came, in [`OAuthErrorCode::Extension`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OAuthErrorCode {
    /// RFC 6749 §5.2: the request is missing or repeats a parameter, or is malformed.
    InvalidRequest,
    /// RFC 6749 §5.2: client authentication failed.
    InvalidClient,
    /// RFC 6749 §5.2: the grant (assertion, code, refresh token) is invalid or expired.
    InvalidGrant,
    /// RFC 6749 §5.2: the client may not use this grant type.
    UnauthorizedClient,
    /// RFC 6749 §5.2: the grant type is not supported.
    UnsupportedGrantType,
    /// RFC 6749 §5.2: the scope is invalid, unknown, or exceeds what was granted.
    InvalidScope,
    /// RFC 8628 §3.5: the user has not yet approved; poll again.
    AuthorizationPending,
    /// RFC 8628 §3.5: poll again, 5 seconds more slowly.
    SlowDown,
    /// RFC 8628 §3.5: the user denied.
    AccessDenied,
    /// RFC 8628 §3.5: the device code expired.
    ExpiredToken,
    /// RFC 6750 §3.1: the access token is invalid.
    InvalidToken,
    /// RFC 6750 §3.1: the token lacks a scope the call needs.
    InsufficientScope,
    /// RFC 9449 §7: the DPoP proof is invalid.
    InvalidDpopProof,
    /// RFC 9449 §8: the server wants a DPoP nonce.
    UseDpopNonce,
    /// PAP: the Session is unknown, ended or another's.
    InvalidSession,
    /// PAP: the call needs a signed-in Session.
    SignInRequired,
    /// PAP §4.8: the Session was signed in to another account.
    AccountMismatch,
    /// PAP: the call needs an extension the client did not declare.
    ExtensionRequired,
    /// PAP: the company's terms changed and must be accepted again.
    TermsChanged,
    /// PAP Operations: an `Idempotency-Key` was reused for another request.
    IdempotencyKeyConflict,
    /// The request body is larger than the endpoint reads.
    RequestTooLarge,
    /// RFC 6749 §4.1.2.1: the server cannot take the request now (a store is full or down);
    /// retry later.
    TemporarilyUnavailable,
    /// PAP Operations: no such operation for this Session.
    OperationNotFound,
    /// PAP Operations: the person must approve (it is not the agent's to confirm).
    UserApprovalRequired,
    /// A code this crate does not know, as it came.
    Extension(String),
}

impl OAuthErrorCode {
    /// Every known code (not [`Self::Extension`]).
    const KNOWN: [OAuthErrorCode; 24] = [
        Self::InvalidRequest,
        Self::InvalidClient,
        Self::InvalidGrant,
        Self::UnauthorizedClient,
        Self::UnsupportedGrantType,
        Self::InvalidScope,
        Self::AuthorizationPending,
        Self::SlowDown,
        Self::AccessDenied,
        Self::ExpiredToken,
        Self::InvalidToken,
        Self::InsufficientScope,
        Self::InvalidDpopProof,
        Self::UseDpopNonce,
        Self::InvalidSession,
        Self::SignInRequired,
        Self::AccountMismatch,
        Self::ExtensionRequired,
        Self::TermsChanged,
        Self::IdempotencyKeyConflict,
        Self::RequestTooLarge,
        Self::TemporarilyUnavailable,
        Self::OperationNotFound,
        Self::UserApprovalRequired,
    ];

    /// The wire string (`invalid_grant`).
    pub fn as_str(&self) -> &str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::InvalidScope => "invalid_scope",
            Self::AuthorizationPending => "authorization_pending",
            Self::SlowDown => "slow_down",
            Self::AccessDenied => "access_denied",
            Self::ExpiredToken => "expired_token",
            Self::InvalidToken => "invalid_token",
            Self::InsufficientScope => "insufficient_scope",
            Self::InvalidDpopProof => "invalid_dpop_proof",
            Self::UseDpopNonce => "use_dpop_nonce",
            Self::InvalidSession => "invalid_session",
            Self::SignInRequired => "sign_in_required",
            Self::AccountMismatch => "account_mismatch",
            Self::ExtensionRequired => "extension_required",
            Self::TermsChanged => "terms_changed",
            Self::IdempotencyKeyConflict => "idempotency_key_conflict",
            Self::RequestTooLarge => "request_too_large",
            Self::TemporarilyUnavailable => "temporarily_unavailable",
            Self::OperationNotFound => "operation_not_found",
            Self::UserApprovalRequired => "user_approval_required",
            Self::Extension(code) => code,
        }
    }

    /// The code a peer sent. A code this crate does not know is kept as it came when it is at
    /// most 64 printable ASCII characters, and is `unknown` otherwise (a hostile company's
    /// text never reaches a terminal or a log as it is).
    pub fn from_wire(code: &str) -> Self {
        Self::KNOWN
            .into_iter()
            .find(|known| known.as_str() == code)
            .unwrap_or_else(|| {
                let printable = code.len() <= 64 && !code.is_empty() && code.bytes().all(|b| b.is_ascii_graphic());
                Self::Extension(if printable {
                    code.to_owned()
                } else {
                    "unknown".to_owned()
                })
            })
    }
}

impl fmt::Display for OAuthErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for OAuthErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OAuthErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(Self::from_wire(&code))
    }
}

/// An OAuth-style error body: `{"error": code}` (other members are the answer's own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthErrorBody {
    /// The code.
    pub error: OAuthErrorCode,
}

/// A token response (PAP §4.2, RFC 6749 §5.1 with RFC 9449's `DPoP` type): a Session Token,
/// the Session it belongs to, whether it is signed in, and (for a signed-in Session) the
/// Account Token.
#[derive(Debug, Deserialize)]
pub struct TokenResponse {
    /// The Session Token (a DPoP-bound access token).
    pub access_token: SecretToken,
    /// Always `DPoP`.
    pub token_type: String,
    /// Seconds the Session Token lives.
    pub expires_in: i64,
    /// The granted scopes, space-separated.
    #[serde(default)]
    pub scope: Option<String>,
    /// The Session.
    pub session_id: String,
    /// Whether the Session is signed in.
    pub signed_in: bool,
    /// The Account Token, for a signed-in Session.
    #[serde(default)]
    pub refresh_token: Option<SecretToken>,
}

impl Serialize for TokenResponse {
    /// Writes the tokens themselves: a token response is the one place they are meant to go.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("access_token", self.access_token.secret())?;
        map.serialize_entry("token_type", &self.token_type)?;
        map.serialize_entry("expires_in", &self.expires_in)?;
        if let Some(scope) = &self.scope {
            map.serialize_entry("scope", scope)?;
        }
        map.serialize_entry("session_id", &self.session_id)?;
        map.serialize_entry("signed_in", &self.signed_in)?;
        if let Some(refresh) = &self.refresh_token {
            map.serialize_entry("refresh_token", refresh.secret())?;
        }
        map.end()
    }
}

/// A device authorization response (RFC 8628 §3.2).
#[derive(Debug, Deserialize)]
pub struct DeviceAuthorizationResponse {
    /// The code the client polls with.
    pub device_code: SecretToken,
    /// The code the user types.
    pub user_code: String,
    /// Where the user goes.
    pub verification_uri: String,
    /// Where the user goes with the code filled in.
    #[serde(default)]
    pub verification_uri_complete: Option<String>,
    /// Seconds the codes live.
    #[serde(default)]
    pub expires_in: Option<u64>,
    /// Seconds between polls.
    #[serde(default)]
    pub interval: Option<u64>,
}

impl Serialize for DeviceAuthorizationResponse {
    /// Writes the device code itself: the response is the one place it is meant to go.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("device_code", self.device_code.secret())?;
        map.serialize_entry("user_code", &self.user_code)?;
        map.serialize_entry("verification_uri", &self.verification_uri)?;
        if let Some(complete) = &self.verification_uri_complete {
            map.serialize_entry("verification_uri_complete", complete)?;
        }
        if let Some(expires_in) = self.expires_in {
            map.serialize_entry("expires_in", &expires_in)?;
        }
        if let Some(interval) = self.interval {
            map.serialize_entry("interval", &interval)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn error_codes_round_trip_and_unknown_ones_stay_as_they_came_or_become_unknown() {
        for code in OAuthErrorCode::KNOWN {
            let wire = serde_json::to_value(&code).unwrap();
            assert_eq!(serde_json::from_value::<OAuthErrorCode>(wire).unwrap(), code);
        }
        assert_eq!(OAuthErrorCode::from_wire("slow_down"), OAuthErrorCode::SlowDown);
        assert_eq!(
            OAuthErrorCode::from_wire("temporarily_unavailable"),
            OAuthErrorCode::TemporarilyUnavailable
        );
        assert_eq!(
            OAuthErrorCode::from_wire("server_overloaded"),
            OAuthErrorCode::Extension("server_overloaded".into())
        );
        let hostile = OAuthErrorCode::from_wire("\u{1b}]0;owned\u{7}");
        assert_eq!(hostile.as_str(), "unknown");
        assert_eq!(OAuthErrorCode::from_wire(&"x".repeat(65)).as_str(), "unknown");
        let body: OAuthErrorBody =
            serde_json::from_value(json!({"error": "invalid_grant", "error_description": "no"})).unwrap();
        assert_eq!(body.error, OAuthErrorCode::InvalidGrant);
    }

    #[test]
    fn a_token_response_reads_and_writes_its_tokens_and_never_prints_them() {
        let wire = json!({"access_token": "sat_SECRET", "token_type": "DPoP", "expires_in": 300,
            "scope": "orders:read", "session_id": "ses_1", "signed_in": true, "refresh_token": "acct_SECRET"});
        let token: TokenResponse = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(token.access_token.secret(), "sat_SECRET");
        assert!(!format!("{token:?}").contains("SECRET"));
        assert_eq!(serde_json::to_value(&token).unwrap(), wire);
        let signed_out: TokenResponse = serde_json::from_value(
            json!({"access_token": "a", "token_type": "DPoP", "expires_in": 1, "session_id": "s", "signed_in": false}),
        )
        .unwrap();
        assert!(signed_out.refresh_token.is_none() && signed_out.scope.is_none());
    }
}
