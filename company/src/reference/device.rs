//! Device Sign-In (RFC 8628, PAP §4.6): the agent asks for a code, the user approves it on the
//! company's own `/device` page (or an operator approves it), the agent's poll signs its
//! Session in.

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use pap_shared::{ClientId, DeviceAuthorizationResponse, OAuthErrorCode, SecretToken, SessionId, UnixTime};
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::protocol::{ApiError, json_response, read_form};
use super::website::same_site;
use super::{ReferenceCompany, lock, scopes};
use crate::page::{escape_html, html, message_page};

/// A device code lives ten minutes.
const DEVICE_CODE_LIFETIME: i64 = 600;

/// The device page's CSRF cookie (double submit, bound by HMAC to the user code).
const DEVICE_COOKIE: &str = "__Host-device_csrf";

/// Letters for user codes: no vowels (no words), no look-alikes.
const USER_CODE_ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";

#[derive(Clone, Debug)]
struct Pending {
    client_id: ClientId,
    user_code: String,
    scopes: Vec<String>,
    expires_at: UnixTime,
    interval: u64,
    next_poll: UnixTime,
    decision: Decision,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Waiting,
    Approved { account: String, scopes: Vec<String> },
    Denied,
}

/// Pending device codes, by device code, with an index by user code.
#[derive(Default)]
pub(crate) struct Devices {
    by_device_code: HashMap<String, Pending>,
    by_user_code: HashMap<String, String>,
}

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new()
        .route("/oauth/device", post(authorize))
        .route("/device", get(page).post(decide))
}

/// Why an approval failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// No pending code (unknown, expired, already decided).
    #[error("no pending sign-in has this code")]
    UnknownCode,
    /// No such account.
    #[error("no such account")]
    UnknownAccount,
}

impl ReferenceCompany {
    /// Approves a pending user code for `account` with `scopes` (default: what was requested,
    /// within what the account may grant). Used by the device page and the operator API.
    pub fn approve_device(
        &self,
        user_code: &str,
        account: &str,
        scopes: Option<Vec<String>>,
    ) -> Result<(), ApprovalError> {
        let account = self
            .inner
            .config
            .account(account)
            .ok_or(ApprovalError::UnknownAccount)?;
        let now = self.now();
        let mut devices = lock(&self.inner.devices);
        let device_code = devices
            .by_user_code
            .get(&normalise_user_code(user_code))
            .cloned()
            .ok_or(ApprovalError::UnknownCode)?;
        let pending = devices
            .by_device_code
            .get_mut(&device_code)
            .ok_or(ApprovalError::UnknownCode)?;
        if pending.decision != Decision::Waiting || now >= pending.expires_at {
            return Err(ApprovalError::UnknownCode);
        }
        let wanted = scopes.unwrap_or_else(|| pending.scopes.clone());
        let granted = wanted
            .into_iter()
            .filter(|s| pending.scopes.contains(s) && account.scopes.contains(s))
            .collect();
        pending.decision = Decision::Approved {
            account: account.id.clone(),
            scopes: granted,
        };
        tracing::info!(account = %account.id, "device sign-in approved");
        Ok(())
    }

    fn deny_device(&self, user_code: &str) {
        let mut devices = lock(&self.inner.devices);
        let device_code = devices.by_user_code.get(&normalise_user_code(user_code)).cloned();
        if let Some(pending) = device_code.and_then(|code| devices.by_device_code.get_mut(&code))
            && pending.decision == Decision::Waiting
        {
            pending.decision = Decision::Denied;
        }
    }

    fn user_code(&self) -> String {
        let mut bytes = [0u8; 8];
        self.inner.rng.fill(&mut bytes);
        let letters: String = bytes
            .iter()
            .map(|b| char::from(USER_CODE_ALPHABET[usize::from(*b) % USER_CODE_ALPHABET.len()]))
            .collect();
        format!("{}-{}", &letters[..4], &letters[4..])
    }

    /// The device grant: poll a device code for `session_id`.
    pub(crate) async fn device_grant(
        &self,
        client_id: &ClientId,
        form: &HashMap<String, String>,
        thumbprint: &str,
    ) -> Result<Response, ApiError> {
        let device_code = form
            .get("device_code")
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidRequest))?;
        let session = form
            .get("session_id")
            .and_then(|s| SessionId::parse(s).ok())
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidRequest))?;
        let now = self.now();
        let (account, granted) = {
            let mut devices = lock(&self.inner.devices);
            let pending = devices
                .by_device_code
                .get_mut(device_code)
                .filter(|p| &p.client_id == client_id)
                .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidGrant))?;
            if now >= pending.expires_at {
                return Err(ApiError::bad_request(OAuthErrorCode::ExpiredToken));
            }
            match pending.decision.clone() {
                Decision::Denied => return Err(ApiError::bad_request(OAuthErrorCode::AccessDenied)),
                Decision::Waiting if now < pending.next_poll => {
                    pending.interval += 5;
                    pending.next_poll = now.plus(i64::try_from(pending.interval).unwrap_or(300));
                    return Err(ApiError::bad_request(OAuthErrorCode::SlowDown));
                }
                Decision::Waiting => {
                    pending.next_poll = now.plus(i64::try_from(pending.interval).unwrap_or(300));
                    return Err(ApiError::bad_request(OAuthErrorCode::AuthorizationPending));
                }
                Decision::Approved { account, scopes } => {
                    let user_code = pending.user_code.clone();
                    // Consumed once: a second poll finds nothing.
                    devices.by_device_code.remove(device_code);
                    devices.by_user_code.remove(&user_code);
                    (account, scopes)
                }
            }
        };
        let record = self
            .session_record(&session)
            .await?
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
        if &record.client_id != client_id {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidSession));
        }
        if !self.account_fits(&session, &account) {
            return Err(ApiError::bad_request(OAuthErrorCode::AccountMismatch));
        }
        let account_token = self.sign_in(client_id, &record.user, &session, &account, granted);
        self.issue(client_id, &session, thumbprint, Some(account_token)).await
    }
}

async fn authorize(State(company): State<ReferenceCompany>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let form = read_form(&headers, body).await?;
        let client_id = company.authenticate_client(&form).await?;
        let requested = scopes(form.get("scope").map(String::as_str).unwrap_or_default());
        let offered = |s: &String| company.inner.config.scopes.iter().any(|o| &o.name == s);
        if requested.is_empty() || !requested.iter().all(offered) {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidScope));
        }
        let now = company.now();
        let device_code = company.random_token("dev");
        let user_code = company.user_code();
        let interval = company.inner.config.device_interval;
        let pending = Pending {
            client_id,
            user_code: user_code.clone(),
            scopes: requested,
            expires_at: now.plus(DEVICE_CODE_LIFETIME),
            interval,
            next_poll: now.plus(i64::try_from(interval).unwrap_or(5)),
            decision: Decision::Waiting,
        };
        {
            let mut devices = lock(&company.inner.devices);
            devices.by_user_code.insert(user_code.clone(), device_code.clone());
            devices.by_device_code.insert(device_code.clone(), pending);
        }
        let base = &company.inner.base;
        Ok(json_response(
            StatusCode::OK,
            &DeviceAuthorizationResponse {
                device_code: SecretToken::new(device_code),
                verification_uri: format!("{base}/device"),
                verification_uri_complete: Some(format!("{base}/device?user_code={user_code}")),
                user_code,
                expires_in: Some(DEVICE_CODE_LIFETIME.unsigned_abs()),
                interval: Some(interval),
            },
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

fn normalise_user_code(code: &str) -> String {
    code.trim().to_ascii_uppercase()
}

#[derive(Deserialize)]
struct PageQuery {
    user_code: Option<String>,
}

/// `GET /device?user_code=…`: the sign-in form. Its hidden inputs are written exactly
/// `<input type="hidden" name="N" value="V">`; its CSRF token is bound to a fresh cookie and to
/// the user code.
async fn page(State(company): State<ReferenceCompany>, Query(query): Query<PageQuery>) -> Response {
    let name = escape_html(&company.inner.config.name);
    let Some(user_code) = query
        .user_code
        .map(|c| normalise_user_code(&c))
        .filter(|c| is_user_code(c))
    else {
        return html(
            StatusCode::OK,
            format!(
                "<!doctype html><meta charset=utf-8><title>{name}: connect your agent</title><h1>{name}</h1>\
             <form method=\"get\" action=\"/device\"><label>Code <input name=\"user_code\"></label>\
             <button>Continue</button></form>\n"
            ),
        );
    };
    let mut secret = [0u8; 32];
    company.inner.rng.fill(&mut secret);
    let cookie = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, secret);
    let csrf = company.device_csrf(&cookie, &user_code);
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>{name}: connect your agent</title><h1>{name}</h1>\
         <p>Your agent asks to sign in with the code <strong>{code}</strong>.</p>\
         <form method=\"post\" action=\"/device\">\
         <input type=\"hidden\" name=\"user_code\" value=\"{code}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>User name <input name=\"username\" autocomplete=\"username\"></label>\
         <label>Password <input type=\"password\" name=\"password\" autocomplete=\"current-password\"></label>\
         <button name=\"decision\" value=\"approve\">Approve</button>\
         <button name=\"decision\" value=\"deny\">Deny</button></form>\n",
        code = escape_html(&user_code),
    );
    let mut response = html(StatusCode::OK, body);
    let set_cookie = format!("{DEVICE_COOKIE}={cookie}; Path=/; Secure; HttpOnly; SameSite=Strict");
    if let Ok(value) = HeaderValue::try_from(set_cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn is_user_code(code: &str) -> bool {
    code.len() == 9
        && code.bytes().enumerate().all(|(i, b)| {
            if i == 4 {
                b == b'-'
            } else {
                USER_CODE_ALPHABET.contains(&b)
            }
        })
}

impl ReferenceCompany {
    fn device_csrf(&self, cookie: &str, user_code: &str) -> String {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(self.inner.csrf_key.as_ref()).expect("HMAC takes any key length");
        mac.update(b"device\0");
        mac.update(cookie.as_bytes());
        mac.update(b"\0");
        mac.update(user_code.as_bytes());
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            mac.finalize().into_bytes(),
        )
    }
}

/// `POST /device`: the user's decision. Same-site, CSRF bound to the page's cookie, the
/// account's password; any failure approves nothing.
async fn decide(State(company): State<ReferenceCompany>, headers: HeaderMap, body: Body) -> Response {
    let page = |status, text: &str| message_page(status, &company.inner.config.name, text);
    if !same_site(&headers, &company.inner.base) {
        return page(StatusCode::FORBIDDEN, "This request did not come from this site.");
    }
    let Ok(form) = read_form(&headers, body).await else {
        return page(StatusCode::BAD_REQUEST, "The form could not be read.");
    };
    let field = |n: &str| form.get(n).map(String::as_str).unwrap_or_default();
    let user_code = normalise_user_code(field("user_code"));
    let cookie = cookie_value(&headers, DEVICE_COOKIE);
    let expected = cookie.as_deref().map(|c| company.device_csrf(c, &user_code));
    let csrf_ok = expected.is_some_and(|e| bool::from(e.as_bytes().ct_eq(field("csrf").as_bytes())));
    if !csrf_ok {
        return page(StatusCode::FORBIDDEN, "This request did not come from this site.");
    }
    if field("decision") == "deny" {
        company.deny_device(&user_code);
        return page(StatusCode::OK, "Nothing was approved. You can close this page.");
    }
    if field("decision") != "approve" {
        return page(StatusCode::BAD_REQUEST, "Choose approve or deny.");
    }
    let Some(account) = company
        .inner
        .config
        .account(field("username"))
        .filter(|a| a.username == field("username"))
    else {
        return page(
            StatusCode::UNAUTHORIZED,
            "The user name or password is wrong. Nothing was approved.",
        );
    };
    if !password_matches(&account.password_hash, field("password")) {
        return page(
            StatusCode::UNAUTHORIZED,
            "The user name or password is wrong. Nothing was approved.",
        );
    }
    match company.approve_device(&user_code, &account.id, None) {
        Ok(()) => page(StatusCode::OK, "Your agent is signed in. You can close this page."),
        Err(_) => page(
            StatusCode::BAD_REQUEST,
            "This code is unknown or has expired. Nothing was approved.",
        ),
    }
}

fn password_matches(hash: &str, password: &str) -> bool {
    use argon2::PasswordVerifier as _;
    argon2::PasswordHash::new(hash).is_ok_and(|h| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// The value of cookie `name` among the request's `Cookie` headers.
pub(crate) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}
