//! The `WebSession` extractor: the company's own pages learn, on every request, which live,
//! signed-in PAP Session the browser's cookie stands for (PAP-5-10, PAP-5-11).

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use pap_shared::SessionId;

use crate::browser_session::BrowserSession;
use crate::page::message_page;
use crate::session::SessionRecord;
use crate::store::StoreError;
use crate::web_cookie::SessionCookie;

/// The live, signed-in Session behind the request's `__Host-poppy_session` cookie, read fresh
/// from the directory for this request.
///
/// A handler that takes a `WebSession` runs only for such a Session; otherwise the request is
/// answered 401 before the handler: no cookie, an unknown cookie, an ended or expired Session
/// (whose cookie binding is then dropped), or a Session that is signed out now.
#[derive(Debug)]
pub struct WebSession {
    id: SessionId,
    record: SessionRecord,
    cookie: SessionCookie,
}

impl WebSession {
    /// The Session's id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The Session as it stands for this request.
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }

    /// The account the Session is signed in to.
    pub fn account(&self) -> &str {
        self.record.account.as_deref().unwrap_or_default()
    }

    /// Whether the Session holds `scope` now.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.record.scopes.iter().any(|s| s == scope)
    }

    /// The cookie this request presented, to derive tokens bound to it (a CSRF token).
    pub fn cookie(&self) -> &SessionCookie {
        &self.cookie
    }
}

/// Why a page was refused: always 401 with a short page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebSessionRejection {
    /// The request has no (well-formed) session cookie.
    #[error("no session cookie")]
    NoCookie,
    /// The cookie is not bound to any Session.
    #[error("unknown session cookie")]
    UnknownCookie,
    /// The Session has ended or expired.
    #[error("the Session is not live")]
    SessionEnded,
    /// The Session is live but signed out, or was signed out since this browser joined.
    #[error("the Session is signed out")]
    SignedOut,
    /// A store could not answer: nothing is shown without it (503).
    #[error("a store could not answer")]
    Store(#[source] StoreError),
}

impl IntoResponse for WebSessionRejection {
    fn into_response(self) -> Response {
        tracing::info!(reason = %self, "web request without a live signed-in Session");
        if let Self::Store(error) = self {
            return crate::browser_session::store_refused(error);
        }
        message_page(
            StatusCode::UNAUTHORIZED,
            "Session ended",
            "Your agent's session has ended. Ask it to open this again.",
        )
    }
}

impl<S> FromRequestParts<S> for WebSession
where
    S: Send + Sync,
    BrowserSession: FromRef<S>,
{
    type Rejection = WebSessionRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let browser_session = BrowserSession::from_ref(state);
        let now = browser_session.verifier().clock().now();
        let mut rejection = WebSessionRejection::NoCookie;
        for cookie in SessionCookie::from_headers(&parts.headers) {
            let hash = cookie.hash();
            let cookies = browser_session.cookies();
            let Some(binding) = cookies.lookup(&hash).await.map_err(WebSessionRejection::Store)? else {
                rejection = WebSessionRejection::UnknownCookie;
                continue;
            };
            let record = browser_session
                .verifier()
                .sessions()
                .session(&binding.session)
                .await
                .map_err(WebSessionRejection::Store)?;
            let Some(record) = record.filter(|r| r.is_live(now)) else {
                // The cookie must not outlive its Session (PAP-5-11).
                cookies.forget(&hash).await.map_err(WebSessionRejection::Store)?;
                rejection = WebSessionRejection::SessionEnded;
                continue;
            };
            if record.epoch != binding.epoch {
                // Signed out since this browser joined: the cookie is over for good, whatever
                // sign-in follows (only a new join makes a new one).
                cookies.forget(&hash).await.map_err(WebSessionRejection::Store)?;
                rejection = WebSessionRejection::SignedOut;
                continue;
            }
            if !record.is_signed_in() {
                rejection = WebSessionRejection::SignedOut;
                continue;
            }
            return Ok(Self {
                id: binding.session,
                record,
                cookie,
            });
        }
        Err(rejection)
    }
}
