//! Short HTML pages with the headers every page of the company's website carries.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

/// A page with `status` and a one-line `message` (plain text, HTML-escaped here), served with
/// `no-store`, no framing and a same-origin content policy.
pub fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    let body = format!(
        "<!doctype html><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><p>{}</p>\n",
        escape_html(title),
        escape_html(message)
    );
    html(status, body)
}

/// An HTML response with the site's standard headers.
pub fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'; default-src 'self'"),
    );
    response
}

/// Escapes text for an HTML element or a double-quoted attribute.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn pages_carry_the_standard_headers() {
        let r = message_page(StatusCode::BAD_REQUEST, "Sign in", "<no>");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(r.headers()[header::X_FRAME_OPTIONS], "DENY");
        assert!(r.headers().get(header::SET_COOKIE).is_none());
    }
}
