//! The agent's identity (PAP §4.1): its `client_id` (the URL of its Client ID Metadata
//! Document), a P-256 key kept as PKCS#8 PEM in a 0600 file under a 0700 state directory, and
//! the two public documents companies fetch: the metadata and the JWKS.
//!
//! Keys rotate (`pap-agent identity rotate`): a new key becomes the one that signs, and the old
//! one stays in the JWKS, public part only, for a grace window, so an assertion it signed a
//! moment ago still verifies and a company that cached the old JWKS refetches on the new `kid`.
//! The state directory's layout:
//!
//! ```text
//! identity/key.pem          the first key (kid `key-1`), until the first rotation
//! identity/keys/KID.pem     the signing key after a rotation, 0600
//! identity/keys.json        which key signs, and the retiring public keys with their end
//! ```
//!
//! `keys.json` is written whole (a fresh file renamed into place): it is the rotation's commit
//! point, so a crash leaves the old key signing or the new one, never a mix. A process that
//! holds an [`Identity`] (the MCP host, a long-lived server) sees a rotation at its next
//! signature: `keys.json`'s modification time is checked each time the key is taken.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use pap_shared::{ClientId, CompanyDomain, PublicJwk, Rng, SigningKey, UnixTime};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use pap_browser::store::{private_dir, write_private};

/// The `kid` of the agent's first key in its JWKS and in every header it signs.
pub const KEY_ID: &str = "key-1";

/// How long a rotated-out key stays published by default: an hour, far past an assertion's 60 s
/// and any company's cache of the documents (at most 5 minutes by default).
pub const DEFAULT_ROTATION_GRACE_SECONDS: i64 = 3_600;

/// The agent's identity.
#[derive(Debug)]
pub struct Identity {
    domain: CompanyDomain,
    name: String,
    client_id: ClientId,
    /// `identity/` of the state directory; `None` for an identity held only in memory.
    dir: Option<PathBuf>,
    keys: RwLock<Keys>,
}

/// The keys as last read: the one that signs, the retiring ones, and `keys.json`'s stamp then.
#[derive(Debug)]
struct Keys {
    signing: Arc<SigningKey>,
    retiring: Vec<Retiring>,
    stamp: Option<SystemTime>,
}

/// `identity/keys.json`.
#[derive(Debug, Serialize, Deserialize)]
struct KeysFile {
    /// The `kid` of the key that signs: `keys/KID.pem`.
    current: String,
    /// Rotated-out keys, published until their end.
    #[serde(default)]
    retiring: Vec<Retiring>,
}

/// A rotated-out key: its public JWK, published until `until` (Unix seconds).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Retiring {
    jwk: PublicJwk,
    until: i64,
}

/// What a rotation did.
#[derive(Clone, Debug, Serialize)]
pub struct RotationReport {
    /// The `kid` that signs from now on.
    pub current: String,
    /// The `kid` rotated out.
    pub retired: String,
    /// Until when (Unix seconds) the retired key stays published.
    pub published_until: i64,
}

impl Identity {
    /// Creates the identity for `domain` (where its documents are served) under `state_dir`, or
    /// loads it if a key already exists. The key file is `identity/key.pem`, mode 0600.
    pub fn init(state_dir: &Path, domain: CompanyDomain, name: &str, rng: &dyn Rng) -> Result<Self, IdentityError> {
        let dir = private_dir(&state_dir.join("identity")).map_err(IdentityError::Io)?;
        let key_path = dir.join("key.pem");
        if !key_path.exists() && !dir.join(KEYS_FILE).exists() {
            let key = SigningKey::generate_es256(rng, KEY_ID).map_err(|_| IdentityError::Key)?;
            write_private(&key_path, key.to_pkcs8_pem().as_bytes()).map_err(IdentityError::Io)?;
        }
        std::fs::write(dir.join("domain"), format!("{domain}\n{name}\n")).map_err(IdentityError::Io)?;
        let keys = read_keys(&dir)?;
        Self::assemble(domain, name, Some(dir), keys)
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
        let keys = read_keys(&dir)?;
        Self::assemble(domain, &name, Some(dir), keys)
    }

    /// An identity held only in memory (tests, the conformance runner).
    pub fn ephemeral(domain: CompanyDomain, name: &str, rng: &dyn Rng) -> Result<Self, IdentityError> {
        let key = SigningKey::generate_es256(rng, KEY_ID).map_err(|_| IdentityError::Key)?;
        let keys = Keys {
            signing: Arc::new(key),
            retiring: Vec::new(),
            stamp: None,
        };
        Self::assemble(domain, name, None, keys)
    }

    /// Rotates the key of the identity under `state_dir`: a new key signs from now on, and the
    /// old one stays published for `grace_seconds` after `now` (keys whose window ended are
    /// dropped). The old private key is deleted: nothing signs with it again.
    pub fn rotate(
        state_dir: &Path,
        grace_seconds: i64,
        now: UnixTime,
        rng: &dyn Rng,
    ) -> Result<RotationReport, IdentityError> {
        let dir = state_dir.join("identity");
        if !dir.join("domain").exists() {
            return Err(IdentityError::Missing(dir));
        }
        let old = read_keys(&dir)?;
        let old_kid = old.signing.kid().to_owned();
        let mut kid = format!("key-{}", now.as_secs());
        let taken = |kid: &str| kid == old_kid || old.retiring.iter().any(|r| r.jwk.kid.as_deref() == Some(kid));
        let mut n = 2;
        while taken(&kid) {
            kid = format!("key-{}-{n}", now.as_secs());
            n += 1;
        }
        let key = SigningKey::generate_es256(rng, &kid).map_err(|_| IdentityError::Key)?;
        let keys_dir = private_dir(&dir.join("keys")).map_err(IdentityError::Io)?;
        write_private(&keys_dir.join(format!("{kid}.pem")), key.to_pkcs8_pem().as_bytes())
            .map_err(IdentityError::Io)?;
        let until = now.as_secs().saturating_add(grace_seconds.max(0));
        let mut retiring: Vec<Retiring> = old.retiring.into_iter().filter(|r| r.until > now.as_secs()).collect();
        retiring.push(Retiring {
            jwk: old.signing.public_key().jwk().clone(),
            until,
        });
        let file = KeysFile {
            current: kid.clone(),
            retiring,
        };
        let text = serde_json::to_vec_pretty(&file).map_err(|_| IdentityError::Corrupt)?;
        // The commit point: from here the new key signs.
        write_private(&dir.join(KEYS_FILE), &text).map_err(IdentityError::Io)?;
        let old_file = if old_kid == KEY_ID && !dir.join("keys").join(format!("{KEY_ID}.pem")).exists() {
            dir.join("key.pem")
        } else {
            keys_dir.join(format!("{old_kid}.pem"))
        };
        std::fs::remove_file(&old_file).map_err(IdentityError::Io)?;
        Ok(RotationReport {
            current: kid,
            retired: old_kid,
            published_until: until,
        })
    }

    fn assemble(domain: CompanyDomain, name: &str, dir: Option<PathBuf>, keys: Keys) -> Result<Self, IdentityError> {
        let client_id = ClientId::parse(&format!("https://{domain}/agent.json")).map_err(|_| IdentityError::Corrupt)?;
        Ok(Self {
            domain,
            name: name.to_owned(),
            client_id,
            dir,
            keys: RwLock::new(keys),
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

    /// The key that signs now (after a rotation made by another process, the new one).
    pub fn key(&self) -> Arc<SigningKey> {
        self.refresh();
        self.keys.read().unwrap_or_else(PoisonError::into_inner).signing.clone()
    }

    /// Rereads the keys when `keys.json` changed since they were read. A read that fails keeps
    /// the keys held (logged): a half-finished edit by hand does not stop the agent.
    fn refresh(&self) {
        let Some(dir) = &self.dir else { return };
        let stamp = std::fs::metadata(dir.join(KEYS_FILE)).and_then(|m| m.modified()).ok();
        if stamp == self.keys.read().unwrap_or_else(PoisonError::into_inner).stamp {
            return;
        }
        match read_keys(dir) {
            Ok(keys) => *self.keys.write().unwrap_or_else(PoisonError::into_inner) = keys,
            Err(error) => tracing::warn!(%error, "the identity's keys could not be reread; keeping the held ones"),
        }
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

    /// The JWKS as published now: the signing key, and the retiring keys whose window is open.
    pub fn jwks(&self) -> Value {
        self.jwks_at(pap_shared::Clock::now(&pap_shared::SystemClock))
    }

    /// The JWKS as published at `now`.
    pub fn jwks_at(&self, now: UnixTime) -> Value {
        self.refresh();
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let mut published = vec![serde_json::to_value(keys.signing.public_key().jwk()).unwrap_or(Value::Null)];
        published.extend(
            keys.retiring
                .iter()
                .filter(|r| r.until > now.as_secs())
                .map(|r| serde_json::to_value(&r.jwk).unwrap_or(Value::Null)),
        );
        json!({ "keys": published })
    }
}

/// The file naming the signing key and the retiring ones.
const KEYS_FILE: &str = "keys.json";

/// Reads the keys under `dir` (`identity/`): `keys.json` and the key it names, or, before any
/// rotation, `key.pem` as `key-1`.
fn read_keys(dir: &Path) -> Result<Keys, IdentityError> {
    let keys_file = dir.join(KEYS_FILE);
    let stamp = std::fs::metadata(&keys_file).and_then(|m| m.modified()).ok();
    if stamp.is_none() {
        let key = read_key(&dir.join("key.pem"), KEY_ID)?;
        return Ok(Keys {
            signing: Arc::new(key),
            retiring: Vec::new(),
            stamp: None,
        });
    }
    let text = std::fs::read(&keys_file).map_err(IdentityError::Io)?;
    let file: KeysFile = serde_json::from_slice(&text).map_err(|_| IdentityError::Corrupt)?;
    // The kid names a file: nothing but a plain name.
    if file.current.is_empty() || !file.current.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(IdentityError::Corrupt);
    }
    let key = read_key(&dir.join("keys").join(format!("{}.pem", file.current)), &file.current)?;
    Ok(Keys {
        signing: Arc::new(key),
        retiring: file.retiring,
        stamp,
    })
}

fn read_key(path: &Path, kid: &str) -> Result<SigningKey, IdentityError> {
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
    SigningKey::from_pkcs8_pem(&pem, kid).map_err(|_| IdentityError::Key)
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

    fn kids(jwks: &Value) -> Vec<String> {
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_rotation_signs_with_a_new_key_and_publishes_the_old_one_for_the_grace_window() {
        let dir = std::env::temp_dir().join(format!("pap-agent-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let domain = CompanyDomain::try_from("atlas.example").unwrap();
        let running = Identity::init(&dir, domain, "Atlas", &SystemRng).unwrap();
        assert_eq!(running.key().kid(), KEY_ID);
        let now = UnixTime::from_secs(1_800_000_000);

        let report = Identity::rotate(&dir, 600, now, &SystemRng).unwrap();
        assert_eq!(
            (report.retired.as_str(), report.published_until),
            (KEY_ID, 1_800_000_600)
        );
        assert_eq!(report.current, "key-1800000000");
        // The old private key is gone; the new one is 0600.
        assert!(!dir.join("identity/key.pem").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join("identity/keys/key-1800000000.pem"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A process that loaded the identity before signs with the new key at once.
        assert_eq!(running.key().kid(), "key-1800000000");
        assert_eq!(kids(&running.jwks_at(now)), ["key-1800000000", KEY_ID]);
        assert_eq!(kids(&running.jwks_at(now.plus(599))), ["key-1800000000", KEY_ID]);
        assert_eq!(kids(&running.jwks_at(now.plus(600))), ["key-1800000000"]);

        // A second rotation within the same second gets a kid of its own, and drops nothing
        // still in its window.
        let again = Identity::rotate(&dir, 600, now, &SystemRng).unwrap();
        assert_eq!(again.current, "key-1800000000-2");
        let loaded = Identity::load(&dir).unwrap();
        assert_eq!(
            kids(&loaded.jwks_at(now)),
            ["key-1800000000-2", KEY_ID, "key-1800000000"]
        );
        // Later, only what is in its window is kept.
        Identity::rotate(&dir, 600, now.plus(700), &SystemRng).unwrap();
        assert_eq!(kids(&Identity::load(&dir).unwrap().jwks_at(now.plus(700))).len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
