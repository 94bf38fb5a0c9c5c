//! The personal agent's side of the PAP browser-session bridge (PAP §5).
//!
//! The agent holds a PAP Session with a company ([`PapClient`]) and joins the company's website
//! from a browser it controls ([`ControlledBrowser`], real Chromium over CDP): it signs a
//! 60-second `poppy-browser+jwt` for the live Session and has the browser form-POST it to the
//! company's published endpoint ([`join`]); the company answers with its own cookie and a
//! redirect, and the browser then shows the Session.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod browser;
mod client;
mod consent;
mod documents;
mod identity;
mod interop;
mod join;
mod live;
mod logging;
mod provider;
mod sealed;
mod state;
mod wallet;

// The public interface is:
pub use browser::{
    BrowserError, BrowserHost, CHROMIUM, CHROMIUM_HOME, ChromiumConfig, ControlledBrowser, HOST_MARKER, LaunchError,
    ORPHAN_MARKER, StandaloneChromium, TestNetwork, click_and_land, is_default_profile, pin_served_leaf, probe_profile,
    spki_pin,
};
pub use client::{
    ClientConfig, ClientError, Company, DeviceAuthorization, PapClient, Pause, SecretToken, Session, TokioPause,
    new_pairwise_user,
};
pub use consent::ledger::{Actor, Broken, Derived, Entry, Ledger, LedgerError, Summary};
pub use consent::{
    Caller, ConsentError, ConsentHost, FULL_PROFILE_WARNING, Forgotten, Grant, GrantRequest, Injection, JoinPermit,
    LiveInstances, NoInstances, Operator, Refreshed, RemoteOutcome, Revoked, Scope, ScopeRequest, Sink, Source,
    SourceError, SourceSpec, profile_tool,
};
pub use documents::{TlsListener, documents_router};
pub use identity::{Identity, IdentityError, KEY_ID};
pub use interop::{approve_on_device_page, hidden_inputs, plain_http_client, tls_client_config, trust_roots};
pub use join::{JoinError, JoinOutcome, join};
pub use live::LiveProfiles;
pub use logging::{SECRET_SAFE_DIRECTIVES, log_filter};
pub use provider::lifecycle::{IllegalTransition, InstanceState, LifecycleEvent, OperatorReset};
pub use provider::manifest::{
    BROWSER_SCHEMA, BrowserBlock, BrowserManifest, Capabilities, Diagnostic, DriverKind, Implements, Location,
    implements_gate, load_manifest, parse_manifest, rule_errors,
};
pub use provider::processes::{BrowserProcess, ProcTable, ProcessInfo, ProcessTable, SweepScope, browsers_of, sweep};
pub use provider::supervisor::{CallGate, Health, Launch, Policy, Record as SupervisorRecord, Stalled, Supervisor};
pub use provider::tools::{Level, RESERVED_TOOLS, ToolHost, ToolSpec, resolve, tool_spec};
pub use sealed::{SealError, SealingKey};
pub use wallet::{Wallet, WalletError};
