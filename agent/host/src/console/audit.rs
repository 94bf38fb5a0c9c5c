//! The host's audit: which device called which tool on which origin, when, and how it ended.
//! No argument, no result, no page content and no path or query of a URL is written: the origin
//! (`https://shop.example`) is all a line says of where.
//!
//! One JSON line per call in `STATE/audit.jsonl` (0600), appended under an exclusive lock by
//! whichever host process served the call. Past [`ROTATE_AT`] bytes the file becomes
//! `audit.jsonl.1` (the one before is dropped), so the audit holds at most twice that.

use std::fs::File;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};

use pap_shared::UnixTime;
use serde::{Deserialize, Serialize};

/// The size at which the audit file is rotated, bytes.
pub const ROTATE_AT: u64 = 1024 * 1024;

/// One call as the audit holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// When it ended.
    #[serde(with = "pap_shared::rfc3339")]
    pub at: UnixTime,
    /// The device that called (`local` for the agent's own runtime).
    pub device_id: String,
    /// The tool, by its MCP name.
    pub tool: String,
    /// Where: the origin of the URL the call named or answered with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// `ok`, or the AIP-14 code it failed with.
    pub outcome: String,
}

/// The audit of one state directory.
#[derive(Clone, Debug)]
pub struct Audit {
    path: PathBuf,
}

impl Audit {
    /// The audit of the agent whose state is `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("audit.jsonl"),
        }
    }

    /// Appends `call`.
    pub fn append(&self, call: &Call) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(call).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let _lock = self.lock()?;
        if std::fs::metadata(&self.path).is_ok_and(|m| m.len() >= ROTATE_AT) {
            std::fs::rename(&self.path, self.rotated())?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&self.path)?.write_all(&line)
    }

    /// The last `limit` calls that `keep` keeps, newest first (the rotated file included). A
    /// line this host did not write is skipped.
    pub fn recent(&self, limit: usize, keep: impl Fn(&Call) -> bool) -> std::io::Result<Vec<Call>> {
        let mut calls = Vec::new();
        for path in [self.rotated(), self.path.clone()] {
            let file = match File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for line in std::io::BufReader::new(file).lines() {
                if let Ok(call) = serde_json::from_str::<Call>(&line?)
                    && keep(&call)
                {
                    calls.push(call);
                }
            }
        }
        calls.reverse();
        calls.truncate(limit);
        Ok(calls)
    }

    fn rotated(&self) -> PathBuf {
        self.path.with_extension("jsonl.1")
    }

    fn lock(&self) -> std::io::Result<nix::fcntl::Flock<File>> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(self.path.with_extension("lock"))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| std::io::Error::from(errno))
    }
}

/// The origin of `url` (`https://shop.example:8443`), for `http` and `https` URLs only: never
/// its path, query or fragment, which may carry what the page holds.
pub fn origin_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    matches!(parsed.scheme(), "http" | "https").then(|| parsed.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    fn call(i: i64, device: &str) -> Call {
        Call {
            at: UnixTime::from_secs(1_800_000_000 + i),
            device_id: device.to_owned(),
            tool: "browser_navigate".to_owned(),
            origin: origin_of("https://shop.example/cart?token=secret#x"),
            outcome: "ok".to_owned(),
        }
    }

    #[test]
    fn calls_come_back_newest_first_filtered_and_the_file_rotates() {
        let dir = crate::scratch::Dir::new("pap-console");
        let audit = Audit::at(dir.path());
        for i in 0..5 {
            audit
                .append(&call(i, if i % 2 == 0 { "dev_a" } else { "dev_b" }))
                .unwrap();
        }
        let a = audit.recent(10, |c| c.device_id == "dev_a").unwrap();
        assert_eq!(
            a.iter().map(|c| c.at).collect::<Vec<_>>(),
            [4, 2, 0].map(|i| call(i, "").at)
        );
        // Only the origin is written: no path, query or fragment.
        let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        assert!(text.contains("\"origin\":\"https://shop.example\""));
        assert!(!text.contains("secret") && !text.contains("cart"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("audit.jsonl")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // Past the size the file is rotated: the newest calls are still read, across both files.
        let line = serde_json::to_vec(&call(0, "dev_a")).unwrap().len() as u64 + 1;
        for i in 5..5 + ROTATE_AT / line + 2 {
            audit.append(&call(i64::try_from(i).unwrap(), "dev_a")).unwrap();
        }
        assert!(dir.path().join("audit.jsonl.1").exists());
        assert!(std::fs::metadata(dir.path().join("audit.jsonl")).unwrap().len() < ROTATE_AT);
        let newest = audit.recent(3, |_| true).unwrap();
        assert_eq!(newest.len(), 3);
        assert!(newest[0].at > newest[1].at && newest[1].at > newest[2].at);
    }

    #[test]
    fn only_web_urls_have_an_origin() {
        assert_eq!(
            origin_of("http://127.0.0.1:8080/a").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(origin_of("file:///etc/passwd"), None);
        assert_eq!(origin_of("data:text/html,hi"), None);
        assert_eq!(origin_of("not a url"), None);
    }
}
