//! The Chromium provider (AIP-63 §3 for a Chrome-family browser driven over CDP): the agent's
//! own Chromium launched on a fresh profile ([`ControlledBrowser`]) or one it attaches to, the
//! arguments and markers it runs with, the sweep that ends what a stopped or crashed instance
//! left, the CDP effects of consent (granted material in, revoked material out), and
//! [`BrowserHost`], which runs instances under the spec's supervisor.
//!
//! ```text
//! host ──> launch ──> pipe          (the process, DevTools on its pipe, the in-process bridge)
//!            ├──────> devtools      (the CDP connection; an attached browser's DevTools)
//!            ├──────> control ──> cdp (the socket the agent's other processes reach it by)
//!            ├──────> guard         (every request the browser sends, by the navigation rule)
//!   │        ├──────> args ──> config (arguments, markers, profile directories; the settings)
//!   ├────> sweep ───> args          (what a stop or a start ends, by marker or profile)
//!   └────> cdp                      (granted material in, revoked material out)
//! profiles ──> control              (the same effects from another process, through its owner)
//! every module ──> error            (typed errors, scrubbed CDP text)
//! ```

mod args;
mod cdp;
mod config;
mod control;
mod devtools;
mod error;
mod guard;
mod host;
mod launch;
mod logging;
mod pipe;
mod profiles;
mod sandbox;
mod standalone;
mod sweep;

// The public interface is:
pub use self::args::{BROWSER_ENV, CHROMIUM_HOME, HOST_MARKER, ORPHAN_MARKER, is_default_profile, passed_to_browser};
pub use self::cdp::click_and_land;
pub(crate) use self::error::scrub;

use crate::spec::{BrowserManifest, Diagnostic, parse_manifest};

/// The manifest of the agent's own Chromium provider, as shipped
/// (`agent/browser/providers/chromium/BROWSER.md`): its lifecycle is what a host of it runs by.
pub const MANIFEST: &str = include_str!("../../providers/chromium/BROWSER.md");

/// [`MANIFEST`], loaded and checked (M1-M6).
pub fn manifest() -> Result<BrowserManifest, Vec<Diagnostic>> {
    parse_manifest(MANIFEST, None)
}
pub use self::config::{CHROMIUM, ChromiumConfig, TestNetwork};
pub use self::control::probe_profile;
pub use self::error::{BrowserError, LaunchError};
pub use self::host::{BrowserHost, Exit, HealthLoop, Launched};
pub use self::launch::{ContextId, ControlledBrowser, PIPE_ENDPOINT};
pub use self::logging::{SECRET_SAFE_DIRECTIVES, log_filter};
pub use self::profiles::LiveProfiles;
pub use self::sandbox::{BROWSER_USER, BROWSER_USER_ENV, BrowserUser, BrowserUserPolicy, SandboxError};
pub use self::standalone::StandaloneChromium;
pub use self::sweep::{BrowserProcess, ProcTable, ProcessInfo, ProcessTable, SweepScope, browsers_of, sweep};
