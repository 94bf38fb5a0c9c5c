//! The embedded replay guard's marks: a set of keys, each held until its own second, bounded.
//!
//! Not a cache: a replay mark is never dropped before it expires (that would reopen its
//! assertion), so nothing is evicted and a full set refuses. That is why it is not a moka
//! cache (the other embedded stores are): moka's bookkeeping for eviction and per-entry expiry
//! costs about 386 bytes a mark (measured: 1,000,000 marks of this key in a moka 0.12 sync cache
//! with `expire_after`, RSS grew 386 MB), where a mark is 16 bytes of hash and a second. Here a
//! mark costs its slot in one hash map (20 bytes and a control byte, the map between 44 % and
//! 88 % full) and 16 bytes in its second's list: 46 bytes measured, release build, 1,500,000
//! marks (`cargo bench -p pap-company --bench shares` prints the figure), so the guard's default capacity is several times the old one in less memory.
//!
//! Marks are kept in [`SHARDS`] shards, each behind its own lock, chosen by a keyed hash of
//! the key (a client grinding its `jti`s cannot aim at one shard). A shard drops its expired marks whenever it is touched:
//! a list per second of expiry, in order, so expiring is popping whole seconds off the front.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use pap_shared::UnixTime;

use crate::store::StoreError;

/// How many shards (locks) the set is split into: more than a company's cores, so two joins
/// rarely wait on each other.
const SHARDS: usize = 16;

/// A key: the first 16 bytes of the replay key's SHA-256 (a collision needs 2^64 work).
pub(crate) type MarkKey = [u8; 16];

/// Keys held until their second, at most `capacity` of them.
pub(crate) struct MarkSet {
    shards: Box<[Mutex<Shard>]>,
    /// Picks a key's shard with a key of this process's own, so that a client choosing its
    /// `jti`s cannot put all its marks in one shard (and make that lock everyone's wait).
    shard_of: std::collections::hash_map::RandomState,
    capacity: u64,
    /// Marks held, expired ones not yet dropped included (updated under the shards' locks).
    len: AtomicU64,
    /// The second of the last sweep of every shard a full set made.
    last_sweep: AtomicI64,
}

#[derive(Default)]
struct Shard {
    /// Each held key and the second it is held until (exclusive: held while now < until).
    held: HashMap<MarkKey, u32>,
    /// The keys by the second they expire, in order of that second.
    expiring: VecDeque<(u32, Vec<MarkKey>)>,
}

impl Shard {
    /// Drops the keys whose second has come; how many.
    fn expire(&mut self, now: u32) -> u64 {
        let mut dropped = 0;
        while let Some((until, _)) = self.expiring.front() {
            if *until > now {
                break;
            }
            let Some((until, keys)) = self.expiring.pop_front() else {
                break;
            };
            for key in keys {
                // A key marked again after it expired is held under its new second.
                if self.held.get(&key) == Some(&until) {
                    self.held.remove(&key);
                    dropped += 1;
                }
            }
        }
        if self.held.capacity() > 64 && self.held.len() < self.held.capacity() / 4 {
            // After a burst: give the memory back rather than keep the burst's peak.
            self.held.shrink_to(self.held.len() * 2);
        }
        dropped
    }

    fn add(&mut self, key: MarkKey, until: u32) {
        self.held.insert(key, until);
        // Marks mostly arrive in order of expiry: the last second, or a new one after it.
        let at = self.expiring.partition_point(|(second, _)| *second < until);
        match self.expiring.get_mut(at) {
            Some((second, keys)) if *second == until => keys.push(key),
            _ => self.expiring.insert(at, (until, vec![key])),
        }
    }
}

/// A second as the set keeps it: seconds since 1970 fit `u32` until 2106; earlier reads as 0
/// and later as the last second, which only holds a mark longer.
fn second(time: UnixTime) -> u32 {
    u32::try_from(time.as_secs().max(0)).unwrap_or(u32::MAX)
}

impl MarkSet {
    /// An empty set of at most `capacity` marks.
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            shard_of: std::collections::hash_map::RandomState::new(),
            capacity,
            len: AtomicU64::new(0),
            last_sweep: AtomicI64::new(i64::MIN),
        }
    }

    fn shard(&self, key: &MarkKey) -> std::sync::MutexGuard<'_, Shard> {
        let hash = std::hash::BuildHasher::hash_one(&self.shard_of, key);
        self.shards[usize::try_from(hash % SHARDS as u64).unwrap_or(0)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `key` until `until` unless it is held now: true for exactly one caller per key
    /// while the mark lives, however many call at once. A key not held is refused
    /// ([`StoreError::Full`]) when the set holds `capacity` live marks; a held key is a no
    /// whether or not the set is full.
    pub(crate) fn insert_once(&self, key: MarkKey, until: UnixTime, now: UnixTime) -> Result<bool, StoreError> {
        let until = second(until);
        if let Some(fresh) = self.try_insert(key, until, Some(second(now))) {
            return Ok(fresh);
        }
        // Full, perhaps of marks expired in shards no one touched lately: sweep them all, at
        // most once a second, then try once more.
        let now_secs = now.as_secs();
        if self.last_sweep.swap(now_secs, Ordering::AcqRel) < now_secs {
            self.sweep(now);
            if let Some(fresh) = self.try_insert(key, until, None) {
                return Ok(fresh);
            }
        }
        Err(StoreError::Full)
    }

    /// Under `key`'s shard lock (its expired marks dropped first, when `expire_at` is given):
    /// false when `key` is held, true when it was added below the capacity, `None` when full.
    fn try_insert(&self, key: MarkKey, until: u32, expire_at: Option<u32>) -> Option<bool> {
        let mut shard = self.shard(&key);
        if let Some(now) = expire_at {
            let dropped = shard.expire(now);
            self.len.fetch_sub(dropped, Ordering::Relaxed);
        }
        if shard.held.contains_key(&key) {
            return Some(false);
        }
        if self.len.load(Ordering::Relaxed) >= self.capacity {
            return None;
        }
        shard.add(key, until);
        self.len.fetch_add(1, Ordering::Relaxed);
        Some(true)
    }

    /// Whether `key` is held at `now`.
    pub(crate) fn contains(&self, key: &MarkKey, now: UnixTime) -> bool {
        let now = second(now);
        self.shard(key).held.get(key).is_some_and(|until| *until > now)
    }

    /// Drops every mark expired at `now`, in every shard.
    pub(crate) fn sweep(&self, now: UnixTime) {
        let now = second(now);
        for shard in self.shards.iter() {
            let dropped = shard.lock().unwrap_or_else(PoisonError::into_inner).expire(now);
            self.len.fetch_sub(dropped, Ordering::Relaxed);
        }
    }

    /// How many marks are held (expired ones a shard has not dropped yet included).
    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> MarkKey {
        let mut key = [0; 16];
        key[..8].copy_from_slice(&i.to_le_bytes());
        key[8..].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        key
    }

    fn at(secs: i64) -> UnixTime {
        UnixTime::from_secs(secs)
    }

    #[test]
    fn a_key_is_held_until_its_second_then_may_be_marked_again() {
        let set = MarkSet::new(10);
        assert_eq!(set.insert_once(key(1), at(1_060), at(1_000)), Ok(true));
        assert_eq!(set.insert_once(key(1), at(1_060), at(1_059)), Ok(false));
        assert!(set.contains(&key(1), at(1_059)));
        assert!(!set.contains(&key(1), at(1_060)));
        assert_eq!(set.insert_once(key(1), at(1_120), at(1_060)), Ok(true));
        assert_eq!(set.len(), 1, "the old mark dropped, the new one held");
        // The old second's list no longer drops the key marked again.
        set.sweep(at(1_061));
        assert!(set.contains(&key(1), at(1_061)));
    }

    #[test]
    fn a_full_set_refuses_new_keys_never_drops_a_live_one_and_has_room_once_they_expire() {
        let set = MarkSet::new(3);
        for i in 0..3 {
            assert_eq!(set.insert_once(key(i), at(1_060 + i as i64), at(1_000)), Ok(true));
        }
        assert_eq!(set.insert_once(key(9), at(1_100), at(1_000)), Err(StoreError::Full));
        assert_eq!(
            set.insert_once(key(0), at(1_100), at(1_000)),
            Ok(false),
            "a replay is a replay"
        );
        // At 1,060 the first has expired; the sweep a full set makes finds it in any shard.
        assert_eq!(set.insert_once(key(9), at(1_100), at(1_060)), Ok(true));
        assert_eq!(set.insert_once(key(10), at(1_100), at(1_060)), Err(StoreError::Full));
        set.sweep(at(1_200));
        assert_eq!(set.len(), 0);
    }

    #[test]
    fn marks_out_of_order_expire_in_order() {
        let set = MarkSet::new(100);
        for (i, until) in [1_050, 1_010, 1_030, 1_010, 1_020].into_iter().enumerate() {
            assert_eq!(set.insert_once(key(i as u64), at(until), at(1_000)), Ok(true));
        }
        set.sweep(at(1_020));
        assert_eq!(set.len(), 2, "the marks of 1,010 and 1,020 went");
        assert!(set.contains(&key(0), at(1_020)) && set.contains(&key(2), at(1_020)));
    }

    #[test]
    fn one_winner_among_many_threads_marking_one_key() {
        let set = std::sync::Arc::new(MarkSet::new(1_000));
        let wins: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let set = set.clone();
                    scope.spawn(move || {
                        (0..100)
                            .filter(|_| set.insert_once(key(7), at(1_060), at(1_000)) == Ok(true))
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        assert_eq!(wins, 1);
    }
}
