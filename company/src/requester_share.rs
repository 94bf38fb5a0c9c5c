//! Review N3 by address: what one requester address may hold of the replay guard, whatever the
//! domains it signs for.
//!
//! An owner's share ([`crate::share`]) is per registrable domain, and domains are cheap: a PSL
//! private suffix such as `github.io` gives one to every account, so eight of them would fill the
//! guard. So every mark a request makes also counts against the address the request came from
//! (the key the app gave [`crate::resolver::as_requester`]: an IPv4 address, an IPv6 /64), and an
//! address holds at most a share of live marks. The count is kept in this process: a company of
//! N replicas lets an address hold N shares, and the store holds no per-address keys (on a Redis
//! Cluster they could not share a join's slot, nor its one round trip). A request served outside
//! `as_requester` counts against no address.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use pap_shared::{Clock, SessionId, UnixTime};

use crate::join_store::{Committed, Freshness, JoinCommit, JoinStore, SeenSession};
use crate::replay::{ReplayGuard, ReplayKey};
use crate::share::{ExpiringShares, Owner};
use crate::store::StoreError;

/// How many addresses [`RequesterShares`] tracks at most (each with a live mark, or not yet
/// swept): about 100 MB at the cap. A new address past it is refused until the maintenance
/// sweep forgets the addresses whose marks all expired.
pub const REQUESTER_ADDRESSES: usize = 1_000_000;

/// Live replay marks per requester address, in this process.
pub struct RequesterShares {
    shares: ExpiringShares,
    clock: Arc<dyn Clock>,
}

impl RequesterShares {
    /// At most `share` live marks per requester address once `pressure` marks are live
    /// through this process (0: always; below it an address takes what others leave, as in
    /// `ExpiringShares`), at most [`REQUESTER_ADDRESSES`] addresses.
    pub fn new(share: u64, pressure: u64, clock: Arc<dyn Clock>) -> Arc<Self> {
        Self::with_limits(share, pressure, REQUESTER_ADDRESSES, clock)
    }

    /// As [`Self::new`], at most `addresses` addresses.
    pub fn with_limits(share: u64, pressure: u64, addresses: usize, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            shares: ExpiringShares::with_owner_cap(share, pressure, addresses),
            clock,
        })
    }

    /// Counts a mark living until `until` against the request's address, if it has one.
    fn take(&self, until: UnixTime) -> Result<Option<Owner>, StoreError> {
        let Some(address) = crate::client::requester() else {
            return Ok(None);
        };
        let owner = Owner::named("address", &address);
        self.shares.take(owner, until, self.clock.now())?;
        Ok(Some(owner))
    }

    /// Gives back what [`Self::take`] counted for a mark that was not made (a replay, a store
    /// that refused).
    fn give_back(&self, taken: Option<Owner>, until: UnixTime) {
        if let Some(owner) = taken {
            self.shares.give_back(owner, until);
        }
    }

    /// Forgets the addresses whose marks have all expired.
    pub fn sweep(&self) {
        self.shares.sweep(self.clock.now());
    }

    /// How many addresses are held (live, or not yet swept).
    pub fn addresses(&self) -> usize {
        self.shares.owners()
    }
}

impl fmt::Debug for RequesterShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequesterShares")
            .field("shares", &self.shares)
            .finish_non_exhaustive()
    }
}

/// A replay guard or a join store whose new marks also count against the requester's address
/// ([`RequesterShares`]): past its share under pressure, [`StoreError::OverShare`] before the
/// store is asked.
pub struct PerRequester<T: ?Sized> {
    inner: Arc<T>,
    shares: Arc<RequesterShares>,
}

impl<T: ?Sized> PerRequester<T> {
    /// `inner`, its marks counted in `shares`.
    pub fn new(inner: Arc<T>, shares: Arc<RequesterShares>) -> Self {
        Self { inner, shares }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for PerRequester<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerRequester")
            .field("inner", &self.inner)
            .field("shares", &self.shares)
            .finish()
    }
}

#[async_trait]
impl ReplayGuard for PerRequester<dyn ReplayGuard> {
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> Result<bool, StoreError> {
        let taken = self.shares.take(expires_at)?;
        let marked = self.inner.mark_once(key, expires_at).await;
        if !matches!(marked, Ok(true)) {
            self.shares.give_back(taken, expires_at);
        }
        marked
    }
}

#[async_trait]
impl JoinStore for PerRequester<dyn JoinStore> {
    async fn session(&self, id: &SessionId, freshness: Freshness) -> Result<Option<SeenSession>, StoreError> {
        self.inner.session(id, freshness).await
    }

    async fn commit(&self, commit: JoinCommit<'_>) -> Result<Committed, StoreError> {
        let until = commit.expires_at;
        let taken = self.shares.take(until)?;
        let committed = self.inner.commit(commit).await;
        if !matches!(committed, Ok(Committed::Joined)) {
            self.shares.give_back(taken, until);
        }
        committed
    }
}

#[cfg(test)]
mod tests {
    use pap_shared::{ClientId, Jti, ManualClock, SystemRng};

    use super::*;
    use crate::replay::MemoryReplayGuard;
    use crate::resolver::as_requester;

    fn key(domain: &str) -> ReplayKey {
        let client = ClientId::parse(&format!("https://{domain}/agent.json")).unwrap();
        ReplayKey::browser_assertion(&client, &Jti::generate(&SystemRng))
    }

    #[tokio::test]
    async fn an_address_holds_its_share_of_marks_whatever_the_domains_it_signs_for() {
        let clock = ManualClock::at(1_000);
        let shares = RequesterShares::new(2, 0, clock.clone());
        let inner: Arc<dyn ReplayGuard> = Arc::new(MemoryReplayGuard::new(clock.clone()));
        let guard = PerRequester::new(inner, shares.clone());
        let exp = UnixTime::from_secs(1_060);
        let first = key("alice.github.io");
        as_requester("203.0.113.9".into(), async {
            assert_eq!(guard.mark_once(first, exp).await, Ok(true));
            assert_eq!(guard.mark_once(key("bob.github.io"), exp).await, Ok(true));
            assert_eq!(
                guard.mark_once(key("carol.github.io"), exp).await,
                Err(StoreError::OverShare),
                "a third domain from the same address"
            );
        })
        .await;
        // Another address, and a request from no known address, mark as before.
        as_requester("198.51.100.7".into(), async {
            assert_eq!(guard.mark_once(key("carol.github.io"), exp).await, Ok(true));
        })
        .await;
        assert_eq!(guard.mark_once(key("dave.github.io"), exp).await, Ok(true));
        // A replay is answered as one, and takes no room.
        as_requester("198.51.100.7".into(), async {
            assert_eq!(guard.mark_once(first, exp).await, Ok(false));
            assert_eq!(guard.mark_once(key("erin.github.io"), exp).await, Ok(true));
        })
        .await;
        // Once its marks expire, the address has its room back and is forgotten at the sweep.
        clock.set(1_070);
        as_requester("203.0.113.9".into(), async {
            assert_eq!(
                guard
                    .mark_once(key("carol.github.io"), UnixTime::from_secs(1_130))
                    .await,
                Ok(true)
            );
        })
        .await;
        clock.set(1_200);
        shares.sweep();
        assert_eq!(shares.addresses(), 0);
    }

    #[tokio::test]
    async fn at_most_so_many_addresses_are_held_and_a_swept_one_makes_room() {
        let clock = ManualClock::at(1_000);
        let shares = RequesterShares::with_limits(10, 0, 2, clock.clone());
        let inner: Arc<dyn ReplayGuard> = Arc::new(MemoryReplayGuard::new(clock.clone()));
        let guard = PerRequester::new(inner, shares.clone());
        let exp = UnixTime::from_secs(1_060);
        for address in ["203.0.113.1", "203.0.113.2"] {
            as_requester(address.into(), async {
                assert_eq!(guard.mark_once(key("atlas.example"), exp).await, Ok(true));
            })
            .await;
        }
        as_requester("203.0.113.3".into(), async {
            assert_eq!(
                guard.mark_once(key("atlas.example"), exp).await,
                Err(StoreError::Full),
                "a third address"
            );
        })
        .await;
        // An address already held still marks.
        as_requester("203.0.113.1".into(), async {
            assert_eq!(guard.mark_once(key("atlas.example"), exp).await, Ok(true));
        })
        .await;
        clock.set(1_080);
        shares.sweep();
        as_requester("203.0.113.3".into(), async {
            assert_eq!(
                guard.mark_once(key("atlas.example"), UnixTime::from_secs(1_140)).await,
                Ok(true)
            );
        })
        .await;
    }
}
