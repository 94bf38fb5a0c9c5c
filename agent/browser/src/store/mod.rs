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
