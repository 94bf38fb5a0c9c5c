//! What a company's own decision pages rely on (PAP §5: "confirms or cancels it through a
//! same-site form with a CSRF token bound to the cookie"), so that a company that mounts this
//! library builds them with the same checks as the reference shop:
//!
//! - [`SameOrigin`], an extractor: the state-changing request came from a page of this very
//!   origin. `SameSite=Lax` lets a sibling subdomain's page (`www.shop.example` posting to
//!   `shop.example`) send the cookie; this does not.
//! - [`WebSession::csrf_token`] and [`WebSession::check_csrf`]: a token per form, bound to the
//!   browser's session cookie and the form's purpose, compared in constant time.
//!
//! ```
//! use axum::extract::Path;
//! use axum::response::{IntoResponse, Response};
//! use pap_company::route::{SameOrigin, WebSession};
//!
//! // A confirm form's handler: the origin first, then the Session, then the token.
//! async fn confirm(_: SameOrigin, session: WebSession, Path(id): Path<String>, sent_csrf: String) -> Response {
//!     if session.check_csrf(&format!("operation:{id}"), &sent_csrf).is_err() {
//!         return http::StatusCode::FORBIDDEN.into_response();
//!     }
//!     // ... perform the operation once ...
//!     http::StatusCode::SEE_OTHER.into_response()
//! }
//! # let _ = confirm;
//! ```

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use http::request::Parts;
use http::{StatusCode, header};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::browser_session::BrowserSession;
use crate::page::message_page;
use crate::web_session::WebSession;

/// A request that came from a page of the company's web origin: `Sec-Fetch-Site` is
/// `same-origin` and `Origin` is the origin of the browser-session endpoint, each when the
/// browser sends it (every current browser sends both on a form POST; a client that is no
/// browser sends neither and still needs the cookie and the CSRF token). That origin is the only
/// one a decision page can be on: the `__Host-` cookie [`WebSession`] needs is set by the
/// endpoint for its host alone. Taken from the configuration, not the request's `Host`, so a
/// proxy that rewrites `Host` changes nothing. Put it first on a decision form's handler: a
/// sibling subdomain, another site or a `null` origin is refused 403 before anything is read.
#[derive(Clone, Copy, Debug)]
pub struct SameOrigin;

/// Why a request is not from this origin: 403 with a short page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SameOriginRejection {
    /// `Sec-Fetch-Site` says another origin sent it (`same-site`, `cross-site`, `none`).
    #[error("the request came from another origin (Sec-Fetch-Site)")]
    FetchSite,
    /// `Origin` is not this request's own (another host, `http:`, `null`).
    #[error("the request came from another origin (Origin)")]
    Origin,
}

impl IntoResponse for SameOriginRejection {
    fn into_response(self) -> Response {
        tracing::info!(reason = %self, "a state-changing request from another origin");
        message_page(
            StatusCode::FORBIDDEN,
            "Not done",
            "This request did not come from this site.",
        )
    }
}

impl<S> FromRequestParts<S> for SameOrigin
where
    S: Send + Sync,
    BrowserSession: FromRef<S>,
{
    type Rejection = SameOriginRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let own = BrowserSession::from_ref(state).verifier().endpoint().origin();
        check_same_origin(parts, &own)
    }
}

/// The check itself, against `own` (`https://shop.example`).
fn check_same_origin(parts: &Parts, own: &str) -> Result<SameOrigin, SameOriginRejection> {
    let fetch_site = parts.headers.get("sec-fetch-site");
    if fetch_site.is_some_and(|site| site.as_bytes() != b"same-origin") {
        return Err(SameOriginRejection::FetchSite);
    }
    let Some(origin) = parts.headers.get(header::ORIGIN) else {
        return Ok(SameOrigin);
    };
    if origin.as_bytes().eq_ignore_ascii_case(own.as_bytes()) {
        Ok(SameOrigin)
    } else {
        Err(SameOriginRejection::Origin)
    }
}

/// A CSRF token that did not match the form's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the form's CSRF token does not match")]
pub struct CsrfMismatch;

impl WebSession {
    /// The CSRF token of one of the website's forms: base64url HMAC-SHA256 keyed by this
    /// browser's session cookie over `purpose` (`operation:{id}`, `sign-out`), so it is worthless
    /// in any other browser, for any other form, and once the cookie is gone.
    pub fn csrf_token(&self, purpose: &str) -> String {
        let key = self.cookie().secret().as_bytes();
        // HMAC-SHA256 takes a key of any length: this cannot fail.
        let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
            return String::new();
        };
        mac.update(purpose.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Whether `sent` is the token of `purpose`'s form in this browser, compared in constant time.
    pub fn check_csrf(&self, purpose: &str, sent: &str) -> Result<(), CsrfMismatch> {
        let expected = self.csrf_token(purpose);
        let matches = !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(sent.as_bytes()));
        if matches { Ok(()) } else { Err(CsrfMismatch) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().method("POST").uri("/operations/op_1");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_page_of_the_same_origin_passes_and_a_sibling_subdomain_does_not() {
        const OWN: &str = "https://shop.example";
        let own = [("origin", OWN), ("sec-fetch-site", "same-origin")];
        assert!(check_same_origin(&parts(&own), OWN).is_ok());
        // No browser headers at all (a client that is no browser): the CSRF token decides.
        assert!(check_same_origin(&parts(&[]), OWN).is_ok());
        // A proxy's Host changes nothing.
        let proxied = [
            ("host", "10.0.0.7:8080"),
            ("origin", OWN),
            ("sec-fetch-site", "same-origin"),
        ];
        assert!(check_same_origin(&parts(&proxied), OWN).is_ok());
        for (headers, why) in [
            (
                vec![
                    ("host", "shop.example"),
                    ("origin", "https://www.shop.example"),
                    ("sec-fetch-site", "same-site"),
                ],
                SameOriginRejection::FetchSite,
            ),
            (
                vec![("host", "shop.example"), ("origin", "https://www.shop.example")],
                SameOriginRejection::Origin,
            ),
            (
                vec![("host", "shop.example"), ("origin", "null")],
                SameOriginRejection::Origin,
            ),
            (
                vec![("host", "shop.example"), ("origin", "http://shop.example")],
                SameOriginRejection::Origin,
            ),
            (
                vec![("host", "shop.example"), ("sec-fetch-site", "cross-site")],
                SameOriginRejection::FetchSite,
            ),
            (
                vec![("host", "shop.example"), ("sec-fetch-site", "none")],
                SameOriginRejection::FetchSite,
            ),
            (
                vec![("origin", "https://shop.example:443")],
                SameOriginRejection::Origin,
            ),
        ] {
            assert_eq!(
                check_same_origin(&parts(&headers), OWN).unwrap_err(),
                why,
                "{headers:?}"
            );
        }
    }

    #[test]
    fn a_refusal_is_403_and_names_nothing_of_the_request() {
        let response = SameOriginRejection::Origin.into_response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
}
