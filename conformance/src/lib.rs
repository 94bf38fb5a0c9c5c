//! Conformance for the PAP browser-session bridge.
//!
//! - [`pap`]: the three PAP cases of the bridge (`lifecycle.browser-joins-session`,
//!   `lifecycle.browser-assertion-refused`, `operations.web-confirm-at-most-once`), played by our
//!   agent in real Chromium against any company; binary `pap-conformance pap`.
//! - [`Ledger`]: the requirement ledger (`conformance/requirements.toml`), checked so that every
//!   test it names exists.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ledger;
pub mod pap;

// The public interface is:
pub use ledger::{Ledger, LedgerError, Rule, Status};
