//! Test support (the `test-support` feature): helpers the tests of this crate and of the crates
//! above it share. Never part of a product build.

use std::path::{Path, PathBuf};

/// Every file under `dir` (symbolic links not followed): where a canary looks for a secret.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_symlink() {
            continue;
        }
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}
