//! The device page's CSRF key, rotated with an overlap (issue 25).
//!
//! The page's token is the HMAC of its cookie and user code under the **current** key; a posted
//! token is accepted under the current key or the **previous** one, so a page served just before
//! a rotation still posts. The key rotates every [`ROTATION_SECONDS`], at the maintenance tick,
//! so a key that leaked (a memory dump, a log) stops minting accepted tokens within two periods.
//!
//! Replicas that share a store share the pair (the record `secret:device-csrf-keys`): the first
//! to ask draws the first key; the first whose tick finds the current key due draws the next, in
//! one commit at the version it read, so of several replicas exactly one rotates and the others
//! read what it drew; and a replica that meets a token it cannot verify reads the pair again
//! once (another replica may have rotated since its last tick).

use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use pap_company::records::{self, Commit, Expect, Records};
use pap_company::stores::{Owner, StoreError};
use pap_shared::{Rng, UnixTime};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// How long a key is the current one: a day. A token stays accepted for one to two of these.
pub(super) const ROTATION_SECONDS: i64 = 86_400;

/// The record that holds the pair, for replicas sharing a store.
const RECORD: &str = "secret:device-csrf-keys";

type Key = Zeroizing<[u8; 32]>;

/// The pair as stored: base64url keys, and since when the current one is current.
#[derive(Serialize, Deserialize)]
struct Stored {
    current: String,
    previous: Option<String>,
    since: i64,
}

/// The pair as held, and the version of the record it was read at.
struct Held {
    current: Key,
    previous: Option<Key>,
    since: i64,
    version: u64,
}

/// The device page's CSRF keys.
pub(super) struct CsrfKeys {
    /// The store the replicas share; `None`: this process alone.
    shared: Option<Arc<dyn Records>>,
    held: RwLock<Held>,
}

impl CsrfKeys {
    /// Keys of this process alone, the first drawn now.
    pub(super) fn local(rng: &dyn Rng, now: UnixTime) -> Self {
        Self {
            shared: None,
            held: RwLock::new(Held {
                current: draw(rng),
                previous: None,
                since: now.as_secs(),
                version: 0,
            }),
        }
    }

    /// The pair every replica sharing `records` uses: read, or drawn by the first to ask.
    pub(super) async fn shared(records: Arc<dyn Records>, rng: &dyn Rng, now: UnixTime) -> Result<Self, StoreError> {
        let held = records::retrying(|| async {
            if let Some(held) = read(records.as_ref()).await? {
                return Ok(Some(held));
            }
            let first = draw(rng);
            let stored = Stored {
                current: encode(&first),
                previous: None,
                since: now.as_secs(),
            };
            let committed = Commit::new(Owner::company())
                .put(RECORD.to_owned(), Expect::Absent, &stored, forever())
                .apply(records.as_ref())
                .await?;
            // Another replica drew first: the retry reads its key.
            Ok(committed.then(|| Held {
                current: first,
                previous: None,
                since: now.as_secs(),
                version: 1,
            }))
        })
        .await?;
        Ok(Self {
            shared: Some(records),
            held: RwLock::new(held),
        })
    }

    /// The token of a page with `cookie` for `user_code`, under the current key.
    pub(super) fn token(&self, cookie: &str, user_code: &str) -> String {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        mac(&held.current, cookie, user_code)
    }

    /// Whether `presented` is the token of `cookie` and `user_code` under the current or the
    /// previous key; when it is neither and the pair is shared, after reading it again once.
    pub(super) async fn accepts(&self, cookie: &str, user_code: &str, presented: &str) -> Result<bool, StoreError> {
        if self.held_accepts(cookie, user_code, presented) {
            return Ok(true);
        }
        if self.shared.is_none() {
            return Ok(false);
        }
        self.reread().await?;
        Ok(self.held_accepts(cookie, user_code, presented))
    }

    fn held_accepts(&self, cookie: &str, user_code: &str, presented: &str) -> bool {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        let under = |key: &Key| bool::from(mac(key, cookie, user_code).as_bytes().ct_eq(presented.as_bytes()));
        // Both compared, whichever matches: no timing tells which key a token was made under.
        let current = under(&held.current);
        let previous = held.previous.as_ref().is_some_and(under);
        current | previous
    }

    /// Reads the shared pair again (nothing to do for keys of this process alone).
    async fn reread(&self) -> Result<(), StoreError> {
        let Some(records) = &self.shared else { return Ok(()) };
        if let Some(held) = read(records.as_ref()).await? {
            *self.held.write().unwrap_or_else(PoisonError::into_inner) = held;
        }
        Ok(())
    }

    /// At the maintenance tick: reads the shared pair again and, when the current key has been
    /// current for [`ROTATION_SECONDS`], draws the next (the current one becomes the previous).
    /// Whether this call rotated.
    pub(super) async fn rotate_if_due(&self, rng: &dyn Rng, now: UnixTime) -> Result<bool, StoreError> {
        self.reread().await?;
        let (since, version, current) = {
            let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
            (held.since, held.version, held.current.clone())
        };
        if now.as_secs() < since.saturating_add(ROTATION_SECONDS) {
            return Ok(false);
        }
        let next = draw(rng);
        if let Some(records) = &self.shared {
            let stored = Stored {
                current: encode(&next),
                previous: Some(encode(&current)),
                since: now.as_secs(),
            };
            let committed = Commit::new(Owner::company())
                .put(RECORD.to_owned(), Expect::Version(version), &stored, forever())
                .apply(records.as_ref())
                .await?;
            if !committed {
                // Another replica rotated first: take what it drew.
                self.reread().await?;
                return Ok(false);
            }
        }
        *self.held.write().unwrap_or_else(PoisonError::into_inner) = Held {
            current: next,
            previous: Some(current),
            since: now.as_secs(),
            version: version.saturating_add(1),
        };
        Ok(true)
    }
}

/// The pair as stored now; a record that does not decode reads as none (the caller draws or
/// keeps what it holds).
async fn read(records: &dyn Records) -> Result<Option<Held>, StoreError> {
    let Some((version, stored)) = records::read::<Stored>(records, RECORD).await? else {
        return Ok(None);
    };
    let Some(current) = decode(&stored.current) else {
        return Ok(None);
    };
    Ok(Some(Held {
        current,
        previous: stored.previous.as_deref().and_then(decode),
        since: stored.since,
        version,
    }))
}

/// Until when the record is kept: a century (the pair is replaced, never left to expire).
fn forever() -> UnixTime {
    UnixTime::from_secs(4_102_444_800)
}

fn draw(rng: &dyn Rng) -> Key {
    let mut key = Zeroizing::new([0u8; 32]);
    rng.fill(key.as_mut());
    key
}

fn encode(key: &Key) -> String {
    URL_SAFE_NO_PAD.encode(key.as_ref())
}

fn decode(text: &str) -> Option<Key> {
    let bytes = Zeroizing::new(URL_SAFE_NO_PAD.decode(text).ok()?);
    let mut key = Zeroizing::new([0u8; 32]);
    (bytes.len() == 32).then(|| {
        key.copy_from_slice(&bytes);
        key
    })
}

/// HMAC-SHA256 under `key` of the page's purpose, its cookie and its user code, base64url.
fn mac(key: &Key, cookie: &str, user_code: &str) -> String {
    #[allow(clippy::expect_used, reason = "HMAC takes a key of any length")]
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_ref()).expect("HMAC takes any key length");
    mac.update(b"device\0");
    mac.update(cookie.as_bytes());
    mac.update(b"\0");
    mac.update(user_code.as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pap_company::records::MemoryRecords;
    use pap_shared::{ManualClock, SystemRng};

    const T0: i64 = 1_800_000_000;

    #[tokio::test]
    async fn a_token_outlives_one_rotation_not_two_and_replicas_agree() {
        let clock = ManualClock::at(T0);
        let records: Arc<dyn Records> = Arc::new(MemoryRecords::new(16, clock.clone()));
        let now = |s: i64| UnixTime::from_secs(T0 + s);
        let a = CsrfKeys::shared(records.clone(), &SystemRng, now(0)).await.unwrap();
        let b = CsrfKeys::shared(records.clone(), &SystemRng, now(0)).await.unwrap();
        let first = a.token("cookie", "ABCD-EFGH");
        assert_eq!(
            b.token("cookie", "ABCD-EFGH"),
            first,
            "the replicas share the first key"
        );
        assert!(!b.accepts("cookie", "WXYZ-EFGH", &first).await.unwrap(), "another code");
        assert!(
            !b.accepts("other", "ABCD-EFGH", &first).await.unwrap(),
            "another cookie"
        );

        // Not yet due; then due: one replica rotates, the other finds it done.
        assert!(!a.rotate_if_due(&SystemRng, now(ROTATION_SECONDS - 1)).await.unwrap());
        let (ra, rb) = tokio::join!(
            a.rotate_if_due(&SystemRng, now(ROTATION_SECONDS)),
            b.rotate_if_due(&SystemRng, now(ROTATION_SECONDS))
        );
        assert_eq!(
            u8::from(ra.unwrap()) + u8::from(rb.unwrap()),
            1,
            "exactly one replica rotates"
        );
        let second = a.token("cookie", "ABCD-EFGH");
        assert_ne!(second, first);
        assert_eq!(b.token("cookie", "ABCD-EFGH"), second);
        // The page served before the rotation still posts, to either replica.
        assert!(a.accepts("cookie", "ABCD-EFGH", &first).await.unwrap());
        assert!(b.accepts("cookie", "ABCD-EFGH", &first).await.unwrap());

        // A second rotation: the first key is gone everywhere; the second is the previous.
        assert!(a.rotate_if_due(&SystemRng, now(2 * ROTATION_SECONDS)).await.unwrap());
        assert!(!a.accepts("cookie", "ABCD-EFGH", &first).await.unwrap());
        // b has not ticked since: it reads the pair again on the token it cannot verify.
        let third = a.token("cookie", "ABCD-EFGH");
        assert!(b.accepts("cookie", "ABCD-EFGH", &third).await.unwrap());
        assert!(!b.accepts("cookie", "ABCD-EFGH", &first).await.unwrap());
        assert!(b.accepts("cookie", "ABCD-EFGH", &second).await.unwrap());
    }

    #[tokio::test]
    async fn keys_of_one_process_rotate_the_same_way() {
        let keys = CsrfKeys::local(&SystemRng, UnixTime::from_secs(T0));
        let first = keys.token("cookie", "ABCD-EFGH");
        assert!(
            keys.rotate_if_due(&SystemRng, UnixTime::from_secs(T0 + ROTATION_SECONDS))
                .await
                .unwrap()
        );
        assert!(keys.accepts("cookie", "ABCD-EFGH", &first).await.unwrap());
        assert!(
            keys.rotate_if_due(&SystemRng, UnixTime::from_secs(T0 + 2 * ROTATION_SECONDS))
                .await
                .unwrap()
        );
        assert!(!keys.accepts("cookie", "ABCD-EFGH", &first).await.unwrap());
    }
}
