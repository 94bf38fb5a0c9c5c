//! The reference company's metrics recorder: what the verifier counts
//! ([`pap_company::metrics`]) and what the shop counts, rendered as Prometheus text at
//! `/metrics` on the operator listener.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use pap_company::metrics::{JOIN_SECONDS, JOIN_SECONDS_BUCKETS};

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
        .set_buckets_for_metric(Matcher::Full(JOIN_SECONDS.to_owned()), &JOIN_SECONDS_BUCKETS)
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
