//! The agent's identity (PAP §4.1): its `client_id` (the URL of its Client ID Metadata
//! Document), a P-256 key kept as PKCS#8 PEM in a 0600 file under a 0700 state directory, and
//! the two public documents companies fetch: the metadata and the JWKS.

use std::path::{Path, PathBuf};

use pap_shared::{ClientId, CompanyDomain, Rng, SigningKey};
use serde_json::{Value, json};

use pap_browser::store::{private_dir, write_private};

/// The `kid` of the agent's key in its JWKS and in every header it signs.
pub const KEY_ID: &str = "key-1";

/// The agent's identity.
#[derive(Debug)]
pub struct Identity {
    domain: CompanyDomain,
    name: String,
    client_id: ClientId,
    key: SigningKey,
}

impl Identity {
    /// Creates the identity for `domain` (where its documents are served) under `state_dir`, or
    /// loads it if the key file already exists. The key file is `identity/key.pem`, mode 0600.
    pub fn init(state_dir: &Path, domain: CompanyDomain, name: &str, rng: &dyn Rng) -> Result<Self, IdentityError> {
        let dir = private_dir(&state_dir.join("identity")).map_err(IdentityError::Io)?;
        let key_path = dir.join("key.pem");
        let key = if key_path.exists() {
            Self::read_key(&key_path)?
        } else {
            let key = SigningKey::generate_es256(rng, KEY_ID).map_err(|_| IdentityError::Key)?;
            write_private(&key_path, key.to_pkcs8_pem().as_bytes()).map_err(IdentityError::Io)?;
            key
        };
        std::fs::write(dir.join("domain"), format!("{domain}\n{name}\n")).map_err(IdentityError::Io)?;
        Self::assemble(domain, name, key)
    }

    /// Loads the identity made by [`Self::init`].
    pub fn load(state_dir: &Path) -> Result<Self, IdentityError> {
        let dir = state_dir.join("identity");
        let about = std::fs::read_to_string(dir.join("domain")).map_err(|_| IdentityError::Missing(dir.clone()))?;
        let mut lines = about.lines();
        let domain = lines
            .next()
            .and_then(|d| CompanyDomain::try_from(d).ok())
            .ok_or(IdentityError::Corrupt)?;
        let name = lines.next().unwrap_or("Agent").to_owned();
        let key = Self::read_key(&dir.join("key.pem"))?;
        Self::assemble(domain, &name, key)
    }

    /// An identity held only in memory (tests, the conformance runner).
    pub fn ephemeral(domain: CompanyDomain, name: &str, rng: &dyn Rng) -> Result<Self, IdentityError> {
        let key = SigningKey::generate_es256(rng, KEY_ID).map_err(|_| IdentityError::Key)?;
        Self::assemble(domain, name, key)
    }

    fn read_key(path: &Path) -> Result<SigningKey, IdentityError> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            // Tighten a key file someone loosened; the key stays private.
            let mode = std::fs::metadata(path).map_err(IdentityError::Io)?.permissions().mode();
            if mode & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(IdentityError::Io)?;
            }
        }
        let pem = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(IdentityError::Io)?);
        SigningKey::from_pkcs8_pem(&pem, KEY_ID).map_err(|_| IdentityError::Key)
    }

    fn assemble(domain: CompanyDomain, name: &str, key: SigningKey) -> Result<Self, IdentityError> {
        let client_id = ClientId::parse(&format!("https://{domain}/agent.json")).map_err(|_| IdentityError::Corrupt)?;
        Ok(Self {
            domain,
            name: name.to_owned(),
            client_id,
            key,
        })
    }

    /// The `client_id`: `https://{domain}/agent.json`.
    pub fn client_id(&self) -> &ClientId {
        &self.client_id
    }

    /// Where the documents are served.
    pub fn domain(&self) -> &CompanyDomain {
        &self.domain
    }

    /// The signing key.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// The Client ID Metadata Document, declaring Operations v1.
    pub fn metadata(&self) -> Value {
        let base = format!("https://{}", self.domain);
        json!({
            "client_id": self.client_id.as_str(),
            "client_name": self.name,
            "jwks_uri": format!("{base}/jwks.json"),
            "redirect_uris": [format!("{base}/oauth/callback")],
            "token_endpoint_auth_method": "private_key_jwt",
            "extensions": {"operations": {"version": "1"}},
        })
    }

    /// The JWKS with the one public key.
    pub fn jwks(&self) -> Value {
        json!({ "keys": [self.key.public_key().jwk()] })
    }
}

/// Why the identity could not be made or loaded.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The state files are unreadable as an identity.
    #[error("the identity files are corrupt")]
    Corrupt,
    /// A file could not be read or written.
    #[error("the identity files could not be read or written")]
    Io(#[source] std::io::Error),
    /// The key could not be made or loaded.
    #[error("the identity key could not be made or loaded")]
    Key,
    /// No identity exists yet.
    #[error("no identity under {0} (run `pap-agent identity init`)")]
    Missing(PathBuf),
}

#[cfg(test)]
mod tests {
    use pap_shared::SystemRng;

    use super::*;

    #[test]
    fn init_creates_private_files_and_load_reads_them_back() {
        let dir = std::env::temp_dir().join(format!("pap-agent-identity-{}", std::process::id()));
        let domain = CompanyDomain::try_from("atlas.example").unwrap();
        let made = Identity::init(&dir, domain, "Atlas", &SystemRng).unwrap();
        let loaded = Identity::load(&dir).unwrap();
        assert_eq!(made.jwks(), loaded.jwks());
        assert_eq!(loaded.client_id().as_str(), "https://atlas.example/agent.json");
        assert_eq!(loaded.metadata()["extensions"]["operations"]["version"], "1");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&dir.join("identity")), 0o700);
            assert_eq!(mode(&dir.join("identity/key.pem")), 0o600);
            // A loosened key file is tightened on load.
            std::fs::set_permissions(dir.join("identity/key.pem"), std::fs::Permissions::from_mode(0o644)).unwrap();
            Identity::load(&dir).unwrap();
            assert_eq!(mode(&dir.join("identity/key.pem")), 0o600);
        }
        // The JWKS holds no private member.
        let jwks = made.jwks().to_string();
        assert!(!jwks.contains("\"d\""));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
