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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use pap_agent::pairing::{Bearer, Devices};
use pap_agent::{
    ClientConfig, Company, Identity, PapClient, Wallet, WalletSites, documents_router, join, join_tab,
    new_pairwise_user, pin_served_leaf,
};
use pap_browser::chromium::{self, BrowserHost, ChromiumConfig, TestNetwork, click_and_land};
use pap_browser::consent;
use pap_browser::spec::{InstanceKey, InstanceState, Lifecycle, OperatorReset};
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_net::listener::TlsListener;
use pap_shared::{CompanyDomain, HttpsUrl, SystemClock, SystemRng};
use rustls::pki_types::CertificateDer;

use crate::agent::*;
use crate::browser::*;
use crate::cli::*;
use crate::consent_cli::*;
use crate::host::*;
use crate::identity::*;
use crate::tunnel::*;
use crate::util::*;

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
