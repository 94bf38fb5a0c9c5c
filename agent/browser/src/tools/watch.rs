//! The person's view of the agent's browser (AIP-7): every device's tabs, a live picture of each,
//! and takeover. Not tools: no tool call reaches these (the MCP hosts dispatch tools by name to
//! [`ToolHost::call_as`] only); they are for the person's own channel, the console.
//!
//! - **Live picture**: Chromium's screencast of the tab (`Page.startScreencast`, JPEG), started
//!   when someone watches and stopped when the frames' receiver goes, at most
//!   [`FRAMES_PER_SECOND`] frames a second (a frame drawn sooner waits, and a newer one replaces
//!   it); one picture per tab (a new watcher of the tab, the console's page loaded again, ends
//!   the one before) and [`WATCHERS`] tabs watched at once.
//! - **Takeover**: the person takes a device's tab; the host opens the person's own tab on the
//!   same page in the same cookie jar ([`ToolHost::persons_page`]: held by the person from before
//!   its first request, so what the person sends there is theirs), and the person's clicks and
//!   keys go to that tab. While the person has it, every tool that acts on the device's tab
//!   answers a retryable `busy: the person has this tab`; reading stays open. Handing back
//!   closes the person's tab (what the person did there, a sign-in's cookies, stays in the jar).

use std::collections::HashMap;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchKeyEventParams, DispatchKeyEventType, DispatchMouseEventParams, DispatchMouseEventType, InsertTextParams,
    MouseButton,
};
use chromiumoxide::cdp::browser_protocol::page::{
    EventScreencastFrame, ScreencastFrameAckParams, StartScreencastFormat, StartScreencastParams, StopScreencastParams,
};
use futures_util::StreamExt as _;
use serde_json::json;
use tokio::sync::mpsc;

use super::{PersonsTab, ToolHost};
use crate::spec::{ToolError, ToolErrorCode, ToolId};

/// The most frames a second a live picture sends (the rest are acknowledged and dropped).
pub const FRAMES_PER_SECOND: u32 = 10;
/// Live pictures at once, over all tabs.
pub const WATCHERS: usize = 4;
/// How long the person's list waits for a tab's title.
const TITLE_WAIT: Duration = Duration::from_millis(500);
/// How long a still picture waits before its last frame is sent again.
const REPEAT: Duration = Duration::from_secs(1);
/// The largest picture, CSS pixels (a larger viewport is scaled down to fit).
const MAX_WIDTH: i64 = 1600;
const MAX_HEIGHT: i64 = 1200;

/// A tab as the person's console lists it.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TabView {
    /// The target id the device knows it by.
    pub target: String,
    /// The device that opened it (`None`: the local agent).
    pub device_id: Option<String>,
    /// Its address.
    pub url: String,
    /// Its title.
    pub title: String,
    /// Whether the person has it (takeover).
    pub taken: bool,
}

/// One frame of a live picture.
#[derive(Debug)]
pub struct Frame {
    /// The JPEG.
    pub jpeg: Vec<u8>,
    /// When Chromium drew it (seconds since the epoch, Chromium's clock, which is the machine's).
    pub drawn_at: Option<f64>,
}

/// What the person's view keeps: the tabs the person has, and the pictures watched.
#[derive(Default)]
pub(super) struct Watch {
    /// The person's tab for each device tab the person took over, and for each page the person
    /// opened ([`ToolHost::open_for_person`], under a key `p` and a number).
    taken: HashMap<String, PersonsTab>,
    /// The live picture of each device tab watched now.
    watched: HashMap<String, Watcher>,
    /// The pages the person opened, by key: whose jar each is in (the device's).
    opened: HashMap<String, Option<String>>,
    /// The number the next picture gets.
    next: u64,
}

/// A live picture being sent: how to end it, and how to know it ended.
struct Watcher {
    id: u64,
    stop: tokio::sync::oneshot::Sender<()>,
    ended: tokio::sync::oneshot::Receiver<()>,
}

/// A tab as listed: its key, whose it is, its page.
type Listed = (String, Option<String>, Page);

/// A key the person's console may send.
const KEYS: [(&str, &str, i64); 10] = [
    ("Enter", "Enter", 13),
    ("Tab", "Tab", 9),
    ("Backspace", "Backspace", 8),
    ("Escape", "Escape", 27),
    ("ArrowUp", "ArrowUp", 38),
    ("ArrowDown", "ArrowDown", 40),
    ("ArrowLeft", "ArrowLeft", 37),
    ("ArrowRight", "ArrowRight", 39),
    ("PageUp", "PageUp", 33),
    ("PageDown", "PageDown", 34),
];

fn internal(what: &str, e: impl std::fmt::Display) -> ToolError {
    ToolError::new(ToolErrorCode::Internal, format!("{what}: {e}"))
}

impl ToolHost {
    /// Every tab of every device, and the tabs the person opened, for the person.
    pub async fn tabs_for_person(&self) -> Vec<TabView> {
        let mut listed: Vec<Listed> = self
            .targets
            .lock()
            .await
            .iter()
            .map(|(id, t)| (id.clone(), t.owner.clone(), t.page.clone()))
            .collect();
        let (taken, opened): (Vec<String>, Vec<Listed>) = {
            let watch = self.watch.lock().await;
            (
                watch.taken.keys().cloned().collect(),
                watch
                    .opened
                    .iter()
                    .filter_map(|(key, device)| {
                        let tab = watch.taken.get(key)?;
                        Some((key.clone(), device.clone(), tab.page().clone()))
                    })
                    .collect(),
            )
        };
        listed.extend(opened);
        // Each tab's title is a script in its page: a page that never yields (a device's
        // `while (true) {}`) gets [`TITLE_WAIT`], all at once, and is listed untitled.
        let mut tabs: Vec<TabView> =
            futures_util::future::join_all(listed.into_iter().map(|(target, device_id, page)| {
                let taken = taken.contains(&target);
                async move {
                    let url = page.url().await.ok().flatten().unwrap_or_default();
                    let title = tokio::time::timeout(TITLE_WAIT, page.get_title())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten()
                        .unwrap_or_default();
                    TabView {
                        taken,
                        target,
                        device_id,
                        url,
                        title,
                    }
                }
            }))
            .await;
        tabs.sort_by(|a, b| (&a.device_id, &a.target).cmp(&(&b.device_id, &b.target)));
        tabs
    }

    /// The page the person sees of `target`: the person's own tab while they have it, else the
    /// device's.
    async fn shown(&self, target: &str) -> Result<Page, ToolError> {
        if let Some(tab) = self.watch.lock().await.taken.get(target) {
            return Ok(tab.page().clone());
        }
        self.target(None, target).await
    }

    /// A live picture of `target` (the person's tab while they have it): frames as Chromium
    /// draws them, at most [`FRAMES_PER_SECOND`] a second, until the receiver is dropped or a
    /// new picture of the tab is asked for (the screencast stops then). [`WATCHERS`] tabs at once.
    pub async fn live(&self, target: &str) -> Result<mpsc::Receiver<Frame>, ToolError> {
        let page = self.shown(target).await?;
        // The picture before of this tab ends first: two screencasts of one page stop each other.
        let before = self.watch.lock().await.watched.remove(target);
        if let Some(before) = before {
            let _ = before.stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(2), before.ended).await;
        }
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let (ended_sender, ended) = tokio::sync::oneshot::channel();
        let id = {
            let mut watch = self.watch.lock().await;
            if watch.watched.len() >= WATCHERS {
                return Err(ToolError::new(
                    ToolErrorCode::RateLimited,
                    format!("{WATCHERS} tabs are watched already: close one of their pictures"),
                )
                .retryable());
            }
            watch.next += 1;
            let id = watch.next;
            watch.watched.insert(target.to_owned(), Watcher { id, stop, ended });
            id
        };
        let mut frames = match self.start_screencast(&page).await {
            Ok(frames) => frames,
            Err(error) => {
                self.watch.lock().await.watched.remove(target);
                return Err(error);
            }
        };
        let (sender, receiver) = mpsc::channel(2);
        let watch = self.watch_handle();
        let target = target.to_owned();
        tokio::spawn(async move {
            let gap = Duration::from_secs(1) / FRAMES_PER_SECOND;
            let mut last_sent = tokio::time::Instant::now() - gap;
            // The newest frame not sent yet: a frame drawn within the gap waits for its end (a
            // page that then stays still is shown as it is, not as it was), and a newer one
            // replaces it.
            let mut held: Option<Frame> = None;
            // The frame sent last, sent again after [`REPEAT`] of stillness: a browser shows a
            // part of a multipart picture only once the part after it begins.
            let mut shown: Option<Frame> = None;
            loop {
                let due = last_sent + gap;
                let event = tokio::select! {
                    () = sender.closed() => break,
                    _ = &mut stopped => break,
                    () = tokio::time::sleep_until(due), if held.is_some() => None,
                    () = tokio::time::sleep_until(last_sent + REPEAT), if held.is_none() && shown.is_some() => {
                        held = shown.take();
                        None
                    }
                    event = frames.next() => match event {
                        Some(event) => Some(event),
                        None => break,
                    },
                };
                if let Some(event) = event {
                    // Chromium sends the next frame only once this one is acknowledged.
                    let _ = page.execute(ScreencastFrameAckParams::new(event.session_id)).await;
                    use base64::Engine as _;
                    if let Ok(jpeg) =
                        base64::engine::general_purpose::STANDARD.decode(AsRef::<str>::as_ref(&event.data))
                    {
                        let drawn_at = event.metadata.timestamp.as_ref().map(|t| *t.inner());
                        held = Some(Frame { jpeg, drawn_at });
                    }
                }
                if tokio::time::Instant::now() < due {
                    continue;
                }
                let Some(frame) = held.take() else { continue };
                // A watcher slower than the frames loses frames, never holds this task: it
                // must answer a stop at once (the next picture of the tab waits for it).
                let again = Frame {
                    jpeg: frame.jpeg.clone(),
                    drawn_at: frame.drawn_at,
                };
                match sender.try_send(frame) {
                    Ok(()) => {
                        last_sent = tokio::time::Instant::now();
                        shown = Some(again);
                    }
                    Err(mpsc::error::TrySendError::Full(_)) => {}
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
            let _ = page.execute(StopScreencastParams::default()).await;
            if let Some(watch) = watch.upgrade() {
                let mut watch = watch.lock().await;
                if watch.watched.get(&target).is_some_and(|w| w.id == id) {
                    watch.watched.remove(&target);
                }
            }
            let _ = ended_sender.send(());
        });
        Ok(receiver)
    }

    async fn start_screencast(
        &self,
        page: &Page,
    ) -> Result<impl futures_util::Stream<Item = std::sync::Arc<EventScreencastFrame>> + use<>, ToolError> {
        let frames = page
            .event_listener::<EventScreencastFrame>()
            .await
            .map_err(|e| internal("listening for the tab's frames", e))?;
        page.execute(
            StartScreencastParams::builder()
                .format(StartScreencastFormat::Jpeg)
                .quality(70)
                .max_width(MAX_WIDTH)
                .max_height(MAX_HEIGHT)
                .every_nth_frame(1)
                .build(),
        )
        .await
        .map_err(|e| internal("starting the tab's screencast", e))?;
        Ok(frames)
    }

    /// The person takes `target` over: their own tab on its page, in its jar; tools that act on
    /// `target` are busy until [`ToolHost::hand_back`].
    pub async fn take_over(&self, target: &str) -> Result<(), ToolError> {
        if self.watch.lock().await.taken.contains_key(target) {
            return Ok(());
        }
        let tab = self.persons_page(target).await?;
        let mut watch = self.watch.lock().await;
        // Another takeover may have finished meanwhile: the first stands, this tab closes.
        watch.taken.entry(target.to_owned()).or_insert(tab);
        Ok(())
    }

    /// The person opens `url` in a tab of their own, in the cookie jar `device`'s tabs on that
    /// site use (the context of its grant there: the website Session its join left is in it).
    /// Held by the person from before its first request when `url` is on one of the person's
    /// sites, so a form the person sends there is theirs (AIP-7); no tool has a handle to it. Its key, for the live picture and the
    /// person's input; [`ToolHost::hand_back`] closes it. At most [`WATCHERS`] open at once.
    pub async fn open_for_person(&self, device: Option<&str>, url: &str) -> Result<String, ToolError> {
        self.may_go(url)?;
        if self.watch.lock().await.opened.len() >= WATCHERS {
            return Err(ToolError::new(
                ToolErrorCode::RateLimited,
                format!("{WATCHERS} pages are open for the person already: close one"),
            ));
        }
        let caller = device.map_or_else(crate::spec::AgentCaller::local, |d| {
            crate::spec::AgentCaller::paired(d.to_owned())
        });
        let jar = self.jar_for(&caller, Some(url))?;
        let browser = self.browser().await?;
        let context = self.context_of(&browser, &caller, &jar).await?;
        let page = browser
            .new_page_in(context.as_ref())
            .await
            .map_err(|e| internal("opening the person's tab", e))?;
        let hold = self.hold_if_persons_site(&page, url)?;
        let tab = PersonsTab { page, _hold: hold };
        tab.page()
            .bring_to_front()
            .await
            .map_err(|e| internal("bringing the tab to the front", e))?;
        tokio::time::timeout(Duration::from_secs(30), super::page::go(tab.page(), url))
            .await
            .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the page did not load in 30 s"))??;
        let mut watch = self.watch.lock().await;
        watch.next += 1;
        let key = format!("p{}", watch.next);
        watch.opened.insert(key.clone(), device.map(str::to_owned));
        watch.taken.insert(key.clone(), tab);
        Ok(key)
    }

    /// The page of the person's tab `key` (one [`ToolHost::open_for_person`] or a takeover
    /// made), for the person's channel.
    pub async fn persons_tab_page(&self, key: &str) -> Option<Page> {
        self.watch.lock().await.taken.get(key).map(|tab| tab.page().clone())
    }

    /// The person hands `target` back (or closes the page they opened): their tab closes, tools
    /// act on `target` again.
    pub async fn hand_back(&self, target: &str) -> bool {
        let tab = {
            let mut watch = self.watch.lock().await;
            watch.opened.remove(target);
            watch.taken.remove(target)
        };
        match tab {
            Some(tab) => {
                let _ = tab.page().clone().close().await;
                true
            }
            None => false,
        }
    }

    /// The person's tabs that end with `device`: the takeovers of its tabs `closed` and the
    /// pages the person opened in its jars, taken out of the person's view.
    pub(super) async fn persons_tabs_of(&self, device: &str, closed: &[String]) -> Vec<PersonsTab> {
        let mut watch = self.watch.lock().await;
        let mut keys: Vec<String> = watch
            .opened
            .iter()
            .filter(|(_, owner)| owner.as_deref() == Some(device))
            .map(|(key, _)| key.clone())
            .collect();
        keys.extend(watch.taken.keys().filter(|key| closed.contains(key)).cloned());
        keys.iter()
            .filter_map(|key| {
                watch.opened.remove(key);
                watch.taken.remove(key)
            })
            .collect()
    }

    /// Whether the person has `target` now.
    pub async fn person_has(&self, target: &str) -> bool {
        self.watch.lock().await.taken.contains_key(target)
    }

    /// The person's click at (`x`, `y`) (CSS pixels of the picture) in their tab for `target`.
    pub async fn person_click(&self, target: &str, x: f64, y: f64) -> Result<(), ToolError> {
        let page = self.persons_tab(target).await?;
        for kind in [
            DispatchMouseEventType::MousePressed,
            DispatchMouseEventType::MouseReleased,
        ] {
            let event = DispatchMouseEventParams::builder()
                .r#type(kind)
                .x(x)
                .y(y)
                .button(MouseButton::Left)
                .click_count(1)
                .build()
                .map_err(|e| internal("the click", e))?;
            page.execute(event).await.map_err(|e| internal("the click", e))?;
        }
        Ok(())
    }

    /// The person's typing in their tab for `target`: `text` as typed, or a key by name
    /// (Enter, Tab, Backspace, Escape, the arrows, PageUp, PageDown).
    pub async fn person_type(&self, target: &str, text: Option<&str>, key: Option<&str>) -> Result<(), ToolError> {
        let page = self.persons_tab(target).await?;
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            page.execute(InsertTextParams::new(text))
                .await
                .map_err(|e| internal("typing", e))?;
        }
        if let Some(name) = key {
            let (_, code, vk) = KEYS
                .iter()
                .find(|(k, _, _)| *k == name)
                .ok_or_else(|| ToolError::new(ToolErrorCode::InputInvalid, "not a key the console sends"))?;
            for kind in [DispatchKeyEventType::RawKeyDown, DispatchKeyEventType::KeyUp] {
                let mut event = DispatchKeyEventParams::builder()
                    .r#type(kind.clone())
                    .key(name)
                    .code(*code)
                    .windows_virtual_key_code(*vk);
                if name == "Enter" && kind == DispatchKeyEventType::RawKeyDown {
                    event = event.text("\r");
                }
                let event = event.build().map_err(|e| internal("the key", e))?;
                page.execute(event).await.map_err(|e| internal("the key", e))?;
            }
        }
        Ok(())
    }

    async fn persons_tab(&self, target: &str) -> Result<Page, ToolError> {
        self.watch
            .lock()
            .await
            .taken
            .get(target)
            .map(|tab| tab.page().clone())
            .ok_or_else(|| {
                ToolError::new(
                    ToolErrorCode::InputInvalid,
                    format!("the person does not have tab {target}: take it over first"),
                )
            })
    }

    /// Refuses `tool`, which acts, on a tab of `caller`'s the person has. Another device's tab
    /// is left to the tool's own `not_found`: whether the person has it is not for this caller
    /// to learn.
    pub(super) async fn not_the_persons(
        &self,
        caller: &crate::spec::AgentCaller,
        tool: ToolId,
        target: Option<&str>,
    ) -> Result<(), ToolError> {
        let Some(target) = target else { return Ok(()) };
        if tool_reads(tool) || !self.person_has(target).await {
            return Ok(());
        }
        let owned = self
            .targets
            .lock()
            .await
            .get(target)
            .is_some_and(|t| t.owner.as_deref() == caller.device_id());
        if !owned {
            return Ok(());
        }
        Err(ToolError::new(
            ToolErrorCode::NotReady,
            format!("busy: the person has this tab ({target}); retry once they hand it back"),
        )
        .retryable()
        .with_cause(json!({ "target": target, "personHasTab": true })))
    }
}

/// Whether `tool` only reads (it may run on a tab the person has).
fn tool_reads(tool: ToolId) -> bool {
    matches!(
        tool,
        ToolId::GetDom
            | ToolId::Screenshot
            | ToolId::ListRequests
            | ToolId::GetRequestBody
            | ToolId::ProfileList
            | ToolId::Snapshot
            | ToolId::WaitFor
            | ToolId::ConsoleMessages
    )
}
