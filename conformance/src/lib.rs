//! Conformance for the PAP browser-session bridge.
//!
//! For now: the requirement ledger (`conformance/requirements.toml`), read and checked: every
//! rule names where it is implemented and which tests or conformance cases show it, and every
//! named test must exist.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ledger;

// The public interface is:
pub use ledger::{Ledger, LedgerError, Rule, Status};
