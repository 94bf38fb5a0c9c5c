//! A Chromium started on its own, outside any host: the instance "the host did not launch" that
//! the attach provider connects to.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::args::HEADLESS_ARGS;
use super::devtools::devtools_address;
use super::error::LaunchError;
use super::sandbox::BrowserUser;
use crate::store::private_dir;

/// A Chromium run on its own, outside any [`super::BrowserHost`]: what an operator starts for the
/// attach provider (a dedicated, headless Chromium on its own user-data directory, DevTools on
/// loopback), and what the attach tests and the AIP-63 suite start as the instance "the host
/// did not launch". It carries none of the host's markers, so no sweep of the host ends it.
#[derive(Debug)]
pub struct StandaloneChromium {
    child: Child,
    endpoint: SocketAddr,
}

impl StandaloneChromium {
    /// Starts `executable` on `user_data_dir` with DevTools on `127.0.0.1:port` (0: any free
    /// port) and `extra_args`, and waits up to `timeout` for its DevTools address (the line
    /// Chromium prints once the port is bound).
    pub async fn start(
        executable: &Path,
        user_data_dir: &Path,
        port: u16,
        extra_args: &[&str],
        timeout: Duration,
    ) -> Result<Self, LaunchError> {
        private_dir(user_data_dir).map_err(LaunchError::Profile)?;
        let mut command = Command::new(executable);
        if let Some(user) = BrowserUser::shared()? {
            // Sandboxed as the agent's own are: as root, run as the unprivileged browser user.
            user.can_reach(user_data_dir)?;
            user.own(user_data_dir).map_err(LaunchError::Profile)?;
            command.uid(user.uid).gid(user.gid).env("HOME", user_data_dir);
        }
        let mut child = command
            .args(HEADLESS_ARGS)
            .args(extra_args)
            .arg("--remote-debugging-address=127.0.0.1")
            .arg(format!("--remote-debugging-port={port}"))
            .arg(format!("--user-data-dir={}", user_data_dir.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                executable: executable.to_owned(),
                source,
            })?;
        let ws = devtools_address(&mut child, timeout).await?;
        let endpoint = url::Url::parse(&ws)
            .ok()
            .and_then(|u| u.port())
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .ok_or_else(|| LaunchError::NoDevTools(format!("an unexpected DevTools address {ws}")))?;
        Ok(Self { child, endpoint })
    }

    /// Its DevTools endpoint, for [`super::ChromiumConfig::attach_to`].
    pub fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `timeout` for it to exit; whether it did.
    pub async fn exited_within(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.child.wait()).await.is_ok()
    }

    /// Ends it (SIGKILL) and waits for it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}
