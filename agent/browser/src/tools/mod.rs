//! The tool host (AIP-63 §2): the reserved tools of one Chromium instance, as its manifest
//! declares them, with AIP-14 results. A tool the manifest does not list, or whose gate (or
//! option's gate) is closed, is `browser:unsupported` naming the capability (T3); a call that
//! finds the instance starting waits for it, at most the launch's remaining budget, then fails
//! `browser:starting` (L10); a handle of a previous boot is `browser:target_gone` (L12).
//!
//! The tool surface acts for agents only: every call carries an [`AgentCaller`], and nothing
//! here can make an operator's proof (C7). Granted values are redacted from every result (C9).
//!
//! ```compile_fail
//! // An operator's proof does not fit where the tool surface takes its caller (C7).
//! async fn escalate(tools: &pap_browser::ToolHost) {
//!     let operator = pap_browser::spec::Operator::from_operator_channel("cli");
//!     let _ = tools.call_as(&operator, "browser.profile.list", &serde_json::json!({})).await;
//! }
//! ```
//!
//! ```no_run
//! # async fn run(tools: &pap_browser::ToolHost) {
//! // What an agent does: it calls as itself, from the local runtime or a paired device.
//! let caller = pap_browser::spec::AgentCaller::paired("phone");
//! let listed = tools.call_as(&caller, "browser.profile.list", &serde_json::json!({})).await;
//! # let _ = listed;
//! # }
//! ```

mod ahead;
mod cdp_send;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod input;
mod page;
mod page_model;
mod persons;
mod watch;

pub use watch::{FRAMES_PER_SECOND, Frame, TabView, WATCHERS};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::chromium::{BrowserHost, ChromiumConfig, ContextId, ControlledBrowser, LaunchError};
use crate::consent::{Caller, ConsentHost, Forgotten, Injection, LiveError, LiveInstances, Scope};
use crate::spec::{
    AgentCaller, BrowserManifest, Capability, HealthReport, InstanceInfo, InstanceKey, Stopped, ToolError,
    ToolErrorCode, ToolId, ToolResult,
};

/// A target (tab) handle: which boot of the instance issued it, the browser context it runs
/// in, and what it has fetched.
#[derive(Clone)]
struct Target {
    boot_id: u64,
    page: Page,
    /// `None`: the default context (a provider that takes no session material).
    context: Option<ContextId>,
    /// Whose jar that context is (M5).
    jar: Jar,
    /// The paired device that opened it (`None`: the local agent): no other caller sees it
    /// (issue 15: a device's tabs are not another's targets).
    owner: Option<String>,
    keep_alive: bool,
    /// When a call last used it (the idle reaper's clock, L11).
    last_used: Instant,
    requests: Arc<std::sync::Mutex<Vec<Value>>>,
    /// What its pages logged to the console (`pap.browser.console_messages`).
    console: page_model::Console,
    /// The JavaScript dialog open on its page, if any (`pap.browser.handle_dialog`).
    dialog: page_model::Dialog,
    /// The refs its snapshots gave (`pap.browser.snapshot`).
    refs: Arc<std::sync::Mutex<page_model::Refs>>,
    /// Where its snapshots walk the page now.
    world: page_model::World,
}

/// Tabs one paired device may hold open at once (review N10: a renderer each). Its browser
/// contexts are bounded by the operator's grants (one per grant it may use, and a bare one).
pub const MAX_TABS_PER_DEVICE: usize = 16;

/// Serves the tools of one Chromium instance, as its manifest declares them.
pub struct ToolHost {
    manifest: BrowserManifest,
    host: BrowserHost,
    config: ChromiumConfig,
    instance: InstanceKey,
    targets: Mutex<HashMap<String, Target>>,
    next_target: std::sync::atomic::AtomicU64,
    consent: Arc<ConsentHost>,
    /// The browser contexts of the running boot: one per grant, holding only its material, and
    /// one holding none (review M5).
    contexts: Mutex<Contexts>,
    /// Set while [`ToolHost::start_recovery`]'s task relaunches a browser that exited.
    recovering: std::sync::atomic::AtomicBool,
    /// One `browser.download` at a time: Chromium keeps download events one switch for the
    /// whole DevTools session, so two at once (two devices) lose each other's events.
    downloads: Mutex<()>,
    /// The person's view: the tabs the person took over, the live pictures watched ([`watch`]).
    watch: Arc<Mutex<watch::Watch>>,
    /// A tab opened ahead for the next tab of a join's context ([`ahead`], issue 42).
    ahead: ahead::Ahead,
}

/// Whose cookie jar a tab runs in (review M5), per paired device (issue 15): two devices never
/// share a jar, even for a grant both may use, so what one device's pages set (a sign-in, a
/// cart) never reaches the other's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Jar {
    /// The browser's default context: a provider that takes no session material.
    Default,
    /// A context holding no granted material, of this device (`None`: the local agent).
    Bare { device: Option<String> },
    /// The context of this grant (its id) for this device, holding the grant's material only.
    Grant { device: Option<String>, grant: String },
}

impl Jar {
    fn grant(&self) -> Option<&str> {
        match self {
            Jar::Grant { grant, .. } => Some(grant),
            _ => None,
        }
    }

    fn device(&self) -> Option<&str> {
        match self {
            Jar::Bare { device } | Jar::Grant { device, .. } => device.as_deref(),
            Jar::Default => None,
        }
    }
}

/// The browser contexts of one boot (review M5). A tab opens in the context of the grant that
/// covers its first URL for the caller, or in the caller's bare one: a hostile page shares a jar
/// with no granted session, and a granted site's page with no other site's.
#[derive(Default)]
struct Contexts {
    boot_id: u64,
    by_jar: HashMap<Jar, ContextId>,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("provider", &self.manifest.id)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl ToolHost {
    /// A tool host for `instance` of the provider `manifest` describes; session material reaches
    /// the instance only through `consent` (C1).
    pub fn new(
        manifest: BrowserManifest,
        host: BrowserHost,
        config: ChromiumConfig,
        instance: InstanceKey,
        consent: Arc<ConsentHost>,
    ) -> Arc<Self> {
        Arc::new(Self {
            manifest,
            host,
            config,
            instance,
            targets: Mutex::default(),
            next_target: std::sync::atomic::AtomicU64::new(1),
            consent,
            contexts: Mutex::default(),
            recovering: std::sync::atomic::AtomicBool::new(false),
            downloads: Mutex::default(),
            watch: Arc::default(),
            ahead: ahead::Ahead::default(),
        })
    }

    /// The person's view, for a task that may outlive a call.
    fn watch_handle(&self) -> std::sync::Weak<Mutex<watch::Watch>> {
        Arc::downgrade(&self.watch)
    }

    /// The consent host the tools answer to.
    pub fn consent(&self) -> &Arc<ConsentHost> {
        &self.consent
    }

    /// The provider's manifest.
    pub fn manifest(&self) -> &BrowserManifest {
        &self.manifest
    }

    /// The tools this host serves: listed by the manifest, gate open (T1-T3), the reserved ones
    /// in the table's order, then the page model's vendor ones. Any other tool answers
    /// `browser:unsupported`.
    pub fn served(&self) -> Vec<ToolId> {
        let capabilities = &self.manifest.browser.capabilities;
        ToolId::every()
            .filter(|tool| self.manifest.lists(tool.as_str()))
            .filter(|tool| tool.spec().gate.is_none_or(|gate| capabilities.opens(gate)))
            .collect()
    }

    /// Launches (or returns) the instance: idempotent (L2), answering the `BrowserInstance`
    /// shape with `wasAlreadyRunning`. A fresh boot gets the material of the grants in force for
    /// this host's browsers, through the consent host (C1), when the provider takes any.
    pub async fn launch(&self) -> Result<InstanceInfo, ToolError> {
        let launched = self
            .host
            .launch(&self.config, self.instance.as_str(), &|_| {})
            .await
            .map_err(|e| match e {
                LaunchError::Refused(error) => error,
                other => ToolError::new(ToolErrorCode::Internal, format!("the browser did not start: {other}")),
            })?;
        let health = self.host.health(self.instance.as_str());
        self.inject_granted(&launched.browser, health.boot_id).await?;
        Ok(InstanceInfo {
            id: self.instance.clone(),
            state: health.state,
            endpoints: launched.browser.endpoints(),
            pid: launched.browser.pid(),
            was_already_running: launched.was_already_running,
            boot_id: health.boot_id,
        })
    }

    /// Whether this provider takes session material at all (`cookies` or `storageState`, M6):
    /// one that does not (the attach provider) runs its tabs in the default context and gets
    /// no grant's material.
    fn takes_material(&self) -> bool {
        self.manifest
            .browser
            .capabilities
            .opens(crate::spec::Gate::SessionMaterial)
    }

    /// Gives a fresh boot a context per grant in force, each holding that grant's material only
    /// (C1, M5). Once per boot.
    async fn inject_granted(&self, browser: &ControlledBrowser, boot_id: u64) -> Result<(), ToolError> {
        if !self.takes_material() || self.contexts.lock().await.boot_id == boot_id {
            return Ok(());
        }
        // Expiry revokes through this host (`LiveInstances::forget`), which takes the contexts'
        // lock: it runs before that lock is held here.
        self.consent.expire(self).await.map_err(|e| e.to_tool_error())?;
        let injections = self
            .consent
            .local_injections(&Caller::local_agent())
            .map_err(|e| e.to_tool_error())?;
        let mut contexts = self.contexts.lock().await;
        if contexts.boot_id == boot_id {
            return Ok(());
        }
        *contexts = Contexts {
            boot_id,
            ..Contexts::default()
        };
        for injection in &injections {
            let context = open_with(browser, Some(injection)).await?;
            let jar = Jar::Grant {
                device: None,
                grant: injection.grant_id().to_owned(),
            };
            contexts.by_jar.insert(jar, context);
        }
        Ok(())
    }

    /// Whose jar a tab for `caller` on `url` runs in: the grant covering `url`'s host that
    /// `caller` may use, or none (the bare context); the default context for a provider that
    /// takes no material.
    fn jar_for(&self, caller: &AgentCaller, url: Option<&str>) -> Result<Jar, ToolError> {
        if !self.takes_material() {
            return Ok(Jar::Default);
        }
        let device = caller.device_id().map(str::to_owned);
        let Some(host) = url.and_then(|u| url::Url::parse(u).ok()?.host_str().map(str::to_owned)) else {
            return Ok(Jar::Bare { device });
        };
        let grant = self
            .consent
            .local_grant_for(&Caller::Agent(caller.clone()), &host)
            .map_err(|e| e.to_tool_error())?;
        Ok(match grant {
            Some(grant) => Jar::Grant {
                device,
                grant: grant.id,
            },
            None => Jar::Bare { device },
        })
    }

    /// The context of `jar`, made now (with the grant's material) if the grant came after the
    /// launch or the bare context is not there yet.
    async fn context_of(
        &self,
        browser: &ControlledBrowser,
        caller: &AgentCaller,
        jar: &Jar,
    ) -> Result<Option<ContextId>, ToolError> {
        if *jar == Jar::Default {
            return Ok(None);
        }
        let mut contexts = self.contexts.lock().await;
        if let Some(context) = contexts.by_jar.get(jar) {
            return Ok(Some(context.clone()));
        }
        let injection = match jar.grant() {
            Some(id) => self
                .consent
                .local_injection_of(&Caller::Agent(caller.clone()), id)
                .map_err(|e| e.to_tool_error())?,
            None => None,
        };
        let context = open_with(browser, injection.as_ref()).await?;
        contexts.by_jar.insert(jar.clone(), context.clone());
        Ok(Some(context))
    }

    /// An open tab sent to `url` stays in its jar: a tab of one grant's jar does not go to a
    /// site outside that grant, and a bare tab does not go to a granted site (M5: the page would
    /// carry the wrong sessions, or miss its own). A new tab does (`browser.navigate` without
    /// `target`).
    async fn same_jar(&self, caller: &AgentCaller, target: &str, url: &str) -> Result<(), ToolError> {
        if url == "about:blank" {
            return Ok(());
        }
        let wanted = self.jar_for(caller, Some(url))?;
        let current = self.targets.lock().await.get(target).map(|t| t.jar.clone());
        if current.is_none_or(|jar| jar == wanted) {
            return Ok(());
        }
        Err(ToolError::new(
            ToolErrorCode::PermissionDenied,
            "this tab runs in another cookie jar than that site's (each grant has its own): open \
             a new tab for it (browser.navigate without target)",
        )
        .with_cause(json!({ "rule": "context", "target": target })))
    }

    /// `health()`: the instance's state, when it was established, its boot (L1, L4, L12).
    pub fn health(&self) -> HealthReport {
        HealthReport::from(&self.host.health(self.instance.as_str()))
    }

    /// `stop({force})` (L5): how many processes its sweep ended.
    pub async fn stop(&self, force: bool) -> Result<Stopped, ToolError> {
        let grace = self.config.grace;
        let stopped = if force {
            self.host.stop_forced(self.instance.as_str(), grace).await
        } else {
            self.host.stop(self.instance.as_str(), grace).await
        };
        stopped.map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))
    }

    /// Calls `tool` with `input` as the local agent would: an AIP-14 result, never a panic or an
    /// opaque transport error.
    pub async fn call(&self, tool: &str, input: &Value) -> ToolResult {
        self.call_as(&AgentCaller::local(), tool, input).await
    }

    /// Calls `tool` as `caller` (an agent on a paired device sees only the grants scoped to it
    /// or to no device, C12). Granted cookie and storage values are redacted from every result
    /// and error (C9).
    pub async fn call_as(&self, caller: &AgentCaller, tool: &str, input: &Value) -> ToolResult {
        match self.dispatch(caller, tool, input).await {
            Ok(value) => self.redacted(value),
            Err(error) => ToolResult::Err(self.redacted_error(error)),
        }
    }

    fn redacted(&self, mut value: Value) -> ToolResult {
        match self.consent.redact(&mut value) {
            Ok(_) => ToolResult::Ok(value),
            // A result that cannot be checked does not leave.
            Err(e) => ToolResult::Err(ToolError::new(
                ToolErrorCode::Internal,
                format!("the result could not be checked for granted values: {e}"),
            )),
        }
    }

    fn redacted_error(&self, mut error: ToolError) -> ToolError {
        let mut message = Value::String(std::mem::take(&mut error.message));
        let checked = self.consent.redact(&mut message).is_ok()
            && error
                .cause
                .as_mut()
                .is_none_or(|cause| self.consent.redact(cause).is_ok());
        error.message = match (checked, message) {
            (true, Value::String(text)) => text,
            _ => format!(
                "{} (its text was withheld: it could not be checked)",
                error.code.as_str()
            ),
        };
        error
    }

    /// T3 first (a tool the manifest does not list, or whose gate is closed, is unsupported by
    /// name), then the tool.
    async fn dispatch(&self, caller: &AgentCaller, tool: &str, input: &Value) -> Result<Value, ToolError> {
        let reserved = ToolId::parse(tool);
        let gate = reserved.and_then(|t| t.spec().gate);
        let capabilities = &self.manifest.browser.capabilities;
        let Some(tool) = reserved.filter(|_| self.manifest.lists(tool)) else {
            return Err(ToolError::unsupported(tool, gate.map_or(tool, |g| g.name())));
        };
        if let Some(gate) = gate.filter(|g| !capabilities.opens(*g)) {
            return Err(ToolError::unsupported(tool.as_str(), gate.name()));
        }
        // A tab the person took over is theirs until they hand it back (AIP-7).
        self.not_the_persons(caller, tool, input.get("target").and_then(Value::as_str))
            .await?;
        match tool {
            ToolId::Navigate => self.navigate(caller, tool.parse_input(input)?).await,
            ToolId::Evaluate => self.evaluate(caller, tool.parse_input(input)?).await,
            ToolId::GetDom => self.get_dom(caller, tool.parse_input(input)?).await,
            ToolId::Screenshot => self.screenshot(caller, tool.parse_input(input)?).await,
            ToolId::Click => self.click(caller, tool.parse_input(input)?).await,
            ToolId::Fill => self.fill(caller, tool.parse_input(input)?).await,
            ToolId::Tabs => self.tabs(caller, tool.parse_input(&tabs_input(input))?).await,
            ToolId::ListRequests => self.list_requests(caller, tool.parse_input(input)?).await,
            ToolId::GetRequestBody => self.get_request_body(caller, tool.parse_input(input)?).await,
            ToolId::CdpSend => self.cdp_send(caller, tool.parse_input(input)?).await,
            ToolId::Download => self.download(caller, tool.parse_input(input)?).await,
            ToolId::ProfileList | ToolId::ProfileRefresh | ToolId::ProfileRevoke => {
                crate::consent::profile_tool(&self.consent, caller, tool, input, self).await
            }
            ToolId::Snapshot => self.snapshot(caller, tool.parse_input(input)?).await,
            ToolId::PressKey => self.press_key(caller, tool.parse_input(input)?).await,
            ToolId::Hover => self.hover(caller, tool.parse_input(input)?).await,
            ToolId::SelectOption => self.select_option(caller, tool.parse_input(input)?).await,
            ToolId::WaitFor => self.wait_for(caller, tool.parse_input(input)?).await,
            ToolId::NavigateBack => {
                let on: input::OnTarget = tool.parse_input(input)?;
                self.history(caller, &on.target, -1).await
            }
            ToolId::NavigateForward => {
                let on: input::OnTarget = tool.parse_input(input)?;
                self.history(caller, &on.target, 1).await
            }
            ToolId::Resize => self.resize(caller, tool.parse_input(input)?).await,
            ToolId::ConsoleMessages => self.console_messages(caller, tool.parse_input(input)?).await,
            ToolId::PdfSave => self.pdf_save(caller, tool.parse_input(input)?).await,
            ToolId::HandleDialog => self.handle_dialog(caller, tool.parse_input(input)?).await,
            ToolId::Drag => self.drag(caller, tool.parse_input(input)?).await,
            ToolId::FileUpload => self.file_upload(caller, tool.parse_input(input)?).await,
            // No provider here serves natural-language actions; M4 keeps it out of a manifest
            // without `aiActions`, and a manifest with it is not one of ours.
            ToolId::Act => Err(ToolError::unsupported(tool.as_str(), Capability::AiActions.as_str())),
        }
    }

    /// Waits for the instance to take a call (L3, L10): the boot the call belongs to.
    async fn ready(&self) -> Result<u64, ToolError> {
        self.host.ready(self.instance.as_str()).await
    }

    /// Whether an option gated by `capability` may be used (T3 for options: `fullPage`,
    /// `trusted`).
    fn option_gate(&self, tool: ToolId, capability: Capability) -> Result<(), ToolError> {
        if self.manifest.browser.capabilities.has(capability) {
            Ok(())
        } else {
            Err(ToolError::unsupported(tool.as_str(), capability.as_str()))
        }
    }

    /// The running browser, for a call that needs the browser itself.
    async fn browser(&self) -> Result<Arc<ControlledBrowser>, ToolError> {
        self.host.attach(self.instance.as_str()).await.ok_or_else(|| {
            ToolError::new(ToolErrorCode::NotReady, "the browser is not running")
                .with_cause(json!({ "state": "stopped" }))
        })
    }

    /// Opens a new target (tab) for `caller`, in the context for `url` (the page it is opened
    /// for, if any), and starts its request log. A second open target needs `multiTarget`.
    async fn open_target(
        &self,
        caller: &AgentCaller,
        boot_id: u64,
        keep_alive: bool,
        url: Option<&str>,
    ) -> Result<(String, Page), ToolError> {
        let open = self
            .targets
            .lock()
            .await
            .values()
            .filter(|t| t.boot_id == boot_id)
            .count();
        if open >= 1 {
            self.option_gate(ToolId::Tabs, Capability::MultiTarget)?;
        }
        if let Some(device) = caller.device_id() {
            let of_device = self
                .targets
                .lock()
                .await
                .values()
                .filter(|t| t.boot_id == boot_id && t.owner.as_deref() == Some(device))
                .count();
            if of_device >= MAX_TABS_PER_DEVICE {
                return Err(ToolError::new(
                    ToolErrorCode::PermissionDenied,
                    format!("this device has {MAX_TABS_PER_DEVICE} tabs open, the most one device may: close one first (browser.tabs)"),
                )
                .with_cause(json!({ "rule": "tabs-per-device", "max": MAX_TABS_PER_DEVICE })));
            }
        }
        let browser = self.browser().await?;
        // The boot's granted material goes in before any context of it is made here: a call that
        // waited for a launch under way (one at the host's start, or another call's) can get here
        // before that launch's own injection, which starts the boot's contexts afresh and would
        // drop one made meanwhile (its tabs then in no jar a revoke or a device's end reaches).
        self.inject_granted(&browser, boot_id).await?;
        let jar = self.jar_for(caller, url)?;
        let context = self.context_of(&browser, caller, &jar).await?;
        // A tab opened ahead in this context comes to the front, as a new tab opens; one that
        // cannot (its renderer gone) is closed, and a new tab opened instead.
        let ahead = match self.ahead.take(boot_id, context.as_ref()) {
            Some(page) => match page.bring_to_front().await {
                Ok(_) => {
                    self.ahead.served();
                    Some(page)
                }
                Err(_) => {
                    let _ = page.close().await;
                    None
                }
            },
            None => None,
        };
        let page = match ahead {
            Some(page) => page,
            None => browser
                .new_page_in(context.as_ref())
                .await
                .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?,
        };
        // A tab whose watches could not start is closed, not left open and unlisted.
        let watched = async {
            Ok::<_, ToolError>((
                page::log_responses(&page).await?,
                page_model::log_console(&page).await?,
                page_model::watch_dialogs(&page).await?,
                page_model::watch_worlds(&page).await?,
            ))
        }
        .await;
        let (requests, console, dialog, world) = match watched {
            Ok(watched) => watched,
            Err(error) => {
                let _ = page.close().await;
                return Err(error);
            }
        };
        let id = format!(
            "t{boot_id}-{}",
            self.next_target.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        self.targets.lock().await.insert(
            id.clone(),
            Target {
                boot_id,
                page: page.clone(),
                context,
                jar,
                owner: caller.device_id().map(str::to_owned),
                keep_alive,
                last_used: Instant::now(),
                requests,
                console,
                dialog,
                refs: Arc::default(),
                world,
            },
        );
        Ok((id, page))
    }

    /// The target `id`, for `caller` (`None`: the operator): unknown, or another device's ->
    /// `not_found` (a device cannot tell another's tabs from none); issued by a previous boot ->
    /// `browser:target_gone`, never rebound (L12). Using it resets its idle time (L11).
    async fn target(&self, caller: Option<&AgentCaller>, id: &str) -> Result<Page, ToolError> {
        let boot_id = self.ready().await?;
        let mut targets = self.targets.lock().await;
        let target = targets
            .get_mut(id)
            .filter(|t| caller.is_none_or(|c| t.owner.as_deref() == c.device_id()))
            .ok_or_else(|| page::not_found(id))?;
        if target.boot_id != boot_id {
            return Err(ToolError::new(
                ToolErrorCode::TargetGone,
                format!("target {id} belonged to a previous run of the browser"),
            )
            .with_cause(json!({ "target": id })));
        }
        target.last_used = Instant::now();
        Ok(target.page.clone())
    }

    /// What is the person's in this host's browser (AIP-7): the sites where the person decides,
    /// the tabs the person holds, the joins in flight ([`crate::persons`]). The browser's request
    /// guard judges every request by the same table.
    pub fn persons(&self) -> &crate::persons::Persons {
        &self.config.persons
    }

    /// The target `id` for a `tool` that acts on its page. A script tool (evaluate, cdp_send)
    /// is refused on every tab whose cookie jar can hold a Session on a site where the person
    /// decides (AIP-7, [`persons`]): judged on the jar, which a tab keeps from the moment it
    /// opens, so no navigation can race the check.
    async fn drivable(&self, caller: &AgentCaller, tool: ToolId, id: &str) -> Result<Page, ToolError> {
        let page = self.target(Some(caller), id).await?;
        // A JavaScript dialog holds the page's scripts and input until it is answered.
        self.no_dialog(id).await?;
        if matches!(tool, ToolId::Evaluate | ToolId::CdpSend) {
            let jar = self.targets.lock().await.get(id).map(|t| t.jar.clone());
            if jar.is_none_or(|jar| self.jar_reaches_persons_site(&jar).unwrap_or(true)) {
                return Err(persons::refusal(tool, id, persons::SCRIPTS_IN_PERSONS_JAR));
            }
        }
        Ok(page)
    }

    /// Whether tabs of `jar` can carry a Session on one of the person's sites: the default jar
    /// while any site is the person's, a grant's jar when the grant reaches one, never a bare
    /// jar (it holds no granted material, and a join runs only in a grant's jar). Unsure
    /// (a site list or grant that cannot be read) is an error, which callers take as "yes".
    fn jar_reaches_persons_site(&self, jar: &Jar) -> Result<bool, ToolError> {
        let domains = self.persons().domains().map_err(|e| persons::unreadable(&e))?;
        if domains.is_empty() {
            return Ok(false);
        }
        match jar {
            Jar::Default => Ok(true),
            Jar::Bare { .. } => Ok(false),
            Jar::Grant { grant, .. } => {
                for domain in &domains {
                    if self
                        .consent
                        .grant_reaches(grant, domain)
                        .map_err(|e| e.to_tool_error())?
                    {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
        }
    }

    /// The person's hold of `page`, which is about to load `url`: only when `url` is on one of the
    /// person's sites. A hold lets every state-changing request of the tab go to the person's
    /// sites; on a page of another site (one a device chose), that page's own script or form
    /// could post to a person's site as the person (security review of the console, finding 2).
    /// Unheld, such a tab is a tab like a tool's: what it sends to the person's sites is refused.
    pub(crate) fn hold_if_persons_site(
        &self,
        page: &Page,
        url: &str,
    ) -> Result<Option<crate::persons::PersonsHold>, ToolError> {
        let host = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned));
        let domains = self.persons().domains().map_err(|e| persons::unreadable(&e))?;
        let persons_site = host.is_some_and(|host| domains.iter().any(|d| crate::persons::host_is_under(&host, d)));
        if !persons_site {
            return Ok(None);
        }
        self.persons()
            .hold_for_person(page.target_id().inner().clone())
            .map(Some)
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))
    }

    /// The in-page check of the page-level click and fill: the person's sites now, as a script
    /// fragment the acting script runs in its own document ([`persons::in_page_guard`]).
    fn persons_form_guard(&self) -> Result<String, ToolError> {
        let domains = self.persons().domains().map_err(|e| persons::unreadable(&e))?;
        Ok(persons::in_page_guard(&domains))
    }

    /// A tab for the person, showing what `target` shows now: a new tab in the same cookie jar,
    /// held by the person from before its first request when that page is on one of the
    /// person's sites (`hold_if_persons_site`), that no tool has a handle to (it is
    /// no target). Its requests to the person's sites go through the request guard as the person's
    /// decisions; a tool's never do. Not a tool: no tool call reaches it (the MCP hosts dispatch
    /// tools by name to [`ToolHost::call_as`] only); it is for the person's own channel (the
    /// operator's console, the CLI, a test playing the person). The hold ends, and the tab
    /// closes, when the returned [`PersonsTab`] drops.
    pub async fn persons_page(&self, target: &str) -> Result<PersonsTab, ToolError> {
        let shown = self.target(None, target).await?;
        let url = shown
            .url()
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("the tab's address: {e}")))?
            .unwrap_or_else(|| "about:blank".to_owned());
        self.may_go(&url)?;
        let context = self.targets.lock().await.get(target).and_then(|t| t.context.clone());
        let browser = self.browser().await?;
        let page = browser
            .new_page_in(context.as_ref())
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
        let hold = self.hold_if_persons_site(&page, &url)?;
        let tab = PersonsTab { page, _hold: hold };
        tab.page
            .bring_to_front()
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("bringing the tab to the front: {e}")))?;
        if url != "about:blank" {
            tokio::time::timeout(std::time::Duration::from_secs(30), page::go(&tab.page, &url))
                .await
                .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the page did not load in 30 s"))??;
        }
        Ok(tab)
    }

    /// The cookies, as (name, domain) and never their values, of the jar `target` runs in: what
    /// its page's requests can carry (M5; for the operator and the conformance suite).
    pub async fn target_cookie_names(&self, target: &str) -> Result<Vec<(String, String)>, ToolError> {
        self.target(None, target).await?;
        let context = self.targets.lock().await.get(target).and_then(|t| t.context.clone());
        self.browser()
            .await?
            .cookie_names_in(context.as_ref())
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))
    }

    /// Opens a new tab for `caller` in the jar for `url` (the context of the grant covering it
    /// for that caller, M5), left blank: for a step that drives the page itself (the PAP join)
    /// and then hands the tab to the caller as its target.
    pub async fn open_tab(&self, caller: &AgentCaller, url: &str) -> Result<(String, Page), ToolError> {
        self.may_go(url)?;
        let boot_id = self.ready().await?;
        self.open_target(caller, boot_id, false, Some(url)).await
    }

    /// Closes `caller`'s tab `target` ([`ToolHost::open_tab`]'s, once its step failed): a
    /// step that fails hands no tab to the caller, and leaves none open. Another device's tab,
    /// or one already gone, is left as it is.
    pub async fn close_tab(&self, caller: &AgentCaller, target: &str) {
        let closed = {
            let mut targets = self.targets.lock().await;
            match targets.get(target) {
                Some(t) if t.owner.as_deref() == caller.device_id() => targets.remove(target),
                _ => None,
            }
        };
        if let Some(closed) = closed {
            let _ = closed.page.close().await;
        }
    }

    /// Opens a tab in the background for the next tab `caller` opens for `url` (in the context
    /// `url` is opened in for `caller`), which that tab then takes instead of waiting for a new
    /// one (`tools/ahead.rs`, issue 42: about 100 ms of a join in a new tab). The tools' join calls it
    /// once its join has landed. At most one tab waits per context (this one replaces that
    /// context's), and at most four in all (the oldest closes).
    ///
    /// Only into a context that is there now: one that ended (a device unpaired meanwhile, a
    /// grant revoked) is never made again for a tab nobody asked for. Nothing opens without
    /// `multiTarget` either: such a provider keeps to one tab, nor while the browser is not
    /// healthy. `None` then; otherwise the
    /// receiver hears the tab's target id once it waits (dropping it changes nothing).
    pub async fn open_ahead(
        &self,
        caller: &AgentCaller,
        url: &str,
    ) -> Result<Option<tokio::sync::oneshot::Receiver<chromiumoxide::cdp::browser_protocol::target::TargetId>>, ToolError>
    {
        self.may_go(url)?;
        if !self.manifest.browser.capabilities.has(Capability::MultiTarget) {
            return Ok(None);
        }
        // Never waits for the browser: one that is not healthy now (relaunching after a crash)
        // gets no tab ahead, and the join that calls this answers at once.
        let health = self.host.health(self.instance.as_str());
        if health.state != crate::spec::InstanceState::Healthy {
            return Ok(None);
        }
        let boot_id = health.boot_id;
        let browser = self.browser().await?;
        let context = match self.jar_for(caller, Some(url))? {
            Jar::Default => None,
            jar => match self.contexts.lock().await.by_jar.get(&jar) {
                Some(context) => Some(context.clone()),
                None => return Ok(None),
            },
        };
        Ok(Some(self.ahead.open(browser, boot_id, context)))
    }

    /// Whether a tab opened ahead waits now, and how many such tabs a tab took since the host
    /// started (test support: what the tools' join leaves behind is not visible to a device).
    #[cfg(feature = "test-support")]
    pub fn tabs_ahead(&self) -> (bool, u64) {
        (self.ahead.waits(), self.ahead.taken())
    }

    /// Ends everything of the paired device `device_id` in this browser: its tabs and its
    /// contexts, the grants' material in them included (a revoked pairing, C13). Returns how
    /// many contexts ended.
    pub async fn end_device(&self, device_id: &str) -> Result<usize, ToolError> {
        let ended: Vec<ContextId> = {
            let mut contexts = self.contexts.lock().await;
            let of_device: Vec<Jar> = contexts
                .by_jar
                .keys()
                .filter(|jar| jar.device() == Some(device_id))
                .cloned()
                .collect();
            of_device.iter().filter_map(|jar| contexts.by_jar.remove(jar)).collect()
        };
        let (ids, closed): (Vec<String>, Vec<Target>) = {
            let mut targets = self.targets.lock().await;
            let ids: Vec<String> = targets
                .iter()
                .filter(|(_, t)| t.owner.as_deref() == Some(device_id))
                .map(|(id, _)| id.clone())
                .collect();
            let closed = ids.iter().filter_map(|id| targets.remove(id)).collect();
            (ids, closed)
        };
        // The person's tabs in the device's jars close too (its takeovers, its decisions' pages).
        for person_tab in self.persons_tabs_of(device_id, &ids).await {
            let _ = person_tab.page().clone().close().await;
        }
        for target in closed {
            let _ = target.page.close().await;
        }
        self.ahead.ended(&ended);
        if let Some(browser) = self.host.attach(self.instance.as_str()).await {
            for context in &ended {
                browser
                    .close_context(context)
                    .await
                    .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
            }
        }
        Ok(ended.len())
    }

    /// Whether `target` was opened with `keepAlive` (L11).
    pub async fn is_kept_alive(&self, target: &str) -> bool {
        self.targets.lock().await.get(target).is_some_and(|t| t.keep_alive)
    }

    /// The idle reaper's round at `now` (`supervision.idleReapMs`, L11): closes every target no
    /// call has used for that long, never a `keepAlive` one. Without `idleReapMs` (or with 0)
    /// nothing is reaped. Returns how many it closed.
    pub async fn reap_idle(&self, now: Instant) -> usize {
        let Some(idle) = self.idle_reap() else { return 0 };
        let reaped: Vec<Target> = {
            let mut targets = self.targets.lock().await;
            let stale: Vec<String> = targets
                .iter()
                .filter(|(_, t)| !t.keep_alive && now.saturating_duration_since(t.last_used) >= idle)
                .map(|(id, _)| id.clone())
                .collect();
            stale.iter().filter_map(|id| targets.remove(id)).collect()
        };
        for target in &reaped {
            let _ = target.page.clone().close().await;
        }
        self.ahead.reap(now, idle);
        reaped.len()
    }

    fn idle_reap(&self) -> Option<Duration> {
        self.manifest
            .browser
            .lifecycle
            .supervision
            .idle_reap_ms
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    /// Relaunches this host's instance when its browser exits on its own (a crash, the
    /// out-of-memory killer, a SIGKILL), after the supervisor's backoff
    /// ([`crate::spec::Relaunch`]), with the grants' material put back as at any launch (C1); the
    /// devices' contexts are made anew as their next tabs need them, and target handles of the
    /// old boot answer `browser:target_gone` (L12). While it relaunches, [`Self::recovering`] is
    /// set. An instance that exited `maxFailures` times in the crash-loop window is left to the
    /// next call. Runs until the handle drops.
    pub fn start_recovery(self: &Arc<Self>) -> Recovery {
        let mut exits = self.host.exits();
        let tools = Arc::downgrade(self);
        Recovery(tokio::spawn(async move {
            loop {
                let exit = match exits.recv().await {
                    Ok(exit) => exit,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(tools) = tools.upgrade() else { return };
                if exit.instance != tools.instance.as_str() {
                    continue;
                }
                let crate::spec::Relaunch::After { delay, .. } = exit.relaunch else {
                    continue;
                };
                tools.recovering.store(true, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if let Err(error) = tools.launch().await {
                    tracing::warn!(instance = %exit.instance, error = %error.message, "relaunching the browser that exited");
                }
                tools.recovering.store(false, std::sync::atomic::Ordering::SeqCst);
            }
        }))
    }

    /// Whether a browser that exited is being relaunched now ([`Self::start_recovery`]).
    pub fn recovering(&self) -> bool {
        self.recovering.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs the idle reaper every `idleReapMs / 2` (none without `idleReapMs`), until the
    /// handle drops.
    pub fn start_idle_reaper(self: &Arc<Self>) -> Option<IdleReaper> {
        let idle = self.idle_reap()?;
        let host = Arc::downgrade(self);
        Some(IdleReaper(tokio::spawn(async move {
            let mut ticks = tokio::time::interval((idle / 2).max(Duration::from_millis(10)));
            loop {
                ticks.tick().await;
                let Some(host) = host.upgrade() else { return };
                host.reap_idle(Instant::now()).await;
            }
        })))
    }
}

/// The recovery task of a [`ToolHost`] ([`ToolHost::start_recovery`]); it ends when this is
/// dropped.
#[derive(Debug)]
pub struct Recovery(tokio::task::JoinHandle<()>);

impl Drop for Recovery {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The idle reaper of a [`ToolHost`]; it ends when this is dropped.
#[derive(Debug)]
pub struct IdleReaper(tokio::task::JoinHandle<()>);

impl Drop for IdleReaper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A tab the person holds ([`ToolHost::persons_page`]): what the person does in it is theirs.
/// Dropping it ends the hold and closes the tab.
pub struct PersonsTab {
    page: Page,
    /// Only for a page on one of the person's sites (`ToolHost::hold_if_persons_site`).
    _hold: Option<crate::persons::PersonsHold>,
}

impl PersonsTab {
    /// The tab's page, for the person's own input.
    pub fn page(&self) -> &Page {
        &self.page
    }
}

impl std::fmt::Debug for PersonsTab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersonsTab")
            .field("target", self.page.target_id())
            .finish_non_exhaustive()
    }
}

impl Drop for PersonsTab {
    fn drop(&mut self) {
        // The hold ends with `_hold`; the tab goes too, when a runtime is there to close it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let page = self.page.clone();
            runtime.spawn(async move {
                let _ = page.close().await;
            });
        }
    }
}

/// The JSON Schema of `tool`'s input, made from the closed type the tool parses its input into
/// (what an MCP host lists as the tool's `inputSchema`). `browser.act`, which no provider here
/// serves, takes any object.
pub fn input_schema(tool: ToolId) -> serde_json::Map<String, Value> {
    use schemars::schema_for;
    let schema = match tool {
        ToolId::Navigate => schema_for!(input::Navigate),
        ToolId::Evaluate => schema_for!(input::Evaluate),
        ToolId::GetDom => schema_for!(input::GetDom),
        ToolId::Screenshot => schema_for!(input::Screenshot),
        ToolId::Click => schema_for!(input::Click),
        ToolId::Fill => schema_for!(input::Fill),
        ToolId::Tabs => schema_for!(input::TabsSchema),
        ToolId::ListRequests => schema_for!(input::OnTarget),
        ToolId::GetRequestBody => schema_for!(input::GetRequestBody),
        ToolId::CdpSend => schema_for!(input::CdpSend),
        ToolId::Download => schema_for!(input::Download),
        ToolId::Snapshot => schema_for!(input::Snapshot),
        ToolId::PressKey => schema_for!(input::PressKey),
        ToolId::Hover => schema_for!(input::Hover),
        ToolId::SelectOption => schema_for!(input::SelectOption),
        ToolId::WaitFor => schema_for!(input::WaitFor),
        ToolId::NavigateBack | ToolId::NavigateForward | ToolId::ConsoleMessages | ToolId::PdfSave => {
            schema_for!(input::OnTarget)
        }
        ToolId::Resize => schema_for!(input::Resize),
        ToolId::HandleDialog => schema_for!(input::HandleDialog),
        ToolId::Drag => schema_for!(input::Drag),
        ToolId::FileUpload => schema_for!(input::FileUpload),
        ToolId::ProfileList | ToolId::ProfileRefresh | ToolId::ProfileRevoke => {
            crate::consent::profile_input_schema(tool).unwrap_or_default()
        }
        ToolId::Act => return serde_json::Map::from_iter([("type".to_owned(), json!("object"))]),
    };
    let mut object = match schema.to_value() {
        Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    // MCP wants an object schema at the top.
    object.entry("type").or_insert_with(|| json!("object"));
    object
}

/// `browser.tabs` without an `action` lists.
fn tabs_input(input: &Value) -> Value {
    match input {
        Value::Object(fields) if !fields.contains_key("action") => {
            let mut fields = fields.clone();
            fields.insert("action".into(), "list".into());
            Value::Object(fields)
        }
        Value::Null => json!({ "action": "list" }),
        other => other.clone(),
    }
}

/// A revoke through the tool host reaches every browser of its [`BrowserHost`], in every context
/// (M5); the contexts of grants that no longer count end, and the target handles of closed tabs
/// go with them.
#[async_trait::async_trait]
impl LiveInstances for ToolHost {
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, LiveError> {
        let mut closing = Vec::new();
        for (id, target) in self.targets.lock().await.iter() {
            let url = target.page.url().await.ok().flatten().unwrap_or_default();
            let host = url::Url::parse(&url).ok().and_then(|u| u.host_str().map(str::to_owned));
            if host.is_some_and(|h| scope.covers(&h)) {
                closing.push(id.clone());
            }
        }
        let mut forgotten = LiveInstances::forget(&self.host, scope, origins).await?;
        // The revoke has already taken the grant out (or narrowed it): a grant that no longer
        // counts, for any caller or device, loses its context, tabs and all. One whose state
        // cannot be read is treated as ended: its session goes, none leaks.
        let ended: Vec<ContextId> = {
            let mut contexts = self.contexts.lock().await;
            let gone: Vec<Jar> = contexts
                .by_jar
                .keys()
                .filter(|jar| {
                    jar.grant()
                        .is_some_and(|id| !self.consent.still_counts(id).unwrap_or(false))
                })
                .cloned()
                .collect();
            gone.iter().filter_map(|jar| contexts.by_jar.remove(jar)).collect()
        };
        self.ahead.ended(&ended);
        if let Some(browser) = self.host.attach(self.instance.as_str()).await {
            for context in &ended {
                browser.close_context(context).await.map_err(|e| LiveError::Refused {
                    step: "ending a revoked grant's browser context",
                    detail: e.to_string(),
                })?;
                forgotten.tabs += 1;
            }
        }
        let mut targets = self.targets.lock().await;
        targets.retain(|id, t| !closing.contains(id) && t.context.as_ref().is_none_or(|c| !ended.contains(c)));
        Ok(forgotten)
    }

    /// A grant's material (a refresh, or what a launch puts in) replaces its context: the old
    /// one ends with its tabs, and a new one holds the material as it now stands.
    async fn inject(&self, injection: &Injection) -> Result<usize, LiveError> {
        let Some(browser) = self.host.attach(self.instance.as_str()).await else {
            return Ok(0);
        };
        let live = |e: crate::chromium::BrowserError| match e {
            crate::chromium::BrowserError::Live(live) => live,
            other => LiveError::Refused {
                step: "putting granted material in",
                detail: other.to_string(),
            },
        };
        if !self.takes_material() {
            return browser.inject(injection).await.map_err(live);
        }
        // Every device's context of the grant ends with its tabs; the local agent's is made anew
        // now, a device's when it next opens a tab on the grant.
        let fresh = browser.open_context().await.map_err(live)?;
        let count = browser.inject_into(Some(&fresh), injection).await.map_err(live)?;
        let replaced: Vec<ContextId> = {
            let mut contexts = self.contexts.lock().await;
            let of_grant: Vec<Jar> = contexts
                .by_jar
                .keys()
                .filter(|jar| jar.grant() == Some(injection.grant_id()))
                .cloned()
                .collect();
            let replaced = of_grant.iter().filter_map(|jar| contexts.by_jar.remove(jar)).collect();
            let local = Jar::Grant {
                device: None,
                grant: injection.grant_id().to_owned(),
            };
            contexts.by_jar.insert(local, fresh);
            replaced
        };
        self.targets
            .lock()
            .await
            .retain(|_, t| t.context.as_ref().is_none_or(|c| !replaced.contains(c)));
        self.ahead.ended(&replaced);
        for old in &replaced {
            browser.close_context(old).await.map_err(live)?;
        }
        Ok(count)
    }
}

/// A new context in `browser` holding `injection`'s material (none without one).
async fn open_with(browser: &ControlledBrowser, injection: Option<&Injection>) -> Result<ContextId, ToolError> {
    let internal = |e: crate::chromium::BrowserError| ToolError::new(ToolErrorCode::Internal, e.to_string());
    let context = browser.open_context().await.map_err(internal)?;
    if let Some(injection) = injection {
        browser.inject_into(Some(&context), injection).await.map_err(internal)?;
    }
    Ok(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_lists_a_closed_input_schema_of_the_fields_it_parses() {
        for tool in ToolId::every().filter(|t| *t != ToolId::Act) {
            let schema = input_schema(tool);
            assert_eq!(schema.get("type"), Some(&json!("object")), "{tool:?}");
            // Model APIs refuse a tool whose input schema combines schemas at the top.
            for combinator in ["oneOf", "anyOf", "allOf"] {
                assert!(
                    !schema.contains_key(combinator),
                    "{tool:?} has a top-level {combinator}"
                );
            }
            // Unknown fields are refused by the parser: the schema says so.
            assert_eq!(schema.get("additionalProperties"), Some(&json!(false)), "{tool:?}");
            // Valid JSON Schema 2020-12 (MCP's dialect for inputSchema), against its meta-schema.
            let as_value = Value::Object(schema.clone());
            if let Err(error) = jsonschema::draft202012::meta::validate(&as_value) {
                panic!("{tool:?}'s input schema is not valid JSON Schema 2020-12: {error}");
            }
        }
        let navigate = input_schema(ToolId::Navigate);
        assert_eq!(navigate["required"], json!(["url"]));
        assert!(navigate["properties"]["keepAlive"].is_object(), "{navigate:?}");
        let fill = input_schema(ToolId::Fill);
        assert_eq!(fill["properties"]["value"]["type"], json!("string"));
        let revoke = input_schema(ToolId::ProfileRevoke);
        assert_eq!(revoke["required"], json!(["grantId"]));
        let tabs = serde_json::Value::Object(input_schema(ToolId::Tabs)).to_string();
        assert!(tabs.contains("\"open\"") && tabs.contains("\"close\""), "{tabs}");
    }
}
