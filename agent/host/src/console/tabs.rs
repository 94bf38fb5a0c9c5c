//! The console's tab pages: a live picture of a device's tab, and takeover (the person's clicks
//! and keys go to the person's own tab on that page: [`pap_browser::tools`]'s person's view).
//! No script: the picture is `multipart/x-mixed-replace` JPEG in an `<input type="image">`,
//! whose click the browser sends as the form's `at.x` and `at.y`.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Form, Path as UrlPath, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::html::{button_form, escape, page};
use super::{Console, CsrfForm, SignedInCookie, failed, forged};

/// The multipart boundary of a live picture.
const BOUNDARY: &str = "pap-frame";
/// The longest text one form types.
const TYPED_CHARS: usize = 1000;

fn tools(console: &Console) -> Result<&Arc<pap_browser::ToolHost>, Box<Response>> {
    console.tools.as_ref().ok_or_else(|| {
        Box::new(failed(
            StatusCode::NOT_FOUND,
            "No browser here",
            "this console runs without the browser: start it with `pap-agent host serve --console ADDR` to see the tabs",
        ))
    })
}

fn back_to(target: &str) -> Response {
    let mut response = axum::response::Redirect::to(&format!("/tabs/{}", urlencode(target))).into_response();
    *response.status_mut() = StatusCode::SEE_OTHER;
    response
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `/tabs/{target}`: the picture, and what the person may do with the tab.
pub(super) async fn tab(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(target): UrlPath<String>,
) -> Response {
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    let Some(tab) = tools.tabs_for_person().await.into_iter().find(|t| t.target == target) else {
        if target.starts_with('p') {
            return failed(StatusCode::NOT_FOUND, "Closed", "you closed this tab");
        }
        return failed(StatusCode::NOT_FOUND, "No such tab", "the tab closed, or never was");
    };
    let csrf = console.logins.csrf_for(&cookie.0);
    let csrf = csrf.expose();
    let base = format!("/tabs/{}", urlencode(&target));
    let mut body = format!(
        "<p><a href=\"/\">← the console</a></p><h2>{title}</h2><p class=\"muted\">{device}'s tab <code>{target}</code> at \
         <code>{url}</code></p>",
        title = escape(if tab.title.is_empty() { "Untitled" } else { &tab.title }),
        device = escape(tab.device_id.as_deref().unwrap_or("the agent")),
        target = escape(&target),
        url = escape(&tab.url),
    );
    // A page the person opened (a decision's) is theirs alone; a device's tab is handed back.
    let (note, give_back) = if target.starts_with('p') {
        (
            "This tab is yours: what you click and type goes to it, as you. Confirm or cancel there.",
            "Close this tab",
        )
    } else {
        (
            "You have this tab: what you click and type goes to your own tab on this page, as you. The device \
             waits (its tools on the tab answer busy) until you hand it back.",
            "Hand the tab back",
        )
    };
    if tab.taken {
        let _ = write!(
            body,
            "<div class=\"note\">{note}</div>\
             <form method=\"post\" action=\"{base}/click\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"image\" name=\"at\" class=\"live\" src=\"{base}/live\" alt=\"the tab, live: click to click there\"></form>\
             <form method=\"post\" action=\"{base}/type\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"text\" name=\"text\" size=\"40\" placeholder=\"type into the focused field\" autocomplete=\"off\"> \
             <select name=\"key\"><option value=\"\">no key</option><option>Enter</option><option>Tab</option>\
             <option>Backspace</option><option>Escape</option><option>PageDown</option><option>PageUp</option></select> <button>Send</button></form> {hand_back}",
            base = escape(&base),
            csrf = escape(csrf),
            note = escape(note),
            hand_back = button_form(&format!("{base}/hand-back"), csrf, give_back, "yes", ""),
        );
    } else {
        let _ = write!(
            body,
            "<p><img class=\"live\" src=\"{base}/live\" alt=\"the tab, live\"></p>{take}\
             <p class=\"muted\">Take the tab over to sign in, answer a prompt or a puzzle yourself: the device waits \
             until you hand it back.</p>",
            base = escape(&base),
            take = button_form(&format!("{base}/take"), csrf, "Take over", "", ""),
        );
    }
    axum::response::Html(page(&tab.title, &body)).into_response()
}

/// `/tabs/{target}/live`: JPEG frames, each a part of `multipart/x-mixed-replace`, for as long
/// as the person's browser keeps the picture.
pub(super) async fn live(State(console): State<Arc<Console>>, UrlPath(target): UrlPath<String>) -> Response {
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    let frames = match tools.live(&target).await {
        Ok(frames) => frames,
        Err(error) => {
            let status = if error.code == pap_browser::spec::ToolErrorCode::RateLimited {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::NOT_FOUND
            };
            return (status, error.message).into_response();
        }
    };
    // Each part ends with the next part's boundary: a browser shows a part once it sees the
    // boundary after it, and a page that then stays still sends no next part for a while.
    let opening = futures_util::stream::once(async { Ok::<_, Infallible>(Bytes::from(format!("--{BOUNDARY}\r\n"))) });
    let parts = futures_util::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        let mut part = format!("Content-Type: image/jpeg\r\nContent-Length: {}\r\n", frame.jpeg.len());
        if let Some(at) = frame.drawn_at {
            let _ = write!(part, "X-Drawn-At: {at:.6}\r\n");
        }
        part.push_str("\r\n");
        let mut bytes = part.into_bytes();
        bytes.extend_from_slice(&frame.jpeg);
        bytes.extend_from_slice(format!("\r\n--{BOUNDARY}\r\n").as_bytes());
        Some((Ok::<_, Infallible>(Bytes::from(bytes)), frames))
    });
    let parts = futures_util::StreamExt::chain(opening, parts);
    let mut response = Body::from_stream(parts).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!("multipart/x-mixed-replace; boundary={BOUNDARY}")) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// `POST /tabs/{target}/take`.
pub(super) async fn take(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(target): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    match tools.take_over(&target).await {
        Ok(()) => back_to(&target),
        Err(error) => failed(StatusCode::CONFLICT, "Not taken over", &error.message),
    }
}

/// `POST /decisions/{key}/open`: the operation's page in a tab of the person's, in the jar of
/// the device that proposed it; then its live picture.
pub(super) async fn open_decision(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(key): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    let pending = match &console.decisions {
        Some(decisions) => decisions.pending().await,
        None => Vec::new(),
    };
    let Some(decision) = pending.into_iter().find(|d| d.key == key) else {
        return failed(
            StatusCode::NOT_FOUND,
            "Nothing to decide",
            "that operation no longer waits for you",
        );
    };
    match tools
        .open_for_person(decision.device_id.as_deref(), &decision.url)
        .await
    {
        Ok(opened) => back_to(&opened),
        Err(error) => failed(StatusCode::CONFLICT, "Not opened", &error.message),
    }
}

/// `POST /tabs/{target}/hand-back`.
pub(super) async fn hand_back(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(target): UrlPath<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&console, &cookie, &form) {
        return refused;
    }
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    tools.hand_back(&target).await;
    // A page the person opened is gone now: back to the console; a device's tab stays.
    if target.starts_with('p') {
        super::done()
    } else {
        back_to(&target)
    }
}

#[derive(Deserialize)]
pub(super) struct ClickForm {
    #[serde(default)]
    csrf: String,
    #[serde(rename = "at.x")]
    x: f64,
    #[serde(rename = "at.y")]
    y: f64,
}

/// `POST /tabs/{target}/click`: where the person clicked on the picture.
pub(super) async fn click(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(target): UrlPath<String>,
    Form(form): Form<ClickForm>,
) -> Response {
    let csrf = CsrfForm {
        csrf: form.csrf,
        lifetime: None,
    };
    if let Some(refused) = forged(&console, &cookie, &csrf) {
        return refused;
    }
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    if !(form.x.is_finite() && form.y.is_finite() && form.x >= 0.0 && form.y >= 0.0) {
        return failed(StatusCode::BAD_REQUEST, "Not clicked", "not a place on the picture");
    }
    match tools.person_click(&target, form.x, form.y).await {
        Ok(()) => back_to(&target),
        Err(error) => failed(StatusCode::CONFLICT, "Not clicked", &error.message),
    }
}

#[derive(Deserialize)]
pub(super) struct TypeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    key: String,
}

/// `POST /tabs/{target}/type`: what the person typed, then the key they chose.
pub(super) async fn typed(
    State(console): State<Arc<Console>>,
    axum::Extension(cookie): axum::Extension<SignedInCookie>,
    UrlPath(target): UrlPath<String>,
    Form(form): Form<TypeForm>,
) -> Response {
    let csrf = CsrfForm {
        csrf: form.csrf,
        lifetime: None,
    };
    if let Some(refused) = forged(&console, &cookie, &csrf) {
        return refused;
    }
    let tools = match tools(&console) {
        Ok(tools) => tools,
        Err(response) => return *response,
    };
    if form.text.chars().count() > TYPED_CHARS {
        return failed(
            StatusCode::BAD_REQUEST,
            "Not typed",
            "at most 1000 characters at a time",
        );
    }
    let key = (!form.key.is_empty()).then_some(form.key.as_str());
    match tools.person_type(&target, Some(&form.text), key).await {
        Ok(()) => back_to(&target),
        Err(error) => failed(StatusCode::CONFLICT, "Not typed", &error.message),
    }
}
