//! `pap-agent`: a personal agent that holds PAP Sessions with companies and joins their
//! websites from its own Chromium.
//!
//! Run with `cargo run -p pap-agent -- --help`.

mod agent;
mod browser;
mod cli;
mod consent_cli;
mod host;
mod identity;
mod tunnel;
mod util;

use clap::Parser as _;
use pap_browser::chromium;

use crate::cli::{Cli, run};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // chromiumoxide warns once per CDP message it cannot parse (harmless on this Chromium) and
    // errors when the browser closes its socket at stop; RUST_LOG brings them back.
    let base = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,chromiumoxide::handler=off".into());
    tracing_subscriber::fmt()
        .with_env_filter(chromium::log_filter(&base))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(cli))
}
