//! The browsers of a state directory seen from another process: how `pap-agent consent revoke`
//! reaches a running agent's browsers (AIP-63 C8) through the DevTools port each wrote into its
//! profile.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use chromiumoxide::Browser;
use futures_util::StreamExt as _;

use super::cdp::{self, STEP};
use super::sweep::{ProcTable, ProcessTable, browsers_of};
use crate::consent::{Forgotten, Injection, LiveError, LiveInstances, Scope};

/// The browsers of a state directory, reached from another process through the DevTools port
/// each wrote into its profile (`DevToolsActivePort`): how `pap-agent consent revoke` reaches a
/// running agent's browsers.
///
/// Only the profile of a browser that runs now, as this user, marked as this state directory's,
/// is read (review L5): a killed browser leaves its port file behind, and whoever binds that
/// port next would otherwise be sent the granted cookies of a `consent refresh`.
#[derive(Clone)]
pub struct LiveProfiles {
    state_dir: PathBuf,
    processes: Arc<dyn ProcessTable>,
}

impl std::fmt::Debug for LiveProfiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveProfiles")
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl LiveProfiles {
    /// The browsers under `state_dir/browsers/`, found in `/proc`.
    pub fn new(state_dir: &Path) -> Self {
        Self::with_processes(state_dir, Arc::new(ProcTable))
    }

    /// The browsers under `state_dir/browsers/`, found in `processes`.
    pub fn with_processes(state_dir: &Path, processes: Arc<dyn ProcessTable>) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            processes,
        }
    }

    /// The DevTools endpoints of the state directory's running browsers: the port file of each
    /// profile whose browser process runs now (none when the process table cannot be read).
    fn endpoints(&self) -> Vec<String> {
        let running = browsers_of(self.processes.as_ref(), &self.state_dir).unwrap_or_default();
        running
            .iter()
            .filter(|browser| browser.user_data_dir.starts_with(self.state_dir.join("browsers")))
            .filter_map(|browser| std::fs::read_to_string(browser.user_data_dir.join("DevToolsActivePort")).ok())
            .filter_map(|text| {
                let mut lines = text.lines();
                let port: u16 = lines.next()?.trim().parse().ok()?;
                let path = lines.next()?.trim().to_owned();
                Some(format!("ws://127.0.0.1:{port}{path}"))
            })
            .collect()
    }
}

/// A browser reached over its DevTools port, with the task that drives its connection.
struct Connected {
    browser: Browser,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl LiveProfiles {
    /// Connects to each running browser of the state directory (a profile whose browser has
    /// ended is not among them).
    async fn connect(&self) -> Vec<Connected> {
        let mut out = Vec::new();
        for endpoint in self.endpoints() {
            if let Ok(Ok((browser, mut handler))) = tokio::time::timeout(STEP, Browser::connect(endpoint)).await {
                let driver = tokio::spawn(async move { while handler.next().await.is_some() {} });
                out.push(Connected { browser, driver });
            }
        }
        out
    }
}

#[async_trait]
impl LiveInstances for LiveProfiles {
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, LiveError> {
        let mut total = Forgotten::default();
        for connected in self.connect().await {
            total += cdp::forget(&connected.browser, scope, origins).await?;
        }
        Ok(total)
    }

    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError> {
        let mut total = 0;
        for connected in self.connect().await {
            total += cdp::inject(&connected.browser, injection, None).await?;
        }
        Ok(total)
    }
}
