//! The seal box the hello travels in (AIP-59 §3.1): X25519 with a fresh ephemeral key, the
//! shared secret through HKDF-SHA256 (salt: the ephemeral then the recipient public key in
//! SPKI DER, info `agentproto/secrets/seal v1`) into an AES-256-GCM key, and the envelope
//! `{"v":1,"alg":…,"epk":…,"iv":…,"ct":…,"tag":…}` as standard base64 of its JSON.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::PairError;
use crate::derive::hkdf;
use crate::keys::{X25519Public, X25519Secret};

const SEAL_INFO: &[u8] = b"agentproto/secrets/seal v1";
const SEAL_ALG: &str = "x25519-hkdf-sha256-aes256gcm";
const TAG_LEN: usize = 16;

#[derive(Serialize, Deserialize)]
struct Envelope {
    v: u8,
    alg: String,
    epk: String,
    iv: String,
    ct: String,
    tag: String,
}

fn key(shared: &[u8; 32], epk: &X25519Public, recipient: &X25519Public) -> Result<LessSafeKey, PairError> {
    let salt = [epk.to_spki(), recipient.to_spki()].concat();
    let okm = hkdf(shared, &salt, &[SEAL_INFO], 32)?;
    let unbound = UnboundKey::new(&AES_256_GCM, &okm).map_err(|_| PairError::Crypto)?;
    Ok(LessSafeKey::new(unbound))
}

/// Seals `plaintext` to `recipient` with the ephemeral key `ephemeral` and the 12-byte `iv`
/// (both fresh for every seal: the caller draws them from its RNG).
pub fn seal(
    plaintext: &[u8],
    recipient: &X25519Public,
    ephemeral: &X25519Secret,
    iv: [u8; 12],
) -> Result<String, PairError> {
    let epk = ephemeral.public()?;
    let shared = ephemeral.agree(recipient)?;
    let key = key(&shared, &epk, recipient)?;
    let mut data = plaintext.to_vec();
    let tag = key
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(iv), Aad::empty(), &mut data)
        .map_err(|_| PairError::Crypto)?;
    let envelope = Envelope {
        v: 1,
        alg: SEAL_ALG.to_owned(),
        epk: STANDARD.encode(epk.to_spki()),
        iv: STANDARD.encode(iv),
        ct: STANDARD.encode(&data),
        tag: STANDARD.encode(tag.as_ref()),
    };
    let json = serde_json::to_vec(&envelope).map_err(|_| PairError::Crypto)?;
    Ok(STANDARD.encode(json))
}

/// Opens a sealed envelope with the recipient's key: the plaintext, or [`PairError::Unseal`]
/// for anything malformed, another version, a wrong key or a tampered byte.
pub fn unseal(sealed: &str, recipient: &X25519Secret) -> Result<Zeroizing<Vec<u8>>, PairError> {
    let json = STANDARD.decode(sealed).map_err(|_| PairError::Unseal)?;
    let envelope: Envelope = serde_json::from_slice(&json).map_err(|_| PairError::Unseal)?;
    if envelope.v != 1 || envelope.alg != SEAL_ALG {
        return Err(PairError::Unseal);
    }
    let decode = |text: &str| STANDARD.decode(text).map_err(|_| PairError::Unseal);
    let epk = X25519Public::from_spki(&decode(&envelope.epk)?).map_err(|_| PairError::Unseal)?;
    let iv: [u8; 12] = decode(&envelope.iv)?.try_into().map_err(|_| PairError::Unseal)?;
    let tag = decode(&envelope.tag)?;
    if tag.len() != TAG_LEN {
        return Err(PairError::Unseal);
    }
    let shared = recipient.agree(&epk).map_err(|_| PairError::Unseal)?;
    let key = key(&shared, &epk, &recipient.public()?)?;
    let mut data = Zeroizing::new([decode(&envelope.ct)?, tag].concat());
    let plain_len = key
        .open_in_place(Nonce::assume_unique_for_key(iv), Aad::empty(), &mut data)
        .map_err(|_| PairError::Unseal)?
        .len();
    data.truncate(plain_len);
    Ok(data)
}
