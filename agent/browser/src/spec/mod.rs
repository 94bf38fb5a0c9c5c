//! The AIP-63 vocabulary (agentbrowser/v1), without I/O: the instance lifecycle and the
//! supervisor's decisions (§3), the manifest and its schema (§1), the tool table (§2), the
//! AIP-14 error envelope with the browser codes (T4), and where the browser may go (the
//! navigation rule of the security review's H3).
//!
//! Nothing here starts a process, opens a socket, drives a browser or reads a clock (it reads a
//! manifest's file when asked to load one): the layers above
//! ([`crate::chromium`], [`crate::tools`]) feed it what happened and when, and tests feed it
//! exact times. This is what a conformance suite judging *any* provider depends on.

mod aip14;
mod instance;
mod lifecycle;
mod manifest;
mod mcp_name;
mod navigation;
mod principal;
mod resolve;
pub(crate) mod schema;
mod supervisor;
mod tool;

// The public interface is:
pub use self::aip14::{ToolError, ToolErrorCode, ToolResult};
pub use self::instance::{HealthReport, InstanceEndpoints, InstanceInfo, InstanceKey, InvalidInstanceKey, Stopped};
pub use self::lifecycle::{IllegalTransition, InstanceState, LifecycleEvent, OperatorReset};
pub use self::manifest::{
    Ack, BROWSER_SCHEMA, BrowserBlock, BrowserManifest, Capabilities, CrashLoopSettings, Diagnostic, Display,
    DriverKind, Endpoint, Endpoints, HealthSettings, Implements, Instances, LaunchSettings, Lifecycle, Location,
    ManifestSink, ProfileMode, Profiles, SinkKind, StopSettings, StoredBy, SupervisionSettings, load_manifest,
    parse_manifest, rule_errors,
};
pub use self::mcp_name::{MCP_NAME_PATTERN, is_mcp_name, mcp_name};
pub use self::navigation::{InvalidOrigin, MAX_PORT_RANGE, NamedOrigin, NavigationPolicy, Refused};
pub use self::principal::{AgentCaller, Operator};
pub use self::resolve::resolve;
pub use self::supervisor::{CallGate, Health, InstanceRecord, Launch, Policy, Relaunch, Stalled, Supervisor};
pub use self::tool::{Capability, Gate, Level, ToolId, ToolSpec, reserved_tools};
