//! The browsers of a state directory seen from another process: how `pap-agent consent revoke`
//! reaches a running agent's browsers (AIP-63 C8) through each browser's owner, at the control
//! socket it serves beside the profile (`control`; DevTools itself is a pipe only the owner holds,
//! review M7).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::control;
use super::sweep::{ProcTable, ProcessTable, browsers_of};
use crate::consent::{Forgotten, Injection, LiveError, LiveInstances, Scope};

/// The browsers of a state directory, reached from another process through the control socket
/// each browser's owner serves (`STATE/browsers/NAME.control`): how `pap-agent consent revoke`
/// reaches a running agent's browsers.
///
/// Only the socket of a browser that runs now, as this user, marked as this state directory's,
/// is asked (review L5): a killed owner leaves its socket file behind, and nothing but a running
/// browser's owner is sent granted material. The owner answers only this user, and is checked to
/// be this user (`SO_PEERCRED`).
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

    /// The control sockets of the state directory's running browsers (none when the process
    /// table cannot be read). A profile path with a `..` is nobody's here: `starts_with` is
    /// component-wise, so `STATE/browsers/../../x` would pass it and send the ask outside the
    /// state directory (review N12).
    fn sockets(&self) -> Vec<PathBuf> {
        let running = browsers_of(self.processes.as_ref(), &self.state_dir).unwrap_or_default();
        let browsers = self.state_dir.join("browsers");
        let mut sockets: Vec<PathBuf> = running
            .iter()
            .filter(|browser| {
                browser.user_data_dir.starts_with(&browsers)
                    && browser
                        .user_data_dir
                        .components()
                        .all(|part| !matches!(part, std::path::Component::ParentDir))
            })
            .map(|browser| control::socket_path(&browser.user_data_dir))
            .collect();
        sockets.sort();
        sockets.dedup();
        sockets
    }
}

#[async_trait]
impl LiveInstances for LiveProfiles {
    /// Asks every running browser, whatever the others answer: one hung or failing owner must
    /// not leave the browsers after it holding what is revoked (review N12). Every failure is
    /// reported, together.
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, LiveError> {
        let mut total = Forgotten::default();
        let mut failures = Vec::new();
        for socket in self.sockets() {
            match control::forget(&socket, scope, origins).await {
                Ok(Some(forgotten)) => total += forgotten,
                Ok(None) => {}
                Err(error) => failures.push(error),
            }
        }
        LiveError::all(failures).map_or(Ok(total), Err)
    }

    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError> {
        let mut total = 0;
        let mut failures = Vec::new();
        for socket in self.sockets() {
            match control::inject(&socket, injection).await {
                Ok(injected) => total += injected.unwrap_or(0),
                Err(error) => failures.push(error),
            }
        }
        LiveError::all(failures).map_or(Ok(total), Err)
    }
}
