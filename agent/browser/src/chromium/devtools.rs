//! Reaching a Chromium's DevTools: the address an operator's Chromium prints on stderr once its
//! port is bound, the CDP connection (certificate errors respected), `/json/version` on a
//! loopback port (both for an attached browser; the agent's own is on a pipe, `pipe`), and what a
//! running browser tells about itself (its process, its profile).

use std::path::PathBuf;
use std::time::Duration;

use chromiumoxide::browser::Browser;
use chromiumoxide::handler::HandlerConfig;
use futures_util::StreamExt as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Child;
use tokio::task::JoinHandle;

use super::error::LaunchError;

/// The DevTools address Chromium prints on stderr once its port is bound, within `timeout`;
/// then stderr keeps being drained (its lines dropped) so Chromium never blocks on a full pipe.
pub(super) async fn devtools_address(child: &mut Child, timeout: Duration) -> Result<String, LaunchError> {
    let stderr = child.stderr.take().ok_or(LaunchError::NoDevTools(String::new()))?;
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(timeout, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(ws) = line.strip_prefix("DevTools listening on ") {
                return Some(ws.trim().to_owned());
            }
            if seen.len() < 20 {
                seen.push(line);
            }
        }
        None
    })
    .await;
    let ws = match found {
        Ok(Some(ws)) => ws,
        Ok(None) => return Err(LaunchError::NoDevTools(seen.join("\n"))),
        Err(_) => return Err(LaunchError::Timeout(seen.join("\n"))),
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(ws)
}

/// Connects over CDP with certificate errors respected, and drives the connection.
pub(super) async fn connect_cdp(ws: String) -> Result<(Browser, JoinHandle<()>), LaunchError> {
    let handler_config = HandlerConfig {
        ignore_https_errors: false,
        ..HandlerConfig::default()
    };
    let (browser, mut handler) = Browser::connect_with_config(ws, handler_config)
        .await
        .map_err(|e| LaunchError::Cdp(e.to_string()))?;
    let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
    Ok((browser, handler))
}

/// `/json/version` on a loopback DevTools port (HTTP/1.1; Chromium closes an HTTP/1.0 request
/// unanswered, and keeps an HTTP/1.1 one open: the body is read to its Content-Length), within
/// `timeout`.
pub(super) async fn devtools_version(port: u16, timeout: Duration) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let response = tokio::time::timeout(timeout, async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        // Chromium builds webSocketDebuggerUrl from the Host header: it carries the port.
        let request = format!("GET /json/version HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = stream.read(&mut chunk).await.ok()?;
            response.extend_from_slice(&chunk[..read]);
            if let Some(complete) = http_body(&response) {
                return complete;
            }
            if read == 0 || response.len() > 64 * 1024 {
                return None;
            }
        }
    })
    .await
    .ok()??;
    serde_json::from_slice(&response).ok()
}

/// The body of a complete `200` response in `bytes`: `None` while incomplete, `Some(None)` for
/// anything else.
fn http_body(bytes: &[u8]) -> Option<Option<Vec<u8>>> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    if !head.starts_with("HTTP/1.1 200") {
        return Some(None);
    }
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    })?;
    let body = &bytes[end + 4..];
    (body.len() >= length).then(|| Some(body[..length].to_vec()))
}

/// The browser process's id, from `SystemInfo.getProcessInfo`.
pub(super) async fn browser_pid(browser: &Browser) -> Option<u32> {
    use chromiumoxide::cdp::browser_protocol::system_info::GetProcessInfoParams;
    let info = browser.execute(GetProcessInfoParams::default()).await.ok()?;
    info.result
        .process_info
        .iter()
        .find(|p| p.r#type == "browser")
        .and_then(|p| u32::try_from(p.id).ok())
}

/// The `--user-data-dir` on process `pid`'s command line (Linux `/proc`).
pub(super) fn user_data_dir_of(pid: u32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmdline
        .split(|b| *b == 0)
        .filter_map(|arg| std::str::from_utf8(arg).ok())
        .find_map(|arg| arg.strip_prefix("--user-data-dir="))
        .map(PathBuf::from)
}
