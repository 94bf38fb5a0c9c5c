//! The personal agent's side of the PAP browser-session bridge (PAP §5).
//!
//! The agent holds a PAP Session with a company ([`PapClient`]) and joins the company's website
//! from a browser it controls (the AIP-63 kit, [`pap_browser`]: real Chromium over CDP): it signs
//! a 60-second `poppy-browser+jwt` for the live Session and has the browser form-POST it to the
//! company's published endpoint ([`join`]); the company answers with its own cookie and a
//! redirect, and the browser then shows the Session.
//!
//! ```text
//! pap-agent (this crate)    identity, PAP client, wallet, join, the PAP tools, the `pap-agent` binary
//!     │
//! pap-host                  the paired MCP host: MCP over HTTP and stdio, pairing, the tunnel
//!     │
//! pap-browser               the AIP-63 kit: spec, consent, Chromium, tool host
//!     │
//! pap-shared                wire types, JOSE, domain rules, Clock/Rng
//! ```
//!
//! # Layout
//!
//! - [`Identity`] (`identity`): the agent's `client_id`, its P-256 key and documents
//!   (`documents`, `tls`: serving them, pinning a test company's leaf).
//! - [`PapClient`] (`client`): discovery, Sessions (jwt-bearer + DPoP), Device Sign-In, Account
//!   Token revocation, Operations v1.
//! - [`Wallet`] (`wallet`): what the agent keeps per company and holder, sealed; [`WalletSites`]:
//!   the companies it names are the person's sites in the agent's browser (AIP-7).
//! - [`join`] (`join`): the browser-session join (PAP §5, agent side).
//! - [`PapTools`] (`pap_tools`): the PAP steps as tools the paired MCP host serves beside the
//!   browser's ([`pap_host::ExtraTools`]).
//! - `src/bin/pap-agent/`: the CLI.

#![doc = include_str!("../../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
pub mod decisions;
mod documents;
mod identity;
mod join;
mod pap_tools;
#[cfg(feature = "test-support")]
pub mod testkit;
mod tls;
mod wallet;

// The public interface is:
pub use client::{
    ClientConfig, ClientError, Company, DeclaredProposal, DeviceAuthorization, DiscoveryReport,
    MAX_DEVICE_SIGNIN_SECONDS, PapClient, Pause, Session, TokioPause, new_pairwise_user,
};
pub use documents::{DOCUMENTS_CACHE_CONTROL, documents_router};
pub use identity::{DEFAULT_ROTATION_GRACE_SECONDS, Identity, IdentityError, KEY_ID, RotationReport};
pub use join::{JoinError, JoinOutcome, JoinStages, JoinTab, JoinTabError, join, join_tab, still_new};
pub use pap_tools::{PapTool, PapTools, sign_out_device};
pub use tls::{PinError, pin_served_leaf, spki_pin};
pub use wallet::{Holder, Wallet, WalletError, WalletSites};
