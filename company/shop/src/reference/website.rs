//! The company's website: each operation's page `/operations/{id}`, shown in the PAP Session
//! the browser joined, with a same-site confirm/cancel form whose CSRF token is bound to the
//! session cookie and the operation (PAP §5; GUIDE-co-consent-01).

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use pap_shared::{Operation, OperationState};

use super::operations::{ConfirmError, Viewer};
use super::protocol::read_form;
use super::{ReferenceCompany, layout};
use pap_company::page::escape_html;
use pap_company::route::{SameOrigin, SameOriginRejection, WebSession};

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new().route("/operations/{id}", get(show).post(submit))
}

pub(super) fn viewer(session: &WebSession) -> Viewer<'_> {
    let record = session.record();
    Viewer {
        client_id: &record.client_id,
        user: &record.user,
        account: record.account.as_deref(),
        scopes: &record.scopes,
    }
}

async fn show(State(company): State<ReferenceCompany>, Path(id): Path<String>, session: WebSession) -> Response {
    match company.read_operation(&id, &viewer(&session)).await {
        Ok(operation) => render(&company, &operation, &session).await,
        Err(error) => refusal(&company, &error),
    }
}

fn refusal(company: &ReferenceCompany, error: &ConfirmError) -> Response {
    match error {
        ConfirmError::NotFound | ConfirmError::SignInRequired => layout::message(
            company,
            StatusCode::NOT_FOUND,
            "Nothing here",
            "There is nothing to show here.",
        ),
        ConfirmError::Store(error) => pap_company::route::store_refused(*error),
        other => layout::message(
            company,
            other.status(),
            "Not done",
            &format!("Not done: {}.", other.code()),
        ),
    }
}

/// The operation's page: what is asked, by which agent, for which account, and while it is
/// proposed the confirm/cancel form. The `data-` attributes and the hidden inputs' exact
/// spelling are read by agents and by the interop peer.
async fn render(company: &ReferenceCompany, operation: &Operation, session: &WebSession) -> Response {
    let id = escape_html(&operation.operation_id);
    let state = operation.state.as_str();
    let agent = company.agent(&session.record().client_id).await;
    let mut main = format!(
        "<section class=\"card\" data-operation-id=\"{id}\" data-revision=\"{revision}\" data-state=\"{state}\">\
         <h1>{summary}</h1>\
         <p class=\"agent\">Asked by your agent {agent} for the account <strong>{account}</strong>.</p>\
         <dl><dt>Status</dt><dd><span class=\"state state-{state}\">{label}</span></dd>",
        revision = operation.revision,
        summary = escape_html(&operation.summary),
        agent = agent.to_html(),
        account = escape_html(&account_name(company, session)),
        label = state.replace('_', " "),
    );
    if let Some(expires_at) = operation
        .expires_at
        .as_deref()
        .filter(|_| operation.state == OperationState::Proposed)
    {
        main.push_str(&format!("<dt>Until</dt><dd>{}</dd>", escape_html(expires_at)));
    }
    main.push_str(&format!("<dt>Reference</dt><dd><code>{id}</code></dd></dl>"));
    if let Some(result) = &operation.result {
        main.push_str(&format!("<p>{}</p>", escape_html(&result.summary)));
    }
    if operation.state == OperationState::Proposed {
        let action = format!("{}/operations/{}", company.inner.base, operation.operation_id);
        main.push_str(&format!(
            "<p class=\"muted\">Nothing happens until you confirm; confirming does it once.</p>\
             <form method=\"post\" action=\"{action}\">\
             <input type=\"hidden\" name=\"revision\" value=\"{revision}\">\
             <input type=\"hidden\" name=\"approved_by\" value=\"user\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <div class=\"actions\"><button name=\"action\" value=\"confirm\">Confirm</button>\
             <button class=\"secondary\" name=\"action\" value=\"cancel\">Cancel</button></div></form>",
            action = escape_html(&action),
            revision = operation.revision,
            csrf = session.csrf_token(&format!("operation:{}", operation.operation_id)),
        ));
    }
    main.push_str("</section>");
    layout::page(company, StatusCode::OK, &operation.summary, &main)
}

/// The user name of the account the Session is signed in to (its id when the configuration no
/// longer lists it).
pub(super) fn account_name(company: &ReferenceCompany, session: &WebSession) -> String {
    let account = session.account();
    company
        .config()
        .account(account)
        .map_or_else(|| account.to_owned(), |a| a.username.clone())
}

/// The page's form, posted to the page's own URL: from this origin ([`SameOrigin`]: not a
/// sibling subdomain, whose pages `SameSite=Lax` lets send the cookie), CSRF bound to the cookie
/// and the operation, then confirm (the default) or cancel; answered 303 back to the page.
async fn submit(
    State(company): State<ReferenceCompany>,
    Path(id): Path<String>,
    headers: HeaderMap,
    same_origin: Result<SameOrigin, SameOriginRejection>,
    session: WebSession,
    body: Body,
) -> Response {
    let viewer = viewer(&session);
    if let Err(error) = company.read_operation(&id, &viewer).await {
        return refusal(&company, &error);
    }
    if same_origin.is_err() {
        return layout::message(
            &company,
            StatusCode::FORBIDDEN,
            "Not done",
            "This request did not come from this site.",
        );
    }
    let Ok(form) = read_form(&headers, body).await else {
        return layout::message(
            &company,
            StatusCode::BAD_REQUEST,
            "Not done",
            "The form could not be read.",
        );
    };
    let field = |n: &str| form.get(n).map(String::as_str).unwrap_or_default();
    if session.check_csrf(&format!("operation:{id}"), field("csrf")).is_err() {
        return layout::message(
            &company,
            StatusCode::FORBIDDEN,
            "Not done",
            "This request did not come from this site.",
        );
    }
    let outcome = if field("action") == "cancel" {
        company.cancel_operation(&id, &viewer).await
    } else {
        let revision = Some(field("revision"))
            .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|r| r.parse().ok());
        let approved_by = form.get("approved_by").map_or("user", String::as_str);
        company.confirm_operation(&id, &viewer, revision, approved_by).await
    };
    match outcome {
        Ok(operation) => {
            let mut response = StatusCode::SEE_OTHER.into_response();
            let location = operation.url.unwrap_or_default();
            if let Ok(value) = HeaderValue::try_from(location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(error) => refusal(&company, &error),
    }
}
