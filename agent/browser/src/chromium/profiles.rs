//! The browsers of a state directory seen from another process: how `pap-agent consent revoke`
//! reaches a running agent's browsers (AIP-63 C8) through the DevTools port each wrote into its
//! profile.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chromiumoxide::Browser;
use futures_util::StreamExt as _;

use super::cdp::{self, STEP};
use crate::consent::{Forgotten, Injection, LiveError, LiveInstances, Scope};

/// The browsers of a state directory, reached from another process through the DevTools port
/// each wrote into its profile (`DevToolsActivePort`): how `pap-agent consent revoke` reaches a
/// running agent's browsers.
#[derive(Clone, Debug)]
pub struct LiveProfiles {
    state_dir: PathBuf,
}

impl LiveProfiles {
    /// The browsers under `state_dir/browsers/`.
    pub fn new(state_dir: &Path) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
        }
    }

    fn endpoints(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.state_dir.join("browsers")) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| std::fs::read_to_string(entry.path().join("DevToolsActivePort")).ok())
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
    /// Connects to each running browser of the state directory. A profile whose browser has
    /// ended leaves its port file behind: it is skipped.
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
            total += cdp::inject(&connected.browser, injection).await?;
        }
        Ok(total)
    }
}
