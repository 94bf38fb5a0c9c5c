//! What the company counts, served as Prometheus text at `/metrics` on the operator listener:
//! joins accepted, refusals by reason code, replay hits, the resolver's fetches and failures,
//! store errors, and how long joins take. Recorded through the `metrics` facade, rendered by
//! `metrics-exporter-prometheus`; nothing is recorded with a token, a cookie or a URL.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::store::StoreError;

/// Joins accepted (303 with a cookie).
const JOINS_ACCEPTED: &str = "pap_joins_accepted_total";
/// Joins refused, by reason code (`VerifyError::code` and the request's refusals).
const JOIN_REFUSALS: &str = "pap_join_refusals_total";
/// Assertions and proofs refused because their `jti` was used before.
const REPLAY_HITS: &str = "pap_replay_hits_total";
/// Fetches of agents' documents, by outcome.
const RESOLVER_FETCHES: &str = "pap_resolver_fetches_total";
/// Requests a store could not serve, by error.
const STORE_ERRORS: &str = "pap_store_errors_total";
/// How long a join took, accepted or refused, in seconds.
const JOIN_SECONDS: &str = "pap_join_duration_seconds";

/// Join latency buckets, in seconds: 100 µs to 1 s.
const JOIN_BUCKETS: [f64; 10] = [0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25, 1.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Why metrics could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("the metrics recorder could not be installed")]
pub struct MetricsError(#[source] Box<dyn std::error::Error + Send + Sync>);

/// Installs the process-wide recorder, once; later calls find it installed. `/metrics` answers
/// 404 in a process that never called this.
pub fn install_metrics() -> Result<(), MetricsError> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(JOIN_SECONDS.to_owned()),
            &JOIN_BUCKETS,
        )
        .map_err(|e| MetricsError(Box::new(e)))?
        .install_recorder()
        .map_err(|e| MetricsError(Box::new(e)))?;
    let _ = HANDLE.set(handle);
    Ok(())
}

/// The metrics as Prometheus text, if installed.
pub(crate) fn render() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}

pub(crate) fn join_accepted(took: Duration) {
    metrics::counter!(JOINS_ACCEPTED).increment(1);
    metrics::histogram!(JOIN_SECONDS).record(took.as_secs_f64());
}

pub(crate) fn join_refused(reason: &'static str, took: Duration) {
    metrics::counter!(JOIN_REFUSALS, "reason" => reason).increment(1);
    metrics::histogram!(JOIN_SECONDS).record(took.as_secs_f64());
}

pub(crate) fn replay_hit() {
    metrics::counter!(REPLAY_HITS).increment(1);
}

pub(crate) fn resolver_fetch(succeeded: bool) {
    let outcome = if succeeded { "ok" } else { "failed" };
    metrics::counter!(RESOLVER_FETCHES, "outcome" => outcome).increment(1);
}

pub(crate) fn store_error(error: StoreError) {
    let error = match error {
        StoreError::Full => "full",
        StoreError::Unavailable => "unavailable",
    };
    metrics::counter!(STORE_ERRORS, "error" => error).increment(1);
}
