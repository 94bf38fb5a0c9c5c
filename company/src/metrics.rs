//! What the route counts: joins accepted, refusals by reason code, replay hits, the resolver's
//! fetches and failures, store errors, and how long joins take. Recorded through the `metrics`
//! facade, so a process installs the recorder it likes (the reference company serves them as
//! Prometheus text on its operator listener); nothing is recorded with a token, a cookie or a
//! URL.

use std::time::Duration;

use crate::store::StoreError;

/// Joins accepted (303 with a cookie).
pub const JOINS_ACCEPTED: &str = "pap_joins_accepted_total";
/// Joins refused, by reason code (`VerifyError::code` and the request's refusals).
pub const JOIN_REFUSALS: &str = "pap_join_refusals_total";
/// Assertions and proofs refused because their `jti` was used before.
pub const REPLAY_HITS: &str = "pap_replay_hits_total";
/// Fetches of agents' documents, by outcome.
pub const RESOLVER_FETCHES: &str = "pap_resolver_fetches_total";
/// Fetches of agents' documents refused at once for want of a slot, by the share that was
/// exhausted (`all`, `first_contacts`, `domain`).
pub const RESOLVER_BUSY: &str = "pap_resolver_busy_total";
/// Cached documents used past their lifetime because no fetch slot was free.
pub const RESOLVER_STALE_SERVED: &str = "pap_resolver_stale_served_total";
/// Requests a store could not serve, by error.
pub const STORE_ERRORS: &str = "pap_store_errors_total";
/// How long a join took, accepted or refused, in seconds.
pub const JOIN_SECONDS: &str = "pap_join_duration_seconds";

/// Join latency buckets, in seconds: 100 µs to 1 s.
pub const JOIN_SECONDS_BUCKETS: [f64; 10] = [0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25, 1.0];

pub(crate) fn join_accepted(took: Duration) {
    metrics::counter!(JOINS_ACCEPTED).increment(1);
    metrics::histogram!(JOIN_SECONDS).record(took.as_secs_f64());
}

pub(crate) fn join_refused(reason: &'static str, took: Duration) {
    metrics::counter!(JOIN_REFUSALS, "reason" => reason).increment(1);
    metrics::histogram!(JOIN_SECONDS).record(took.as_secs_f64());
}

/// Counts an assertion or proof refused because its `jti` was used before.
pub fn replay_hit() {
    metrics::counter!(REPLAY_HITS).increment(1);
}

pub(crate) fn resolver_fetch(succeeded: bool) {
    let outcome = if succeeded { "ok" } else { "failed" };
    metrics::counter!(RESOLVER_FETCHES, "outcome" => outcome).increment(1);
}

pub(crate) fn resolver_busy(share: &'static str) {
    metrics::counter!(RESOLVER_BUSY, "share" => share).increment(1);
}

pub(crate) fn resolver_stale_served() {
    metrics::counter!(RESOLVER_STALE_SERVED).increment(1);
}

/// Counts a request a store could not serve.
pub fn store_error(error: StoreError) {
    let error = match error {
        StoreError::Full => "full",
        StoreError::OverShare => "over_share",
        StoreError::Unavailable => "unavailable",
    };
    metrics::counter!(STORE_ERRORS, "error" => error).increment(1);
}
