//! The join (PAP §5, agent side): sign a 60-second `poppy-browser+jwt` for the live Session and
//! have the controlled browser submit it as a top-level form POST to the company's published
//! endpoint, then wait for the landing on `return_to`.
//!
//! The assertion exists only in this function and in the body of that one POST: never in a URL
//! (no query string, no `data:` URL), a log line, an error or the returned value.

use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::network::{EventLoadingFailed, EventResponseReceived, ResourceType};
use chromiumoxide::cdp::browser_protocol::page::{
    CreateIsolatedWorldParams, FrameId, GetFrameTreeParams, GetNavigationHistoryParams,
};
use chromiumoxide::cdp::browser_protocol::target::GetTargetsParams;
use chromiumoxide::cdp::js_protocol::runtime::{EvaluateParams, ExecutionContextId};
use futures_util::StreamExt as _;
use pap_shared::{BROWSER_ASSERTION_TYP, BrowserAssertionClaims, BrowserAssertionRequest, HttpsUrl, Jti, UnixTime};

use crate::client::{Company, PapClient, Session};
use pap_browser::chromium::{BrowserError, ControlledBrowser};
use pap_browser::consent::{Caller, ConsentError, ConsentHost, JoinPermit};
use pap_browser::persons::Persons;

/// The tab a join to `domain` runs in (review M5). In a browser the agent started: a new browser
/// context holding only the material of the grant `caller` may use on `domain` (none when no
/// grant covers it: the company's pages then ride no granted session at all), so a page of the
/// company's, hostile or compromised, rides no other grant's session. In an attached browser
/// (`--attach`, F1): the default context, with no material.
pub async fn join_tab(
    browser: &ControlledBrowser,
    consent: &ConsentHost,
    caller: &Caller,
    domain: &str,
) -> Result<Page, JoinTabError> {
    if browser.was_already_running() {
        return Ok(browser.new_page().await?);
    }
    let context = browser.open_context().await?;
    if let Some(injection) = consent.local_injection_for(caller, domain)? {
        browser.inject_into(Some(&context), &injection).await?;
    }
    Ok(browser.new_page_in(Some(&context)).await?)
}

/// Why [`join_tab`] has no tab.
#[derive(Debug, thiserror::Error)]
pub enum JoinTabError {
    /// The browser failed.
    #[error(transparent)]
    Browser(#[from] BrowserError),
    /// The grants could not be read.
    #[error(transparent)]
    Consent(#[from] ConsentError),
}

/// The tab a join runs in, as its caller knows it. The form that carries the assertion must be
/// built in a document no page's script can reach: a page of the company's, hostile or
/// compromised, could otherwise read the assertion before it is posted.
#[derive(Clone, Copy, Debug)]
pub enum JoinTab<'a> {
    /// A tab this agent opened for the join ([`join_tab`], the tools' `open_tab`) and has sent
    /// nowhere since: it is still on the `about:blank` a new tab starts with, in a browsing
    /// context group of its own that no page ever held a reference to. The form is built there
    /// at once, once the browser confirms it ([`still_new`]); otherwise (or when the browser
    /// cannot answer) the tab is treated as [`JoinTab::Used`].
    New(&'a Page),
    /// A tab that may have shown pages. It is first sent to a fresh `about:blank`: a new
    /// document of an opaque origin of its own, which a window the old page opened cannot
    /// script. Leaving a company's page that way is a cross-process navigation in Chromium,
    /// about half of such a join's time (issue 42).
    Used(&'a Page),
}

impl<'a> JoinTab<'a> {
    /// The tab's page.
    pub fn page(self) -> &'a Page {
        match self {
            Self::New(page) | Self::Used(page) => page,
        }
    }
}

/// Whether `page` is still on the document a new tab starts with: one entry of history,
/// `about:blank`, a document of an opaque origin, and no window the tab opened. A page that
/// replaced itself with `about:blank` (`location.replace`) leaves one entry too, but its origin
/// stays in the blank document, where a window it opened could script it: that is refused
/// here. DevTools spells every `about:blank` frame's `securityOrigin` `://`, inherited or not
/// (the test found it), so the document's own `origin` is read in a world of the agent's, where
/// the page's scripts cannot answer for it.
///
/// A tab that showed a sandboxed page (an opaque origin too) and was replaced from it reads
/// `null` like a new one; a window that page opened is refused by its `openerId`, but not one it
/// reached otherwise. [`JoinTab::New`] is for a tab opened for the join and sent nowhere; this
/// check is the belt behind that rule, and the form's own script checks its document again.
pub async fn still_new(page: &Page) -> Result<bool, JoinError> {
    Ok(new_tab_world(page).await?.is_some())
}

/// [`still_new`], and when the tab is new, the world of the agent's it was read in: the form is
/// built in that world, so it runs in the document checked or not at all (a document that
/// replaced it has none of that world's context).
async fn new_tab_world(page: &Page) -> Result<Option<ExecutionContextId>, JoinError> {
    let (history, tree, targets) = futures_util::try_join!(
        page.execute(GetNavigationHistoryParams::default()),
        page.execute(GetFrameTreeParams::default()),
        page.execute(GetTargetsParams::default())
    )
    .map_err(|e| cdp(&e))?;
    let entries = &history.result.entries;
    let frame = &tree.result.frame_tree.frame;
    let blank = |url: &str| url == "about:blank";
    if entries.len() != 1 || !entries.iter().all(|entry| blank(&entry.url)) || !blank(&frame.url) {
        return Ok(None);
    }
    // A window this tab opened holds it as `opener`, and one that opened it is its own opener.
    let this = page.target_id();
    let opened = targets.result.target_infos.iter().any(|target| {
        target.opener_id.as_ref() == Some(this) || (&target.target_id == this && target.opener_id.is_some())
    });
    if opened {
        return Ok(None);
    }
    let world = agent_world(page, frame.id.clone()).await?;
    let origin = EvaluateParams::builder()
        .expression("self.origin")
        .context_id(world)
        .return_by_value(true)
        .build()
        .map_err(JoinError::Cdp)?;
    let origin = page.execute(origin).await.map_err(|e| cdp(&e))?;
    let opaque = origin.result.result.value.as_ref().and_then(serde_json::Value::as_str) == Some("null");
    Ok(opaque.then_some(world))
}

/// A world of the agent's in `frame`'s current document (the page's scripts see none of it):
/// its execution context. chromiumoxide makes one in every document of its pages (its utility
/// world, with which it reads and edits the DOM), and when it has one for this frame that one is
/// used: making another costs the browser 8 to 17 ms here, a tenth of a join in a new tab
/// (issue 42). A context that belonged to an earlier document has nothing to run in: the
/// evaluation fails, and so does the join, or [`still_new`] answers "not new".
async fn agent_world(page: &Page, frame: FrameId) -> Result<ExecutionContextId, JoinError> {
    if let Some(world) = page
        .frame_secondary_execution_context(frame.clone())
        .await
        .map_err(|e| cdp(&e))?
    {
        return Ok(world);
    }
    let world = page
        .execute(CreateIsolatedWorldParams {
            frame_id: frame,
            world_name: Some("pap-join".to_owned()),
            grant_univeral_access: None,
        })
        .await
        .map_err(|e| cdp(&e))?;
    Ok(world.result.execution_context_id)
}

/// How long the assertion lives: the most PAP allows.
const LIFETIME: i64 = 60;
/// `iat` is set this far in the past: the Python reference allows no clock skew at all.
const IAT_BACKDATE: i64 = 5;

/// What a join tells its caller: never the assertion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinOutcome {
    /// The endpoint posted to.
    pub endpoint: HttpsUrl,
    /// Where the browser landed: the `return_to`.
    pub landed: HttpsUrl,
    /// The HTTP status of the landed page.
    pub status: u16,
    /// When the assertion expired (or will).
    pub expires_at: UnixTime,
    /// How long each stage took.
    pub stages: JoinStages,
}

/// How long each stage of a join took, on the agent's side (`benches/join_timing.rs` prints
/// them): durations only, nothing of the assertion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JoinStages {
    /// Signing the assertion.
    pub sign: Duration,
    /// Loading `about:blank` in the tab: the clean document the form is built in, so no page's
    /// script sees the assertion. For a [`JoinTab::New`], only asking the browser that the tab
    /// is still on the one it started with.
    pub blank: Duration,
    /// Building and submitting the form (one `Runtime.evaluate`).
    pub submit: Duration,
    /// From the submit to the `return_to` page's response: the POST, the company's 303 and the
    /// GET it sends the browser to (DevTools reports a redirect in the next request, not as a
    /// response of its own, so the 303 is not timed apart).
    pub landed: Duration,
    /// From that response to the page loaded.
    pub loaded: Duration,
}

/// Joins `tab`'s browser to `session` at `company`, landing on `return_to` in that tab, within
/// `deadline`.
/// The join needs a grant (AIP-63 C1): `permit`, from [`pap_browser::ConsentHost::permit_join`] for the
/// company's domain; nothing is signed without it. The company is one of the person's sites
/// (its record is in the wallet), so the browser sends the join's POST only on the pass
/// `persons` (the browser's own table) gives this tab for the endpoint, for the join's length.
#[allow(
    clippy::too_many_arguments,
    reason = "each is one fact of the join; a struct would only rename them"
)]
pub async fn join(
    client: &PapClient,
    company: &Company,
    session: &Session,
    return_to: &HttpsUrl,
    tab: JoinTab<'_>,
    permit: &JoinPermit,
    persons: &Persons,
    deadline: Duration,
) -> Result<JoinOutcome, JoinError> {
    if !permit.covers(company.domain.as_str()) {
        return Err(JoinError::ConsentRequired(company.domain.as_str().to_owned()));
    }
    let endpoint = company.browser_session_endpoint.clone().ok_or(JoinError::NoEndpoint)?;
    let began = std::time::Instant::now();
    let mut stages = JoinStages::default();
    let iat = client.clock().now().plus(-IAT_BACKDATE);
    let request = BrowserAssertionRequest {
        client_id: client.identity().client_id(),
        user: &session.user,
        endpoint: &endpoint,
        session_id: &session.session_id,
        return_to,
        company_domain: &company.domain,
    };
    let claims = BrowserAssertionClaims::build(&request, iat, LIFETIME, Jti::generate(client.rng().as_ref()))
        .map_err(|_| JoinError::ForeignReturnTo)?;
    let assertion = client
        .identity()
        .key()
        .sign(BROWSER_ASSERTION_TYP, &claims)
        .map_err(|_| JoinError::Signing)?;
    let mut mark = std::time::Instant::now();
    stages.sign = mark - began;

    let page = tab.page();
    let _pass = persons
        .join_pass(page.target_id().inner().clone(), endpoint.url())
        .map_err(|e| JoinError::Cdp(e.to_string()))?;
    // A check the browser could not answer counts as "not new": the tab then goes to a fresh
    // blank page, as a used one does.
    let new_world = match tab {
        JoinTab::New(page) => new_tab_world(page).await.unwrap_or(None),
        JoinTab::Used(_) => None,
    };
    let (world, first_document) = match new_world {
        Some(world) => (world, true),
        None => {
            page.goto("about:blank").await.map_err(|e| cdp(&e))?;
            let frame = page
                .mainframe()
                .await
                .map_err(|e| cdp(&e))?
                .ok_or_else(|| JoinError::Cdp("the tab has no main frame".into()))?;
            (agent_world(page, frame).await?, false)
        }
    };
    stages.blank = mark.elapsed();
    mark = std::time::Instant::now();
    let responses = page
        .event_listener::<EventResponseReceived>()
        .await
        .map_err(|e| cdp(&e))?;
    let failures = page.event_listener::<EventLoadingFailed>().await.map_err(|e| cdp(&e))?;
    let mut events = futures_util::stream::select(responses.map(Seen::Response), failures.map(Seen::Failure));
    // A form built in the agent's world of the blank document: method POST, the published
    // endpoint as action, one hidden input. The script first checks, in the same run, that its
    // document is still the blank one of an opaque origin (and a new tab's first), so a tab
    // moved elsewhere since the check gets no form; a document that replaced the checked one
    // has no context of that world, and the call fails. The values travel as JSON string
    // literals inside the script, not in any URL. The script holds the assertion: zeroized
    // when dropped (review L11). chromiumoxide's own copy of the command it sends is beyond
    // reach; the assertion is single-use and expires in 60 s.
    let script = zeroize::Zeroizing::new(format!(
        "(() => {{ if (location.href !== 'about:blank' || self.origin !== 'null'{first}) return false; \
         const f = document.createElement('form'); f.method = 'post'; f.action = {action}; \
         f.enctype = 'application/x-www-form-urlencoded'; \
         const i = document.createElement('input'); i.type = 'hidden'; i.name = 'assertion'; i.value = {value}; \
         f.appendChild(i); document.body.appendChild(f); f.submit(); return true; }})()",
        first = if first_document { " || history.length !== 1" } else { "" },
        action = serde_json::to_string(endpoint.as_str()).map_err(|_| JoinError::Signing)?,
        value = serde_json::to_string(assertion.secret()).map_err(|_| JoinError::Signing)?,
    ));
    drop(assertion);
    let submit = EvaluateParams::builder()
        .expression(script.as_str())
        .context_id(world)
        .return_by_value(true)
        .build()
        .map_err(JoinError::Cdp);
    drop(script);
    let submitted = page.execute(submit?).await.map_err(|e| cdp(&e))?;
    if submitted.result.result.value != Some(serde_json::Value::Bool(true)) {
        return Err(JoinError::TabMoved);
    }
    stages.submit = mark.elapsed();
    mark = std::time::Instant::now();

    let target = return_to.url().clone();
    let endpoint_url = endpoint.url().clone();
    let landing = tokio::time::timeout(deadline, async {
        while let Some(seen) = events.next().await {
            let event = match seen {
                Seen::Response(event) => event,
                // A document that could not load (a certificate error, a refused connection).
                Seen::Failure(failure) if failure.r#type == ResourceType::Document => {
                    return Err(JoinError::LoadFailed(failure.error_text.clone()));
                }
                Seen::Failure(_) => continue,
            };
            if event.r#type != ResourceType::Document {
                continue;
            }
            let url = url::Url::parse(&event.response.url).ok();
            let status = u16::try_from(event.response.status).unwrap_or(0);
            if url.as_ref() == Some(&target) {
                return Ok(status);
            }
            if url.as_ref() == Some(&endpoint_url) && status != 303 {
                return Err(JoinError::Refused(status));
            }
        }
        Err(JoinError::Cdp("the page closed".into()))
    })
    .await
    .map_err(|_| JoinError::Timeout)??;
    stages.landed = mark.elapsed();
    mark = std::time::Instant::now();
    // The landed document's response is in; wait until it has loaded, so the caller can use it.
    tokio::time::timeout(deadline, page.wait_for_navigation())
        .await
        .map_err(|_| JoinError::Timeout)?
        .map_err(|e| cdp(&e))?;
    stages.loaded = mark.elapsed();
    Ok(JoinOutcome {
        endpoint,
        landed: return_to.clone(),
        status: landing,
        expires_at: claims.exp(),
        stages,
    })
}

/// What the join watches while it waits for the landing.
enum Seen {
    Response(std::sync::Arc<EventResponseReceived>),
    Failure(std::sync::Arc<EventLoadingFailed>),
}

fn cdp(error: &chromiumoxide::error::CdpError) -> JoinError {
    JoinError::Cdp(error.to_string())
}

/// Why a join failed. No variant carries the assertion.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// A CDP call failed.
    #[error("the browser failed: {0}")]
    Cdp(String),
    /// The permit is for another domain (`browser:consent_required`).
    #[error("no grant covers {0} for this browser")]
    ConsentRequired(String),
    /// `return_to` is not HTTPS on the company's domain (PAP-5-02): nothing was signed.
    #[error("return_to is not on the company's domain")]
    ForeignReturnTo,
    /// The browser could not load the page (e.g. `net::ERR_CERT_AUTHORITY_INVALID`).
    #[error("the browser could not load the page: {0}")]
    LoadFailed(String),
    /// The company publishes no `web.browser_session_endpoint`.
    #[error("the company offers no browser session")]
    NoEndpoint,
    /// The company refused the join with this status.
    #[error("the company refused the join ({0})")]
    Refused(u16),
    /// The assertion could not be signed.
    #[error("the assertion could not be signed")]
    Signing,
    /// The tab left the blank page the form was to be built in before it was built (another
    /// caller of the tab navigated it): nothing was posted.
    #[error("the tab left its blank page before the form was built; nothing was posted")]
    TabMoved,
    /// The browser did not land on `return_to` in time.
    #[error("the browser did not land on return_to in time")]
    Timeout,
}
