//! The host's audit: which device called which tool on which origin, when, and how it ended.
//! No argument, no result, no page content and no path or query of a URL is written: the origin
//! (`https://shop.example`) is all a line says of where.
//!
//! One JSON line per call in `STATE/audit/DEVICE.jsonl` (0600, in a 0700 directory), appended
//! under an exclusive lock by whichever host process served the call. A file per device: past
//! [`ROTATE_AT`] bytes a device's file becomes `DEVICE.jsonl.1` (the one before is dropped), so
//! one device calling without end pushes out its own history, never another's (security review
//! of the console, finding 4); each device's audit holds at most twice [`ROTATE_AT`].

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
    dir: PathBuf,
}

impl Audit {
    /// The audit of the agent whose state is `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("audit"),
        }
    }

    /// The file of `device` (a device id is `[A-Za-z0-9_-]`; anything else is `other`).
    fn file(&self, device: &str) -> PathBuf {
        let safe = !device.is_empty()
            && device.len() <= 64
            && device
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        self.dir.join(format!("{}.jsonl", if safe { device } else { "other" }))
    }

    /// Appends `call` to its device's file.
    pub fn append(&self, call: &Call) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(call).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut dir = std::fs::DirBuilder::new();
        dir.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
        dir.create(&self.dir)?;
        let path = self.file(&call.device_id);
        let _lock = lock(&path)?;
        if std::fs::metadata(&path).is_ok_and(|m| m.len() >= ROTATE_AT) {
            std::fs::rename(&path, path.with_extension("jsonl.1"))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&path)?.write_all(&line)
    }

    /// The last `limit` calls that `keep` keeps, over every device, newest first (rotated
    /// files included). A line this host did not write is skipped.
    pub fn recent(&self, limit: usize, keep: impl Fn(&Call) -> bool) -> std::io::Result<Vec<Call>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut calls = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !(name.ends_with(".jsonl") || name.ends_with(".jsonl.1")) {
                continue;
            }
            let file = File::open(&path)?;
            // Within a file, later lines are newer: their place breaks ties of the same second.
            for (place, line) in std::io::BufReader::new(file).lines().enumerate() {
                if let Ok(call) = serde_json::from_str::<Call>(&line?)
                    && keep(&call)
                {
                    let older_file = name.ends_with(".1");
                    calls.push((call.at, !older_file, place, call));
                }
            }
        }
        calls.sort_by_key(|c| std::cmp::Reverse((c.0, c.1, c.2)));
        calls.truncate(limit);
        Ok(calls.into_iter().map(|(_, _, _, call)| call).collect())
    }
}

fn lock(path: &Path) -> std::io::Result<File> {
    pap_shared::fs::lock_exclusive(&path.with_extension("lock"))
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
    fn calls_come_back_newest_first_filtered_and_each_device_s_file_rotates_on_its_own() {
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
        let text = std::fs::read_to_string(dir.path().join("audit/dev_a.jsonl")).unwrap();
        assert!(text.contains("\"origin\":\"https://shop.example\""));
        assert!(!text.contains("secret") && !text.contains("cart"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("audit/dev_a.jsonl"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let b = audit.recent(10, |c| c.device_id == "dev_b").unwrap();
        assert_eq!(b.len(), 2);
        // Past the size the file is rotated: the newest calls are still read, across both files.
        let line = serde_json::to_vec(&call(0, "dev_a")).unwrap().len() as u64 + 1;
        for i in 5..5 + ROTATE_AT / line + 2 {
            audit.append(&call(i64::try_from(i).unwrap(), "dev_a")).unwrap();
        }
        assert!(dir.path().join("audit/dev_a.jsonl.1").exists());
        assert!(std::fs::metadata(dir.path().join("audit/dev_a.jsonl")).unwrap().len() < ROTATE_AT);
        let newest = audit.recent(3, |_| true).unwrap();
        assert_eq!(newest.len(), 3);
        assert!(newest[0].at > newest[1].at && newest[1].at > newest[2].at);
        // Device A's flood pushed out its own history only: device B's calls are all there.
        assert_eq!(audit.recent(usize::MAX, |c| c.device_id == "dev_b").unwrap().len(), 2);
        // A device id that is no file name goes to `other`.
        let mut odd = call(0, "../../etc/x");
        odd.device_id = "../../etc/x".to_owned();
        audit.append(&odd).unwrap();
        assert!(dir.path().join("audit/other.jsonl").exists());
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
