//! The tools that act on a page, one method each: navigate, evaluate, get_dom, screenshot,
//! click, fill, tabs, list_requests, get_request_body, cdp_send, download.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use chromiumoxide::Page;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::cdp_send::{RawCommand, allowed};
use super::input::{self, Tabs};
use super::{Target, ToolHost};
use crate::spec::{AgentCaller, Capability, ToolError, ToolErrorCode, ToolId};

/// How many responses a target's log keeps (the oldest drop first).
const REQUEST_LOG: usize = 500;

/// How long a navigation may take.
const NAVIGATION: Duration = Duration::from_secs(30);

/// How long browser-level input may take to be taken.
const INPUT: Duration = Duration::from_secs(30);

/// The largest download `browser.download` takes, bytes (review N18: a page cannot fill the
/// disk through it).
const MAX_DOWNLOAD_BYTES: f64 = 100.0 * 1024.0 * 1024.0;

/// How long a download may take.
const DOWNLOAD: Duration = Duration::from_secs(60);

/// The script's start that finds the element of the selector `quoted` (a JSON string) as `e`:
/// `'bad-selector'` when it does not parse (the page's `SyntaxError` is no internal error of
/// ours), `'missing'` when nothing matches.
fn find(quoted: &str) -> String {
    format!(
        "let e; try {{ e = document.querySelector({quoted}); }} catch (_) {{ return 'bad-selector'; }} if (!e) return 'missing'; "
    )
}

/// A selector the page cannot parse: the caller's to fix.
fn bad_selector() -> ToolError {
    ToolError::new(
        ToolErrorCode::InputInvalid,
        "selector: not a CSS selector the page can match (a syntax error)",
    )
}

impl ToolHost {
    /// Runs a page-level act in the page-model world of the tab's main frame, out of the page
    /// scripts' reach ([`ToolHost::in_world`]): `script` answers `'done'`, `'missing'` when the
    /// selector matches nothing, or `'reserved'` when the in-page guard finds the document is
    /// the person's.
    async fn acted(
        &self,
        page: &Page,
        script: &str,
        tool: ToolId,
        target: &str,
        selector: &str,
    ) -> Result<(), ToolError> {
        match self.in_world(page, target, script).await?.as_str() {
            Some("done") => Ok(()),
            Some("reserved") => Err(super::persons::refusal(tool, target, super::persons::PERSONS_FORM)),
            Some("bad-selector") => Err(bad_selector()),
            _ => Err(not_found(selector)),
        }
    }

    /// A new target opens in the context of the grant covering the URL (or the bare one, M5);
    /// an open target stays in the context it was opened in, and is not sent to a site whose
    /// jar is another ([`ToolHost::same_jar`]).
    pub(super) async fn navigate(&self, caller: &AgentCaller, input: input::Navigate) -> Result<Value, ToolError> {
        self.may_go(&input.url)?;
        let boot_id = self.ready().await?;
        let (target, page) = match input.target {
            Some(target) => {
                let page = self.target(Some(caller), &target).await?;
                self.same_jar(caller, &target, &input.url).await?;
                (target, page)
            }
            None => {
                self.open_target(caller, boot_id, input.keep_alive, Some(&input.url))
                    .await?
            }
        };
        tokio::time::timeout(NAVIGATION, go(&page, &input.url))
            .await
            .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the page did not load in 30 s"))??;
        let landed = page.url().await.map_err(|e| cdp(&e))?.unwrap_or_default();
        Ok(json!({ "target": target, "url": landed }))
    }

    pub(super) async fn evaluate(&self, caller: &AgentCaller, input: input::Evaluate) -> Result<Value, ToolError> {
        let page = self.drivable(caller, ToolId::Evaluate, &input.target).await?;
        let result = page.evaluate(input.expression).await.map_err(|e| cdp(&e))?;
        Ok(json!({ "target": input.target, "value": result.value().cloned().unwrap_or(Value::Null) }))
    }

    /// Why `selector` found nothing in `target`'s page: it does not parse (`input_invalid`, the
    /// caller's to fix), or nothing matches (`not_found`). Asked only once the lookup failed.
    async fn no_match(&self, page: &Page, target: &str, selector: &str) -> ToolError {
        let Ok(quoted) = literal(selector) else {
            return not_found(selector);
        };
        let check = format!("(() => {{ {}return 'found'; }})()", find(&quoted));
        match self.in_world(page, target, &check).await {
            Ok(answer) if answer.as_str() == Some("bad-selector") => bad_selector(),
            _ => not_found(selector),
        }
    }

    pub(super) async fn get_dom(&self, caller: &AgentCaller, input: input::GetDom) -> Result<Value, ToolError> {
        let page = self.target(Some(caller), &input.target).await?;
        let html = match &input.selector {
            Some(selector) => match page.find_element(selector.as_str()).await {
                Ok(element) => element.outer_html().await.map_err(|e| cdp(&e))?.unwrap_or_default(),
                Err(_) => return Err(self.no_match(&page, &input.target, selector).await),
            },
            None => page.content().await.map_err(|e| cdp(&e))?,
        };
        Ok(json!({ "target": input.target, "html": html }))
    }

    /// The viewport, the full page (gate `fullPageScreenshot`) or one element (`ref`), as PNG or
    /// JPEG.
    pub(super) async fn screenshot(&self, caller: &AgentCaller, input: input::Screenshot) -> Result<Value, ToolError> {
        if input.full_page {
            self.option_gate(ToolId::Screenshot, Capability::FullPageScreenshot)?;
        }
        if input.full_page && input.element_ref.is_some() {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                "one of fullPage and ref: the whole page or one element",
            ));
        }
        let page = self.target(Some(caller), &input.target).await?;
        let format = input.format;
        let data = match &input.element_ref {
            Some(element_ref) => {
                let clip = self.clip_of(&page, &input.target, element_ref).await?;
                // Beyond the viewport only where full-page screenshots are declared (T3's gate
                // holds for a tall element too).
                let beyond = self.manifest.browser.capabilities.has(Capability::FullPageScreenshot);
                let mut params = json!({ "format": format.as_str(), "clip": clip, "captureBeyondViewport": beyond });
                if format == input::ImageFormat::Jpeg {
                    params["quality"] = json!(input.quality.unwrap_or(80).min(100));
                }
                super::page_model::raw(&page, "Page.captureScreenshot", params).await?["data"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            }
            None => {
                use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
                let mut params = chromiumoxide::page::ScreenshotParams::builder().full_page(input.full_page);
                if format == input::ImageFormat::Jpeg {
                    params = params
                        .format(CaptureScreenshotFormat::Jpeg)
                        .quality(i64::from(input.quality.unwrap_or(80).min(100)));
                }
                let image = page.screenshot(params.build()).await.map_err(|e| cdp(&e))?;
                base64::engine::general_purpose::STANDARD.encode(image)
            }
        };
        // Each 4 characters of base64 carry 3 bytes.
        let bytes = (data.len() / 4 * 3).saturating_sub(data.bytes().rev().take_while(|b| *b == b'=').count());
        Ok(json!({ "target": input.target, "format": format.as_str(), "bytes": bytes, "data": data }))
    }

    /// A page-level click (the element's `click()`, an untrusted event), or with `trusted` a
    /// browser-level one (CDP `Input`, as a person's mouse: gate `trustedInput`). The element is
    /// a CSS selector or a snapshot's ref ([`super::page_model`]).
    pub(super) async fn click(&self, caller: &AgentCaller, input: input::Click) -> Result<Value, ToolError> {
        if input.trusted {
            self.option_gate(ToolId::Click, Capability::TrustedInput)?;
        }
        let locate = input::Locate::of(input.selector.as_deref(), input.element_ref.as_deref())?;
        let page = self.drivable(caller, ToolId::Click, &input.target).await?;
        let selector = match locate {
            input::Locate::Ref(element_ref) => {
                self.click_ref(&page, &input.target, element_ref, input.trusted).await?;
                let clicked = json!({ "target": input.target, "clicked": element_ref, "trusted": input.trusted });
                return Ok(self.with_dialog(&input.target, clicked).await);
            }
            input::Locate::Selector(selector) => selector,
        };
        let guard = self.persons_form_guard()?;
        let find = find(&literal(selector)?);
        if input.trusted {
            // The person's forms are refused in the document as it is before the browser-level
            // click; if the page moves before the click lands, the request guard refuses what
            // the click would send (AIP-7).
            let check = format!("(() => {{ {find}{guard}return 'done'; }})()");
            self.acted(&page, &check, ToolId::Click, &input.target, selector)
                .await?;
            // Browser-level input reaches a visible tab only: one in the background would
            // wait for a frame that never comes.
            page.bring_to_front().await.map_err(|e| cdp(&e))?;
            let element = page.find_element(selector).await.map_err(|_| not_found(selector))?;
            tokio::time::timeout(INPUT, element.click())
                .await
                .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the click was not taken in 30 s"))?
                .map_err(|e| cdp(&e))?;
        } else {
            // The check runs in the same script as the click, in whatever document that is.
            let script = format!("(() => {{ {find}{guard}e.click(); return 'done'; }})()");
            // A click that opens a dialog returns when it opens.
            let clicked = self.acted(&page, &script, ToolId::Click, &input.target, selector);
            if let Some(clicked) = self.or_dialog(&input.target, clicked).await? {
                clicked?;
            }
        }
        let clicked = json!({ "target": input.target, "clicked": selector, "trusted": input.trusted });
        Ok(self.with_dialog(&input.target, clicked).await)
    }

    /// Page-level input (the value set and `input`/`change` dispatched), or with `trusted`
    /// browser-level typing (gate `trustedInput`); then, with `submit`, the form submitted (or
    /// Enter pressed). Never echoes what was typed (C9).
    pub(super) async fn fill(&self, caller: &AgentCaller, input: input::Fill) -> Result<Value, ToolError> {
        if input.trusted {
            self.option_gate(ToolId::Fill, Capability::TrustedInput)?;
        }
        let locate = input::Locate::of(input.selector.as_deref(), input.element_ref.as_deref())?;
        let page = self.drivable(caller, ToolId::Fill, &input.target).await?;
        let characters = input.value.chars().count();
        let selector = match locate {
            input::Locate::Ref(element_ref) => {
                self.fill_ref(
                    &page,
                    &input.target,
                    element_ref,
                    &input.value,
                    input.trusted,
                    input.submit,
                )
                .await?;
                let filled = json!({
                    "target": input.target, "filled": element_ref, "characters": characters,
                    "trusted": input.trusted, "submitted": input.submit,
                });
                return Ok(self.with_dialog(&input.target, filled).await);
            }
            input::Locate::Selector(selector) => selector,
        };
        let guard = self.persons_form_guard()?;
        let find = find(&literal(selector)?);
        if input.trusted {
            // As for a trusted click: checked in the document first, the request guard behind.
            let check = format!("(() => {{ {find}{guard}return 'done'; }})()");
            self.acted(&page, &check, ToolId::Fill, &input.target, selector).await?;
            page.bring_to_front().await.map_err(|e| cdp(&e))?;
            let element = page.find_element(selector).await.map_err(|_| not_found(selector))?;
            let typed = async { element.click().await?.type_str(input.value.as_str()).await.map(|_| ()) };
            tokio::time::timeout(INPUT, typed)
                .await
                .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the typing was not taken in 30 s"))?
                .map_err(|e| cdp(&e))?;
            if input.submit {
                element.press_key("Enter").await.map_err(|e| cdp(&e))?;
            }
        } else {
            // The value travels inside the script as a JSON string literal; an error is cut
            // before any quote (`cdp`), so it never comes back.
            let script = zeroize::Zeroizing::new(format!(
                "(() => {{ {find}{guard}e.focus(); \
                 const set = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(e), 'value'); \
                 if (set && set.set) {{ set.set.call(e, {value}); }} else {{ e.value = {value}; }} \
                 e.dispatchEvent(new Event('input', {{ bubbles: true }})); \
                 e.dispatchEvent(new Event('change', {{ bubbles: true }})); {submit}return 'done'; }})()",
                value = literal(input.value.as_str())?,
                submit = if input.submit {
                    "if (e.form) { if (e.form.requestSubmit) e.form.requestSubmit(); else e.form.submit(); } "
                } else {
                    ""
                }
            ));
            self.acted(&page, script.as_str(), ToolId::Fill, &input.target, selector)
                .await?;
        }
        Ok(json!({
            "target": input.target, "filled": selector, "characters": characters, "trusted": input.trusted,
            "submitted": input.submit,
        }))
    }

    /// `browser.tabs`: `list`, `open` (optionally `keepAlive`, `url`), `close`.
    pub(super) async fn tabs(&self, caller: &AgentCaller, input: Tabs) -> Result<Value, ToolError> {
        let boot_id = self.ready().await?;
        match input {
            Tabs::List => {
                let targets = self.targets.lock().await;
                let mut list: Vec<Value> = targets
                    .iter()
                    .filter(|(_, t)| t.boot_id == boot_id && t.owner.as_deref() == caller.device_id())
                    .map(|(id, t)| json!({ "target": id, "keepAlive": t.keep_alive }))
                    .collect();
                list.sort_by(|a, b| a["target"].as_str().cmp(&b["target"].as_str()));
                Ok(json!({ "targets": list }))
            }
            Tabs::Open { keep_alive, url } => {
                if let Some(url) = &url {
                    self.may_go(url)?;
                }
                let (id, page) = self.open_target(caller, boot_id, keep_alive, url.as_deref()).await?;
                if let Some(url) = url {
                    tokio::time::timeout(NAVIGATION, go(&page, &url))
                        .await
                        .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the page did not load in 30 s"))??;
                }
                Ok(json!({ "target": id, "keepAlive": keep_alive }))
            }
            Tabs::Close { target } => {
                self.target(Some(caller), &target).await?;
                let closed: Option<Target> = self.targets.lock().await.remove(&target);
                if let Some(closed) = closed {
                    closed.page.close().await.map_err(|e| cdp(&e))?;
                }
                Ok(json!({ "closed": target }))
            }
        }
    }

    pub(super) async fn list_requests(&self, caller: &AgentCaller, input: input::OnTarget) -> Result<Value, ToolError> {
        self.target(Some(caller), &input.target).await?;
        let log = self.targets.lock().await.get(&input.target).map(|t| t.requests.clone());
        let requests = log
            .map(|l| l.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
            .unwrap_or_default();
        Ok(json!({ "target": input.target, "requests": requests }))
    }

    pub(super) async fn get_request_body(
        &self,
        caller: &AgentCaller,
        input: input::GetRequestBody,
    ) -> Result<Value, ToolError> {
        use chromiumoxide::cdp::browser_protocol::network::GetResponseBodyParams;
        let page = self.target(Some(caller), &input.target).await?;
        let body = match page.execute(GetResponseBodyParams::new(input.request_id.clone())).await {
            Ok(body) => body,
            // A logged response whose body has not finished loading: retryable, not
            // "no such request".
            Err(_) if self.has_logged(&input.target, &input.request_id).await => {
                return Err(ToolError::new(
                    ToolErrorCode::Timeout,
                    format!(
                        "the body of request {} has not finished loading; ask again",
                        input.request_id
                    ),
                ));
            }
            Err(_) => return Err(not_found(&input.request_id)),
        };
        Ok(json!({ "target": input.target, "body": body.result.body, "base64Encoded": body.result.base64_encoded }))
    }

    pub(super) async fn cdp_send(&self, caller: &AgentCaller, input: input::CdpSend) -> Result<Value, ToolError> {
        let page = self.drivable(caller, ToolId::CdpSend, &input.target).await?;
        if !allowed(&input.method) {
            // Cookies and storage enter or leave only through grants (C1, C9); the network,
            // navigation and the host's files only through their own tools.
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!(
                    "{} is not a method browser.cdp_send allows (it stays within the page's own \
                     document and scripts)",
                    input.method
                ),
            ));
        }
        let response = page
            .execute(RawCommand {
                method: input.method,
                params: input.params.unwrap_or_else(|| json!({})),
            })
            .await
            .map_err(|e| cdp(&e))?;
        Ok(json!({ "target": input.target, "result": response.result }))
    }

    /// `browser.download`: the page fetches `url` as a download into a host path under the
    /// state directory (0700), and the tool answers with the path and size once complete.
    pub(super) async fn download(&self, caller: &AgentCaller, input: input::Download) -> Result<Value, ToolError> {
        use chromiumoxide::cdp::browser_protocol::browser::DownloadProgressState;
        let page = self.drivable(caller, ToolId::Download, &input.target).await?;
        let _one_at_a_time = tokio::time::timeout(DOWNLOAD, self.downloads.lock())
            .await
            .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "another download held the browser for 60 s"))?;
        // A relative link is the page's: judged where it resolves.
        let here = page.url().await.map_err(|e| cdp(&e))?.unwrap_or_default();
        let absolute = url::Url::parse(&here)
            .and_then(|base| base.join(&input.url))
            .map_or_else(|_| input.url.clone(), String::from);
        self.may_go(&absolute)?;
        let browser = self.browser().await?;
        let dir = download_dir(&self.config.state_dir, self.instance.as_str())
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("the download directory: {e}")))?;
        let internal = |e: crate::chromium::BrowserError| ToolError::new(ToolErrorCode::Internal, e.to_string());
        let context = self
            .targets
            .lock()
            .await
            .get(&input.target)
            .and_then(|t| t.context.clone());
        let frame = page
            .mainframe()
            .await
            .map_err(|e| cdp(&e))?
            .ok_or_else(|| ToolError::new(ToolErrorCode::Internal, "the tab has no main frame"))?;
        let mut starts = browser.download_starts().await.map_err(internal)?;
        let mut events = browser.download_events().await.map_err(internal)?;
        browser
            .allow_downloads(&dir, context.as_ref())
            .await
            .map_err(internal)?;
        let script = format!(
            "(() => {{ const a = document.createElement('a'); a.href = {}; a.download = ''; \
             document.body.appendChild(a); a.click(); return true; }})()",
            literal(&input.url)?
        );
        // The progress events are the whole browser's: only the download this tab's main frame
        // begins is this call's (review N18), and it may not grow past MAX_DOWNLOAD_BYTES.
        let followed = async {
            page.evaluate(script).await.map_err(|e| cdp(&e))?;
            let guid = loop {
                match starts.next().await {
                    Some(start) if start.frame_id == frame => break start.guid.clone(),
                    Some(_) => {}
                    None => return Err(ToolError::new(ToolErrorCode::Internal, "the browser closed")),
                }
            };
            while let Some(event) = events.next().await {
                if event.guid != guid {
                    continue;
                }
                if event.received_bytes > MAX_DOWNLOAD_BYTES || event.total_bytes > MAX_DOWNLOAD_BYTES {
                    let _ = browser.cancel_download(&guid, context.as_ref()).await;
                    return Err(ToolError::new(
                        ToolErrorCode::PermissionDenied,
                        format!("the download is larger than {MAX_DOWNLOAD_BYTES} bytes; it was canceled"),
                    ));
                }
                match event.state {
                    DownloadProgressState::Completed => {
                        return Ok((guid, event.file_path.clone(), event.received_bytes));
                    }
                    DownloadProgressState::Canceled => {
                        return Err(ToolError::new(ToolErrorCode::Internal, "the download was canceled"));
                    }
                    DownloadProgressState::InProgress => {}
                }
            }
            Err(ToolError::new(ToolErrorCode::Internal, "the browser closed"))
        };
        let outcome = tokio::time::timeout(DOWNLOAD, followed).await;
        // Pages of the context download nothing more by themselves.
        let denied = browser.deny_downloads(context.as_ref()).await.map_err(internal);
        let (guid, file_path, bytes) =
            outcome.map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the download did not finish in 60 s"))??;
        denied?;
        let path = file_path.map_or_else(|| dir.join(&guid), std::path::PathBuf::from);
        Ok(json!({ "target": input.target, "path": path.display().to_string(), "bytes": bytes }))
    }

    /// The navigation rule (H3), before a tab is sent anywhere: a refusal is
    /// `permission_denied` naming the scheme or host, never the rest of the URL.
    pub(super) fn may_go(&self, url: &str) -> Result<(), ToolError> {
        self.config.navigation.navigation(url).map_err(|refused| {
            ToolError::new(ToolErrorCode::PermissionDenied, refused.to_string())
                .with_cause(json!({ "rule": "navigation" }))
        })
    }

    /// Whether `target`'s request log has a response for `request_id`.
    async fn has_logged(&self, target: &str, request_id: &str) -> bool {
        let Some(requests) = self.targets.lock().await.get(target).map(|t| t.requests.clone()) else {
            return false;
        };
        let log = requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.iter().any(|entry| entry["requestId"] == request_id)
    }
}

/// Starts logging `page`'s responses (the last [`REQUEST_LOG`]) for `browser.list_requests`.
pub(super) async fn log_responses(page: &Page) -> Result<Arc<std::sync::Mutex<Vec<Value>>>, ToolError> {
    use chromiumoxide::cdp::browser_protocol::network::EventResponseReceived;
    let requests: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
    let mut responses = page
        .event_listener::<EventResponseReceived>()
        .await
        .map_err(|e| cdp(&e))?;
    let log = requests.clone();
    tokio::spawn(async move {
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
    Ok(requests)
}

/// `text` as a JavaScript string literal (JSON).
pub(super) fn literal(text: &str) -> Result<String, ToolError> {
    serde_json::to_string(text).map_err(|_| ToolError::new(ToolErrorCode::InputInvalid, "not text"))
}

pub(super) fn not_found(what: &str) -> ToolError {
    ToolError::new(ToolErrorCode::NotFound, format!("nothing matches {what}"))
}

/// Sends `page` to `url` and returns once its main document has loaded, or with why not.
///
/// chromiumoxide's `goto` also waits for every subframe's own load event, and a frame Chromium
/// refuses to load (a `file:` or `chrome:` iframe on a web page) never sends one: a hostile page
/// would hold every navigation to it for the full timeout. So the main frame committing a
/// document and firing `load` (which waits for the frames of its DOM, refused ones included)
/// ends the wait too. A navigation that commits an error page is left to `goto`, which says why.
pub(super) async fn go(page: &Page, url: &str) -> Result<(), ToolError> {
    use chromiumoxide::cdp::browser_protocol::page::{EventFrameNavigated, EventLoadEventFired};
    let mut committed = page
        .event_listener::<EventFrameNavigated>()
        .await
        .map_err(|e| cdp(&e))?;
    let mut loaded = page
        .event_listener::<EventLoadEventFired>()
        .await
        .map_err(|e| cdp(&e))?;
    let main_document_loaded = async {
        loop {
            let event = committed.next().await?;
            if event.frame.parent_id.is_none() {
                if event.frame.url.starts_with("chrome-error:") {
                    return None;
                }
                break;
            }
        }
        loaded.next().await
    };
    tokio::select! {
        navigated = page.goto(url) => navigated.map(|_| ()).map_err(|e| navigation_failed(&e)),
        Some(_) = main_document_loaded => Ok(()),
    }
}

/// A navigation that failed: refused by the browser's request guard (a redirect to somewhere
/// the rule refuses, H3) or by Chromium's own rule against a web page's redirect to `file:`
/// (which comes first for that one) is `permission_denied`; anything else internal.
fn navigation_failed(error: &chromiumoxide::error::CdpError) -> ToolError {
    let said = error.to_string();
    if said.contains("ERR_BLOCKED_BY_CLIENT") || said.contains("ERR_UNSAFE_REDIRECT") {
        return ToolError::new(
            ToolErrorCode::PermissionDenied,
            "the agent's browser refused a request of this navigation: it loads only https: pages \
             on public hosts and the origins an operator named",
        )
        .with_cause(json!({ "rule": "navigation" }));
    }
    cdp(error)
}

pub(super) fn cdp(error: &chromiumoxide::error::CdpError) -> ToolError {
    // CDP's text may quote what a page or a command held (C9): only its head crosses.
    ToolError::new(
        ToolErrorCode::Internal,
        format!("the browser failed: {}", crate::chromium::scrub(&error.to_string())),
    )
}

/// `STATE/downloads/INSTANCE`, 0700, where the browser writes: as root, its sandboxed user's
/// (through a `downloads/` it may pass through), since Chromium writes the files itself.
fn download_dir(state_dir: &std::path::Path, instance: &str) -> std::io::Result<std::path::PathBuf> {
    let downloads = crate::store::private_dir(&state_dir.join("downloads"))?;
    let dir = crate::store::private_dir(&downloads.join(instance))?;
    if let Some(user) = crate::chromium::BrowserUser::recorded(state_dir).map_err(std::io::Error::other)? {
        user.pass_through(&downloads)?;
        user.own(&dir)?;
    }
    Ok(dir)
}
