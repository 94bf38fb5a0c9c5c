//! A tab opened ahead (issue 42). Opening a tab is half of a join in a new tab: about 100 ms
//! of Chromium making the tab (76 ms here) and chromiumoxide's set-up, one command at a time.
//! Once a join has landed, the tools open the next tab of that join's context in the
//! background ([`super::ToolHost::open_ahead`]); the next tab opened in the same context, in
//! the same boot, takes it instead of waiting for a new one.
//!
//! At most one tab waits at a time, on the `about:blank` every new tab starts with. It is listed
//! nowhere (no target id, no device's tab count) and nothing is sent to it, so a join taken into
//! it still finds it new (`pap_agent::still_new` checks, whatever this module promises). It
//! holds no material of its own: it lives in a context that does, and ends with that context
//! (a revoke, a device's end) or with the browser. The cost is one idle tab and its renderer.

use std::sync::{Arc, Mutex, PoisonError};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

use crate::chromium::{ContextId, ControlledBrowser};

/// The slot of the tab opened ahead.
#[derive(Clone, Default)]
pub(super) struct Ahead(Arc<Mutex<Option<Waiting>>>);

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
            return Some(waiting.page);
        }
        close_later(waiting.page);
        None
    }

    /// Opens a tab in `context` of `browser` (boot `boot_id`) in the background and puts it in
    /// the slot, closing the one it replaces. The task answers the tab's target id, or `None`
    /// when the browser could not open it (the context ended meanwhile, the browser stopped).
    pub(super) fn open(
        &self,
        browser: Arc<ControlledBrowser>,
        boot_id: u64,
        context: Option<ContextId>,
    ) -> JoinHandle<Option<TargetId>> {
        let ahead = self.clone();
        tokio::spawn(async move {
            let page = browser.new_page_in(context.as_ref()).await.ok()?;
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
            Some(target)
        })
    }

    /// Closes the tab opened ahead once it has waited `idle` at `now` (the idle reaper's
    /// threshold, L11): an idle browser keeps no tab for a join that does not come.
    pub(super) fn reap(&self, now: Instant, idle: Duration) -> bool {
        let mut slot = self.slot();
        if slot
            .as_ref()
            .is_some_and(|waiting| now.saturating_duration_since(waiting.opened) >= idle)
            && let Some(waiting) = slot.take()
        {
            close_later(waiting.page);
            return true;
        }
        false
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Waiting>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Closes `page` without waiting for the browser's answer: a tab already gone (its context
/// ended, the browser stopped) has nothing to close.
fn close_later(page: Page) {
    tokio::spawn(async move {
        let _ = page.close().await;
    });
}
