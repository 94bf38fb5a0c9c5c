//! Secret values that cannot reach a log, an error or a report by accident.
//!
//! A secret type here has a redacted `Debug`, and no `Display`, `Clone`, `PartialEq` or
//! `Serialize`; the value is read only through a loud `secret()` accessor that reviewers can
//! grep for, and it is zeroized on drop.

use std::fmt;

use zeroize::Zeroizing;

/// A compact JWS (`header.payload.signature`) such as a `poppy-browser+jwt` browser assertion.
///
/// Whoever holds an unexpired assertion can join the Session it names, so it is a bearer secret
/// until it has been used once (PAP §5).
pub struct CompactJws(Zeroizing<String>);

impl CompactJws {
    /// Wraps a compact serialisation. Nothing is checked here; parsing happens in the verifier.
    pub fn new(compact: String) -> Self {
        Self(Zeroizing::new(compact))
    }

    /// The compact serialisation.
    ///
    /// # Security Warning
    ///
    /// The returned text is a bearer credential: put it only in the body of the one POST that
    /// carries it, never in a URL, a log line, an error message or a report.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CompactJws {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompactJws([redacted])")
    }
}

/// A bearer token: a Session Token, an Account Token, a device code. Whoever holds one acts as
/// the Session (or its sign-in), so it is read (`Deserialize`) but never written by accident:
/// no `Serialize`, no `Display`, a redacted `Debug`.
pub struct SecretToken(Zeroizing<String>);

impl SecretToken {
    /// Wraps a token.
    pub fn new(token: String) -> Self {
        Self(Zeroizing::new(token))
    }

    /// The token.
    ///
    /// # Security Warning
    ///
    /// A bearer credential: send it only in an `Authorization` header or a token-endpoint form,
    /// and store it only sealed.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretToken([redacted])")
    }
}

impl<'de> serde::Deserialize<'de> for SecretToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_does_not_print_the_value() {
        let jws = CompactJws::new("eyJhbGciOiJFUzI1NiJ9.e30.c2ln".to_owned());
        let printed = format!("{jws:?}");
        assert!(!printed.contains("eyJ"), "{printed}");
        assert_eq!(jws.secret(), "eyJhbGciOiJFUzI1NiJ9.e30.c2ln");
    }
}
