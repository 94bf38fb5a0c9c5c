//! The identifiers a browser assertion carries.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::{HttpsUrl, InvalidHttpsUrl};

/// True when `text` is `min..=max` characters of `[A-Za-z0-9_-]` (the base64url alphabet): the
/// one shape check of every identifier either side reads from a stranger (ids, cookie values,
/// operation ids, path parameters, instance keys, JWS segments).
pub fn is_base64url(text: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The agent's OAuth `client_id`: the HTTPS URL of its Client ID Metadata Document
/// (PAP §4.1; wire doc §2.3). A browser assertion's `iss`.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClientId(String);

impl ClientId {
    /// Parses a `client_id`: an HTTPS URL with a host and no user information.
    pub fn parse(text: &str) -> Result<Self, InvalidHttpsUrl> {
        HttpsUrl::parse(text).map(|u| Self(String::from(u)))
    }

    /// The URL text, exactly as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The URL, parsed.
    pub fn url(&self) -> HttpsUrl {
        // Every ClientId was built from an HttpsUrl; parsing the same text again cannot fail.
        HttpsUrl::parse(&self.0).expect("a ClientId holds a valid HTTPS URL")
    }
}

impl TryFrom<String> for ClientId {
    type Error = InvalidHttpsUrl;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<ClientId> for String {
    fn from(id: ClientId) -> Self {
        id.0
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientId({})", self.0)
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Declares an opaque identifier of `[A-Za-z0-9_-]{MIN,MAX}`, parsed through `TryFrom` so serde
/// cannot bypass the rule.
macro_rules! b64url_id {
    ($(#[$doc:meta])* $name:ident, $min:expr, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Parses the identifier.
            pub fn parse(text: &str) -> Result<Self, InvalidId> {
                if is_base64url(text, $min, $max) { Ok(Self(text.to_owned())) } else { Err(InvalidId) }
            }

            /// The identifier's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;

            fn try_from(value: String) -> Result<Self, Self::Error> {
                if is_base64url(&value, $min, $max) { Ok(Self(value)) } else { Err(InvalidId) }
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

b64url_id!(
    /// A Session's id (`session_id`, PAP §4.2): 1-256 base64url characters.
    SessionId, 1, 256
);
b64url_id!(
    /// The pairwise User ID the agent uses with one company (`sub`, PAP §4.2): 1-256 base64url
    /// characters.
    PairwiseUserId, 1, 256
);
b64url_id!(
    /// A browser assertion's `jti` (PAP §5): 22-256 base64url characters, so at least 128 bits
    /// when random (22 characters = 16 bytes).
    Jti, 22, 256
);

impl Jti {
    /// A fresh `jti` of 16 random bytes (128 bits), 22 base64url characters.
    pub fn generate(rng: &dyn crate::time::Rng) -> Self {
        use base64::Engine as _;
        let mut bytes = [0u8; 16];
        rng.fill(&mut bytes);
        Self(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }
}

/// The text does not fit the identifier's alphabet or length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a valid identifier")]
pub struct InvalidId;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jti_length_bounds() {
        assert!(Jti::parse(&"a".repeat(21)).is_err());
        assert!(Jti::parse(&"a".repeat(22)).is_ok());
        assert!(Jti::parse(&"a".repeat(256)).is_ok());
        assert!(Jti::parse(&"a".repeat(257)).is_err());
        assert!(Jti::parse(&format!("{}.", "a".repeat(22))).is_err());
        assert!(Jti::parse(&format!("{}=", "a".repeat(22))).is_err());
    }

    #[test]
    fn generated_jti_is_22_chars_and_valid() {
        let jti = Jti::generate(&crate::time::SystemRng);
        assert_eq!(jti.as_str().len(), 22);
        assert!(Jti::parse(jti.as_str()).is_ok());
    }

    #[test]
    fn session_ids_refuse_other_characters() {
        assert!(SessionId::parse("ses_abc-DEF").is_ok());
        assert!(SessionId::parse("").is_err());
        assert!(SessionId::parse("ses abc").is_err());
        assert!(PairwiseUserId::parse("usr/1").is_err());
        assert!(serde_json::from_str::<SessionId>("\"a.b\"").is_err());
    }

    #[test]
    fn client_id_is_an_https_url() {
        assert!(ClientId::parse("https://atlas.example/agent.json").is_ok());
        assert!(ClientId::parse("http://atlas.example/agent.json").is_err());
        assert!(ClientId::parse("atlas").is_err());
    }
}
