//! The person's console (AIP-7: the person, never a tool, decides; AIP-63: the person grants and
//! revokes): a web page on its own loopback port where the person answers the devices' requests
//! for access, sees the consent ledger and the host's audit, and revokes grants or unpairs
//! devices (C13).
//!
//! Who reaches it: only the holder of the one-time link the command printed ([`login`]), then
//! the browser that link set a `__Host-` cookie in. Every request passes the host's Host/Origin
//! guard; one that carries any `Authorization` (a device's bearer) is refused 403 before
//! anything else is read, so no tool caller holding a device credential gets a page or an
//! action; every form carries a CSRF token bound to the cookie, and a POST must come from the
//! console's own origin. Pages have no script (CSP `default-src 'none'`), may not be framed,
//! and are not cached.
//!
//! ```text
//! GET  /login?code=…            the link: sets the cookie, 303 to /
//! GET  /                        requests for access, grants, devices, the record
//!                               (?device=ID&domain=NAME filter the record)
//! POST /requests/{id}/grant     lifetime=SECONDS|0; a grant for that device and site (C12)
//! POST /requests/{id}/decline
//! POST /grants/{id}/revoke      C8
//! POST /devices/{id}/unpair     C13 (the embedder's unpairing: [`Unpair`])
//! POST /logout
//!
//! with the browser (`host serve --console`: [`Console::with_tools`]):
//! GET  /tabs/{target}            a tab's live picture; takeover and hand-back
//! GET  /tabs/{target}/live       the picture itself: JPEG frames as `multipart/x-mixed-replace`
//!                               (an `<img>` shows it; no script), each part with `X-Drawn-At`
//! POST /tabs/{target}/take       the person takes the tab (their own tab on its page)
//! POST /tabs/{target}/hand-back
//! POST /tabs/{target}/click      at.x, at.y: where the person clicked on the picture
//! POST /tabs/{target}/type       text, key: what the person typed
//! POST /decisions/{key}/open     an operation waiting for the person ([`Decisions`]), opened on
//!                               its page in a tab of the person's: its live picture follows
//! ```
//!
//! Beneath it: [`requests`] (filed by the MCP host when a call meets `consent_required`) and
//! [`audit`] (written by the MCP host for every call), both files of the state directory shared
//! with the host processes.

pub mod audit;
mod html;
pub mod login;
pub mod requests;
mod tabs;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Form, Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator, ScopeRequest, SourceSpec};
use pap_shared::{Clock, Rng, UnixTime};
use serde::Deserialize;

use crate::http::Guard;
use crate::pairing::Devices;
use html::{button_form, escape, page, table};
use requests::{AccessRequests, Answer, RequestState};

/// The console's cookie (`__Host-`: Secure, `Path=/`, no `Domain`, so only this origin has it).
pub const COOKIE: &str = "__Host-pap-console";
/// The largest form the console reads, bytes.
const MAX_FORM: usize = 4 * 1024;
/// Records of the ledger and calls of the audit a page shows (the newest that pass the filter).
const RECORD_ROWS: usize = 100;
/// The lifetimes a grant from the console may have, seconds (0: until revoked).
const LIFETIMES: [(i64, &str); 4] = [
    (3600, "1 hour"),
    (86_400, "1 day"),
    (30 * 86_400, "30 days"),
    (0, "until I revoke it"),
];

/// How the embedder unpairs a device (the PAP agent also signs its Sessions out).
#[async_trait::async_trait]
pub trait Unpair: Send + Sync {
    /// Unpairs `device_id`: its credential refused, its grants revoked with what they put in the
    /// browsers (C13); a report for the person, or why it failed.
    async fn unpair(&self, device_id: &str) -> Result<serde_json::Value, String>;
}

/// An operation a device proposed that waits for the person's confirm or cancel (AIP-7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Its key in the console (the embedder's: the operation's id).
    pub key: String,
    /// The company (its domain).
    pub company: String,
    /// The device whose Session proposed it (`None`: the agent's own).
    pub device_id: Option<String>,
    /// What it does, in the company's words.
    pub summary: String,
    /// Where it stands (`proposed`).
    pub state: String,
    /// Its page on the company's website, where the person confirms or cancels.
    pub url: String,
    /// When it was proposed.
    pub proposed_at: UnixTime,
}

/// Where the console learns the operations waiting for the person (the PAP agent: those its
/// devices proposed, as each company says they stand now).
#[async_trait::async_trait]
pub trait Decisions: Send + Sync {
    /// The operations waiting for the person, oldest first.
    async fn pending(&self) -> Vec<Decision>;
}

/// C13 as this crate knows it: the device out of the devices file, its grants revoked.
#[derive(Debug)]
pub struct HostUnpair {
    state_dir: PathBuf,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
}

impl HostUnpair {
    /// Unpairs devices of the agent whose state is `state_dir`.
    pub fn new(state_dir: &Path, clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Self {
        Self {
            state_dir: state_dir.to_path_buf(),
            clock,
            rng,
        }
    }
}

#[async_trait::async_trait]
impl Unpair for HostUnpair {
    async fn unpair(&self, device_id: &str) -> Result<serde_json::Value, String> {
        let removed = Devices::at(&self.state_dir)
            .revoke(device_id, self.clock.now())
            .map_err(|e| e.to_string())?;
        if !removed {
            return Err(format!("no paired device {device_id}"));
        }
        let consent =
            ConsentHost::open(&self.state_dir, self.clock.clone(), self.rng.clone()).map_err(|e| e.to_string())?;
        let live = pap_browser::chromium::LiveProfiles::new(&self.state_dir);
        let revoked = consent
            .revoke_pairing(&Operator::from_operator_channel("console"), device_id, &live)
            .await
            .map_err(|e| e.to_string())?;
        Ok(serde_json::json!({
            "unpaired": device_id,
            "grantsRevoked": revoked.iter().map(|r| r.grant.id.clone()).collect::<Vec<_>>(),
        }))
    }
}

/// The console of one agent.
pub struct Console {
    state_dir: PathBuf,
    logins: login::Logins,
    guard: Guard,
    /// The console's own origin (`http://pap-….localhost:PORT`): a POST must name it.
    origin: String,
    unpair: Arc<dyn Unpair>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
    /// The browser's tool host, when the console runs beside it (`host serve --console`).
    tools: Option<Arc<pap_browser::ToolHost>>,
    /// The operations waiting for the person, when the embedder knows them.
    decisions: Option<Arc<dyn Decisions>>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of the agent whose state is `state_dir`, bound to `127.0.0.1:port`.
    ///
    /// It answers only at a host name of its own, `pap-` and 128 random bits `.localhost`
    /// (browsers resolve every `*.localhost` to loopback themselves): cookies are not kept
    /// apart by port, so under `127.0.0.1` the console's cookie would go to any local server on
    /// any port of that address the person's browser visits (security review of the console,
    /// finding 1). Under its own name it goes to the console alone.
    pub fn new(state_dir: &Path, port: u16, unpair: Arc<dyn Unpair>, clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Self {
        let mut label = [0_u8; 16];
        rng.fill(&mut label);
        let name = format!(
            "pap-{}.localhost",
            label.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        // Browsers leave the default port out of `Host` and `Origin`.
        let authority = if port == 80 { name } else { format!("{name}:{port}") };
        let origin = format!("http://{authority}");
        let guard = crate::http::Guard::only(&authority, &origin);
        Self {
            state_dir: state_dir.to_path_buf(),
            logins: login::Logins::new(rng.as_ref()),
            guard,
            origin,
            unpair,
            clock,
            rng,
            tools: None,
            decisions: None,
        }
    }

    /// Lists the operations `decisions` knows wait for the person, each to open on its page.
    #[must_use]
    pub fn with_decisions(mut self, decisions: Arc<dyn Decisions>) -> Self {
        self.decisions = Some(decisions);
        self
    }

    /// Shows the tabs of `tools`' browser, each with its live picture and takeover.
    #[must_use]
    pub fn with_tools(mut self, tools: Arc<pap_browser::ToolHost>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The console's origin (`http://pap-….localhost:PORT`): the only one it answers at.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// A fresh one-time sign-in link (valid [`login::LINK_LIFETIME`] seconds, once).
    pub fn link(&self) -> login::Secret {
        let code = self.logins.code(self.clock.now(), self.rng.as_ref());
        login::Secret::new(format!("{}/login?code={}", self.origin, code.expose()))
    }

    /// The console's routes behind its guards.
    pub fn router(self: Arc<Self>) -> Router {
        let signed_in = Router::new()
            .route("/", get(overview))
            .route("/requests/{id}/grant", post(grant))
            .route("/requests/{id}/decline", post(decline))
            .route("/grants/{id}/revoke", post(revoke))
            .route("/devices/{id}/unpair", post(unpair))
            .route("/logout", post(logout))
            .route("/tabs/{target}", get(tabs::tab))
            .route("/tabs/{target}/live", get(tabs::live))
            .route("/tabs/{target}/take", post(tabs::take))
            .route("/tabs/{target}/hand-back", post(tabs::hand_back))
            .route("/tabs/{target}/click", post(tabs::click))
            .route("/tabs/{target}/type", post(tabs::typed))
            .route("/decisions/{key}/open", post(tabs::open_decision))
            .layer(middleware::from_fn_with_state(self.clone(), person_only));
        Router::new()
            .route("/login", get(sign_in))
            .merge(signed_in)
            .layer(DefaultBodyLimit::max(MAX_FORM))
            .layer(middleware::from_fn_with_state(self.clone(), refuse_bearers))
            .layer(middleware::from_fn(headers))
            .with_state(self)
    }
}

/// Headers on every answer: no framing, no caching, no referrer to another origin, no script.
async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // `same-origin`, not `no-referrer`: under `no-referrer` Chromium sends `Origin: null` with a
    // form's POST, and the console's own forms would fail the origin check. Nothing leaves.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The Host/Origin guard, then: a request with any credential in `Authorization` (a device's
/// bearer) is refused before anything else. The console is the person's; a device never
/// reaches it, whatever it holds.
async fn refuse_bearers(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    if let Some(why) = console.guard.refuses(&request) {
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    if request.headers().contains_key(header::AUTHORIZATION) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({
                "error": "forbidden",
                "message": "the console is the person's: a device's credential is refused here",
            })),
        )
            .into_response();
    }
    next.run(request).await
}

/// The console's cookie, if the request carries one.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
}

/// Signed in, and for a POST: from the console's own origin, with the cookie's CSRF token (read
/// by the handler: [`forged`]).
async fn person_only(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let now = console.clock.now();
    let Some(value) = cookie(request.headers()).filter(|c| console.logins.signed_in(c, now)) else {
        return (
            StatusCode::UNAUTHORIZED,
            axum::response::Html(page(
                "Sign in",
                "<h2>Sign in</h2><p>Open the one-time link <code>pap-agent console</code> printed \
                 (each link works once, for 10 minutes; run the command again for another).</p>",
            )),
        )
            .into_response();
    };
    if request.method() == axum::http::Method::POST {
        let origin = request.headers().get(header::ORIGIN).and_then(|o| o.to_str().ok());
        if origin != Some(console.origin.as_str()) {
            return (
                StatusCode::FORBIDDEN,
                "a form of the console is sent from the console's own page",
            )
                .into_response();
        }
    }
    let mut request = request;
    request.extensions_mut().insert(SignedInCookie(value));
    next.run(request).await
}

#[derive(Clone)]
pub(crate) struct SignedInCookie(String);

#[derive(Deserialize)]
struct LinkQuery {
    code: Option<String>,
}

async fn sign_in(State(console): State<Arc<Console>>, Query(query): Query<LinkQuery>) -> Response {
    let now = console.clock.now();
    let Some(cookie) = query
        .code
        .and_then(|code| console.logins.redeem(&code, now, console.rng.as_ref()))
    else {
        return (
            StatusCode::FORBIDDEN,
            axum::response::Html(page(
                "Link used",
                "<h2>This link does not work</h2><p>It was used already, or it expired. Run \
                 <code>pap-agent console</code> again for a new one.</p>",
            )),
        )
            .into_response();
    };
    let set = format!(
        "{COOKIE}={}; Path=/; Secure; HttpOnly; SameSite=Strict",
        cookie.expose()
    );
    let mut response = Redirect::to("/").into_response();
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(value) = HeaderValue::from_str(&set) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    lifetime: Option<i64>,
}

/// The refusal of a form that does not carry the signed-in browser's CSRF token.
pub(crate) fn forged(console: &Console, cookie: &SignedInCookie, form: &CsrfForm) -> Option<Response> {
    (!console.logins.csrf_matches(&cookie.0, &form.csrf)).then(|| {
        (
            StatusCode::FORBIDDEN,
            "this form is not one the console gave this browser: reload the console",
        )
            .into_response()
    })
}

pub(crate) fn done() -> Response {
    let mut response = Redirect::to("/").into_response();
    *response.status_mut() = StatusCode::SEE_OTHER;
    response
}

pub(crate) fn failed(status: StatusCode, title: &str, why: &str) -> Response {
    (
        status,
        axum::response::Html(page(
            title,
            &format!(
                "<h2>{}</h2><p>{}</p><p><a href=\"/\">Back to the console</a></p>",
                escape(title),
                escape(why)
            ),
        )),
    )
        .into_response()
}

fn consent(console: &Console) -> Result<ConsentHost, pap_browser::consent::ConsentError> {
    ConsentHost::open(&console.state_dir, console.clock.clone(), console.rng.clone())
}

fn unreadable(error: &pap_browser::consent::ConsentError) -> Response {
    failed(
        StatusCode::INTERNAL_SERVER_ERROR,
        "The grants could not be read",
        &error.to_string(),
    )
}

async fn grant(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    let lifetime = form.lifetime.unwrap_or(3600);
    if !LIFETIMES.iter().any(|(seconds, _)| *seconds == lifetime) {
        return failed(
            StatusCode::BAD_REQUEST,
            "Not granted",
            "choose one of the lifetimes the console offers",
        );
    }
    let host = match consent(&console) {
        Ok(host) => host,
        Err(e) => return unreadable(&e),
    };
    let now = console.clock.now();
    let requests = AccessRequests::at(&console.state_dir);
    let request = match requests.claim(&id, Answer::Grant, now) {
        Ok(request) => request,
        Err(e) => return failed(StatusCode::CONFLICT, "Not granted", &e.to_string()),
    };
    let made = host.grant(
        &Operator::from_operator_channel("console"),
        GrantRequest {
            source: SourceSpec::NativeLogin("console".into()),
            scope: ScopeRequest::Domains(vec![request.domain.clone()]),
            interactive: false,
            device_id: Some(request.device_id.clone()),
            expires_at: (lifetime > 0).then(|| now.plus(lifetime)),
        },
    );
    match made {
        Ok(made) => {
            if let Err(e) = requests.granted(&id, &made.id, now) {
                tracing::warn!(error = %e, "recording the grant made for a request");
            }
            done()
        }
        Err(e) => {
            if let Err(e) = requests.reopen(&id, now) {
                tracing::warn!(error = %e, "putting a request back to waiting");
            }
            failed(StatusCode::BAD_REQUEST, "Not granted", &e.to_string())
        }
    }
}

async fn decline(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    match AccessRequests::at(&console.state_dir).claim(&id, Answer::Decline, console.clock.now()) {
        Ok(_) => done(),
        Err(e) => failed(StatusCode::CONFLICT, "Not declined", &e.to_string()),
    }
}

async fn revoke(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    let host = match consent(&console) {
        Ok(host) => host,
        Err(e) => return unreadable(&e),
    };
    let live = pap_browser::chromium::LiveProfiles::new(&console.state_dir);
    let operator = Caller::Operator(Operator::from_operator_channel("console"));
    match host.revoke(&operator, &id, None, &live).await {
        Ok(_) => done(),
        Err(e) => failed(StatusCode::CONFLICT, "Not revoked", &e.to_string()),
    }
}

async fn unpair(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    match console.unpair.unpair(&id).await {
        Ok(_) => {
            // Its tabs in this browser end now, and the person's tabs in its jars with them.
            if let Some(tools) = &console.tools
                && let Err(error) = tools.end_device(&id).await
            {
                tracing::warn!(error = %error.message, "ending an unpaired device's tabs");
            }
            done()
        }
        Err(why) => failed(StatusCode::CONFLICT, "Not unpaired", &why),
    }
}

async fn logout(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    console.logins.sign_out(&cookie.0);
    let mut response = failed(StatusCode::OK, "Signed out", "Run pap-agent console for a new link.");
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0"
    )) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
struct RecordFilter {
    #[serde(default)]
    device: String,
    #[serde(default)]
    domain: String,
}

pub(crate) fn when(at: UnixTime) -> String {
    at.to_rfc3339().replace('T', " ")
}

async fn overview(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    Query(filter): Query<RecordFilter>,
) -> Response {
    let now = console.clock.now();
    let csrf = console.logins.csrf_for(&cookie.0);
    let csrf = csrf.expose();
    let devices = Devices::at(&console.state_dir).list().unwrap_or_default();
    let name_of = |id: &str| {
        devices
            .iter()
            .find(|d| d.id == id)
            .map_or_else(|| format!("{id} (unpaired)"), |d| format!("{} ({id})", d.name))
    };
    let mut body = String::new();

    // Requests for access: the ones waiting first, each with its two answers.
    let requests = AccessRequests::at(&console.state_dir).list().unwrap_or_default();
    let _ = write!(body, "<h2 id=\"requests\">Requests for access</h2>");
    let waiting: Vec<_> = requests.iter().filter(|r| r.waiting(now)).collect();
    if waiting.is_empty() {
        body.push_str("<p class=\"muted\">No device is waiting for your answer.</p>");
    }
    for request in waiting {
        let mut lifetimes = String::from("<select name=\"lifetime\">");
        for (seconds, label) in LIFETIMES {
            let _ = write!(lifetimes, "<option value=\"{seconds}\">{label}</option>");
        }
        lifetimes.push_str("</select> ");
        let _ = write!(
            body,
            "<div class=\"request\" data-request=\"{id}\"><p><strong>{device}</strong> asks to use your browser on \
             <strong>{domain}</strong> (and the sites under it).<br><span class=\"muted\">Why, in its words:</span> \
             {why}<br><span class=\"muted\">Asked {asked} by {tool}; waits until {expires}.</span></p>{grant}{decline}</div>",
            id = escape(&request.id),
            device = escape(&name_of(&request.device_id)),
            domain = escape(&request.domain),
            why = escape(&request.why),
            asked = when(request.asked_at),
            tool = escape(&request.tool),
            expires = when(request.expires_at),
            grant = button_form(
                &format!("/requests/{}/grant", request.id),
                csrf,
                "Grant",
                "yes",
                &lifetimes
            ),
            decline = button_form(&format!("/requests/{}/decline", request.id), csrf, "Decline", "no", ""),
        );
    }
    let answered: Vec<String> = requests
        .iter()
        .filter(|r| !r.waiting(now))
        .take(20)
        .map(|r| {
            let state = match r.state {
                RequestState::Pending => "expired",
                RequestState::Granted => "granted",
                RequestState::Declined => "declined",
            };
            format!(
                "<tr><td class=\"when\">{}</td><td>{}</td><td>{}</td><td>{state}</td></tr>",
                when(r.asked_at),
                escape(&name_of(&r.device_id)),
                escape(&r.domain)
            )
        })
        .collect();
    if !answered.is_empty() {
        body.push_str("<details><summary>Answered and expired requests</summary>");
        body.push_str(&table(&["asked", "device", "site", "answer"], &answered, ""));
        body.push_str("</details>");
    }

    // Operations waiting for the person, each to open on its page.
    if let Some(decisions) = &console.decisions {
        let pending = decisions.pending().await;
        let rows: Vec<String> = pending
            .iter()
            .map(|d| {
                let open = if console.tools.is_some() {
                    button_form(&format!("/decisions/{}/open", d.key), csrf, "Open on its page", "yes", "")
                } else {
                    format!("<a href=\"{}\">its page</a>", escape(&d.url))
                };
                format!(
                    "<tr data-decision=\"{key}\"><td class=\"when\">{at}</td><td>{company}</td><td>{device}</td><td>{summary}</td><td>{open}</td></tr>",
                    key = escape(&d.key),
                    at = when(d.proposed_at),
                    company = escape(&d.company),
                    device = escape(&d.device_id.as_deref().map_or_else(|| "the agent".to_owned(), &name_of)),
                    summary = escape(&d.summary),
                )
            })
            .collect();
        body.push_str("<h2 id=\"decisions\">Waiting for your decision</h2>");
        body.push_str(&table(
            &["proposed", "company", "by", "what", ""],
            &rows,
            "No operation waits for your decision.",
        ));
    }

    // The tabs of every device, each with its picture.
    if let Some(tools) = &console.tools {
        let rows: Vec<String> = tools
            .tabs_for_person()
            .await
            .iter()
            .map(|tab| {
                format!(
                    "<tr><td>{device}</td><td>{title}</td><td><code>{url}</code></td><td>{state}</td><td><a href=\"/tabs/{target}\">Watch</a></td></tr>",
                    device = escape(&tab.device_id.as_deref().map_or_else(|| "the agent".to_owned(), &name_of)),
                    title = escape(&tab.title),
                    url = escape(&tab.url),
                    state = if tab.taken { "you have it" } else { "" },
                    target = escape(&tab.target),
                )
            })
            .collect();
        body.push_str("<h2 id=\"tabs\">Tabs</h2>");
        body.push_str(&table(
            &["device", "title", "address", "", ""],
            &rows,
            "No device has a tab open.",
        ));
    }

    // Grants in force, each with its revoke.
    let grants = ConsentHost::open(&console.state_dir, console.clock.clone(), console.rng.clone())
        .and_then(|host| host.all())
        .unwrap_or_default();
    let rows: Vec<String> = grants
        .iter()
        .filter(|g| g.is_active(now))
        .map(|g| {
            let scope = g.domains().map_or_else(
                || "the whole profile".to_owned(),
                |d| d.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", "),
            );
            format!(
                "<tr><td><code>{id}</code></td><td>{scope}</td><td>{device}</td><td>{expires}</td><td>{revoke}</td></tr>",
                id = escape(&g.id),
                scope = escape(&scope),
                device = escape(&g.device_id.as_deref().map_or_else(|| "every device".to_owned(), &name_of)),
                expires = g.expires_at.map_or_else(|| "until revoked".to_owned(), when),
                revoke = button_form(&format!("/grants/{}/revoke", g.id), csrf, "Revoke", "no", ""),
            )
        })
        .collect();
    body.push_str("<h2 id=\"grants\">Grants</h2>");
    body.push_str(&table(
        &["grant", "sites", "for", "ends", ""],
        &rows,
        "No grant is in force.",
    ));

    // Devices, each with its unpair.
    let rows: Vec<String> = devices
        .iter()
        .map(|d| {
            format!(
                "<tr><td>{name}</td><td><code>{id}</code></td><td>{via}</td><td>{paired}</td><td>{seen}</td><td>{unpair}</td></tr>",
                name = escape(&d.name),
                id = escape(&d.id),
                via = escape(&d.via),
                paired = when(d.paired_at),
                seen = d.last_seen.map_or_else(|| "never".to_owned(), when),
                unpair = button_form(&format!("/devices/{}/unpair", d.id), csrf, "Unpair", "no", ""),
            )
        })
        .collect();
    body.push_str("<h2 id=\"devices\">Paired devices</h2>");
    body.push_str(&table(
        &["name", "device", "paired by", "paired", "last seen", ""],
        &rows,
        "No device is paired.",
    ));

    // The record: the consent ledger and the host's audit, filtered alike.
    let _ = write!(
        body,
        "<h2 id=\"record\">The record</h2><form method=\"get\" action=\"/\">device <input type=\"text\" name=\"device\" \
         value=\"{device}\"> site <input type=\"text\" name=\"domain\" value=\"{domain}\"> <button>Filter</button></form>",
        device = escape(&filter.device),
        domain = escape(&filter.domain),
    );
    let domains_of = |grant_id: &str| -> Vec<String> {
        grants
            .iter()
            .find(|g| g.id == grant_id)
            .and_then(|g| g.domains())
            .map(|d| d.iter().map(|d| d.as_str().to_owned()).collect())
            .unwrap_or_default()
    };
    let records = pap_browser::consent::Ledger::open(&console.state_dir)
        .ok()
        .and_then(|ledger| ledger.records().ok())
        .unwrap_or_default();
    let rows: Vec<String> = records
        .iter()
        .rev()
        .filter(|r| {
            // A record is the device's when the device acted, or when the grant is scoped to it
            // (the person's grant for the device, its revoke).
            let grant = r.entry.event.grant_id().and_then(|id| grants.iter().find(|g| g.id == id));
            let devices = [
                r.entry.actor.device_id.as_deref(),
                grant.and_then(|g| g.device_id.as_deref()),
            ];
            let domains = r.entry.event.grant_id().map(&domains_of).unwrap_or_default();
            (filter.device.is_empty() || devices.contains(&Some(filter.device.as_str())))
                && (filter.domain.is_empty() || domains.iter().any(|d| d == &filter.domain))
        })
        .take(RECORD_ROWS)
        .map(|r| {
            let who = format!(
                "{:?}{}{}",
                r.entry.actor.kind,
                r.entry.actor.via.as_deref().map(|v| format!(" via {v}")).unwrap_or_default(),
                r.entry.actor.device_id.as_deref().map(|d| format!(", {}", name_of(d))).unwrap_or_default()
            )
            .to_lowercase();
            let grant = r.entry.event.grant_id().unwrap_or_default();
            format!(
                "<tr><td>{seq}</td><td class=\"when\">{at}</td><td>{who}</td><td>{kind}</td><td><code>{grant}</code></td><td>{domains}</td></tr>",
                seq = r.seq,
                at = when(r.at),
                who = escape(&who),
                kind = escape(&format!("{:?}", r.entry.event.kind()).to_lowercase()),
                grant = escape(grant),
                domains = escape(&domains_of(grant).join(", ")),
            )
        })
        .collect();
    body.push_str("<h3>Consent ledger</h3>");
    body.push_str(&table(
        &["#", "when", "who", "what", "grant", "sites"],
        &rows,
        "The ledger is empty.",
    ));
    let calls = audit::Audit::at(&console.state_dir)
        .recent(RECORD_ROWS, |call| {
            (filter.device.is_empty() || call.device_id == filter.device)
                && (filter.domain.is_empty()
                    || call
                        .origin
                        .as_deref()
                        .and_then(|o| url::Url::parse(o).ok())
                        .is_some_and(|u| {
                            u.host_str()
                                .is_some_and(|h| pap_browser::persons::host_is_under(h, &filter.domain))
                        }))
        })
        .unwrap_or_default();
    let rows: Vec<String> = calls
        .iter()
        .map(|c| {
            format!(
                "<tr><td class=\"when\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                when(c.at),
                escape(&name_of(&c.device_id)),
                escape(&c.tool),
                escape(c.origin.as_deref().unwrap_or("")),
                escape(&c.outcome)
            )
        })
        .collect();
    body.push_str("<h3>Tool calls</h3>");
    body.push_str(&table(
        &["when", "device", "tool", "origin", "outcome"],
        &rows,
        "No tool call yet.",
    ));
    body.push_str(&button_form("/logout", csrf, "Sign out of the console", "", ""));
    axum::response::Html(page("Console", &body)).into_response()
}

#[cfg(test)]
mod tests;
