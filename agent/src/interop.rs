//! TLS and HTTP set-up shared by the agent, its tests, the demo and the conformance runner, and
//! one helper that plays the *user* (never the agent) on a company's Device Sign-In page.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

/// The roots the agent trusts: the web PKI, plus `extra` (a test CA).
pub fn trust_roots(extra: &[CertificateDer<'static>]) -> Result<RootCertStore, rustls::Error> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for root in extra {
        roots.add(root.clone())?;
    }
    Ok(roots)
}

/// A TLS client configuration: aws-lc-rs, safe protocol versions, `roots`, no client auth.
pub fn tls_client_config(roots: RootCertStore) -> Result<rustls::ClientConfig, rustls::Error> {
    Ok(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// An HTTP client that trusts `roots`, dials the names in `connect` at those addresses, follows
/// no redirect and keeps no cookie: for a user's or an operator's requests in tests and demos.
pub fn plain_http_client(
    roots: RootCertStore,
    connect: &HashMap<String, SocketAddr>,
) -> Result<reqwest::Client, String> {
    let tls = tls_client_config(roots).map_err(|e| e.to_string())?;
    let mut builder = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    for (name, addr) in connect {
        builder = builder.resolve(name, *addr);
    }
    builder.build().map_err(|e| e.to_string())
}

/// Plays the user approving a Device Sign-In on the company's own page, from the user's own HTTP
/// client (the contract of `../shared/interop/README.md`): `GET {base}/device?user_code=…`, then
/// every hidden input posted back to `{base}/device` with the user name, password and
/// `decision=approve`, the page's cookies and same-site headers. The answer must be 200.
pub async fn approve_on_device_page(
    http: &reqwest::Client,
    base: &str,
    user_code: &str,
    username: &str,
    password: &str,
) -> Result<(), String> {
    let page = http
        .get(format!("{base}/device?user_code={user_code}"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if page.status() != 200 {
        return Err(format!("GET /device answered {}", page.status()));
    }
    let cookies: Vec<String> = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|c| c.to_str().ok()?.split(';').next().map(str::to_owned))
        .collect();
    let html = page.text().await.map_err(|e| e.to_string())?;
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
    let answer = post.send().await.map_err(|e| e.to_string())?;
    if answer.status() != 200 {
        return Err(format!("POST /device answered {}", answer.status()));
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
