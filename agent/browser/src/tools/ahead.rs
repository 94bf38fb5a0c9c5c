//! A tab opened ahead (issue 42). Opening a tab is half of a join in a new tab: about 100 ms
//! of Chromium making the tab (76 ms here) and chromiumoxide's set-up, one command at a time.
//! Once a join has landed, the tools open the next tab of that join's context in the
//! background ([`super::ToolHost::open_ahead`]); the next tab opened in the same context, in
//! the same boot, takes it instead of waiting for a new one.
//!
//! At most one tab waits at a time, on the `about:blank` every new tab starts with, opened behind
//! the tab in front (which keeps the front, and its page stays visible). It is listed nowhere (no
//! target id, no device's tab count) and nothing is sent to it, so a join taken into it still
//! finds it new (`pap_agent::still_new` checks, whatever this module promises). It holds no
//! material of its own: it lives in a context that does, and ends with that context (a revoke, a
//! device's end) or with the browser; one no tab took is closed after [`WAITS`], or sooner by
//! the idle reaper. The cost is one idle tab and its renderer (9 to 13 MiB here).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};

use crate::chromium::{ContextId, ControlledBrowser};

/// How long a tab opened ahead waits for a tab to take it before it is closed.
pub(super) const WAITS: Duration = Duration::from_secs(120);

/// The slot of the tab opened ahead, and how many such tabs a tab took.
#[derive(Clone, Default)]
pub(super) struct Ahead {
    slot: Arc<Mutex<Option<Waiting>>>,
    taken: Arc<AtomicU64>,
}

/// A tab opened ahead, and where it may serve.
struct Waiting {
    boot_id: u64,
    /// `None`: the default context.
    context: Option<ContextId>,
    page: Page,
    opened: Instant,
}

impl Ahead {
    /// The tab opened ahead in `context` during boot `boot_id`, taken out of the slot. One that
    /// waits in another context or boot is closed: the slot then stays empty.
    pub(super) fn take(&self, boot_id: u64, context: Option<&ContextId>) -> Option<Page> {
        let waiting = self.slot().take()?;
        if waiting.boot_id == boot_id && waiting.context.as_ref() == context {
            self.taken.fetch_add(1, Ordering::Relaxed);
            return Some(waiting.page);
        }
        close_later(waiting.page);
        None
    }

    /// Opens a tab in `context` of `browser` (boot `boot_id`) in the background and puts it in
    /// the slot, closing the one it replaces; after [`WAITS`] it is closed if still there. The
    /// receiver hears the tab's target id once the tab waits in the slot, and nothing when the
    /// browser could not open it (the context ended meanwhile, the browser stopped).
    pub(super) fn open(
        &self,
        browser: Arc<ControlledBrowser>,
        boot_id: u64,
        context: Option<ContextId>,
    ) -> oneshot::Receiver<TargetId> {
        let ahead = self.clone();
        let (opened, heard) = oneshot::channel();
        tokio::spawn(async move {
            let Ok(page) = browser.new_background_page_in(context.as_ref()).await else {
                return;
            };
            drop(browser);
            let target = page.target_id().clone();
            let waiting = Waiting {
                boot_id,
                context,
                page,
                opened: Instant::now(),
            };
            if let Some(replaced) = ahead.slot().replace(waiting) {
                close_later(replaced.page);
            }
            let _ = opened.send(target.clone());
            tokio::time::sleep(WAITS).await;
            let mut slot = ahead.slot();
            if slot.as_ref().is_some_and(|waiting| waiting.page.target_id() == &target)
                && let Some(waiting) = slot.take()
            {
                close_later(waiting.page);
            }
        });
        heard
    }

    /// Closes the tab opened ahead once it has waited `idle` at `now` (the idle reaper's
    /// threshold, L11): an idle browser keeps no tab for a join that does not come.
    pub(super) fn reap(&self, now: Instant, idle: Duration) {
        let mut slot = self.slot();
        if slot
            .as_ref()
            .is_some_and(|waiting| now.saturating_duration_since(waiting.opened) >= idle)
            && let Some(waiting) = slot.take()
        {
            close_later(waiting.page);
        }
    }

    /// Whether a tab waits in the slot now.
    pub(super) fn waits(&self) -> bool {
        self.slot().is_some()
    }

    /// How many tabs opened ahead a tab took, since the host started.
    pub(super) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Waiting>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Closes `page` without waiting for the browser's answer: a tab already gone (its context
/// ended, the browser stopped) has nothing to close.
fn close_later(page: Page) {
    tokio::spawn(async move {
        let _ = page.close().await;
    });
}
