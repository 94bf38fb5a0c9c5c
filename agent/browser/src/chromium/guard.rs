//! The navigation rule (security review H3), enforced by the browser itself: CDP `Fetch`
//! interception on the browser target pauses every request any page, frame or worker of the
//! browser sends, at the request stage, and this guard lets it go only where
//! [`NavigationPolicy::request`] allows. A refused request fails as `BlockedByClient`: the page
//! sees a network error, and nothing reaches `file:` or a loopback service.
//!
//! What interception does not see is covered elsewhere: `data:` and `chrome:` documents are not
//! requests. A page cannot open them at the top level itself (Chromium refuses a renderer's
//! top-level navigation to `data:` and any web page's to `chrome:`), `browser.cdp_send` cannot
//! navigate, and the tools check [`NavigationPolicy::navigation`] before they send a tab
//! anywhere. Fail-closed: if the guard stops answering, paused requests wait, never proceed.
//!
//! The same guard keeps the person's decisions the person's (AIP-7, [`crate::persons`]): a
//! request that changes state on a site where the person decides goes only from a tab the
//! person holds, or as the agent's own join. It is judged as it leaves, whatever made it.

use std::sync::Arc;

use chromiumoxide::Browser;
use chromiumoxide::cdp::browser_protocol::fetch::{
    ContinueRequestParams, EnableParams, EventRequestPaused, FailRequestParams, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::ErrorReason;
use futures_util::StreamExt as _;
use tokio::task::JoinHandle;

use super::error::LaunchError;
use crate::persons::{Persons, Verdict};
use crate::spec::NavigationPolicy;

/// The task answering the browser's paused requests; ends with the value.
pub(super) struct RequestGuard(JoinHandle<()>);

impl RequestGuard {
    /// Starts answering, then turns interception on: from its return, every request the browser
    /// sends waits for this guard's decision: the navigation rule, then the person's sites.
    pub(super) async fn install(
        browser: Arc<Browser>,
        policy: NavigationPolicy,
        persons: Persons,
    ) -> Result<Self, LaunchError> {
        let cdp = |e: chromiumoxide::error::CdpError| LaunchError::Cdp(super::scrub(&e.to_string()));
        let mut paused = browser.event_listener::<EventRequestPaused>().await.map_err(cdp)?;
        let every_request = RequestPattern::builder()
            .url_pattern("*")
            .request_stage(RequestStage::Request)
            .build();
        browser
            .execute(EnableParams::builder().pattern(every_request).build())
            .await
            .map_err(cdp)?;
        let task = tokio::spawn(async move {
            while let Some(event) = paused.next().await {
                let browser = browser.clone();
                let decision = policy
                    .request(&event.request.url)
                    .map_err(|r| r.to_string())
                    .and_then(|()| {
                        let origin = header(&event.request.headers, "origin");
                        match persons.judge(
                            &event.request.method,
                            &event.request.url,
                            event.frame_id.inner(),
                            origin.as_deref(),
                        ) {
                            Verdict::Allow => Ok(()),
                            Verdict::Refuse(why) => Err(why),
                        }
                    });
                // One task per request: a slow answer to one never holds up the others.
                tokio::spawn(async move {
                    let id = event.request_id.clone();
                    let answered = match decision {
                        Ok(()) => browser.execute(ContinueRequestParams::new(id)).await.map(|_| ()),
                        Err(refused) => {
                            tracing::info!(%refused, "the agent's browser refused a request");
                            browser
                                .execute(FailRequestParams::new(id, ErrorReason::BlockedByClient))
                                .await
                                .map(|_| ())
                        }
                    };
                    // A request whose page closed meanwhile is gone: nothing to answer.
                    if let Err(error) = answered {
                        tracing::debug!(error = %super::scrub(&error.to_string()), "a paused request was not answered");
                    }
                });
            }
        });
        Ok(Self(task))
    }
}

/// The value of the header `name` (any case) among a paused request's `headers`.
fn header(headers: &chromiumoxide::cdp::browser_protocol::network::Headers, name: &str) -> Option<String> {
    headers
        .inner()
        .as_object()?
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .and_then(|(_, value)| value.as_str().map(str::to_owned))
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
