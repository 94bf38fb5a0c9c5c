//! Throttled guessing: a count of attempts per key (an account, a client address) in a fixed
//! window, refused past a limit until the window ends.

use std::sync::Arc;

use pap_shared::{Clock, UnixTime};

use crate::store::{Bounded, WhenFull};

/// Attempts per key per window, at most `limit`; past it, refused until the window ends.
///
/// The counts live in an evicting store: forgetting a count early only gives a key a fresh
/// window, so the store's capacity bounds memory, never correctness of anything but the limit.
#[derive(Debug)]
pub(crate) struct Throttle {
    counts: Bounded<String, (u32, UnixTime)>,
    limit: u32,
    window: i64,
    clock: Arc<dyn Clock>,
}

impl Throttle {
    /// `limit` attempts per `window` seconds for each of at most `keys` keys.
    pub(crate) fn new(limit: u32, window: i64, keys: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            counts: Bounded::new(keys, WhenFull::Evict, clock.clone()),
            limit,
            window,
            clock,
        }
    }

    /// Counts one attempt for `key`: `Ok` within the limit, or the seconds until the window
    /// ends (for `Retry-After`) past it. A refused attempt is not counted.
    pub(crate) fn attempt(&self, key: &str) -> Result<(), u64> {
        let now = self.clock.now();
        let (limit, window) = (self.limit, self.window);
        let counted = self.counts.compute(&key.to_owned(), |held| match held {
            Some((count, ends)) if count >= limit => Err(ends.since(now).max(1).unsigned_abs()),
            Some((count, ends)) => Ok(((count + 1, ends), ends)),
            None => {
                let ends = now.plus(window);
                Ok(((1, ends), ends))
            }
        });
        // An evicting store never refuses a record.
        counted.unwrap_or(Ok(()))
    }

    /// Drops the counts of ended windows.
    pub(crate) fn sweep(&self) {
        self.counts.sweep();
    }

    /// How many keys are counted now.
    pub(crate) fn len(&self) -> u64 {
        self.counts.len()
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

    #[test]
    fn past_the_limit_attempts_wait_for_the_window_to_end() {
        let clock = Arc::new(Settable(AtomicI64::new(1_000)));
        let throttle = Throttle::new(3, 60, 100, clock.clone());
        for _ in 0..3 {
            assert_eq!(throttle.attempt("ada"), Ok(()));
        }
        assert_eq!(throttle.attempt("ada"), Err(60));
        assert_eq!(throttle.attempt("grace"), Ok(()), "each key has its own count");
        clock.0.store(1_045, Ordering::SeqCst);
        assert_eq!(throttle.attempt("ada"), Err(15));
        clock.0.store(1_060, Ordering::SeqCst);
        assert_eq!(throttle.attempt("ada"), Ok(()), "a new window");
    }
}
