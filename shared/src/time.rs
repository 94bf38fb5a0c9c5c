//! Injected time and randomness.
//!
//! Every rule in PAP §5 that depends on "now" (assertion lifetime, expiry, replay windows,
//! cache lifetimes) reads an injected [`Clock`], so tests can stand exactly at `exp - 1`, `exp`
//! and `exp + 1`. Randomness (cookie values, `jti`s, keys) comes from an injected [`Rng`].

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, as JWT `iat`/`exp` carry them (RFC 7519 §2 NumericDate,
/// restricted to integers as PAP draft 0.2 emits them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixTime(i64);

impl UnixTime {
    /// The time `seconds` after the epoch.
    pub const fn from_secs(seconds: i64) -> Self {
        Self(seconds)
    }

    /// Seconds since the epoch.
    pub const fn as_secs(self) -> i64 {
        self.0
    }

    /// This time moved by `seconds` (negative moves back), saturating at the ends of `i64`.
    pub const fn plus(self, seconds: i64) -> Self {
        Self(self.0.saturating_add(seconds))
    }

    /// Whole seconds from `earlier` to `self` (negative when `earlier` is later).
    pub const fn since(self, earlier: UnixTime) -> i64 {
        self.0.saturating_sub(earlier.0)
    }

    /// RFC 3339 in UTC with a `Z`, e.g. `2026-10-11T09:15:05Z` (as PAP's JSON carries times).
    pub fn to_rfc3339(self) -> String {
        let days = self.0.div_euclid(86_400);
        let seconds = self.0.rem_euclid(86_400);
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            seconds / 3_600,
            seconds % 3_600 / 60,
            seconds % 60
        )
    }
}

impl fmt::Display for UnixTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time, in whole seconds.
    fn now(&self) -> UnixTime;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixTime {
        // A clock before 1970 is a broken host; reading it as the epoch makes every assertion
        // look as if it came from the future, which refuses it rather than accepting it.
        let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        UnixTime(i64::try_from(seconds).unwrap_or(i64::MAX))
    }
}

/// A source of cryptographically secure random bytes.
pub trait Rng: Send + Sync + fmt::Debug {
    /// Fills `buf` with random bytes.
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's CSPRNG.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemRng;

impl Rng for SystemRng {
    fn fill(&self, buf: &mut [u8]) {
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, buf);
    }
}

/// Adapts an injected [`Rng`] to the `rand_core` traits that key generation needs.
pub(crate) struct RngAdapter<'a>(pub(crate) &'a dyn Rng);

impl rand::RngCore for RngAdapter<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.0.fill(&mut b);
        u32::from_le_bytes(b)
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.0.fill(&mut b);
        u64::from_le_bytes(b)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill(dest);
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.0.fill(dest);
        Ok(())
    }
}

// The adapter only forwards to an `Rng`, whose contract is a CSPRNG.
impl rand::CryptoRng for RngAdapter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_overflowing() {
        assert_eq!(UnixTime::from_secs(i64::MAX).plus(1), UnixTime::from_secs(i64::MAX));
        assert_eq!(UnixTime::from_secs(10).since(UnixTime::from_secs(4)), 6);
        assert_eq!(UnixTime::from_secs(4).since(UnixTime::from_secs(10)), -6);
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(UnixTime::from_secs(0).to_rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(UnixTime::from_secs(1_760_174_105).to_rfc3339(), "2025-10-11T09:15:05Z");
        assert_eq!(UnixTime::from_secs(951_825_600).to_rfc3339(), "2000-02-29T12:00:00Z");
        assert_eq!(UnixTime::from_secs(1_800_000_000).to_rfc3339(), "2027-01-15T08:00:00Z");
    }

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.now() > UnixTime::from_secs(1_735_689_600));
    }

    #[test]
    fn system_rng_fills_the_buffer() {
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        SystemRng.fill(&mut a);
        SystemRng.fill(&mut b);
        assert_ne!(a, b);
    }
}
