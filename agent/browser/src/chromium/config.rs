//! How the agent's Chromium is launched: the binary, the state directory, the timeouts (from a
//! manifest's `lifecycle`), test-only routing, and an attach endpoint.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::sandbox::BrowserUserPolicy;
use crate::persons::Persons;
use crate::spec::{Lifecycle, NavigationPolicy, Policy};

/// Where Debian's Chromium binary is (the `/usr/bin/chromium` wrapper adds its own flags).
pub const CHROMIUM: &str = "/usr/lib/chromium/chromium";

/// Test-only routing: names mapped to loopback addresses, and the SPKI hashes of test leaves.
#[derive(Clone, Debug, Default)]
pub struct TestNetwork {
    /// `MAP name:443 addr` rules.
    pub map: HashMap<String, SocketAddr>,
    /// Base64 SHA-256 of each accepted test leaf's SubjectPublicKeyInfo.
    pub spki_pins: Vec<String>,
}

/// How to launch Chromium.
#[derive(Clone, Debug)]
pub struct ChromiumConfig {
    /// The Chromium binary.
    pub executable: PathBuf,
    /// The agent's state directory; profiles go under `browsers/`.
    pub state_dir: PathBuf,
    /// A backstop for the DevTools address to show. Under a [`super::BrowserHost`] the supervisor's
    /// budget decides first (L9): a quiet launch fails at `budgetMs`, a progressing one may run
    /// to `hardCeilingMs`, which is this default.
    pub launch_timeout: Duration,
    /// How long `stop` waits after `Browser.close` before killing.
    pub grace: Duration,
    /// How long the health probe may take (`health.timeoutMs`, L4): a browser that does not
    /// answer within it is not healthy, and no caller hangs on it.
    pub health_timeout: Duration,
    /// Test-only routing.
    pub test_network: TestNetwork,
    /// Attach to the Chromium whose DevTools listen here (loopback only) instead of launching
    /// one: an instance the host did not start (AIP-63 L2 `wasAlreadyRunning`), which `stop`
    /// leaves running unless forced (L5). It must run on its own, non-default user-data
    /// directory (L13), which is read from its command line.
    pub attach_to: Option<SocketAddr>,
    /// Where the browser may go (H3): `https:` to public hosts and `about:blank` by default;
    /// an operator may name more origins (a loopback test server). Enforced by the browser
    /// itself for every request, and by the tools before they navigate.
    pub navigation: NavigationPolicy,
    /// The sites where the person decides, and the tabs the person holds (AIP-7): the browser
    /// refuses every state-changing request to those sites from any other tab. None by default;
    /// an agent that holds Sessions names its sites (the PAP agent: its wallet's companies).
    pub persons: Persons,
    /// Who the browser runs as when the agent runs as root (review N11): by default the state
    /// directory's own user ([`BrowserUserPolicy::from_env`]).
    pub browser_user: BrowserUserPolicy,
    /// The directories whose files the person lets tools hand a page (`pap.browser.file_upload`,
    /// `pap-agent --upload-dir`): none by default, and then no file leaves the host that way.
    pub upload_dirs: Vec<PathBuf>,
}

impl ChromiumConfig {
    /// The defaults for a state directory: Debian's Chromium, the hard ceiling (360 s) as the
    /// launch backstop, 2 s of grace, 5 s for the health probe.
    pub fn new(state_dir: PathBuf) -> Self {
        Self {
            executable: PathBuf::from(CHROMIUM),
            state_dir,
            launch_timeout: Duration::from_millis(Policy::default().hard_ceiling),
            grace: Duration::from_secs(2),
            health_timeout: Duration::from_secs(5),
            test_network: TestNetwork::default(),
            attach_to: None,
            navigation: NavigationPolicy::https_only(),
            persons: Persons::none(),
            browser_user: BrowserUserPolicy::from_env(),
            upload_dirs: Vec::new(),
        }
    }

    /// These settings as a manifest's `lifecycle` gives them: the hard ceiling as the launch
    /// backstop, `stop.graceMs`, `health.timeoutMs` (L4, L5, L9).
    pub fn with_lifecycle(mut self, lifecycle: &Lifecycle) -> Self {
        self.launch_timeout = Duration::from_millis(lifecycle.policy().hard_ceiling);
        self.grace = Duration::from_millis(lifecycle.stop.grace_ms);
        self.health_timeout = Duration::from_millis(lifecycle.health.timeout_ms);
        self
    }
}
