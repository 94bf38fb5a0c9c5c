//! The paired MCP host of an AIP-63 browser provider: how agent runtimes (Claude, Cursor, VS
//! Code, any MCP client) reach the agent's browser, and only as paired devices (AIP-63 "Auth
//! model", AIP-59). It knows nothing of PAP: an embedder plugs its own tools in beside the
//! browser's ([`ExtraTools`]; the PAP agent serves its `pap_*` tools that way).
//!
//! # Layout
//!
//! ```text
//! tunnel/    AIP-59 pair/v2 over a rendezvous: the host's end (serves /mcp and /health to a
//!   │        paired device through the end-to-end channel), the device's end (a loopback MCP
//!   │        endpoint for its client), the self-hostable pair page
//! http       MCP over streamable HTTP: the Host/Origin guard, the device bearer, the body cap
//!   │        and deadlines, per-connection limits; `/pair` redeems a one-time code
//! server     BrowserServer: the tools as MCP lists and calls them (the provider's AIP-63 tools
//!   │        and any ExtraTools), launch on demand, AIP-14 errors as tool errors; stdio;
//!   │        the embedder's resources, with subscriptions
//! resources  ExtraResources, and the watch that tells a subscribed client of a change
//! jsonrpc    the JSON-RPC errors rmcp would not give (-32700, a nameless tools/call), on both
//!   │        transports; MCP over stdio through that check
//! console    the person's console: requests for access, grants, devices, the record (the
//!   │        ledger and the host's audit); a one-time link, then a cookie; a bearer gets 403
//! install    `install-mcp`: a device minted for a local client, written into its config
//!   │
//! pairing    Devices (devices.json: digests only, 0600), one-time codes, tunnel records
//! rate       calls per device and tool
//! ```
//!
//! Beneath it: `pap-browser` (the kit: the tool host, consent, Chromium) and `pap-pair` (the
//! pair/v2 protocol and the broker).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod console;
pub mod http;
pub mod install;
pub mod jsonrpc;
pub mod pairing;
pub mod rate;
pub mod resources;
#[cfg(test)]
mod scratch;
mod server;
#[cfg(feature = "test-support")]
pub mod testkit;
pub mod tunnel;

// The public interface is:
pub use server::{BrowserServer, ExtraTools, NeedsBrowser};
