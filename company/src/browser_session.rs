//! The browser-session endpoint, `POST /poppy/browser-session` (PAP §5, company side), as a
//! router any axum app can mount.
//!
//! ```no_run
//! use axum::{Router, extract::FromRef};
//! use pap_company::BrowserSession;
//!
//! #[derive(Clone)]
//! struct App {
//!     browser_session: BrowserSession,
//! }
//!
//! impl FromRef<App> for BrowserSession {
//!     fn from_ref(app: &App) -> Self {
//!         app.browser_session.clone()
//!     }
//! }
//!
//! fn app(state: App) -> Router {
//!     Router::new().merge(pap_company::browser_session_router()).with_state(state)
//! }
//! ```

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use pap_shared::{CompactJws, Rng};

use crate::client::ResolveError;
use crate::metrics;
use crate::page::message_page;
use crate::store::StoreError;
use crate::verify::{Verifier, VerifyError};
use crate::web_cookie::CookieBindings;

/// Where the route is mounted.
pub const BROWSER_SESSION_PATH: &str = "/poppy/browser-session";

/// Largest form body accepted, in bytes: an assertion is under 2 KiB; a form several times that
/// is not a join.
pub const MAX_FORM_BYTES: usize = 16 * 1024;

/// What the browser-session route and the [`crate::WebSession`] extractor need: the verifier,
/// the cookie bindings and randomness for cookie values. Cheap to clone.
#[derive(Clone)]
pub struct BrowserSession {
    inner: Arc<Inner>,
}

struct Inner {
    verifier: Verifier,
    cookies: Arc<dyn CookieBindings>,
    rng: Arc<dyn Rng>,
}

impl BrowserSession {
    /// The state from its parts. `cookies` are the bindings the verifier's join store writes
    /// (the same store), read here by the [`crate::WebSession`] extractor.
    pub fn new(verifier: Verifier, cookies: Arc<dyn CookieBindings>, rng: Arc<dyn Rng>) -> Self {
        Self {
            inner: Arc::new(Inner { verifier, cookies, rng }),
        }
    }

    /// The verifier.
    pub fn verifier(&self) -> &Verifier {
        &self.inner.verifier
    }

    /// The cookie bindings.
    pub fn cookies(&self) -> &Arc<dyn CookieBindings> {
        &self.inner.cookies
    }

    /// Verifies `assertion` and, on success, issues a cookie bound to its Session. Returns the
    /// 303 response to send.
    pub async fn join(&self, assertion: &CompactJws) -> Result<Response, JoinRefusal> {
        let started = std::time::Instant::now();
        let joined = self.join_counted(assertion).await;
        match &joined {
            Ok(_) => metrics::join_accepted(started.elapsed()),
            Err(refusal) => {
                metrics::join_refused(refusal.code(), started.elapsed());
                match refusal {
                    JoinRefusal::Verify(VerifyError::Replayed) => metrics::replay_hit(),
                    JoinRefusal::Verify(VerifyError::Store(error)) => metrics::store_error(*error),
                    _ => {}
                }
            }
        }
        joined
    }

    async fn join_counted(&self, assertion: &CompactJws) -> Result<Response, JoinRefusal> {
        // The cookie is minted and bound in the verifier's last step, with the replay mark.
        let (verified, cookie) = self
            .inner
            .verifier
            .verify_then_bind(assertion, self.inner.rng.as_ref())
            .await
            .map_err(JoinRefusal::Verify)?;
        // The normalised serialisation is ASCII and cannot break the header; it names the same
        // page as the `return_to` that was checked.
        let location = HeaderValue::try_from(verified.return_to().url().as_str())
            .map_err(|_| JoinRefusal::Request(RequestError::Location))?;
        // Counted by `metrics::join_accepted` (joins and their latency); the line is written
        // only when asked (`RUST_LOG=pap_company=debug`): at `info`, formatted and written per
        // join, it was 3.1 % of the server's CPU at concurrency 1 (`benches/join_profile.sh`).
        tracing::debug!(client_id = %verified.client_id(), "browser joined its Session");
        let mut response = StatusCode::SEE_OTHER.into_response();
        let headers = response.headers_mut();
        headers.insert(header::LOCATION, location);
        headers.insert(header::SET_COOKIE, cookie.set_cookie_header());
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Ok(response)
    }
}

impl fmt::Debug for BrowserSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrowserSession")
            .field("verifier", &self.inner.verifier)
            .finish_non_exhaustive()
    }
}

/// The router with `POST /poppy/browser-session`, for any app state `S` from which a
/// [`BrowserSession`] can be taken. Other methods on the path answer 405.
pub fn browser_session_router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    BrowserSession: FromRef<S>,
{
    Router::new().route(BROWSER_SESSION_PATH, post(join))
}

async fn join(State(state): State<BrowserSession>, uri: Uri, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        check_origin(&headers, state.verifier().domain()).map_err(JoinRefusal::Request)?;
        let assertion = read_form(&uri, &headers, body).await.map_err(JoinRefusal::Request)?;
        state.join(&assertion).await
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Review L3 (login CSRF): a page of another site that auto-posts an assertion it holds would
/// log the visitor's browser into that Session. What the company can tell without breaking
/// the agent's own post: a browser names the page that posted in `Origin`, and the agent's
/// form is posted from a blank page of its own (`Origin: null`) or sent by a client that sends
/// none. A post whose `Origin` is another site is refused before the assertion is read. What
/// stays open: a page that posts from an opaque origin (a sandboxed frame) sends `null` too;
/// the website names the account and the agent on every page, so a browser joined to a
/// Session it did not expect shows it.
fn check_origin(headers: &HeaderMap, domain: &pap_shared::CompanyDomain) -> Result<(), RequestError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().map_err(|_| RequestError::CrossSiteOrigin)?;
    if origin == "null" {
        return Ok(());
    }
    match pap_shared::HttpsUrl::parse(origin) {
        Ok(url) if url.is_on(domain) => Ok(()),
        _ => Err(RequestError::CrossSiteOrigin),
    }
}

/// Reads the one `assertion` field from an `application/x-www-form-urlencoded` body of at most
/// [`MAX_FORM_BYTES`], with no query string at all (PAP-5-03: never in a URL).
async fn read_form(uri: &Uri, headers: &HeaderMap, body: Body) -> Result<CompactJws, RequestError> {
    if uri.query().is_some() {
        return Err(RequestError::QueryString);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        return Err(RequestError::NotAForm);
    }
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| RequestError::TooLarge)?;
    let mut assertion = None;
    for (name, value) in form_urlencoded_pairs(&bytes) {
        if name == "assertion" {
            if assertion.is_some() {
                return Err(RequestError::RepeatedAssertion);
            }
            assertion = Some(CompactJws::new(value));
        }
    }
    assertion.ok_or(RequestError::MissingAssertion)
}

fn form_urlencoded_pairs(bytes: &[u8]) -> impl Iterator<Item = (String, String)> + '_ {
    url::form_urlencoded::parse(bytes).map(|(n, v)| (n.into_owned(), v.into_owned()))
}

/// Why a join request was refused before any verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The redirect target could not be written as a header (not reachable for a checked URL).
    #[error("the return_to cannot be sent as a Location")]
    Location,
    /// The body has no `assertion` field.
    #[error("the form has no assertion")]
    MissingAssertion,
    /// The body is not `application/x-www-form-urlencoded` (a JSON body, say).
    #[error("the body is not a form")]
    NotAForm,
    /// The request URL has a query string: an assertion must never travel in a URL.
    #[error("the request has a query string")]
    QueryString,
    /// The form gives `assertion` more than once.
    #[error("the form repeats the assertion")]
    RepeatedAssertion,
    /// The body is larger than [`MAX_FORM_BYTES`].
    #[error("the body is too large")]
    TooLarge,
    /// A page of another site posted the form (its `Origin`): review L3.
    #[error("the form was posted by another site")]
    CrossSiteOrigin,
}

/// Why a join was refused: every refusal is answered the same way, 400 with a short page and
/// no `Set-Cookie`, and logged by its code only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefusal {
    /// The request itself was wrong.
    #[error("the join request was refused")]
    Request(#[source] RequestError),
    /// The assertion failed a check of PAP §5.
    #[error("the browser assertion was refused")]
    Verify(#[source] VerifyError),
}

impl JoinRefusal {
    /// A stable, token-free code for logs and counters.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Request(RequestError::Location) => "bad_location",
            Self::Request(RequestError::MissingAssertion) => "missing_assertion",
            Self::Request(RequestError::NotAForm) => "not_a_form",
            Self::Request(RequestError::QueryString) => "query_string",
            Self::Request(RequestError::RepeatedAssertion) => "repeated_assertion",
            Self::Request(RequestError::TooLarge) => "too_large",
            Self::Request(RequestError::CrossSiteOrigin) => "cross_site_origin",
            Self::Verify(e) => e.code(),
        }
    }
}

impl IntoResponse for JoinRefusal {
    /// 400 with a short page for every refusal of the request or the assertion; 503 when a
    /// store could not answer, 429 when the client is over its share of one (the assertion
    /// was not accepted, and may be tried again).
    fn into_response(self) -> Response {
        log_refusal(self.code());
        match self {
            Self::Verify(VerifyError::Store(error)) => return store_refused(error),
            Self::Verify(VerifyError::Client(ResolveError::Busy)) => return unavailable(BUSY_RETRY_SECONDS),
            _ => {}
        }
        message_page(
            StatusCode::BAD_REQUEST,
            "Sign in",
            "This browser could not join the session.",
        )
    }
}

/// Logs a refused join: at `warn` at most once a second, saying how many were left out since
/// (those go to `debug`). A stranger's flood of bad assertions is counted by the metrics
/// (`pap_join_refusals_total{reason}`), not written out line by line at the default level.
fn log_refusal(code: &'static str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    static LOG: RefusalLog = RefusalLog::new();
    let second = START.get_or_init(std::time::Instant::now).elapsed().as_secs();
    match LOG.warn_at(second) {
        Some(left_out) => tracing::warn!(reason = code, left_out, "browser join refused"),
        None => tracing::debug!(reason = code, "browser join refused"),
    }
}

/// Which refusals are logged at `warn`: the first of each second (of a clock the caller
/// keeps), with the count of those after the last one that was.
struct RefusalLog {
    /// The second of the last `warn`, plus one (0: none yet).
    last: std::sync::atomic::AtomicU64,
    left_out: std::sync::atomic::AtomicU64,
}

impl RefusalLog {
    const fn new() -> Self {
        Self {
            last: std::sync::atomic::AtomicU64::new(0),
            left_out: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(how many were left out since the last)` when a refusal in `second` is logged at
    /// `warn`; `None` when it is left out (another was, this second).
    fn warn_at(&self, second: u64) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let mark = second.saturating_add(1);
        let last = self.last.load(Relaxed);
        if last < mark && self.last.compare_exchange(last, mark, Relaxed, Relaxed).is_ok() {
            Some(self.left_out.swap(0, Relaxed))
        } else {
            self.left_out.fetch_add(1, Relaxed);
            None
        }
    }
}

/// How long a browser is asked to wait when the client resolver is at its fetch limit.
const BUSY_RETRY_SECONDS: &str = "5";

/// The answer when a store refused: 429 for a client over its share of it, 503 otherwise,
/// with the error's `Retry-After`.
pub fn store_refused(error: StoreError) -> Response {
    let mut response = unavailable(error.retry_after());
    *response.status_mut() = error.status();
    response
}

/// The answer when a store (or the resolver) cannot answer now: 503, no cookie, a short page,
/// `Retry-After: retry_after` seconds.
pub fn unavailable(retry_after: &'static str) -> Response {
    let mut response = message_page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "The company cannot take this request right now. Try again shortly.",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(retry_after));
    response
}

#[cfg(test)]
mod refusal_log_tests {
    use super::RefusalLog;

    #[test]
    fn one_refusal_a_second_is_a_warning_and_it_counts_the_rest() {
        let log = RefusalLog::new();
        assert_eq!(log.warn_at(0), Some(0));
        for _ in 0..1_000 {
            assert_eq!(log.warn_at(0), None);
        }
        assert_eq!(log.warn_at(1), Some(1_000));
        assert_eq!(log.warn_at(1), None);
        // A second that went by without a refusal changes nothing; a clock read late (an
        // earlier second from a racing thread) is left out, never a second warning.
        assert_eq!(log.warn_at(5), Some(1));
        assert_eq!(log.warn_at(4), None);
        assert_eq!(log.warn_at(6), Some(1));
    }
}
