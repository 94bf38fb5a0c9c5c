//! Fixtures for the reference company's tests: the clock and the shop harness.
#![allow(dead_code, unreachable_pub, reason = "each test binary uses part of the fixtures")]
#![allow(clippy::unwrap_used, reason = "fixtures fail the test loudly")]

pub mod shop;

/// When every test starts.
pub const NOW: i64 = 1_800_000_000;

/// A clock tests move by hand.
pub type TestClock = pap_shared::ManualClock;
