//! AIP-63 §2, the tool surface: the reserved tool ids with their gates and levels (T1), the
//! resolver that only considers providers declaring a needed capability (T2), and a host that
//! serves the tools of one Chromium instance with AIP-14 results, answering `browser:unsupported`
//! naming the capability for a tool it does not list or whose gate is closed (T3), and the
//! lifecycle's errors (T4, L3, L10, L12).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use chromiumoxide::Page;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::chromium::{BrowserHost, ChromiumConfig, LaunchError};
use crate::consent::{Caller, ConsentHost, Forgotten, LiveInstances, Scope};
use crate::spec::{BrowserManifest, ToolError, ToolErrorCode, ToolResult, tool_spec};

/// A target (tab) handle: which boot of the instance issued it, and what it has fetched.
#[derive(Clone)]
struct Target {
    boot_id: u64,
    page: Page,
    keep_alive: bool,
    requests: Arc<std::sync::Mutex<Vec<Value>>>,
}

/// How many requests a target's log keeps (the oldest drop first).
const REQUEST_LOG: usize = 500;

/// Serves the tools of one Chromium instance, as its manifest declares them.
pub struct ToolHost {
    manifest: BrowserManifest,
    host: BrowserHost,
    config: ChromiumConfig,
    instance: String,
    targets: Mutex<HashMap<String, Target>>,
    next_target: std::sync::atomic::AtomicU64,
    consent: Arc<ConsentHost>,
    /// The boot whose instance has had its granted material injected.
    injected_boot: Mutex<Option<u64>>,
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
        instance: &str,
        consent: Arc<ConsentHost>,
    ) -> Arc<Self> {
        Arc::new(Self {
            manifest,
            host,
            config,
            instance: instance.to_owned(),
            targets: Mutex::default(),
            next_target: std::sync::atomic::AtomicU64::new(1),
            consent,
            injected_boot: Mutex::default(),
        })
    }

    /// The consent host the tools answer to.
    pub fn consent(&self) -> &Arc<ConsentHost> {
        &self.consent
    }

    /// The provider's manifest.
    pub fn manifest(&self) -> &BrowserManifest {
        &self.manifest
    }

    /// Launches (or returns) the instance: idempotent (L2). A fresh boot gets the material of
    /// the grants in force for this host's browsers, through the consent host (C1).
    pub async fn launch(&self) -> Result<(), ToolError> {
        let browser = self
            .host
            .launch(&self.config, &self.instance, &|_| {})
            .await
            .map_err(|e| match e {
                LaunchError::Refused(error) => error,
                other => ToolError::new(ToolErrorCode::Internal, format!("the browser did not start: {other}")),
            })?;
        let boot_id = self.host.health(&self.instance).boot_id;
        let mut injected = self.injected_boot.lock().await;
        // Only a provider declaring cookies or storageState takes session material (C1; M6).
        let takes_material = self.manifest.browser.capabilities.has("cookies|storageState");
        if takes_material && *injected != Some(boot_id) {
            self.consent.expire(self).await.map_err(|e| e.to_tool_error())?;
            let injections = self
                .consent
                .local_injections(&Caller::local_agent())
                .map_err(|e| e.to_tool_error())?;
            for injection in &injections {
                browser
                    .inject(injection)
                    .await
                    .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
            }
            *injected = Some(boot_id);
        }
        Ok(())
    }

    /// Calls `tool` with `input` as the local agent would: an AIP-14 result, never a panic or an
    /// opaque transport error.
    pub async fn call(&self, tool: &str, input: &Value) -> ToolResult {
        self.call_as(&Caller::local_agent(), tool, input).await
    }

    /// Calls `tool` as `caller` (an agent on a paired device sees only the grants scoped to it
    /// or to no device, C12).
    /// Granted cookie and storage values are redacted from every result (C9).
    pub async fn call_as(&self, caller: &Caller, tool: &str, input: &Value) -> ToolResult {
        match self.dispatch(caller, tool, input).await {
            Ok(mut value) => match self.consent.redact(&mut value) {
                Ok(_) => ToolResult::Ok(value),
                // A result that cannot be checked does not leave.
                Err(e) => ToolResult::Err(ToolError::new(
                    ToolErrorCode::Internal,
                    format!("the result could not be checked for granted values: {e}"),
                )),
            },
            Err(mut error) => {
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
                ToolResult::Err(error)
            }
        }
    }

    async fn dispatch(&self, caller: &Caller, tool: &str, input: &Value) -> Result<Value, ToolError> {
        // T3: a tool the manifest does not list, or whose gate is closed, is unsupported by name.
        let spec = tool_spec(tool);
        let listed = self.manifest.implements.iter().any(|i| i.tool == tool);
        let gate = spec.and_then(|s| s.gate);
        if !listed || gate.is_some_and(|g| !self.manifest.browser.capabilities.has(g)) {
            return Err(ToolError::unsupported(tool, gate.unwrap_or(tool)));
        }
        match tool {
            "browser.navigate" => self.navigate(input).await,
            "browser.evaluate" => {
                let (target, page) = self.target(input).await?;
                let expression = text(input, "expression")?;
                let result = page.evaluate(expression).await.map_err(|e| cdp(&e))?;
                Ok(json!({ "target": target, "value": result.value().cloned().unwrap_or(Value::Null) }))
            }
            "browser.get_dom" => {
                let (target, page) = self.target(input).await?;
                let html = match input.get("selector").and_then(Value::as_str) {
                    Some(selector) => page
                        .find_element(selector)
                        .await
                        .map_err(|_| not_found(selector))?
                        .outer_html()
                        .await
                        .map_err(|e| cdp(&e))?
                        .unwrap_or_default(),
                    None => page.content().await.map_err(|e| cdp(&e))?,
                };
                Ok(json!({ "target": target, "html": html }))
            }
            "browser.screenshot" => {
                let full_page = input.get("fullPage").and_then(Value::as_bool).unwrap_or(false);
                if full_page && !self.manifest.browser.capabilities.full_page_screenshot {
                    return Err(ToolError::unsupported(tool, "fullPageScreenshot"));
                }
                let (target, page) = self.target(input).await?;
                let params = chromiumoxide::page::ScreenshotParams::builder()
                    .full_page(full_page)
                    .build();
                let png = page.screenshot(params).await.map_err(|e| cdp(&e))?;
                Ok(
                    json!({ "target": target, "format": "png", "bytes": png.len(), "data": base64::engine::general_purpose::STANDARD.encode(png) }),
                )
            }
            "browser.click" => {
                let (target, page) = self.target(input).await?;
                let selector = text(input, "selector")?;
                let element = page.find_element(selector).await.map_err(|_| not_found(selector))?;
                element.click().await.map_err(|e| cdp(&e))?;
                Ok(json!({ "target": target, "clicked": selector }))
            }
            "browser.fill" => {
                let (target, page) = self.target(input).await?;
                let selector = text(input, "selector")?;
                let value = text(input, "value")?;
                let element = page.find_element(selector).await.map_err(|_| not_found(selector))?;
                element
                    .click()
                    .await
                    .map_err(|e| cdp(&e))?
                    .type_str(value)
                    .await
                    .map_err(|e| cdp(&e))?;
                // Never echo what was typed: it may be a secret (C9).
                Ok(json!({ "target": target, "filled": selector, "characters": value.chars().count() }))
            }
            "browser.tabs" => self.tabs(input).await,
            "browser.list_requests" => {
                let (target, _) = self.target(input).await?;
                let log = self.targets.lock().await.get(&target).map(|t| t.requests.clone());
                let requests = log
                    .map(|l| l.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
                    .unwrap_or_default();
                Ok(json!({ "target": target, "requests": requests }))
            }
            "browser.get_request_body" => {
                let (target, page) = self.target(input).await?;
                let request_id = text(input, "requestId")?;
                let params =
                    chromiumoxide::cdp::browser_protocol::network::GetResponseBodyParams::new(request_id.to_owned());
                let body = match page.execute(params).await {
                    Ok(body) => body,
                    // A logged response whose body has not finished loading: retryable, not
                    // "no such request".
                    Err(_) if self.has_logged(&target, request_id).await => {
                        return Err(ToolError::new(
                            ToolErrorCode::Timeout,
                            format!("the body of request {request_id} has not finished loading; ask again"),
                        ));
                    }
                    Err(_) => return Err(not_found(request_id)),
                };
                Ok(json!({ "target": target, "body": body.result.body, "base64Encoded": body.result.base64_encoded }))
            }
            "browser.cdp_send" => {
                let (target, page) = self.target(input).await?;
                let method = text(input, "method")?;
                if touches_session_material(method) {
                    // Cookies and storage enter or leave only through grants (C1, C9).
                    return Err(ToolError::new(
                        ToolErrorCode::InputInvalid,
                        format!("{method} reads or writes session material, which moves only through grants"),
                    ));
                }
                let params = input.get("params").cloned().unwrap_or_else(|| json!({}));
                let response = page
                    .execute(RawCommand {
                        method: method.to_owned(),
                        params,
                    })
                    .await
                    .map_err(|e| cdp(&e))?;
                Ok(json!({ "target": target, "result": response.result }))
            }
            "browser.download" => self.download(input).await,
            "browser.profile.list" | "browser.profile.refresh" | "browser.profile.revoke" => {
                crate::consent::profile_tool(&self.consent, caller, tool, input, self).await
            }
            other => Err(ToolError::unsupported(other, gate.unwrap_or(other))),
        }
    }

    /// `browser.download`: the page fetches `url` as a download into a host path under the
    /// state directory (0700), and the tool answers with the path and size once complete.
    async fn download(&self, input: &Value) -> Result<Value, ToolError> {
        use chromiumoxide::cdp::browser_protocol::browser::DownloadProgressState;
        use futures_util::StreamExt as _;
        let (target, page) = self.target(input).await?;
        let url = text(input, "url")?;
        let browser = self.host.attach(&self.instance).await.ok_or_else(|| {
            ToolError::new(ToolErrorCode::NotReady, "the browser is not running")
                .with_cause(json!({ "state": "stopped" }))
        })?;
        let dir = crate::store::private_dir(&self.config.state_dir.join("downloads").join(&self.instance))
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("the download directory: {e}")))?;
        browser
            .allow_downloads(&dir)
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
        let mut events = browser
            .download_events()
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
        let script = format!(
            "(() => {{ const a = document.createElement('a'); a.href = {}; a.download = ''; document.body.appendChild(a); a.click(); return true; }})()",
            serde_json::to_string(url).map_err(|_| ToolError::new(ToolErrorCode::InputInvalid, "url"))?
        );
        page.evaluate(script).await.map_err(|e| cdp(&e))?;
        let done = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(event) = events.next().await {
                match event.state {
                    DownloadProgressState::Completed => {
                        return Ok((event.guid.clone(), event.file_path.clone(), event.received_bytes));
                    }
                    DownloadProgressState::Canceled => {
                        return Err(ToolError::new(ToolErrorCode::Internal, "the download was canceled"));
                    }
                    DownloadProgressState::InProgress => {}
                }
            }
            Err(ToolError::new(ToolErrorCode::Internal, "the browser closed"))
        })
        .await
        .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the download did not finish in 60 s"))??;
        let (guid, file_path, bytes) = done;
        let path = file_path.map_or_else(|| dir.join(&guid), std::path::PathBuf::from);
        Ok(json!({ "target": target, "path": path.display().to_string(), "bytes": bytes }))
    }

    /// Waits for the instance to be usable (L3, L10).
    async fn ready(&self) -> Result<u64, ToolError> {
        let health = self.host.health(&self.instance);
        if !health.state.is_usable() {
            return Err(ToolError::new(
                ToolErrorCode::NotReady,
                format!("the browser is {}, not ready", health.state),
            )
            .with_cause(json!({ "state": health.state })));
        }
        Ok(health.boot_id)
    }

    async fn navigate(&self, input: &Value) -> Result<Value, ToolError> {
        let url = text(input, "url")?;
        let boot_id = self.ready().await?;
        let (target, page) = match input.get("target").and_then(Value::as_str) {
            Some(_) => self.target(input).await?,
            None => {
                self.open_target(
                    boot_id,
                    input.get("keepAlive").and_then(Value::as_bool).unwrap_or(false),
                )
                .await?
            }
        };
        tokio::time::timeout(Duration::from_secs(30), page.goto(url))
            .await
            .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the page did not load in 30 s"))?
            .map_err(|e| cdp(&e))?;
        let landed = page.url().await.map_err(|e| cdp(&e))?.unwrap_or_default();
        Ok(json!({ "target": target, "url": landed }))
    }

    /// Opens a new target (tab) and starts its request log. A second open target needs
    /// `multiTarget`.
    async fn open_target(&self, boot_id: u64, keep_alive: bool) -> Result<(String, Page), ToolError> {
        let open = self
            .targets
            .lock()
            .await
            .values()
            .filter(|t| t.boot_id == boot_id)
            .count();
        if open >= 1 && !self.manifest.browser.capabilities.multi_target {
            return Err(ToolError::unsupported("browser.tabs", "multiTarget"));
        }
        let browser = self.host.attach(&self.instance).await.ok_or_else(|| {
            ToolError::new(ToolErrorCode::NotReady, "the browser is not running")
                .with_cause(json!({ "state": "stopped" }))
        })?;
        let page = browser
            .new_page()
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))?;
        let requests: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        let mut responses = page
            .event_listener::<chromiumoxide::cdp::browser_protocol::network::EventResponseReceived>()
            .await
            .map_err(|e| cdp(&e))?;
        let log = requests.clone();
        tokio::spawn(async move {
            use futures_util::StreamExt as _;
            while let Some(event) = responses.next().await {
                let entry = json!({
                    "requestId": event.request_id.inner(),
                    "url": event.response.url,
                    "status": event.response.status,
                    "mimeType": event.response.mime_type,
                    "type": format!("{:?}", event.r#type),
                });
                let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if log.len() >= REQUEST_LOG {
                    log.remove(0);
                }
                log.push(entry);
            }
        });
        let id = format!(
            "t{boot_id}-{}",
            self.next_target.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        self.targets.lock().await.insert(
            id.clone(),
            Target {
                boot_id,
                page: page.clone(),
                keep_alive,
                requests,
            },
        );
        Ok((id, page))
    }

    /// `browser.tabs`: `list`, `open` (optionally `keepAlive`, `url`), `close`.
    async fn tabs(&self, input: &Value) -> Result<Value, ToolError> {
        let boot_id = self.ready().await?;
        match input.get("action").and_then(Value::as_str).unwrap_or("list") {
            "list" => {
                let targets = self.targets.lock().await;
                let mut list: Vec<Value> = targets
                    .iter()
                    .filter(|(_, t)| t.boot_id == boot_id)
                    .map(|(id, t)| json!({ "target": id, "keepAlive": t.keep_alive }))
                    .collect();
                list.sort_by(|a, b| a["target"].as_str().cmp(&b["target"].as_str()));
                Ok(json!({ "targets": list }))
            }
            "open" => {
                let keep_alive = input.get("keepAlive").and_then(Value::as_bool).unwrap_or(false);
                let (id, page) = self.open_target(boot_id, keep_alive).await?;
                if let Some(url) = input.get("url").and_then(Value::as_str) {
                    page.goto(url).await.map_err(|e| cdp(&e))?;
                }
                Ok(json!({ "target": id, "keepAlive": keep_alive }))
            }
            "close" => {
                let (id, _) = self.target(input).await?;
                if let Some(target) = self.targets.lock().await.remove(&id) {
                    target.page.close().await.map_err(|e| cdp(&e))?;
                }
                Ok(json!({ "closed": id }))
            }
            other => Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!("unknown tabs action {other}"),
            )),
        }
    }

    /// The target named in `input`: unknown -> `not_found`; issued by a previous boot ->
    /// `browser:target_gone`, never rebound (L12).
    async fn target(&self, input: &Value) -> Result<(String, Page), ToolError> {
        let id = text(input, "target")?;
        let boot_id = self.ready().await?;
        let target = self
            .targets
            .lock()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(id))?;
        if target.boot_id != boot_id {
            return Err(ToolError::new(
                ToolErrorCode::TargetGone,
                format!("target {id} belonged to a previous run of the browser"),
            )
            .with_cause(json!({ "target": id })));
        }
        Ok((id.to_owned(), target.page))
    }

    /// Whether `target`'s request log has a response for `request_id`.
    async fn has_logged(&self, target: &str, request_id: &str) -> bool {
        let Some(requests) = self.targets.lock().await.get(target).map(|t| t.requests.clone()) else {
            return false;
        };
        let log = requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.iter().any(|entry| entry["requestId"] == request_id)
    }

    /// Whether `target` was opened with `keepAlive` (L11).
    pub async fn is_kept_alive(&self, target: &str) -> bool {
        self.targets.lock().await.get(target).is_some_and(|t| t.keep_alive)
    }
}

/// A revoke through the tool host reaches every browser of its [`BrowserHost`], and the target
/// handles of closed tabs go with them.
#[async_trait::async_trait]
impl LiveInstances for ToolHost {
    async fn forget(&self, scope: Scope<'_>, origins: &[String]) -> Result<Forgotten, String> {
        let mut closing = Vec::new();
        for (id, target) in self.targets.lock().await.iter() {
            let url = target.page.url().await.ok().flatten().unwrap_or_default();
            let host = url::Url::parse(&url).ok().and_then(|u| u.host_str().map(str::to_owned));
            if host.is_some_and(|h| scope.covers(&h)) {
                closing.push(id.clone());
            }
        }
        let forgotten = LiveInstances::forget(&self.host, scope, origins).await?;
        let mut targets = self.targets.lock().await;
        for id in closing {
            targets.remove(&id);
        }
        Ok(forgotten)
    }

    async fn inject(&self, injection: &crate::consent::Injection) -> Result<usize, String> {
        match self.host.attach(&self.instance).await {
            Some(browser) => browser.inject(injection).await.map_err(|e| e.to_string()),
            None => Ok(0),
        }
    }
}

/// CDP methods that read or write cookies or storage: refused through `browser.cdp_send`.
fn touches_session_material(method: &str) -> bool {
    const DOMAINS: [&str; 4] = ["Storage.", "DOMStorage.", "IndexedDB.", "CacheStorage."];
    const NETWORK: [&str; 6] = [
        "Network.getCookies",
        "Network.getAllCookies",
        "Network.setCookie",
        "Network.setCookies",
        "Network.deleteCookies",
        "Network.clearBrowserCookies",
    ];
    DOMAINS.iter().any(|d| method.starts_with(d)) || NETWORK.contains(&method)
}

/// A CDP command by name, for `browser.cdp_send`: its params are sent as given, its result
/// comes back as JSON.
#[derive(Debug)]
struct RawCommand {
    method: String,
    params: Value,
}

impl serde::Serialize for RawCommand {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.params.serialize(serializer)
    }
}

impl chromiumoxide::Method for RawCommand {
    fn identifier(&self) -> chromiumoxide::types::MethodId {
        self.method.clone().into()
    }
}

impl chromiumoxide::Command for RawCommand {
    type Response = Value;
}

fn text<'a>(input: &'a Value, field: &str) -> Result<&'a str, ToolError> {
    input
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::new(ToolErrorCode::InputInvalid, format!("{field} is required")))
}

fn not_found(what: &str) -> ToolError {
    ToolError::new(ToolErrorCode::NotFound, format!("nothing matches {what}"))
}

fn cdp(error: &chromiumoxide::error::CdpError) -> ToolError {
    // CDP's text may quote what a page or a command held (C9): only its head crosses.
    ToolError::new(
        ToolErrorCode::Internal,
        format!("the browser failed: {}", crate::chromium::scrub(&error.to_string())),
    )
}
