//! A tab opened ahead (issue 42). Opening a tab is half of a join in a new tab: about 100 ms
//! of Chromium making the tab (76 ms here) and chromiumoxide's set-up, one command at a time.
//! Once a join has landed, the tools open the next tab of that join's context in the
//! background ([`super::ToolHost::open_ahead`]); the next tab opened in the same context, in
//! the same boot, takes it instead of waiting for a new one.
//!
//! At most one tab waits per context, and at most [`MAX_WAITING`] in all (the oldest closes for
//! a new one), each on the `about:blank` every new tab starts with, opened behind the tab in
//! front (which keeps the front, and its page stays visible). So devices that join in turn (each
//! its own context) each find theirs. A tab ahead is listed nowhere (no target id, no device's
//! tab count) and nothing is sent to it, so a join taken into it still finds it new
//! (`pap_agent::still_new` checks, whatever this module promises). It holds no material of its
//! own: it lives in a context that does, and ends with that context (a revoke, a device's end) or
//! with the browser; one no tab took is closed after [`WAITS`], or sooner by the idle reaper. The
//! cost is one idle tab and its renderer each (9 to 13 MiB here).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};

use crate::chromium::{ContextId, ControlledBrowser};

/// How long a tab opened ahead waits for a tab to take it before it is closed.
pub(super) const WAITS: Duration = Duration::from_secs(120);

/// The most tabs that wait ahead at once, over all contexts: at most this many idle renderers.
pub(super) const MAX_WAITING: usize = 4;

/// The tabs opened ahead, and how many of them a tab took.
#[derive(Clone, Default)]
pub(super) struct Ahead {
    slots: Arc<Mutex<Slots<Option<ContextId>, Page>>>,
    taken: Arc<AtomicU64>,
}

impl Ahead {
    /// The tab opened ahead in `context` during boot `boot_id`, taken out of its slot. Those of
    /// an earlier boot are closed; those of other contexts keep waiting.
    pub(super) fn take(&self, boot_id: u64, context: Option<&ContextId>) -> Option<Page> {
        let (taken, stale) = self.slots().take(boot_id, &context.cloned());
        stale.into_iter().for_each(close_later);
        taken
    }

    /// Counts a tab opened ahead that a tab took and brought to the front.
    pub(super) fn served(&self) {
        self.taken.fetch_add(1, Ordering::Relaxed);
    }

    /// Closes the tabs waiting in `contexts`, which end: they free their slots at once.
    pub(super) fn ended(&self, contexts: &[ContextId]) {
        let gone = self
            .slots()
            .ended(|context| context.as_ref().is_some_and(|c| contexts.contains(c)));
        gone.into_iter().for_each(close_later);
    }

    /// Opens a tab in `context` of `browser` (boot `boot_id`) in the background and puts it in
    /// that context's slot, closing the one it replaces (or, all slots taken, the oldest); after
    /// [`WAITS`] it is closed if still there. The receiver hears the tab's target id once the tab
    /// waits, and nothing when the browser could not open it (the context ended meanwhile, the
    /// browser stopped).
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
            let (serial, closed) = ahead.slots().put(boot_id, context, page, Instant::now());
            closed.into_iter().for_each(close_later);
            let Some(serial) = serial else { return };
            let _ = opened.send(target);
            tokio::time::sleep(WAITS).await;
            ahead.slots().remove(serial).into_iter().for_each(close_later);
        });
        heard
    }

    /// Closes each tab opened ahead that has waited `idle` at `now` (the idle reaper's
    /// threshold, L11): an idle browser keeps no tab for a join that does not come.
    pub(super) fn reap(&self, now: Instant, idle: Duration) {
        self.slots().reap(now, idle).into_iter().for_each(close_later);
    }

    /// Whether a tab waits ahead now.
    #[cfg(feature = "test-support")]
    pub(super) fn waits(&self) -> bool {
        !self.slots().waiting.is_empty()
    }

    /// How many tabs opened ahead a tab took, since the host started.
    #[cfg(feature = "test-support")]
    pub(super) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots<Option<ContextId>, Page>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The slots themselves, apart from the browser (`C` a context, `P` a tab): what waits where,
/// and what to close. Every method returns the tabs it took out, for closing.
struct Slots<C, P> {
    waiting: Vec<Waiting<C, P>>,
    /// The serial of the next tab put in, so that a tab's own timer removes that tab only.
    next: u64,
}

impl<C, P> Default for Slots<C, P> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            next: 0,
        }
    }
}

/// A tab opened ahead, and where it may serve.
struct Waiting<C, P> {
    serial: u64,
    boot_id: u64,
    /// For the browser, `None` is the default context.
    context: C,
    page: P,
    opened: Instant,
}

impl<C: PartialEq, P> Slots<C, P> {
    /// The tab of `context` in boot `boot_id`, if one waits, and every tab of another boot.
    fn take(&mut self, boot_id: u64, context: &C) -> (Option<P>, Vec<P>) {
        let stale = self.drain(|w| w.boot_id != boot_id);
        let taken = self.drain(|w| &w.context == context).into_iter().next();
        (taken, stale)
    }

    /// Puts `page` in the slot of `context`: its serial, and the tabs it displaced (the one of
    /// that context, those of an earlier boot, and the oldest when [`MAX_WAITING`] wait). A tab
    /// of a boot older than one that waits (opened late, before a relaunch) is not put in: no
    /// serial, and the tab itself to close.
    fn put(&mut self, boot_id: u64, context: C, page: P, opened: Instant) -> (Option<u64>, Vec<P>) {
        if self.waiting.iter().any(|w| w.boot_id > boot_id) {
            return (None, vec![page]);
        }
        let mut closed = self.drain(|w| w.boot_id < boot_id || w.context == context);
        if self.waiting.len() >= MAX_WAITING {
            // Oldest first: the vector is in the order the tabs were put in.
            let over = self.waiting.len() + 1 - MAX_WAITING;
            closed.extend(self.waiting.drain(..over).map(|w| w.page));
        }
        let serial = self.next;
        self.next += 1;
        self.waiting.push(Waiting {
            serial,
            boot_id,
            context,
            page,
            opened,
        });
        (Some(serial), closed)
    }

    /// The tab put in as `serial`, if it still waits.
    fn remove(&mut self, serial: u64) -> Vec<P> {
        self.drain(|w| w.serial == serial)
    }

    /// Every tab of a context `gone` says ended.
    fn ended(&mut self, gone: impl Fn(&C) -> bool) -> Vec<P> {
        self.drain(|w| gone(&w.context))
    }

    /// Every tab that has waited `idle` at `now`.
    fn reap(&mut self, now: Instant, idle: Duration) -> Vec<P> {
        self.drain(|w| now.saturating_duration_since(w.opened) >= idle)
    }

    fn drain(&mut self, out: impl Fn(&Waiting<C, P>) -> bool) -> Vec<P> {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting).into_iter().partition(|w| out(w));
        self.waiting = kept;
        gone.into_iter().map(|w| w.page).collect()
    }
}

/// Closes `page` without waiting for the browser's answer: a tab already gone (its context
/// ended, the browser stopped) has nothing to close.
fn close_later(page: Page) {
    tokio::spawn(async move {
        let _ = page.close().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_context_keeps_its_own_tab_and_the_oldest_goes_past_the_limit() {
        let now = Instant::now();
        let mut slots = Slots::default();
        // Two contexts in turn: each keeps its own.
        assert!(slots.put(1, "a", "a1", now).1.is_empty());
        assert!(slots.put(1, "b", "b1", now).1.is_empty());
        assert_eq!(slots.take(1, &"a"), (Some("a1"), vec![]));
        assert_eq!(slots.take(1, &"a"), (None, vec![]));
        // A second tab of one context replaces its first.
        assert_eq!(slots.put(1, "b", "b2", now).1, vec!["b1"]);
        // The default context (here "") is a context too.
        assert!(slots.put(1, "", "d1", now).1.is_empty());
        assert!(slots.put(1, "c", "c1", now).1.is_empty());
        assert!(slots.put(1, "e", "e1", now).1.is_empty());
        // A fifth: the oldest (b2) goes.
        assert_eq!(slots.put(1, "f", "f1", now).1, vec!["b2"]);
        assert_eq!(slots.waiting.len(), MAX_WAITING);
        assert_eq!(slots.take(1, &"b"), (None, vec![]));
        assert_eq!(slots.take(1, &""), (Some("d1"), vec![]));
    }

    #[test]
    fn a_new_boot_closes_every_tab_of_the_last_and_serves_none() {
        let now = Instant::now();
        let mut slots = Slots::default();
        slots.put(1, "a", "a1", now);
        slots.put(1, "b", "b1", now);
        assert_eq!(slots.take(2, &"a"), (None, vec!["a1", "b1"]));
        assert!(slots.waiting.is_empty());
        slots.put(1, "a", "a1", now);
        assert_eq!(slots.put(2, "b", "b2", now).1, vec!["a1"]);
        // A tab of boot 1 opened late, once boot 2's tabs wait: closed, not put in.
        assert_eq!(slots.put(1, "c", "c1", now), (None, vec!["c1"]));
        assert_eq!(slots.take(2, &"b"), (Some("b2"), vec![]));
    }

    #[test]
    fn a_timer_removes_its_own_tab_only_and_the_reaper_the_idle_ones() {
        let now = Instant::now();
        let mut slots = Slots::default();
        let first = slots.put(1, "a", "a1", now).0.unwrap();
        // Replaced: the first tab's timer finds nothing of its own.
        slots.put(1, "a", "a2", now + Duration::from_secs(10));
        assert!(slots.remove(first).is_empty());
        slots.put(1, "b", "b1", now + Duration::from_secs(30));
        let later = now + Duration::from_secs(70);
        assert_eq!(slots.reap(later, Duration::from_secs(60)), vec!["a2"]);
        assert_eq!(slots.take(1, &"b"), (Some("b1"), vec![]));
    }

    #[test]
    fn a_context_that_ends_frees_its_slot_at_once() {
        let now = Instant::now();
        let mut slots = Slots::default();
        slots.put(1, "a", "a1", now);
        slots.put(1, "b", "b1", now);
        assert_eq!(slots.ended(|c| *c == "a"), vec!["a1"]);
        assert_eq!(slots.take(1, &"a"), (None, vec![]));
        assert_eq!(slots.waiting.len(), 1);
    }
}
