//! The agent's state directory on disk (AIP-63 C11): directories 0700 and files 0600, fixed if
//! they already exist loosely, written whole or not at all; and [`SealingKey`], which seals what
//! must not sit in plaintext (granted material, the agent's company records).

mod sealed;

pub use self::sealed::{SealError, SealingKey};

use std::io::Write as _;
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

/// Writes `bytes` to `path` with mode 0600 through a temporary file and a rename, so a reader
/// never sees half a file and the old content is never lost to a crash.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
