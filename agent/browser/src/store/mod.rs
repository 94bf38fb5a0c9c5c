//! The agent's state directory on disk (AIP-63 C11): directories 0700 and files 0600, fixed if
//! they already exist loosely, written whole or not at all; and [`SealingKey`], which seals what
//! must not sit in plaintext (granted material, the agent's company records).

mod sealed;

pub use self::sealed::{SealError, SealingKey};

use std::path::{Path, PathBuf};

/// Creates `dir` (and parents) with mode 0700, tightening it if it already exists.
pub fn private_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // Exactly 0710 is the sandboxed browser's pass-through (`BrowserUser::pass_through`, on
        // the state directory and `browsers/`): kept, or a running browser loses its profile.
        // Anything else is made 0700.
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        let private = if mode == 0o710 { 0o710 } else { 0o700 };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(private))?;
    }
    Ok(dir.to_path_buf())
}

/// Writes `bytes` to `path` with mode 0600, whole or not at all, through a fresh temporary file
/// no link can redirect (`pap_shared::fs`, review N16); a directory others may write into is
/// refused.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    pap_shared::fs::write_private(path, bytes)
}

/// Removes the oldest entries of `dir` (by modification time; a directory with all under it)
/// until at most `count` remain and, newest first, they hold at most `bytes` (the newest is
/// always kept). What the tools leave on disk for the browser (upload copies, saved PDFs) stays
/// bounded however often they are called. Links are removed, never followed.
pub fn keep_newest(dir: &Path, count: usize, bytes: u64) -> std::io::Result<()> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = std::fs::symlink_metadata(entry.path())?;
        let size = if meta.is_dir() {
            size_under(&entry.path())
        } else {
            meta.len()
        };
        entries.push((meta.modified()?, entry.path(), meta.is_dir(), size));
    }
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let mut held = 0u64;
    for (n, (_, path, is_dir, size)) in entries.into_iter().enumerate() {
        held = held.saturating_add(size);
        if n == 0 || (n < count && held <= bytes) {
            continue;
        }
        if is_dir {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// The bytes of the files under `dir` (links not followed; what cannot be read counts 0).
fn size_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match std::fs::symlink_metadata(entry.path()) {
            Ok(meta) if meta.is_dir() => size_under(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod keep_newest_tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_by_count_and_by_bytes_and_links_are_not_followed() {
        let dir = std::env::temp_dir().join(format!("pap-keep-newest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let outside = dir.with_extension("outside");
        std::fs::write(&outside, b"kept").unwrap();
        let now = std::time::SystemTime::now();
        let age = |path: &Path, secs: u64| {
            let file = std::fs::File::options().write(true).open(path).unwrap();
            file.set_modified(now - std::time::Duration::from_secs(secs)).unwrap();
        };
        for n in 0..5u64 {
            let path = dir.join(format!("{n}.pdf"));
            std::fs::write(&path, vec![0u8; 100]).unwrap();
            age(&path, 100 - n);
        }
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        keep_newest(&dir, 4, u64::MAX).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // The link is the newest; 0 and 1 were the oldest.
        assert_eq!(left, ["2.pdf", "3.pdf", "4.pdf", "link"]);
        assert_eq!(std::fs::read(&outside).unwrap(), b"kept");
        keep_newest(&dir, 10, 250).unwrap();
        let left = std::fs::read_dir(&dir).unwrap().count();
        // The link (a few bytes) and two of 100 fit in 250.
        assert_eq!(left, 3);
        keep_newest(&dir, 10, 1).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "the newest is always kept");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
