//! The page model: what a model reads a page as, and acts on it by. `pap.browser.snapshot`
//! answers the tab's page as compact text, one line per element that means something (its
//! role, accessible name, states and value), and a ref per actionable element. It is written in
//! the page, by one walk (`snapshot.js`) in an isolated world of the main frame, same-origin
//! frames included: one call's round trip and a string, where Chromium's accessibility tree
//! (`Accessibility.getFullAXTree`) took 10 to 16 ms to build and as long again to carry over.
//! A frame of another origin (whose document the main frame's world may not read) is walked by
//! the same walk in a world of its own, in its element's place ([`ToolHost::walk_frame`]):
//! through a DevTools session of its own when site isolation gave it a renderer of its own
//! ([`FrameSession`]), else through the tab's. At most [`FRAMES_PER_SNAPSHOT`] a snapshot,
//! frames met inside them keep the line that says their content is not shown.
//!
//! A ref is `e` and a number that world gives the element (`f2e7` in the frame of another
//! origin numbered 2, a number given once per document of a frame): stable for as long as the
//! element lives (a second snapshot names the same element the same), never reused for another
//! in its document, and not something a page's script can forge or read (its globals are not
//! the world's). The acting tools (click, fill, hover, select_option, drag, file_upload, screenshot
//! of one element) take a ref where they took a CSS selector; a ref no snapshot of the page the
//! tab shows gave is refused, and one whose element has gone says to take a new snapshot.
//!
//! Every act by ref runs the same AIP-7 guard as click and fill by selector
//! ([`super::persons::in_page_guard`]) on the element as the page-model world sees it (the
//! page's own scripts cannot patch what the guard calls there), in the same call that acts;
//! browser-level input (press_key, hover, `trusted`) is checked first and then left to the
//! request guard, exactly as a `trusted` click is, and never aimed at a frame's element (it
//! would land in a document the check did not judge). In a frame of another origin the guard
//! runs in that frame's world, on its document; press_key follows the focus there. Results go
//! through the same C9 redaction as every other tool's ([`super::ToolHost::call_as`]).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::cdp_send::RawCommand;
use super::input;
use super::{ToolHost, page, persons};
use crate::chromium::ControlledBrowser;
use crate::spec::{AgentCaller, ToolError, ToolErrorCode, ToolId};

/// The snapshot's length when the caller names none, characters.
const SNAPSHOT_CHARS: usize = 40_000;
/// The longest snapshot a caller may ask for.
const SNAPSHOT_CHARS_MAX: usize = 200_000;
/// Refs a tab remembers (the oldest snapshot's go first past this).
const REFS_PER_TAB: usize = 20_000;
/// Frames of another origin one snapshot walks (each a round trip or three and a walk; those
/// past it keep the line that says their content is not shown), and that a tab remembers for
/// one document of its main frame.
const FRAMES_PER_SNAPSHOT: usize = 16;
const FRAMES_PER_TAB: usize = 64;
/// How deep the snapshot goes (a deeper node counts as cut).
const MAX_DEPTH: usize = 64;
/// The most nodes one walk visits: a page of millions is cut, not walked to its end.
const MAX_NODES: usize = 200_000;
/// A name or value longer than this is cut (with `…`).
const TEXT_CHARS: usize = 300;
/// The longest one walk runs in the page, milliseconds: what is not walked by then counts as
/// cut (a page whose every element is slow to read cannot hold the tab's thread for long).
const WALK_MS: u64 = 2_000;
/// Console messages a tab keeps (the oldest drop first), and each one's length.
const CONSOLE_MESSAGES: usize = 200;
const CONSOLE_CHARS: usize = 2_000;
/// The most files one upload hands a page, and the largest each may be.
const UPLOAD_FILES: usize = 20;
const UPLOAD_BYTES: u64 = 100 * 1024 * 1024;
/// Upload sets an instance keeps on disk for its pages (the oldest go first; a form may still
/// be sent with one of them), and the bytes they may hold together (the newest is always kept).
const UPLOAD_SETS: usize = 16;
const UPLOAD_SETS_BYTES: u64 = 1024 * 1024 * 1024;
/// Saved PDFs an instance keeps (the oldest go first), and the bytes they may hold together.
const PDF_FILES: usize = 32;
const PDF_BYTES: u64 = 256 * 1024 * 1024;
/// How long `handle_dialog` waits for the page to report the dialog closed.
const DIALOG_CLOSE_WAIT: Duration = Duration::from_secs(2);
/// `wait_for`'s default and longest wait, and how often it looks.
const WAIT: Duration = Duration::from_secs(10);
const WAIT_MAX: Duration = Duration::from_secs(30);
const WAIT_POLL: Duration = Duration::from_millis(50);

/// The isolated world the snapshot's walk runs in, one per frame: the page's scripts share the
/// DOM with it but not its globals, so the refs it keeps are neither readable nor forgeable by
/// them (`snapshot.js`).
const WORLD: &str = "pap-page-model";

/// The elements that hold a frame (their content is another document), as a JavaScript array
/// of local names.
const FRAME_HOSTS: &str = "['iframe', 'frame', 'object', 'embed', 'fencedframe']";

/// The hit test's verdict, called on the element with the node a point reaches (`h`): the
/// element itself or something inside it, never an element that holds a frame (the point is
/// then in the frame's document, which no guard judged, even when the element holds it).
fn frame_hosts_hit() -> String {
    format!(
        "function (h) {{ if (h !== this && {FRAME_HOSTS}.includes(h.localName)) return false; \
         return this === h || this.contains(h) || (!!h.getRootNode().host && this.contains(h.getRootNode().host)); }}"
    )
}

/// The walk: a function of `{max, depth, nodes, chars, keep}` answering `{text, refs, cut, title}`.
const WALK: &str = include_str!("snapshot.js");

/// A ref as the tab keeps it: the frame it is in (0: the main frame's document; `k`: the
/// `k`-th frame of another origin, [`Refs::frames`]) and the number that frame's world gave it.
type RefKey = (usize, i64);

/// A frame of another origin a snapshot walked in a page-model world of its own (the main
/// frame's world cannot read its document: the same-origin policy holds for isolated worlds).
#[derive(Clone)]
struct FrameWorld {
    /// Its CDP frame id; also the id of its target when it runs in a process of its own.
    frame: String,
    /// Its page-model world (an execution context of the frame's session).
    world: i64,
    /// Its own session when it runs in a renderer of its own (site isolation): then its
    /// coordinates start at its element's content box, and `owner` is that element (backend
    /// node id in the tab's session).
    session: Option<Arc<FrameSession>>,
    owner: i64,
    /// The frame's document the world is in (its CDP `loaderId`): refs of another are gone.
    loader: String,
}

/// What a tab remembers of its snapshots: the refs they gave, oldest first, and where the
/// elements they name are kept.
#[derive(Default)]
pub(super) struct Refs {
    given: HashSet<RefKey>,
    order: VecDeque<RefKey>,
    /// The main frame's document the refs were given for (its CDP `loaderId`).
    loader: String,
    /// The execution context of that document's isolated world: the refs name elements its
    /// walk kept, and only it can read them back; it ends with its document.
    world: Option<i64>,
    /// The frames of another origin walked in that document, each document of a frame in a
    /// world under a number of its own, oldest first: ref `f2e5` is element 5 of number 2's.
    /// A number is given once per main document, so a ref never names another element (at
    /// most [`FRAMES_PER_TAB`] are kept).
    frames: VecDeque<(usize, FrameWorld)>,
    /// The last number given.
    frame_numbers: usize,
    /// How many times the refs were forgotten: a frame's walk that began before the last
    /// time keeps nothing (its numbers may since name another frame's world).
    generation: u64,
}

impl Refs {
    /// Refs of the page loaded by `loader`, kept in `world`, from now on; those of another
    /// page or world are forgotten (numbers are given per world), its frames' with them.
    fn for_world(&mut self, loader: &str, world: i64) {
        if self.loader != loader || self.world != Some(world) {
            self.given.clear();
            self.order.clear();
            self.frames.clear();
            self.frame_numbers = 0;
            self.generation += 1;
            loader.clone_into(&mut self.loader);
            self.world = Some(world);
        }
    }

    /// The newest world a snapshot walked `frame` in, and its number.
    fn frame_known(&self, frame: &str) -> Option<(usize, FrameWorld)> {
        self.frames.iter().rev().find(|(_, w)| w.frame == frame).cloned()
    }

    /// What number `k` names, if it is still kept.
    fn frame(&self, k: usize) -> Option<&FrameWorld> {
        self.frames.iter().find(|(n, _)| *n == k).map(|(_, w)| w)
    }

    /// A number no frame's world of this document has had.
    fn new_frame_number(&mut self) -> usize {
        self.frame_numbers += 1;
        self.frame_numbers
    }

    /// Refs `fK…` are kept in `walked`'s world: number `k` names it from now on (a number
    /// kept already names the same world: only its session is refreshed). The oldest past
    /// [`FRAMES_PER_TAB`] go, their refs with them. False, and nothing kept, when the refs were
    /// forgotten since `generation` (the walk began) or `k` names another world by now.
    fn for_frame(&mut self, k: usize, walked: FrameWorld, generation: u64) -> bool {
        if generation != self.generation {
            return false;
        }
        if let Some((_, known)) = self.frames.iter_mut().find(|(n, _)| *n == k) {
            let same = known.frame == walked.frame && known.world == walked.world && known.loader == walked.loader;
            if same {
                known.session = walked.session;
            }
            return same;
        }
        self.frames.push_back((k, walked));
        while self.frames.len() > FRAMES_PER_TAB {
            if let Some((old, _)) = self.frames.pop_front() {
                self.given.retain(|(f, _)| *f != old);
                self.order.retain(|(f, _)| *f != old);
            }
        }
        true
    }

    fn remember(&mut self, id: RefKey) {
        if self.given.insert(id) {
            self.order.push_back(id);
            while self.order.len() > REFS_PER_TAB {
                if let Some(old) = self.order.pop_front() {
                    self.given.remove(&old);
                }
            }
        }
    }
}

/// What [`ToolHost::on_ref`] runs on an element: a check (its answer is all it does; a dialog
/// that interrupts it leaves it unanswered, an error) or an act (a dialog it opens is its effect).
#[derive(Clone, Copy, Debug)]
pub(super) enum Script<'a> {
    /// Only the guard and an answer, before browser-level input: a frame's element is refused.
    Check(&'a str),
    /// The guard, then what the tool does.
    Act(&'a str),
}

/// A tab's console, for `console_messages`.
pub(super) type Console = Arc<std::sync::Mutex<VecDeque<Value>>>;

/// The JavaScript dialog open on a tab's page (`{type, message, url}`), or none: while one is
/// open the page's scripts and input wait for it.
pub(super) type Dialog = Arc<tokio::sync::watch::Sender<Option<Value>>>;

/// Sends `method` with `params` to `page`'s target (the tab's, or a frame's of its own);
/// CDP's text never crosses whole (C9).
pub(super) async fn raw(page: &impl Cdp, method: &str, params: Value) -> Result<Value, ToolError> {
    page.send(method, params).await
}

/// A DevTools session a document's commands go through.
pub(super) trait Cdp: Sync {
    fn send(&self, method: &str, params: Value) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

/// The tab's own session and the browser's: chromiumoxide's `execute` on each (inherent
/// methods of the same shape, no trait of chromiumoxide's to be generic over).
macro_rules! cdp_by_execute {
    ($($client:ty),+) => {$(
        impl Cdp for $client {
            fn send(&self, method: &str, params: Value) -> impl Future<Output = Result<Value, ToolError>> + Send {
                let command = RawCommand { method: method.to_owned(), params };
                async move {
                    self.execute(command)
                        .await
                        .map(|response| response.result)
                        .map_err(|e| page::cdp(&e))
                }
            }
        }
    )+};
}
cdp_by_execute!(Page, chromiumoxide::Browser);

/// Of what is left of [`WALK_MS`] when a frame's walk begins, what the host keeps for its
/// round trips around the walk (the walk in the page gets the rest, and cuts its own text).
const FRAME_WALK_MARGIN_MS: u64 = 300;

/// How long a command to a frame's own session may wait for its answer.
const FRAME_COMMAND: Duration = Duration::from_secs(10);

/// The DevTools session of a frame site isolation put in a renderer of its own. chromiumoxide
/// sends a tab's commands only to the tab's own target, so the browser attaches a session of
/// its own (not flat: its messages travel inside `Target.sendMessageToTarget` and come back as
/// `Target.receivedMessageFromTarget` events), detached when this drops.
pub(super) struct FrameSession {
    /// Not kept alive by the session: a browser that ended takes its frames with it.
    browser: std::sync::Weak<ControlledBrowser>,
    session: String,
}

/// The ids of the commands sent inside frame sessions (one sequence for the process: a
/// session's answers are told apart by session and id).
static FRAME_COMMAND_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl FrameSession {
    /// Attaches to the frame `frame` (its target id is its frame id), if it is a target: a
    /// frame in the tab's own renderer is none, and Chromium refuses.
    async fn attach(browser: Arc<ControlledBrowser>, frame: String) -> Option<Self> {
        let attached = raw(
            browser.cdp(),
            "Target.attachToTarget",
            json!({ "targetId": frame, "flatten": false }),
        )
        .await
        .ok()?;
        let session = attached["sessionId"].as_str()?.to_owned();
        Some(Self {
            browser: Arc::downgrade(&browser),
            session,
        })
    }
}

impl Cdp for FrameSession {
    fn send(&self, method: &str, params: Value) -> impl Future<Output = Result<Value, ToolError>> + Send {
        use chromiumoxide::cdp::browser_protocol::target::EventReceivedMessageFromTarget;
        let id = FRAME_COMMAND_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let message = json!({ "id": id, "method": method, "params": params }).to_string();
        async move {
            let browser = self
                .browser
                .upgrade()
                .ok_or_else(|| ToolError::new(ToolErrorCode::NotReady, "the browser is not running"))?;
            let browser = browser.cdp();
            // Listening before sending: the answer cannot come before the listener.
            let mut answers = browser
                .event_listener::<EventReceivedMessageFromTarget>()
                .await
                .map_err(|e| page::cdp(&e))?;
            raw(
                browser,
                "Target.sendMessageToTarget",
                json!({ "sessionId": self.session, "message": message }),
            )
            .await?;
            let answer = async {
                while let Some(event) = answers.next().await {
                    if *event.session_id.inner() != self.session {
                        continue;
                    }
                    let Ok(mut answer) = serde_json::from_str::<Value>(&event.message) else {
                        continue;
                    };
                    if answer["id"].as_u64() == Some(id) {
                        return Some(answer["result"].take()).filter(|_| answer.get("error").is_none());
                    }
                }
                None
            };
            match tokio::time::timeout(FRAME_COMMAND, answer).await {
                Ok(Some(answer)) => Ok(answer),
                Ok(None) => Err(ToolError::new(
                    ToolErrorCode::Internal,
                    "the frame's renderer refused the command",
                )),
                // Not "gone": what was asked may have been done (an act must not run twice).
                Err(_) => Err(ToolError::new(
                    ToolErrorCode::Timeout,
                    "the frame's renderer did not answer in 10 s: what was asked may have been done; take a new browser_snapshot before acting again",
                )),
            }
        }
    }
}

impl Drop for FrameSession {
    fn drop(&mut self) {
        let (Some(browser), session) = (self.browser.upgrade(), std::mem::take(&mut self.session)) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = raw(
                    browser.cdp(),
                    "Target.detachFromTarget",
                    json!({ "sessionId": session }),
                )
                .await;
            });
        }
    }
}

/// Where a document's commands go: the tab's session, or its frame's own.
#[derive(Clone)]
pub(super) enum Session {
    Tab(Page),
    Frame(Arc<FrameSession>),
}

impl Session {
    /// A frame's own session if it has one, else the tab's (`page`).
    fn of(own: Option<Arc<FrameSession>>, page: &Page) -> Self {
        own.map_or_else(|| Self::Tab(page.clone()), Self::Frame)
    }
}

impl Cdp for Session {
    async fn send(&self, method: &str, params: Value) -> Result<Value, ToolError> {
        match self {
            Self::Tab(page) => page.send(method, params).await,
            Self::Frame(frame) => frame.send(method, params).await,
        }
    }
}

/// The frame and number a ref names (`e12` -> (0, 12), `f2e7` -> (2, 7)): numbers from 1,
/// written without leading zeros, so one element has one ref.
fn ref_key(element_ref: &str) -> Result<RefKey, ToolError> {
    fn number(digits: &str) -> Option<i64> {
        let plain = !digits.is_empty() && !digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit());
        plain.then(|| digits.parse().ok()).flatten()
    }
    let key = match element_ref.strip_prefix('f') {
        Some(rest) => rest.split_once('e').and_then(|(k, n)| {
            let k = usize::try_from(number(k)?).ok()?;
            Some((k, number(n)?))
        }),
        None => element_ref.strip_prefix('e').and_then(number).map(|n| (0, n)),
    };
    key.ok_or_else(|| {
        ToolError::new(
            ToolErrorCode::InputInvalid,
            "ref: not a ref of browser_snapshot (they read e12, or f2e7 in a frame of another origin)",
        )
    })
}

fn gone(element_ref: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::NotFound,
        format!("ref {element_ref} is no longer in the page: take a new browser_snapshot"),
    )
    .with_cause(json!({ "ref": element_ref }))
}

/// `text` on one line, at most [`TEXT_CHARS`] characters.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() > TEXT_CHARS {
        let cut: String = joined.chars().take(TEXT_CHARS).collect();
        format!("{cut}…")
    } else {
        joined
    }
}

/// A JSON string as the snapshot quotes it.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// An element a ref names ([`ToolHost::element`]).
pub(super) struct Element {
    /// Its remote object in `world`.
    pub(super) object: String,
    /// DevTools' handle on the node, the same in every world.
    pub(super) backend: i64,
    /// The page-model world's execution context.
    pub(super) world: i64,
    /// The DevTools session its document is reached through: the tab's, or that of the frame of
    /// another origin it is in when site isolation gave that frame a renderer of its own.
    pub(super) session: Session,
    /// In such a frame: the frame's element in the tab's main document (backend node id), where
    /// the frame's coordinates start.
    pub(super) owner: Option<i64>,
}

/// Lets the page's world drop `object` (a remote object stays held until released or its
/// document goes: a long-lived page acted on many times would keep every one).
async fn release(page: &impl Cdp, object: &str) {
    let _ = raw(page, "Runtime.releaseObject", json!({ "objectId": object })).await;
}

/// Has Chromium make the page-model world in `frame`'s document now (Chromium then reports it,
/// and [`watch_worlds`] keeps it for the tab): its execution context id.
async fn make_world(page: &impl Cdp, frame: &str) -> Result<i64, ToolError> {
    let created = raw(
        page,
        "Page.createIsolatedWorld",
        json!({ "frameId": frame, "worldName": WORLD }),
    )
    .await?;
    created["executionContextId"]
        .as_i64()
        .ok_or_else(|| ToolError::new(ToolErrorCode::Internal, "the browser made no world for the page model"))
}

/// The element the page-model world `world` keeps as number `n`, if it is still in its
/// document: its remote object there (the caller releases it, [`release`]).
async fn kept(page: &impl Cdp, world: i64, n: i64) -> Option<String> {
    let kept = raw(
        page,
        "Runtime.callFunctionOn",
        json!({
            "functionDeclaration": "function (n) { const s = globalThis.__papPageModel; const e = s && s.els.get(n); return e && e.isConnected ? e : null; }",
            "executionContextId": world, "arguments": [{ "value": n }], "returnByValue": false,
        }),
    )
    .await
    .ok()?;
    kept["result"]["objectId"].as_str().map(str::to_owned)
}

/// Where the frame `element` is in starts in the tab's viewport, `owner` its element there
/// (backend node id): the top-left corner of that element's content box, and only when the box
/// is upright and of the frame's own size. A frame drawn scaled, zoomed, rotated or flipped
/// maps its pixels onto the tab's by more than a shift, and a point computed by the shift would
/// land elsewhere in it: refused ([`transformed`]).
async fn frame_origin(page: &Page, element: &Element, owner: i64, element_ref: &str) -> Result<(f64, f64), ToolError> {
    let model = raw(page, "DOM.getBoxModel", json!({ "backendNodeId": owner }))
        .await
        .map_err(|_| gone(element_ref))?;
    let q: Vec<f64> = model["model"]["content"]
        .as_array()
        .map(|q| q.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    if q.len() != 8 {
        return Err(gone(element_ref));
    }
    // The frame's size as its own document sees it, read in the page-model world (whose
    // `innerWidth` the page's scripts cannot redefine).
    let size = raw(
        &element.session,
        "Runtime.evaluate",
        json!({ "expression": "[innerWidth, innerHeight]", "contextId": element.world, "returnByValue": true }),
    )
    .await?;
    let (Some(width), Some(height)) = (size["result"]["value"][0].as_f64(), size["result"]["value"][1].as_f64()) else {
        return Err(gone(element_ref));
    };
    let near = |a: f64, b: f64| (a - b).abs() <= 1.0;
    // Corners clockwise from the top left: level top and bottom, plumb sides, the frame's size.
    let upright = near(q[1], q[3]) && near(q[5], q[7]) && near(q[0], q[6]) && near(q[2], q[4]);
    let sized = near(q[2] - q[0], width) && near(q[7] - q[1], height);
    if upright && sized {
        Ok((q[0], q[1]))
    } else {
        Err(transformed(element_ref))
    }
}

/// Scrolls `element` into the tab's view (in a frame with a renderer of its own, the frame
/// first, then the element in it): where its document's coordinates start in the tab's viewport
/// (0, 0 but in such a frame, [`frame_origin`]).
async fn in_view(page: &Page, element: &Element, element_ref: &str) -> Result<(f64, f64), ToolError> {
    let scroll = |backend: i64| json!({ "backendNodeId": backend });
    if let Some(owner) = element.owner {
        let _ = raw(page, "DOM.scrollIntoViewIfNeeded", scroll(owner)).await;
    }
    let _ = raw(&element.session, "DOM.scrollIntoViewIfNeeded", scroll(element.backend)).await;
    match element.owner {
        Some(owner) => frame_origin(page, element, owner, element_ref).await,
        None => Ok((0.0, 0.0)),
    }
}

/// A frame drawn other than upright and at its own size ([`frame_origin`]).
fn transformed(element_ref: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::InputInvalid,
        format!(
            "ref {element_ref} is in a frame the page draws scaled, zoomed or turned: where it is in the tab cannot be told, so no browser-level input (act without trusted) and no screenshot of it alone"
        ),
    )
    .with_cause(json!({ "ref": element_ref }))
}

/// The numbers in a walk's `refs`.
fn numbers(refs: &Value) -> Vec<i64> {
    refs.as_array()
        .map(|ids| ids.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default()
}

/// The `loaderId` of `frame`'s document, as `session` (its own, or the main frame's) knows it.
async fn frame_loader(session: &impl Cdp, frame: &str) -> Option<String> {
    fn find<'a>(tree: &'a Value, frame: &str) -> Option<&'a str> {
        if tree["frame"]["id"].as_str() == Some(frame) {
            return tree["frame"]["loaderId"].as_str();
        }
        tree["childFrames"]
            .as_array()?
            .iter()
            .find_map(|child| find(child, frame))
    }
    let tree = raw(session, "Page.getFrameTree", json!({})).await.ok()?;
    find(&tree["frameTree"], frame).map(str::to_owned)
}

/// Runs the walk in the isolated world `world` (its execution context id).
async fn walk(page: &impl Cdp, world: i64, options: &Value) -> Result<Value, ToolError> {
    let mut answer = raw(
        page,
        "Runtime.callFunctionOn",
        json!({
            "functionDeclaration": WALK, "executionContextId": world, "arguments": [{ "value": options }],
            "returnByValue": true, "awaitPromise": false,
        }),
    )
    .await?;
    if answer.get("exceptionDetails").is_some() {
        return Err(ToolError::new(
            ToolErrorCode::Internal,
            "the snapshot's walk threw in the page",
        ));
    }
    Ok(answer["result"]["value"].take())
}

/// The main frame's id from `Page.getFrameTree`'s answer, and its document's `loaderId`.
fn main_frame(frame_tree: &Value) -> (&str, &str) {
    let frame = &frame_tree["frameTree"]["frame"];
    (
        frame["id"].as_str().unwrap_or_default(),
        frame["loaderId"].as_str().unwrap_or_default(),
    )
}

/// The CDP key of a key name: (`key`, `code`, Windows key code, the text it types).
fn key_of(name: &str) -> Result<(String, String, i64, Option<String>), ToolError> {
    let named: Option<(&str, i64, Option<&str>)> = match name {
        "Enter" => Some(("Enter", 13, Some("\r"))),
        "Tab" => Some(("Tab", 9, None)),
        "Escape" => Some(("Escape", 27, None)),
        "Backspace" => Some(("Backspace", 8, None)),
        "Delete" => Some(("Delete", 46, None)),
        "ArrowUp" => Some(("ArrowUp", 38, None)),
        "ArrowDown" => Some(("ArrowDown", 40, None)),
        "ArrowLeft" => Some(("ArrowLeft", 37, None)),
        "ArrowRight" => Some(("ArrowRight", 39, None)),
        "Home" => Some(("Home", 36, None)),
        "End" => Some(("End", 35, None)),
        "PageUp" => Some(("PageUp", 33, None)),
        "PageDown" => Some(("PageDown", 34, None)),
        " " | "Space" => Some(("Space", 32, Some(" "))),
        _ => None,
    };
    if let Some((code, vk, text)) = named {
        let key = if code == "Space" { " " } else { code };
        return Ok((key.to_owned(), code.to_owned(), vk, text.map(str::to_owned)));
    }
    let mut chars = name.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if !c.is_control() => {
            let upper = c.to_ascii_uppercase();
            let (code, vk) = if upper.is_ascii_alphabetic() {
                (format!("Key{upper}"), i64::from(u32::from(upper)))
            } else if c.is_ascii_digit() {
                (format!("Digit{c}"), i64::from(u32::from(c)))
            } else {
                (String::new(), 0)
            };
            Ok((c.to_string(), code, vk, Some(c.to_string())))
        }
        _ => Err(ToolError::new(
            ToolErrorCode::InputInvalid,
            "key: one character, or a key name (Enter, Tab, Escape, Backspace, Delete, ArrowUp, ArrowDown, \
             ArrowLeft, ArrowRight, Home, End, PageUp, PageDown, Space)",
        )),
    }
}

impl ToolHost {
    /// `pap.browser.snapshot`: the tab's page as text, refs for acting (`snapshot.js`, run in
    /// the page's isolated world, which Chromium makes for each new document: one round trip).
    pub(super) async fn snapshot(&self, caller: &AgentCaller, input: input::Snapshot) -> Result<Value, ToolError> {
        let page = self.target(Some(caller), &input.target).await?;
        let max = input
            .max_chars
            .unwrap_or(SNAPSHOT_CHARS)
            .clamp(1_000, SNAPSHOT_CHARS_MAX);
        // A dialog holds the page (its scripts wait, the walk with them): it is what there is
        // to see and answer, whether it was open before or opened during the walk.
        let walked = match self.open_dialog(&input.target).await {
            Some(_) => None,
            None => self
                .or_dialog(&input.target, self.walk_page(&page, &input.target, max))
                .await
                .ok()
                .flatten(),
        };
        if let Some(walked) = walked {
            let mut walked = walked?;
            walked["target"] = json!(input.target);
            return Ok(walked);
        }
        let dialog = self.open_dialog(&input.target).await.ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::NotFound,
                "a dialog opened and closed during the snapshot: take it again",
            )
        })?;
        let line = format!(
            "- dialog ({}) {} [answer with browser_handle_dialog]\n",
            dialog["type"].as_str().unwrap_or("alert"),
            quoted(dialog["message"].as_str().unwrap_or_default())
        );
        Ok(json!({
            "target": input.target, "url": dialog["url"], "title": "", "snapshot": line,
            "refs": 0, "truncated": false, "dialog": dialog,
        }))
    }

    /// The walk of `target`'s page in its isolated world, at most `max` characters, and the
    /// refs it gave remembered for the tab.
    async fn walk_page(&self, page: &Page, target: &str, max: usize) -> Result<Value, ToolError> {
        let started = std::time::Instant::now();
        let (remembered, fresh) = self
            .targets
            .lock()
            .await
            .get(target)
            .map(|t| {
                (
                    Some(t.refs.clone()),
                    *t.world.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
                )
            })
            .unwrap_or_default();
        // The world Chromium last reported for the main frame is the current document's; the
        // one the last snapshot used is, if its document is still the one loaded.
        let known = match fresh {
            Some(world) => Some((world, None)),
            None => remembered.as_ref().and_then(|refs| {
                let refs = refs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                refs.world.map(|world| (world, Some(refs.loader.clone())))
            }),
        };
        let options = json!({
            "max": max, "depth": MAX_DEPTH, "nodes": MAX_NODES, "chars": TEXT_CHARS, "keep": REFS_PER_TAB,
            "ms": WALK_MS,
        });
        // The walk beside the frame tree: one round trip's wait; a world that went with its page
        // answers an error, and the world is asked for.
        let frame_tree = raw(page, "Page.getFrameTree", json!({}));
        let (frame_tree, walked) = match known {
            Some((world, _)) => {
                let (frame_tree, walked) = tokio::join!(frame_tree, walk(page, world, &options));
                (frame_tree?, Some((world, walked)))
            }
            None => (frame_tree.await?, None),
        };
        let (frame, loader) = main_frame(&frame_tree);
        let url = frame_tree["frameTree"]["frame"]["url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (world, walked) = match (walked, &known) {
            (Some((world, Ok(walked))), Some((_, was))) if was.as_deref().is_none_or(|was| was == loader) => {
                (world, walked)
            }
            _ => {
                let world = make_world(page, frame).await?;
                (world, walk(page, world, &options).await?)
            }
        };
        let ids = numbers(&walked["refs"]);
        let mut cut = walked["cut"].as_u64().unwrap_or(0);
        let mut text = walked["text"].as_str().unwrap_or_default().to_owned();
        let mut refs = ids.len();
        let mut generation = 0;
        if let Some(remembered) = &remembered {
            let mut remembered = remembered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            remembered.for_world(loader, world);
            for id in &ids {
                remembered.remember((0, *id));
            }
            generation = remembered.generation;
        }
        // Each frame of another origin the walk met, walked in a world of its own, in the place
        // of the line that stands for it, within what is left of the length and the time.
        let mut length = text.chars().count();
        let mut frames: Vec<(usize, String)> = Vec::new();
        let met = walked["frames"].as_array().map(Vec::as_slice).unwrap_or_default();
        for (n, at) in met
            .iter()
            .filter_map(|f| Some((f["n"].as_i64()?, usize::try_from(f["line"].as_u64()?).ok()?)))
            .take(FRAMES_PER_SNAPSHOT)
        {
            let (Some(remembered), Some(placeholder)) = (&remembered, text.lines().nth(at)) else {
                continue;
            };
            let base = placeholder.len() - placeholder.trim_start_matches(' ').len();
            let room = max.saturating_sub(length) + placeholder.chars().count() + 1;
            let ms = u64::try_from(started.elapsed().as_millis()).map_or(0, |spent| WALK_MS.saturating_sub(spent));
            if ms <= FRAME_WALK_MARGIN_MS || room < 100 {
                cut += 1;
                continue;
            }
            let options = json!({
                "max": room, "depth": MAX_DEPTH, "nodes": MAX_NODES, "chars": TEXT_CHARS, "keep": REFS_PER_TAB,
                "ms": ms - FRAME_WALK_MARGIN_MS, "base": base / 2,
            });
            // One deadline for the snapshot: a frame that does not answer is left as its line.
            let walked = tokio::time::timeout(
                Duration::from_millis(ms),
                self.walk_frame(page, remembered, generation, world, n, options),
            )
            .await;
            let Ok(Some(frame)) = walked else {
                cut += u64::from(walked.is_err());
                continue;
            };
            let frame_text = frame["text"].as_str().unwrap_or_default();
            if frame_text.is_empty() {
                continue;
            }
            length = length + frame_text.chars().count() - placeholder.chars().count() - 1;
            refs += frame["refs"].as_array().map_or(0, Vec::len);
            cut += frame["cut"].as_u64().unwrap_or(0);
            frames.push((at, frame_text.to_owned()));
        }
        if !frames.is_empty() {
            let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
            for (at, frame_text) in frames.into_iter().rev() {
                if let Some(line) = lines.get_mut(at) {
                    *line = frame_text;
                }
            }
            text = lines.concat();
        }
        if cut > 0 {
            text.push_str(&format!(
                "- [truncated: {cut} more lines; ask with a larger maxChars (at most {SNAPSHOT_CHARS_MAX})]\n"
            ));
        }
        Ok(json!({
            "url": url,
            "title": one_line(walked["title"].as_str().unwrap_or_default()), "snapshot": text,
            "refs": refs, "truncated": cut > 0,
        }))
    }

    /// The frame of another origin whose element is number `n` of the main frame's world
    /// `main_world`, walked (with `options`) in a page-model world of its own: through a
    /// session of its own when site isolation put it in a renderer of its own, else the tab's.
    /// Its refs are remembered as `fK…`, K the tab's number for that frame. None when it cannot
    /// be walked (gone, not loaded, a tab that remembers as many frames as it may): its line
    /// stays.
    async fn walk_frame(
        &self,
        page: &Page,
        remembered: &Arc<std::sync::Mutex<Refs>>,
        generation: u64,
        main_world: i64,
        n: i64,
        mut options: Value,
    ) -> Option<Value> {
        let owner = kept(page, main_world, n).await?;
        let described = raw(page, "DOM.describeNode", json!({ "objectId": owner })).await;
        release(page, &owner).await;
        let described = described.ok()?;
        let frame = described["node"]["frameId"].as_str()?.to_owned();
        let owner = described["node"]["backendNodeId"].as_i64()?;
        let known = remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .frame_known(&frame);
        // The frame's own session, the one made before while it still answers (its frame tree
        // names the frame's document), else one attached now, or none (the tab's renderer).
        let mut own = known.as_ref().and_then(|(_, w)| w.session.clone());
        let mut loader = match &own {
            Some(session) => frame_loader(session.as_ref(), &frame).await,
            None => None,
        };
        if loader.is_none() {
            // In a task of its own: a snapshot cancelled meanwhile (its deadline) still gets a
            // session it can drop, and so detach, rather than one Chromium keeps attached.
            let attach = tokio::spawn(FrameSession::attach(self.browser().await.ok()?, frame.clone()));
            own = attach.await.ok().flatten().map(Arc::new);
            loader = frame_loader(&Session::of(own.clone(), page), &frame).await;
        }
        let session = Session::of(own.clone(), page);
        let loader = loader?;
        // A world is walked again under its number while its document is the one shown and
        // its session the one it was made in (an execution context's number means nothing in
        // another renderer); any other walk is in a new world, under a new number.
        let same_session = |w: &FrameWorld| match (&w.session, &own) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let mut again = None;
        if let Some((k, w)) = known.filter(|(_, w)| same_session(w) && w.loader == loader) {
            options["frame"] = json!(format!("f{k}"));
            again = walk(&session, w.world, &options)
                .await
                .ok()
                .map(|walked| (k, w.world, walked));
        }
        let (k, world, walked) = match again {
            Some(again) => again,
            None => {
                let k = remembered
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .new_frame_number();
                options["frame"] = json!(format!("f{k}"));
                let world = make_world(&session, &frame).await.ok()?;
                (k, world, walk(&session, world, &options).await.ok()?)
            }
        };
        let mut remembered = remembered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = remembered.for_frame(
            k,
            FrameWorld {
                frame,
                world,
                session: own,
                owner,
                loader,
            },
            generation,
        );
        if !kept {
            return None;
        }
        for id in numbers(&walked["refs"]) {
            remembered.remember((k, id));
        }
        Some(walked)
    }

    /// The element `element_ref` names in `target`: its remote object in the page-model world
    /// that gave the ref (where the AIP-7 guard and the acts run: the page's scripts can patch
    /// their own world's prototypes, `Array.prototype.some` or a form's `action` getter, never
    /// this one's), its DevTools backend node id, and that world. Only a ref a snapshot of the
    /// page the tab shows now gave. The caller releases the object ([`release`]).
    pub(super) async fn element(&self, page: &Page, target: &str, element_ref: &str) -> Result<Element, ToolError> {
        let (k, number) = ref_key(element_ref)?;
        let refs = self.targets.lock().await.get(target).map(|t| t.refs.clone());
        let frame_tree = raw(page, "Page.getFrameTree", json!({})).await?;
        let (_, loader) = main_frame(&frame_tree);
        let found = refs.and_then(|refs| {
            let refs = refs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if refs.loader != loader || !refs.given.contains(&(k, number)) {
                return None;
            }
            let world = refs.world?;
            match k {
                0 => Some((world, None)),
                k => refs.frame(k).map(|frame| (frame.world, Some(frame.clone()))),
            }
        });
        let Some((world, frame)) = found else {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!("ref {element_ref} is not from a snapshot of the page tab {target} shows now: take a new browser_snapshot"),
            )
            .with_cause(json!({ "ref": element_ref })));
        };
        // A ref in a frame of another origin: read back through the session the frame is in,
        // only while the frame shows the document the ref was given in (a world's number means
        // nothing in another document's renderer).
        let (session, owner) = match frame {
            None => (Session::Tab(page.clone()), None),
            Some(frame) => {
                let owner = frame.session.is_some().then_some(frame.owner);
                let session = Session::of(frame.session, page);
                if frame_loader(&session, &frame.frame).await.as_deref() != Some(frame.loader.as_str()) {
                    return Err(gone(element_ref));
                }
                (session, owner)
            }
        };
        // Read back from the world that gave it (a world that went with its page answers an
        // error), then named by backend id: DevTools' handle on the node in any world.
        let kept = kept(&session, world, number).await.ok_or_else(|| gone(element_ref))?;
        let described = raw(&session, "DOM.describeNode", json!({ "objectId": kept })).await;
        let Some(backend) = described.ok().and_then(|d| d["node"]["backendNodeId"].as_i64()) else {
            release(&session, &kept).await;
            return Err(gone(element_ref));
        };
        Ok(Element {
            object: kept,
            backend,
            world,
            session,
            owner,
        })
    }

    /// Evaluates `expression` in the page-model world of `target`'s main frame (the one
    /// Chromium made for its document, or one made now, which Chromium then reports and the tab
    /// keeps): what the AIP-7 guard runs in when it is handed a selector rather than a ref, so
    /// the page's scripts cannot patch what it calls. Answers the expression's value.
    pub(super) async fn in_world(&self, page: &Page, target: &str, expression: &str) -> Result<Value, ToolError> {
        let world = self
            .targets
            .lock()
            .await
            .get(target)
            .and_then(|t| *t.world.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let evaluate = |world: i64| {
            page.execute(RawCommand {
                method: "Runtime.evaluate".to_owned(),
                params: json!({ "expression": expression, "contextId": world, "returnByValue": true, "awaitPromise": false }),
            })
        };
        // Only a world that went with its document (Chromium no longer knows its id) is
        // replaced by one made for the document the tab shows now. Any other failure may come
        // after the expression ran, and an act must not run twice.
        let answer = match world {
            Some(world) => match evaluate(world).await {
                Ok(answer) => Some(answer.result),
                Err(chromiumoxide::error::CdpError::Chrome(e)) if e.message.contains("Cannot find context") => None,
                Err(e) => return Err(page::cdp(&e)),
            },
            None => None,
        };
        let mut answer = match answer {
            Some(answer) => answer,
            None => {
                let frame_tree = raw(page, "Page.getFrameTree", json!({})).await?;
                let (frame, _) = main_frame(&frame_tree);
                let world = make_world(page, frame).await?;
                evaluate(world).await.map_err(|e| page::cdp(&e))?.result
            }
        };
        if answer.get("exceptionDetails").is_some() {
            return Err(ToolError::new(ToolErrorCode::Internal, "the page threw"));
        }
        Ok(answer["result"]["value"].take())
    }

    /// Evaluates `expression` in the worlds the snapshots of `target`'s page walked its frames of
    /// another origin in (newest first, each only while its frame shows the document it was
    /// walked in): the first answer that is neither `'unfocused'` nor `'elsewhere'` (focus
    /// further in). None when no frame answers so.
    async fn in_frames(&self, page: &Page, target: &str, expression: &str) -> Option<Value> {
        let refs = self.targets.lock().await.get(target).map(|t| t.refs.clone())?;
        let frame_tree = raw(page, "Page.getFrameTree", json!({})).await.ok()?;
        let (_, loader) = main_frame(&frame_tree);
        let frames: Vec<FrameWorld> = {
            let refs = refs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if refs.loader != loader {
                return None;
            }
            refs.frames.iter().rev().map(|(_, w)| w.clone()).collect()
        };
        for frame in frames {
            let session = Session::of(frame.session.clone(), page);
            if frame_loader(&session, &frame.frame).await.as_deref() != Some(frame.loader.as_str()) {
                continue;
            }
            let answer = raw(
                &session,
                "Runtime.evaluate",
                json!({ "expression": expression, "contextId": frame.world, "returnByValue": true }),
            )
            .await;
            let Ok(mut answer) = answer else { continue };
            if answer.get("exceptionDetails").is_some() {
                continue;
            }
            let value = answer["result"]["value"].take();
            if !matches!(value.as_str(), Some("unfocused" | "elsewhere")) {
                return Some(value);
            }
        }
        None
    }

    /// Runs `body` on the element of `element_ref`, after the AIP-7 guard, in one call in the
    /// element's document (`function (a) { const e = this; GUARD BODY }`, `a` = `argument`).
    /// `'done'` (or any other string the body answers but `'reserved'`) is the answer.
    pub(super) async fn on_ref(
        &self,
        page: &Page,
        tool: ToolId,
        target: &str,
        element_ref: &str,
        script: Script<'_>,
        argument: Value,
    ) -> Result<String, ToolError> {
        let (body, acts) = match script {
            Script::Check(body) => (body, false),
            Script::Act(body) => (body, true),
        };
        let guard = self.persons_form_guard()?;
        let element = self.element(page, target, element_ref).await?;
        // Browser-level input (what a check precedes) on a frame's element lands in the frame's
        // document, which the guard on the element does not judge: refused, as the frame's own
        // elements have refs of their own (same-origin) or none (another origin).
        let frame = if acts {
            ""
        } else {
            &format!("if ({FRAME_HOSTS}.includes(e.localName)) return 'frame'; ")
        };
        let function = zeroize::Zeroizing::new(format!(
            "function (a) {{ const e = this; if (!e || !e.isConnected) return 'missing'; {frame}{guard}{body} }}"
        ));
        let call = raw(
            &element.session,
            "Runtime.callFunctionOn",
            json!({
                "objectId": element.object, "functionDeclaration": function.as_str(),
                "arguments": [{ "value": argument }], "returnByValue": true, "awaitPromise": false,
            }),
        );
        // An act that opens a dialog (`confirm()` in a click handler) returns when it opens:
        // the call's own answer waits for the dialog to be answered.
        let answered = self.or_dialog(target, call).await;
        if matches!(answered, Ok(Some(Ok(_)))) {
            release(&element.session, &element.object).await;
        } else {
            // A dialog holds the document's renderer, and a command to it waits for the answer
            // (a frame's own session does), as a renderer that did not answer may still: the
            // object is let go when it can be.
            let (session, object) = (element.session.clone(), element.object.clone());
            tokio::spawn(async move { release(&session, &object).await });
        }
        let Some(answer) = answered? else {
            if acts {
                return Ok("done".to_owned());
            }
            // A check that a dialog interrupted gave no answer: nothing follows it.
            return Err(self.no_dialog(target).await.err().unwrap_or_else(|| gone(element_ref)));
        };
        // A command that timed out may have acted: said so, never "take a new snapshot and act".
        let answer = answer.map_err(|e| {
            if e.code == ToolErrorCode::Timeout {
                e
            } else {
                gone(element_ref)
            }
        })?;
        if answer.get("exceptionDetails").is_some() {
            return Err(ToolError::new(
                ToolErrorCode::Internal,
                format!("{tool} on ref {element_ref}: the page threw"),
            ));
        }
        match answer["result"]["value"].as_str() {
            Some("reserved") => Err(persons::refusal(tool, target, persons::PERSONS_FORM)),
            Some("frame") => Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!(
                    "ref {element_ref} is a frame: {tool} acts on an element in it (its refs are in the snapshot when the frame is of the page's origin)"
                ),
            )
            .with_cause(json!({ "ref": element_ref }))),
            Some("missing") | None => Err(gone(element_ref)),
            Some(other) => Ok(other.to_owned()),
        }
    }

    /// The middle of the element of `element_ref`, in the viewport, scrolled into view first.
    async fn middle_of(&self, page: &Page, target: &str, element_ref: &str) -> Result<(f64, f64), ToolError> {
        let element = self.element(page, target, element_ref).await?;
        let middle = self.middle_of_element(page, &element, element_ref).await;
        release(&element.session, &element.object).await;
        middle
    }

    async fn middle_of_element(
        &self,
        page: &Page,
        element: &Element,
        element_ref: &str,
    ) -> Result<(f64, f64), ToolError> {
        let (ox, oy) = in_view(page, element, element_ref).await?;
        let backend = element.backend;
        let session = &element.session;
        let quads = raw(session, "DOM.getContentQuads", json!({ "backendNodeId": backend }))
            .await
            .map_err(|_| gone(element_ref))?;
        let quad: Vec<f64> = quads["quads"][0]
            .as_array()
            .map(|q| q.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        if quad.len() != 8 {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!("ref {element_ref} has no box on the page (hidden?)"),
            ));
        }
        let x = (quad[0] + quad[2] + quad[4] + quad[6]) / 4.0;
        let y = (quad[1] + quad[3] + quad[5] + quad[7]) / 4.0;
        if let Some(owner) = element.owner {
            // In the tab, the point is on the frame's element (not on something over it) ...
            #[allow(clippy::cast_possible_truncation, reason = "viewport coordinates, rounded")]
            let (px, py) = ((x + ox).round() as i64, (y + oy).round() as i64);
            let at = raw(
                page,
                "DOM.getNodeForLocation",
                json!({ "x": px, "y": py, "includeUserAgentShadowDOM": true, "ignorePointerEventsNone": true }),
            )
            .await?;
            if at["backendNodeId"].as_i64() != Some(owner) {
                return Err(covered(element_ref));
            }
        }
        // ... and in the element's document, on the element.
        self.hit(element, element_ref, x, y).await?;
        Ok((x + ox, y + oy))
    }

    /// Whether `element` (of `element_ref`) is what a pointer at (`x`, `y`) of its document's
    /// viewport reaches: itself or something inside it, not an overlay that would take the
    /// input meant for it (nor a frame's content: a frame's element is refused before,
    /// [`Self::on_ref`]).
    async fn hit(&self, element: &Element, element_ref: &str, x: f64, y: f64) -> Result<(), ToolError> {
        let page = &element.session;
        #[allow(clippy::cast_possible_truncation, reason = "viewport coordinates, rounded")]
        let (px, py) = (x.round() as i64, y.round() as i64);
        let at = raw(
            page,
            "DOM.getNodeForLocation",
            json!({ "x": px, "y": py, "includeUserAgentShadowDOM": true, "ignorePointerEventsNone": true }),
        )
        .await?;
        let Some(hit) = at["backendNodeId"].as_i64() else {
            return Err(covered(element_ref));
        };
        // Both in the element's world: a call's arguments live in its target's world.
        let hit = raw(
            page,
            "DOM.resolveNode",
            json!({ "backendNodeId": hit, "executionContextId": element.world }),
        )
        .await
        .map_err(|_| covered(element_ref))?;
        let Some(hit) = hit["object"]["objectId"].as_str() else {
            return Err(covered(element_ref));
        };
        let answer = raw(
            page,
            "Runtime.callFunctionOn",
            json!({
                "objectId": element.object,
                "functionDeclaration": frame_hosts_hit(),
                "arguments": [{ "objectId": hit }], "returnByValue": true,
            }),
        )
        .await;
        release(page, hit).await;
        if answer?["result"]["value"] == true {
            Ok(())
        } else {
            Err(covered(element_ref))
        }
    }

    /// A browser-level pointer event at (`x`, `y`).
    async fn mouse(page: &Page, kind: &str, x: f64, y: f64) -> Result<(), ToolError> {
        let mut event = json!({ "type": kind, "x": x, "y": y });
        if kind != "mouseMoved" {
            event["button"] = json!("left");
            event["clickCount"] = json!(1);
        }
        raw(page, "Input.dispatchMouseEvent", event).await.map(|_| ())
    }

    /// `browser.click` by ref: page-level (the element's `click()`), or browser-level with
    /// `trusted` (the pointer pressed and released at its middle).
    pub(super) async fn click_ref(
        &self,
        page: &Page,
        target: &str,
        element_ref: &str,
        trusted: bool,
    ) -> Result<(), ToolError> {
        if !trusted {
            self.on_ref(
                page,
                ToolId::Click,
                target,
                element_ref,
                Script::Act("if (e.focus) e.focus(); e.click(); return 'done';"),
                Value::Null,
            )
            .await?;
            return Ok(());
        }
        self.on_ref(
            page,
            ToolId::Click,
            target,
            element_ref,
            Script::Check("return 'done';"),
            Value::Null,
        )
        .await?;
        page.bring_to_front().await.map_err(|e| page::cdp(&e))?;
        let (x, y) = self.middle_of(page, target, element_ref).await?;
        Self::mouse(page, "mouseMoved", x, y).await?;
        Self::mouse(page, "mousePressed", x, y).await?;
        self.or_dialog(target, Self::mouse(page, "mouseReleased", x, y))
            .await?
            .unwrap_or(Ok(()))
    }

    /// `browser.fill` by ref: the value set at page level (then the form submitted, with
    /// `submit`), or typed at browser level with `trusted` (then Enter). The value travels as the
    /// call's argument, never inside script text.
    pub(super) async fn fill_ref(
        &self,
        page: &Page,
        target: &str,
        element_ref: &str,
        value: &str,
        trusted: bool,
        submit: bool,
    ) -> Result<(), ToolError> {
        if !trusted {
            let body = format!(
                "e.focus(); const set = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(e), 'value'); \
                 if (set && set.set) {{ set.set.call(e, a); }} else {{ e.value = a; }} \
                 e.dispatchEvent(new Event('input', {{ bubbles: true }})); \
                 e.dispatchEvent(new Event('change', {{ bubbles: true }})); {submit} return 'done';",
                submit = if submit {
                    "if (e.form) { if (e.form.requestSubmit) e.form.requestSubmit(); else e.form.submit(); }"
                } else {
                    ""
                }
            );
            self.on_ref(
                page,
                ToolId::Fill,
                target,
                element_ref,
                Script::Act(&body),
                json!(value),
            )
            .await?;
            return Ok(());
        }
        self.on_ref(
            page,
            ToolId::Fill,
            target,
            element_ref,
            Script::Check("e.focus(); if (e.select) e.select(); return 'done';"),
            Value::Null,
        )
        .await?;
        page.bring_to_front().await.map_err(|e| page::cdp(&e))?;
        raw(page, "Input.insertText", json!({ "text": value })).await?;
        if submit {
            self.or_dialog(target, self.key(page, "Enter"))
                .await?
                .unwrap_or(Ok(()))?;
        }
        Ok(())
    }

    /// One key down and up, at browser level.
    async fn key(&self, page: &Page, name: &str) -> Result<(), ToolError> {
        let (key, code, vk, text) = key_of(name)?;
        let mut down = json!({
            "type": if text.is_some() { "keyDown" } else { "rawKeyDown" },
            "key": key, "code": code, "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk,
        });
        if let Some(text) = &text {
            down["text"] = json!(text);
            down["unmodifiedText"] = json!(text);
        }
        raw(page, "Input.dispatchKeyEvent", down).await?;
        raw(
            page,
            "Input.dispatchKeyEvent",
            json!({ "type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk }),
        )
        .await
        .map(|_| ())
    }

    /// `pap.browser.press_key`: to whatever has focus, after the AIP-7 guard on it (Enter in a
    /// person's form submits it).
    pub(super) async fn press_key(&self, caller: &AgentCaller, input: input::PressKey) -> Result<Value, ToolError> {
        key_of(&input.key)?;
        let page = self.drivable(caller, ToolId::PressKey, &input.target).await?;
        let guard = self.persons_form_guard()?;
        // What has focus, followed into the frames that hold it; with it, the button Enter
        // would press in its form. Focus in a frame of another origin is followed there, in
        // the world a snapshot walked it in ([`Self::in_frames`]): a frame none walked cannot be
        // judged, and the key is refused.
        let check = |frame: &str| {
            format!(
                "(() => {{ {frame}let d = document, x = d.activeElement; \
             const deeper = () => {{ while (x && x.shadowRoot && x.shadowRoot.activeElement) x = x.shadowRoot.activeElement; }}; \
             deeper(); \
             while (x && {FRAME_HOSTS}.includes(x.localName)) {{ \
             let inner = null; try {{ inner = x.contentDocument; }} catch (_) {{}} \
             if (!inner) return 'elsewhere'; d = inner; x = d.activeElement; deeper(); }} \
             x = x || d.body; const b = x && x.form ? x.form.querySelector('button:not([type]),button[type=submit],input[type=submit],input[type=image]') : null; \
             for (const e of [x, b]) {{ if (!e) continue; {guard}}} return 'done'; }})()"
            )
        };
        // In front first: a document of a tab in the background does not have the focus.
        page.bring_to_front().await.map_err(|e| page::cdp(&e))?;
        let mut checked = self.in_world(&page, &input.target, &check("")).await?;
        if checked.as_str() == Some("elsewhere") {
            // In a frame, the one that holds the focus answers.
            let in_frame = check("if (!document.hasFocus()) return 'unfocused'; ");
            let found = tokio::time::timeout(FRAME_COMMAND, self.in_frames(&page, &input.target, &in_frame)).await;
            checked = found.ok().flatten().ok_or_else(|| {
                ToolError::new(
                    ToolErrorCode::InputInvalid,
                    "the focus is in a frame of another origin no browser_snapshot of this page has walked (or one a snapshot cannot walk: an embed or object): its element cannot be judged, so no key is pressed there",
                )
            })?;
        }
        if checked.as_str() == Some("reserved") {
            return Err(persons::refusal(ToolId::PressKey, &input.target, persons::PERSONS_FORM));
        }
        self.or_dialog(&input.target, self.key(&page, &input.key))
            .await?
            .unwrap_or(Ok(()))?;
        Ok(self
            .with_dialog(&input.target, json!({ "target": input.target, "pressed": input.key }))
            .await)
    }

    /// `pap.browser.hover`: the pointer over the element's middle.
    pub(super) async fn hover(&self, caller: &AgentCaller, input: input::Hover) -> Result<Value, ToolError> {
        let page = self.drivable(caller, ToolId::Hover, &input.target).await?;
        self.on_ref(
            &page,
            ToolId::Hover,
            &input.target,
            &input.element_ref,
            Script::Check("return 'done';"),
            Value::Null,
        )
        .await?;
        page.bring_to_front().await.map_err(|e| page::cdp(&e))?;
        let (x, y) = self.middle_of(&page, &input.target, &input.element_ref).await?;
        Self::mouse(&page, "mouseMoved", x, y).await?;
        Ok(json!({ "target": input.target, "hovered": input.element_ref }))
    }

    /// `pap.browser.drag`: the pointer pressed on one element, moved onto another and released
    /// (browser-level input, after the AIP-7 guard on both). An HTML5 drag the page starts is
    /// carried by CDP's drag interception (`Input.setInterceptDrags`: headless Chromium runs no
    /// native drag loop): what the page put in the drag is dropped where the pointer ends.
    pub(super) async fn drag(&self, caller: &AgentCaller, input: input::Drag) -> Result<Value, ToolError> {
        use chromiumoxide::cdp::browser_protocol::input::EventDragIntercepted;
        let page = self.drivable(caller, ToolId::Drag, &input.target).await?;
        // What a page can drag natively (an element marked draggable, a link, an image) starts
        // an HTML5 drag; anything else is moved by mouse events alone.
        let native = self
            .on_ref(&page, ToolId::Drag, &input.target, &input.start_ref, Script::Check("const d = (e.closest && e.closest('[draggable=\"true\"]')) || e.tagName === 'A' || e.tagName === 'IMG'; \
                 return d ? 'html5' : 'done';"), Value::Null)
            .await?
            == "html5";
        self.on_ref(
            &page,
            ToolId::Drag,
            &input.target,
            &input.end_ref,
            Script::Check("return 'done';"),
            Value::Null,
        )
        .await?;
        page.bring_to_front().await.map_err(|e| page::cdp(&e))?;
        // Both scrolled into view first, then both read: scrolling to one may move the other.
        self.middle_of(&page, &input.target, &input.end_ref).await?;
        self.middle_of(&page, &input.target, &input.start_ref).await?;
        let (ex, ey) = self.middle_of(&page, &input.target, &input.end_ref).await?;
        let (sx, sy) = self.middle_of(&page, &input.target, &input.start_ref).await?;
        let mut intercepted = page
            .event_listener::<EventDragIntercepted>()
            .await
            .map_err(|e| page::cdp(&e))?;
        raw(&page, "Input.setInterceptDrags", json!({ "enabled": true })).await?;
        let held = |x: f64, y: f64| json!({ "type": "mouseMoved", "x": x, "y": y, "button": "left", "buttons": 1 });
        let dragged = async {
            Self::mouse(&page, "mouseMoved", sx, sy).await?;
            Self::mouse(&page, "mousePressed", sx, sy).await?;
            for step in 1..=5 {
                let t = f64::from(step) / 5.0;
                raw(
                    &page,
                    "Input.dispatchMouseEvent",
                    held(sx + (ex - sx) * t, sy + (ey - sy) * t),
                )
                .await?;
            }
            // A native drag is reported by the interception; it comes with one of the moves.
            let html5 = if native {
                tokio::time::timeout(Duration::from_secs(2), intercepted.next())
                    .await
                    .ok()
                    .flatten()
            } else {
                None
            };
            if let Some(event) = &html5 {
                let data = serde_json::to_value(&event.data)
                    .map_err(|_| ToolError::new(ToolErrorCode::Internal, "the drag's data"))?;
                for kind in ["dragEnter", "dragOver", "drop"] {
                    raw(
                        &page,
                        "Input.dispatchDragEvent",
                        json!({ "type": kind, "x": ex, "y": ey, "data": data }),
                    )
                    .await?;
                }
            }
            Self::mouse(&page, "mouseReleased", ex, ey).await?;
            Ok::<bool, ToolError>(html5.is_some())
        };
        let outcome = self.or_dialog(&input.target, dragged).await;
        let _ = raw(&page, "Input.setInterceptDrags", json!({ "enabled": false })).await;
        let html5 = outcome?.transpose()?.unwrap_or(false);
        let result = json!({
            "target": input.target, "dragged": input.start_ref, "dropped": input.end_ref, "html5": html5,
        });
        Ok(self.with_dialog(&input.target, result).await)
    }

    /// `pap.browser.select_option`: by value or label; `input` and `change` dispatched.
    pub(super) async fn select_option(
        &self,
        caller: &AgentCaller,
        input: input::SelectOption,
    ) -> Result<Value, ToolError> {
        let page = self.drivable(caller, ToolId::SelectOption, &input.target).await?;
        let body = "if (e.tagName !== 'SELECT') return 'not-select'; const picked = []; \
             for (const o of e.options) { const on = a.includes(o.value) || a.includes(o.label.trim()) || a.includes(o.text.trim()); \
             if (e.multiple) o.selected = on; if (on) picked.push(o.value); } \
             if (!picked.length) return 'no-option'; if (!e.multiple) e.value = picked[0]; \
             e.dispatchEvent(new Event('input', { bubbles: true })); e.dispatchEvent(new Event('change', { bubbles: true })); \
             return 'done';";
        let answer = self
            .on_ref(
                &page,
                ToolId::SelectOption,
                &input.target,
                &input.element_ref,
                Script::Act(body),
                json!(input.values),
            )
            .await?;
        match answer.as_str() {
            "done" => Ok(json!({ "target": input.target, "selected": input.values.len() })),
            "not-select" => Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!("ref {} is not a select element", input.element_ref),
            )),
            _ => Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!(
                    "no option of ref {} has any of those values or labels",
                    input.element_ref
                ),
            )),
        }
    }

    /// `pap.browser.wait_for`: exactly one of a text, a text gone, the next page, a time.
    pub(super) async fn wait_for(&self, caller: &AgentCaller, input: input::WaitFor) -> Result<Value, ToolError> {
        let chosen = usize::from(input.text.is_some())
            + usize::from(input.text_gone.is_some())
            + usize::from(input.navigation)
            + usize::from(input.time.is_some());
        if chosen != 1 {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                "wait for exactly one of text, textGone, navigation and time",
            ));
        }
        let page = self.target(Some(caller), &input.target).await?;
        let timeout = input.timeout_ms.map_or(WAIT, Duration::from_millis).min(WAIT_MAX);
        if let Some(seconds) = input.time {
            if !(0.0..=30.0).contains(&seconds) {
                return Err(ToolError::new(ToolErrorCode::InputInvalid, "time: 0 to 30 seconds"));
            }
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            return Ok(json!({ "target": input.target, "waited": "time" }));
        }
        if input.navigation {
            use chromiumoxide::cdp::browser_protocol::page::EventLoadEventFired;
            let mut loaded = page
                .event_listener::<EventLoadEventFired>()
                .await
                .map_err(|e| page::cdp(&e))?;
            tokio::time::timeout(timeout, loaded.next())
                .await
                .map_err(|_| waited_too_long(timeout, "no page loaded"))?;
            let url = page.url().await.map_err(|e| page::cdp(&e))?.unwrap_or_default();
            return Ok(json!({ "target": input.target, "waited": "navigation", "url": url }));
        }
        let Some((text, present)) =
            (input.text.as_ref().map(|t| (t, true))).or_else(|| input.text_gone.as_ref().map(|t| (t, false)))
        else {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                "wait for a text, or for one to go",
            ));
        };
        let script = format!(
            "(() => {{ const b = document.body; return !!b && b.innerText.includes({}); }})()",
            page::literal(text)?
        );
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Read in the page-model world: the page's scripts cannot make `innerText` or
            // `includes` answer what they like there.
            let shown = self
                .in_world(&page, &input.target, &script)
                .await
                .ok()
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
            if shown == present {
                let waited = if present { "text" } else { "textGone" };
                return Ok(json!({ "target": input.target, "waited": waited }));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(waited_too_long(
                    timeout,
                    if present {
                        "the text did not show"
                    } else {
                        "the text did not go"
                    },
                ));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    /// `pap.browser.navigate_back` (`step` -1) and `navigate_forward` (+1): the tab's history
    /// entry, judged by the navigation rule and the tab's jar like any other page.
    pub(super) async fn history(&self, caller: &AgentCaller, target: &str, step: i64) -> Result<Value, ToolError> {
        let page = self.target(Some(caller), target).await?;
        let history = raw(&page, "Page.getNavigationHistory", json!({})).await?;
        let current = history["currentIndex"].as_i64().unwrap_or(0);
        let wanted = current + step;
        let entry = usize::try_from(wanted)
            .ok()
            .and_then(|i| history["entries"].get(i))
            .ok_or_else(|| {
                ToolError::new(
                    ToolErrorCode::NotFound,
                    if step < 0 {
                        "this tab has no page before this one"
                    } else {
                        "this tab has no page after this one"
                    },
                )
            })?;
        let url = entry["url"].as_str().unwrap_or_default().to_owned();
        self.may_go(&url)?;
        self.same_jar(caller, target, &url).await?;
        raw(&page, "Page.navigateToHistoryEntry", json!({ "entryId": entry["id"] })).await?;
        // A page from the back-forward cache fires no load event: the history's index and a
        // complete document are what "arrived" means.
        let arrived = async {
            loop {
                let now = raw(&page, "Page.getNavigationHistory", json!({})).await?;
                if now["currentIndex"].as_i64() == Some(wanted) {
                    let ready = page
                        .evaluate("document.readyState")
                        .await
                        .ok()
                        .and_then(|r| r.value().and_then(Value::as_str).map(str::to_owned));
                    if ready.as_deref() == Some("complete") {
                        return Ok::<(), ToolError>(());
                    }
                }
                tokio::time::sleep(WAIT_POLL).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), arrived)
            .await
            .map_err(|_| ToolError::new(ToolErrorCode::Timeout, "the page did not load in 30 s"))??;
        let landed = page.url().await.map_err(|e| page::cdp(&e))?.unwrap_or_default();
        Ok(json!({ "target": target, "url": landed }))
    }

    /// `pap.browser.resize`: the tab's viewport, in CSS pixels.
    pub(super) async fn resize(&self, caller: &AgentCaller, input: input::Resize) -> Result<Value, ToolError> {
        if !(100..=4000).contains(&input.width) || !(100..=4000).contains(&input.height) {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                "width and height: 100 to 4000 CSS pixels",
            ));
        }
        let page = self.target(Some(caller), &input.target).await?;
        raw(
            &page,
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": input.width, "height": input.height, "deviceScaleFactor": 0, "mobile": false }),
        )
        .await?;
        Ok(json!({ "target": input.target, "width": input.width, "height": input.height }))
    }

    /// `pap.browser.console_messages`: what the tab's pages logged, the last
    /// [`CONSOLE_MESSAGES`], oldest first.
    pub(super) async fn console_messages(
        &self,
        caller: &AgentCaller,
        input: input::OnTarget,
    ) -> Result<Value, ToolError> {
        self.target(Some(caller), &input.target).await?;
        let console = self.targets.lock().await.get(&input.target).map(|t| t.console.clone());
        let messages: Vec<Value> = console
            .map(|c| {
                c.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(json!({ "target": input.target, "messages": messages }))
    }

    /// `pap.browser.pdf_save`: the page printed to `STATE/pdf/INSTANCE/TARGET-N.pdf` (0600, in a
    /// 0700 directory); the instance keeps its newest [`PDF_FILES`] PDFs, [`PDF_BYTES`] at most.
    pub(super) async fn pdf_save(&self, caller: &AgentCaller, input: input::OnTarget) -> Result<Value, ToolError> {
        use base64::Engine as _;
        let page = self.target(Some(caller), &input.target).await?;
        let printed = raw(&page, "Page.printToPDF", json!({ "printBackground": true })).await?;
        let pdf = base64::engine::general_purpose::STANDARD
            .decode(printed["data"].as_str().unwrap_or_default())
            .map_err(|_| ToolError::new(ToolErrorCode::Internal, "the browser's PDF was not base64"))?;
        let dir = crate::store::private_dir(&self.config.state_dir.join("pdf"))
            .and_then(|dir| crate::store::private_dir(&dir.join(self.instance.as_str())))
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("the PDF directory: {}", e.kind())))?;
        let n = self.next_target.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("{}-{n}.pdf", input.target));
        crate::store::write_private(&path, &pdf)
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("writing the PDF: {}", e.kind())))?;
        crate::store::keep_newest(&dir, &path, PDF_FILES, PDF_BYTES)
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("removing older PDFs: {}", e.kind())))?;
        Ok(json!({ "target": input.target, "path": path.display().to_string(), "bytes": pdf.len() }))
    }

    /// The clip of the element `element_ref` for a screenshot: its box in page coordinates.
    pub(super) async fn clip_of(&self, page: &Page, target: &str, element_ref: &str) -> Result<Value, ToolError> {
        let element = self.element(page, target, element_ref).await?;
        release(&element.session, &element.object).await;
        let backend = element.backend;
        // In a frame with a renderer of its own, the box is in the frame's coordinates.
        let (ox, oy) = in_view(page, &element, element_ref).await?;
        let model = raw(&element.session, "DOM.getBoxModel", json!({ "backendNodeId": backend }))
            .await
            .map_err(|_| gone(element_ref))?;
        let border: Vec<f64> = model["model"]["border"]
            .as_array()
            .map(|q| q.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        if border.len() != 8 {
            return Err(gone(element_ref));
        }
        let xs = [border[0] + ox, border[2] + ox, border[4] + ox, border[6] + ox];
        let ys = [border[1] + oy, border[3] + oy, border[5] + oy, border[7] + oy];
        let (left, right) = (
            xs.iter().copied().fold(f64::MAX, f64::min),
            xs.iter().copied().fold(f64::MIN, f64::max),
        );
        let (top, bottom) = (
            ys.iter().copied().fold(f64::MAX, f64::min),
            ys.iter().copied().fold(f64::MIN, f64::max),
        );
        if right - left < 1.0 || bottom - top < 1.0 {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!("ref {element_ref} has no box on the page (hidden?)"),
            ));
        }
        let metrics = raw(page, "Page.getLayoutMetrics", json!({})).await?;
        let page_x = metrics["cssVisualViewport"]["pageX"].as_f64().unwrap_or(0.0);
        let page_y = metrics["cssVisualViewport"]["pageY"].as_f64().unwrap_or(0.0);
        // Chromium draws at most 16384 pixels a side.
        let (width, height) = ((right - left).min(16_384.0), (bottom - top).min(16_384.0));
        Ok(json!({ "x": left + page_x, "y": top + page_y, "width": width, "height": height, "scale": 1 }))
    }
}

impl ToolHost {
    /// The dialog open on `target`'s page, if any.
    pub(super) async fn open_dialog(&self, target: &str) -> Option<Value> {
        let dialog = self.targets.lock().await.get(target).map(|t| t.dialog.clone())?;
        dialog.borrow().clone()
    }

    /// Refuses to act on a page a dialog holds: it is answered first.
    pub(super) async fn no_dialog(&self, target: &str) -> Result<(), ToolError> {
        match self.open_dialog(target).await {
            None => Ok(()),
            Some(dialog) => Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!(
                    "a {} dialog is open in tab {target}: answer it with browser_handle_dialog first",
                    dialog["type"].as_str().unwrap_or("JavaScript")
                ),
            )
            .with_cause(json!({ "dialog": dialog }))),
        }
    }

    /// `act`, unless a dialog opens on `target`'s page first: `None` then (the act's own answer
    /// would wait for the dialog to be answered; it is left behind).
    pub(super) async fn or_dialog<T>(
        &self,
        target: &str,
        act: impl std::future::Future<Output = T>,
    ) -> Result<Option<T>, ToolError> {
        let Some(dialog) = self.targets.lock().await.get(target).map(|t| t.dialog.clone()) else {
            return Ok(Some(act.await));
        };
        // A dialog open before the act is not the act's: it is answered first.
        if dialog.borrow().is_some() {
            return Err(self
                .no_dialog(target)
                .await
                .err()
                .unwrap_or_else(|| ToolError::new(ToolErrorCode::InputInvalid, "a dialog is open: answer it first")));
        }
        let mut opened = dialog.subscribe();
        tokio::select! {
            done = act => Ok(Some(done)),
            Ok(_) = opened.wait_for(Option::is_some) => Ok(None),
        }
    }

    /// `result` with the dialog its act opened, if one did.
    pub(super) async fn with_dialog(&self, target: &str, mut result: Value) -> Value {
        if let Some(dialog) = self.open_dialog(target).await {
            result["dialog"] = dialog;
        }
        result
    }

    /// `pap.browser.handle_dialog`: accept or dismiss. Accepting a dialog of a site where the
    /// person decides is refused (AIP-7: a `confirm()` there may be the decision itself);
    /// dismissing is not.
    pub(super) async fn handle_dialog(
        &self,
        caller: &AgentCaller,
        input: input::HandleDialog,
    ) -> Result<Value, ToolError> {
        let page = self.target(Some(caller), &input.target).await?;
        let dialog = self.open_dialog(&input.target).await.ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::NotFound,
                format!("no dialog is open in tab {}", input.target),
            )
        })?;
        if input.accept {
            let host = url::Url::parse(dialog["url"].as_str().unwrap_or_default())
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned));
            // A page without a host, or sites that cannot be read, count as the person's.
            let persons = match &host {
                Some(host) => self.persons().covers(host).map_err(|e| persons::unreadable(&e))?,
                None => true,
            };
            if persons {
                return Err(persons::refusal(
                    ToolId::HandleDialog,
                    &input.target,
                    "this dialog belongs to a site where the person decides (AIP-7): tools may dismiss it, never accept it",
                ));
            }
        }
        let mut params = json!({ "accept": input.accept });
        if let Some(text) = &input.prompt_text {
            params["promptText"] = json!(text.as_str());
        }
        let watched = self
            .targets
            .lock()
            .await
            .get(&input.target)
            .map(|t| t.dialog.subscribe());
        // CDP answers whichever dialog is open and names none, so a dialog that replaced the
        // judged one while the sites were read (the first closed by a navigation, another
        // opened) is refused here. This narrows the race, it cannot close it: one that
        // replaces it between this check and the command is answered on the first one's
        // judgement (accepting is judged by the same person's sites, and the request guard
        // still refuses what an accepted dialog would send to one).
        let ordinal = dialog["ordinal"].clone();
        if let Some(watched) = &watched
            && watched.borrow().as_ref().map(|d| &d["ordinal"]) != Some(&ordinal)
        {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!(
                    "the dialog in tab {} changed while it was being answered: take a new browser_snapshot",
                    input.target
                ),
            ));
        }
        raw(&page, "Page.handleJavaScriptDialog", params).await?;
        // The command answers before `javascriptDialogClosed` reaches the watcher: the call
        // returns once the page is free of this dialog, so the caller's next act does not meet
        // it. A page that opens another at once has it in the answer, to be answered in turn.
        let mut next = None;
        if let Some(mut watched) = watched {
            let moved_on = watched.wait_for(|d| d.as_ref().map(|d| &d["ordinal"]) != Some(&ordinal));
            if let Ok(Ok(now)) = tokio::time::timeout(DIALOG_CLOSE_WAIT, moved_on).await {
                next = now.clone();
            }
        }
        let mut answer = json!({ "target": input.target, "accepted": input.accept, "type": dialog["type"] });
        if let Some(next) = next {
            answer["dialog"] = next;
        }
        Ok(answer)
    }
}

/// The main frame's page-model world in its current document, as Chromium reported making it
/// (its execution context id), or none yet.
pub(super) type World = Arc<std::sync::Mutex<Option<i64>>>;

/// Has Chromium make the page-model world in each new document of `page` (as it makes
/// chromiumoxide's own utility world) and follows the main frame's: the first snapshot of a
/// page walks at once, without asking for its world first.
pub(super) async fn watch_worlds(page: &Page) -> Result<World, ToolError> {
    use chromiumoxide::cdp::js_protocol::runtime::EventExecutionContextCreated;
    let world: World = Arc::default();
    let mut created = page
        .event_listener::<EventExecutionContextCreated>()
        .await
        .map_err(|e| page::cdp(&e))?;
    raw(
        page,
        "Page.addScriptToEvaluateOnNewDocument",
        json!({ "source": "void 0", "worldName": WORLD }),
    )
    .await?;
    let main = page
        .mainframe()
        .await
        .map_err(|e| page::cdp(&e))?
        .map(|frame| frame.as_ref().to_owned());
    let latest = Arc::downgrade(&world);
    tokio::spawn(async move {
        while let Some(event) = created.next().await {
            let frame = event.context.aux_data.as_ref().and_then(|aux| aux["frameId"].as_str());
            if event.context.name != WORLD || frame.is_none() || frame != main.as_deref() {
                continue;
            }
            let Some(latest) = latest.upgrade() else { return };
            *latest.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(*event.context.id.inner());
        }
    });
    Ok(world)
}

/// Follows `page`'s JavaScript dialogs: the one open, if any.
pub(super) async fn watch_dialogs(page: &Page) -> Result<Dialog, ToolError> {
    use chromiumoxide::cdp::browser_protocol::page::{EventJavascriptDialogClosed, EventJavascriptDialogOpening};
    let (dialog, _) = tokio::sync::watch::channel(None);
    let dialog: Dialog = Arc::new(dialog);
    let mut opening = page
        .event_listener::<EventJavascriptDialogOpening>()
        .await
        .map_err(|e| page::cdp(&e))?;
    let mut closed = page
        .event_listener::<EventJavascriptDialogClosed>()
        .await
        .map_err(|e| page::cdp(&e))?;
    let open = Arc::downgrade(&dialog);
    tokio::spawn(async move {
        // The two events come on two streams, so their order between streams is not kept: a
        // dialog is open while more have opened than closed, and it is the latest one opened.
        let (mut opened, mut closed_count, mut latest) = (0_u64, 0_u64, None);
        loop {
            tokio::select! {
                Some(event) = opening.next() => {
                    opened += 1;
                    latest = Some(json!({
                        "ordinal": opened,
                        "type": format!("{:?}", event.r#type).to_lowercase(),
                        "message": event.message.chars().take(CONSOLE_CHARS).collect::<String>(),
                        "url": event.url,
                    }));
                }
                Some(_) = closed.next() => closed_count += 1,
                else => return,
            }
            let Some(open) = open.upgrade() else { return };
            open.send_replace((opened > closed_count).then(|| latest.clone()).flatten());
        }
    });
    Ok(dialog)
}

impl ToolHost {
    /// `pap.browser.file_upload`: files of the directories the person named for uploads
    /// ([`crate::chromium::ChromiumConfig::upload_dirs`]), each a regular file once every link
    /// is resolved, handed to a file input after the AIP-7 guard. The browser reads copies under
    /// `STATE/uploads/INSTANCE/` (as root, its sandbox user's: it cannot read the person's own
    /// files), never the originals.
    pub(super) async fn file_upload(&self, caller: &AgentCaller, input: input::FileUpload) -> Result<Value, ToolError> {
        if input.paths.is_empty() || input.paths.len() > UPLOAD_FILES {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!("paths: 1 to {UPLOAD_FILES} files"),
            ));
        }
        let roots: Vec<std::path::PathBuf> = self
            .config
            .upload_dirs
            .iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .collect();
        if roots.is_empty() {
            return Err(ToolError::new(
                ToolErrorCode::PermissionDenied,
                "the person named no directory for uploads (pap-agent --upload-dir DIR)",
            )
            .with_cause(json!({ "rule": "upload-dir" })));
        }
        let mut files = Vec::new();
        for (n, path) in input.paths.iter().enumerate() {
            // Which file it was is said by its place in `paths`, never by the path itself.
            let refused = || {
                ToolError::new(
                    ToolErrorCode::PermissionDenied,
                    format!("paths[{n}] is not a file in a directory the person named for uploads"),
                )
                .with_cause(json!({ "rule": "upload-dir", "index": n }))
            };
            let real = std::fs::canonicalize(path).map_err(|_| refused())?;
            if !roots.iter().any(|root| real.starts_with(root)) {
                return Err(refused());
            }
            let meta = std::fs::metadata(&real).map_err(|_| refused())?;
            if !meta.is_file() {
                return Err(refused());
            }
            if meta.len() > UPLOAD_BYTES {
                return Err(ToolError::new(
                    ToolErrorCode::InputInvalid,
                    format!("paths[{n}] is larger than {UPLOAD_BYTES} bytes"),
                ));
            }
            files.push(real);
        }
        let page = self.drivable(caller, ToolId::FileUpload, &input.target).await?;
        let answer = self
            .on_ref(
                &page,
                ToolId::FileUpload,
                &input.target,
                &input.element_ref,
                Script::Check("return (e.tagName === 'INPUT' && e.type === 'file') ? 'done' : 'not-file';"),
                Value::Null,
            )
            .await?;
        if answer == "not-file" {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                format!("ref {} is not a file input", input.element_ref),
            ));
        }
        let n = self.next_target.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copies = upload_copies(&self.config.state_dir, self.instance.as_str(), n, &files)
            .await
            .map_err(|e| ToolError::new(ToolErrorCode::Internal, format!("copying the files: {}", e.kind())))?;
        let element = self.element(&page, &input.target, &input.element_ref).await?;
        release(&element.session, &element.object).await;
        let backend = element.backend;
        let paths: Vec<String> = copies.iter().map(|p| p.display().to_string()).collect();
        raw(
            &element.session,
            "DOM.setFileInputFiles",
            json!({ "files": paths, "backendNodeId": backend }),
        )
        .await?;
        Ok(json!({ "target": input.target, "uploaded": copies.len() }))
    }
}

/// Copies of `files` the browser can read: `STATE/uploads/INSTANCE/N/I/NAME`, 0700 directories
/// and 0600 files, as root its sandbox user's.
async fn upload_copies(
    state_dir: &std::path::Path,
    instance: &str,
    n: u64,
    files: &[std::path::PathBuf],
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let uploads = crate::store::private_dir(&state_dir.join("uploads"))?;
    let of_instance = crate::store::private_dir(&uploads.join(instance))?;
    let dir = crate::store::private_dir(&of_instance.join(n.to_string()))?;
    let user = crate::chromium::BrowserUser::recorded(state_dir).map_err(std::io::Error::other)?;
    if let Some(user) = &user {
        user.pass_through(&uploads)?;
        user.pass_through(&of_instance)?;
        user.own(&dir)?;
    }
    let mut copies = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let slot = crate::store::private_dir(&dir.join(i.to_string()))?;
        let name = file.file_name().unwrap_or_else(|| std::ffi::OsStr::new("file"));
        let copy = slot.join(name);
        tokio::fs::copy(file, &copy).await?;
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        if let Some(user) = &user {
            user.own(&slot)?;
            user.own_file(&copy)?;
        }
        copies.push(copy);
    }
    crate::store::keep_newest(&of_instance, &dir, UPLOAD_SETS, UPLOAD_SETS_BYTES)?;
    Ok(copies)
}

fn covered(element_ref: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::NotFound,
        format!(
            "something else is over the middle of ref {element_ref} (an overlay?): a pointer there would not reach it"
        ),
    )
    .with_cause(json!({ "ref": element_ref, "rule": "covered" }))
}

fn waited_too_long(timeout: Duration, what: &str) -> ToolError {
    ToolError::new(ToolErrorCode::Timeout, format!("{what} in {} ms", timeout.as_millis()))
}

/// Starts keeping `page`'s console messages (the last [`CONSOLE_MESSAGES`]), each one's text
/// cut at [`CONSOLE_CHARS`].
pub(super) async fn log_console(page: &Page) -> Result<Console, ToolError> {
    use chromiumoxide::cdp::js_protocol::runtime::EventConsoleApiCalled;
    let console: Console = Arc::default();
    let mut calls = page
        .event_listener::<EventConsoleApiCalled>()
        .await
        .map_err(|e| page::cdp(&e))?;
    let log = console.clone();
    tokio::spawn(async move {
        while let Some(call) = calls.next().await {
            let text = call
                .args
                .iter()
                .map(|arg| match (&arg.value, &arg.description) {
                    (Some(Value::String(s)), _) => s.clone(),
                    (Some(other), _) => other.to_string(),
                    (None, Some(description)) => description.clone(),
                    (None, None) => format!("{:?}", arg.r#type).to_lowercase(),
                })
                .collect::<Vec<_>>()
                .join(" ");
            let text: String = text.chars().take(CONSOLE_CHARS).collect();
            let entry = json!({ "type": format!("{:?}", call.r#type).to_lowercase(), "text": text });
            let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if log.len() >= CONSOLE_MESSAGES {
                log.pop_front();
            }
            log.push_back(entry);
        }
    });
    Ok(console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_read_back_and_nothing_else_does() {
        assert_eq!(ref_key("e12").unwrap(), (0, 12));
        assert_eq!(ref_key("f2e7").unwrap(), (2, 7));
        for bad in [
            "12",
            "e",
            "e-1",
            "e0",
            "ex",
            "E12",
            "e1 2",
            "e012",
            "e+1",
            "f",
            "fe1",
            "f0e1",
            "f01e1",
            "f2",
            "f2e",
            "f2e0",
            "f-1e1",
            "f2f3e1",
            "f2e1e1",
            "e99999999999999999999",
        ] {
            assert_eq!(ref_key(bad).unwrap_err().code, ToolErrorCode::InputInvalid, "{bad}");
        }
    }

    #[test]
    fn a_tab_remembers_its_latest_refs_only_up_to_its_bound() {
        let mut refs = Refs::default();
        for n in 0..(REFS_PER_TAB as i64 + 5) {
            refs.remember((0, n));
        }
        assert_eq!(refs.given.len(), REFS_PER_TAB);
        assert!(!refs.given.contains(&(0, 0)) && refs.given.contains(&(0, REFS_PER_TAB as i64 + 4)));
    }

    #[test]
    fn a_frame_number_is_given_once_per_document_and_the_oldest_go_with_their_refs() {
        let world = |frame: &str, world: i64| FrameWorld {
            frame: frame.to_owned(),
            world,
            session: None,
            owner: 1,
            loader: "L".to_owned(),
        };
        let mut refs = Refs::default();
        refs.for_world("main", 1);
        let generation = refs.generation;
        let first = refs.new_frame_number();
        assert!(refs.for_frame(first, world("a", 10), generation));
        refs.remember((first, 1));
        // A number names one world: another walk cannot take it over.
        assert!(!refs.for_frame(first, world("c", 12), generation));
        assert!(refs.for_frame(first, world("a", 10), generation));
        // The same frame in a new world (its next document) gets a new number: its old refs
        // do not name the new world's elements.
        let second = refs.new_frame_number();
        assert_ne!(first, second);
        assert!(refs.for_frame(second, world("a", 11), generation));
        assert_eq!(refs.frame_known("a").unwrap().0, second);
        assert_eq!(refs.frame(first).unwrap().world, 10);
        for _ in 0..FRAMES_PER_TAB {
            let k = refs.new_frame_number();
            assert!(refs.for_frame(k, world("b", 20 + i64::try_from(k).unwrap()), generation));
        }
        assert_eq!(refs.frames.len(), FRAMES_PER_TAB);
        assert!(refs.frame(first).is_none() && !refs.given.contains(&(first, 1)));
        // A new main document starts again, and a walk begun before keeps nothing.
        refs.for_world("next", 2);
        assert!(refs.frames.is_empty() && refs.new_frame_number() == 1);
        assert!(!refs.for_frame(1, world("a", 30), generation));
        assert!(refs.frames.is_empty());
    }

    #[test]
    fn keys_are_named_or_one_character() {
        assert_eq!(key_of("Enter").unwrap().2, 13);
        assert_eq!(key_of("a").unwrap(), ("a".into(), "KeyA".into(), 65, Some("a".into())));
        assert_eq!(key_of("Space").unwrap().0, " ");
        assert!(key_of("Hyper").is_err() && key_of("").is_err() && key_of("\u{7}").is_err());
    }
}
