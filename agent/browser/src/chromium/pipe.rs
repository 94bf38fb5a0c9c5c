//! DevTools on a pipe, not a port (security review M7).
//!
//! Chromium's DevTools server on `--remote-debugging-port` has no authentication: any local
//! process, of any user, that finds the port drives the browser (`Storage.getCookies` reads every
//! granted session). With `--remote-debugging-pipe` Chromium serves DevTools on its file
//! descriptors 3 (it reads) and 4 (it writes), one JSON message per NUL-terminated frame, and
//! listens on nothing. The pipe's ends are the agent's alone, and when the agent goes (even
//! killed) the pipe closes and Chromium exits with it.
//!
//! Two pieces make that work without `unsafe` and with chromiumoxide 0.9, which connects over a
//! websocket URL only:
//!
//! - [`command`]: the spawn goes through `sh -c 'exec "$@" 3<&0 4>&1 0</dev/null 1>/dev/null'`,
//!   so the child's stdin and stdout pipes become Chromium's fds 3 and 4 (Rust's `Command` has
//!   no safe way to place a descriptor at a given number).
//! - [`bridge`]: an in-process websocket endpoint on `127.0.0.1` that relays to the pipe. It
//!   serves exactly one connection, the agent's own chromiumoxide, on a path carrying a 128-bit
//!   secret that never leaves the process, and closes its listener once that connection is made:
//!   while the browser runs, nothing listens. The secret is not a client credential of the
//!   provider (AIP-63 forbids those): it is used once, by the provider itself, within one launch.
//!
//! The agent's other processes (`pap-agent consent revoke`, `browser status`) reach a browser
//! through its owner's control socket instead (`control`).

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use async_tungstenite::tungstenite::http::StatusCode;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use futures_util::StreamExt as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::error::LaunchError;
use pap_shared::Rng;

/// The switch that puts DevTools on fds 3 and 4.
pub(super) const PIPE_SWITCH: &str = "--remote-debugging-pipe";

/// Lines of Chromium's stderr kept for a failed launch's error.
const STDERR_LINES_KEPT: usize = 20;

/// How long the bridge waits for the agent's own connection once it listens.
const BRIDGE_ACCEPT_DEADLINE: Duration = Duration::from_secs(10);

/// The id of the launch's first command (`Browser.getVersion`), answered before the bridge
/// relays anything: no id chromiumoxide uses (it counts up from 0) meets it.
const HELLO_ID: i64 = 2_147_483_647;

/// `executable` with `args`, its DevTools on the child's stdin (Chromium's fd 3) and stdout (its
/// fd 4), and its stderr piped for [`handshake`]. Chromium's own stdin and stdout are `/dev/null`.
pub(super) fn command(executable: &Path, args: &[String]) -> Command {
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(r#"exec "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
        // `$0` of the script, then `$@`: the browser and its arguments.
        .arg("pap-agent-chromium")
        .arg(executable)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The two ends of a browser's DevTools pipe, held by the agent.
pub(super) struct Pipe {
    to_browser: ChildStdin,
    from_browser: BufReader<ChildStdout>,
}

/// Takes the child's pipes, sends `Browser.getVersion` and waits up to `timeout` for its answer:
/// the browser's DevTools is up. Chromium's stderr is drained meanwhile (and afterwards, so it
/// never blocks on a full pipe); a browser that exits or stays silent fails with the first lines
/// it printed.
pub(super) async fn handshake(child: &mut Child, timeout: Duration) -> Result<Pipe, LaunchError> {
    let printed = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().map(|stderr| {
        let printed = printed.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut kept = printed.lock().unwrap_or_else(PoisonError::into_inner);
                if kept.len() < STDERR_LINES_KEPT {
                    kept.push(line);
                }
            }
        })
    });
    let (Some(mut to_browser), Some(from_browser)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(LaunchError::NoDevTools(
            "the browser's DevTools pipe was not set up".into(),
        ));
    };
    let mut from_browser = BufReader::new(from_browser);
    let hello = serde_json::json!({ "id": HELLO_ID, "method": "Browser.getVersion" }).to_string();
    let answered = tokio::time::timeout(timeout, async {
        let mut frame = hello.into_bytes();
        frame.push(0);
        // A browser that exited before reading closes the pipe: that is "no answer" too.
        if to_browser.write_all(&frame).await.is_err() {
            return false;
        }
        let mut message = Vec::new();
        loop {
            message.clear();
            match from_browser.read_until(0, &mut message).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {
                    let answer: serde_json::Value =
                        serde_json::from_slice(message.strip_suffix(&[0]).unwrap_or(&message)).unwrap_or_default();
                    if answer["id"].as_i64() == Some(HELLO_ID) {
                        return answer.get("result").is_some();
                    }
                }
            }
        }
    })
    .await;
    let said = || printed.lock().unwrap_or_else(PoisonError::into_inner).join("\n");
    match answered {
        Ok(true) => Ok(Pipe {
            to_browser,
            from_browser,
        }),
        Ok(false) => {
            // The pipe closed: the process is exiting. What it printed comes in by its end.
            if let Some(stderr) = stderr {
                let _ = tokio::time::timeout(Duration::from_secs(2), stderr).await;
            }
            Err(LaunchError::NoDevTools(said()))
        }
        Err(_) => Err(LaunchError::Timeout(said())),
    }
}

/// A websocket endpoint for [`Pipe`]: its one-time URL, and a signal that turns `true` once the
/// relay has ended (it ends when either side closes: the browser's end of the pipe closes when
/// its process exits, however it exits; the pipe closing ends the browser).
pub(super) async fn bridge(pipe: Pipe, rng: &dyn Rng) -> Result<(String, watch::Receiver<bool>), LaunchError> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| LaunchError::Cdp(format!("the DevTools bridge could not listen on loopback: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| LaunchError::Cdp(format!("the DevTools bridge has no address: {e}")))?
        .port();
    let mut secret = [0_u8; 16];
    rng.fill(&mut secret);
    let path = format!(
        "/devtools/browser/{}",
        secret.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let url = format!("ws://127.0.0.1:{port}{path}");
    let (ended, closed) = watch::channel(false);
    tokio::spawn(async move {
        let accepted = tokio::time::timeout(BRIDGE_ACCEPT_DEADLINE, accept_one(&listener, &path)).await;
        // From here nothing listens: the one connection is made, or none will be.
        drop(listener);
        if let Ok(Some(socket)) = accepted {
            relay(socket, pipe).await;
        }
        ended.send_replace(true);
    });
    Ok((url, closed))
}

type Socket = async_tungstenite::WebSocketStream<async_tungstenite::tokio::TokioAdapter<tokio::net::TcpStream>>;

/// Longest one connection's websocket handshake may take. The agent's own client sends its
/// request at once; a local stranger who connects first and says nothing is dropped after
/// this, and meanwhile others are served (review N13).
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(2);

/// Handshakes under way at once; a connection past it is closed unread.
const MAX_HANDSHAKES: usize = 32;

/// The first connection whose handshake names `path`; any other is refused (404) and the wait
/// goes on. Each handshake runs in a task of its own, within [`HANDSHAKE_DEADLINE`], so a
/// connection that stalls holds up no other (review N13).
async fn accept_one(listener: &TcpListener, path: &str) -> Option<Socket> {
    let mut handshakes = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted.ok()?;
                if handshakes.len() >= MAX_HANDSHAKES {
                    continue;
                }
                // CDP is request and answer, small messages: Nagle's wait for an ACK would hold
                // each answer back by the peer's delayed-ACK timer (measured: +110 ms a join).
                let _ = stream.set_nodelay(true);
                let path = path.to_owned();
                handshakes.spawn(async move {
                    tokio::time::timeout(HANDSHAKE_DEADLINE, websocket_handshake(stream, &path)).await.ok().flatten()
                });
            }
            Some(done) = handshakes.join_next(), if !handshakes.is_empty() => {
                if let Ok(Some(socket)) = done {
                    // The others (strangers, stalled) end with the set.
                    return Some(socket);
                }
            }
        }
    }
}

/// One connection's websocket handshake, accepted only on `path`.
async fn websocket_handshake(stream: tokio::net::TcpStream, path: &str) -> Option<Socket> {
    // Chromium's messages (screenshots, DOM snapshots) are not bounded by the protocol; the
    // only peer that gets past the handshake is the agent's own client, which sets no bound either.
    let config = WebSocketConfig::default().max_message_size(None).max_frame_size(None);
    #[allow(
        clippy::result_large_err,
        reason = "the shape tungstenite's handshake callback must have"
    )]
    let check = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
        if request.uri().path() == path {
            Ok(response)
        } else {
            let mut refused = ErrorResponse::new(None);
            *refused.status_mut() = StatusCode::NOT_FOUND;
            Err(refused)
        }
    };
    async_tungstenite::tokio::accept_hdr_async_with_config(stream, check, Some(config))
        .await
        .ok()
}

/// Relays websocket messages to NUL-terminated frames on the pipe and back, until either side
/// closes.
async fn relay(socket: Socket, pipe: Pipe) {
    let (mut to_client, mut from_client) = socket.split();
    let Pipe {
        mut to_browser,
        mut from_browser,
    } = pipe;
    let upstream = async {
        while let Some(Ok(message)) = from_client.next().await {
            let bytes = match message {
                Message::Text(text) => text.as_bytes().to_vec(),
                Message::Binary(bytes) => bytes.to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            let mut frame = bytes;
            frame.push(0);
            if to_browser.write_all(&frame).await.is_err() {
                break;
            }
        }
    };
    let downstream = async {
        let mut frame = Vec::new();
        loop {
            frame.clear();
            match from_browser.read_until(0, &mut frame).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let message = String::from_utf8_lossy(frame.strip_suffix(&[0]).unwrap_or(&frame)).into_owned();
                    if to_client.send(Message::text(message)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_client.close(None).await;
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[tokio::test]
    async fn a_stranger_who_connects_first_and_says_nothing_does_not_stall_the_bridge() {
        // Review N13: a local user polls for the bridge's port and connects before the agent's
        // own client, then sends nothing. The agent's client is served all the same, at once.
        let mut child = Command::new("/bin/cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pipe = Pipe {
            to_browser: child.stdin.take().unwrap(),
            from_browser: BufReader::new(child.stdout.take().unwrap()),
        };
        let (url, _closed) = bridge(pipe, &pap_shared::SystemRng).await.unwrap();
        let port: u16 = url
            .trim_start_matches("ws://127.0.0.1:")
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let _silent = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let started = std::time::Instant::now();
        let connected = tokio::time::timeout(
            Duration::from_secs(5),
            async_tungstenite::tokio::connect_async(url.as_str()),
        )
        .await
        .expect("the agent's client waited behind a silent stranger");
        assert!(connected.is_ok(), "the agent's own client was refused");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "served after {:?}",
            started.elapsed()
        );
    }
}
