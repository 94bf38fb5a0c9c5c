//! Versioned records: what the reference company keeps (Sessions, tokens, device codes,
//! operations, idempotency answers, attempt counts), each under a key until its time, in one
//! process ([`MemoryRecords`]) or in Redis (`RedisStore`, feature `redis`) for several replicas.
//!
//! A change is a [`Commit`]: every record it writes must still be at the version it was read at
//! (or absent), or nothing is written. So what must happen at most once (a confirm, a token's
//! claim, a device approval) is a read, a decision, and one commit that only one writer wins,
//! whichever replica it runs on; the loser reads again and sees what the winner did.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use pap_shared::{Clock, UnixTime};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::share::{OWNER_SHARE_DIVISOR, Owner};
use crate::store::StoreError;

/// How many times a change is read and tried again when another writer moved a record first.
const RETRIES: usize = 32;

/// A record as stored: its version (1 when written first) and its JSON.
#[derive(Clone, Debug)]
pub struct Stored {
    /// Incremented by every write.
    pub version: u64,
    /// The record, as JSON.
    pub data: Vec<u8>,
}

/// What a commit expects of a key before it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// No live record under the key.
    Absent,
    /// The record at exactly this version.
    Version(u64),
    /// Whatever is there (a delete of what no longer matters).
    Any,
}

/// What a commit does to a key.
#[derive(Clone, Debug)]
pub enum Write {
    /// Stores this JSON until this time (the key's next version).
    Put(Vec<u8>, UnixTime),
    /// Removes the record.
    Delete,
    /// Changes nothing: the key is only checked.
    Check,
}

/// One key's part of a commit.
#[derive(Clone, Debug)]
pub struct Change {
    /// The record's key, e.g. `session:ses_…` (a store adds its company's prefix).
    pub key: String,
    /// What it must be.
    pub expect: Expect,
    /// What to do with it.
    pub write: Write,
}

/// Where versioned records live. Every method fails with [`StoreError`] rather than guess.
#[async_trait]
pub trait Records: Send + Sync + fmt::Debug {
    /// The live record under `key`.
    async fn get(&self, key: &str) -> Result<Option<Stored>, StoreError>;

    /// Applies every change if every key is as expected; `Ok(false)` (nothing written) if one
    /// is not. [`StoreError::Full`] when a new record does not fit, in the store or in
    /// `owner`'s share of it (the records it creates count against `owner`: review N3).
    async fn commit(&self, owner: Owner, changes: &[Change]) -> Result<bool, StoreError>;

    /// Counts one more under `key` (a new count lives until `until`, against `owner`'s share);
    /// the count now and until when it lives.
    async fn count(&self, owner: Owner, key: &str, until: UnixTime) -> Result<(u64, UnixTime), StoreError>;
}

/// A typed change under construction; [`Commit::apply`] writes it.
#[derive(Debug)]
pub struct Commit {
    owner: Owner,
    changes: Vec<Change>,
}

impl Commit {
    /// An empty change made for `owner`, whose share the records it creates count against: the
    /// client that asked (`Owner::of_client`), or the company for its own records.
    pub fn new(owner: Owner) -> Self {
        Self {
            owner,
            changes: Vec::new(),
        }
    }

    /// Writes `value` under `key` until `until`, if the key is as `expect`.
    pub fn put<T: Serialize>(mut self, key: String, expect: Expect, value: &T, until: UnixTime) -> Self {
        // A record type always serialises (no maps with non-string keys, no failing impls).
        let data = serde_json::to_vec(value).unwrap_or_default();
        self.changes.push(Change {
            key,
            expect,
            write: Write::Put(data, until),
        });
        self
    }

    /// Removes `key`, if it is as `expect`.
    pub fn delete(mut self, key: String, expect: Expect) -> Self {
        self.changes.push(Change {
            key,
            expect,
            write: Write::Delete,
        });
        self
    }

    /// Applies it: `Ok(false)` when another writer moved a record first. A commit whose keys
    /// have different hash tags is refused as [`StoreError::Unavailable`] in every store (a
    /// Redis Cluster could not run it as one script: see [`crate::slot`]), so a test in memory
    /// finds it.
    pub async fn apply(self, records: &dyn Records) -> Result<bool, StoreError> {
        if !crate::slot::one_slot(self.changes.iter().map(|change| change.key.as_str())) {
            tracing::error!("a commit's keys have different hash tags (a bug: they must share their owner's)");
            return Err(StoreError::Unavailable);
        }
        records.commit(self.owner, &self.changes).await
    }
}

/// The record under `key`, typed, with its version. A record that no longer reads as `T` (an
/// older shape) counts as absent.
pub async fn read<T: DeserializeOwned>(records: &dyn Records, key: &str) -> Result<Option<(u64, T)>, StoreError> {
    Ok(records.get(key).await?.and_then(|stored| {
        serde_json::from_slice(&stored.data)
            .ok()
            .map(|value| (stored.version, value))
    }))
}

/// What a record's version expects: `Absent` for none.
pub fn expect_of<T>(held: &Option<(u64, T)>) -> Expect {
    held.as_ref()
        .map_or(Expect::Absent, |(version, _)| Expect::Version(*version))
}

/// Runs `attempt` until it commits (`Some`), at most 32 times; a store so contended
/// that none commits is unavailable for this request.
pub async fn retrying<T, F, Fut>(mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, StoreError>>,
{
    for _ in 0..RETRIES {
        if let Some(done) = attempt().await? {
            return Ok(done);
        }
    }
    Err(StoreError::Unavailable)
}

/// Records in this process, at most a capacity of them and a share of it per owner
/// ([`OWNER_SHARE_DIVISOR`]); expired ones read as absent and go at the next
/// [`MemoryRecords::sweep`].
pub struct MemoryRecords {
    held: Mutex<Held>,
    capacity: usize,
    share: usize,
    clock: Arc<dyn Clock>,
}

/// The records and how many each owner created, changed together under one lock.
#[derive(Default)]
struct Held {
    entries: HashMap<String, Entry>,
    owned: HashMap<Owner, usize>,
}

struct Entry {
    version: u64,
    data: Vec<u8>,
    until: UnixTime,
    owner: Owner,
}

impl Held {
    fn live(&self, key: &str, now: UnixTime) -> Option<&Entry> {
        self.entries.get(key).filter(|e| now < e.until)
    }

    /// Whether `owner` may create `new` more records: within the store and its share.
    fn room(&self, owner: Owner, new: usize, capacity: usize, share: usize) -> Result<(), StoreError> {
        if new == 0 {
            return Ok(());
        }
        let owned = self.owned.get(&owner).copied().unwrap_or(0);
        if self.entries.len() + new > capacity || owned + new > share {
            return Err(StoreError::Full);
        }
        Ok(())
    }

    /// Stores `entry` under `key`: a new record (or one over an expired record) counts against
    /// its owner, a new version of a live one stays its first owner's.
    fn put(&mut self, key: &str, mut entry: Entry, now: UnixTime) {
        match self.entries.get(key) {
            Some(held) if now < held.until => entry.owner = held.owner,
            Some(_) => {
                self.remove(key);
                *self.owned.entry(entry.owner).or_default() += 1;
            }
            None => *self.owned.entry(entry.owner).or_default() += 1,
        }
        self.entries.insert(key.to_owned(), entry);
    }

    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.entries.remove(key) {
            self.disown(entry.owner);
        }
    }

    fn disown(&mut self, owner: Owner) {
        if let Some(owned) = self.owned.get_mut(&owner) {
            *owned = owned.saturating_sub(1);
            if *owned == 0 {
                self.owned.remove(&owner);
            }
        }
    }
}

impl MemoryRecords {
    /// At most `capacity` records, an eighth of them per owner, reading "now" from `clock`.
    pub fn new(capacity: usize, clock: Arc<dyn Clock>) -> Self {
        let share = capacity / usize::try_from(OWNER_SHARE_DIVISOR).unwrap_or(usize::MAX);
        Self::with_share(capacity, share.max(1), clock)
    }

    /// At most `capacity` records, `share` of them per owner.
    pub fn with_share(capacity: usize, share: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            held: Mutex::default(),
            capacity,
            share,
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Every critical section leaves the map consistent: a poisoned lock is still usable.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops every expired record.
    pub fn sweep(&self) {
        let now = self.clock.now();
        let mut held = self.lock();
        let expired: Vec<String> = held
            .entries
            .iter()
            .filter(|(_, entry)| entry.until <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            held.remove(&key);
        }
    }

    /// How many records of each kind (the key up to its first `:`) are held.
    pub fn sizes(&self) -> Vec<(String, u64)> {
        let mut sizes: HashMap<String, u64> = HashMap::new();
        for key in self.lock().entries.keys() {
            let kind = key.split(':').next().unwrap_or_default();
            *sizes.entry(kind.to_owned()).or_default() += 1;
        }
        let mut sizes: Vec<_> = sizes.into_iter().collect();
        sizes.sort();
        sizes
    }

    /// How many owners hold records (live or not yet swept).
    pub fn owners(&self) -> usize {
        self.lock().owned.len()
    }
}

#[async_trait]
impl Records for MemoryRecords {
    async fn get(&self, key: &str) -> Result<Option<Stored>, StoreError> {
        let now = self.clock.now();
        Ok(self.lock().live(key, now).map(|e| Stored {
            version: e.version,
            data: e.data.clone(),
        }))
    }

    async fn commit(&self, owner: Owner, changes: &[Change]) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut held = self.lock();
        for change in changes {
            let version = held.live(&change.key, now).map(|e| e.version);
            let as_expected = match change.expect {
                Expect::Absent => version.is_none(),
                Expect::Version(expected) => version == Some(expected),
                Expect::Any => true,
            };
            if !as_expected {
                return Ok(false);
            }
        }
        let new_records = changes
            .iter()
            .filter(|c| matches!(c.write, Write::Put(..)) && held.live(&c.key, now).is_none())
            .count();
        held.room(owner, new_records, self.capacity, self.share)?;
        for change in changes {
            match &change.write {
                Write::Put(data, until) => {
                    let version = held.live(&change.key, now).map_or(1, |e| e.version + 1);
                    let entry = Entry {
                        version,
                        data: data.clone(),
                        until: *until,
                        owner,
                    };
                    held.put(&change.key, entry, now);
                }
                Write::Delete => held.remove(&change.key),
                Write::Check => {}
            }
        }
        Ok(true)
    }

    async fn count(&self, owner: Owner, key: &str, until: UnixTime) -> Result<(u64, UnixTime), StoreError> {
        let now = self.clock.now();
        let mut held = self.lock();
        let live = held.live(key, now).map(|e| (e.version, e.until));
        if live.is_none() {
            held.room(owner, 1, self.capacity, self.share)?;
        }
        let (count, until) = live.map_or((1, until), |(n, held_until)| (n + 1, held_until));
        let entry = Entry {
            version: count,
            data: Vec::new(),
            until,
            owner,
        };
        held.put(key, entry, now);
        Ok((count, until))
    }
}

impl fmt::Debug for MemoryRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRecords")
            .field("capacity", &self.capacity)
            .field("share", &self.share)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    #[derive(Debug)]
    struct Settable(AtomicI64);

    impl Clock for Settable {
        fn now(&self) -> UnixTime {
            UnixTime::from_secs(self.0.load(Ordering::SeqCst))
        }
    }

    fn owner() -> Owner {
        Owner::named("test", "one")
    }

    #[tokio::test]
    async fn a_commit_writes_all_or_nothing_and_one_of_two_writers_wins() {
        let clock = Arc::new(Settable(AtomicI64::new(1_000)));
        let records = MemoryRecords::new(10, clock.clone());
        let until = UnixTime::from_secs(2_000);
        assert!(
            Commit::new(owner())
                .put("a:{t}1".into(), Expect::Absent, &1, until)
                .apply(&records)
                .await
                .unwrap()
        );
        let (version, value) = read::<i32>(&records, "a:{t}1").await.unwrap().unwrap();
        assert_eq!((version, value), (1, 1));
        // Two writers read version 1; the second one's commit finds version 2 and writes nothing.
        let first = Commit::new(owner()).put("a:{t}1".into(), Expect::Version(1), &2, until);
        let second = Commit::new(owner())
            .put("b:{t}1".into(), Expect::Absent, &9, until)
            .put("a:{t}1".into(), Expect::Version(1), &3, until);
        assert!(first.apply(&records).await.unwrap());
        assert!(!second.apply(&records).await.unwrap());
        assert_eq!(read::<i32>(&records, "a:{t}1").await.unwrap(), Some((2, 2)));
        assert_eq!(
            read::<i32>(&records, "b:{t}1").await.unwrap(),
            None,
            "nothing of a refused commit"
        );
        // Expired records read as absent and go at the sweep.
        clock.0.store(2_000, Ordering::SeqCst);
        assert_eq!(read::<i32>(&records, "a:{t}1").await.unwrap(), None);
        records.sweep();
        assert!(records.sizes().is_empty());
    }

    #[tokio::test]
    async fn a_full_store_refuses_new_records_and_counts_expire() {
        let clock = Arc::new(Settable(AtomicI64::new(1_000)));
        let records = MemoryRecords::with_share(2, 2, clock.clone());
        let until = UnixTime::from_secs(1_010);
        for key in ["a:{t}1", "a:{t}2"] {
            assert!(
                Commit::new(owner())
                    .put(key.into(), Expect::Absent, &0, until)
                    .apply(&records)
                    .await
                    .unwrap()
            );
        }
        let third = Commit::new(owner()).put("a:{t}3".into(), Expect::Absent, &0, until);
        assert_eq!(third.apply(&records).await, Err(StoreError::Full));
        clock.0.store(1_010, Ordering::SeqCst);
        records.sweep();
        let until = UnixTime::from_secs(1_100);
        assert_eq!(records.count(owner(), "n:1", until).await, Ok((1, until)));
        assert_eq!(
            records.count(owner(), "n:1", UnixTime::from_secs(1_200)).await,
            Ok((2, until)),
            "the window is the first's"
        );
        assert_eq!(records.sizes(), vec![("n".to_owned(), 1)]);
    }

    #[tokio::test]
    async fn an_owner_creates_at_most_its_share_and_others_still_create() {
        let clock = Arc::new(Settable(AtomicI64::new(1_000)));
        let records = MemoryRecords::with_share(10, 2, clock.clone());
        let (evil, atlas) = (
            Owner::named("domain", "evil.example"),
            Owner::named("domain", "atlas.example"),
        );
        let until = UnixTime::from_secs(1_100);
        let put = |owner: Owner, key: &str| Commit::new(owner).put(key.into(), Expect::Absent, &0, until);
        assert!(put(evil, "a:{t}1").apply(&records).await.unwrap());
        assert!(put(evil, "a:{t}2").apply(&records).await.unwrap());
        assert_eq!(put(evil, "a:{t}3").apply(&records).await, Err(StoreError::Full));
        assert_eq!(records.count(evil, "n:1", until).await, Err(StoreError::Full));
        // A new version of its own record is no new record.
        let again = Commit::new(evil).put("a:{t}1".into(), Expect::Version(1), &1, until);
        assert!(again.apply(&records).await.unwrap());
        // Another owner is not refused, even for a record in the same commit as an update of
        // the first owner's (a record stays its creator's).
        let both = Commit::new(atlas)
            .put("a:{t}2".into(), Expect::Version(1), &1, until)
            .put("b:{t}1".into(), Expect::Absent, &0, until);
        assert!(both.apply(&records).await.unwrap());
        assert!(put(atlas, "b:{t}2").apply(&records).await.unwrap());
        // A deleted record, or an expired one once swept, gives its owner room back.
        let delete = Commit::new(atlas).delete("a:{t}1".into(), Expect::Any);
        assert!(delete.apply(&records).await.unwrap());
        assert!(put(evil, "a:{t}3").apply(&records).await.unwrap());
        clock.0.store(1_100, Ordering::SeqCst);
        records.sweep();
        assert_eq!(records.owners(), 0);
        assert!(put(evil, "a:{t}4").apply(&records).await.unwrap());
    }

    #[tokio::test]
    async fn a_commit_whose_keys_have_different_hash_tags_is_refused_and_writes_nothing() {
        let clock = Arc::new(Settable(AtomicI64::new(1_000)));
        let records = MemoryRecords::new(10, clock);
        let until = UnixTime::from_secs(2_000);
        let across = Commit::new(owner())
            .put("a:{t}1".into(), Expect::Absent, &1, until)
            .put("b:{u}1".into(), Expect::Absent, &1, until);
        assert_eq!(across.apply(&records).await, Err(StoreError::Unavailable));
        let untagged = Commit::new(owner()).put("a:1".into(), Expect::Absent, &1, until).put(
            "a:2".into(),
            Expect::Absent,
            &1,
            until,
        );
        assert_eq!(untagged.apply(&records).await, Err(StoreError::Unavailable));
        assert!(records.sizes().is_empty());
        // One key needs no tag.
        let one = Commit::new(owner()).put("a:1".into(), Expect::Absent, &1, until);
        assert!(one.apply(&records).await.unwrap());
    }
}
