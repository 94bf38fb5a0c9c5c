//! Where grants live (AIP-63 C11): `consent/grants.json` and `consent/revoked-devices.json`,
//! 0600 in a 0700 directory, written whole through a temporary file, and one exclusive lock
//! across processes (the CLI and a running agent) for every read-modify-write.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::error::ConsentError;
use super::grant::Grant;
use crate::store::write_private;

/// The grants and revoked pairings of one consent directory.
#[derive(Debug)]
pub(super) struct GrantStore {
    dir: PathBuf,
}

impl GrantStore {
    /// The store in `dir` (already made 0700).
    pub(super) fn new(dir: &Path) -> Self {
        Self { dir: dir.to_owned() }
    }

    /// An exclusive lock on the store, across processes; released when dropped.
    pub(super) fn lock(&self) -> Result<StoreLock, ConsentError> {
        Ok(StoreLock(pap_shared::fs::lock_exclusive(
            &self.dir.join("grants.lock"),
        )?))
    }

    /// Every grant, revoked ones included. A file that does not parse is an error naming its
    /// line, and changes nothing.
    pub(super) fn load(&self) -> Result<Vec<Grant>, ConsentError> {
        read_json(&self.dir.join("grants.json"), "grants.json")
    }

    /// Replaces every grant.
    pub(super) fn save(&self, grants: &[Grant]) -> Result<(), ConsentError> {
        write_json(&self.dir.join("grants.json"), &grants)
    }

    /// The devices whose AIP-59 pairing was revoked (C13).
    pub(super) fn revoked_devices(&self) -> Result<Vec<String>, ConsentError> {
        read_json(&self.dir.join("revoked-devices.json"), "revoked-devices.json")
    }

    /// Records that `device`'s pairing was revoked (once).
    pub(super) fn add_revoked_device(&self, device: &str) -> Result<(), ConsentError> {
        let mut devices = self.revoked_devices()?;
        if !devices.iter().any(|d| d == device) {
            devices.push(device.to_owned());
            write_json(&self.dir.join("revoked-devices.json"), &devices)?;
        }
        Ok(())
    }
}

/// The store's lock, held while it lives.
#[derive(Debug)]
pub(super) struct StoreLock(File);

impl Drop for StoreLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

fn read_json<T: serde::de::DeserializeOwned + Default>(path: &Path, file: &'static str) -> Result<T, ConsentError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| ConsentError::Damaged { file, line: e.line() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(e.into()),
    }
}

fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), ConsentError> {
    // Grants and device ids are strings, numbers and enums: they always serialise.
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    write_private(path, &bytes)?;
    Ok(())
}
