//! What the agent keeps about each company between runs of the CLI: the pairwise User ID, the
//! DPoP key of (company, user), and the Session and Account Token. One file per company and
//! holder, sealed (AES-256-GCM under the state directory's key), mode 0600, in the 0700 state
//! directory.
//!
//! A holder is the agent itself (its operator's CLI: `companies/DOMAIN.sealed`) or one paired
//! device (`companies/devices/DEVICE/DOMAIN.sealed`, review N5): each device has Sessions of
//! its own, which no other device reads, replaces or ends, and which end when it is unpaired.
//! Every holder presents the same pairwise User ID to a company (it is one person's agent); a
//! device's Session has a DPoP key of its own. The holder is sealed into the record with the
//! domain, so a record copied to another holder's place does not open.

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

fn purpose(domain: &CompanyDomain, holder: &Holder) -> String {
    match holder {
        Holder::Agent => format!("{PURPOSE} for {domain}"),
        Holder::Device(id) => format!("{PURPOSE} for {domain} held by device {id}"),
    }
}

/// The person's sites, as the wallet on disk names them (AIP-7, [`pap_browser::persons`]): every
/// company any holder keeps a record of (`companies/DOMAIN.sealed`,
/// `companies/devices/DEVICE/DOMAIN.sealed`), read from the directory at each call, so what one
/// process of the agent starts (a Session from the CLI, another `host stdio`, another device)
/// is the person's in every other, across restarts. File names only: nothing is unsealed.
///
/// A record exists before any join (a join needs a Session, and a Session its record), and
/// stays after sign-out: a company the agent ever held a Session with stays the person's.
#[derive(Clone, Debug)]
pub struct WalletSites {
    companies: PathBuf,
}

impl WalletSites {
    /// The sites of the wallet under `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            companies: state_dir.join("companies"),
        }
    }

    /// The person's table for a browser of the agent whose state is `state_dir`: the wallet's
    /// companies are the sites where the person decides.
    pub fn persons(state_dir: &Path) -> pap_browser::persons::Persons {
        pap_browser::persons::Persons::new(Arc::new(Self::at(state_dir)))
    }
}

impl pap_browser::persons::PersonsSites for WalletSites {
    fn domains(&self) -> std::io::Result<Vec<String>> {
        let mut domains = Vec::new();
        let mut dirs = vec![self.companies.clone()];
        match std::fs::read_dir(self.companies.join("devices")) {
            Ok(devices) => {
                for device in devices {
                    dirs.push(device?.path());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        for dir in dirs {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let name = entry?.file_name();
                let domain = name
                    .to_str()
                    .and_then(|n| n.strip_suffix(".sealed"))
                    .and_then(|d| CompanyDomain::try_from(d).ok());
                domains.extend(domain.map(|d| d.as_str().to_owned()));
            }
        }
        domains.sort();
        domains.dedup();
        Ok(domains)
    }
}

/// Whose record it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// The agent itself: its operator's CLI.
    Agent,
    /// A paired device, by id (`dev_...`).
    Device(String),
}

impl Holder {
    /// The holder a call from `device` (`None`: the local agent) acts as.
    pub fn of(device: Option<&str>) -> Self {
        device.map_or(Self::Agent, |id| Self::Device(id.to_owned()))
    }

    /// Where its records live under `state_dir`. A device id is one path component of
    /// `[A-Za-z0-9_-]` (what pairing mints), anything else is refused.
    fn dir(&self, state_dir: &Path) -> Result<PathBuf, WalletError> {
        let companies = private_dir(&state_dir.join("companies")).map_err(WalletError::Io)?;
        match self {
            Self::Agent => Ok(companies),
            Self::Device(id) => {
                let fits = pap_shared::is_base64url(id, 1, 64);
                if !fits {
                    return Err(WalletError::Holder);
                }
                let devices = private_dir(&companies.join("devices")).map_err(WalletError::Io)?;
                private_dir(&devices.join(id)).map_err(WalletError::Io)
            }
        }
    }
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
    holder: Holder,
    /// The pairwise User ID for this company.
    pub user: PairwiseUserId,
    /// The DPoP key of (this company, this user).
    pub dpop_key: Arc<SigningKey>,
    /// The current Session, if any.
    pub session: Option<Session>,
}

impl Wallet {
    /// Loads the agent's own record of `domain`, if there is one, opening it with `key`.
    pub fn load(state_dir: &Path, domain: &CompanyDomain, key: &SealingKey) -> Result<Option<Self>, WalletError> {
        Self::load_held(state_dir, domain, &Holder::Agent, key)
    }

    /// Loads `holder`'s record of `domain`, if there is one, opening it with `key`.
    pub fn load_held(
        state_dir: &Path,
        domain: &CompanyDomain,
        holder: &Holder,
        key: &SealingKey,
    ) -> Result<Option<Self>, WalletError> {
        let path = Self::path(state_dir, domain, holder)?;
        let Ok(sealed) = std::fs::read(&path) else {
            return Ok(None);
        };
        let text = key
            .open_sealed(&purpose(domain, holder), &sealed)
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
            holder: holder.clone(),
            user,
            dpop_key,
            session,
        }))
    }

    /// A new record of the agent's for `domain` with `user` and `dpop_key`.
    pub fn new(
        state_dir: &Path,
        domain: &CompanyDomain,
        user: PairwiseUserId,
        dpop_key: Arc<SigningKey>,
    ) -> Result<Self, WalletError> {
        Self::new_held(state_dir, domain, Holder::Agent, user, dpop_key)
    }

    /// A new record of `holder`'s for `domain` with `user` and `dpop_key`.
    pub fn new_held(
        state_dir: &Path,
        domain: &CompanyDomain,
        holder: Holder,
        user: PairwiseUserId,
        dpop_key: Arc<SigningKey>,
    ) -> Result<Self, WalletError> {
        Ok(Self {
            path: Self::path(state_dir, domain, &holder)?,
            domain: domain.clone(),
            holder,
            user,
            dpop_key,
            session: None,
        })
    }

    fn path(state_dir: &Path, domain: &CompanyDomain, holder: &Holder) -> Result<PathBuf, WalletError> {
        Ok(holder.dir(state_dir)?.join(format!("{domain}.sealed")))
    }

    /// The companies `device` holds a record of (what unpairing it signs out and removes).
    pub fn held_by_device(state_dir: &Path, device: &str) -> Result<Vec<CompanyDomain>, WalletError> {
        let dir = Holder::Device(device.to_owned()).dir(state_dir)?;
        let entries = std::fs::read_dir(&dir).map_err(WalletError::Io)?;
        let mut domains = Vec::new();
        for entry in entries {
            let name = entry.map_err(WalletError::Io)?.file_name();
            let domain = name
                .to_str()
                .and_then(|n| n.strip_suffix(".sealed"))
                .and_then(|d| CompanyDomain::try_from(d).ok());
            domains.extend(domain);
        }
        domains.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(domains)
    }

    /// Deletes the record (a device's, once its Session is signed out at unpairing).
    pub fn remove(self) -> Result<(), WalletError> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WalletError::Io(e)),
            _ => Ok(()),
        }
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
            .seal(rng, &purpose(&self.domain, &self.holder), text.as_bytes())
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
    /// A device id that is not one path component pairing would mint.
    #[error("that is not a paired device's id")]
    Holder,
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
    fn each_device_holds_its_own_records_and_one_copied_to_another_holder_does_not_open() {
        let state = std::env::temp_dir().join(format!("pap-wallet-holders-{}", std::process::id()));
        let key = SealingKey::open(&state, &SystemRng).unwrap();
        let shop = CompanyDomain::try_from("shop.example").unwrap();
        let user = crate::new_pairwise_user(&SystemRng);
        let (a, b) = (Holder::Device("dev_A".into()), Holder::Device("dev_B".into()));
        for holder in [Holder::Agent, a.clone()] {
            let dpop = Arc::new(SigningKey::generate_es256(&SystemRng, "dpop").unwrap());
            Wallet::new_held(&state, &shop, holder, user.clone(), dpop)
                .unwrap()
                .save(&key, &SystemRng)
                .unwrap();
        }
        assert!(Wallet::load_held(&state, &shop, &a, &key).unwrap().is_some());
        assert!(
            Wallet::load_held(&state, &shop, &b, &key).unwrap().is_none(),
            "B sees A's record"
        );
        assert_eq!(Wallet::held_by_device(&state, "dev_A").unwrap(), vec![shop.clone()]);
        assert!(Wallet::held_by_device(&state, "dev_B").unwrap().is_empty());
        // A's record put in B's place, or over the agent's, does not open.
        let a_path = state.join("companies/devices/dev_A/shop.example.sealed");
        std::fs::copy(&a_path, state.join("companies/devices/dev_B/shop.example.sealed")).unwrap();
        assert!(matches!(
            Wallet::load_held(&state, &shop, &b, &key),
            Err(WalletError::Corrupt)
        ));
        std::fs::copy(&a_path, state.join("companies/shop.example.sealed")).unwrap();
        assert!(matches!(Wallet::load(&state, &shop, &key), Err(WalletError::Corrupt)));
        // An id that is not one path component is refused before any path is made.
        for id in ["", "..", "a/b", "dev.x"] {
            let holder = Holder::Device(id.into());
            assert!(
                matches!(
                    Wallet::load_held(&state, &shop, &holder, &key),
                    Err(WalletError::Holder)
                ),
                "{id}"
            );
        }
        Wallet::load_held(&state, &shop, &a, &key)
            .unwrap()
            .unwrap()
            .remove()
            .unwrap();
        assert!(Wallet::held_by_device(&state, "dev_A").unwrap().is_empty());
        std::fs::remove_dir_all(&state).unwrap();
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
