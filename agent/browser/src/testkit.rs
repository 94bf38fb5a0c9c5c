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

/// The agent's Chromium provider's manifest, as shipped.
pub fn chromium_manifest() -> crate::spec::BrowserManifest {
    #[allow(clippy::expect_used, reason = "the shipped manifest is checked by its own tests")]
    crate::chromium::manifest()
        .map_err(|d| format!("{d:?}"))
        .expect("the shipped manifest loads")
}

/// A tool's value; a tool error fails the test, with its code and message.
pub fn ok(result: crate::spec::ToolResult) -> serde_json::Value {
    match result {
        crate::spec::ToolResult::Ok(value) => value,
        crate::spec::ToolResult::Err(error) => panic!("{} {}", error.code.as_str(), error.message),
    }
}

/// A tool's error; a value fails the test.
pub fn err(result: crate::spec::ToolResult) -> crate::spec::ToolError {
    match result {
        crate::spec::ToolResult::Err(error) => error,
        crate::spec::ToolResult::Ok(value) => panic!("expected an error, got {value}"),
    }
}

/// A consent host on `state`, on the system's clock and randomness.
pub fn consent_at(state: &Path) -> std::sync::Arc<crate::consent::ConsentHost> {
    #[allow(clippy::expect_used, reason = "a test's own state directory")]
    std::sync::Arc::new(
        crate::consent::ConsentHost::open(
            state,
            std::sync::Arc::new(pap_shared::SystemClock),
            std::sync::Arc::new(pap_shared::SystemRng),
        )
        .expect("a consent host on the test's state directory"),
    )
}
