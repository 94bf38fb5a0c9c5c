//! The daemon's static keys (AIP-59 "Roles"): an X25519 key pair for the sealed hello and
//! the key agreement, an Ed25519 key pair for the signed reply, and the fingerprint that
//! names the daemon: the first 32 lowercase hex characters (128 bits) of the SHA-256 of its
//! X25519 public key in SPKI DER.
//!
//! Public keys travel as SPKI DER (standard base64 in the handshake, base64url in an offer);
//! private keys are kept as PKCS #8 v1 DER, the form the reference stores. Both encodings of
//! these two curves are a fixed prefix and 32 bytes, so they are read and written here rather
//! than through a general ASN.1 parser.

use std::fmt;

use aws_lc_rs::agreement::{self, X25519};
use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use pap_shared::Rng;
use zeroize::Zeroizing;

use crate::PairError;

const X25519_SPKI: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x03, 0x21, 0x00];
const ED25519_SPKI: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
const X25519_PKCS8: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20,
];
const ED25519_PKCS8: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// How many hex characters of the SHA-256 a fingerprint keeps (128 bits).
pub const FINGERPRINT_HEX: usize = 32;

/// Whether `text` is a fingerprint: exactly [`FINGERPRINT_HEX`] lowercase hex characters
/// (`^[0-9a-f]{32}$`; safe as a file name too).
pub fn is_fingerprint(text: &str) -> bool {
    text.len() == FINGERPRINT_HEX && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The 32 raw bytes after `prefix` in `der`, or `None` when `der` is not exactly that.
fn after_prefix<'a>(der: &'a [u8], prefix: &[u8]) -> Option<&'a [u8; 32]> {
    der.strip_prefix(prefix)?.try_into().ok()
}

/// An X25519 public key, kept as its 32 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct X25519Public([u8; 32]);

impl X25519Public {
    /// From SPKI DER; refused unless it is exactly an X25519 SPKI.
    pub fn from_spki(der: &[u8]) -> Result<Self, PairError> {
        after_prefix(der, &X25519_SPKI)
            .map(|raw| Self(*raw))
            .ok_or(PairError::InvalidKey)
    }

    /// The SPKI DER (44 bytes).
    pub fn to_spki(&self) -> Vec<u8> {
        [&X25519_SPKI[..], &self.0].concat()
    }

    /// The raw 32 bytes.
    pub fn raw(&self) -> &[u8; 32] {
        &self.0
    }

    /// The daemon fingerprint of this key (AIP-59: 32 lowercase hex of SHA-256 over the SPKI).
    pub fn fingerprint(&self) -> String {
        let hash = digest(&SHA256, &self.to_spki());
        let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        hex[..FINGERPRINT_HEX].to_owned()
    }
}

impl fmt::Debug for X25519Public {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "X25519Public({})", self.fingerprint())
    }
}

/// An Ed25519 public key, kept as its 32 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ed25519Public([u8; 32]);

impl Ed25519Public {
    /// From SPKI DER; refused unless it is exactly an Ed25519 SPKI.
    pub fn from_spki(der: &[u8]) -> Result<Self, PairError> {
        after_prefix(der, &ED25519_SPKI)
            .map(|raw| Self(*raw))
            .ok_or(PairError::InvalidKey)
    }

    /// The SPKI DER (44 bytes).
    pub fn to_spki(&self) -> Vec<u8> {
        [&ED25519_SPKI[..], &self.0].concat()
    }

    /// Whether `signature` is this key's over `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(message, signature)
            .is_ok()
    }
}

impl fmt::Debug for Ed25519Public {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ed25519Public(..)")
    }
}

/// An X25519 private key (static or ephemeral): its 32 bytes, wiped when dropped.
pub struct X25519Secret(Zeroizing<[u8; 32]>);

impl X25519Secret {
    /// A fresh key from `rng`.
    pub fn generate(rng: &dyn Rng) -> Self {
        let mut bytes = Zeroizing::new([0_u8; 32]);
        rng.fill(bytes.as_mut());
        Self(bytes)
    }

    /// From PKCS #8 v1 DER.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, PairError> {
        after_prefix(der, &X25519_PKCS8)
            .map(|raw| Self(Zeroizing::new(*raw)))
            .ok_or(PairError::InvalidKey)
    }

    /// The PKCS #8 v1 DER (48 bytes), for the state directory.
    pub fn to_pkcs8(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new([&X25519_PKCS8[..], &self.0[..]].concat())
    }

    fn key(&self) -> Result<agreement::PrivateKey, PairError> {
        agreement::PrivateKey::from_private_key(&X25519, self.0.as_ref()).map_err(|_| PairError::InvalidKey)
    }

    /// Its public key.
    pub fn public(&self) -> Result<X25519Public, PairError> {
        let public = self.key()?.compute_public_key().map_err(|_| PairError::InvalidKey)?;
        public
            .as_ref()
            .try_into()
            .map(X25519Public)
            .map_err(|_| PairError::InvalidKey)
    }

    /// The X25519 shared secret with `peer`; refused for a low-order peer key (an all-zero
    /// secret).
    pub fn agree(&self, peer: &X25519Public) -> Result<Zeroizing<[u8; 32]>, PairError> {
        let peer = agreement::UnparsedPublicKey::new(&X25519, peer.raw());
        agreement::agree(&self.key()?, peer, PairError::InvalidKey, |shared| {
            let mut out = Zeroizing::new([0_u8; 32]);
            if shared.len() != 32 || shared.iter().all(|b| *b == 0) {
                return Err(PairError::InvalidKey);
            }
            out.copy_from_slice(shared);
            Ok(out)
        })
    }
}

impl fmt::Debug for X25519Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("X25519Secret([redacted])")
    }
}

/// An Ed25519 key pair, from its 32-byte seed (wiped when dropped).
pub struct Ed25519Secret {
    seed: Zeroizing<[u8; 32]>,
    pair: Ed25519KeyPair,
}

impl Ed25519Secret {
    /// A fresh key pair from `rng`.
    pub fn generate(rng: &dyn Rng) -> Result<Self, PairError> {
        let mut seed = Zeroizing::new([0_u8; 32]);
        rng.fill(seed.as_mut());
        Self::from_seed(seed)
    }

    fn from_seed(seed: Zeroizing<[u8; 32]>) -> Result<Self, PairError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed.as_ref()).map_err(|_| PairError::InvalidKey)?;
        Ok(Self { seed, pair })
    }

    /// From PKCS #8 v1 DER (the seed alone).
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, PairError> {
        let seed = after_prefix(der, &ED25519_PKCS8).ok_or(PairError::InvalidKey)?;
        Self::from_seed(Zeroizing::new(*seed))
    }

    /// The PKCS #8 v1 DER (48 bytes), for the state directory.
    pub fn to_pkcs8(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new([&ED25519_PKCS8[..], &self.seed[..]].concat())
    }

    /// Its public key.
    pub fn public(&self) -> Result<Ed25519Public, PairError> {
        self.pair
            .public_key()
            .as_ref()
            .try_into()
            .map(Ed25519Public)
            .map_err(|_| PairError::InvalidKey)
    }

    /// Its signature over `message` (64 bytes).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }
}

impl fmt::Debug for Ed25519Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ed25519Secret([redacted])")
    }
}

/// The daemon's static identity: what it seals to, signs with, and is named by.
#[derive(Debug)]
pub struct DaemonKeys {
    /// The X25519 key the hello is sealed to and the second key agreement uses.
    pub x25519: X25519Secret,
    /// The Ed25519 key the reply's transcript is signed with.
    pub ed25519: Ed25519Secret,
}

impl DaemonKeys {
    /// A fresh identity from `rng`.
    pub fn generate(rng: &dyn Rng) -> Result<Self, PairError> {
        Ok(Self {
            x25519: X25519Secret::generate(rng),
            ed25519: Ed25519Secret::generate(rng)?,
        })
    }

    /// The daemon fingerprint (32 lowercase hex).
    pub fn fingerprint(&self) -> Result<String, PairError> {
        Ok(self.x25519.public()?.fingerprint())
    }
}
