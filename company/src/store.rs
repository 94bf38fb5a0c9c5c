//! What the company's stores share: the one way a store fails ([`StoreError`]), and the one
//! building block of the embedded stores ([`Bounded`]): a moka cache of records that expire by
//! the injected clock, bounded by a capacity.
//!
//! A store that holds what must not be lost before it expires (a replay mark, a Session, a
//! device code, an operation) *refuses* new records when full, and the caller answers 429 or
//! 503; one whose records may go early at no risk (a cookie binding only logs a browser out, a
//! cached document is fetched again) *evicts* the least used.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use moka::sync::Cache;
use pap_shared::{Clock, UnixTime};

use crate::expiry::{ExpireAt, Expiring};

/// Why a store could not do what was asked. Every caller fails closed on it: a join is not
/// accepted, a page is not shown (503), nothing is half-done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store is at its capacity and holds nothing it may drop: new work is refused.
    #[error("the store is full")]
    Full,
    /// The store is under pressure and the owner of the new record (a client's registrable
    /// domain, or a client address) already holds its share of it: the owner is asked to
    /// slow down (429), the others are not refused.
    #[error("this client holds its share of the store")]
    OverShare,
    /// The store cannot be reached (a distributed store down): nothing is decided without it.
    #[error("the store is unavailable")]
    Unavailable,
}

impl StoreError {
    /// How long a caller refused for it is asked to wait, in seconds (`Retry-After`): a full
    /// store frees room as records expire (a minute covers a replay mark), an owner over its
    /// share gets room back as its oldest bucket of marks ends (every 10 s while it keeps
    /// marking), a store that is down is worth trying again soon.
    pub fn retry_after(self) -> &'static str {
        match self {
            Self::Full => "60",
            Self::OverShare => "10",
            Self::Unavailable => "5",
        }
    }

    /// The HTTP status a refusal for it answers: 429 for an owner over its share (it is the
    /// one asked to slow down), 503 otherwise (the company cannot take the request now).
    pub fn status(self) -> http::StatusCode {
        match self {
            Self::OverShare => http::StatusCode::TOO_MANY_REQUESTS,
            Self::Full | Self::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// What a full [`Bounded`] does with a new record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenFull {
    /// Drops the least recently used record to make room.
    Evict,
    /// Refuses the new record ([`StoreError::Full`]); nothing live is dropped.
    Refuse,
}

#[derive(Clone)]
struct Timed<V> {
    value: V,
    until: UnixTime,
}

impl<V> Expiring for Timed<V> {
    fn expires_at(&self) -> UnixTime {
        self.until
    }
}

/// Records that live until their own `until` (read on the injected clock), at most `capacity`
/// of them.
pub(crate) struct Bounded<K, V> {
    cache: Cache<K, Timed<V>>,
    clock: Arc<dyn Clock>,
    capacity: u64,
    when_full: WhenFull,
    /// The injected clock's second of the last sweep a full store made.
    last_sweep: AtomicI64,
}

impl<K, V> Bounded<K, V>
where
    K: Hash + Eq + Send + Sync + Clone + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty store of at most `capacity` records.
    pub(crate) fn new(capacity: u64, when_full: WhenFull, clock: Arc<dyn Clock>) -> Self {
        let builder = Cache::builder().expire_after(ExpireAt::new(clock.clone()));
        let cache = match when_full {
            WhenFull::Evict => builder.max_capacity(capacity).build(),
            // No eviction at all: the capacity is kept by refusing (see `admit`).
            WhenFull::Refuse => builder.build(),
        };
        Self {
            cache,
            clock,
            capacity,
            when_full,
            last_sweep: AtomicI64::new(i64::MIN),
        }
    }

    /// The live record of `key`.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let now = self.clock.now();
        self.cache.get(key).filter(|t| now < t.until).map(|t| t.value)
    }

    /// Stores `value` for `key` until `until`, replacing what was there.
    pub(crate) fn insert(&self, key: K, value: V, until: UnixTime) -> Result<(), StoreError> {
        if self.when_full == WhenFull::Refuse && !self.cache.contains_key(&key) {
            self.admit()?;
        }
        self.cache.insert(key, Timed { value, until });
        Ok(())
    }

    /// Stores `value` for `key` until `until` in a store that evicts, so it never refuses.
    pub(crate) fn remember(&self, key: K, value: V, until: UnixTime) {
        debug_assert_eq!(
            self.when_full,
            WhenFull::Evict,
            "a refusing store's refusal must be handled"
        );
        self.cache.insert(key, Timed { value, until });
    }

    /// The live record of `key`, or `make()`'s, stored until `until`, in a store that evicts
    /// (so it never refuses): one lookup, for a record that is a handle to shared state.
    pub(crate) fn get_or_insert(&self, key: K, make: impl FnOnce() -> V, until: UnixTime) -> V {
        debug_assert_eq!(
            self.when_full,
            WhenFull::Evict,
            "a refusing store's refusal must be handled"
        );
        let now = self.clock.now();
        self.cache
            .entry(key)
            .or_insert_with_if(|| Timed { value: make(), until }, |held| held.until <= now)
            .into_value()
            .value
    }

    /// Changes the live record of `key` in place, atomically; false when there is none.
    pub(crate) fn update(&self, key: &K, change: impl FnOnce(&mut V)) -> bool {
        use moka::ops::compute::Op;
        let now = self.clock.now();
        let mut changed = false;
        self.cache.entry(key.clone()).and_compute_with(|held| match held {
            Some(entry) if now < entry.value().until => {
                let mut timed = entry.into_value();
                change(&mut timed.value);
                changed = true;
                Op::Put(timed)
            }
            Some(_) => Op::Remove,
            None => Op::Nop,
        });
        changed
    }

    /// Computes `key`'s record from the live one (or `None`), atomically: `compute` answers the
    /// new record and its time, or refuses with its own error, which leaves the record as it
    /// was. A new record counts against the capacity.
    pub(crate) fn compute<E>(
        &self,
        key: &K,
        compute: impl FnOnce(Option<V>) -> Result<(V, UnixTime), E>,
    ) -> Result<Result<(), E>, StoreError> {
        use moka::ops::compute::Op;
        if self.when_full == WhenFull::Refuse && self.get(key).is_none() {
            self.admit()?;
        }
        let now = self.clock.now();
        let mut outcome = Ok(());
        self.cache.entry(key.clone()).and_compute_with(|held| {
            let live = held.map(|e| e.into_value()).filter(|t| now < t.until).map(|t| t.value);
            match compute(live) {
                Ok((value, until)) => Op::Put(Timed { value, until }),
                Err(refused) => {
                    outcome = Err(refused);
                    Op::Nop
                }
            }
        });
        Ok(outcome)
    }

    /// Drops `key`'s record, live or not.
    pub(crate) fn forget(&self, key: &K) {
        self.cache.invalidate(key);
    }

    /// Removes `key`'s record, live or not; the live one it held.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let now = self.clock.now();
        self.cache.remove(key).filter(|t| now < t.until).map(|t| t.value)
    }

    /// Drops every record whose `until` has passed on the injected clock. moka drops them on
    /// its own as real time passes; this is for a clock that moves otherwise (a test's), and
    /// for an exact count.
    pub(crate) fn sweep(&self) {
        let now = self.clock.now();
        for (key, timed) in self.cache.iter() {
            if timed.until <= now {
                self.cache.invalidate(key.as_ref());
            }
        }
        self.cache.run_pending_tasks();
    }

    /// How many records it holds (after pending work is done).
    pub(crate) fn len(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }

    /// A refusing store takes a new record only below its capacity.
    ///
    /// moka counts lazily, at most [`COUNT_LAG`] writes behind: far below the capacity the
    /// stale count is enough; near it the pending writes are applied first, so a store never
    /// refuses on a stale count and at most the inserts in flight go past the capacity. A full
    /// store also drops what the injected clock has expired, at most once per second of that
    /// clock, so a flood of refused inserts costs no more than one scan a second.
    fn admit(&self) -> Result<(), StoreError> {
        if self.when_full == WhenFull::Evict || self.cache.entry_count().saturating_add(COUNT_LAG) < self.capacity {
            return Ok(());
        }
        self.cache.run_pending_tasks();
        if self.cache.entry_count() < self.capacity {
            return Ok(());
        }
        let now = self.clock.now().as_secs();
        if self.last_sweep.swap(now, Ordering::AcqRel) < now {
            self.sweep();
            if self.cache.entry_count() < self.capacity {
                return Ok(());
            }
        }
        Err(StoreError::Full)
    }
}

/// How far behind the writes moka's entry count may be: its write log holds 64 x 6 entries
/// before a writer applies them itself (moka 0.12's `WRITE_LOG_CH_SIZE`), rounded up.
const COUNT_LAG: u64 = 512;

/// Each owner's live items, at most `cap` of them: how a store limits what one client holds
/// (Sessions, pending device codes), so no one client fills a store meant for all.
pub(crate) struct PerOwner<K, T> {
    lists: Bounded<K, Vec<(T, UnixTime)>>,
    cap: usize,
}

impl<K, T> PerOwner<K, T>
where
    K: Hash + Eq + Send + Sync + Clone + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// At most `cap` live items per owner, `owners` owners.
    pub(crate) fn new(cap: usize, owners: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            lists: Bounded::new(owners, WhenFull::Refuse, clock),
            cap,
        }
    }

    /// Counts `item` against `owner` until `until`, in one atomic step with the count; refused
    /// ([`StoreError::Full`]) when the owner holds `cap` live items, or the store is full.
    pub(crate) fn add(&self, owner: &K, item: T, until: UnixTime) -> Result<(), StoreError> {
        let now = self.lists.clock.now();
        let cap = self.cap;
        self.lists
            .compute(owner, |held| {
                let mut live: Vec<(T, UnixTime)> = held
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, until)| now < *until)
                    .collect();
                if live.len() >= cap {
                    return Err(StoreError::Full);
                }
                live.push((item, until));
                let last = live.iter().map(|(_, until)| *until).max().unwrap_or(until);
                Ok((live, last))
            })
            .and_then(|capped| capped)
    }

    /// Drops what has expired (see [`Bounded::sweep`]).
    pub(crate) fn sweep(&self) {
        self.lists.sweep();
    }
}

impl<K, T> fmt::Debug for PerOwner<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerOwner")
            .field("owners", &self.lists)
            .field("cap", &self.cap)
            .finish()
    }
}

impl<K, V> fmt::Debug for Bounded<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded")
            .field("entries", &self.cache.entry_count())
            .field("capacity", &self.capacity)
            .field("when_full", &self.when_full)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Settable(AtomicI64);

    impl Clock for Settable {
        fn now(&self) -> UnixTime {
            UnixTime::from_secs(self.0.load(Ordering::SeqCst))
        }
    }

    fn clock() -> Arc<Settable> {
        Arc::new(Settable(AtomicI64::new(1_000)))
    }

    #[test]
    fn records_live_until_their_own_time_on_the_injected_clock() {
        let clock = clock();
        let store: Bounded<u32, &str> = Bounded::new(10, WhenFull::Refuse, clock.clone());
        store.insert(1, "a", UnixTime::from_secs(1_060)).unwrap();
        assert_eq!(store.get(&1), Some("a"));
        clock.0.store(1_060, Ordering::SeqCst);
        assert_eq!(store.get(&1), None, "expiry is exclusive");
        assert_eq!(store.len(), 1, "still held until swept");
        store.sweep();
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn a_refusing_store_refuses_when_full_and_takes_again_once_records_expire() {
        let clock = clock();
        let store: Bounded<u32, ()> = Bounded::new(3, WhenFull::Refuse, clock.clone());
        for key in 0..3 {
            store.insert(key, (), UnixTime::from_secs(1_010)).unwrap();
        }
        assert_eq!(store.insert(3, (), UnixTime::from_secs(1_010)), Err(StoreError::Full));
        // Replacing a held key is no new record.
        store.insert(2, (), UnixTime::from_secs(1_020)).unwrap();
        assert!((0..3).all(|k| store.get(&k).is_some()), "nothing live was dropped");
        clock.0.store(1_010, Ordering::SeqCst);
        store.insert(3, (), UnixTime::from_secs(1_030)).unwrap();
    }

    #[test]
    fn an_evicting_store_stays_within_its_capacity() {
        let store: Bounded<u32, ()> = Bounded::new(100, WhenFull::Evict, clock());
        for key in 0..10_000 {
            store.insert(key, (), UnixTime::from_secs(2_000)).unwrap();
        }
        assert!(store.len() <= 100, "{}", store.len());
    }

    #[test]
    fn update_changes_a_live_record_only() {
        let clock = clock();
        let store: Bounded<u32, u32> = Bounded::new(10, WhenFull::Refuse, clock.clone());
        store.insert(7, 99, UnixTime::from_secs(1_010)).unwrap();
        assert!(store.update(&7, |v| *v += 1));
        assert_eq!(store.get(&7), Some(100));
        assert!(!store.update(&8, |v| *v += 1));
        clock.0.store(1_010, Ordering::SeqCst);
        assert!(!store.update(&7, |v| *v += 1), "an expired record is absent");
    }
}
