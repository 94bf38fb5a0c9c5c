//! A running browser's control socket: how the agent's other processes reach a browser whose
//! DevTools is a pipe only its owner holds (review M7).
//!
//! The owner of each launched browser listens on `STATE/browsers/NAME.control`, a Unix socket
//! (0600, in the state directory's own `browsers/`, which the browser's user cannot write to)
//! that answers three requests, one per connection, each a JSON line: `health` (for `pap-agent
//! browser status`), `forget` and `inject` (the C8 and C1 effects of `pap-agent consent revoke`
//! and `refresh`, the same ones an in-process revoke runs). Both ends check that the other runs
//! as this user (`SO_PEERCRED`): a socket file's mode is one guard, the kernel's word on the
//! peer is the second. A request is at most [`MAX_REQUEST`] bytes and is read within
//! [`READ_TIMEOUT`]; requests are served one at a time.
//!
//! Nothing here speaks CDP to a stranger: what crosses the socket is the effect asked for and
//! its count, never a cookie read back.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Browser;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use super::cdp;
use crate::consent::{Forgotten, Injection, LiveError, Scope};
use crate::spec::InstanceState;
use pap_shared::GrantDomain;

/// The largest request read (an injection carries a grant's cookies and local storage).
pub(super) const MAX_REQUEST: u64 = 8 * 1024 * 1024;

/// How long a request may take to arrive, and an answer to be read.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The control socket of the browser on `user_data_dir` (`STATE/browsers/NAME` ->
/// `STATE/browsers/NAME.control`).
pub(super) fn socket_path(user_data_dir: &Path) -> PathBuf {
    let mut name = user_data_dir.file_name().unwrap_or_default().to_owned();
    name.push(".control");
    user_data_dir.with_file_name(name)
}

/// What a revoke covers, as the socket carries it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum WireScope {
    Domains(Vec<GrantDomain>),
    Everything,
}

/// A request to a browser's owner.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Request {
    /// Whether the browser answers over CDP.
    Health,
    /// [`crate::consent::LiveInstances::forget`] on this browser.
    Forget { scope: WireScope, origins: Vec<String> },
    /// [`crate::consent::LiveInstances::inject`] on this browser (values: see `Injection::to_wire`).
    Inject { injection: serde_json::Value },
}

/// An owner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Answer {
    Healthy(bool),
    Forgotten { cookies: usize, tabs: usize },
    Injected(usize),
    Failed(String),
}

/// The owner's end: serves the socket until dropped, then removes it.
#[derive(Debug)]
pub(super) struct ControlSocket {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl ControlSocket {
    /// Listens at `path` for `browser`'s owner. A file left there by a killed owner is replaced
    /// (the directory is the state directory's own: only this user writes there).
    pub(super) fn serve(path: PathBuf, browser: Arc<Browser>, health_timeout: Duration) -> std::io::Result<Self> {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if !is_this_user(&stream) {
                    continue;
                }
                let _ =
                    tokio::time::timeout(READ_TIMEOUT + cdp::STEP * 4, answer(stream, &browser, health_timeout)).await;
            }
        });
        Ok(Self { path, task })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the peer of `stream` runs as this process's effective user.
fn is_this_user(stream: &UnixStream) -> bool {
    stream
        .peer_cred()
        .is_ok_and(|peer| peer.uid() == nix::unistd::geteuid().as_raw())
}

/// Reads one request from `stream`, carries it out on `browser`, writes the answer.
async fn answer(stream: UnixStream, browser: &Browser, health_timeout: Duration) {
    let (reading, mut writing) = stream.into_split();
    let mut line = zeroize::Zeroizing::new(Vec::new());
    let read = tokio::time::timeout(
        READ_TIMEOUT,
        BufReader::new(reading.take(MAX_REQUEST)).read_until(b'\n', &mut line),
    )
    .await;
    let answer = match read {
        Ok(Ok(_)) if line.ends_with(b"\n") => match serde_json::from_slice::<Request>(&line) {
            Ok(request) => carry_out(request, browser, health_timeout).await,
            Err(_) => Answer::Failed("not a control request".into()),
        },
        _ => Answer::Failed("no complete request".into()),
    };
    if let Ok(mut text) = serde_json::to_vec(&answer) {
        text.push(b'\n');
        let _ = writing.write_all(&text).await;
    }
}

async fn carry_out(request: Request, browser: &Browser, health_timeout: Duration) -> Answer {
    match request {
        Request::Health => {
            let healthy = tokio::time::timeout(health_timeout, browser.version())
                .await
                .is_ok_and(|answer| answer.is_ok());
            Answer::Healthy(healthy)
        }
        Request::Forget { scope, origins } => {
            let scope = match &scope {
                WireScope::Domains(domains) => Scope::Domains(domains),
                WireScope::Everything => Scope::Everything,
            };
            // The socket serves a browser the agent launched (headless, no window at start).
            match cdp::forget(browser, scope, &origins, cdp::LastTab::None).await {
                Ok(forgotten) => Answer::Forgotten {
                    cookies: forgotten.cookies,
                    tabs: forgotten.tabs,
                },
                Err(error) => Answer::Failed(error.to_string()),
            }
        }
        Request::Inject { injection } => match Injection::from_wire(injection) {
            Ok(injection) => match cdp::inject(browser, &injection, None).await {
                Ok(count) => Answer::Injected(count),
                Err(error) => Answer::Failed(error.to_string()),
            },
            Err(_) => Answer::Failed("not an injection".into()),
        },
    }
}

/// Why an owner could not be asked.
#[derive(Debug, thiserror::Error)]
pub(super) enum AskError {
    /// Nobody listens at the socket (no owner yet, or it is gone), or it could not be read.
    #[error("the browser's owner could not be reached: {0}")]
    Unreachable(#[source] std::io::Error),
    /// The socket is served by a process of another user.
    #[error("the control socket is served by another user")]
    Stranger,
    /// The owner's answer did not come in time or did not parse.
    #[error("the browser's owner gave no usable answer")]
    NoAnswer,
}

/// Sends `request` to the owner at `path` and reads its answer.
async fn ask(path: &Path, request: &Request) -> Result<Answer, AskError> {
    let stream = UnixStream::connect(path).await.map_err(AskError::Unreachable)?;
    if !is_this_user(&stream) {
        return Err(AskError::Stranger);
    }
    let (reading, mut writing) = stream.into_split();
    let mut text = zeroize::Zeroizing::new(serde_json::to_vec(request).map_err(|_| AskError::NoAnswer)?);
    text.push(b'\n');
    writing.write_all(&text).await.map_err(AskError::Unreachable)?;
    let mut line = Vec::new();
    // The owner's work (a revoke closes tabs, one CDP step at a time) bounds the wait.
    tokio::time::timeout(
        READ_TIMEOUT + cdp::STEP * 4,
        BufReader::new(reading.take(MAX_REQUEST)).read_until(b'\n', &mut line),
    )
    .await
    .map_err(|_| AskError::NoAnswer)?
    .map_err(AskError::Unreachable)?;
    serde_json::from_slice(&line).map_err(|_| AskError::NoAnswer)
}

/// The state of the browser on `user_data_dir` seen from another process (L1): `starting` until
/// its owner serves the control socket, `healthy` when the browser answers its owner within
/// `timeout`, `degraded` when it does not (or the owner does not answer).
pub async fn probe_profile(user_data_dir: &Path, timeout: Duration) -> InstanceState {
    let path = socket_path(user_data_dir);
    if !path.exists() {
        return InstanceState::Starting;
    }
    match tokio::time::timeout(timeout + READ_TIMEOUT, ask(&path, &Request::Health)).await {
        Ok(Ok(Answer::Healthy(true))) => InstanceState::Healthy,
        _ => InstanceState::Degraded,
    }
}

/// Asks the owner at `path`: its answer, `None` when no owner listens there (gone, or not yet
/// serving: nothing runs there to act on), a [`LiveError::Owner`] when it failed or gave no
/// usable answer.
async fn ask_owner(path: &Path, request: &Request) -> Result<Option<Answer>, LiveError> {
    match ask(path, request).await {
        Ok(Answer::Failed(detail)) => Err(LiveError::Owner { detail }),
        Ok(answer) => Ok(Some(answer)),
        Err(AskError::Unreachable(_)) => Ok(None),
        Err(error) => Err(LiveError::Owner {
            detail: error.to_string(),
        }),
    }
}

/// The error for an answer of the wrong kind.
fn unexpected() -> LiveError {
    LiveError::Owner {
        detail: "an answer of another kind".into(),
    }
}

/// Asks the owner at `path` to forget `scope` (C8); `None` when no owner listens.
pub(super) async fn forget(path: &Path, scope: Scope<'_>, origins: &[String]) -> Result<Option<Forgotten>, LiveError> {
    let scope = match scope {
        Scope::Domains(domains) => WireScope::Domains(domains.to_vec()),
        Scope::Everything => WireScope::Everything,
    };
    let request = Request::Forget {
        scope,
        origins: origins.to_vec(),
    };
    match ask_owner(path, &request).await? {
        Some(Answer::Forgotten { cookies, tabs }) => Ok(Some(Forgotten { cookies, tabs })),
        Some(_) => Err(unexpected()),
        None => Ok(None),
    }
}

/// Asks the owner at `path` to inject `injection` (C1); `None` when no owner listens.
pub(super) async fn inject(path: &Path, injection: &Injection) -> Result<Option<usize>, LiveError> {
    let request = Request::Inject {
        injection: injection.to_wire(),
    };
    match ask_owner(path, &request).await? {
        Some(Answer::Injected(count)) => Ok(Some(count)),
        Some(_) => Err(unexpected()),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_sits_beside_the_profile() {
        assert_eq!(
            socket_path(Path::new("/state/browsers/cli-42")),
            PathBuf::from("/state/browsers/cli-42.control")
        );
    }

    #[test]
    fn requests_read_as_the_socket_carries_them() {
        let forget: Request = serde_json::from_str(
            r#"{"op":"forget","scope":{"domains":["shop.example"]},"origins":["https://shop.example:8443"]}"#,
        )
        .unwrap();
        assert!(matches!(forget, Request::Forget { scope: WireScope::Domains(ref d), .. } if d.len() == 1));
        let everything: Request = serde_json::from_str(r#"{"op":"forget","scope":"everything","origins":[]}"#).unwrap();
        assert!(matches!(
            everything,
            Request::Forget {
                scope: WireScope::Everything,
                ..
            }
        ));
        assert!(matches!(
            serde_json::from_str::<Request>(r#"{"op":"health"}"#).unwrap(),
            Request::Health
        ));
        // A grant domain is checked as it comes in: a suffix alone is not one.
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"forget","scope":{"domains":["com"]},"origins":[]}"#).is_err()
        );
    }
}
