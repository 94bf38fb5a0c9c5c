//! Chromium's sandbox, always on (security review H4). The agent's browser holds the person's
//! granted sessions and visits pages that may be hostile: its renderers run in Chromium's own
//! sandbox (a user namespace of their own and a seccomp-bpf filter), never `--no-sandbox`.
//!
//! As an unprivileged user Chromium sandboxes itself. As root it cannot (it refuses to start as
//! root unless the sandbox is turned off), so an agent running as root (CI, a container) runs
//! Chromium as an unprivileged user of its own instead: [`BROWSER_USER`] (`pap-browser`), or the
//! user [`BROWSER_USER_ENV`] names. A dedicated user, not `nobody`: the profile holds cookies, and
//! whatever else runs as `nobody` could read it. The layout follows:
//!
//! ```text
//! STATE        root:pap-browser 0710   (the group may pass through, not list)
//!   browsers/  root:pap-browser 0710
//!     NAME/    pap-browser      0700   (the profile)
//!   chromium-home/, downloads/NAME/    pap-browser 0700
//!   keys/ consent/ identity/ …  root   0700   (as before: the browser's user reaches none)
//! ```

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// The unprivileged user Chromium runs as when the agent runs as root.
pub const BROWSER_USER: &str = "pap-browser";

/// Names another user for [`BROWSER_USER`]'s part.
pub const BROWSER_USER_ENV: &str = "PAP_AGENT_BROWSER_USER";

/// The user Chromium runs as, when it is not the agent's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrowserUser {
    /// Its name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group id.
    pub gid: u32,
}

/// Why the browser cannot run sandboxed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Running as root, and the unprivileged user for the browser does not exist.
    #[error(
        "the agent runs as root, so its Chromium runs sandboxed as the unprivileged user {name}, \
         which does not exist: create it (useradd --system --no-create-home --shell \
         /usr/sbin/nologin {name}) or name another in {BROWSER_USER_ENV}"
    )]
    NoUser {
        /// The user looked for.
        name: String,
    },
    /// The user names root itself.
    #[error("{BROWSER_USER_ENV} names a user with uid 0: the browser's user must be unprivileged")]
    Root,
    /// A directory on the way to the state directory is closed to the browser's user.
    #[error(
        "the agent runs as root, so its Chromium runs sandboxed as {user}, which cannot pass \
         through {}: choose a state directory it can reach (as root the default is \
         /var/lib/pap-agent), or let it pass (chmod o+x on that directory)",
        .dir.display()
    )]
    Unreachable {
        /// The browser's user.
        user: String,
        /// The first directory it cannot pass through.
        dir: std::path::PathBuf,
    },
    /// The user database could not be read.
    #[error("the user database could not be read")]
    Lookup(#[source] io::Error),
}

impl BrowserUser {
    /// The user Chromium runs as for this process: none when the agent is not root (Chromium then
    /// runs as the agent's own user and sandboxes itself), else [`BROWSER_USER`] or the user
    /// [`BROWSER_USER_ENV`] names.
    pub fn for_this_process() -> Result<Option<Self>, SandboxError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        let name = std::env::var(BROWSER_USER_ENV).unwrap_or_else(|_| BROWSER_USER.to_owned());
        let user = nix::unistd::User::from_name(&name)
            .map_err(|errno| SandboxError::Lookup(io::Error::from(errno)))?
            .ok_or(SandboxError::NoUser { name: name.clone() })?;
        if user.uid.is_root() {
            return Err(SandboxError::Root);
        }
        Ok(Some(Self {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }))
    }

    /// Lets the browser's group pass through `dir` (made 0700 by the agent): root's, group
    /// this user's primary group, 0710. It can reach the paths it is given below, list nothing.
    pub fn pass_through(&self, dir: &Path) -> io::Result<()> {
        std::os::unix::fs::chown(dir, None, Some(self.gid))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o710))
    }

    /// Whether this user may pass through every directory above `dir` (directories the agent
    /// does not own and does not change: a home, a temporary directory): a clear error naming
    /// the first it may not, rather than a Chromium that dies unable to find its profile.
    pub fn can_reach(&self, dir: &Path) -> Result<(), SandboxError> {
        use std::os::unix::fs::MetadataExt as _;
        for parent in dir.ancestors().skip(1).filter(|p| !p.as_os_str().is_empty()) {
            let Ok(meta) = std::fs::metadata(parent) else {
                continue;
            };
            let mode = meta.mode();
            let passes = if meta.uid() == self.uid {
                mode & 0o100 != 0
            } else if meta.gid() == self.gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            };
            if !passes {
                return Err(SandboxError::Unreachable {
                    user: self.name.clone(),
                    dir: parent.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Hands `dir` (made 0700 by the agent) to the browser's user: its own, 0700.
    pub fn own(&self, dir: &Path) -> io::Result<()> {
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
}
