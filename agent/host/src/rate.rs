//! A rate limit per paired device and per tool (Bureau has one; review N10): a token bucket of
//! [`BURST`] calls refilled at [`PER_SECOND`] a second. A call past it is refused at once with
//! a retryable `rate_limited` error whose cause says when to try again; nothing runs. One
//! device's calls never slow another's.
//!
//! The buckets live in a bounded cache (moka): at most [`MAX_BUCKETS`] (device, tool) pairs, one
//! idle for ten minutes forgotten (it would be full again by then anyway).

use std::time::Duration;

use tokio::time::Instant;

/// Calls one device may make of one tool at once, after a quiet moment.
pub const BURST: f64 = 20.0;
/// Calls a second one device may make of one tool, sustained.
pub const PER_SECOND: f64 = 10.0;
/// (device, tool) pairs remembered at most.
pub const MAX_BUCKETS: u64 = 16_384;

/// One (device, tool) pair's bucket: the tokens it had at `at`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(now: Instant) -> Self {
        Self { tokens: BURST, at: now }
    }

    /// Takes one token at `now`, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * PER_SECOND).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / PER_SECOND))
        }
    }
}

/// The buckets of one host.
#[derive(Clone, Debug)]
pub struct RateLimit {
    buckets: moka::sync::Cache<(String, String), std::sync::Arc<std::sync::Mutex<Bucket>>>,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            buckets: moka::sync::Cache::builder()
                .max_capacity(MAX_BUCKETS)
                .time_to_idle(Duration::from_secs(600))
                .build(),
        }
    }
}

impl RateLimit {
    /// Whether `device` may call `tool` at `now`; when not, how long until it may.
    pub fn check(&self, device: &str, tool: &str, now: Instant) -> Result<(), Duration> {
        let bucket = self.buckets.get_with((device.to_owned(), tool.to_owned()), || {
            std::sync::Arc::new(std::sync::Mutex::new(Bucket::full(now)))
        });
        // Every critical section is one bucket update.
        let mut bucket = bucket.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        bucket.take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_sustained_rate_per_device_and_tool() {
        let limit = RateLimit::default();
        let start = Instant::now();
        for _ in 0..20 {
            assert!(limit.check("dev_A", "browser_click", start).is_ok());
        }
        let wait = limit.check("dev_A", "browser_click", start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // Another tool, another device: their own buckets.
        assert!(limit.check("dev_A", "browser_get_dom", start).is_ok());
        assert!(limit.check("dev_B", "browser_click", start).is_ok());
        // 100 ms later one token is back, and only one.
        let later = start + Duration::from_millis(100);
        assert!(limit.check("dev_A", "browser_click", later).is_ok());
        assert!(limit.check("dev_A", "browser_click", later).is_err());
        // A quiet second refills the burst, never past it.
        let quiet = later + Duration::from_secs(10);
        for _ in 0..20 {
            assert!(limit.check("dev_A", "browser_click", quiet).is_ok());
        }
        assert!(limit.check("dev_A", "browser_click", quiet).is_err());
    }
}
