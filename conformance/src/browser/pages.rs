//! The pages the hooks load, served on loopback HTTP at ports the suite picks.
//!
//! A provider under test must let its browser reach [`SUITE_ORIGIN`] (any port): a browser that
//! follows the navigation rule (security review H3: `https:` to public hosts and what an
//! operator named) names it for the run, as `pap-conformance browser` does for ours. Nothing
//! else on loopback is named: `core.navigation.https-only` checks that a service on another
//! loopback address is never reached.

use serde_json::json;

/// The origin the suite's pages are served from.
pub const SUITE_ORIGIN: &str = "http://127.0.0.1";

/// A page with a title and a heading `#h` reading `hello`.
pub(super) const HELLO: &str = "<title>conformance</title><h1 id=h>hello</h1>";

/// A form: typing a name into `#name` and clicking `#go` writes `hi NAME` into `#out`.
pub(super) const FORM: &str = "<input id=name><button id=go onclick=\"document.getElementById('out').textContent='hi '+document.getElementById('name').value\">go</button><p id=out></p>";

/// The page model's page: a labelled field, a select, a button writing both into `#out`, a
/// button asking `confirm()` (writing `yes` or `no`), a console line.
pub(super) const MODEL: &str = "<title>model</title><h1>Model</h1>\
<label>Name <input id=name></label>\
<label>Size <select id=size><option value=s>Small</option><option value=l>Large</option></select></label>\
<button id=go onclick=\"document.getElementById('out').textContent='hi '+document.getElementById('name').value+' '+document.getElementById('size').value\">Go</button>\
<button id=ask onclick=\"document.getElementById('out').textContent=confirm('Sure?')?'yes':'no'\">Ask</button>\
<p id=out></p><script>console.log('model page')</script>";

/// The ports the pages are served on, when a host under test names only those (review N17:
/// `pap-agent --name-origin` takes an explicit port or range); any free port otherwise.
static PORTS: std::sync::OnceLock<(u16, u16)> = std::sync::OnceLock::new();

/// Serves the suite's pages on ports `low..=high` from now on (the first call wins).
pub fn serve_pages_on(low: u16, high: u16) {
    let _ = PORTS.set((low, high));
}

/// Serves `app` on `ip` (a free port, within the range of [`serve_pages_on`] if one was set)
/// until the process ends: its `http://IP:PORT`.
pub(super) async fn serve_on(ip: [u8; 4], app: axum::Router) -> Result<String, String> {
    let ip = std::net::Ipv4Addr::from(ip);
    let listener = match PORTS.get() {
        None => tokio::net::TcpListener::bind((ip, 0)).await.ok(),
        Some(&(low, high)) => {
            let mut bound = None;
            for port in low..=high {
                if let Ok(listener) = tokio::net::TcpListener::bind((ip, port)).await {
                    bound = Some(listener);
                    break;
                }
            }
            bound
        }
    }
    .ok_or_else(|| "no page server: no free port".to_owned())?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    tokio::spawn(axum::serve(listener, app).into_future());
    Ok(base)
}

/// `html` served at `/` of the suite's origin: the page's URL.
pub(super) async fn page(html: &'static str) -> Result<String, String> {
    let base = serve_on(
        [127, 0, 0, 1],
        axum::Router::new().route(
            "/",
            axum::routing::get(move || async move { axum::response::Html(html) }),
        ),
    )
    .await?;
    Ok(format!("{base}/"))
}

/// A page that fetches JSON, the JSON, and a file served as an attachment: the base URL.
pub(super) async fn fixture() -> Result<String, String> {
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(|| async { axum::response::Html("<p>fixture</p><script>fetch('/data.json')</script>") }),
        )
        .route(
            "/data.json",
            axum::routing::get(|| async { axum::Json(json!({ "answer": 42 })) }),
        )
        .route(
            "/report.txt",
            axum::routing::get(|| async {
                (
                    [(
                        axum::http::header::CONTENT_DISPOSITION,
                        "attachment; filename=\"report.txt\"",
                    )],
                    "quarterly numbers\n",
                )
            }),
        );
    serve_on([127, 0, 0, 1], app).await
}
