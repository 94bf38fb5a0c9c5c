//! Device Sign-In (RFC 8628, PAP §4.6): the agent asks for a code, the user approves it on the
//! company's own `/device` page (or an operator approves it), the agent's poll signs its
//! Session in.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use pap_shared::{ClientId, DeviceAuthorizationResponse, OAuthErrorCode, SecretToken, SessionId, UnixTime};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use zeroize::Zeroizing;

use super::client_address::ClientAddress;
use super::config::AccountConfig;
use super::protocol::{ApiError, json_response, read_form};
use super::{ReferenceCompany, layout, scopes, token_hash};
use pap_company::page::escape_html;
use pap_company::records::{Commit, Expect, expect_of, read, retrying};
use pap_company::route::{SameOrigin, SameOriginRejection};
use pap_company::slot::{self, SlotTag};
use pap_company::stores::{Owner, StoreError};

/// A device code lives ten minutes.
const DEVICE_CODE_LIFETIME: i64 = 600;

/// How long an expired device code is still known, so a late poll hears `expired_token`
/// (RFC 8628 §3.5) rather than `invalid_grant`.
const EXPIRED_CODE_KEPT: i64 = 60;

/// The device page's CSRF cookie (double submit, bound by HMAC to the user code).
const DEVICE_COOKIE: &str = "__Host-device_csrf";

/// Letters for user codes: no vowels (no words), no look-alikes. Eight of them: 20^8, about
/// 34.5 bits, drawn without bias and never two live codes alike.
const USER_CODE_ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";

/// Most pending device codes one client may hold (each lives ten minutes).
pub const PENDING_PER_CLIENT: usize = 32;

/// Password attempts on `/device` per account name from one client address per window: past
/// it, 429 for that name from that address. Per address, so that no stranger elsewhere can
/// lock a person out of their own account (review N8).
pub const ACCOUNT_ATTEMPTS: u32 = 10;

/// Password attempts on `/device` per client address per window (an IPv6 address counts by its
/// /64; behind a trusted balancer, the address it forwards).
pub const ADDRESS_ATTEMPTS: u32 = 30;

/// Pages for a well-formed user code per client address per window: past it, 429 (review N9:
/// the page tells a live code from a dead one, so it is not an oracle at full speed).
pub const LOOKUP_ATTEMPTS: u32 = 60;

/// The attempt window, in seconds.
pub const ATTEMPT_WINDOW: i64 = 900;

/// How long a password check may wait for its turn before the page answers 503.
const PASSWORD_QUEUE_WAIT: Duration = Duration::from_secs(5);

/// A pending device code (key `device:{hash of the code}`), until shortly after it expires.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Pending {
    client_id: ClientId,
    user_code: String,
    scopes: Vec<String>,
    expires_at: UnixTime,
    interval: u64,
    next_poll: UnixTime,
    decision: Decision,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Decision {
    Waiting,
    Approved { account: String, scopes: Vec<String> },
    Denied,
}

/// The key of a device code's record: its SHA-256, never the code, under the hash tag the code
/// carries (its client's owner's, [`pap_company::slot`]).
fn device_key(device_code: &str) -> String {
    let hash = URL_SAFE_NO_PAD.encode(token_hash(device_code));
    slot::key("device", SlotTag::of_minted(device_code, "dev_"), &hash)
}

/// The key of a user code's record, which names its device code's record. Every user code
/// shares one hash tag: a person types it, and the page finds it without knowing its client.
/// (The device flow is paced by people; one slot holds it.)
fn user_code_key(user_code: &str) -> String {
    let tag = SlotTag::of(Owner::named("device", "user-codes"));
    slot::key("user-code", Some(tag), &normalise_user_code(user_code))
}

impl ReferenceCompany {
    /// Stores a pending code under a fresh user code that no live code has, in one commit with
    /// the client's list of pending codes (at most [`PENDING_PER_CLIENT`]); its user code.
    async fn store_pending(&self, client_id: &ClientId, key: &str, pending: Pending) -> Result<String, StoreError> {
        let records = self.records();
        let owner = Owner::of_client(client_id);
        // The user code first, in its own commit: user codes share one slot (a typed code is
        // found without knowing its client), the client's records another. A user code that a
        // live code has makes the commit fail: another is drawn. Until the code's record is
        // written below, the user code names nothing waiting.
        let user_code = retrying(|| async {
            let user_code = self.user_code();
            let committed = Commit::new(owner)
                .put(
                    user_code_key(&user_code),
                    Expect::Absent,
                    &key.to_owned(),
                    pending.expires_at,
                )
                .apply(records)
                .await?;
            Ok(committed.then_some(user_code))
        })
        .await?;
        let record = Pending {
            user_code: user_code.clone(),
            ..pending.clone()
        };
        let list_key = client_devices_key(client_id);
        let stored = retrying(|| async {
            let now = self.now();
            let held = read::<Vec<(String, UnixTime)>>(records, &list_key).await?;
            let mut live: Vec<(String, UnixTime)> = held
                .as_ref()
                .map(|(_, list)| list.iter().filter(|(_, until)| now < *until).cloned().collect())
                .unwrap_or_default();
            if live.len() >= PENDING_PER_CLIENT {
                return Err(StoreError::Full);
            }
            live.push((key.to_owned(), pending.expires_at));
            let last = live.iter().map(|(_, until)| *until).max().unwrap_or(pending.expires_at);
            let committed = Commit::new(owner)
                .put(list_key.clone(), expect_of(&held), &live, last)
                .put(
                    key.to_owned(),
                    Expect::Absent,
                    &record,
                    pending.expires_at.plus(EXPIRED_CODE_KEPT),
                )
                .apply(records)
                .await?;
            Ok(committed.then_some(()))
        })
        .await;
        if stored.is_err() {
            // The user code goes with the refusal (were this to fail too, it names nothing and
            // expires with the code).
            let _ = Commit::new(owner)
                .delete(user_code_key(&user_code), Expect::Any)
                .apply(records)
                .await;
        }
        stored.map(|()| user_code)
    }
}

/// The key of a client's list of pending codes.
fn client_devices_key(client_id: &ClientId) -> String {
    let tag = SlotTag::of(Owner::of_client(client_id));
    slot::key(
        "client-devices",
        Some(tag),
        &URL_SAFE_NO_PAD.encode(token_hash(client_id.as_str())),
    )
}

/// What the device page keeps in this process: the turns of its password checks. (Its codes
/// and attempt counts are records, shared by every replica.)
pub(crate) struct Devices {
    /// Argon2 runs off the async workers, at most half the cores at once, so a flood of
    /// passwords leaves the other routes a core.
    password_checks: Arc<Semaphore>,
}

impl Devices {
    pub(crate) fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        Self {
            password_checks: Arc::new(Semaphore::new((cores / 2).max(1))),
        }
    }
}

impl ReferenceCompany {
    /// The record key of the pending, undecided code `user_code`, with the record's version.
    async fn waiting(&self, user_code: &str) -> Result<Option<(String, u64, Pending)>, StoreError> {
        let records = self.records();
        let Some((_, key)) = read::<String>(records, &user_code_key(user_code)).await? else {
            return Ok(None);
        };
        let now = self.now();
        Ok(read::<Pending>(records, &key)
            .await?
            .filter(|(_, p)| p.decision == Decision::Waiting && now < p.expires_at)
            .map(|(version, pending)| (key, version, pending)))
    }

    /// Decides a pending code once: of two decisions racing, on any replicas, the first
    /// commits and the second finds the code decided.
    async fn decide_device(&self, user_code: &str, decide: impl Fn(&Pending) -> Decision) -> Result<bool, StoreError> {
        let records = self.records();
        retrying(|| async {
            let Some((key, version, mut pending)) = self.waiting(user_code).await? else {
                return Ok(Some(false));
            };
            pending.decision = decide(&pending);
            let until = pending.expires_at.plus(EXPIRED_CODE_KEPT);
            let committed = Commit::new(Owner::of_client(&pending.client_id))
                .put(key, Expect::Version(version), &pending, until)
                .apply(records)
                .await?;
            Ok(committed.then_some(true))
        })
        .await
    }

    /// Counts one attempt for each key in turn: `Ok` within every limit, or the seconds until
    /// the window of the first key past its limit ends. The keys after that one are not
    /// counted, so an address past its limit writes no new count (review N3: one count record
    /// per distinct user name it typed would fill the records). The counts are the address's:
    /// they count against its share of the records.
    async fn attempt(&self, address: &str, counts: &[(String, u32)]) -> Result<Result<(), u64>, StoreError> {
        let now = self.now();
        let owner = Owner::named("address", address);
        for (key, limit) in counts {
            let (count, until) = self.records().count(owner, key, now.plus(ATTEMPT_WINDOW)).await?;
            if count > u64::from(*limit) {
                return Ok(Err(until.since(now).max(1).unsigned_abs()));
            }
        }
        Ok(Ok(()))
    }
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
    /// The store could not answer: nothing was approved.
    #[error("the store could not answer")]
    Store(#[source] StoreError),
}

impl ReferenceCompany {
    /// Approves a pending user code for `account` with `scopes` (default: what was requested,
    /// within what the account may grant). Used by the device page and the operator API.
    pub async fn approve_device(
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
        let approved = self
            .decide_device(user_code, |pending| {
                let wanted = scopes.clone().unwrap_or_else(|| pending.scopes.clone());
                let granted = wanted
                    .into_iter()
                    .filter(|s| pending.scopes.contains(s) && account.scopes.contains(s))
                    .collect();
                Decision::Approved {
                    account: account.id.clone(),
                    scopes: granted,
                }
            })
            .await
            .map_err(ApprovalError::Store)?;
        if !approved {
            return Err(ApprovalError::UnknownCode);
        }
        tracing::info!(account = %account.id, "device sign-in approved");
        Ok(())
    }

    async fn deny_device(&self, user_code: &str) -> Result<(), StoreError> {
        self.decide_device(user_code, |_| Decision::Denied).await.map(drop)
    }

    /// Eight letters of the alphabet, each from one random byte below 240 (12 x 20), so every
    /// letter is equally likely.
    fn user_code(&self) -> String {
        let mut letters = String::with_capacity(9);
        while letters.len() < 9 {
            let mut bytes = [0u8; 16];
            self.inner.rng.fill(&mut bytes);
            for byte in bytes.into_iter().filter(|b| *b < 240) {
                if letters.len() == 4 {
                    letters.push('-');
                }
                if letters.len() < 9 {
                    letters.push(char::from(
                        USER_CODE_ALPHABET[usize::from(byte) % USER_CODE_ALPHABET.len()],
                    ));
                }
            }
        }
        letters
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
        let records = self.records();
        let key = device_key(device_code);
        let polled = retrying(|| async {
            let now = self.now();
            let Some((version, mut pending)) = read::<Pending>(records, &key).await? else {
                return Ok(Some(Err(ApiError::bad_request(OAuthErrorCode::InvalidGrant))));
            };
            let before = (pending.interval, pending.next_poll);
            let outcome = poll(&mut pending, client_id, now);
            if (pending.interval, pending.next_poll) == before {
                return Ok(Some(outcome.map(|granted| (granted, version))));
            }
            let until = pending.expires_at.plus(EXPIRED_CODE_KEPT);
            let committed = Commit::new(Owner::of_client(client_id))
                .put(key.clone(), Expect::Version(version), &pending, until)
                .apply(records)
                .await?;
            Ok(committed.then_some(outcome.map(|granted| (granted, version))))
        })
        .await
        .map_err(ApiError::store)?;
        let ((account, granted), version) = polled?;
        // The Session is checked before the approval is used: a bad `session_id` leaves the
        // user's approval for a good one (review L11).
        let record = self
            .session_record(&session)
            .await?
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
        if &record.client_id != client_id {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidSession));
        }
        if !self.account_fits(&session, &account).await? {
            return Err(ApiError::bad_request(OAuthErrorCode::AccountMismatch));
        }
        // Consumed once: of two polls racing here, on any replicas, one commits the delete
        // of the version it read and gets the sign-in; the other finds it moved.
        let Some((_, pending)) = read::<Pending>(records, &key).await.map_err(ApiError::store)? else {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidGrant));
        };
        let consumed = Commit::new(Owner::of_client(client_id))
            .delete(key.clone(), Expect::Version(version))
            .apply(records)
            .await
            .map_err(ApiError::store)?;
        if !consumed {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidGrant));
        }
        // The user code is in another slot, so it goes in a commit of its own; one that stays
        // (the store failing just now) names a code that is gone, and expires with it.
        let _ = Commit::new(Owner::of_client(client_id))
            .delete(user_code_key(&pending.user_code), Expect::Any)
            .apply(records)
            .await;
        let account_token = self
            .sign_in(client_id, &record.user, &session, &account, granted)
            .await?;
        self.issue(client_id, &session, thumbprint, Some(account_token)).await
    }

    /// Whether `user_code` names a pending, undecided code.
    async fn device_waiting(&self, user_code: &str) -> Result<bool, StoreError> {
        Ok(self.waiting(user_code).await?.is_some())
    }
}

/// One poll of a pending code by `client_id` (RFC 8628 §3.5): the approval, or why not yet.
fn poll(pending: &mut Pending, client_id: &ClientId, now: UnixTime) -> Result<(String, Vec<String>), ApiError> {
    if &pending.client_id != client_id {
        return Err(ApiError::bad_request(OAuthErrorCode::InvalidGrant));
    }
    if now >= pending.expires_at {
        return Err(ApiError::bad_request(OAuthErrorCode::ExpiredToken));
    }
    let interval = |p: &Pending| i64::try_from(p.interval).unwrap_or(300);
    match pending.decision.clone() {
        Decision::Denied => Err(ApiError::bad_request(OAuthErrorCode::AccessDenied)),
        Decision::Waiting if now < pending.next_poll => {
            pending.interval += 5;
            pending.next_poll = now.plus(interval(pending));
            Err(ApiError::bad_request(OAuthErrorCode::SlowDown))
        }
        Decision::Waiting => {
            pending.next_poll = now.plus(interval(pending));
            Err(ApiError::bad_request(OAuthErrorCode::AuthorizationPending))
        }
        Decision::Approved { account, scopes } => Ok((account, scopes)),
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
        let device_code = company.random_token("dev", &client_id);
        let key = device_key(&device_code);
        let expires_at = now.plus(DEVICE_CODE_LIFETIME);
        let interval = company.inner.config.device_interval;
        let pending = Pending {
            client_id: client_id.clone(),
            user_code: String::new(),
            scopes: requested,
            expires_at,
            interval,
            next_poll: now.plus(i64::try_from(interval).unwrap_or(5)),
            decision: Decision::Waiting,
        };
        let user_code = company
            .store_pending(&client_id, &key, pending)
            .await
            .map_err(ApiError::store)?;
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

/// `GET /device?user_code=…`: the sign-in form, naming the agent that asks (its metadata's
/// `client_name` and domain) and what it asks for. Its hidden inputs are written exactly
/// `<input type="hidden" name="N" value="V">`; its CSRF token is bound to a fresh cookie and to
/// the user code. A well-formed code that is not pending still gets the form (its post answers
/// "unknown or expired" before any password work), so the page says no more than the post.
async fn page(
    State(company): State<ReferenceCompany>,
    client: Option<Extension<ClientAddress>>,
    Query(query): Query<PageQuery>,
) -> Response {
    let Some(user_code) = query
        .user_code
        .map(|c| normalise_user_code(&c))
        .filter(|c| is_user_code(c))
    else {
        let main = "<section class=\"card\"><h1>Connect your agent</h1>\
             <p>Enter the code your agent shows you.</p>\
             <form method=\"get\" action=\"/device\"><label>Code \
             <input name=\"user_code\" autocomplete=\"off\" autocapitalize=\"characters\"></label>\
             <div class=\"actions\"><button>Continue</button></div></form></section>";
        return layout::page(&company, StatusCode::OK, "Connect your agent", main);
    };
    let address = client_key(client);
    let lookups = [(format!("lookups-address:{address}"), LOOKUP_ATTEMPTS)];
    match company.attempt(&address, &lookups).await {
        Ok(Ok(())) => {}
        Ok(Err(wait)) => {
            tracing::warn!("device page lookups throttled");
            let page = layout::message(
                &company,
                StatusCode::TOO_MANY_REQUESTS,
                "Connect your agent",
                "Too many codes were looked up from here. Try again later.",
            );
            return too_many_attempts(page, wait);
        }
        Err(error) => return pap_company::route::store_refused(error),
    }
    let asking = match company.waiting(&user_code).await {
        Ok(pending) => pending.map(|(_, _, pending)| pending),
        Err(error) => return pap_company::route::store_refused(error),
    };
    let code = escape_html(&user_code);
    let mut main = String::from("<section class=\"card\"><h1>Connect your agent</h1>");
    match &asking {
        Some(pending) => {
            let agent = company.agent(&pending.client_id).await;
            main.push_str(&format!(
                "<p class=\"agent\">Your agent {agent} asks to sign in with the code \
                 <span class=\"code\">{code}</span>.</p><p>Check that your agent shows this code. \
                 If you approve, it may:</p><ul class=\"list\">",
                agent = agent.to_html(),
            ));
            for scope in &pending.scopes {
                let description = company
                    .config()
                    .scopes
                    .iter()
                    .find(|s| &s.name == scope)
                    .map_or(scope.as_str(), |s| s.description.as_str());
                main.push_str(&format!(
                    "<li>{} <code class=\"muted\">{}</code></li>",
                    escape_html(description),
                    escape_html(scope)
                ));
            }
            main.push_str("</ul>");
        }
        None => main.push_str(&format!(
            "<p>No agent is waiting with the code <span class=\"code\">{code}</span>: it may have \
             expired or been mistyped. Check it against the one your agent shows.</p>"
        )),
    }
    let mut secret = [0u8; 32];
    company.inner.rng.fill(&mut secret);
    let cookie = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, secret);
    let csrf = company.inner.csrf.token(&cookie, &user_code);
    main.push_str(&format!(
        "<form method=\"post\" action=\"/device\">\
         <input type=\"hidden\" name=\"user_code\" value=\"{code}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>User name <input name=\"username\" autocomplete=\"username\"></label>\
         <label>Password <input type=\"password\" name=\"password\" autocomplete=\"current-password\"></label>\
         <div class=\"actions\"><button name=\"decision\" value=\"approve\">Approve</button>\
         <button class=\"secondary\" name=\"decision\" value=\"deny\">Deny</button></div></form>\
         <p class=\"muted\">{name} never shows your password to your agent.</p></section>",
        name = escape_html(&company.config().name),
    ));
    let mut response = layout::page(&company, StatusCode::OK, "Connect your agent", &main);
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

/// `POST /device`: the user's decision. Same-site, CSRF bound to the page's cookie, a pending
/// code, the account's password (to deny as to approve); any failure changes nothing.
///
/// Guessing is throttled (review H5): the code is checked before any password work, so a
/// made-up code learns nothing of the password; attempts are counted per account name and per
/// client address ([`ACCOUNT_ATTEMPTS`], [`ADDRESS_ATTEMPTS`] per [`ATTEMPT_WINDOW`] seconds,
/// then 429 with `Retry-After`); Argon2 runs on the blocking pool, a few at a time; and an
/// unknown user name is checked against a stand-in hash, so it takes as long as a known one.
async fn decide(
    State(company): State<ReferenceCompany>,
    client: Option<Extension<ClientAddress>>,
    same_origin: Result<SameOrigin, SameOriginRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let page = |status, text: &str| layout::message(&company, status, "Connect your agent", text);
    if same_origin.is_err() {
        return page(StatusCode::FORBIDDEN, "This request did not come from this site.");
    }
    let Ok(form) = read_form(&headers, body).await else {
        return page(StatusCode::BAD_REQUEST, "The form could not be read.");
    };
    let field = |n: &str| form.get(n).map(String::as_str).unwrap_or_default();
    let user_code = normalise_user_code(field("user_code"));
    let cookie = cookie_value(&headers, DEVICE_COOKIE);
    let busy = |error: StoreError| {
        too_many_attempts(
            page(StatusCode::SERVICE_UNAVAILABLE, "The site is busy. Try again shortly."),
            error.retry_after().parse().unwrap_or(5),
        )
    };
    // The token under the current CSRF key or the previous one (a page served before a
    // rotation still posts).
    let csrf_ok = match cookie.as_deref() {
        Some(cookie) => match company.inner.csrf.accepts(cookie, &user_code, field("csrf")).await {
            Ok(accepted) => accepted,
            Err(error) => return busy(error),
        },
        None => false,
    };
    if !csrf_ok {
        return page(StatusCode::FORBIDDEN, "This request did not come from this site.");
    }
    let address = client_key(client);
    // Either decision takes the account's password (review N9): whoever learned a code cannot
    // deny a person's sign-in without signing in themselves.
    let decision = match field("decision") {
        "approve" => DeviceDecision::Approve,
        "deny" => DeviceDecision::Deny,
        _ => return page(StatusCode::BAD_REQUEST, "Choose approve or deny."),
    };
    let unknown_code = || {
        page(
            StatusCode::BAD_REQUEST,
            "This code is unknown or has expired. Nothing was approved.",
        )
    };
    match company.device_waiting(&user_code).await {
        Ok(true) => {}
        Ok(false) => return unknown_code(),
        Err(error) => return busy(error),
    }
    let username = field("username");
    // The address first: past its limit, nothing more is counted.
    let counts = [
        (format!("attempts-address:{address}"), ADDRESS_ATTEMPTS),
        (
            format!(
                "attempts-account:{}",
                URL_SAFE_NO_PAD.encode(token_hash(&format!("{address}\0{username}")))
            ),
            ACCOUNT_ATTEMPTS,
        ),
    ];
    let counted = match company.attempt(&address, &counts).await {
        Ok(counted) => counted,
        Err(error) => return busy(error),
    };
    if let Err(wait) = counted {
        tracing::warn!("device sign-in attempts throttled");
        return too_many_attempts(
            page(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many attempts. Nothing was approved; try again later.",
            ),
            wait,
        );
    }
    let account = company
        .inner
        .config
        .account(username)
        .filter(|a| a.username == username);
    let password = Zeroizing::new(field("password").to_owned());
    match company.password_matches(account, password).await {
        Err(Busy) => {
            return too_many_attempts(
                page(StatusCode::SERVICE_UNAVAILABLE, "The site is busy. Try again shortly."),
                5,
            );
        }
        Ok(false) => {
            return page(
                StatusCode::UNAUTHORIZED,
                "The user name or password is wrong. Nothing was changed.",
            );
        }
        Ok(true) => {}
    }
    let Some(account) = account else {
        return unknown_code();
    };
    match decision {
        DeviceDecision::Approve => match company.approve_device(&user_code, &account.id, None).await {
            Ok(()) => page(StatusCode::OK, "Your agent is signed in. You can close this page."),
            Err(_) => unknown_code(),
        },
        DeviceDecision::Deny => match company.deny_device(&user_code).await {
            Ok(()) => page(StatusCode::OK, "Nothing was approved. You can close this page."),
            Err(error) => busy(error),
        },
    }
}

/// What the person chose on the device page.
#[derive(Clone, Copy)]
enum DeviceDecision {
    Approve,
    Deny,
}

fn too_many_attempts(mut response: Response, wait_seconds: u64) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait_seconds));
    response
}

/// No turn for a password check came within [`PASSWORD_QUEUE_WAIT`].
struct Busy;

impl ReferenceCompany {
    /// Whether `password` is `account`'s, checked on the blocking pool when a turn is free; an
    /// absent account is checked against a stand-in hash (and never matches), so both take the
    /// same time.
    async fn password_matches(
        &self,
        account: Option<&AccountConfig>,
        password: Zeroizing<String>,
    ) -> Result<bool, Busy> {
        let turns = self.inner.devices.password_checks.clone();
        let turn = tokio::time::timeout(PASSWORD_QUEUE_WAIT, turns.acquire_owned())
            .await
            .map_err(|_| Busy)?
            .map_err(|_| Busy)?;
        let hash = account.map(|a| a.password_hash.clone());
        let checked = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            match hash {
                Some(hash) => verify_password(&hash, &password),
                None => {
                    verify_password(stand_in_hash(), &password);
                    false
                }
            }
        })
        .await;
        checked.map_err(|_| Busy)
    }
}

fn verify_password(hash: &str, password: &str) -> bool {
    use argon2::PasswordVerifier as _;
    argon2::PasswordHash::new(hash).is_ok_and(|h| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// An Argon2 hash with the default parameters (those `pap-company hash-password` writes) of a
/// password nobody has, made once.
fn stand_in_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        use argon2::PasswordHasher as _;
        let salt = argon2::password_hash::SaltString::encode_b64(b"pap-stand-in-salt").ok();
        salt.and_then(|salt| {
            argon2::Argon2::default()
                .hash_password(b"no account has this password", &salt)
                .ok()
                .map(|h| h.to_string())
        })
        .unwrap_or_default()
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

/// The key the throttles count a request against: its client's address, as the company's
/// layer worked it out (see [`ClientAddress`]), or `unknown` when the server gave no peer.
fn client_key(client: Option<Extension<ClientAddress>>) -> String {
    client.map_or_else(|| "unknown".to_owned(), |Extension(address)| address.key())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use std::sync::Mutex;

    use pap_company::resolver::StaticClientKeys;
    use pap_shared::{ManualClock, Rng};

    use super::*;
    use crate::reference::CompanyConfig;

    /// Randomness that repeats itself once when armed: the two draws after [`Repeating::arm`]
    /// give the same bytes; every other draw its own.
    #[derive(Debug, Default)]
    struct Repeating(Mutex<(u8, u8, Vec<u8>)>);

    impl Repeating {
        fn arm(&self) {
            self.0.lock().unwrap().1 = 2;
        }
    }

    impl Rng for Repeating {
        fn fill(&self, bytes: &mut [u8]) {
            let mut state = self.0.lock().unwrap();
            let (drawn, armed, last) = &mut *state;
            if *armed == 1 && last.len() == bytes.len() {
                bytes.copy_from_slice(last);
                *armed = 0;
                return;
            }
            *drawn = drawn.wrapping_add(1);
            for (i, byte) in bytes.iter_mut().enumerate() {
                // Below 240, so every byte of a user-code draw is a letter.
                *byte = drawn.wrapping_mul(37).wrapping_add(u8::try_from(i % 200).unwrap_or(0)) % 240;
            }
            if *armed == 2 {
                *last = bytes.to_vec();
                *armed = 1;
            }
        }
    }

    #[tokio::test]
    async fn a_user_code_a_live_code_holds_is_never_given_twice() {
        // Review M2: the second code draws the first one's user code; the commit sees it taken
        // and draws again, so two devices never share a code a person types.
        let config = CompanyConfig::parse(include_str!("../../shop.example.toml")).unwrap();
        let clock = ManualClock::at(1_800_000_000);
        let rng = Arc::new(Repeating::default());
        let company = ReferenceCompany::new(config, clock.clone(), rng.clone(), Arc::new(StaticClientKeys::new()));
        let client = ClientId::parse("https://atlas.example/agent.json").unwrap();
        let pending = Pending {
            client_id: client.clone(),
            user_code: String::new(),
            scopes: vec!["orders:read".into()],
            expires_at: UnixTime::from_secs(1_800_000_600),
            interval: 5,
            next_poll: UnixTime::from_secs(1_800_000_000),
            decision: Decision::Waiting,
        };
        rng.arm();
        // Keys in the client's slot, as `device_key` makes them.
        let tag = Some(SlotTag::of(Owner::of_client(&client)));
        let (one_key, two_key) = (slot::key("device", tag, "one"), slot::key("device", tag, "two"));
        let first = company.store_pending(&client, &one_key, pending.clone()).await.unwrap();
        let second = company.store_pending(&client, &two_key, pending).await.unwrap();
        assert_ne!(first, second, "two live device codes share the user code {first}");
        let one = read::<String>(company.records(), &user_code_key(&first))
            .await
            .unwrap()
            .unwrap()
            .1;
        let two = read::<String>(company.records(), &user_code_key(&second))
            .await
            .unwrap()
            .unwrap()
            .1;
        assert_eq!((one, two), (one_key, two_key));
    }

    fn company() -> ReferenceCompany {
        let config = CompanyConfig::parse(include_str!("../../shop.example.toml")).unwrap();
        ReferenceCompany::new(
            config,
            ManualClock::at(1_800_000_000),
            Arc::new(pap_shared::SystemRng),
            Arc::new(StaticClientKeys::new()),
        )
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_password_check_leaves_the_async_worker_free() {
        // Review H5: Argon2 runs on the blocking pool. On a one-thread runtime, a ticker keeps
        // ticking while a check runs; on the worker itself it would not tick at all.
        let company = company();
        let account = company.inner.config.account("ada").unwrap().clone();
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = ticks.clone();
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(1));
            loop {
                every.tick().await;
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        tokio::task::yield_now().await;
        let before = ticks.load(std::sync::atomic::Ordering::SeqCst);
        let started = std::time::Instant::now();
        let matched = company
            .password_matches(Some(&account), Zeroizing::new("not the password".into()))
            .await;
        let took = started.elapsed();
        let ticked = ticks.load(std::sync::atomic::Ordering::SeqCst) - before;
        ticker.abort();
        assert!(matches!(matched, Ok(false)));
        assert!(took >= Duration::from_millis(5), "no hash was computed ({took:?})");
        // At least a third of the milliseconds the check took were ticked by the one worker.
        let millis = u64::try_from(took.as_millis()).unwrap();
        assert!(ticked * 3 >= millis, "the worker ticked {ticked} times in {took:?}");
    }

    #[tokio::test]
    async fn an_unknown_name_costs_what_a_known_one_does() {
        // Review H5: an unknown name is checked against a stand-in hash, so the time of an
        // answer does not tell which names exist. Medians of five, within a factor of two.
        let company = company();
        let account = company.inner.config.account("ada").unwrap().clone();
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for _ in 0..5 {
            let started = std::time::Instant::now();
            let _ = company
                .password_matches(Some(&account), Zeroizing::new("wrong".into()))
                .await;
            known.push(started.elapsed());
            let started = std::time::Instant::now();
            let _ = company.password_matches(None, Zeroizing::new("wrong".into())).await;
            unknown.push(started.elapsed());
        }
        known.sort();
        unknown.sort();
        let (known, unknown) = (known[2], unknown[2]);
        assert!(
            unknown * 2 >= known && known * 2 >= unknown,
            "known name {known:?}, unknown name {unknown:?}"
        );
    }
}
