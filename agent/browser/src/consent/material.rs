//! Session material (AIP-63 C1, C5, C9, C11): cookies and storage read from a granted source,
//! kept sealed per grant, and values held in a type that never prints.
//!
//! Sources: a storage-state file (the `{cookies, origins}` JSON that Playwright and others
//! write). Its presence scan counts cookies per domain from a parse that has no field for a value,
//! so a scan never holds one (C5).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use crate::store::{SealError, SealingKey};
use crate::store::{private_dir, write_private};
use pap_shared::Rng;

/// A cookie or storage value: never printed, wiped on drop (C9).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Value(Zeroizing<String>);

// Serialised only into the sealed store and out of a source file; the type itself never prints.
impl Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|s| Self(Zeroizing::new(s)))
    }
}

impl Value {
    pub(crate) fn new(value: Zeroizing<String>) -> Self {
        Self(value)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[value redacted]")
    }
}

/// A stored cookie.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Cookie {
    pub(crate) name: String,
    pub(crate) value: Value,
    pub(crate) domain: String,
    #[serde(default = "root")]
    pub(crate) path: String,
    /// Seconds since the epoch; absent or negative for a session cookie.
    #[serde(default)]
    pub(crate) expires: Option<f64>,
    #[serde(default)]
    pub(crate) http_only: bool,
    #[serde(default)]
    pub(crate) secure: bool,
    #[serde(default)]
    pub(crate) same_site: Option<String>,
}

fn root() -> String {
    "/".into()
}

impl Cookie {
    /// The host the cookie belongs to, without a leading dot, lowercase.
    pub(crate) fn host(&self) -> String {
        self.domain.trim_start_matches('.').to_ascii_lowercase()
    }
}

/// One origin's local storage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Origin {
    pub(crate) origin: String,
    #[serde(default)]
    pub(crate) local_storage: Vec<StorageItem>,
}

/// A local-storage item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct StorageItem {
    pub(crate) name: String,
    pub(crate) value: Value,
}

/// Cookies and storage, for one grant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Material {
    #[serde(default)]
    pub(crate) cookies: Vec<Cookie>,
    #[serde(default)]
    pub(crate) origins: Vec<Origin>,
}

impl Material {
    /// Keeps only what `covers` (a host test) allows.
    pub(crate) fn retain(&mut self, covers: impl Fn(&str) -> bool) {
        self.cookies.retain(|c| covers(&c.host()));
        self.origins
            .retain(|o| origin_host(&o.origin).is_some_and(|h| covers(&h)));
    }

    /// The origins of its local storage whose host `covers` accepts, as written (port included).
    pub(crate) fn origins_where(&self, covers: impl Fn(&str) -> bool) -> Vec<String> {
        self.origins
            .iter()
            .filter(|o| origin_host(&o.origin).is_some_and(|h| covers(&h)))
            .map(|o| o.origin.clone())
            .collect()
    }

    /// Puts `fresh` in place of what `scope` covers, keeping the rest.
    pub(crate) fn replace(&mut self, fresh: Material, scope: impl Fn(&str) -> bool) {
        self.retain(|host| !scope(host));
        self.cookies.extend(fresh.cookies);
        self.origins.extend(fresh.origins);
    }

    pub(crate) fn cookie_count(&self) -> u64 {
        u64::try_from(self.cookies.len()).unwrap_or(u64::MAX)
    }
}

/// The host of an origin (`https://shop.example:8443` -> `shop.example`).
pub(crate) fn origin_host(origin: &str) -> Option<String> {
    url::Url::parse(origin).ok()?.host_str().map(str::to_ascii_lowercase)
}

/// Why a source could not be read. Never carries a value: a parse error names only where.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file could not be read.
    #[error("the source {path} cannot be read: {kind}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What failed (the I/O error kind, never content).
        kind: std::io::ErrorKind,
    },
    /// A Chromium profile's cookie database could not be read or decrypted.
    #[error("the Chromium profile database {path}: {why}")]
    Database {
        /// The database.
        path: PathBuf,
        /// What failed (never a value).
        why: String,
    },
    /// The file is not a storage state.
    #[error("the source {path} is not a storage-state file (line {line}, column {column})")]
    NotStorageState {
        /// The file.
        path: PathBuf,
        /// Where the parse stopped.
        line: usize,
        /// Where the parse stopped.
        column: usize,
    },
}

fn read_source(path: &Path) -> Result<Zeroizing<Vec<u8>>, SourceError> {
    std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|e| SourceError::Unreadable {
            path: path.to_owned(),
            kind: e.kind(),
        })
}

fn not_storage_state(path: &Path, error: &serde_json::Error) -> SourceError {
    // serde_json's message may quote the offending value; only its position leaves here.
    SourceError::NotStorageState {
        path: path.to_owned(),
        line: error.line(),
        column: error.column(),
    }
}

/// Reads a storage-state file whole (values included): only for domains already granted.
pub(crate) fn read_storage_state(path: &Path) -> Result<Material, SourceError> {
    parse_storage_state(&read_source(path)?, path)
}

/// [`read_storage_state`] of bytes already read; `path` only names the file in an error.
pub(crate) fn parse_storage_state(bytes: &[u8], path: &Path) -> Result<Material, SourceError> {
    serde_json::from_slice(bytes).map_err(|e| not_storage_state(path, &e))
}

/// The presence scan of a storage-state file (C5): cookies and storage origins per host, from a
/// parse whose types have no field for a value.
pub(crate) fn scan_storage_state(path: &Path) -> Result<BTreeMap<String, u64>, SourceError> {
    scan_storage_state_bytes(&read_source(path)?, path)
}

/// [`scan_storage_state`] of bytes already read; `path` only names the file in an error.
pub(crate) fn scan_storage_state_bytes(bytes: &[u8], path: &Path) -> Result<BTreeMap<String, u64>, SourceError> {
    #[derive(Deserialize)]
    struct Presence {
        #[serde(default)]
        cookies: Vec<CookieHost>,
        #[serde(default)]
        origins: Vec<OriginName>,
    }
    #[derive(Deserialize)]
    struct CookieHost {
        domain: String,
    }
    #[derive(Deserialize)]
    struct OriginName {
        origin: String,
    }
    let presence: Presence = serde_json::from_slice(bytes).map_err(|e| not_storage_state(path, &e))?;
    let mut counts = BTreeMap::new();
    for cookie in presence.cookies {
        *counts
            .entry(cookie.domain.trim_start_matches('.').to_ascii_lowercase())
            .or_insert(0) += 1;
    }
    for origin in presence.origins {
        if let Some(host) = origin_host(&origin.origin) {
            counts.entry(host).or_insert(0);
        }
    }
    Ok(counts)
}

/// Sealed material, one file per grant under `consent/material/` (0700; files 0600).
pub(crate) struct MaterialStore {
    dir: PathBuf,
    key: SealingKey,
}

impl MaterialStore {
    pub(crate) fn open(consent_dir: &Path, key: SealingKey) -> std::io::Result<Self> {
        Ok(Self {
            dir: private_dir(&consent_dir.join("material"))?,
            key,
        })
    }

    fn path(&self, grant_id: &str) -> PathBuf {
        self.dir.join(format!("{grant_id}.sealed"))
    }

    fn purpose(grant_id: &str) -> String {
        format!("pap-agent consent material {grant_id}")
    }

    pub(crate) fn save(&self, rng: &dyn Rng, grant_id: &str, material: &Material) -> Result<(), SealError> {
        let plain = Zeroizing::new(serde_json::to_vec(material).map_err(|_| SealError::Crypto)?);
        let sealed = self.key.seal(rng, &Self::purpose(grant_id), &plain)?;
        write_private(&self.path(grant_id), &sealed).map_err(SealError::Io)
    }

    pub(crate) fn load(&self, grant_id: &str) -> Result<Material, SealError> {
        let sealed = match std::fs::read(self.path(grant_id)) {
            Ok(sealed) => sealed,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Material::default()),
            Err(e) => return Err(SealError::Io(e)),
        };
        let plain = self.key.open_sealed(&Self::purpose(grant_id), &sealed)?;
        serde_json::from_slice(&plain).map_err(|_| SealError::NotSealed)
    }

    /// Deletes a grant's material; `true` if there was any.
    pub(crate) fn delete(&self, grant_id: &str) -> std::io::Result<bool> {
        match std::fs::remove_file(self.path(grant_id)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Cookie names as the ledger keeps them (C9, C10): SHA-256 over a secret salt and the name,
/// sorted and unique. The salt is 32 random bytes in `keys/consent-salt.key` (0600), never the
/// grant id, so a name cannot be confirmed by someone holding only the ledger.
pub(crate) struct NameSalt(Zeroizing<Vec<u8>>);

impl NameSalt {
    pub(crate) fn open(state_dir: &Path, rng: &dyn Rng) -> std::io::Result<Self> {
        let path = private_dir(&state_dir.join("keys"))?.join("consent-salt.key");
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == 32 => Ok(Self(Zeroizing::new(bytes))),
            Ok(_) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "keys/consent-salt.key is not 32 bytes",
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut fresh = Zeroizing::new(vec![0u8; 32]);
                rng.fill(&mut fresh);
                write_private(&path, &fresh)?;
                Ok(Self(fresh))
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn hashes(&self, material: &Material) -> Vec<String> {
        let mut out: Vec<String> = material
            .cookies
            .iter()
            .map(|c| {
                let mut h = Sha256::new();
                h.update(&*self.0);
                h.update(c.name.as_bytes());
                h.finalize().iter().map(|b| format!("{b:02x}")).collect()
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = r#"{"cookies":[
        {"name":"sid","value":"CANARY-VALUE-1","domain":".shop.example","path":"/","expires":-1,"httpOnly":true,"secure":true,"sameSite":"Lax"},
        {"name":"pref","value":"CANARY-VALUE-2","domain":"www.shop.example","path":"/"},
        {"name":"t","value":"CANARY-VALUE-3","domain":"tracker.example","path":"/"}],
      "origins":[{"origin":"https://shop.example","localStorage":[{"name":"k","value":"CANARY-VALUE-4"}]}]}"#;

    /// A storage-state file in a directory of its own, which goes when it is dropped.
    struct Source(PathBuf);

    impl Drop for Source {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    fn file(name: &str, text: &str) -> Source {
        let dir = std::env::temp_dir().join(format!("pap-material-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        std::fs::write(&path, text).unwrap();
        Source(path)
    }

    #[test]
    fn the_scan_counts_per_host_and_the_read_keeps_only_what_is_covered() {
        let source = file("scan", STATE);
        let path = &source.0;
        let counts = scan_storage_state(path).unwrap();
        assert_eq!(counts.get("shop.example"), Some(&1));
        assert_eq!(counts.get("www.shop.example"), Some(&1));
        assert_eq!(counts.get("tracker.example"), Some(&1));
        let mut material = read_storage_state(path).unwrap();
        let granted = pap_shared::GrantDomain::parse("shop.example").unwrap();
        material.retain(|h| granted.covers(h));
        assert_eq!(material.cookie_count(), 2);
        assert_eq!(material.origins.len(), 1);
        assert!(!format!("{material:?}").contains("CANARY"));
    }

    #[test]
    fn a_cookies_expiry_reads_back_the_same_after_a_write() {
        // Found by the `storage_state` fuzz target: without correctly rounded float parsing a
        // long decimal read as one float, was written as its shortest form, and read back as
        // the next float up.
        let text = format!(
            r#"{{"cookies":[{{"name":"sid","value":"v","domain":"shop.example","expires":189345600{}0}}]}}"#,
            "5".repeat(53)
        );
        let read: Material = serde_json::from_str(&text).unwrap();
        let again: Material = serde_json::from_slice(&serde_json::to_vec(&read).unwrap()).unwrap();
        assert_eq!(again, read);
    }

    #[test]
    fn a_malformed_source_names_only_the_position() {
        let source = file(
            "bad",
            r#"{"cookies":[{"name":"a","value":"CANARY-SECRET","domain":7}]}"#,
        );
        let error = read_storage_state(&source.0).unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
        assert!(!error.contains("CANARY"), "{error}");
    }
}
