//! What every PAP endpoint of the reference company shares: OAuth-style JSON errors, JSON
//! answers with `no-store`, strict form bodies, and the public URL of a request.

use std::collections::HashMap;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use pap_shared::OAuthErrorCode;

use pap_company::stores::StoreError;
use serde_json::{Value, json};

/// How long a refused (429) caller is asked to wait, in seconds.
pub(crate) const RETRY_AFTER_SECONDS: &str = "60";

/// How long a caller answered 503 is asked to wait, in seconds.
pub(crate) const UNAVAILABLE_RETRY_SECONDS: &str = "5";

/// Largest form or JSON body a PAP endpoint reads.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// A PAP/OAuth error answer: `{"error": code, ...}` with `Cache-Control: no-store`, and for
/// token-authenticated calls a `WWW-Authenticate: DPoP error="..."` challenge.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: OAuthErrorCode,
    pub(crate) challenge: bool,
    pub(crate) scope: Option<String>,
    pub(crate) extra: Option<(&'static str, Value)>,
    /// `Retry-After` when it is not the status's usual one (a client over its share of the
    /// replay guard gets room back within seconds, not a minute).
    pub(crate) retry_after: Option<&'static str>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: OAuthErrorCode) -> Self {
        Self {
            status,
            code,
            challenge: false,
            scope: None,
            extra: None,
            retry_after: None,
        }
    }

    pub(crate) fn bad_request(code: OAuthErrorCode) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code)
    }

    /// A 401/403 for a call made with a Session Token: adds the DPoP challenge.
    pub(crate) fn challenge(status: StatusCode, code: OAuthErrorCode) -> Self {
        Self {
            challenge: true,
            ..Self::new(status, code)
        }
    }

    pub(crate) fn with(mut self, key: &'static str, value: Value) -> Self {
        self.extra = Some((key, value));
        self
    }

    /// A store could not take the request: a full one is 429 with `Retry-After` (too much at
    /// once, from someone), an unreachable one 503. Nothing was done.
    pub(crate) fn store(error: StoreError) -> Self {
        pap_company::metrics::store_error(error);
        match error {
            StoreError::Full => Self::new(StatusCode::TOO_MANY_REQUESTS, OAuthErrorCode::TemporarilyUnavailable),
            StoreError::OverShare => Self {
                retry_after: Some(error.retry_after()),
                ..Self::new(StatusCode::TOO_MANY_REQUESTS, OAuthErrorCode::TemporarilyUnavailable)
            },
            StoreError::Unavailable => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, OAuthErrorCode::TemporarilyUnavailable)
            }
        }
    }

    /// Too much under way to take this request now (the client resolver's fetch limit): 503.
    pub(crate) fn busy() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, OAuthErrorCode::TemporarilyUnavailable)
    }

    pub(crate) fn with_scope(mut self, scope: String) -> Self {
        self.scope = Some(scope);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.code.as_str() });
        if let Some((key, value)) = self.extra.clone() {
            body[key] = value;
        }
        let mut response = json_response(self.status, &body);
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(self.retry_after.unwrap_or(RETRY_AFTER_SECONDS)),
            );
        } else if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(UNAVAILABLE_RETRY_SECONDS));
        }
        if self.challenge {
            let mut challenge = format!("DPoP error=\"{}\"", self.code);
            if let Some(scope) = &self.scope {
                challenge.push_str(&format!(", scope=\"{scope}\""));
            }
            if self.code == OAuthErrorCode::ExtensionRequired {
                challenge.push_str(", extension=\"operations\"");
            }
            if let Ok(value) = HeaderValue::try_from(challenge) {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
            }
        }
        tracing::info!(
            status = self.status.as_u16(),
            error = self.code.as_str(),
            "PAP request refused"
        );
        response
    }
}

/// A JSON answer with `Cache-Control: no-store`.
pub(crate) fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    // Every body here is built from strings, numbers and maps: it serialises.
    let text = serde_json::to_string(body).unwrap_or_default();
    let mut response = (status, text).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A form body: `application/x-www-form-urlencoded`, at most [`MAX_BODY_BYTES`], each
/// parameter at most once (RFC 6749 §3.2).
pub(crate) async fn read_form(headers: &HeaderMap, body: Body) -> Result<HashMap<String, String>, ApiError> {
    if !content_type_is(headers, "application/x-www-form-urlencoded") {
        return Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, OAuthErrorCode::RequestTooLarge))?;
    let mut form = HashMap::new();
    for (name, value) in url::form_urlencoded::parse(&bytes) {
        if form.insert(name.into_owned(), value.into_owned()).is_some() {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest));
        }
    }
    Ok(form)
}

/// A JSON object body (empty reads as `{}`), at most [`MAX_BODY_BYTES`].
pub(crate) async fn read_json(body: Body) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, OAuthErrorCode::RequestTooLarge))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest)),
    }
}

pub(crate) fn content_type_is(headers: &HeaderMap, wanted: &str) -> bool {
    let value = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .eq_ignore_ascii_case(wanted)
}
