//! One-time use of a browser assertion's `(client_id, jti)` (PAP-5-07).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use pap_shared::{ClientId, Clock, Jti, UnixTime};
use sha2::{Digest, Sha256};

use crate::mark_set::{MarkKey, MarkSet};
use crate::share::{ExpiringShares, Owner};
use crate::store::StoreError;

/// The replay key of a browser assertion: SHA-256 over its namespace, `client_id` and `jti`,
/// and the [`Owner`] whose share of the guard its mark counts against (review N3).
///
/// Hashing bounds the memory an entry takes whatever the `jti`'s length, and the namespace keeps
/// browser assertions apart from any other JWT the company tracks. The owner is not part of
/// what is compared: one `(client_id, jti)` is one key.
#[derive(Clone, Copy)]
pub struct ReplayKey {
    hash: [u8; 32],
    owner: Owner,
}

impl PartialEq for ReplayKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}

impl Eq for ReplayKey {}

impl std::hash::Hash for ReplayKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
    }
}

impl ReplayKey {
    /// The key for a browser assertion from `client_id` with `jti`.
    pub fn browser_assertion(client_id: &ClientId, jti: &Jti) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"poppy-browser+jwt\0");
        hash.update(client_id.as_str().as_bytes());
        hash.update(b"\0");
        hash.update(jti.as_str().as_bytes());
        Self {
            hash: hash.finalize().into(),
            owner: Owner::of_client(client_id),
        }
    }

    /// The key for a JWT of another kind (`namespace`, e.g. `client-assertion` or `dpop`), from
    /// `issuer` (a `client_id` or a key thumbprint) with `jti`, presented by `client_id` (whose
    /// share its mark counts against).
    pub fn of(namespace: &str, issuer: &str, jti: &str, client_id: &ClientId) -> Self {
        let mut hash = Sha256::new();
        for part in [namespace, issuer, jti] {
            hash.update(part.as_bytes());
            hash.update(b"\0");
        }
        Self {
            hash: hash.finalize().into(),
            owner: Owner::of_client(client_id),
        }
    }

    /// The 32 hash bytes, e.g. for a distributed store's key.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.hash
    }

    /// Whose share of the guard the mark counts against.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// The embedded guard's key: the hash's first 16 bytes.
    fn mark_key(&self) -> MarkKey {
        let mut key = [0; 16];
        key.copy_from_slice(&self.hash[..16]);
        key
    }
}

impl fmt::Debug for ReplayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplayKey(")?;
        for b in &self.hash[..4] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// Marks keys as used, once.
#[async_trait]
pub trait ReplayGuard: Send + Sync + fmt::Debug {
    /// Marks `key` as used until `expires_at`. `Ok(true)` for exactly one caller per key while
    /// the mark lasts, however many call at once; `Ok(false)` for every other. When the mark
    /// cannot be made (the store is full, or down) the answer is an error and the caller must
    /// refuse: an assertion that could not be marked is never accepted.
    ///
    /// Callers refuse an already expired assertion before calling: a mark that expires at once
    /// would read as fresh again.
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> Result<bool, StoreError>;
}

/// How many marks the embedded guard holds at most: more than a minute of joins at 45,000 a
/// second, in about 140 MB (46 bytes a mark, `mark_set.rs`). Past it, new joins are refused
/// (503) rather than a live mark dropped, which would reopen its assertion to replay.
pub const REPLAY_CAPACITY: u64 = 3_000_000;

/// The guard's share of one owner under pressure is this fraction (1/16) of its capacity.
pub const REPLAY_SHARE_DIVISOR: u64 = 16;

/// How many live marks one owner (the registrable domain of a client, or a client address)
/// keeps under pressure, in memory or in Redis (review N3): a sixteenth of
/// [`REPLAY_CAPACITY`], 187,500 marks, about 2,900 joins a second held for a mark's 65 s.
pub const REPLAY_SHARE: u64 = REPLAY_CAPACITY / REPLAY_SHARE_DIVISOR;

/// From how many live marks the shares bind (issue 42): half the guard. Below it an owner
/// takes what others leave, so one agent with many users is refused only past 1,500,000 live
/// marks (23,000 joins a second held for 65 s, more than this machine's cores verify; but
/// only 4,500 client assertions a second, whose marks are kept 330 s: one sender reaching the
/// pressure that way makes every owner past its share wait, as under any flood); above
/// it an owner at its share gets 429, and the other half of the guard is the room that
/// owners within their share keep: a flood from one owner fills half the guard, and it takes
/// eight more owners at their share to fill the rest.
pub const REPLAY_PRESSURE: u64 = REPLAY_CAPACITY / 2;

/// The embedded replay guard: a bounded set of marks (`MarkSet`; of many
/// concurrent callers marking one key exactly one wins), each kept until its `exp`, never
/// dropped before: a full guard refuses new marks instead ([`StoreError::Full`]). Under
/// pressure one owner (the registrable domain of the marking client) holds at most its share
/// of the marks (`ExpiringShares`): a client flooding the guard is refused, the others are
/// not.
#[derive(Clone)]
pub struct MemoryReplayGuard {
    marks: Arc<MarkSet>,
    shares: Arc<ExpiringShares>,
    clock: Arc<dyn Clock>,
}

impl MemoryReplayGuard {
    /// An empty guard of [`REPLAY_CAPACITY`] marks, reading "now" from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_capacity(REPLAY_CAPACITY, clock)
    }

    /// An empty guard of at most `capacity` marks, a sixteenth of them per owner once half
    /// are live.
    pub fn with_capacity(capacity: u64, clock: Arc<dyn Clock>) -> Self {
        Self::with_limits(capacity, (capacity / REPLAY_SHARE_DIVISOR).max(1), clock)
    }

    /// An empty guard of at most `capacity` marks, at most `share` of them per owner once half
    /// are live.
    pub fn with_limits(capacity: u64, share: u64, clock: Arc<dyn Clock>) -> Self {
        Self::with_pressure(capacity, share, capacity / 2, clock)
    }

    /// An empty guard of at most `capacity` marks, at most `share` of them per owner once
    /// `pressure` are live (0: always).
    pub fn with_pressure(capacity: u64, share: u64, pressure: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            marks: Arc::new(MarkSet::new(capacity)),
            shares: Arc::new(ExpiringShares::new(share, pressure)),
            clock,
        }
    }

    /// How many marks are held.
    pub fn len(&self) -> u64 {
        self.marks.len()
    }

    /// Whether no mark is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the marks whose `exp` has passed, and the owners that no longer hold any.
    pub fn sweep(&self) {
        let now = self.clock.now();
        self.marks.sweep(now);
        self.shares.sweep(now);
    }
}

impl fmt::Debug for MemoryReplayGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryReplayGuard")
            .field("marks", &self.marks.len())
            .field("shares", &self.shares)
            .finish()
    }
}

#[async_trait]
impl ReplayGuard for MemoryReplayGuard {
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mark = key.mark_key();
        if let Err(refused) = self.shares.take(key.owner, expires_at, now) {
            // A held key is a no whether or not its owner is over its share.
            return if self.marks.contains(&mark, now) {
                Ok(false)
            } else {
                Err(refused)
            };
        }
        let fresh = self.marks.insert_once(mark, expires_at, now);
        if !matches!(fresh, Ok(true)) {
            self.shares.give_back(key.owner, expires_at);
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Settable(std::sync::atomic::AtomicI64);
    impl Clock for Settable {
        fn now(&self) -> UnixTime {
            UnixTime::from_secs(self.0.load(std::sync::atomic::Ordering::SeqCst))
        }
    }

    fn at(secs: i64) -> Arc<Settable> {
        Arc::new(Settable(secs.into()))
    }

    fn key(jti: &str) -> ReplayKey {
        ReplayKey::browser_assertion(
            &ClientId::parse("https://atlas.example/agent.json").unwrap(),
            &Jti::parse(jti).unwrap(),
        )
    }

    #[tokio::test]
    async fn marks_once_per_key() {
        let guard = MemoryReplayGuard::new(at(1_000));
        let a = key("AAAAAAAAAAAAAAAAAAAAAA");
        let b = key("BBBBBBBBBBBBBBBBBBBBBB");
        assert_eq!(guard.mark_once(a, UnixTime::from_secs(1_060)).await, Ok(true));
        assert_eq!(guard.mark_once(a, UnixTime::from_secs(1_060)).await, Ok(false));
        assert_eq!(guard.mark_once(b, UnixTime::from_secs(1_060)).await, Ok(true));
    }

    #[tokio::test]
    async fn marks_last_until_exp_and_then_go() {
        let clock = at(1_000);
        let guard = MemoryReplayGuard::new(clock.clone());
        let a = key("AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(guard.mark_once(a, UnixTime::from_secs(1_060)).await, Ok(true));
        clock.0.store(1_059, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            guard.mark_once(a, UnixTime::from_secs(1_060)).await,
            Ok(false),
            "still marked"
        );
        clock.0.store(1_061, std::sync::atomic::Ordering::SeqCst);
        guard.sweep();
        assert!(guard.is_empty(), "an expired mark is dropped");
    }

    #[tokio::test]
    async fn a_full_guard_refuses_and_never_drops_a_live_mark() {
        let clock = at(1_000);
        let guard = MemoryReplayGuard::with_limits(2, 10, clock.clone());
        let (a, b, c) = (
            key("AAAAAAAAAAAAAAAAAAAAAA"),
            key("BBBBBBBBBBBBBBBBBBBBBB"),
            key("CCCCCCCCCCCCCCCCCCCCCC"),
        );
        assert_eq!(guard.mark_once(a, UnixTime::from_secs(1_060)).await, Ok(true));
        assert_eq!(guard.mark_once(b, UnixTime::from_secs(1_060)).await, Ok(true));
        assert_eq!(
            guard.mark_once(c, UnixTime::from_secs(1_060)).await,
            Err(StoreError::Full)
        );
        // The live marks stand: a replay of either is still refused, as a replay.
        assert_eq!(guard.mark_once(a, UnixTime::from_secs(1_060)).await, Ok(false));
        clock.0.store(1_061, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            guard.mark_once(c, UnixTime::from_secs(1_120)).await,
            Ok(true),
            "room once they expire"
        );
    }

    #[tokio::test]
    async fn a_client_filling_the_guard_fills_only_its_own_share() {
        let clock = at(1_000);
        // 16 marks, 2 per owner, the shares binding from the first mark.
        let guard = MemoryReplayGuard::with_pressure(16, 2, 0, clock.clone());
        let evil = |i: usize| {
            ReplayKey::browser_assertion(
                &ClientId::parse(&format!("https://c{i}.evil.example/agent.json")).unwrap(),
                &Jti::parse(&format!("{i:0>22}")).unwrap(),
            )
        };
        let exp = UnixTime::from_secs(1_060);
        assert_eq!(guard.mark_once(evil(0), exp).await, Ok(true));
        assert_eq!(guard.mark_once(evil(1), exp).await, Ok(true));
        // Another client of the same registrable domain is the same owner.
        assert_eq!(guard.mark_once(evil(2), exp).await, Err(StoreError::OverShare));
        assert_eq!(
            guard.mark_once(evil(0), exp).await,
            Ok(false),
            "a replay is still a replay"
        );
        // Everyone else still marks.
        assert_eq!(guard.mark_once(key("AAAAAAAAAAAAAAAAAAAAAA"), exp).await, Ok(true));
        assert_eq!(guard.mark_once(key("AAAAAAAAAAAAAAAAAAAAAA"), exp).await, Ok(false));
        assert_eq!(guard.mark_once(key("BBBBBBBBBBBBBBBBBBBBBB"), exp).await, Ok(true));
        // The owner's room comes back once its marks' buckets end.
        clock.0.store(1_070, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(guard.mark_once(evil(2), UnixTime::from_secs(1_130)).await, Ok(true));
    }

    #[tokio::test]
    async fn one_owner_takes_what_others_leave_until_half_the_guard_then_the_others_their_share() {
        let clock = at(1_000);
        // 32 marks, 2 per owner once 16 are live.
        let guard = MemoryReplayGuard::with_capacity(32, clock.clone());
        let exp = UnixTime::from_secs(1_060);
        let big = |i: usize| {
            ReplayKey::browser_assertion(
                &ClientId::parse("https://popular.example/agent.json").unwrap(),
                &Jti::parse(&format!("{i:0>22}")).unwrap(),
            )
        };
        for i in 0..16 {
            assert_eq!(
                guard.mark_once(big(i), exp).await,
                Ok(true),
                "mark {i}: no pressure yet"
            );
        }
        assert_eq!(guard.mark_once(big(16), exp).await, Err(StoreError::OverShare));
        assert_eq!(guard.mark_once(key("AAAAAAAAAAAAAAAAAAAAAA"), exp).await, Ok(true));
        assert_eq!(guard.mark_once(key("BBBBBBBBBBBBBBBBBBBBBB"), exp).await, Ok(true));
        assert_eq!(
            guard.mark_once(key("CCCCCCCCCCCCCCCCCCCCCC"), exp).await,
            Err(StoreError::OverShare),
            "under pressure, every owner keeps its share and no more"
        );
    }

    #[test]
    fn keys_are_scoped_per_client() {
        let jti = Jti::parse("AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let one = ReplayKey::browser_assertion(&ClientId::parse("https://a.example/agent.json").unwrap(), &jti);
        let two = ReplayKey::browser_assertion(&ClientId::parse("https://b.example/agent.json").unwrap(), &jti);
        assert_ne!(one, two);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_winner_among_a_thousand_concurrent_marks() {
        let guard = MemoryReplayGuard::new(at(1_000));
        let k = key("CCCCCCCCCCCCCCCCCCCCCC");
        let tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let guard = guard.clone();
                tokio::spawn(async move { guard.mark_once(k, UnixTime::from_secs(1_060)).await })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            wins += usize::from(t.await.unwrap().unwrap());
        }
        assert_eq!(wins, 1);
    }
}
