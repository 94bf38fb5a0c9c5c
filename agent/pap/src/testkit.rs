//! Test support (the `test-support` feature): what plays the *user* (never the agent) in tests,
//! the demo and the conformance runner: an HTTP client that dials test names, and the approval
//! of a Device Sign-In on the company's own page.

use std::collections::HashMap;
use std::net::SocketAddr;

use rustls::RootCertStore;

/// An HTTP client that trusts `roots`, dials the names in `connect` at those addresses, follows
/// no redirect and keeps no cookie: for a user's or an operator's requests in tests and demos.
pub fn plain_http_client(
    roots: RootCertStore,
    connect: &HashMap<String, SocketAddr>,
) -> Result<reqwest::Client, UserError> {
    let tls = pap_net::tls::client_config(roots).map_err(UserError::Tls)?;
    let mut builder = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    for (name, addr) in connect {
        builder = builder.resolve(name, *addr);
    }
    builder.build().map_err(UserError::Http)
}

/// Plays the user approving a Device Sign-In on the company's own page, from the user's own HTTP
/// client (the contract of `conformance/interop/README.md`): `GET {base}/device?user_code=…`, then
/// every hidden input posted back to `{base}/device` with the user name, password and
/// `decision=approve`, the page's cookies and same-site headers. The answer must be 200.
pub async fn approve_on_device_page(
    http: &reqwest::Client,
    base: &str,
    user_code: &str,
    username: &str,
    password: &str,
) -> Result<(), UserError> {
    let page = http
        .get(format!("{base}/device?user_code={user_code}"))
        .send()
        .await
        .map_err(UserError::Http)?;
    if page.status() != 200 {
        return Err(UserError::Status {
            step: "GET /device",
            status: page.status().as_u16(),
        });
    }
    let cookies: Vec<String> = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|c| c.to_str().ok()?.split(';').next().map(str::to_owned))
        .collect();
    let html = page.text().await.map_err(UserError::Http)?;
    let mut form = hidden_inputs(&html);
    form.extend([
        ("username".into(), username.to_owned()),
        ("password".into(), password.to_owned()),
        ("decision".into(), "approve".into()),
    ]);
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&form)
        .finish();
    let mut post = http
        .post(format!("{base}/device"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", base)
        .header("sec-fetch-site", "same-origin")
        .body(body);
    if !cookies.is_empty() {
        post = post.header("cookie", cookies.join("; "));
    }
    let answer = post.send().await.map_err(UserError::Http)?;
    if answer.status() != 200 {
        return Err(UserError::Status {
            step: "POST /device",
            status: answer.status().as_u16(),
        });
    }
    Ok(())
}

/// Every `<input type="hidden" name="N" value="V">` of a page, written exactly so.
pub fn hidden_inputs(html: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find("<input type=\"hidden\" name=\"") {
        rest = &rest[at + 27..];
        let Some((name, after)) = rest.split_once("\" value=\"") else {
            break;
        };
        let Some((value, after)) = after.split_once("\">") else {
            break;
        };
        out.push((name.to_owned(), value.to_owned()));
        rest = after;
    }
    out
}

/// Why the user's own request failed.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// The TLS configuration could not be built.
    #[error("the TLS configuration")]
    Tls(#[source] rustls::Error),
    /// The request failed.
    #[error("the request failed")]
    Http(#[source] reqwest::Error),
    /// The page answered something else than 200.
    #[error("{step} answered {status}")]
    Status {
        /// The request.
        step: &'static str,
        /// Its status.
        status: u16,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hidden_inputs_written_exactly_so() {
        let html = r#"<form><input type="hidden" name="csrf" value="abc"><input name="x"><input type="hidden" name="user_code" value="BCDF-GHJK"></form>"#;
        assert_eq!(
            hidden_inputs(html),
            [
                ("csrf".to_owned(), "abc".to_owned()),
                ("user_code".to_owned(), "BCDF-GHJK".to_owned())
            ]
        );
        assert!(hidden_inputs(r#"<input type="hidden" name="broken"#).is_empty());
    }
}
