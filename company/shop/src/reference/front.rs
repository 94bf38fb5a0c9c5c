//! The shop's front page `/`: what the shop is and how an agent connects; in a browser that
//! joined a signed-in Session, who is signed in through which agent, what the agent may do,
//! the newest operations and a sign-out form (`POST /sign-out`, same-site, CSRF bound to the
//! cookie), which signs the Session out: the website follows the Session both ways (PAP §5).

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::protocol::read_form;
use super::website::{account_name, viewer};
use super::{ReferenceCompany, layout};
use pap_company::page::escape_html;
use pap_company::route::{SameOrigin, SameOriginRejection, WebSession, WebSessionRejection};
use pap_company::stores::SESSION_COOKIE_NAME;

/// How many operations the front page lists.
const LISTED_OPERATIONS: usize = 10;

/// The form field and HMAC purpose of the sign-out form's CSRF token.
const SIGN_OUT: &str = "sign-out";

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new().route("/", get(front)).route("/sign-out", post(sign_out))
}

async fn front(State(company): State<ReferenceCompany>, session: Result<WebSession, WebSessionRejection>) -> Response {
    match session {
        Ok(session) => signed_in(&company, &session).await,
        Err(WebSessionRejection::Store(error)) => pap_company::route::store_refused(error),
        Err(_) => anonymous(&company),
    }
}

fn anonymous(company: &ReferenceCompany) -> Response {
    let config = company.config();
    let name = escape_html(&config.name);
    let mut main = format!(
        "<section class=\"card\"><h1>{name}</h1>\
         <p>{name} is the reference company of the PAP browser-session bridge: a small shop whose \
         API speaks the Personal Agent Protocol and whose website follows your agent's PAP Session.</p>\
         <p>You are not signed in here. Ask your agent to open this site: its browser arrives signed \
         in to the same Session, and when the Session signs out, so does this site.</p></section>\
         <section class=\"card\"><h2>How an agent connects</h2><ol>\
         <li>Your agent starts a Session with {name} and asks to sign in: it shows you a code.</li>\
         <li>Enter the code at <a href=\"/device\">{domain}/device</a> and approve with your user \
         name and password.</li>\
         <li>Your agent opens this site's pages in its own browser, already signed in, for you to \
         confirm what it proposed.</li></ol></section>",
        domain = escape_html(config.domain.as_str()),
    );
    if config.testing {
        main.push_str(
            "<section class=\"card\"><h2>Demo accounts</h2><p>This shop runs with \
             <code>testing = true</code>: its accounts exist for demonstrations and conformance \
             runs. Approve a sign-in on the device page with one of them.</p><ul class=\"list\">",
        );
        for account in &config.accounts {
            main.push_str(&format!(
                "<li><code>{}</code> <span class=\"muted\">may grant {}</span></li>",
                escape_html(&account.username),
                escape_html(&account.scopes.join(", ")),
            ));
        }
        main.push_str("</ul></section>");
    }
    layout::page(company, StatusCode::OK, "Welcome", &main)
}

async fn signed_in(company: &ReferenceCompany, session: &WebSession) -> Response {
    let operations = match company.recent_operations(&viewer(session), LISTED_OPERATIONS).await {
        Ok(operations) => operations,
        Err(error) => return pap_company::route::store_refused(error),
    };
    let agent = company.agent(&session.record().client_id).await;
    let mut main = format!(
        "<section class=\"card\"><h1>Signed in as {account}</h1>\
         <p class=\"agent\">Through your agent {agent}.</p><h2>Your agent may</h2><ul class=\"list\">",
        account = escape_html(&account_name(company, session)),
        agent = agent.to_html(),
    );
    for scope in &session.record().scopes {
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
    main.push_str(&format!(
        "</ul><form method=\"post\" action=\"/sign-out\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <div class=\"actions\"><button class=\"secondary\">Sign out</button></div></form>\
         <p class=\"muted\">Signing out ends your agent's sign-in too: its Session is signed out \
         and its sign-in cannot be renewed, so it asks you again before it uses this shop.</p></section><section class=\"card\"><h2>Your operations</h2>",
        csrf = session.csrf_token(SIGN_OUT),
    ));
    if operations.is_empty() {
        main.push_str("<p class=\"muted\">Nothing proposed yet.</p>");
    } else {
        main.push_str("<ul class=\"list\">");
        for operation in &operations {
            let state = operation.state.as_str();
            main.push_str(&format!(
                "<li><a href=\"/operations/{id}\">{summary}</a> \
                 <span class=\"state state-{state}\">{label}</span></li>",
                id = escape_html(&operation.operation_id),
                summary = escape_html(&operation.summary),
                label = state.replace('_', " "),
            ));
        }
        main.push_str("</ul>");
    }
    main.push_str("</section>");
    layout::page(company, StatusCode::OK, "Your account", &main)
}

/// `POST /sign-out`: same-site, the CSRF token of this browser's cookie; ends the sign-in that
/// signed the Session in (the agent's Account Token of it refreshes no more) and signs the
/// Session out (every browser joined to it loses its cookie's standing on its next request),
/// clears this browser's cookie and answers 303 to the front page.
async fn sign_out(
    State(company): State<ReferenceCompany>,
    headers: HeaderMap,
    same_origin: Result<SameOrigin, SameOriginRejection>,
    session: WebSession,
    body: Body,
) -> Response {
    let refused = |text: &str| layout::message(&company, StatusCode::FORBIDDEN, "Not signed out", text);
    if same_origin.is_err() {
        return refused("This request did not come from this site.");
    }
    let Ok(form) = read_form(&headers, body).await else {
        return layout::message(
            &company,
            StatusCode::BAD_REQUEST,
            "Not signed out",
            "The form could not be read.",
        );
    };
    let sent = form.get("csrf").map(String::as_str).unwrap_or_default();
    if session.check_csrf(SIGN_OUT, sent).is_err() {
        return refused("This request did not come from this site.");
    }
    // The sign-in that signed this Session in ends with it (its Account Token refreshes no
    // more, review N19), then the Session itself is signed out (also one no sign-in reached).
    if let Err(error) = company.end_sign_in_of(session.id()).await {
        return pap_company::route::store_refused(error);
    }
    if let Err(error) = company.inner.sessions.sign_out(session.id()).await {
        return pap_company::route::store_refused(error);
    }
    tracing::info!("a Session signed out from the website");
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let clear = format!("{SESSION_COOKIE_NAME}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Lax");
    if let Ok(value) = HeaderValue::try_from(clear) {
        headers.insert(header::SET_COOKIE, value);
    }
    response
}
