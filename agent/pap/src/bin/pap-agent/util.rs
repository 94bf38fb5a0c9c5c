//! Small helpers every command area uses: parsing flags' values, printing, the shutdown signal.

use std::collections::HashMap;
use std::net::SocketAddr;

use anyhow::{Context as _, bail};
use pap_shared::CompanyDomain;

/// Completes at SIGINT or SIGTERM (at SIGINT only where SIGTERM cannot be watched).
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub(crate) fn read_file(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

pub(crate) fn parse_domain(domain: &str) -> anyhow::Result<CompanyDomain> {
    CompanyDomain::try_from(domain).with_context(|| format!("{domain:?} is not a company domain"))
}

pub(crate) fn parse_connect(entries: &[String]) -> anyhow::Result<HashMap<String, SocketAddr>> {
    entries
        .iter()
        .map(|entry| {
            let (name, addr) = entry
                .split_once('=')
                .with_context(|| format!("--connect {entry}: expected NAME=ADDR:PORT"))?;
            if name.is_empty() {
                bail!("--connect {entry}: the name is empty");
            }
            Ok((
                name.to_ascii_lowercase(),
                addr.parse()
                    .with_context(|| format!("--connect {entry}: bad address"))?,
            ))
        })
        .collect()
}

/// `text` from a company, safe for a terminal: every control character (an ANSI or OSC escape
/// that would rewrite what the operator sees, security review L8) shown as U+FFFD.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { char::REPLACEMENT_CHARACTER } else { c })
        .collect()
}

#[allow(clippy::print_stdout, reason = "the command's output")]
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}
