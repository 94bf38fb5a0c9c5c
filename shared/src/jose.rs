//! JOSE for PAP: compact JWS split and header parsing, JWK/JWKS import with PAP's rules,
//! ES256/RS256 signing over jsonwebtoken's `aws_lc_rs` backend, and verification by aws-lc-rs
//! itself with each key parsed once, when it is imported.
//!
//! A signature is all the crypto checks here. Everything else jsonwebtoken could check (`alg`
//! allow lists, `typ`, times) is decided by the callers against an injected clock, because its
//! own validation reads the system clock, ignores `typ` and defaults to 60 s of leeway. Its
//! `crypto::verify` is not used either: it hands aws-lc the key's bytes to parse on every
//! verification (issue 42: work per join that belongs to the key).

use std::fmt;

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, ParsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::EncodingKey;
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, LineEnding};
use rsa::pkcs1::{EncodeRsaPrivateKey as _, EncodeRsaPublicKey as _};
use rsa::traits::PublicKeyParts as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::secret::CompactJws;
use crate::time::{Rng, RngAdapter};

/// Longest compact JWS the bridge reads, in bytes. A browser assertion is well under 2 KiB even
/// with an RSA-4096 signature; anything longer is refused before any decoding.
pub const MAX_COMPACT_LEN: usize = 8 * 1024;

/// Smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;

/// The two JWS algorithms PAP draft 0.2 uses (RFC 7518 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// ECDSA P-256 with SHA-256, signature as raw `r || s` (64 bytes).
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
}

impl Algorithm {
    /// Reads the header's `alg`, exactly as RFC 7518 spells it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ES256" => Some(Self::Es256),
            "RS256" => Some(Self::Rs256),
            _ => None,
        }
    }

    /// The RFC 7518 name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Es256 => "ES256",
            Self::Rs256 => "RS256",
        }
    }

    fn backend(self) -> jsonwebtoken::Algorithm {
        match self {
            Self::Es256 => jsonwebtoken::Algorithm::ES256,
            Self::Rs256 => jsonwebtoken::Algorithm::RS256,
        }
    }
}

/// The protected-header members PAP reads. Other members are ignored (PAP-3.3-03), except
/// `crit`, which RFC 7515 §4.1.11 says must be understood: any `crit` is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoseHeader {
    /// `alg`, as sent.
    pub alg: String,
    /// `typ`, as sent (compared exactly, case included).
    pub typ: Option<String>,
    /// `kid`, as sent.
    pub kid: Option<String>,
    /// `jwk`, as sent (DPoP proofs carry their public key here).
    pub jwk: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    #[serde(default)]
    typ: Option<String>,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    jwk: Option<serde_json::Value>,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// A compact JWS split into its parts, signature not yet checked.
#[derive(Debug)]
pub struct UnverifiedJws<'a> {
    header: JoseHeader,
    payload: Vec<u8>,
    signing_input: &'a str,
    signature: &'a str,
}

impl<'a> UnverifiedJws<'a> {
    /// Splits `compact` into header, payload and signature: exactly three unpadded base64url
    /// segments, a JSON object header with a string `alg`, no `crit`.
    pub fn parse(compact: &'a str) -> Result<Self, JoseError> {
        if compact.len() > MAX_COMPACT_LEN {
            return Err(JoseError::Malformed);
        }
        let mut parts = compact.split('.');
        let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(JoseError::Malformed);
        };
        if h.is_empty() || p.is_empty() || s.is_empty() {
            return Err(JoseError::Malformed);
        }
        let header_json = URL_SAFE_NO_PAD.decode(h).map_err(|_| JoseError::Malformed)?;
        let raw: RawHeader = serde_json::from_slice(&header_json).map_err(|_| JoseError::Malformed)?;
        if raw.crit.is_some() {
            return Err(JoseError::CriticalHeader);
        }
        let payload = URL_SAFE_NO_PAD.decode(p).map_err(|_| JoseError::Malformed)?;
        // Reject a signature that is not base64url now, so every later failure is about keys.
        if !crate::is_base64url(s, 1, usize::MAX) {
            return Err(JoseError::Malformed);
        }
        let signing_input = &compact[..h.len() + 1 + p.len()];
        Ok(Self {
            header: JoseHeader {
                alg: raw.alg,
                typ: raw.typ,
                kid: raw.kid,
                jwk: raw.jwk,
            },
            payload,
            signing_input,
            signature: s,
        })
    }

    /// The protected header.
    pub fn header(&self) -> &JoseHeader {
        &self.header
    }

    /// The decoded payload bytes (untrusted until [`Self::verify_with`] succeeds).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Whether the signature verifies with `key` under `alg`. The key's own algorithm must be
    /// `alg` (no algorithm confusion between key families).
    pub fn verify_with(&self, alg: Algorithm, key: &PublicKey) -> bool {
        if key.alg != alg {
            return false;
        }
        // On the stack: the longest signature a key here can make is RSA-4096's 512 bytes (the
        // import refuses a longer modulus, as `MAX_COMPACT_LEN` assumes); a longer one cannot
        // verify.
        let mut signature = [0u8; 512];
        let Ok(length) = URL_SAFE_NO_PAD.decode_slice(self.signature, &mut signature) else {
            return false;
        };
        let Some(signature) = signature.get(..length) else {
            return false;
        };
        key.verifying
            .verify_sig(self.signing_input.as_bytes(), signature)
            .is_ok()
    }
}

/// Why a JWS could not be read or checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoseError {
    /// The header names critical extensions (`crit`), which PAP defines none of.
    #[error("the JWS header carries crit")]
    CriticalHeader,
    /// Not three unpadded base64url segments with a JSON header, or too long.
    #[error("not a compact JWS")]
    Malformed,
    /// The backend could not sign (a key it cannot load).
    #[error("the key could not sign")]
    Signing,
}

/// The public members of a JWK, as published in a JWKS (RFC 7517, RFC 7518 §6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicJwk {
    /// `EC` or `RSA`.
    pub kty: String,
    /// `P-256` for EC keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    /// EC x coordinate, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// EC y coordinate, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// RSA modulus, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    /// RSA exponent, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
    /// Key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// Intended algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// Intended use; only `sig` is meaningful here.
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
}

/// Members that only a private key has (RFC 7518 §6.2.2, §6.3.2, §6.4.1).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// A verified-usable public key from a JWKS: its algorithm is fixed by its family (and `alg`
/// when present), so it can only verify that algorithm.
#[derive(Clone)]
pub struct PublicKey {
    alg: Algorithm,
    kid: Option<String>,
    jwk: PublicJwk,
    /// Parsed once here, not per verification: the point decoded and checked to be on the
    /// curve, or the modulus read, when the key is imported.
    verifying: ParsedPublicKey,
}

impl PublicKey {
    /// Imports one JWK object. `Ok(None)` for a key type PAP does not use (RFC 7517 §5: ignore
    /// JWKs whose `kty` is not understood); an error for a key that is wrong for its type.
    pub fn from_jwk(value: &serde_json::Value) -> Result<Option<Self>, JwkError> {
        let object = value.as_object().ok_or(JwkError::NotAnObject)?;
        if PRIVATE_MEMBERS.iter().any(|m| object.contains_key(*m)) {
            return Err(JwkError::PrivateMember);
        }
        let jwk: PublicJwk = serde_json::from_value(value.clone()).map_err(|_| JwkError::NotAnObject)?;
        if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
            return Err(JwkError::NotForSigning);
        }
        let alg = match jwk.kty.as_str() {
            "EC" => Algorithm::Es256,
            "RSA" => Algorithm::Rs256,
            _ => return Ok(None),
        };
        if jwk.alg.as_deref().is_some_and(|a| a != alg.name()) {
            return Err(JwkError::AlgorithmMismatch);
        }
        let verifying = match alg {
            Algorithm::Es256 => ec_key(&jwk)?,
            Algorithm::Rs256 => rsa_key(&jwk)?,
        };
        Ok(Some(Self {
            alg,
            kid: jwk.kid.clone(),
            jwk,
            verifying,
        }))
    }

    /// The algorithm this key verifies.
    pub fn alg(&self) -> Algorithm {
        self.alg
    }

    /// The key's `kid`, if it has one.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// The public JWK as imported.
    pub fn jwk(&self) -> &PublicJwk {
        &self.jwk
    }

    /// The RFC 7638 thumbprint: SHA-256 over the required members in lexicographic order with
    /// no whitespace, base64url. DPoP binds tokens to it (RFC 9449 §6).
    pub fn thumbprint(&self) -> String {
        use sha2::Digest as _;
        let canonical = match self.alg {
            Algorithm::Es256 => serde_json::json!({
                "crv": self.jwk.crv, "kty": "EC", "x": self.jwk.x, "y": self.jwk.y
            }),
            Algorithm::Rs256 => serde_json::json!({ "e": self.jwk.e, "kty": "RSA", "n": self.jwk.n }),
        };
        // serde_json's map is ordered by key and `to_vec` writes no whitespace.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(bytes))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

fn decode_b64(text: Option<&str>) -> Result<Vec<u8>, JwkError> {
    let text = text.ok_or(JwkError::MissingMember)?;
    URL_SAFE_NO_PAD.decode(text).map_err(|_| JwkError::BadKeyMaterial)
}

fn ec_key(jwk: &PublicJwk) -> Result<ParsedPublicKey, JwkError> {
    if jwk.crv.as_deref() != Some("P-256") {
        return Err(JwkError::UnsupportedCurve);
    }
    let x = decode_b64(jwk.x.as_deref())?;
    let y = decode_b64(jwk.y.as_deref())?;
    if x.len() != 32 || y.len() != 32 {
        return Err(JwkError::BadKeyMaterial);
    }
    let mut sec1 = Vec::with_capacity(65);
    sec1.push(0x04);
    sec1.extend_from_slice(&x);
    sec1.extend_from_slice(&y);
    // A point that is not on the curve is refused now, not at first use.
    ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &sec1).map_err(|_| JwkError::BadKeyMaterial)
}

fn rsa_key(jwk: &PublicJwk) -> Result<ParsedPublicKey, JwkError> {
    let n = decode_b64(jwk.n.as_deref())?;
    let e = decode_b64(jwk.e.as_deref())?;
    let modulus = rsa::BigUint::from_bytes_be(&n);
    if modulus.bits() < MIN_RSA_BITS {
        return Err(JwkError::WeakRsaKey);
    }
    let key = rsa::RsaPublicKey::new(modulus, rsa::BigUint::from_bytes_be(&e)).map_err(|_| JwkError::BadKeyMaterial)?;
    // RFC 8017's `RSAPublicKey`, which aws-lc reads.
    let der = key.to_pkcs1_der().map_err(|_| JwkError::BadKeyMaterial)?;
    ParsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, der.as_bytes()).map_err(|_| JwkError::BadKeyMaterial)
}

/// Most keys a JWKS may list. An agent needs one, two while it rotates; a set past this is
/// refused whole, so one request naming a `kid`-less header costs at most this many signature
/// checks (security review M1: some 900 P-256 keys fit in 100 KiB).
pub const MAX_JWKS_KEYS: usize = 16;

/// A JSON Web Key Set (RFC 7517 §5) of usable public keys, in publication order.
#[derive(Clone, Debug)]
pub struct Jwks {
    keys: Vec<PublicKey>,
}

impl Jwks {
    /// Parses a JWKS document: `{"keys": [...]}` with at least one EC P-256 or RSA key, at
    /// most [`MAX_JWKS_KEYS`] keys, each `kid` at most once. One bad key (private members,
    /// another curve, an `alg` or `use` that does not fit) refuses the whole set: a publisher
    /// that leaks a private key must not be half-trusted.
    pub fn parse(json: &[u8]) -> Result<Self, JwkError> {
        let value: serde_json::Value = serde_json::from_slice(json).map_err(|_| JwkError::NotAnObject)?;
        let keys = value
            .get("keys")
            .and_then(|k| k.as_array())
            .ok_or(JwkError::NotAnObject)?;
        if keys.len() > MAX_JWKS_KEYS {
            return Err(JwkError::TooManyKeys);
        }
        let mut usable: Vec<PublicKey> = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(key) = PublicKey::from_jwk(key)? {
                if key.kid.is_some() && usable.iter().any(|k| k.kid == key.kid) {
                    return Err(JwkError::DuplicateKid);
                }
                usable.push(key);
            }
        }
        if usable.is_empty() {
            return Err(JwkError::NoUsableKey);
        }
        Ok(Self { keys: usable })
    }

    /// A set of the given keys.
    pub fn from_keys(keys: Vec<PublicKey>) -> Self {
        Self { keys }
    }

    /// All keys.
    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// The keys that may verify a JWS with header `alg` and `kid`: when the header names a `kid`,
    /// only keys with that same `kid` (a key without one is skipped); otherwise every key; and
    /// always only keys of that algorithm.
    pub fn candidates<'a>(&'a self, alg: Algorithm, kid: Option<&'a str>) -> impl Iterator<Item = &'a PublicKey> + 'a {
        self.keys
            .iter()
            .filter(move |k| k.alg == alg && kid.is_none_or(|kid| k.kid.as_deref() == Some(kid)))
    }

    /// Whether a key with this `kid` is in the set.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// The set as a JWKS JSON document.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "keys": self.keys.iter().map(|k| &k.jwk).collect::<Vec<_>>() })
    }
}

/// Why a JWK or JWKS is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    /// `alg` names another algorithm than the key type allows.
    #[error("the key's alg does not fit its type")]
    AlgorithmMismatch,
    /// Coordinates or modulus are not valid base64url, the wrong size, or not a valid key.
    #[error("the key material is invalid")]
    BadKeyMaterial,
    /// Two keys of the set share a `kid`: which one a header names would be a guess.
    #[error("two keys share a kid")]
    DuplicateKid,
    /// A required member (`x`, `y`, `n`, `e`) is missing.
    #[error("a required key member is missing")]
    MissingMember,
    /// The set has no EC P-256 or RSA key.
    #[error("the key set has no usable key")]
    NoUsableKey,
    /// Not a JSON object of the expected shape.
    #[error("not a JWK or JWKS object")]
    NotAnObject,
    /// `use` is present and not `sig`.
    #[error("the key is not for signatures")]
    NotForSigning,
    /// The set lists more than [`MAX_JWKS_KEYS`] keys.
    #[error("the key set has more than 16 keys")]
    TooManyKeys,
    /// The JWK carries private key members.
    #[error("the key carries private members")]
    PrivateMember,
    /// An EC key on another curve than P-256.
    #[error("the EC key is not on P-256")]
    UnsupportedCurve,
    /// An RSA modulus shorter than [`MIN_RSA_BITS`].
    #[error("the RSA key is too short")]
    WeakRsaKey,
}

/// A private signing key (P-256 for ES256, or RSA for RS256) with its `kid`.
///
/// No `Clone`, `Display` or `Serialize`; `Debug` shows only the algorithm and `kid`. The PKCS#8
/// encoding is read through [`Self::to_pkcs8_pem`], which returns a zeroizing string.
pub struct SigningKey {
    alg: Algorithm,
    encoding: EncodingKey,
    public: PublicKey,
    pkcs8_pem: Zeroizing<String>,
}

impl SigningKey {
    /// A fresh P-256 key for ES256.
    pub fn generate_es256(rng: &dyn Rng, kid: &str) -> Result<Self, KeyError> {
        let secret = p256::SecretKey::random(&mut RngAdapter(rng));
        let pem = secret.to_pkcs8_pem(LineEnding::LF).map_err(|_| KeyError::Encoding)?;
        Self::from_pkcs8_pem(&pem, kid)
    }

    /// A fresh RSA key of `bits` bits for RS256.
    pub fn generate_rs256(rng: &dyn Rng, bits: usize, kid: &str) -> Result<Self, KeyError> {
        if bits < MIN_RSA_BITS {
            return Err(KeyError::Unsupported);
        }
        let secret = rsa::RsaPrivateKey::new(&mut RngAdapter(rng), bits).map_err(|_| KeyError::Encoding)?;
        let pem =
            rsa::pkcs8::EncodePrivateKey::to_pkcs8_pem(&secret, LineEnding::LF).map_err(|_| KeyError::Encoding)?;
        Self::from_pkcs8_pem(&pem, kid)
    }

    /// Loads a PKCS#8 PEM private key (P-256 or RSA).
    pub fn from_pkcs8_pem(pem: &str, kid: &str) -> Result<Self, KeyError> {
        if let Ok(secret) = p256::SecretKey::from_pkcs8_pem(pem) {
            let point = p256::EncodedPoint::from(secret.public_key());
            let (Some(x), Some(y)) = (point.x(), point.y()) else {
                return Err(KeyError::Encoding);
            };
            let der = secret.to_pkcs8_der().map_err(|_| KeyError::Encoding)?;
            let jwk = PublicJwk {
                kty: "EC".into(),
                crv: Some("P-256".into()),
                x: Some(URL_SAFE_NO_PAD.encode(x)),
                y: Some(URL_SAFE_NO_PAD.encode(y)),
                n: None,
                e: None,
                kid: Some(kid.to_owned()),
                alg: Some("ES256".into()),
                use_: Some("sig".into()),
            };
            return Self::assemble(Algorithm::Es256, EncodingKey::from_ec_der(der.as_bytes()), &jwk, pem);
        }
        if let Ok(secret) = <rsa::RsaPrivateKey as rsa::pkcs8::DecodePrivateKey>::from_pkcs8_pem(pem) {
            if secret.size() * 8 < MIN_RSA_BITS {
                return Err(KeyError::Unsupported);
            }
            let pkcs1 = secret.to_pkcs1_der().map_err(|_| KeyError::Encoding)?;
            let jwk = PublicJwk {
                kty: "RSA".into(),
                crv: None,
                x: None,
                y: None,
                n: Some(URL_SAFE_NO_PAD.encode(secret.n().to_bytes_be())),
                e: Some(URL_SAFE_NO_PAD.encode(secret.e().to_bytes_be())),
                kid: Some(kid.to_owned()),
                alg: Some("RS256".into()),
                use_: Some("sig".into()),
            };
            return Self::assemble(Algorithm::Rs256, EncodingKey::from_rsa_der(pkcs1.as_bytes()), &jwk, pem);
        }
        Err(KeyError::Unsupported)
    }

    fn assemble(alg: Algorithm, encoding: EncodingKey, jwk: &PublicJwk, pem: &str) -> Result<Self, KeyError> {
        let value = serde_json::to_value(jwk).map_err(|_| KeyError::Encoding)?;
        let public = PublicKey::from_jwk(&value)
            .map_err(|_| KeyError::Encoding)?
            .ok_or(KeyError::Encoding)?;
        Ok(Self {
            alg,
            encoding,
            public,
            pkcs8_pem: Zeroizing::new(pem.to_owned()),
        })
    }

    /// The algorithm this key signs with.
    pub fn alg(&self) -> Algorithm {
        self.alg
    }

    /// The key's `kid`.
    pub fn kid(&self) -> &str {
        self.public.kid().unwrap_or_default()
    }

    /// The matching public key, for a JWKS.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The private key as PKCS#8 PEM.
    ///
    /// # Security Warning
    ///
    /// This is the key itself: write it only to a 0600 file.
    pub fn to_pkcs8_pem(&self) -> Zeroizing<String> {
        self.pkcs8_pem.clone()
    }

    /// Signs `claims` as a compact JWS with header `{"alg", "typ", "kid"}`: every segment
    /// unpadded base64url, ECDSA signatures raw `r || s` (PAP pitfalls, wire doc §6.5).
    pub fn sign(&self, typ: &str, claims: &impl Serialize) -> Result<CompactJws, JoseError> {
        let header = serde_json::json!({ "alg": self.alg.name(), "typ": typ, "kid": self.kid() });
        self.sign_with_header(&header, claims)
    }

    /// Signs `claims` with `header` as given (its `alg` must be this key's): for DPoP proofs,
    /// whose header carries the public `jwk` instead of a `kid`.
    pub fn sign_with_header(
        &self,
        header: &serde_json::Value,
        claims: &impl Serialize,
    ) -> Result<CompactJws, JoseError> {
        if header.get("alg").and_then(|a| a.as_str()) != Some(self.alg.name()) {
            return Err(JoseError::Signing);
        }
        let header = serde_json::to_vec(header).map_err(|_| JoseError::Signing)?;
        let payload = serde_json::to_vec(claims).map_err(|_| JoseError::Signing)?;
        let mut compact = String::with_capacity(512);
        URL_SAFE_NO_PAD.encode_string(header, &mut compact);
        compact.push('.');
        URL_SAFE_NO_PAD.encode_string(payload, &mut compact);
        let signature = jsonwebtoken::crypto::sign(compact.as_bytes(), &self.encoding, self.alg.backend())
            .map_err(|_| JoseError::Signing)?;
        compact.push('.');
        compact.push_str(&signature);
        Ok(CompactJws::new(compact))
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid())
            .finish_non_exhaustive()
    }
}

/// Why a private key could not be made or loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key could not be encoded or decoded.
    #[error("the key could not be encoded")]
    Encoding,
    /// Not a PKCS#8 P-256 or RSA (at least 2048-bit) private key.
    #[error("not a PKCS#8 P-256 or RSA private key")]
    Unsupported,
}

#[cfg(test)]
mod tests;
