//! Logging that keeps secrets out.
//!
//! chromiumoxide logs every CDP message it cannot parse, whole, at DEBUG under
//! `chromiumoxide::conn::raw_ws::parse_errors`; on this Chromium that is every
//! `Network.requestWillBeSentExtraInfo`, which carries the request's cookies, the company's
//! session cookie among them (found by the end-to-end canary). Every subscriber the agent
//! installs turns that target off.

use tracing_subscriber::EnvFilter;

/// Directives added to every filter: CDP messages are never logged raw.
pub const SECRET_SAFE_DIRECTIVES: [&str; 2] = [
    "chromiumoxide::conn::raw_ws::parse_errors=off",
    "chromiumoxide::conn=warn",
];

/// `base` (e.g. `info`, or `RUST_LOG`'s value) with [`SECRET_SAFE_DIRECTIVES`] on top, so no
/// setting of `base` can turn them back on.
pub fn log_filter(base: &str) -> EnvFilter {
    let mut filter = EnvFilter::try_new(base).unwrap_or_else(|_| EnvFilter::new("info"));
    for directive in SECRET_SAFE_DIRECTIVES {
        if let Ok(directive) = directive.parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}
