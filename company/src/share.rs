//! Shares of a store (review N3): what one *owner* may hold of a store meant for everyone.
//!
//! A store's capacity is a bound for the whole company; without shares one stranger fills it
//! and everyone else is refused until what it wrote expires. Every replay mark and every new
//! record is counted against its owner:
//!
//! - a client's work against the **registrable domain** of its `client_id` (PSL), so a
//!   self-hosted agent that mints `client_id`s by the thousand under its own domain still holds
//!   one share, and a big agent platform's clients share one too;
//! - work no client authenticated (the `/device` page's attempt counts) against the client
//!   **address** it came from.
//!
//! An owner holds at most its share of a store (an [`OWNER_SHARE_DIVISOR`]-th of the records,
//! always; under pressure a [`crate::replay::REPLAY_SHARE_DIVISOR`]-th of the replay guard):
//! one owner, or several, leave the rest working. Replay marks' shares bind only under pressure
//! ([`ExpiringShares`]): an honest agent with many users is never capped by a guard no one
//! else is filling. Owners are kept as 8 bytes of a hash, never as a name, so a
//! store's memory per owner is fixed and nothing an owner sends reaches a log.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use pap_shared::{ClientId, UnixTime};
use sha2::{Digest as _, Sha256};

use crate::store::StoreError;

/// Each owner holds at most this fraction (1/8) of a store's capacity.
pub const OWNER_SHARE_DIVISOR: u64 = 8;

/// Whose share a mark or a record counts against.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner([u8; 8]);

impl Owner {
    /// A client's owner: the registrable domain of its `client_id`'s host (the host itself for
    /// an IP address or a name the PSL does not know).
    pub fn of_client(client_id: &ClientId) -> Self {
        let url = client_id.url();
        let host = url.url().host_str().unwrap_or_default();
        Self::named("domain", &pap_shared::registrable_domain(host))
    }

    /// The owner `name` of `kind` (`address` for a client address's key, `company` for the
    /// company's own records).
    pub fn named(kind: &str, name: &str) -> Self {
        let mut hash = Sha256::new();
        hash.update(kind.as_bytes());
        hash.update(b"\0");
        hash.update(name.as_bytes());
        let digest = hash.finalize();
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&digest[..8]);
        Self(bytes)
    }

    /// The company's own records (its CSRF keys): no stranger writes them.
    pub fn company() -> Self {
        Self::named("company", "")
    }

    /// The 8 bytes, e.g. for a distributed store's key.
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }

    /// The hex form, e.g. for a distributed store's key.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({})", self.to_hex())
    }
}

/// How long one bucket of an owner's tally of replay marks spans, in seconds: a mark counts
/// until the end of the bucket its expiry falls in, at most this much longer than it lives.
pub const SHARE_BUCKET_SECONDS: i64 = 10;

/// Live items counted in buckets of [`SHARE_BUCKET_SECONDS`] by when they expire: the live
/// count is the sum of the buckets that have not ended, kept as a running total, without a
/// timer or a scan of the items.
#[derive(Debug, Default)]
pub(crate) struct Buckets {
    buckets: VecDeque<Bucket>,
    live: u64,
}

/// The items that expire before `ends` (and after the previous bucket's end).
#[derive(Clone, Copy, Debug)]
struct Bucket {
    ends: i64,
    items: u64,
}

impl Buckets {
    /// Drops the buckets that ended by `now`.
    pub(crate) fn settle(&mut self, now: UnixTime) {
        while let Some(bucket) = self.buckets.front().copied() {
            if bucket.ends > now.as_secs() {
                break;
            }
            self.buckets.pop_front();
            self.live = self.live.saturating_sub(bucket.items);
        }
    }

    /// How many items are live (as of the last [`Self::settle`]).
    pub(crate) fn live(&self) -> u64 {
        self.live
    }

    /// Counts one item that lives until `until`.
    pub(crate) fn add(&mut self, until: UnixTime) {
        let ends = bucket_end(until);
        // Items mostly arrive in expiry order (the newest bucket); the buckets stay sorted.
        match self.buckets.iter().rposition(|b| b.ends <= ends) {
            Some(i) if self.buckets[i].ends == ends => self.buckets[i].items += 1,
            Some(i) => self.buckets.insert(i + 1, Bucket { ends, items: 1 }),
            None => self.buckets.push_front(Bucket { ends, items: 1 }),
        }
        self.live += 1;
    }

    /// Uncounts one item [`Self::add`] counted until `until`.
    pub(crate) fn give_back(&mut self, until: UnixTime) {
        let ends = bucket_end(until);
        if let Some(bucket) = self.buckets.iter_mut().find(|b| b.ends == ends && b.items > 0) {
            bucket.items -= 1;
            self.live = self.live.saturating_sub(1);
        }
    }

    fn is_empty(&self) -> bool {
        self.live == 0
    }
}

/// Live items per owner, for items that are never removed before they expire (replay marks),
/// and shares that bind only under pressure (issue 42): while fewer than `pressure` items are
/// live in all, an owner takes what others leave (one popular agent may hold far more than
/// its share when no one else needs the room); from `pressure` on, an owner at its `share` is
/// refused ([`StoreError::OverShare`], answered 429) until its items expire or the pressure
/// eases, while owners below their share still take room. The room between `pressure` and the
/// store's capacity is what owners within their share keep when a flood comes.
pub(crate) struct ExpiringShares {
    share: u64,
    pressure: u64,
    /// How many owners it holds at most: a new owner past it is refused until the sweep.
    max_owners: usize,
    tally: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    owners: HashMap<Owner, Buckets>,
    all: Buckets,
}

impl ExpiringShares {
    /// At most `share` live items per owner once `pressure` items are live in all (the owners
    /// bounded by the caller's capacity).
    pub(crate) fn new(share: u64, pressure: u64) -> Self {
        Self::with_owner_cap(share, pressure, usize::MAX)
    }

    /// As [`Self::new`], and at most `max_owners` owners.
    pub(crate) fn with_owner_cap(share: u64, pressure: u64, max_owners: usize) -> Self {
        Self {
            share,
            pressure,
            max_owners,
            tally: Mutex::default(),
        }
    }

    /// Counts one item of `owner` that lives until `until`; refused with
    /// [`StoreError::OverShare`] when the owner already holds its share at `now` and the items
    /// live in all are at the pressure, [`StoreError::Full`] when a new owner finds the owners
    /// at their cap. A caller whose item turns out not to be stored gives it back with
    /// [`Self::give_back`].
    pub(crate) fn take(&self, owner: Owner, until: UnixTime, now: UnixTime) -> Result<(), StoreError> {
        let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        let Tally { owners, all } = &mut *tally;
        if owners.len() >= self.max_owners && !owners.contains_key(&owner) {
            return Err(StoreError::Full);
        }
        all.settle(now);
        let buckets = owners.entry(owner).or_default();
        buckets.settle(now);
        if buckets.live() >= self.share && all.live() >= self.pressure {
            return Err(StoreError::OverShare);
        }
        buckets.add(until);
        all.add(until);
        Ok(())
    }

    /// Gives back an item [`Self::take`] counted that was not stored after all (a replay).
    pub(crate) fn give_back(&self, owner: Owner, until: UnixTime) {
        let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(buckets) = tally.owners.get_mut(&owner) {
            buckets.give_back(until);
            tally.all.give_back(until);
        }
    }

    /// Forgets the owners whose items have all expired, so the map holds only live owners.
    pub(crate) fn sweep(&self, now: UnixTime) {
        let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        tally.all.settle(now);
        tally.owners.retain(|_, buckets| {
            buckets.settle(now);
            !buckets.is_empty()
        });
    }

    /// How many owners are held (live or not yet swept).
    pub(crate) fn owners(&self) -> usize {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner).owners.len()
    }

    /// How many items are live in all (as of the last take or sweep).
    #[cfg(test)]
    pub(crate) fn live(&self) -> u64 {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner).all.live()
    }
}

impl fmt::Debug for ExpiringShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpiringShares")
            .field("share", &self.share)
            .field("pressure", &self.pressure)
            .field("owners", &self.owners())
            .finish()
    }
}

/// The end of the bucket an item living until `until` counts in: the first multiple of
/// [`SHARE_BUCKET_SECONDS`] after it.
pub(crate) fn bucket_end(until: UnixTime) -> i64 {
    let secs = until.as_secs();
    secs.div_euclid(SHARE_BUCKET_SECONDS)
        .saturating_add(1)
        .saturating_mul(SHARE_BUCKET_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> Owner {
        Owner::of_client(&ClientId::parse(name).unwrap())
    }

    #[test]
    fn clients_of_one_registrable_domain_are_one_owner() {
        assert_eq!(
            owner("https://a.evil.example/1.json"),
            owner("https://b.evil.example/2.json")
        );
        assert_ne!(
            owner("https://evil.example/1.json"),
            owner("https://atlas.example/1.json")
        );
        // A public suffix's customers are owners of their own.
        assert_ne!(
            owner("https://alice.github.io/a.json"),
            owner("https://bob.github.io/a.json")
        );
        assert_ne!(Owner::named("address", "x"), Owner::named("domain", "x"));
    }

    #[test]
    fn an_owner_holds_its_share_and_gets_room_back_as_items_expire() {
        // Pressure 0: the shares always bind.
        let shares = ExpiringShares::new(3, 0);
        let (evil, atlas) = (owner("https://evil.example/a"), owner("https://atlas.example/a"));
        let now = UnixTime::from_secs(1_000);
        for until in [1_060, 1_030, 1_065] {
            shares.take(evil, UnixTime::from_secs(until), now).unwrap();
        }
        assert_eq!(
            shares.take(evil, UnixTime::from_secs(1_060), now),
            Err(StoreError::OverShare)
        );
        shares.take(atlas, UnixTime::from_secs(1_060), now).unwrap();
        // The item until 1,030 counts until its bucket ends at 1,040.
        let later = UnixTime::from_secs(1_039);
        assert_eq!(
            shares.take(evil, UnixTime::from_secs(1_090), later),
            Err(StoreError::OverShare)
        );
        let later = UnixTime::from_secs(1_040);
        shares.take(evil, UnixTime::from_secs(1_090), later).unwrap();
        assert_eq!(
            shares.take(evil, UnixTime::from_secs(1_090), later),
            Err(StoreError::OverShare)
        );
    }

    #[test]
    fn an_item_given_back_frees_its_room_and_swept_owners_are_forgotten() {
        let shares = ExpiringShares::new(1, 0);
        let evil = owner("https://evil.example/a");
        let now = UnixTime::from_secs(1_000);
        shares.take(evil, UnixTime::from_secs(1_060), now).unwrap();
        shares.give_back(evil, UnixTime::from_secs(1_060));
        shares.take(evil, UnixTime::from_secs(1_060), now).unwrap();
        assert_eq!(shares.owners(), 1);
        shares.sweep(UnixTime::from_secs(1_070));
        assert_eq!(shares.owners(), 0);
    }

    #[test]
    fn shares_bind_only_under_pressure_and_an_owner_within_its_share_still_takes_room() {
        // A share of 2, binding once 6 items are live in all.
        let shares = ExpiringShares::new(2, 6);
        let (big, small) = (owner("https://big.example/a"), owner("https://small.example/a"));
        let now = UnixTime::from_secs(1_000);
        let until = UnixTime::from_secs(1_060);
        // Alone, the big owner takes what no one else needs: three times its share.
        for _ in 0..6 {
            shares.take(big, until, now).unwrap();
        }
        assert_eq!(shares.take(big, until, now), Err(StoreError::OverShare));
        // Under pressure, an owner below its share still takes it, and no more.
        shares.take(small, until, now).unwrap();
        shares.take(small, until, now).unwrap();
        assert_eq!(shares.take(small, until, now), Err(StoreError::OverShare));
        assert_eq!(shares.live(), 8);
        // Once the items expire, the pressure is gone and the big owner takes again.
        let later = UnixTime::from_secs(1_070);
        shares.take(big, UnixTime::from_secs(1_130), later).unwrap();
        assert_eq!(shares.live(), 1);
    }
}
