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
/// until at most `count` remain and, newest first, they hold at most `bytes`; `made`, the
/// entry the caller just wrote, is always kept and counted first. What the tools leave on disk
/// for the browser (upload copies, saved PDFs) stays bounded however often they are called.
/// Links are removed, never followed.
///
/// Calls may run at once (two devices saving PDFs): an entry another call removed first counts
/// as removed, and a temporary file another call is still writing (`.NAME.HEX.tmp`,
/// [`write_private`]) is left alone unless it is older than [`STALE_TEMPORARY`] (what a crash
/// left).
pub fn keep_newest(dir: &Path, made: &Path, count: usize, bytes: u64) -> std::io::Result<()> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let now = std::time::SystemTime::now();
    let mut entries = Vec::new();
    let mut held = 0u64;
    let mut kept = 0usize;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e),
        };
        let size = if meta.is_dir() { size_under(&path) } else { meta.len() };
        let modified = meta.modified()?;
        if path == made {
            held = held.saturating_add(size);
            kept += 1;
            continue;
        }
        let temporary = entry.file_name().as_encoded_bytes().starts_with(b".");
        if temporary && now.duration_since(modified).unwrap_or_default() < STALE_TEMPORARY {
            continue;
        }
        entries.push((modified, path, meta.is_dir(), size, temporary));
    }
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    for (_, path, is_dir, size, temporary) in entries {
        held = held.saturating_add(size);
        if !temporary && kept < count && held <= bytes {
            kept += 1;
            continue;
        }
        let removed = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Err(e) if !gone(&e) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// How old a temporary file [`keep_newest`] finds must be to count as a crash's leftover.
pub const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(600);

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
        // Another call's temporary file, being written, and one a crash left long ago.
        std::fs::write(dir.join(".5.pdf.00.tmp"), b"half").unwrap();
        std::fs::write(dir.join(".6.pdf.01.tmp"), b"old").unwrap();
        age(&dir.join(".6.pdf.01.tmp"), STALE_TEMPORARY.as_secs() + 1);
        let made = dir.join("4.pdf");
        keep_newest(&dir, &made, 4, u64::MAX).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // The link is the newest; 0 and 1 were the oldest; the fresh temporary file is another
        // call's, the stale one a crash's.
        assert_eq!(left, [".5.pdf.00.tmp", "2.pdf", "3.pdf", "4.pdf", "link"]);
        assert_eq!(std::fs::read(&outside).unwrap(), b"kept");
        std::fs::remove_file(dir.join(".5.pdf.00.tmp")).unwrap();
        keep_newest(&dir, &made, 10, 250).unwrap();
        let left = std::fs::read_dir(&dir).unwrap().count();
        // The one just made, the link (a few bytes) and one of 100 fit in 250.
        assert_eq!(left, 3);
        assert!(made.exists());
        // The entry just made is kept even when it is not the newest (another call wrote
        // after it) and nothing else fits; an entry already gone counts as removed.
        age(&made, 1_000);
        keep_newest(&dir, &made, 10, 1).unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(left, std::slice::from_ref(&made), "the entry just made is always kept");
        // An entry named as just made that is already gone is no error; with a count of 0
        // nothing else is kept.
        keep_newest(&dir, &dir.join("not-there"), 0, 0).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
