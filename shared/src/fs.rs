//! The one way either side writes a file others must not read or redirect: the one exception to
//! this crate's "no I/O", kept here because the agent and the company both need it and share
//! nothing else below this crate.
//!
//! A write goes to a fresh temporary file beside the target, created with `O_CREAT|O_EXCL`
//! (which follows no link) under a random name, mode 0600, `fsync`ed, then renamed over the
//! target (a rename replaces a link at the target, never writes through it). A directory that
//! others may write into is refused: they could swap names under the writer (review N16).
//!
//! A store that reads a file, changes it and writes it back holds [`lock_exclusive`] on a lock
//! file beside it throughout, so two processes never lose each other's change.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use crate::time::{Rng, SystemRng};

/// Writes `bytes` to `path`, mode 0600, whole or not at all (a reader sees the old file or the
/// new one), through a fresh file that no link can redirect.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file(path, bytes, 0o600)
}

/// [`write_private`] with another mode (a certificate anyone may read: 0644).
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    refuse_shared_dir(&dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut suffix = [0_u8; 12];
    SystemRng.fill(&mut suffix);
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(
        ".{}.tmp",
        suffix.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    let temporary = dir.join(temporary_name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let written = options.open(&temporary).and_then(|mut file| {
        // The mode given at creation is masked by the umask: set it exactly.
        #[cfg(unix)]
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&temporary, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    renamed?;
    // The rename itself survives a crash once the directory is synced.
    if let Ok(directory) = std::fs::File::open(&dir) {
        let _ = directory.sync_all();
    }
    Ok(())
}

/// An exclusive lock, across processes, on the lock file `path` (made mode 0600 when absent),
/// held until the returned file is dropped: a caller that reads a file, changes it and writes
/// it back ([`write_private`]) holds it throughout, so two processes never lose each other's
/// change. Waits while another holds it.
pub fn lock_exclusive(path: &Path) -> io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    file.lock()?;
    Ok(file)
}

/// Refuses a directory that users other than its owner may write into (without the sticky bit,
/// which keeps them from renaming or removing what is not theirs).
fn refuse_shared_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir)?.permissions().mode();
        let others_write = mode & 0o022 != 0;
        let sticky = mode & 0o1000 != 0;
        if others_write && !sticky {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is writable by other users: choose a directory only its owner writes to",
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pap-fs-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_link_at_the_target_or_at_a_predictable_temporary_name_is_never_written_through() {
        // Review N16: someone plants links where a writer would open: at the target, and at
        // `<target>.tmp`. The files they point at keep their content.
        let dir = scratch("links");
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let target = dir.join("credential");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("credential.tmp")).unwrap();
        write_private(&target, b"secret").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let written = std::fs::symlink_metadata(&target).unwrap();
        assert!(written.file_type().is_file(), "the target is still a link");
        assert_eq!(written.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&target).unwrap(), b"secret");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_is_held_until_dropped_and_its_file_is_private() {
        let dir = scratch("lock");
        let path = dir.join("records.lock");
        let held = lock_exclusive(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let other = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(
            matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
            "a second holder got the lock"
        );
        drop(held);
        other.try_lock().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_others_write_into_is_refused_and_nothing_is_written() {
        let dir = scratch("shared");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = write_private(&dir.join("credential"), b"secret").unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // With the sticky bit (as /tmp), others cannot take the names: allowed.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        write_private(&dir.join("credential"), b"secret").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_write_replaces_the_old_file_whole_with_its_mode() {
        let dir = scratch("replace");
        let target = dir.join("grants.json");
        std::fs::write(&target, "old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        write_file(&dir.join("ca.pem"), b"cert", 0o644).unwrap();
        assert_eq!(
            std::fs::metadata(dir.join("ca.pem")).unwrap().permissions().mode() & 0o777,
            0o644
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
