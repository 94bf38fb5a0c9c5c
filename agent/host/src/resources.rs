//! Resources an embedder serves beside its tools, and the subscriptions that tell a client when
//! one changes (MCP resources: `resources/list`, `resources/templates/list`, `resources/read`;
//! `resources/subscribe` for clients of protocol 2025-11-25 and before, `subscriptions/listen`
//! for 2026-07-28). The PAP agent serves the operations its devices proposed: a client that
//! subscribed to one hears `notifications/resources/updated` when the person confirms or cancels
//! it in their console, and reads the outcome (issue 40, item 3; AIP-7: the person decides, the
//! device only learns).
//!
//! Nothing pushes a change to the host: a watch reads each subscribed resource again, every
//! second for the first two minutes and every 5 s after, for at most an hour ([`Pace`]), and
//! notifies when the text it reads differs from the last. A resource that settles (an operation
//! no longer `proposed`), or that can no longer be read, is notified once more and no longer
//! read; one already settled, or unreadable, when the watch begins is notified at once (the
//! person may have decided between the client's read and its subscription); a read that fails
//! for now (an error marked retryable: a company that does not answer) is tried again next
//! time.
//!
//! What a device may make the host do is bounded per device, whatever its sessions and streams:
//! it watches at most [`WATCHED_AT_MOST`] resources at once ([`Budget`], shared by every session
//! of a server, so a stateless `subscriptions/listen` request, served by a fresh server
//! instance, counts too), and each read a watch makes is one of the device's resource requests
//! under its rate limit (a read refused by it is tried next round).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pap_browser::spec::{AgentCaller, ToolError};
use rmcp::ErrorData as McpError;
use rmcp::model::{Resource, ResourceTemplate};

/// How many resources one device may watch at once, over all its MCP sessions and streams.
pub const WATCHED_AT_MOST: usize = 16;

/// What each device watches now ([`WATCHED_AT_MOST`] each), shared by every session of a
/// server. An entry lives while its device watches something.
#[derive(Clone, Debug, Default)]
pub struct Budget(Arc<Mutex<HashMap<String, usize>>>);

impl Budget {
    /// Up to `wanted` of `device`'s room, held until the [`Held`] is dropped (none when the
    /// device already watches its [`WATCHED_AT_MOST`]).
    pub fn take(&self, device: &str, wanted: usize) -> Held {
        let mut watching = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = watching.get(device).copied().unwrap_or(0);
        let count = wanted.min(WATCHED_AT_MOST.saturating_sub(now));
        if count > 0 {
            watching.insert(device.to_owned(), now + count);
        }
        Held {
            budget: self.clone(),
            device: device.to_owned(),
            count,
        }
    }

    /// How many `device` watches now.
    pub fn watching(&self, device: &str) -> usize {
        let watching = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watching.get(device).copied().unwrap_or(0)
    }
}

/// A share of a device's [`Budget`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Budget,
    device: String,
    count: usize,
}

impl Held {
    /// How many watches it holds.
    pub fn count(&self) -> usize {
        self.count
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.count == 0 {
            return;
        }
        let mut watching = self.budget.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(now) = watching.get_mut(&self.device) {
            *now = now.saturating_sub(self.count);
            if *now == 0 {
                watching.remove(&self.device);
            }
        }
    }
}

/// Resources an embedder serves beside the browser's tools, under the same device
/// authentication: each read runs as the device that asked, which sees only its own.
#[async_trait::async_trait]
pub trait ExtraResources: Send + Sync + fmt::Debug {
    /// The URI templates of the resources (what a client may read beyond what is listed).
    fn templates(&self) -> Vec<ResourceTemplate>;

    /// Whether `uri` is one of these in form (its scheme): anything else is not found, unread.
    fn names(&self, uri: &str) -> bool;

    /// The resources `caller` may read now, newest first.
    async fn list(&self, caller: &AgentCaller) -> Vec<Resource>;

    /// Reads `uri` as `caller`.
    async fn read(&self, caller: &AgentCaller, uri: &str) -> Result<Reading, ToolError>;
}

/// What one read of a resource gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Its contents, as text (a watch compares them to notice a change).
    pub text: String,
    /// Their media type.
    pub mime_type: &'static str,
    /// Whether it can still change: a settled one is no longer watched.
    pub settled: bool,
}

/// How often a watch reads its resources again, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// The gap between reads at first...
    pub first: Duration,
    /// ... for this long after the watch began...
    pub first_for: Duration,
    /// ... then this gap.
    pub then: Duration,
    /// A watch ends after this long, whatever is left.
    pub at_most: Duration,
}

impl Default for Pace {
    /// Every second for two minutes (a person who decides at once is heard within a second),
    /// then every 5 s, for an hour.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            first_for: Duration::from_secs(120),
            then: Duration::from_secs(5),
            at_most: Duration::from_secs(3600),
        }
    }
}

/// One MCP session's `resources/subscribe` watches, by URI (to unsubscribe); they end with the
/// session (dropped, they are aborted).
#[derive(Clone, Debug, Default)]
pub(crate) struct Subscribed(Arc<Mutex<Watches>>);

#[derive(Debug, Default)]
pub(crate) struct Watches {
    by_uri: HashMap<String, tokio::task::AbortHandle>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in self.by_uri.values() {
            task.abort();
        }
    }
}

impl Subscribed {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the session watches `uri`.
    pub(crate) fn has(&self, uri: &str) -> bool {
        self.lock().by_uri.contains_key(uri)
    }

    /// Runs `watching` as the session's watch of `uri`, unless it already has one (then
    /// `watching` is dropped unrun); over, it is forgotten, so `uri` may be subscribed again.
    pub(crate) fn spawn(&self, uri: String, watching: impl Future<Output = ()> + Send + 'static) {
        let mut watches = self.lock();
        if watches.by_uri.contains_key(&uri) {
            return;
        }
        let session = Arc::downgrade(&self.0);
        let key = uri.clone();
        let task = tokio::spawn(async move {
            watching.await;
            if let Some(session) = session.upgrade() {
                let mut watches = session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if watches.by_uri.get(&key).is_some_and(|t| t.id() == tokio::task::id()) {
                    watches.by_uri.remove(&key);
                }
            }
        });
        watches.by_uri.insert(uri, task.abort_handle());
    }

    /// Ends the session's watch of `uri`, if it has one.
    pub(crate) fn end(&self, uri: &str) {
        if let Some(task) = self.lock().by_uri.remove(uri) {
            task.abort();
        }
    }
}

/// The bucket of the per-device rate limit every resource request shares.
const RESOURCES: &str = "resources";

/// Whether `device` may make one more resource request now (a watch's read is one).
pub(crate) fn may_read(rate: &crate::rate::RateLimit, device: &str) -> bool {
    rate.check(device, RESOURCES, tokio::time::Instant::now()).is_ok()
}

/// `device`'s resource request, counted: refused (-32600, `retryAfterMs`) past its rate.
pub(crate) fn within_rate(rate: &crate::rate::RateLimit, device: &str) -> Result<(), McpError> {
    let Err(wait) = rate.check(device, RESOURCES, tokio::time::Instant::now()) else {
        return Ok(());
    };
    let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
    Err(McpError::invalid_request(
        format!(
            "this device asked for resources too often (at most {} a second, {} at once); retry in {millis} ms",
            crate::rate::PER_SECOND,
            crate::rate::BURST
        ),
        Some(serde_json::json!({ "retryAfterMs": millis })),
    ))
}

/// Reads `uri` as `caller`: one not of `resources`' form, or one the caller may not read, is not
/// found (-32002); one that cannot be read now is an internal error saying why.
pub(crate) async fn read(resources: &dyn ExtraResources, caller: &AgentCaller, uri: &str) -> Result<Reading, McpError> {
    if !resources.names(uri) {
        return Err(McpError::resource_not_found(
            format!(
                "no resource here has this URI: {}",
                uri.chars().take(128).collect::<String>()
            ),
            None,
        ));
    }
    resources.read(caller, uri).await.map_err(|error| {
        if error.retryable == Some(true) {
            McpError::internal_error(error.message, None)
        } else {
            McpError::resource_not_found(error.message, None)
        }
    })
}

/// Why a watch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every resource settled or can no longer be read (each was notified).
    Settled,
    /// The client went (a notification could not be sent, or `listening` said no).
    ClientGone,
    /// [`Pace::at_most`] passed.
    TimedOut,
}

/// Watches `watched` (each URI with what it read when the watch began, `None` when that read
/// failed) as `caller` at `pace`, calling `notify(uri)` each time a read differs from the last
/// one (at once for one settled or unread at the start); `notify` answers whether the client
/// still listens, `listening` is asked before each round, and `may_read` before each read (the
/// device's rate limit: a read it refuses waits for the next round).
pub async fn watch<N, F>(
    resources: &dyn ExtraResources,
    caller: &AgentCaller,
    watched: Vec<(String, Option<Reading>)>,
    pace: Pace,
    may_read: impl Fn() -> bool,
    listening: impl Fn() -> bool,
    mut notify: N,
) -> Ended
where
    N: FnMut(String) -> F,
    F: Future<Output = bool>,
{
    let began = tokio::time::Instant::now();
    let mut last: HashMap<String, String> = HashMap::new();
    for (uri, reading) in watched {
        match reading {
            Some(reading) if !reading.settled => {
                last.insert(uri, reading.text);
            }
            // Decided (or gone) before the watch began: said now, as a change would be.
            _ => {
                if !notify(uri).await {
                    return Ended::ClientGone;
                }
            }
        }
    }
    while !last.is_empty() {
        let gap = if began.elapsed() < pace.first_for {
            pace.first
        } else {
            pace.then
        };
        if began.elapsed() + gap > pace.at_most {
            return Ended::TimedOut;
        }
        tokio::time::sleep(gap).await;
        if !listening() {
            return Ended::ClientGone;
        }
        let uris: Vec<String> = last.keys().filter(|_| may_read()).cloned().collect();
        let reads = futures_util::future::join_all(uris.iter().map(|uri| resources.read(caller, uri))).await;
        for (uri, read) in uris.into_iter().zip(reads) {
            let (text, done) = match read {
                Ok(reading) => (Some(reading.text), reading.settled),
                // Gone for this caller (signed out, unpaired): said once, then no longer read.
                Err(error) if error.retryable != Some(true) => (None, true),
                // Not answered now: read again next time.
                Err(_) => continue,
            };
            let changed = text.as_ref().is_none_or(|text| last.get(&uri) != Some(text));
            if changed && !notify(uri.clone()).await {
                return Ended::ClientGone;
            }
            match text {
                Some(text) if !done => {
                    last.insert(uri, text);
                }
                _ => {
                    last.remove(&uri);
                }
            }
        }
    }
    Ended::Settled
}

/// A test double of [`ExtraResources`]: `test://` URIs whose state a test sets, reads counted.
#[cfg(test)]
pub(crate) mod board {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use pap_browser::spec::ToolErrorCode;
    use std::sync::Mutex;

    /// Resources whose state a test sets, counting reads.
    #[derive(Debug, Default)]
    pub(crate) struct Board {
        pub(crate) states: Mutex<HashMap<String, Result<&'static str, bool>>>,
        pub(crate) reads: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ExtraResources for Board {
        fn templates(&self) -> Vec<ResourceTemplate> {
            Vec::new()
        }
        fn names(&self, uri: &str) -> bool {
            uri.starts_with("test://")
        }
        async fn list(&self, _: &AgentCaller) -> Vec<Resource> {
            Vec::new()
        }
        async fn read(&self, _: &AgentCaller, uri: &str) -> Result<Reading, ToolError> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match self.states.lock().unwrap().get(uri).copied() {
                Some(Ok(state)) => Ok(Reading {
                    text: state.to_owned(),
                    mime_type: "text/plain",
                    settled: state != "proposed",
                }),
                Some(Err(true)) => Err(ToolError::new(ToolErrorCode::Timeout, "the company did not answer")),
                Some(Err(false)) => Err(ToolError::new(ToolErrorCode::PermissionDenied, "signed out")),
                None => Err(ToolError::new(ToolErrorCode::NotFound, "no such resource")),
            }
        }
    }

    pub(crate) fn set(board: &Board, uri: &str, state: Result<&'static str, bool>) {
        board.states.lock().unwrap().insert(uri.to_owned(), state);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::board::{Board, set};
    use super::*;
    use std::sync::{Arc, Mutex};

    fn proposed() -> Option<Reading> {
        Some(Reading {
            text: "proposed".to_owned(),
            mime_type: "text/plain",
            settled: false,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_notified_once_within_a_second_and_a_settled_resource_is_no_longer_read() {
        let board = Arc::new(Board::default());
        set(&board, "test://a", Ok("proposed"));
        set(&board, "test://b", Ok("proposed"));
        let heard = Arc::new(Mutex::new(Vec::new()));
        let watching = {
            let (board, heard) = (board.clone(), heard.clone());
            tokio::spawn(async move {
                let caller = AgentCaller::paired("dev_a".to_owned());
                watch(
                    board.as_ref(),
                    &caller,
                    vec![("test://a".to_owned(), proposed()), ("test://b".to_owned(), proposed())],
                    Pace::default(),
                    || true,
                    || true,
                    |uri| {
                        heard.lock().unwrap().push((uri, tokio::time::Instant::now()));
                        async { true }
                    },
                )
                .await
            })
        };
        let start = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        assert!(heard.lock().unwrap().is_empty(), "nothing changed, nothing said");
        set(&board, "test://a", Ok("succeeded"));
        tokio::time::sleep(Duration::from_millis(1000)).await;
        {
            let heard = heard.lock().unwrap();
            assert_eq!(heard.len(), 1);
            assert_eq!(heard[0].0, "test://a");
            assert_eq!(
                heard[0].1 - start,
                Duration::from_secs(11),
                "heard at the next read, within 1 s"
            );
        }
        // "a" settled: read no more; "b" still is, each second.
        let reads = board.reads.load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(board.reads.load(std::sync::atomic::Ordering::Relaxed) - reads, 10);
        // A read that fails for now is no change; one that cannot succeed any more is said once.
        set(&board, "test://b", Err(true));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(heard.lock().unwrap().len(), 1);
        set(&board, "test://b", Err(false));
        assert_eq!(watching.await.unwrap(), Ended::Settled);
        let heard = heard.lock().unwrap();
        assert_eq!(heard.len(), 2);
        assert_eq!(heard[1].0, "test://b");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_the_device_s_rate_limit_refuses_waits_for_the_next_round() {
        let board = Board::default();
        set(&board, "test://a", Ok("succeeded"));
        let caller = AgentCaller::paired("dev_a".to_owned());
        let allowed = std::sync::atomic::AtomicUsize::new(0);
        let start = tokio::time::Instant::now();
        // Every other round is refused a read.
        let ended = watch(
            &board,
            &caller,
            vec![("test://a".to_owned(), proposed())],
            Pace::default(),
            || allowed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2 == 1,
            || true,
            |_| async { true },
        )
        .await;
        assert_eq!(ended, Ended::Settled);
        assert_eq!(start.elapsed(), Duration::from_secs(2), "read at the second round");
        assert_eq!(board.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_device_watches_at_most_16_over_all_its_sessions() {
        let budget = Budget::default();
        let first = budget.take("dev_a", 10);
        let second = budget.take("dev_a", 10);
        assert_eq!((first.count(), second.count()), (10, WATCHED_AT_MOST - 10));
        assert_eq!(budget.take("dev_a", 1).count(), 0, "full");
        assert_eq!(budget.take("dev_b", 16).count(), 16, "another device's room is its own");
        drop(first);
        assert_eq!(budget.watching("dev_a"), WATCHED_AT_MOST - 10);
        drop(second);
        assert_eq!(budget.watching("dev_a"), 0);
        assert!(
            !budget.0.lock().unwrap().contains_key("dev_a"),
            "no entry once it watches nothing"
        );
    }

    /// A watch of `test://a`, read `proposed` when it began, at the default pace, every read
    /// allowed.
    async fn watch_a<N, F>(board: &Board, caller: &AgentCaller, listening: impl Fn() -> bool, notify: N) -> Ended
    where
        N: FnMut(String) -> F,
        F: Future<Output = bool>,
    {
        watch(
            board,
            caller,
            vec![("test://a".to_owned(), proposed())],
            Pace::default(),
            || true,
            listening,
            notify,
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_slows_after_two_minutes_ends_after_an_hour_and_when_its_client_goes() {
        let board = Arc::new(Board::default());
        set(&board, "test://a", Ok("proposed"));
        let caller = AgentCaller::paired("dev_a".to_owned());
        let start = tokio::time::Instant::now();
        let ended = watch_a(&board, &caller, || true, |_| async { true }).await;
        assert_eq!(ended, Ended::TimedOut);
        assert!(start.elapsed() <= Duration::from_secs(3600));
        // 120 reads a second apart, then one each 5 s up to the hour.
        assert_eq!(
            board.reads.load(std::sync::atomic::Ordering::Relaxed),
            120 + (3600 - 120) / 5
        );

        // The client went: the next round ends the watch, before any read.
        let gone = std::sync::atomic::AtomicBool::new(false);
        let board = Board::default();
        set(&board, "test://a", Ok("proposed"));
        let ended = watch_a(
            &board,
            &caller,
            || !gone.swap(true, std::sync::atomic::Ordering::Relaxed),
            |_| async { true },
        )
        .await;
        assert_eq!(ended, Ended::ClientGone);
        assert_eq!(board.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
        // A notification that cannot be sent ends it too.
        let board = Board::default();
        set(&board, "test://a", Ok("cancelled"));
        let ended = watch_a(&board, &caller, || true, |_| async { false }).await;
        assert_eq!(ended, Ended::ClientGone);
        // Settled, or unread, from the start: said at once, nothing watched.
        let said = Mutex::new(Vec::new());
        let ended = watch(
            &board,
            &caller,
            vec![
                (
                    "test://a".to_owned(),
                    Some(Reading {
                        settled: true,
                        ..proposed().unwrap()
                    }),
                ),
                ("test://gone".to_owned(), None),
            ],
            Pace::default(),
            || true,
            || true,
            |uri| {
                said.lock().unwrap().push(uri);
                async { true }
            },
        )
        .await;
        assert_eq!(*said.lock().unwrap(), ["test://a", "test://gone"]);
        assert_eq!(ended, Ended::Settled);
    }
}
