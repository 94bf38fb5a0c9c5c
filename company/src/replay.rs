//! One-time use of a browser assertion's `(client_id, jti)` (PAP-5-07).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use moka::sync::Cache;
use pap_shared::{ClientId, Clock, Jti, UnixTime};
use sha2::{Digest, Sha256};

use crate::expiry::ExpireAt;

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
    /// Marks `key` as used until `expires_at`. Returns true for exactly one caller per key
    /// while the mark lasts, however many call at once; false for every other.
    ///
    /// Callers refuse an already expired assertion before calling: a mark that expires at once
    /// would read as fresh again.
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> bool;
}

/// The embedded replay guard: a moka cache whose entries expire at the assertion's `exp`
/// (plus one second, so an entry never disappears while `exp == now` is still being refused).
///
/// The cache has no size bound on purpose: evicting a live entry would let its assertion be
/// replayed. Its size is bounded by the 60-second lifetime times the join rate (about 100 bytes
/// an entry: 10,000 joins/s hold about 60 MB).
#[derive(Clone)]
pub struct MokaReplayGuard {
    marks: Cache<ReplayKey, UnixTime>,
}

impl MokaReplayGuard {
    /// A guard that reads "now" from `clock` to turn each `expires_at` into a time to live.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            marks: Cache::builder().expire_after(ExpireAt::new(clock)).build(),
        }
    }

    /// How many marks are held (approximate while expiries are pending).
    pub fn len(&self) -> u64 {
        self.marks.run_pending_tasks();
        self.marks.entry_count()
    }

    /// Whether no mark is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for MokaReplayGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MokaReplayGuard")
            .field("entries", &self.marks.entry_count())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ReplayGuard for MokaReplayGuard {
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> bool {
        // `entry().or_insert_with()` decides under the cache's per-key lock: of many concurrent
        // callers exactly one sees a fresh entry. (A `contains` then `insert` would race.)
        self.marks.entry(key).or_insert_with(|| expires_at).is_fresh()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed;
    impl Clock for Fixed {
        fn now(&self) -> UnixTime {
            UnixTime::from_secs(1_000)
        }
    }

    fn key(jti: &str) -> ReplayKey {
        ReplayKey::browser_assertion(
            &ClientId::parse("https://atlas.example/agent.json").unwrap(),
            &Jti::parse(jti).unwrap(),
        )
    }

    #[tokio::test]
    async fn marks_once_per_key() {
        let guard = MokaReplayGuard::new(Arc::new(Fixed));
        let a = key("AAAAAAAAAAAAAAAAAAAAAA");
        let b = key("BBBBBBBBBBBBBBBBBBBBBB");
        assert!(guard.mark_once(a, UnixTime::from_secs(1_060)).await);
        assert!(!guard.mark_once(a, UnixTime::from_secs(1_060)).await);
        assert!(guard.mark_once(b, UnixTime::from_secs(1_060)).await);
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
        let guard = MokaReplayGuard::new(Arc::new(Fixed));
        let k = key("CCCCCCCCCCCCCCCCCCCCCC");
        let tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let guard = guard.clone();
                tokio::spawn(async move { guard.mark_once(k, UnixTime::from_secs(1_060)).await })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            wins += usize::from(t.await.unwrap());
        }
        assert_eq!(wins, 1);
    }
}
