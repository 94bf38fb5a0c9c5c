//! Conformance for the PAP browser-session bridge.
//!
//! - [`pap`]: the three PAP cases of the bridge (`lifecycle.browser-joins-session`,
//!   `lifecycle.browser-assertion-refused`, `operations.web-confirm-at-most-once`), played by our
//!   agent in real Chromium against any company; binary `pap-conformance pap`.
//! - [`browser`]: the AIP-63 suite, hooks by id, against any provider (our Chromium provider,
//!   fakes, and deliberately broken fakes that must fail); binary `pap-conformance browser`.
//! - [`Ledger`]: the requirement ledger (`conformance/requirements.toml`), checked so that every
//!   test it names exists.

#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod abuse;
pub mod balance;
pub mod browser;
mod ledger;
pub mod pap;
mod process;
pub mod replicas;
pub mod report;

// The public interface is:
pub use ledger::{Ledger, RequirementLedgerError, Rule, Status};
