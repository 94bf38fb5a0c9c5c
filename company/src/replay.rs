//! One-time use of a browser assertion's `(client_id, jti)` (PAP-5-07).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use pap_shared::{ClientId, Clock, Jti, UnixTime};
use sha2::{Digest, Sha256};

use crate::store::{Bounded, StoreError, WhenFull};

/// The replay key of a browser assertion: SHA-256 over its namespace, `client_id` and `jti`.
///
/// Hashing bounds the memory an entry takes whatever the `jti`'s length, and the namespace keeps
/// browser assertions apart from any other JWT the company tracks.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplayKey([u8; 32]);

impl ReplayKey {
    /// The key for a browser assertion from `client_id` with `jti`.
    pub fn browser_assertion(client_id: &ClientId, jti: &Jti) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"poppy-browser+jwt\0");
        hash.update(client_id.as_str().as_bytes());
        hash.update(b"\0");
        hash.update(jti.as_str().as_bytes());
        Self(hash.finalize().into())
    }

    /// The key for a JWT of another kind (`namespace`, e.g. `client-assertion` or `dpop`), from
    /// `issuer` (a `client_id` or a key thumbprint) with `jti`.
    pub fn of(namespace: &str, issuer: &str, jti: &str) -> Self {
        let mut hash = Sha256::new();
        for part in [namespace, issuer, jti] {
            hash.update(part.as_bytes());
            hash.update(b"\0");
        }
        Self(hash.finalize().into())
    }

    /// The 32 hash bytes, e.g. for a distributed store's key.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for ReplayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplayKey(")?;
        for b in &self.0[..4] {
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

/// How many marks the embedded guard holds at most: a minute of joins at over 16,000 a second.
/// Past it, new joins are refused (503) rather than a live mark dropped, which would reopen its
/// assertion to replay.
pub const REPLAY_CAPACITY: u64 = 1_000_000;

/// The embedded replay guard: a moka cache of marks (`entry().or_insert_with_if()` decides
/// under the key's lock, so of many concurrent callers exactly one wins), each kept until its
/// `exp`, never evicted before: a full guard refuses new marks instead ([`StoreError::Full`]).
#[derive(Clone)]
pub struct MemoryReplayGuard {
    marks: Arc<Bounded<ReplayKey, ()>>,
}

impl MemoryReplayGuard {
    /// An empty guard of [`REPLAY_CAPACITY`] marks, reading "now" from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_capacity(REPLAY_CAPACITY, clock)
    }

    /// An empty guard of at most `capacity` marks.
    pub fn with_capacity(capacity: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            marks: Arc::new(Bounded::new(capacity, WhenFull::Refuse, clock)),
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

    /// Drops the marks whose `exp` has passed (moka does so as real time passes).
    pub fn sweep(&self) {
        self.marks.sweep();
    }
}

impl fmt::Debug for MemoryReplayGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryReplayGuard").field("marks", &self.marks).finish()
    }
}

#[async_trait]
impl ReplayGuard for MemoryReplayGuard {
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> Result<bool, StoreError> {
        self.marks.insert_once(key, (), expires_at)
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
        let guard = MemoryReplayGuard::with_capacity(2, clock.clone());
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
