//! Entry points for the fuzz targets in `conformance/fuzz/` (feature `fuzzing`, never in a product build):
//! the parsers of the files a person hands the agent as a grant's source, each with the
//! property it must keep. Each function panics when a property fails; that is the fuzzer's
//! finding. Not a stable interface.

use std::collections::BTreeSet;
use std::path::Path;

use super::chromium_profile;
use super::material::{Material, parse_storage_state, scan_storage_state_bytes};

/// A storage-state file's bytes: a file that reads reads back the same after being written (what
/// the sealed store does with it), and every host it yields was counted by the presence scan
/// (C5: the scan the person consents from sees every host a grant could take). Returns how many
/// cookies were read.
pub fn storage_state(bytes: &[u8]) -> usize {
    let path = Path::new("storage-state.json");
    let Ok(material) = parse_storage_state(bytes, path) else {
        return 0;
    };
    let written = serde_json::to_vec(&material).unwrap_or_default();
    let again: Material =
        serde_json::from_slice(&written).unwrap_or_else(|e| panic!("written material does not read: {e}"));
    assert_eq!(again, material, "storage state changed on a write and a read");
    let scanned = scan_storage_state_bytes(bytes, path).unwrap_or_else(|e| panic!("read but not scanned: {e}"));
    let mut hosts: BTreeSet<String> = material.cookies.iter().map(|c| c.host()).collect();
    hosts.extend(
        material
            .origins
            .iter()
            .filter_map(|o| super::material::origin_host(&o.origin)),
    );
    for host in hosts {
        assert!(scanned.contains_key(&host), "the scan missed a host the read yields");
    }
    material.cookies.len()
}

/// A Chromium profile whose cookie database is `database` (the bytes of a SQLite file), written
/// to `<dir>/Network/Cookies`: every host read is one the presence scan counted, and a read
/// limited to no host yields no cookie. Returns how many cookies were read and decrypted.
pub fn chromium_profile(dir: &Path, database: &[u8]) -> usize {
    let network = dir.join("Network");
    if std::fs::create_dir_all(&network).is_err() || std::fs::write(network.join("Cookies"), database).is_err() {
        return 0;
    }
    let Ok(scanned) = chromium_profile::scan(dir) else {
        return 0;
    };
    if let Ok(none) = chromium_profile::read(dir, &|_| false) {
        assert!(none.cookies.is_empty(), "a read limited to no host yielded cookies");
    }
    let Ok(material) = chromium_profile::read(dir, &|_| true) else {
        return 0;
    };
    for cookie in &material.cookies {
        assert!(
            scanned.contains_key(&cookie.host()),
            "the scan missed a host the read yields"
        );
    }
    material.cookies.len()
}
