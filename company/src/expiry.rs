//! Per-entry expiry for the embedded moka stores, read from the injected clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::Expiry;
use pap_shared::{Clock, UnixTime};

/// A value that knows until when it must be kept.
pub(crate) trait Expiring {
    fn expires_at(&self) -> UnixTime;
}

impl<T: Expiring> Expiring for Arc<T> {
    fn expires_at(&self) -> UnixTime {
        T::expires_at(self)
    }
}

impl Expiring for UnixTime {
    fn expires_at(&self) -> UnixTime {
        *self
    }
}

/// Keeps each entry until its value's `expires_at` plus one second, so an entry never vanishes
/// while the clock still reads its last second. Entries already past are kept one second.
pub(crate) struct ExpireAt {
    clock: Arc<dyn Clock>,
}

impl ExpireAt {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }
}

impl<K, V: Expiring> Expiry<K, V> for ExpireAt {
    fn expire_after_create(&self, _key: &K, value: &V, _created_at: Instant) -> Option<Duration> {
        let seconds = value.expires_at().since(self.clock.now()).saturating_add(1).max(1);
        Some(Duration::from_secs(u64::try_from(seconds).unwrap_or(1)))
    }
}
