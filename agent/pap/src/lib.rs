//! The personal agent's side of the PAP browser-session bridge (PAP §5).
//!
//! The agent holds a PAP Session with a company ([`PapClient`]) and joins the company's website
//! from a browser it controls (the AIP-63 kit, [`pap_browser`]: real Chromium over CDP): it signs
//! a 60-second `poppy-browser+jwt` for the live Session and has the browser form-POST it to the
//! company's published endpoint ([`join`]); the company answers with its own cookie and a
//! redirect, and the browser then shows the Session.
//!
//! ```text
//! pap-agent (this crate)    identity, PAP client, wallet, join, the `pap-agent` binary
//!     │
//! pap-browser               the AIP-63 kit: spec, consent, Chromium, tool host
//!     │
//! pap-shared                wire types, JOSE, domain rules, Clock/Rng
//! ```

#![doc = include_str!("../../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod documents;
mod identity;
mod join;
pub mod mcp;
pub mod pairing;
#[cfg(feature = "test-support")]
pub mod testkit;
mod tls;
pub mod tunnel;
mod wallet;

// The public interface is:
pub use client::{
    ClientConfig, ClientError, Company, DeclaredProposal, DeviceAuthorization, DiscoveryReport,
    MAX_DEVICE_SIGNIN_SECONDS, PapClient, Pause, Session, TokioPause, new_pairwise_user,
};
pub use documents::{DOCUMENTS_CACHE_CONTROL, documents_router};
pub use identity::{DEFAULT_ROTATION_GRACE_SECONDS, Identity, IdentityError, KEY_ID, RotationReport};
pub use join::{JoinError, JoinOutcome, JoinTabError, join, join_tab};
pub use tls::{PinError, pin_served_leaf, spki_pin};
pub use wallet::{Holder, Wallet, WalletError, WalletSites};
