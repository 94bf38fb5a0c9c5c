//! The agent's browser for agent runtimes over MCP (the official Rust SDK, `rmcp`): the AIP-63
//! tools the provider serves, each listed with the JSON Schema of its input, and any
//! [`ExtraTools`] an embedder adds; a result as its JSON (text, and structured content), a
//! screenshot as an image, an AIP-14 error as a tool error whose structured content carries
//! `code`, `message` and `retryable`. The browser is launched by the first call that needs it,
//! unless the embedder launched it already (an idempotent launch, L2); a call while it starts
//! waits for it (L10).
//!
//! Every call runs as the paired device that made it (AIP-63 "Auth model": AIP-59 pairing and
//! nothing else, [`crate::pairing`]): what it sees of the person's grants is what AIP-63 lets
//! that device see (C7, C12), in browser contexts and tabs of its own. Its credential is checked
//! on every call, so an unpaired device is refused on its next one (C13). No tool here approves
//! anything on the person's behalf (AIP-7): the tools are the browser's, and grants come only
//! from the operator's channel.
//!
//! Two transports: [`BrowserServer::stdio`] for a client that spawns its servers (the device's
//! bearer in a file the operator's `install-mcp` wrote), and [`crate::http`], streamable HTTP at
//! `/mcp` behind a Host/Origin guard, for any client that holds a bearer.

use std::fmt;
use std::sync::Arc;

use pap_browser::spec::{AgentCaller, InstanceState, ToolError, ToolErrorCode, ToolId, ToolResult};
use pap_browser::tools::{ToolHost, input_schema};
use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ResourceContents, ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use serde_json::{Value, json};

use crate::pairing::{Bearer, Devices};
use crate::rate;
use crate::resources::{Budget, ExtraResources, Pace, Subscribed, WATCHED_AT_MOST, may_read, read};

/// Tools an embedder serves beside the browser's (the PAP agent: its `pap_*` tools), under the
/// same device authentication, rate limit and launch on demand. They run as the calling device
/// and may use the tool host (a join opens its tab there).
#[async_trait::async_trait]
pub trait ExtraTools: Send + Sync + fmt::Debug {
    /// The tools as MCP lists them, after the browser's.
    fn listed(&self) -> Vec<Tool>;

    /// Whether the tool an MCP client named `name` is one of these, and whether it needs the
    /// browser running (the host launches it first).
    fn serves(&self, name: &str) -> Option<NeedsBrowser>;

    /// Calls the tool named `name` (one [`ExtraTools::serves`] said yes to) as `caller`.
    async fn call(
        &self,
        tools: &ToolHost,
        caller: &AgentCaller,
        name: &str,
        arguments: Value,
    ) -> Result<Value, ToolError>;
}

/// Whether an extra tool needs the browser running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeedsBrowser {
    /// It uses the browser: the host launches it first.
    Yes,
    /// It does not (it calls a company's API, reads a file).
    No,
}

/// The MCP server of one tool host.
#[derive(Clone, Debug)]
pub struct BrowserServer {
    tools: Arc<ToolHost>,
    callers: Callers,
    /// Calls per device and tool ([`rate`]).
    rate: rate::RateLimit,
    /// The embedder's tools, served beside the browser's.
    extra: Option<Arc<dyn ExtraTools>>,
    /// What `initialize` answers as `serverInfo`: the program that serves (`pap-agent 0.1.0`),
    /// by default this crate.
    name: (String, String),
    /// Where calls are audited and requests for access filed, for the person's console
    /// ([`crate::console`]): the agent's state directory.
    record: Option<std::path::PathBuf>,
    /// The embedder's resources, what each device watches of them (shared by every session),
    /// and what this MCP session subscribed to ([`crate::resources`]).
    resources: Option<Arc<dyn ExtraResources>>,
    watching: Budget,
    subscribed: Subscribed,
}

/// Who a call comes from.
#[derive(Clone, Debug)]
enum Callers {
    /// One device (`id`), whose bearer is checked at every call (stdio).
    Device {
        devices: Devices,
        bearer: Arc<Bearer>,
        id: String,
    },
    /// The device the HTTP guard authenticated for this request ([`http`]).
    PerRequest,
}

impl BrowserServer {
    /// Serves `tools` over stdio to the device `device_id`, holding `bearer`.
    pub fn stdio(tools: Arc<ToolHost>, devices: Devices, bearer: Bearer, device_id: String) -> Self {
        Self {
            tools,
            callers: Callers::Device {
                devices,
                bearer: Arc::new(bearer),
                id: device_id,
            },
            rate: rate::RateLimit::default(),
            extra: None,
            name: (env!("CARGO_PKG_NAME").to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
            record: None,
            resources: None,
            watching: Budget::default(),
            subscribed: Subscribed::default(),
        }
    }

    /// Serves `tools` over [`crate::http`], to whichever device its guard authenticated for
    /// each request.
    pub fn per_request(tools: Arc<ToolHost>) -> Self {
        Self {
            tools,
            callers: Callers::PerRequest,
            rate: rate::RateLimit::default(),
            extra: None,
            name: (env!("CARGO_PKG_NAME").to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
            record: None,
            resources: None,
            watching: Budget::default(),
            subscribed: Subscribed::default(),
        }
    }

    /// Names the program that serves in `initialize`'s `serverInfo` (a client shows it; rmcp's
    /// own name and version would otherwise stand there).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = (name.into(), version.into());
        self
    }

    /// Serves `extra` beside the browser's tools.
    #[must_use]
    pub fn with_extra(mut self, extra: Arc<dyn ExtraTools>) -> Self {
        self.extra = Some(extra);
        self
    }

    /// Serves `resources` beside the tools, with subscriptions to them ([`crate::resources`]).
    #[must_use]
    pub fn with_resources(mut self, resources: Arc<dyn ExtraResources>) -> Self {
        self.resources = Some(resources);
        self
    }

    /// The same server for a new MCP session: what it watches is its own.
    #[must_use]
    pub fn for_session(&self) -> Self {
        Self {
            subscribed: Subscribed::default(),
            ..self.clone()
        }
    }

    /// Audits every call ([`crate::console::audit`]) and files a request for access for the
    /// person when a call meets `consent_required` ([`crate::console::requests`]), in the
    /// agent's state directory `state_dir`, where the person's console reads them.
    #[must_use]
    pub fn recording_in(mut self, state_dir: &std::path::Path) -> Self {
        self.record = Some(state_dir.to_path_buf());
        self
    }

    /// The tool host behind it.
    pub fn tools(&self) -> &Arc<ToolHost> {
        &self.tools
    }

    /// The device a call comes from: its pairing checked now.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<AgentCaller, ToolError> {
        let unpaired = || {
            ToolError::new(
                ToolErrorCode::PermissionDenied,
                "this device is not paired with the agent (or no longer is): pair it again",
            )
        };
        match &self.callers {
            Callers::Device { devices, bearer, .. } => match devices.authenticate(bearer) {
                Ok(Some(device)) => {
                    if let Err(error) = devices.seen(&device, pap_shared::Clock::now(&pap_shared::SystemClock)) {
                        tracing::warn!(%error, "recording when the device was last seen");
                    }
                    Ok(AgentCaller::paired(device.id))
                }
                Ok(None) => Err(unpaired()),
                Err(e) => Err(ToolError::new(ToolErrorCode::Internal, e.to_string())),
            },
            Callers::PerRequest => context
                .extensions
                .get::<::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<AgentCaller>())
                .cloned()
                .ok_or_else(unpaired),
        }
    }

    /// The tools as MCP lists them: the ones the provider serves, nothing it would refuse, by
    /// their MCP names ([`pap_browser::spec::mcp_name`]).
    pub fn listed(&self) -> Vec<Tool> {
        let mut listed: Vec<Tool> = self
            .tools
            .served()
            .into_iter()
            .map(|tool| {
                Tool::new(tool.mcp_name(), description(tool), Arc::new(input_schema(tool)))
                    .with_annotations(annotations(tool))
            })
            .collect();
        if let Some(extra) = &self.extra {
            listed.extend(extra.listed());
        }
        listed
    }

    /// Whether a tool of this name is served: an AIP-63 tool id's MCP name (whether or not this
    /// provider declares it) or an extra tool's. Any other name is MCP's "unknown tool".
    fn serves(&self, name: &str) -> bool {
        ToolId::from_mcp_name(name).is_some() || self.extra.as_ref().is_some_and(|extra| extra.serves(name).is_some())
    }

    /// Calls the tool an MCP client named `name` with `arguments` as `caller`, launching the
    /// browser first when it is not running. An AIP-63 tool this provider lacks is
    /// `browser:unsupported` (T3); over MCP, a name that is no tool at all never gets here
    /// (-32602, [`ServerHandler::call_tool`]).
    pub async fn call(&self, caller: &AgentCaller, name: &str, arguments: Value) -> CallToolResult {
        let extra = self
            .extra
            .as_ref()
            .and_then(|extra| extra.serves(name).map(|needs| (extra, needs)));
        let browser_tool = ToolId::from_mcp_name(name);
        if extra.is_none() && browser_tool.is_none() {
            let unknown = ToolError::new(
                ToolErrorCode::Unsupported,
                "no tool here has that name (tools/list names them: browser_navigate, pap_join, ...)",
            );
            return tool_error(&ToolResult::Err(unknown).to_json());
        }
        if let Err(wait) = self
            .rate
            .check(caller.device_id().unwrap_or("local"), name, tokio::time::Instant::now())
        {
            let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
            let limited = ToolError::new(
                ToolErrorCode::RateLimited,
                format!(
                    "this device called {name} too often (at most {} a second, {} at once); retry in {millis} ms",
                    rate::PER_SECOND,
                    rate::BURST
                ),
            )
            .with_cause(json!({ "retryAfterMs": millis }));
            return tool_error(&ToolResult::Err(limited).to_json());
        }
        let needs_browser = extra.is_some_and(|(_, needs)| needs == NeedsBrowser::Yes)
            || browser_tool
                .is_some_and(|t| !matches!(t, ToolId::ProfileList | ToolId::ProfileRefresh | ToolId::ProfileRevoke));
        let health = self.tools.health();
        if needs_browser && self.tools.recovering() {
            // The browser exited under the host and is coming back (`start_recovery`): a
            // retryable answer, never a second launch beside the relaunch.
            let recovering = ToolError::new(
                ToolErrorCode::NotReady,
                "the browser exited and the host is relaunching it; retry shortly",
            )
            .retryable()
            .with_cause(json!({ "state": health.state, "reason": health.reason, "recovering": true }));
            return tool_error(&ToolResult::Err(recovering).to_json());
        }
        if needs_browser
            && matches!(health.state, InstanceState::Absent | InstanceState::Stopped)
            && let Err(error) = self.tools.launch().await
        {
            return tool_error(&ToolResult::Err(error).to_json());
        }
        let asked = self.record.as_ref().map(|_| asked_for(&arguments));
        let outcome = if let Some((extra, _)) = extra {
            extra.call(&self.tools, caller, name, arguments).await
        } else {
            let id = match browser_tool {
                Some(tool) => tool.as_str(),
                None => name,
            };
            // The tool host serves what its manifest lists: an unlisted tool is unsupported there.
            match self.tools.call_as(caller, id, &arguments).await {
                ToolResult::Ok(value) => Ok(value),
                ToolResult::Err(error) => Err(error),
            }
        };
        let outcome = match (&self.record, asked) {
            (Some(state_dir), Some(asked)) => recorded(state_dir, caller, name, &asked, outcome),
            _ => outcome,
        };
        match outcome {
            Ok(value) => success(browser_tool, value),
            Err(error) => tool_error(&ToolResult::Err(error).to_json()),
        }
    }
}

/// What a call's arguments say for the record: the origin of the URL it names, and why, in its
/// own words (a `reason` argument), if it says.
struct Asked {
    origin: Option<String>,
    reason: Option<String>,
}

fn asked_for(arguments: &Value) -> Asked {
    let url = ["url", "returnTo", "return_to"]
        .iter()
        .find_map(|key| arguments.get(*key).and_then(Value::as_str));
    // A PAP tool names the company by its domain: its origin is the company's website.
    let company = arguments
        .get("domain")
        .and_then(Value::as_str)
        .and_then(|domain| crate::console::audit::origin_of(&format!("https://{domain}/")));
    Asked {
        origin: url.and_then(crate::console::audit::origin_of).or(company),
        reason: arguments.get("reason").and_then(Value::as_str).map(str::to_owned),
    }
}

/// The call in the audit; a `consent_required` filed as a request for access (or answered with
/// the person's standing "no": `permission_denied`).
fn recorded(
    state_dir: &std::path::Path,
    caller: &AgentCaller,
    tool: &str,
    asked: &Asked,
    outcome: Result<Value, ToolError>,
) -> Result<Value, ToolError> {
    use crate::console::requests::AccessRequests;
    let now = pap_shared::Clock::now(&pap_shared::SystemClock);
    let device = caller.device_id().unwrap_or("local");
    let outcome = match outcome {
        Err(error) if error.code == ToolErrorCode::ConsentRequired => {
            let domain = error
                .cause
                .as_ref()
                .and_then(|cause| cause["domain"].as_str())
                .map(str::to_owned);
            match domain {
                Some(domain) => {
                    let why = asked
                        .reason
                        .clone()
                        .unwrap_or_else(|| format!("{tool} needs a grant for {domain}"));
                    match AccessRequests::at(state_dir).file(device, &domain, tool, &why, now, &pap_shared::SystemRng) {
                        Ok(filed) => Err(asked_the_person(error, &filed)),
                        Err(e) => {
                            tracing::warn!(error = %e, "filing a request for access");
                            Err(error)
                        }
                    }
                }
                None => Err(error),
            }
        }
        other => other,
    };
    let origin = match &outcome {
        Ok(value) => value
            .get("url")
            .and_then(Value::as_str)
            .and_then(crate::console::audit::origin_of)
            .or_else(|| asked.origin.clone()),
        Err(_) => asked.origin.clone(),
    };
    let call = crate::console::audit::Call {
        at: now,
        device_id: device.to_owned(),
        tool: tool.to_owned(),
        origin,
        outcome: match &outcome {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.code.as_str().to_owned(),
        },
    };
    if let Err(e) = crate::console::audit::Audit::at(state_dir).append(&call) {
        tracing::warn!(error = %e, "writing the audit");
    }
    outcome
}

/// `error` (a `consent_required`) as the device is told after its request was filed.
fn asked_the_person(error: ToolError, filed: &crate::console::requests::Filed) -> ToolError {
    use crate::console::requests::Filed;
    let with = |request: &crate::console::requests::AccessRequest| json!({ "domain": request.domain, "request": request.id, "expiresAt": request.expires_at.to_rfc3339() });
    match filed {
        Filed::Asked(request) | Filed::Waiting(request) => ToolError::new(
            ToolErrorCode::ConsentRequired,
            format!(
                "{}: the person was asked in their console (request {}); call again once they answer",
                error.message, request.id
            ),
        )
        .retryable()
        .with_cause(with(request)),
        Filed::Declined(request) => ToolError::new(
            ToolErrorCode::PermissionDenied,
            format!(
                "the person declined this device's request for access to {} (request {}); do not ask again for now",
                request.domain, request.id
            ),
        )
        .with_cause(json!({ "domain": request.domain, "request": request.id, "declined": true })),
        Filed::TooMany => ToolError::new(
            ToolErrorCode::ConsentRequired,
            format!(
                "{}: this device has {} requests for access waiting for the person already",
                error.message,
                crate::console::requests::PENDING_PER_DEVICE
            ),
        )
        .with_cause(error.cause.unwrap_or_default()),
    }
}

/// A result: a screenshot as an image (and its other fields as text), a snapshot as its text
/// (what a model reads), anything else as JSON.
fn success(tool: Option<ToolId>, mut value: Value) -> CallToolResult {
    let mut content = Vec::new();
    if tool == Some(ToolId::Screenshot)
        && let Some(Value::String(image)) = value.as_object_mut().and_then(|o| o.remove("data"))
    {
        let mime = if value["format"] == "jpeg" {
            "image/jpeg"
        } else {
            "image/png"
        };
        content.push(ContentBlock::image(image, mime));
    }
    if tool == Some(ToolId::Snapshot) {
        let text = format!(
            "- Page URL: {}\n- Page title: {}\n- Target: {}\n{}",
            value["url"].as_str().unwrap_or_default(),
            value["title"].as_str().unwrap_or_default(),
            value["target"].as_str().unwrap_or_default(),
            value["snapshot"].as_str().unwrap_or_default()
        );
        content.push(ContentBlock::text(text));
    } else {
        content.push(ContentBlock::text(value.to_string()));
    }
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(value);
    result
}

/// An AIP-14 error envelope as an MCP tool error: the error object as text and structured.
fn tool_error(envelope: &Value) -> CallToolResult {
    let error = envelope.get("error").cloned().unwrap_or_else(|| json!({}));
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
    result.structured_content = Some(error);
    result
}

/// One line on what `tool` does (aip-63-tables §2).
fn description(tool: ToolId) -> &'static str {
    match tool {
        ToolId::Navigate => {
            "Load an https: URL in a new tab (or the tab `target`); answers the tab and where it landed."
        }
        ToolId::Evaluate => "Evaluate a JavaScript expression in a tab; answers its value.",
        ToolId::GetDom => "The HTML of a tab's document, or of one element.",
        ToolId::Screenshot => "A PNG or JPEG of a tab's viewport, the full page, or one element (ref).",
        ToolId::Click => "Click an element of a tab, by ref (from browser_snapshot) or CSS selector.",
        ToolId::Fill => {
            "Type a value into an element of a tab, by ref (from browser_snapshot) or CSS selector, optionally \
             submitting its form; the value is never echoed."
        }
        ToolId::Tabs => "List, open or close tabs.",
        ToolId::ListRequests => "The responses a tab received.",
        ToolId::GetRequestBody => "The body of one response a tab received.",
        ToolId::CdpSend => "A CDP command among the page-local methods the provider allows.",
        ToolId::Download => "Download a URL of a tab's page to a host path; answers the path and size.",
        ToolId::ProfileList => "The person's grants this agent may use (never their values).",
        ToolId::ProfileRefresh => "Re-read a grant's domains from its own source.",
        ToolId::ProfileRevoke => "Revoke a grant, or some of its domains.",
        ToolId::Act => "A natural-language action.",
        ToolId::Snapshot => {
            "The tab's accessibility tree as text, each actionable element with a ref (e12; f2e7 in a frame of \
             another origin) that click, fill, hover, select_option and screenshot take. Use it rather than screenshots to read and act."
        }
        ToolId::PressKey => "Press a key (Enter, Tab, Escape, ArrowDown, ... or one character) in a tab.",
        ToolId::Hover => "Move the pointer over an element of a tab, by ref.",
        ToolId::SelectOption => "Choose options of a select element, by ref, each by value or label.",
        ToolId::WaitFor => "Wait until a text appears or goes in a tab, its next page loads, or some seconds pass.",
        ToolId::NavigateBack => "Go back to the previous page of a tab.",
        ToolId::NavigateForward => "Go forward to the next page of a tab.",
        ToolId::Resize => "Set a tab's viewport size, in CSS pixels.",
        ToolId::ConsoleMessages => "What a tab's pages logged to the console, oldest first.",
        ToolId::PdfSave => "Print a tab's page to a PDF file on the host; answers its path and size.",
        ToolId::HandleDialog => "Accept or dismiss the JavaScript dialog (alert, confirm, prompt) open in a tab.",
        ToolId::Drag => "Drag one element of a tab onto another, by refs (mouse and HTML5 drag and drop).",
        ToolId::FileUpload => {
            "Hand files to a file input of a tab, by ref; only files in a directory the person named for uploads."
        }
    }
}

/// What a client may assume of `tool` (MCP's tool annotations, which clients use to decide what
/// to ask the person before a call): its title, whether it only reads, whether it may change or
/// remove something for good, whether calling it twice does what once does, and whether it
/// reaches the web beyond the host.
fn annotations(tool: ToolId) -> ToolAnnotations {
    // (title, read only, destructive, idempotent, open world)
    let (title, read_only, destructive, idempotent, open_world) = match tool {
        ToolId::Navigate => ("Load a page", false, false, false, true),
        ToolId::Evaluate => ("Run a script in a page", false, true, false, true),
        ToolId::GetDom => ("Read a page's HTML", true, false, true, true),
        ToolId::Screenshot => ("Take a screenshot", true, false, true, true),
        ToolId::Click => ("Click an element", false, true, false, true),
        ToolId::Fill => ("Type into an element", false, false, true, true),
        ToolId::Tabs => ("List, open or close tabs", false, true, false, true),
        ToolId::ListRequests => ("List a tab's responses", true, false, true, false),
        ToolId::GetRequestBody => ("Read a response's body", true, false, true, false),
        ToolId::CdpSend => ("Send a page-local CDP command", false, true, false, true),
        ToolId::Download => ("Download a file", false, false, false, true),
        ToolId::ProfileList => ("List the person's grants", true, false, true, false),
        ToolId::ProfileRefresh => ("Refresh a grant's material", false, false, true, false),
        ToolId::ProfileRevoke => ("Revoke a grant", false, true, true, false),
        ToolId::Act => ("Act in natural language", false, true, false, true),
        ToolId::Snapshot => ("Read a page's accessibility tree", true, false, true, true),
        ToolId::PressKey => ("Press a key", false, true, false, true),
        ToolId::Hover => ("Hover over an element", false, false, true, true),
        ToolId::SelectOption => ("Choose an option", false, false, true, true),
        ToolId::WaitFor => ("Wait for the page", true, false, true, true),
        ToolId::NavigateBack => ("Go back", false, false, false, true),
        ToolId::NavigateForward => ("Go forward", false, false, false, true),
        ToolId::Resize => ("Resize the viewport", false, false, true, false),
        ToolId::ConsoleMessages => ("Read the console", true, false, true, false),
        ToolId::PdfSave => ("Save the page as PDF", false, false, false, true),
        ToolId::HandleDialog => ("Answer a dialog", false, true, false, true),
        ToolId::Drag => ("Drag and drop", false, true, false, true),
        ToolId::FileUpload => ("Upload files", false, false, true, true),
    };
    ToolAnnotations::with_title(title)
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
        .open_world(open_world)
}

impl ServerHandler for BrowserServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.resources.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(self.name.0.clone(), self.name.1.clone()))
            .with_instructions(
                "The agent's own Chromium (AIP-63 agentbrowser/v1). It loads only https: pages on public \
             hosts; session material comes only from the person's grants.",
            )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        single_page(request, "tools/list")?;
        Ok(ListToolsResult::with_all_items(self.listed()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !self.serves(&request.name) {
            // MCP's tools spec: an unknown tool is a protocol error, -32602.
            return Err(McpError::invalid_params(
                format!(
                    "Unknown tool: {} (tools/list names them: browser_navigate, pap_join, ...)",
                    request.name.chars().take(64).collect::<String>()
                ),
                None,
            ));
        }
        let caller = match self.caller(&context) {
            Ok(caller) => caller,
            Err(refused) => {
                // A stdio device unpaired mid-session: its tabs and contexts end too (C13).
                if let Callers::Device { id, .. } = &self.callers
                    && refused.code == ToolErrorCode::PermissionDenied
                    && let Err(error) = self.tools.end_device(id).await
                {
                    tracing::warn!(device = %id, error = %error.message, "ending an unpaired device's browser contexts");
                }
                return Ok(tool_error(&ToolResult::Err(refused).to_json()).into());
            }
        };
        let arguments = request.arguments.map_or(json!({}), Value::Object);
        Ok(self.call(&caller, &request.name, arguments).await.into())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let (resources, caller) = self.resource_caller(&context)?;
        single_page(request, "resources/list")?;
        Ok(ListResourcesResult::with_all_items(resources.list(&caller).await))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let (resources, _) = self.resource_caller(&context)?;
        single_page(request, "resources/templates/list")?;
        Ok(ListResourceTemplatesResult::with_all_items(resources.templates()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let (resources, caller) = self.resource_caller(&context)?;
        let reading = read(resources.as_ref(), &caller, &request.uri).await?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(reading.text, request.uri).with_mime_type(reading.mime_type),
        ])
        .into())
    }

    /// `resources/subscribe` (protocol 2025-11-25 and before): the resource is read once now
    /// (one the device may not read is not found), then watched until it settles, the client
    /// unsubscribes or the session ends.
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let (resources, caller) = self.resource_caller(&context)?;
        let uri = request.uri;
        let reading = read(resources.as_ref(), &caller, &uri).await?;
        let device = caller.device_id().unwrap_or("local").to_owned();
        if self.subscribed.has(&uri) {
            return Ok(());
        }
        let held = self.watching.take(&device, 1);
        if held.count() == 0 {
            return Err(McpError::invalid_params(
                format!("this device already watches {WATCHED_AT_MOST} resources: unsubscribe from one first"),
                None,
            ));
        }
        let peer = context.peer;
        let rate = self.rate.clone();
        let watched = uri.clone();
        self.subscribed.spawn(uri, async move {
            let _held = held;
            crate::resources::watch(
                resources.as_ref(),
                &caller,
                vec![(watched, Some(reading))],
                Pace::default(),
                || may_read(&rate, &device),
                || !peer.is_transport_closed(),
                |uri| {
                    let peer = peer.clone();
                    async move {
                        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                            .await
                            .is_ok()
                    }
                },
            )
            .await;
        });
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.resource_caller(&context)?;
        self.subscribed.end(&request.uri);
        Ok(())
    }

    /// `subscriptions/listen` (protocol 2026-07-28): resource updates only, for URIs of this
    /// server's form, each once, at most [`WATCHED_AT_MOST`] (the device's room is taken when the
    /// stream begins: at this version each request has a server of its own).
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let resources = self.resources.as_ref()?;
        let mut uris: Vec<String> = Vec::new();
        for uri in requested.resource_subscriptions.iter().flatten() {
            if resources.names(uri) && !uris.contains(uri) && uris.len() < WATCHED_AT_MOST {
                uris.push(uri.clone());
            }
        }
        Some(SubscriptionFilter::builder().resource_subscriptions(uris).build())
    }

    /// Watches the stream's resources, as many as the device has room for (none: refused), until
    /// each has settled (the stream then ends) or the client cancels it. Each URI is read once
    /// now, under the device's rate limit; one settled, or unreadable (the device may not read
    /// it), is notified at once, so the client reads it and learns why.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let (resources, caller) = self.resource_caller(context.request_context())?;
        let device = caller.device_id().unwrap_or("local").to_owned();
        let accepted = context.accepted().resource_subscriptions.clone().unwrap_or_default();
        let held = self.watching.take(&device, accepted.len());
        if held.count() == 0 {
            return Err(McpError::invalid_params(
                format!("this device already watches {WATCHED_AT_MOST} resources: end a subscription first"),
                None,
            ));
        }
        let mut watched = Vec::new();
        for uri in accepted.into_iter().take(held.count()) {
            let reading = if may_read(&self.rate, &device) {
                resources.read(&caller, &uri).await.ok()
            } else {
                None
            };
            watched.push((uri, reading));
        }
        let peer = context.request_context().peer.clone();
        let sink = context.sink().clone();
        tokio::select! {
            _ = crate::resources::watch(
                resources.as_ref(),
                &caller,
                watched,
                Pace::default(),
                || may_read(&self.rate, &device),
                || !peer.is_transport_closed(),
                |uri| {
                    let sink = sink.clone();
                    async move { sink.notify_resource_updated(uri).await.is_ok() }
                },
            ) => {}
            () = context.cancelled() => {}
        }
        drop(held);
        Ok(())
    }
}

/// A list answered in one page here: no cursor was ever handed out, so any is invalid (MCP
/// pagination: "Invalid cursors SHOULD result in an error with code -32602").
fn single_page(request: Option<PaginatedRequestParams>, method: &str) -> Result<(), McpError> {
    if request.is_some_and(|r| r.cursor.is_some()) {
        return Err(McpError::invalid_params(
            format!("{method} has a single page here: no cursor was given out, so none is valid"),
            None,
        ));
    }
    Ok(())
}

impl BrowserServer {
    /// The resources served and the device a resource request comes from (its pairing checked
    /// now): a server without resources has none to list (-32601), an unpaired device is refused,
    /// and a device's resource requests share one bucket of the per-device rate limit (a read
    /// may fetch a company's documents, as `pap_operation` does).
    fn resource_caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Arc<dyn ExtraResources>, AgentCaller), McpError> {
        let resources = self.resources.clone().ok_or_else(|| {
            McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "this server serves no resources",
                None,
            )
        })?;
        let caller = self
            .caller(context)
            .map_err(|refused| McpError::invalid_request(refused.message, None))?;
        crate::resources::within_rate(&self.rate, caller.device_id().unwrap_or("local"))?;
        Ok((resources, caller))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    /// An MCP client of the official Rust SDK hears a change of a resource it subscribed to;
    /// one not of the server's form, or unknown, is not found (-32002); a device watches at
    /// most 16 (the 17th is refused until one is unsubscribed), and its resource requests are
    /// rate limited; a server without resources has none (-32601).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribed_client_hears_a_change_and_each_device_s_watches_are_bounded() {
        use crate::resources::board::{Board, set};
        use pap_browser::spec::InstanceKey;
        use rmcp::ServiceExt as _;
        use rmcp::model::ErrorCode;
        let dir = crate::scratch::Dir::new("pap-host-resources");
        let consent = Arc::new(
            pap_browser::consent::ConsentHost::open(
                dir.path(),
                Arc::new(pap_shared::SystemClock),
                Arc::new(pap_shared::SystemRng),
            )
            .unwrap(),
        );
        let tools = ToolHost::new(
            pap_browser::chromium::manifest().unwrap(),
            pap_browser::BrowserHost::new(),
            pap_browser::chromium::ChromiumConfig::new(dir.path().to_owned()),
            InstanceKey::try_from("resources").unwrap(),
            consent,
        );
        let devices = Devices::at(dir.path());
        let (device, bearer) = devices
            .mint("test", "install", &pap_shared::SystemClock, &pap_shared::SystemRng)
            .unwrap();
        let serve = |server: BrowserServer| {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            tokio::spawn(async move {
                if let Ok(running) = server.serve(ours).await {
                    let _ = running.waiting().await;
                }
            });
            theirs
        };

        // Without resources: none to list.
        let plain = BrowserServer::stdio(
            tools.clone(),
            devices.clone(),
            Bearer::presented(bearer.expose()),
            device.id.clone(),
        );
        let client = ().serve(serve(plain)).await.unwrap();
        let none = client.list_resources(None).await.unwrap_err();
        assert!(format!("{none:?}").contains("-32601"), "{none:?}");
        client.cancel().await.unwrap();

        let board = Arc::new(Board::default());
        for i in 0..=WATCHED_AT_MOST {
            set(&board, &format!("test://{i}"), Ok("proposed"));
        }
        let code = |error: rmcp::ServiceError| match error {
            rmcp::ServiceError::McpError(error) => error.code,
            other => panic!("{other:?}"),
        };

        // Another device: not found, then rate limited (its bucket of 20 spent in a tight loop).
        let (other, other_bearer) = devices
            .mint("other", "install", &pap_shared::SystemClock, &pap_shared::SystemRng)
            .unwrap();
        let server =
            BrowserServer::stdio(tools.clone(), devices.clone(), other_bearer, other.id).with_resources(board.clone());
        let client = ().serve(serve(server)).await.unwrap();
        let read = |uri: &'static str| client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri));
        assert_eq!(
            code(read("file:///etc/passwd").await.unwrap_err()),
            ErrorCode::RESOURCE_NOT_FOUND
        );
        assert_eq!(
            code(read("test://unknown").await.unwrap_err()),
            ErrorCode::RESOURCE_NOT_FOUND
        );
        let mut refused = 0;
        for _ in 0..30 {
            if let Err(error) = read("test://1").await {
                assert_eq!(code(error), ErrorCode::INVALID_REQUEST);
                refused += 1;
            }
        }
        assert!(refused > 0, "a device's resource requests are rate limited");
        client.cancel().await.unwrap();

        // The device: 16 subscriptions, a 17th refused until one is unsubscribed (19 requests,
        // within its burst).
        let server = BrowserServer::stdio(tools, devices, bearer, device.id).with_resources(board.clone());
        let (updates, mut updated) = tokio::sync::mpsc::unbounded_channel();
        let client = Updates(updates).serve(serve(server)).await.unwrap();
        #[allow(deprecated, reason = "resources/subscribe is what a 2025-11-25 client speaks")]
        let subscribe = |uri: String| client.subscribe(SubscribeRequestParams::new(uri));
        for i in 0..WATCHED_AT_MOST {
            subscribe(format!("test://{i}")).await.unwrap();
        }
        let over = format!("test://{WATCHED_AT_MOST}");
        assert_eq!(
            code(subscribe(over.clone()).await.unwrap_err()),
            ErrorCode::INVALID_PARAMS
        );
        #[allow(deprecated, reason = "as above")]
        client
            .unsubscribe(UnsubscribeRequestParams::new("test://0"))
            .await
            .unwrap();
        subscribe(over).await.unwrap();

        // The person decides: the client hears it at the next read, once.
        set(&board, "test://3", Ok("succeeded"));
        let heard = tokio::time::timeout(std::time::Duration::from_secs(10), updated.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(heard, "test://3");
        set(&board, "test://0", Ok("succeeded"));
        let reads = board.reads.load(std::sync::atomic::Ordering::Relaxed);
        let next = tokio::time::timeout(std::time::Duration::from_millis(2500), updated.recv()).await;
        assert!(next.is_err(), "unsubscribed, and settled ones said once: {next:?}");
        assert!(
            board.reads.load(std::sync::atomic::Ordering::Relaxed) > reads,
            "the others are still read"
        );
        client.cancel().await.unwrap();
    }

    /// An MCP client that passes on each `notifications/resources/updated` it hears.
    #[derive(Clone, Debug)]
    struct Updates(tokio::sync::mpsc::UnboundedSender<String>);

    impl rmcp::ClientHandler for Updates {
        async fn on_resource_updated(
            &self,
            params: ResourceUpdatedNotificationParam,
            _context: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
        ) {
            let _ = self.0.send(params.uri);
        }
    }

    #[test]
    fn a_consent_required_files_one_request_and_the_person_s_no_answers_the_next_call() {
        use crate::console::requests::{AccessRequests, Answer, RequestState};
        let dir = crate::scratch::Dir::new("pap-host-record");
        let caller = AgentCaller::paired("dev_a".to_owned());
        let refused = || {
            Err(
                ToolError::new(ToolErrorCode::ConsentRequired, "no grant covers shop.example")
                    .with_cause(json!({ "domain": "shop.example" })),
            )
        };
        let asked = asked_for(&json!({ "domain": "shop.example", "reason": "to check the order" }));
        let first = recorded(dir.path(), &caller, "pap_join", &asked, refused()).unwrap_err();
        assert_eq!(first.code, ToolErrorCode::ConsentRequired);
        assert_eq!(first.retryable, Some(true));
        let id = first.cause.as_ref().unwrap()["request"].as_str().unwrap().to_owned();
        // Asking again while it waits files nothing new.
        let again = recorded(dir.path(), &caller, "pap_join", &asked, refused()).unwrap_err();
        assert_eq!(again.cause.as_ref().unwrap()["request"], id.as_str());
        let requests = AccessRequests::at(dir.path()).list().unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].why, "to check the order");
        assert_eq!(requests[0].state, RequestState::Pending);
        // The person declines in the console: the device's next call is told so.
        AccessRequests::at(dir.path())
            .claim(&id, Answer::Decline, pap_shared::Clock::now(&pap_shared::SystemClock))
            .unwrap();
        let declined = recorded(dir.path(), &caller, "pap_join", &asked, refused()).unwrap_err();
        assert_eq!(declined.code, ToolErrorCode::PermissionDenied);
        assert!(declined.message.contains("the person declined"), "{}", declined.message);
        // Every call is in the audit: the origin only, never the path or query.
        let navigated = asked_for(&json!({ "url": "https://shop.example/orders?token=abc" }));
        recorded(dir.path(), &caller, "browser_navigate", &navigated, Ok(json!({}))).unwrap();
        let calls = crate::console::audit::Audit::at(dir.path())
            .recent(10, |_| true)
            .unwrap();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0].origin.as_deref(), Some("https://shop.example"));
        assert_eq!(calls[0].outcome, "ok");
        assert_eq!(calls[1].outcome, "permission_denied");
        assert!(calls.iter().all(|c| c.device_id == "dev_a"));
        let text = std::fs::read_to_string(dir.path().join("audit/dev_a.jsonl")).unwrap();
        assert!(!text.contains("token") && !text.contains("orders") && !text.contains("check the order"));
    }

    #[test]
    fn every_tool_is_annotated_and_its_schema_is_an_object_model_apis_take() {
        let state = std::env::temp_dir().join(format!("pap-host-listed-{}", std::process::id()));
        std::fs::create_dir_all(&state).unwrap();
        let consent = Arc::new(
            pap_browser::consent::ConsentHost::open(
                &state,
                Arc::new(pap_shared::SystemClock),
                Arc::new(pap_shared::SystemRng),
            )
            .unwrap(),
        );
        let tools = ToolHost::new(
            pap_browser::chromium::manifest().unwrap(),
            pap_browser::chromium::BrowserHost::new(),
            pap_browser::chromium::ChromiumConfig::new(state.clone()),
            pap_browser::spec::InstanceKey::try_from("listed").unwrap(),
            consent,
        );
        let listed = BrowserServer::per_request(tools).listed();
        assert!(listed.len() >= 14, "{}", listed.len());
        for tool in &listed {
            let annotations = tool.annotations.as_ref().expect("annotated");
            assert!(annotations.title.is_some(), "{}", tool.name);
            let hints = [
                annotations.read_only_hint,
                annotations.destructive_hint,
                annotations.idempotent_hint,
                annotations.open_world_hint,
            ];
            assert!(hints.iter().all(Option::is_some), "{} lacks a hint", tool.name);
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
            for combinator in ["oneOf", "anyOf", "allOf"] {
                assert!(
                    !tool.input_schema.contains_key(combinator),
                    "{}: {combinator}",
                    tool.name
                );
            }
        }
        let read_only: Vec<&str> = listed
            .iter()
            .filter(|t| t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true))
            .map(|t| t.name.as_ref())
            .collect();
        assert!(
            read_only.contains(&"browser_get_dom") && !read_only.contains(&"browser_click"),
            "{read_only:?}"
        );
        let _ = std::fs::remove_dir_all(&state);
    }
}
