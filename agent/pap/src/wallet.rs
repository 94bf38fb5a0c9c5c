//! What the agent keeps about each company between runs of the CLI: the pairwise User ID, the
//! DPoP key of (company, user), and the Session and Account Token. One file per company, sealed
//! (AES-256-GCM under the state directory's key), mode 0600, in the 0700 state directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pap_shared::{CompanyDomain, PairwiseUserId, SessionId, SigningKey, UnixTime};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::client::Session;
use pap_browser::store::SealingKey;
use pap_browser::store::{private_dir, write_private};
use pap_shared::SecretToken;

/// Bound into every sealed company record, with the company's domain: a record sealed for one
/// company does not open as another's, so copying `b.example.sealed` over `a.example.sealed`
/// cannot make the agent send B's tokens to A (security review L10).
const PURPOSE: &str = "pap-agent company record v2";

fn purpose(domain: &CompanyDomain) -> String {
    format!("{PURPOSE} for {domain}")
}

#[derive(Serialize, Deserialize)]
struct Stored {
    user: String,
    dpop_key_pem: String,
    session_id: Option<String>,
    access_token: Option<String>,
    signed_in: bool,
    scope: String,
    expires_at: i64,
    account_token: Option<String>,
}

/// The agent's record of one company.
#[derive(Debug)]
pub struct Wallet {
    path: PathBuf,
    domain: CompanyDomain,
    /// The pairwise User ID for this company.
    pub user: PairwiseUserId,
    /// The DPoP key of (this company, this user).
    pub dpop_key: Arc<SigningKey>,
    /// The current Session, if any.
    pub session: Option<Session>,
}

impl Wallet {
    /// Loads the record of `domain`, if there is one, opening it with `key`.
    pub fn load(state_dir: &Path, domain: &CompanyDomain, key: &SealingKey) -> Result<Option<Self>, WalletError> {
        let path = Self::path(state_dir, domain)?;
        let Ok(sealed) = std::fs::read(&path) else {
            return Ok(None);
        };
        let text = key
            .open_sealed(&purpose(domain), &sealed)
            .map_err(|_| WalletError::Corrupt)?;
        let stored: Stored = serde_json::from_slice(&text).map_err(|_| WalletError::Corrupt)?;
        let user = PairwiseUserId::parse(&stored.user).map_err(|_| WalletError::Corrupt)?;
        let dpop_key =
            Arc::new(SigningKey::from_pkcs8_pem(&stored.dpop_key_pem, "dpop").map_err(|_| WalletError::Corrupt)?);
        let session = match (stored.session_id, stored.access_token) {
            (Some(id), Some(token)) => Some(Session {
                session_id: SessionId::parse(&id).map_err(|_| WalletError::Corrupt)?,
                user: user.clone(),
                access_token: SecretToken::new(token),
                signed_in: stored.signed_in,
                scope: stored.scope,
                expires_at: UnixTime::from_secs(stored.expires_at),
                account_token: stored.account_token.map(SecretToken::new),
                dpop_key: dpop_key.clone(),
            }),
            _ => None,
        };
        Ok(Some(Self {
            path,
            domain: domain.clone(),
            user,
            dpop_key,
            session,
        }))
    }

    /// A new record for `domain` with `user` and `dpop_key`.
    pub fn new(
        state_dir: &Path,
        domain: &CompanyDomain,
        user: PairwiseUserId,
        dpop_key: Arc<SigningKey>,
    ) -> Result<Self, WalletError> {
        Ok(Self {
            path: Self::path(state_dir, domain)?,
            domain: domain.clone(),
            user,
            dpop_key,
            session: None,
        })
    }

    fn path(state_dir: &Path, domain: &CompanyDomain) -> Result<PathBuf, WalletError> {
        let dir = private_dir(&state_dir.join("companies")).map_err(WalletError::Io)?;
        Ok(dir.join(format!("{domain}.sealed")))
    }

    /// Writes the record, sealed with `key` (0600, atomically).
    pub fn save(&self, key: &SealingKey, rng: &dyn pap_shared::Rng) -> Result<(), WalletError> {
        let session = self.session.as_ref();
        let stored = Stored {
            user: self.user.as_str().to_owned(),
            dpop_key_pem: self.dpop_key.to_pkcs8_pem().to_string(),
            session_id: session.map(|s| s.session_id.as_str().to_owned()),
            access_token: session.map(|s| s.access_token.secret().to_owned()),
            signed_in: session.is_some_and(|s| s.signed_in),
            scope: session.map(|s| s.scope.clone()).unwrap_or_default(),
            expires_at: session.map_or(0, |s| s.expires_at.as_secs()),
            account_token: session
                .and_then(|s| s.account_token.as_ref())
                .map(|t| t.secret().to_owned()),
        };
        let text = Zeroizing::new(serde_json::to_string(&stored).map_err(|_| WalletError::Corrupt)?);
        let sealed = key
            .seal(rng, &purpose(&self.domain), text.as_bytes())
            .map_err(|_| WalletError::Corrupt)?;
        write_private(&self.path, &sealed).map_err(WalletError::Io)
    }
}

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    /// The file is not a record this agent sealed (changed, or another key).
    #[error("the company record is corrupt or was sealed with another key")]
    Corrupt,
    /// The file could not be read or written.
    #[error("the company record could not be read or written")]
    Io(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use pap_shared::SystemRng;

    use super::*;

    #[test]
    fn records_are_sealed_at_rest_and_refused_when_changed() {
        let dir = std::env::temp_dir().join(format!("pap-wallet-{}", std::process::id()));
        let key = SealingKey::open(&dir, &SystemRng).unwrap();
        let domain = CompanyDomain::try_from("shop.example").unwrap();
        let dpop = Arc::new(SigningKey::generate_es256(&SystemRng, "dpop").unwrap());
        let user = PairwiseUserId::parse("usr_test").unwrap();
        let mut wallet = Wallet::new(&dir, &domain, user.clone(), dpop.clone()).unwrap();
        wallet.session = Some(Session {
            session_id: SessionId::parse("ses_1").unwrap(),
            user,
            access_token: SecretToken::new("sat_VERYSECRETSESSIONTOKEN".into()),
            signed_in: true,
            scope: "orders:read".into(),
            expires_at: UnixTime::from_secs(1_900_000_000),
            account_token: Some(SecretToken::new("acct_VERYSECRETACCOUNTTOKEN".into())),
            dpop_key: dpop,
        });
        wallet.save(&key, &SystemRng).unwrap();
        let on_disk = std::fs::read(dir.join("companies/shop.example.sealed")).unwrap();
        let text = String::from_utf8_lossy(&on_disk);
        assert!(
            !text.contains("VERYSECRET") && !text.contains("PRIVATE KEY"),
            "a secret is readable at rest"
        );
        let loaded = Wallet::load(&dir, &domain, &key).unwrap().unwrap();
        assert_eq!(
            loaded.session.unwrap().account_token.unwrap().secret(),
            "acct_VERYSECRETACCOUNTTOKEN"
        );
        let mut changed = on_disk.clone();
        changed[20] ^= 1;
        std::fs::write(dir.join("companies/shop.example.sealed"), changed).unwrap();
        assert!(matches!(Wallet::load(&dir, &domain, &key), Err(WalletError::Corrupt)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[allow(clippy::unwrap_used, reason = "tests fail loudly")]
    #[test]
    fn a_record_copied_over_another_companys_does_not_open() {
        let state = std::env::temp_dir().join(format!("pap-wallet-swap-{}", std::process::id()));
        let key = SealingKey::open(&state, &SystemRng).unwrap();
        let (a, b) = (
            CompanyDomain::try_from("a.example").unwrap(),
            CompanyDomain::try_from("b.example").unwrap(),
        );
        let user = crate::new_pairwise_user(&SystemRng);
        let dpop = Arc::new(SigningKey::generate_es256(&SystemRng, "dpop").unwrap());
        Wallet::new(&state, &b, user, dpop)
            .unwrap()
            .save(&key, &SystemRng)
            .unwrap();
        assert!(Wallet::load(&state, &b, &key).unwrap().is_some());
        let b_path = state.join("companies").join("b.example.sealed");
        std::fs::copy(&b_path, state.join("companies").join("a.example.sealed")).unwrap();
        assert!(matches!(Wallet::load(&state, &a, &key), Err(WalletError::Corrupt)));
        std::fs::remove_dir_all(&state).unwrap();
    }
}
