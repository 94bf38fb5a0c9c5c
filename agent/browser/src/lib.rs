//! The AIP-63 browser provider kit (agentbrowser/v1): a browser an agent drives, declared by a
//! manifest, supervised through a seven-state lifecycle, gated by capabilities, and seeded with
//! session material only through per-domain consent.
//!
//! Four layers, each using only the ones below it:
//!
//! ```text
//! tools     the tool host: AIP-14 tool calls on one instance, gated by its manifest (§2)
//!   │
//! chromium  the Chromium provider: launch or attach, DevTools, markers, the sweep, CDP
//!   │       effects, BrowserHost running instances under the supervisor (§3)
//!   │
//! consent   grants, sealed material, the hash-chained ledger, revoke (§4)
//!   │
//! spec      the vocabulary, sans I/O: lifecycle, supervisor, manifest and schema, tool
//!           table, AIP-14 errors (§1-§3, T4); what a conformance suite depends on
//! ```
//!
//! `store` (0700/0600 files, sealing) sits under consent; `persons` (what is the person's: the
//! sites where they decide, the tabs they hold, AIP-7) under chromium, whose request guard
//! judges every request by it. The kit knows nothing of PAP: the PAP
//! agent (`pap-agent`) uses it to get a browser it controls and the consent for a join.
//!
//! ```
//! use pap_browser::spec::{InstanceState, LifecycleEvent};
//!
//! let starting = InstanceState::Absent.on(&LifecycleEvent::Launch).unwrap();
//! assert_eq!(starting, InstanceState::Starting);
//! // A move the table does not list is refused, never made silently (L1).
//! assert!(InstanceState::Starting.on(&LifecycleEvent::Stop).is_err());
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chromium;
pub mod consent;
pub mod persons;
pub mod spec;
pub mod store;
#[cfg(feature = "test-support")]
pub mod testkit;
pub mod tools;

// The paved path:
pub use chromium::{BrowserHost, ChromiumConfig};
pub use consent::ConsentHost;
pub use tools::ToolHost;
