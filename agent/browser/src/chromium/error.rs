//! Why a launch or a browser operation failed: typed errors that carry what Chromium printed or
//! the head of what it answered, never page content or a value (C9).

use crate::consent::LiveError;
use crate::spec::ToolError;

/// Why a browser could not be launched. Carries what Chromium printed, never page content.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The supervisor refused: crash-looping (L6), or stopping.
    #[error("the supervisor refused the launch: {}", .0.message)]
    Refused(ToolError),
    /// The instance key is not `[A-Za-z0-9_-]+`.
    #[error("the instance key must be letters, digits, '-' or '_'")]
    BadInstance,
    /// Connecting over CDP failed.
    #[error("connecting to Chromium over CDP failed: {0}")]
    Cdp(String),
    /// Chromium exited before its DevTools answered; what it printed follows.
    #[error("Chromium exited before it was ready:\n{0}")]
    NoDevTools(String),
    /// Chromium cannot run sandboxed here (as root, its unprivileged user is missing).
    #[error(transparent)]
    Sandbox(#[from] super::sandbox::SandboxError),
    /// The profile directory could not be made.
    #[error("the browser profile could not be created")]
    Profile(#[source] std::io::Error),
    /// The binary could not be started (most often: it is not installed there).
    #[error(
        "Chromium could not be started from {}: install Debian's Chromium \
         (apt-get install --no-install-recommends chromium fonts-liberation), or point the \
         configuration's executable at yours",
        .executable.display()
    )]
    Spawn {
        /// The path tried.
        executable: std::path::PathBuf,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// The supervisor ended a launch that used its budget with no progress, or reached its
    /// hard ceiling (L9); it counted as a failed launch (L6).
    #[error("the launch stalled: {0}")]
    Stalled(String),
    /// The running Chromium could not be attached to (not on loopback, not answering, on a
    /// default profile).
    #[error("attaching to the running Chromium failed: {0}")]
    Attach(String),
    /// The browser's control socket (how the agent's other processes reach it, M7) could not
    /// be served; most often its path (`STATE/browsers/NAME.control`) is longer than a Unix
    /// socket's 107 bytes: choose a shorter state directory.
    #[error("the browser's control socket could not be served (is the state directory's path too long?)")]
    Control(#[source] std::io::Error),
    /// DevTools did not answer within the launch timeout; what it printed follows.
    #[error("Chromium was not ready in time:\n{0}")]
    Timeout(String),
}

/// Why a browser operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// A CDP call failed; the head of its answer, cut before anything it may have quoted.
    #[error("a CDP call failed: {0}")]
    Cdp(String),
    /// A consent effect (an injection, a storage read) failed.
    #[error(transparent)]
    Live(#[from] LiveError),
    /// The profile could not be removed.
    #[error("the browser profile could not be removed")]
    Profile(#[source] std::io::Error),
    /// Granted material was offered to an attached browser: the operator runs it, its manifest
    /// declares no `cookies`, and `consent revoke` cannot reach it to take the material out
    /// again (review F1).
    #[error("an attached browser takes no granted material")]
    Attached,
}

impl BrowserError {
    /// A CDP error, cut before anything it may quote back (C9).
    #[allow(
        clippy::needless_pass_by_value,
        reason = "taken by value to serve as a `map_err` adaptor"
    )]
    pub(crate) fn cdp(error: chromiumoxide::error::CdpError) -> Self {
        Self::Cdp(scrub(&error.to_string()))
    }
}

/// CDP error text may quote what was sent; a cookie value never crosses the host boundary (C9):
/// only the text before the first quote or bracket, at most 200 characters.
pub(crate) fn scrub(text: &str) -> String {
    text.chars()
        .take_while(|c| !matches!(c, '"' | '\'' | '{' | '['))
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}
