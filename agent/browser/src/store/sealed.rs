//! Secrets at rest (AIP-63 C11: encryption of session material, the agentbrowser/v2 MUST, early):
//! AES-256-GCM with a random 96-bit nonce per file, under a 32-byte key kept in a 0600 file in the
//! 0700 state directory. What the agent keeps about companies (Session and Account Tokens) is
//! stored sealed.

use std::fmt;
use std::path::Path;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use zeroize::Zeroizing;

use super::{private_dir, write_private};
use pap_shared::Rng;

/// What a sealed file starts with, so a plaintext or foreign file is told apart.
const MAGIC: &[u8; 8] = b"pap-sld1";

/// The state directory's sealing key. No `Debug` of the key, no `Clone`.
pub struct SealingKey {
    key: LessSafeKey,
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealingKey([redacted])")
    }
}

impl SealingKey {
    /// Loads `state_dir/keys/store.key`, or makes it (32 random bytes, 0600).
    pub fn open(state_dir: &Path, rng: &dyn Rng) -> Result<Self, SealError> {
        let dir = private_dir(&state_dir.join("keys")).map_err(SealError::Io)?;
        let path = dir.join("store.key");
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => Zeroizing::new(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut fresh = Zeroizing::new(vec![0u8; 32]);
                rng.fill(&mut fresh);
                write_private(&path, &fresh).map_err(SealError::Io)?;
                fresh
            }
            Err(e) => return Err(SealError::Io(e)),
        };
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
        })
    }

    /// Seals `plaintext`: magic, nonce, ciphertext and tag. `purpose` is bound as associated
    /// data, so a sealed file cannot be swapped for another kind.
    pub fn seal(&self, rng: &dyn Rng, purpose: &str, plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill(&mut nonce);
        let mut in_out = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(purpose.as_bytes()),
                &mut in_out,
            )
            .map_err(|_| SealError::Crypto)?;
        let mut out = Vec::with_capacity(MAGIC.len() + NONCE_LEN + in_out.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&in_out);
        Ok(out)
    }

    /// Opens what [`Self::seal`] made for `purpose`; any change to it, another key or another
    /// purpose fails.
    pub fn open_sealed(&self, purpose: &str, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let rest = sealed.strip_prefix(MAGIC.as_slice()).ok_or(SealError::NotSealed)?;
        if rest.len() < NONCE_LEN {
            return Err(SealError::NotSealed);
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::NotSealed)?;
        let mut in_out = Zeroizing::new(ciphertext.to_vec());
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(purpose.as_bytes()), &mut in_out)
            .map_err(|_| SealError::Crypto)?
            .len();
        in_out.truncate(plain_len);
        Ok(in_out)
    }
}

/// Why sealing or opening failed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The key file is not a 32-byte key.
    #[error("the sealing key is invalid")]
    BadKey,
    /// Authentication failed: changed, another key, or another purpose.
    #[error("the sealed data does not open with this key")]
    Crypto,
    /// A key or sealed file could not be read or written.
    #[error("a key or sealed file could not be read or written")]
    Io(#[source] std::io::Error),
    /// Not something this agent sealed.
    #[error("the data is not sealed")]
    NotSealed,
}

#[cfg(test)]
mod tests {
    use pap_shared::SystemRng;

    use super::*;

    #[test]
    fn seals_opens_and_refuses_changes_other_keys_and_purposes() {
        let dir = std::env::temp_dir().join(format!("pap-sealed-{}", std::process::id()));
        let key = SealingKey::open(&dir, &SystemRng).unwrap();
        let sealed = key.seal(&SystemRng, "wallet", b"acct_secret-token").unwrap();
        assert!(
            !sealed.windows(17).any(|w| w == b"acct_secret-token"),
            "the plaintext shows"
        );
        assert_eq!(
            key.open_sealed("wallet", &sealed).unwrap().as_slice(),
            b"acct_secret-token"
        );
        // The same key file again: same key.
        let again = SealingKey::open(&dir, &SystemRng).unwrap();
        assert_eq!(
            again.open_sealed("wallet", &sealed).unwrap().as_slice(),
            b"acct_secret-token"
        );
        let mut changed = sealed.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        assert!(matches!(key.open_sealed("wallet", &changed), Err(SealError::Crypto)));
        assert!(matches!(key.open_sealed("other", &sealed), Err(SealError::Crypto)));
        assert!(matches!(
            key.open_sealed("wallet", b"{\"plain\": true}"),
            Err(SealError::NotSealed)
        ));
        let other = SealingKey::open(&dir.join("elsewhere"), &SystemRng).unwrap();
        assert!(matches!(other.open_sealed("wallet", &sealed), Err(SealError::Crypto)));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                std::fs::metadata(dir.join("keys/store.key"))
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o777,
                0o600
            );
            assert_eq!(
                std::fs::metadata(dir.join("keys")).unwrap().permissions().mode() & 0o777,
                0o700
            );
        }
        assert_eq!(format!("{key:?}"), "SealingKey([redacted])");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
