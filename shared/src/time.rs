//! Injected time and randomness.
//!
//! Every rule in PAP §5 that depends on "now" (assertion lifetime, expiry, replay windows,
//! cache lifetimes) reads an injected [`Clock`], so tests can stand exactly at `exp - 1`, `exp`
//! and `exp + 1`. Randomness (cookie values, `jti`s, keys) comes from an injected [`Rng`].

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, as JWT `iat`/`exp` carry them (RFC 7519 §2 NumericDate,
/// restricted to integers as PAP draft 0.2 emits them). Serialised as that integer; PAP's
/// documents that carry RFC 3339 text use [`crate::rfc3339`] instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
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

impl UnixTime {
    /// Parses the RFC 3339 form [`Self::to_rfc3339`] writes: UTC with a `Z`, whole seconds (a
    /// fraction is read and dropped), a real calendar date. Anything else is `None`.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
        let number = |part: &str, digits: usize| {
            (part.len() == digits && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<i64>().ok())
                .flatten()
        };
        let mut date = date.split('-');
        let (year, month, day) = (
            number(date.next()?, 4)?,
            number(date.next()?, 2)?,
            number(date.next()?, 2)?,
        );
        let mut time = time.split(':');
        let (hour, minute) = (number(time.next()?, 2)?, number(time.next()?, 2)?);
        let seconds = time.next()?;
        let whole = seconds.split_once('.').map_or(seconds, |(whole, fraction)| {
            // A fraction must be digits; it is dropped (the ledger and grants keep seconds).
            if fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                ""
            } else {
                whole
            }
        });
        let second = number(whole, 2)?;
        if date.next().is_some() || time.next().is_some() {
            return None;
        }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let month_days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        // Days from the civil date (Howard Hinnant's algorithm, the inverse of to_rfc3339's).
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(Self(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }
}

/// Serde for a [`UnixTime`] written as RFC 3339 (`"2026-11-30T12:00:00Z"`), the one formatter
/// and parser of such times: `#[serde(with = "pap_shared::rfc3339")]`, and
/// `#[serde(with = "pap_shared::rfc3339::option")]` for an optional one.
pub mod rfc3339 {
    use serde::{Deserialize as _, Deserializer, Serializer};

    use super::UnixTime;

    /// Writes `time` as RFC 3339.
    pub fn serialize<S: Serializer>(time: &UnixTime, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&time.to_rfc3339())
    }

    /// Reads an RFC 3339 time; any other text is an error naming the form expected.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<UnixTime, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        UnixTime::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom("a time must be RFC 3339 in UTC, like 2026-11-30T12:00:00Z"))
    }

    /// The same for an `Option<UnixTime>` (absent or `null` is `None`).
    pub mod option {
        use serde::{Deserialize as _, Deserializer, Serializer};

        use super::UnixTime;

        /// Writes `time` as RFC 3339, or nothing.
        pub fn serialize<S: Serializer>(time: &Option<UnixTime>, serializer: S) -> Result<S::Ok, S::Error> {
            match time {
                Some(time) => super::serialize(time, serializer),
                None => serializer.serialize_none(),
            }
        }

        /// Reads an optional RFC 3339 time.
        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<UnixTime>, D::Error> {
            Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?
                .map(|text| {
                    UnixTime::parse_rfc3339(&text).ok_or_else(|| {
                        serde::de::Error::custom("a time must be RFC 3339 in UTC, like 2026-11-30T12:00:00Z")
                    })
                })
                .transpose()
        }
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

/// A clock that stands where it is set: tests move it by hand, so expiry and lifetimes are
/// exact (no sleeps). Shared by every crate's tests, and by an adopter's.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    /// A clock at `seconds` since the epoch.
    pub fn at(seconds: i64) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self(std::sync::atomic::AtomicI64::new(seconds)))
    }

    /// Moves the clock to `seconds` since the epoch.
    pub fn set(&self, seconds: i64) {
        self.0.store(seconds, std::sync::atomic::Ordering::SeqCst);
    }

    /// Moves the clock on by `seconds`.
    pub fn advance(&self, seconds: i64) {
        self.0.fetch_add(seconds, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixTime {
        UnixTime::from_secs(self.0.load(std::sync::atomic::Ordering::SeqCst))
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
    fn rfc3339_parses_what_it_writes_and_nothing_else() {
        for secs in [0, 951_825_600, 1_764_504_000, 1_798_000_123, 4_102_444_799] {
            let t = UnixTime::from_secs(secs);
            assert_eq!(UnixTime::parse_rfc3339(&t.to_rfc3339()), Some(t));
        }
        assert_eq!(
            UnixTime::parse_rfc3339("2026-11-30T12:00:00.250Z"),
            UnixTime::parse_rfc3339("2026-11-30T12:00:00Z")
        );
        for bad in [
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T12:00:00+01:00",
            "2026-11-30T12:00:00",
            "2026-11-30T12:00:00.Z",
            "26-11-30T12:00:00Z",
            "+2026-11-30T12:00:00Z",
            "2026-11-30T12:00Z",
            "yesterday",
            "",
        ] {
            assert_eq!(UnixTime::parse_rfc3339(bad), None, "{bad}");
        }
        assert!(UnixTime::parse_rfc3339("2024-02-29T00:00:00Z").is_some());
    }

    #[test]
    fn rfc3339_serde_is_the_same_formatter_and_parser() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct At {
            #[serde(with = "crate::rfc3339")]
            at: UnixTime,
            #[serde(default, with = "crate::rfc3339::option", skip_serializing_if = "Option::is_none")]
            until: Option<UnixTime>,
        }
        let at = At {
            at: UnixTime::from_secs(1_764_504_000),
            until: None,
        };
        let json = serde_json::to_string(&at).unwrap();
        assert_eq!(json, r#"{"at":"2025-11-30T12:00:00Z"}"#);
        assert_eq!(serde_json::from_str::<At>(&json).unwrap(), at);
        assert!(serde_json::from_str::<At>(r#"{"at":1764504000}"#).is_err());
        assert!(serde_json::from_str::<At>(r#"{"at":"2025-11-30T12:00:00Z","until":"soon"}"#).is_err());
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
