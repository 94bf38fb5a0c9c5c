//! Chromium's sandbox, always on (security review H4). The agent's browser holds the person's
//! granted sessions and visits pages that may be hostile: its renderers run in Chromium's own
//! sandbox (a user namespace of their own and a seccomp-bpf filter), never `--no-sandbox`.
//!
//! As an unprivileged user Chromium sandboxes itself. As root it cannot (it refuses to start as
//! root unless the sandbox is turned off), so an agent running as root (CI, a container) runs
//! Chromium as an unprivileged user instead, **one per state directory** (review N11): two
//! agents on one host, or an agent and a test harness, never share a browser uid, so a browser
//! compromised through one cannot read the other's profile or trace its processes. The user is
//! `pap-browser-` and ten hex digits of the state directory's path hash, created with
//! `useradd --system` on first launch where the system allows it (root, `useradd` present) and
//! recorded in `STATE/browser-user`, so the same state directory keeps its user when it moves.
//! Where it cannot be created, the shared [`BROWSER_USER`] (`pap-browser`) serves, and the
//! launch logs that it is shared. [`BROWSER_USER_ENV`] names one user for every state directory
//! instead (an operator's own choice, or a test harness that makes throwaway state directories
//! and must not leave a user for each). A dedicated user, never `nobody`: the profile holds
//! cookies, and whatever else runs as `nobody` could read it. The layout follows:
//!
//! ```text
//! STATE        root:USER 0710   (the group may pass through, not list)
//!   browser-user  root 0600     (USER's name)
//!   browsers/  root:USER 0710
//!     NAME/    USER      0700   (the profile)
//!   chromium-home/, downloads/NAME/    USER 0700
//!   keys/ consent/ identity/ …  root   0700   (as before: the browser's user reaches none)
//! ```

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// The shared unprivileged user Chromium runs as when the agent runs as root and the state
/// directory's own user cannot be created; every per-state user's name starts with it.
pub const BROWSER_USER: &str = "pap-browser";

/// Names one user for every state directory, in place of a user per state directory.
pub const BROWSER_USER_ENV: &str = "PAP_AGENT_BROWSER_USER";

/// The file in the state directory that names its browser's user.
const RECORD: &str = "browser-user";

/// Who the browser runs as when the agent runs as root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrowserUserPolicy {
    /// One user per state directory, created where the system allows it (the default).
    PerStateDirectory,
    /// This user for every state directory ([`BROWSER_USER_ENV`], or a harness's choice).
    Named(String),
}

impl BrowserUserPolicy {
    /// [`BROWSER_USER_ENV`]'s user when it is set, else a user per state directory.
    pub fn from_env() -> Self {
        match std::env::var(BROWSER_USER_ENV) {
            Ok(name) if !name.is_empty() => Self::Named(name),
            _ => Self::PerStateDirectory,
        }
    }

    /// [`BROWSER_USER_ENV`]'s user, else the shared [`BROWSER_USER`]: for a harness that makes
    /// a throwaway state directory on each run (a user for each would pile up).
    pub fn shared() -> Self {
        match Self::from_env() {
            Self::PerStateDirectory => Self::Named(BROWSER_USER.to_owned()),
            named => named,
        }
    }
}

impl Default for BrowserUserPolicy {
    fn default() -> Self {
        Self::from_env()
    }
}

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
         which does not exist and could not be created: create it (useradd --system \
         --no-create-home --shell /usr/sbin/nologin {name}) or name another in {BROWSER_USER_ENV}"
    )]
    NoUser {
        /// The user looked for.
        name: String,
    },
    /// The user names root itself.
    #[error("the browser's user has uid 0: it must be unprivileged")]
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
    /// The state directory's record of its browser's user could not be written.
    #[error("the state directory's record of its browser's user could not be written")]
    Record(#[source] io::Error),
}

/// Why a state directory's own user could not be created (logged: the shared user serves).
#[derive(Debug, thiserror::Error)]
enum CreateUserError {
    /// `useradd` could not be run (not installed, say).
    #[error("useradd could not be run")]
    Spawn(#[source] io::Error),
    /// `useradd` ran and refused (not root, a read-only `/etc`).
    #[error("useradd refused ({status}): {said}")]
    Refused {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it said on standard error (its first 300 characters).
        said: String,
    },
}

/// `pap-browser-` and ten hex digits: a state directory's own user.
fn is_per_state_name(name: &str) -> bool {
    name.strip_prefix(BROWSER_USER)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|hex| hex.len() == 10 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl BrowserUser {
    /// The user Chromium runs as for `state_dir`: none when the agent is not root (Chromium then
    /// runs as the agent's own user and sandboxes itself), else the one `policy` names, or the
    /// state directory's own (recorded, or created now and recorded).
    pub fn for_state_dir(state_dir: &Path, policy: &BrowserUserPolicy) -> Result<Option<Self>, SandboxError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        let user = match policy {
            BrowserUserPolicy::Named(name) => Self::named(name)?.ok_or(SandboxError::NoUser { name: name.clone() })?,
            BrowserUserPolicy::PerStateDirectory => Self::of_state_dir(state_dir)?,
        };
        // The record names the user the directories below are handed to: the downloads a tool
        // makes later, and the next launch, find it there.
        let recorded = std::fs::read_to_string(state_dir.join(RECORD)).ok();
        if recorded.as_deref() != Some(user.name.as_str()) {
            std::fs::create_dir_all(state_dir).map_err(SandboxError::Record)?;
            pap_shared::fs::write_private(&state_dir.join(RECORD), user.name.as_bytes())
                .map_err(SandboxError::Record)?;
        }
        Ok(Some(user))
    }

    /// The shared user ([`BROWSER_USER_ENV`]'s, else [`BROWSER_USER`]) when the agent is root:
    /// for a browser outside any state directory (an operator's own, started for an attach).
    pub fn shared() -> Result<Option<Self>, SandboxError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        let BrowserUserPolicy::Named(name) = BrowserUserPolicy::shared() else {
            return Ok(None);
        };
        Self::named(&name)?.ok_or(SandboxError::NoUser { name }).map(Some)
    }

    /// The user the state directory's browsers were last handed to (its record), when the
    /// agent is root; else as [`Self::for_state_dir`] with [`BrowserUserPolicy::from_env`].
    pub fn recorded(state_dir: &Path) -> Result<Option<Self>, SandboxError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        if let Ok(name) = std::fs::read_to_string(state_dir.join(RECORD))
            && let Some(user) = Self::named(name.trim())?
        {
            return Ok(Some(user));
        }
        Self::for_state_dir(state_dir, &BrowserUserPolicy::from_env())
    }

    /// The name of `state_dir`'s own user: [`BROWSER_USER`], `-`, and ten hex digits of the
    /// hash of its absolute path (22 characters: under every system's limit of 32).
    pub fn name_for(state_dir: &Path) -> String {
        use sha2::Digest as _;
        let path = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_owned());
        let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
        let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
        format!("{BROWSER_USER}-{hex}")
    }

    /// Whether `name` is one of the agent's browser users (the shared one, a per-state one, or
    /// the one [`BROWSER_USER_ENV`] names): their processes may be the agent's browsers.
    pub fn is_browser_user(name: &str) -> bool {
        name == BROWSER_USER
            || is_per_state_name(name)
            || std::env::var(BROWSER_USER_ENV).is_ok_and(|named| named == name)
    }

    /// The state directory's own user: its record's, else the one its path names, created now
    /// where the system allows it, else the shared [`BROWSER_USER`].
    fn of_state_dir(state_dir: &Path) -> Result<Self, SandboxError> {
        // A record of the shared user (a fallback, or a harness's choice) is not kept: the
        // directory gets its own user as soon as the system allows it.
        if let Ok(name) = std::fs::read_to_string(state_dir.join(RECORD))
            && is_per_state_name(name.trim())
            && let Some(user) = Self::named(name.trim())?
        {
            return Ok(user);
        }
        let name = Self::name_for(state_dir);
        if let Some(user) = Self::named(&name)? {
            return Ok(user);
        }
        let created = Self::create(&name, state_dir);
        // Another launch for the same directory may have created it first: look again.
        if let Some(user) = Self::named(&name)? {
            return Ok(user);
        }
        match Self::named(BROWSER_USER)? {
            Some(shared) => {
                tracing::warn!(
                    user = %name,
                    reason = %created.err().map_or_else(|| "useradd made no such user".to_owned(), |e| e.to_string()),
                    "the state directory's own browser user could not be created: its browser runs as the shared {BROWSER_USER}"
                );
                Ok(shared)
            }
            None => Err(SandboxError::NoUser { name }),
        }
    }

    /// `useradd --system` for `name`: no home, no login, a group of its own.
    fn create(name: &str, state_dir: &Path) -> Result<(), CreateUserError> {
        let comment = format!("pap-agent browser for {}", state_dir.display());
        // GECOS holds neither `:` nor a newline.
        let comment: String = comment.chars().filter(|c| *c != ':' && *c != '\n').take(200).collect();
        let output = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .args(["--user-group", "--comment", &comment, name])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(CreateUserError::Spawn)?;
        if output.status.success() {
            Ok(())
        } else {
            Err(CreateUserError::Refused {
                status: output.status,
                said: String::from_utf8_lossy(&output.stderr)
                    .trim()
                    .chars()
                    .take(300)
                    .collect(),
            })
        }
    }

    /// The user called `name`, if there is one; never root.
    fn named(name: &str) -> Result<Option<Self>, SandboxError> {
        let Some(user) =
            nix::unistd::User::from_name(name).map_err(|errno| SandboxError::Lookup(io::Error::from(errno)))?
        else {
            return Ok(None);
        };
        if user.uid.is_root() {
            return Err(SandboxError::Root);
        }
        Ok(Some(Self {
            name: name.to_owned(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }))
    }

    /// Hands the state directory's `dir`, kept between launches (the browser's home), to this
    /// user: a copy another user owned (the state directory's user changed) is removed first,
    /// since that user could have left anything inside.
    pub fn own_kept(&self, dir: &Path) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::symlink_metadata(dir)?;
        if meta.uid() != self.uid && meta.uid() != nix::unistd::geteuid().as_raw() {
            std::fs::remove_dir_all(dir)?;
            crate::store::private_dir(dir)?;
        }
        self.own(dir)
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

    /// Hands the file `path` (written by the agent) to the browser's user to read: its own, 0600.
    pub fn own_file(&self, path: &Path) -> io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
    }

    /// Hands `dir` (made 0700 by the agent) to the browser's user: its own, 0700.
    pub fn own(&self, dir: &Path) -> io::Result<()> {
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
}
