//! CDP effects on one running Chromium: granted material goes in (AIP-63 C1: cookies over
//! `Storage.setCookies`, local storage in a blank document of its origin), a revoke takes out
//! what it covers (C8: cookies, the company's `__Host-poppy_session` included, storage, the tabs
//! showing it), and a click that waits for the page it leads to. Every function takes a
//! `&Browser`; who owns the browser (the agent's [`super::BrowserHost`], or another process
//! through [`super::LiveProfiles`]) is not its concern.

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::network::{CookieParam, CookieSameSite, DeleteCookiesParams, TimeSinceEpoch};
use chromiumoxide::cdp::browser_protocol::storage::{ClearDataForOriginParams, GetCookiesParams, SetCookiesParams};
use chromiumoxide::cdp::browser_protocol::target::{
    CloseTargetParams, CreateTargetParams, GetBrowserContextsParams, GetTargetsParams,
};
use chromiumoxide::{Browser, Page};
use futures_util::StreamExt as _;

use super::error::{BrowserError, scrub};
use crate::consent::{Forgotten, Injection, LiveError, Scope, StorageOrigin};

/// How long one CDP step of a revoke may take.
pub(super) const STEP: Duration = Duration::from_secs(10);

/// A CDP error of `step`, as [`LiveError::Refused`] with its head only ([`scrub`]).
fn refused(step: &'static str) -> impl Fn(chromiumoxide::error::CdpError) -> LiveError {
    move |e| LiveError::Refused {
        step,
        detail: scrub(&e.to_string()),
    }
}

/// A step that took longer than [`STEP`].
fn timed(step: &'static str) -> impl Fn(tokio::time::error::Elapsed) -> LiveError {
    move |_| LiveError::Timeout { step }
}

/// Puts a grant's cookies into `browser` (C1): host-only cookies by URL, domain cookies by
/// domain, with their flags; then its local storage, origin by origin ([`inject_storage`]).
/// Returns how many cookies went in. Errors name no value.
pub(crate) async fn inject(
    browser: &Browser,
    injection: &Injection,
    context: Option<&BrowserContextId>,
) -> Result<usize, LiveError> {
    let count = inject_cookies(browser, injection, context).await?;
    for origin in injection.origins().iter().filter(|o| !o.local_storage.is_empty()) {
        inject_storage(browser, origin, context).await?;
    }
    Ok(count)
}

/// Whether a revoke that closes every tab leaves one blank tab ([`forget`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LastTab {
    /// Kept: an operator's browser the agent attached to may be headed, and a headed browser
    /// ends with its last tab.
    Kept,
    /// Not kept: the agent's own browsers are headless and started without a window
    /// (`--no-startup-window`); they run on with no tab, so a blank tab left there would only
    /// wait unlisted, unreaped, until the browser stops.
    None,
}

impl LastTab {
    /// What `browser` needs: [`LastTab::Kept`] for one the agent attached to.
    pub(crate) fn of(browser: &super::ControlledBrowser) -> Self {
        if browser.was_already_running() {
            Self::Kept
        } else {
            Self::None
        }
    }
}

/// A new tab on `about:blank` in `context` (the browser's default context without one).
async fn blank_tab(
    browser: &Browser,
    context: Option<&BrowserContextId>,
) -> Result<Page, chromiumoxide::error::CdpError> {
    let mut params = CreateTargetParams::new("about:blank");
    params.browser_context_id = context.cloned();
    browser.new_page(params).await
}

/// Local storage lives with a document of its origin, so one is made for it
/// ([`origin_document`]), the items set there, the tab closed.
async fn inject_storage(
    browser: &Browser,
    origin: &StorageOrigin,
    context: Option<&BrowserContextId>,
) -> Result<(), LiveError> {
    const STEP_NAME: &str = "putting granted storage into its origin";
    let page = origin_document(browser, &origin.origin, context).await?;
    let result = async {
        // The values travel inside the script as JSON string literals, never in a URL.
        let mut script = String::from("(() => {");
        for item in &origin.local_storage {
            let name = serde_json::to_string(&item.name).map_err(|_| LiveError::Unexpected { step: STEP_NAME })?;
            let value =
                serde_json::to_string(item.value.expose()).map_err(|_| LiveError::Unexpected { step: STEP_NAME })?;
            script.push_str(&format!("localStorage.setItem({name}, {value});"));
        }
        script.push_str("return true; })()");
        page.evaluate(script).await.map_err(refused(STEP_NAME))?;
        Ok(())
    }
    .await;
    close_tab(browser, page).await;
    result
}

/// The keys (never the values) of `origin`'s local storage, read in a document of the origin
/// ([`origin_document`]) that is closed again.
pub(crate) async fn local_storage_keys(
    browser: &Browser,
    origin: &str,
    context: Option<&BrowserContextId>,
) -> Result<Vec<String>, LiveError> {
    const STEP_NAME: &str = "reading the storage keys of an origin";
    let page = origin_document(browser, origin, context).await?;
    let keys = page
        .evaluate("Object.keys(localStorage)")
        .await
        .map_err(refused(STEP_NAME))
        .and_then(|keys| {
            keys.into_value::<Vec<String>>()
                .map_err(|_| LiveError::Unexpected { step: STEP_NAME })
        });
    close_tab(browser, page).await;
    keys
}

/// A new tab showing a blank document of `origin`: its request is answered in the browser
/// itself (CDP `Fetch`, an empty 200 page; nothing reaches the network), and interception is
/// off again when it returns. Close it with [`close_tab`].
async fn origin_document(
    browser: &Browser,
    origin: &str,
    context: Option<&BrowserContextId>,
) -> Result<chromiumoxide::Page, LiveError> {
    const STEP_NAME: &str = "opening a blank document of an origin";
    use chromiumoxide::cdp::browser_protocol::fetch::{
        DisableParams, EnableParams, EventRequestPaused, FulfillRequestParams, HeaderEntry, RequestPattern,
        RequestStage,
    };
    let page = tokio::time::timeout(STEP, blank_tab(browser, context))
        .await
        .map_err(timed(STEP_NAME))?
        .map_err(refused(STEP_NAME))?;
    let loaded = async {
        let pattern = RequestPattern {
            url_pattern: Some(format!("{origin}/*")),
            resource_type: None,
            request_stage: Some(RequestStage::Request),
        };
        page.execute(EnableParams {
            patterns: Some(vec![pattern]),
            handle_auth_requests: None,
        })
        .await
        .map_err(refused(STEP_NAME))?;
        let mut paused = page
            .event_listener::<EventRequestPaused>()
            .await
            .map_err(refused(STEP_NAME))?;
        let answer = async {
            if let Some(event) = paused.next().await {
                let mut reply = FulfillRequestParams::new(event.request_id.clone(), 200);
                reply.response_headers = Some(vec![HeaderEntry::new("Content-Type", "text/html")]);
                page.execute(reply).await.map(|_| ()).map_err(refused(STEP_NAME))
            } else {
                Err(LiveError::Unexpected { step: STEP_NAME })
            }
        };
        let (loaded, answered) =
            tokio::time::timeout(STEP, async { tokio::join!(page.goto(format!("{origin}/")), answer) })
                .await
                .map_err(timed(STEP_NAME))?;
        answered?;
        loaded.map_err(refused(STEP_NAME))?;
        page.execute(DisableParams::default())
            .await
            .map_err(refused(STEP_NAME))?;
        Ok(())
    }
    .await;
    match loaded {
        Ok(()) => Ok(page),
        Err(error) => {
            close_tab(browser, page).await;
            Err(error)
        }
    }
}

/// Closes `page` and returns once Chromium reports its target destroyed (at most [`STEP`]):
/// `Page.close` is answered before the tab is gone, and a revoke listing tabs right after an
/// injection would otherwise find this one still closing.
async fn close_tab(browser: &Browser, page: chromiumoxide::Page) {
    use chromiumoxide::cdp::browser_protocol::target::EventTargetDestroyed;
    let id = page.target_id().clone();
    // Listening before the close, so the event cannot pass unseen.
    let destroyed = browser.event_listener::<EventTargetDestroyed>().await;
    if tokio::time::timeout(STEP, page.close()).await.is_err() {
        return;
    }
    if let Ok(mut destroyed) = destroyed {
        let _ = tokio::time::timeout(STEP, async {
            while let Some(event) = destroyed.next().await {
                if event.target_id == id {
                    break;
                }
            }
        })
        .await;
    }
}

async fn inject_cookies(
    browser: &Browser,
    injection: &Injection,
    context: Option<&BrowserContextId>,
) -> Result<usize, LiveError> {
    let cookies: Vec<CookieParam> = injection
        .cookies()
        .iter()
        .map(|c| {
            let mut param = CookieParam::new(c.name.clone(), c.value.expose().to_owned());
            if c.domain.starts_with('.') {
                param.domain = Some(c.domain.clone());
            } else {
                param.url = Some(format!("https://{}{}", c.host(), c.path));
            }
            param.path = Some(c.path.clone());
            param.secure = Some(c.secure);
            param.http_only = Some(c.http_only);
            param.same_site = match c.same_site.as_deref() {
                Some("Strict") => Some(CookieSameSite::Strict),
                Some("Lax") => Some(CookieSameSite::Lax),
                Some("None") => Some(CookieSameSite::None),
                _ => None,
            };
            param.expires = c.expires.filter(|e| *e > 0.0).map(TimeSinceEpoch::new);
            param
        })
        .collect();
    let count = cookies.len();
    if count > 0 {
        let mut params = SetCookiesParams::new(cookies);
        params.browser_context_id = context.cloned();
        tokio::time::timeout(STEP, browser.execute(params))
            .await
            .map_err(timed("putting granted cookies in"))?
            .map_err(refused("putting granted cookies in"))?;
    }
    Ok(count)
}

/// Takes what `scope` covers out of `browser` (C8), in every browser context (the default one
/// and each a grant or a join runs in, review M5): its cookies (deleted one by one over
/// `Network.deleteCookies`, by name, exact domain and path, from a blank tab of that context),
/// the storage of the origins involved (`Storage.clearDataForOrigin`, per context), and the tabs
/// on those hosts (`Target.closeTarget`). With [`LastTab::Kept`] the blank tab of the default
/// context stays when every other tab was closed, so the browser outlives the revoke.
pub(crate) async fn forget(
    browser: &Browser,
    scope: Scope<'_>,
    granted: &[String],
    last_tab: LastTab,
) -> Result<Forgotten, LiveError> {
    let cdp = refused;
    let targets = tokio::time::timeout(STEP, browser.execute(GetTargetsParams::default()))
        .await
        .map_err(timed("listing tabs"))?
        .map_err(cdp("listing tabs"))?
        .result
        .target_infos;
    let contexts = tokio::time::timeout(STEP, browser.execute(GetBrowserContextsParams::default()))
        .await
        .map_err(timed("listing browser contexts"))?
        .map_err(cdp("listing browser contexts"))?
        .result
        .browser_context_ids;
    let in_scope = |url: &str| {
        url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(|h| scope.covers(h)))
            == Some(true)
    };
    let pages: Vec<_> = targets.iter().filter(|t| t.r#type == "page").collect();
    let closing: Vec<_> = pages.iter().filter(|t| in_scope(&t.url)).collect();
    let tab_urls: Vec<&str> = closing.iter().map(|t| t.url.as_str()).collect();
    let mut hosts: Vec<String> = closing
        .iter()
        .filter_map(|t| url::Url::parse(&t.url).ok()?.host_str().map(str::to_owned))
        .collect();
    // One blank tab per context to work from (Network.deleteCookies and clearDataForOrigin act
    // on the context of the tab they are sent through).
    let mut helpers: Vec<(bool, Page)> = Vec::new();
    let mut deleted = 0;
    for context in std::iter::once(None).chain(contexts.into_iter().map(Some)) {
        let helper = tokio::time::timeout(STEP, blank_tab(browser, context.as_ref()))
            .await
            .map_err(timed("opening a blank tab"))?
            .map_err(cdp("opening a blank tab"))?;
        helpers.push((context.is_none(), helper.clone()));
        let reading = GetCookiesParams {
            browser_context_id: context,
        };
        let cookies = tokio::time::timeout(STEP, browser.execute(reading))
            .await
            .map_err(timed("reading cookies"))?
            .map_err(cdp("reading cookies"))?
            .result
            .cookies;
        for cookie in cookies
            .iter()
            .filter(|c| scope.covers(c.domain.trim_start_matches('.')))
        {
            let mut params = DeleteCookiesParams::new(cookie.name.clone());
            params.domain = Some(cookie.domain.clone());
            params.path = Some(cookie.path.clone());
            tokio::time::timeout(STEP, helper.execute(params))
                .await
                .map_err(timed("deleting a cookie"))?
                .map_err(cdp("deleting a cookie"))?;
            hosts.push(cookie.domain.trim_start_matches('.').to_owned());
            deleted += 1;
        }
    }
    if let Scope::Domains(domains) = scope {
        hosts.extend(domains.iter().map(|d| d.as_str().to_owned()));
    }
    // Through a tab's session: at the browser target Chromium answers this with an internal
    // error and clears nothing.
    let origins = storage_origins(&hosts, &tab_urls, granted);
    for (_, helper) in &helpers {
        for origin in &origins {
            tokio::time::timeout(
                STEP,
                helper.execute(ClearDataForOriginParams::new(origin.clone(), "all")),
            )
            .await
            .map_err(timed("clearing storage"))?
            .map_err(cdp("clearing storage"))?;
        }
    }
    let mut closed = 0;
    for target in &closing {
        let closing = tokio::time::timeout(STEP, browser.execute(CloseTargetParams::new(target.target_id.clone())))
            .await
            .map_err(timed("closing a tab"))?;
        match closing {
            Ok(_) => closed += 1,
            // A tab may close on its own between the listing and here (Chromium then answers
            // "No target with given id found"): gone is what the revoke wants. Any other
            // failure, or the tab still listed, is an error.
            Err(error) => {
                let still_open = tokio::time::timeout(STEP, browser.execute(GetTargetsParams::default()))
                    .await
                    .map_err(timed("listing tabs"))?
                    .map_err(cdp("listing tabs"))?
                    .result
                    .target_infos
                    .iter()
                    .any(|t| t.target_id == target.target_id);
                if still_open {
                    return Err(cdp("closing a tab")(error));
                }
            }
        }
    }
    // The default context's blank tab stays only when it is the last one, and only for a browser
    // that would end without it.
    let last = last_tab == LastTab::Kept && pages.len() == closing.len();
    for (default, helper) in helpers {
        if !(default && last) {
            let _ = tokio::time::timeout(STEP, helper.close()).await;
        }
    }
    Ok(Forgotten {
        cookies: deleted,
        tabs: closed,
    })
}

/// The origins whose storage a revoke clears: `https://` and `http://` on the default ports for
/// every host involved, each closing tab's own origin (its port included), and the granted
/// material's origins in scope. Sorted, each once.
fn storage_origins(hosts: &[String], tab_urls: &[&str], granted: &[String]) -> Vec<String> {
    let mut origins: Vec<String> = hosts
        .iter()
        .flat_map(|host| [format!("https://{host}"), format!("http://{host}")])
        .collect();
    origins.extend(tab_urls.iter().filter_map(|url| {
        let origin = url::Url::parse(url).ok()?.origin();
        origin.is_tuple().then(|| origin.ascii_serialization())
    }));
    origins.extend(granted.iter().cloned());
    origins.sort();
    origins.dedup();
    origins
}

/// Clicks the element at `selector` on `page` and waits, within `deadline`, for the document it
/// leads to (after any redirects) to load. Returns that document's HTTP status.
pub async fn click_and_land(page: &Page, selector: &str, deadline: Duration) -> Result<u16, BrowserError> {
    use chromiumoxide::cdp::browser_protocol::network::{EventResponseReceived, ResourceType};
    let cdp = BrowserError::cdp;
    let mut responses = page.event_listener::<EventResponseReceived>().await.map_err(cdp)?;
    page.find_element(selector)
        .await
        .map_err(cdp)?
        .click()
        .await
        .map_err(cdp)?;
    let status = tokio::time::timeout(deadline, async {
        while let Some(event) = responses.next().await {
            let status = u16::try_from(event.response.status).unwrap_or(0);
            if event.r#type == ResourceType::Document && !(300..400).contains(&status) {
                return Some(status);
            }
        }
        None
    })
    .await
    .map_err(|_| BrowserError::Cdp("no page loaded in time".into()))?
    .ok_or_else(|| BrowserError::Cdp("the page closed".into()))?;
    tokio::time::timeout(deadline, page.wait_for_navigation())
        .await
        .map_err(|_| BrowserError::Cdp("the page did not finish loading in time".into()))?
        .map_err(cdp)?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::storage_origins;

    #[test]
    fn storage_origins_cover_default_ports_tab_ports_and_granted_origins_once_each() {
        let hosts = ["shop.example".to_owned(), "shop.example".to_owned()];
        let tabs = [
            "https://shop.example:8443/orders?x=1",
            "https://shop.example/operations/op_1",
            "about:blank",
        ];
        let granted = ["https://www.shop.example:9443".to_owned()];
        assert_eq!(
            storage_origins(&hosts, &tabs, &granted),
            [
                "http://shop.example",
                "https://shop.example",
                "https://shop.example:8443",
                "https://www.shop.example:9443",
            ]
        );
    }
}
