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
//! An owner holds at most [`OWNER_SHARE_DIVISOR`]-th of a store's capacity: one owner, or
//! seven, leave the rest working. Owners are kept as 8 bytes of a hash, never as a name, so a
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

/// Live items per owner, for items that are never removed before they expire (replay marks):
/// counted in buckets of [`SHARE_BUCKET_SECONDS`] by when they expire, so an owner's live
/// count is the sum of its buckets that have not ended, without a timer or a scan of the items.
pub(crate) struct ExpiringShares {
    share: u64,
    /// How many owners it holds at most: a new owner past it is refused until the sweep.
    max_owners: usize,
    owners: Mutex<HashMap<Owner, VecDeque<Bucket>>>,
}

/// The items of one owner that expire before `ends` (and after the previous bucket's end).
#[derive(Clone, Copy, Debug)]
struct Bucket {
    ends: i64,
    items: u64,
}

impl ExpiringShares {
    /// At most `share` live items per owner (the owners bounded by the caller's capacity).
    pub(crate) fn new(share: u64) -> Self {
        Self::with_owner_cap(share, usize::MAX)
    }

    /// At most `share` live items per owner, and at most `max_owners` owners.
    pub(crate) fn with_owner_cap(share: u64, max_owners: usize) -> Self {
        Self {
            share,
            max_owners,
            owners: Mutex::default(),
        }
    }

    /// Counts one item of `owner` that lives until `until`, refused ([`StoreError::Full`]) when
    /// the owner already holds its share at `now`. A caller whose item turns out not to be
    /// stored gives it back with [`Self::give_back`].
    pub(crate) fn take(&self, owner: Owner, until: UnixTime, now: UnixTime) -> Result<(), StoreError> {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= self.max_owners && !owners.contains_key(&owner) {
            return Err(StoreError::Full);
        }
        let buckets = owners.entry(owner).or_default();
        while buckets.front().is_some_and(|b| b.ends <= now.as_secs()) {
            buckets.pop_front();
        }
        if buckets.iter().map(|b| b.items).sum::<u64>() >= self.share {
            return Err(StoreError::Full);
        }
        let ends = bucket_end(until);
        // Items mostly arrive in expiry order (the newest bucket); the buckets stay sorted.
        match buckets.iter().rposition(|b| b.ends <= ends) {
            Some(i) if buckets[i].ends == ends => buckets[i].items += 1,
            Some(i) => buckets.insert(i + 1, Bucket { ends, items: 1 }),
            None => buckets.push_front(Bucket { ends, items: 1 }),
        }
        Ok(())
    }

    /// Gives back an item [`Self::take`] counted that was not stored after all (a replay).
    pub(crate) fn give_back(&self, owner: Owner, until: UnixTime) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let ends = bucket_end(until);
        if let Some(bucket) = owners
            .get_mut(&owner)
            .and_then(|buckets| buckets.iter_mut().find(|b| b.ends == ends))
        {
            bucket.items = bucket.items.saturating_sub(1);
        }
    }

    /// Forgets the owners whose items have all expired, so the map holds only live owners.
    pub(crate) fn sweep(&self, now: UnixTime) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        owners.retain(|_, buckets| {
            buckets.retain(|b| b.ends > now.as_secs() && b.items > 0);
            !buckets.is_empty()
        });
    }

    /// How many owners are held (live or not yet swept).
    pub(crate) fn owners(&self) -> usize {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl fmt::Debug for ExpiringShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpiringShares")
            .field("share", &self.share)
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
        let shares = ExpiringShares::new(3);
        let (evil, atlas) = (owner("https://evil.example/a"), owner("https://atlas.example/a"));
        let now = UnixTime::from_secs(1_000);
        for until in [1_060, 1_030, 1_065] {
            shares.take(evil, UnixTime::from_secs(until), now).unwrap();
        }
        assert_eq!(
            shares.take(evil, UnixTime::from_secs(1_060), now),
            Err(StoreError::Full)
        );
        shares.take(atlas, UnixTime::from_secs(1_060), now).unwrap();
        // The item until 1,030 counts until its bucket ends at 1,040.
        let later = UnixTime::from_secs(1_039);
        assert_eq!(
            shares.take(evil, UnixTime::from_secs(1_090), later),
            Err(StoreError::Full)
        );
        let later = UnixTime::from_secs(1_040);
        shares.take(evil, UnixTime::from_secs(1_090), later).unwrap();
        assert_eq!(
            shares.take(evil, UnixTime::from_secs(1_090), later),
            Err(StoreError::Full)
        );
    }

    #[test]
    fn an_item_given_back_frees_its_room_and_swept_owners_are_forgotten() {
        let shares = ExpiringShares::new(1);
        let evil = owner("https://evil.example/a");
        let now = UnixTime::from_secs(1_000);
        shares.take(evil, UnixTime::from_secs(1_060), now).unwrap();
        shares.give_back(evil, UnixTime::from_secs(1_060));
        shares.take(evil, UnixTime::from_secs(1_060), now).unwrap();
        assert_eq!(shares.owners(), 1);
        shares.sweep(UnixTime::from_secs(1_070));
        assert_eq!(shares.owners(), 0);
    }
}
