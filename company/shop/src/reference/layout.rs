//! The reference shop's pages: one layout (the company's name, then the page) and one
//! stylesheet served by the site itself, so every page keeps `default-src 'self'` with no
//! inline style, no script and nothing from another origin; readable from 320 px wide up.

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderValue, StatusCode, header};
use pap_shared::ClientId;

use super::ReferenceCompany;
use pap_company::page::{escape_html, html};

/// Where the stylesheet is served.
const STYLESHEET_PATH: &str = "/site.css";

/// The stylesheet, compiled in.
const STYLESHEET: &str = include_str!("site.css");

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new().route(STYLESHEET_PATH, get(stylesheet))
}

async fn stylesheet() -> Response {
    let mut response = (StatusCode::OK, STYLESHEET).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// A page of the shop: `title` (plain text) and `main` (HTML the caller escaped) under the
/// company's name, with the site's standard headers ([`html`]).
pub(super) fn page(company: &ReferenceCompany, status: StatusCode, title: &str, main: &str) -> Response {
    let name = escape_html(&company.inner.config.name);
    html(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{title} · {name}</title><link rel=\"stylesheet\" href=\"{STYLESHEET_PATH}\"></head>\
             <body><header><a href=\"/\">{name}</a></header><main>{main}</main></body></html>\n",
            title = escape_html(title),
        ),
    )
}

/// A page that says one thing: `title` and a sentence, both plain text.
pub(super) fn message(company: &ReferenceCompany, status: StatusCode, title: &str, text: &str) -> Response {
    let main = format!(
        "<section class=\"card\"><h1>{}</h1><p>{}</p></section>",
        escape_html(title),
        escape_html(text)
    );
    page(company, status, title, &main)
}

/// The agent as a person would recognise it: the `client_name` of its Client ID Metadata
/// Document and the domain it is served from.
pub(super) struct Agent {
    /// `client_name`; `None` when the document could not be had just now.
    pub(super) name: Option<String>,
    /// The host of its `client_id`.
    pub(super) domain: String,
}

impl Agent {
    /// `<strong>Name</strong> (domain)`, escaped.
    pub(super) fn to_html(&self) -> String {
        let domain = escape_html(&self.domain);
        match &self.name {
            Some(name) => format!("<strong>{}</strong> ({domain})", escape_html(name)),
            None => format!("<strong>{domain}</strong>"),
        }
    }
}

impl ReferenceCompany {
    /// Who `client_id` is, from its metadata (cached by the resolver after any join or token
    /// request); when the document cannot be had now, the page still names the domain.
    pub(super) async fn agent(&self, client_id: &ClientId) -> Agent {
        let domain = url::Url::parse(client_id.as_str())
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_else(|| client_id.as_str().to_owned());
        let name = match self.inner.clients.metadata(client_id).await {
            Ok(metadata) => Some(metadata.client_name().to_owned()),
            Err(error) => {
                tracing::info!(%error, "an agent's metadata for a page");
                None
            }
        };
        Agent { name, domain }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_reads_as_its_name_and_domain_escaped() {
        let agent = Agent {
            name: Some("<Atlas>".into()),
            domain: "atlas.example".into(),
        };
        assert_eq!(agent.to_html(), "<strong>&lt;Atlas&gt;</strong> (atlas.example)");
        let unnamed = Agent {
            name: None,
            domain: "atlas.example".into(),
        };
        assert_eq!(unnamed.to_html(), "<strong>atlas.example</strong>");
    }

    #[test]
    fn the_stylesheet_needs_nothing_from_elsewhere() {
        // `default-src 'self'`: no @import, no url(), no font from another origin.
        assert!(!STYLESHEET.contains("@import") && !STYLESHEET.contains("url("));
    }
}
