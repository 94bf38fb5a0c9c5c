//! The cases themselves.

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::network::{
    CookieSameSite, EventRequestWillBeSent, EventResponseReceived, ResourceType,
};
use futures_util::StreamExt as _;
use pap_agent::join;
use pap_browser::chromium::{ControlledBrowser, click_and_land};
use pap_shared::{BROWSER_ASSERTION_TYP, HttpsUrl, Operation, OperationState};
use serde_json::{Value, json};

use super::{Context, Failure};

const COOKIE: &str = "__Host-poppy_session";
const DEADLINE: Duration = Duration::from_secs(20);

async fn propose(
    ctx: &Context,
    session: &pap_agent::Session,
    kind: &str,
    requirement: &'static str,
) -> Result<(Operation, HttpsUrl), Failure> {
    let proposal = ctx
        .scenario
        .proposals
        .get(kind)
        .ok_or_else(|| Failure::new(requirement, format!("the scenario has no '{kind}' proposal")))?;
    let body = proposal.body.clone().unwrap_or_else(|| json!({}));
    let operation = ctx
        .client
        .propose(&ctx.company, session, &proposal.method, &proposal.path, &body)
        .await
        .map_err(|e| Failure::new(requirement, format!("the API answers 202 with an operation: {e}")))?;
    let url = operation
        .url
        .as_deref()
        .and_then(|u| HttpsUrl::parse(u).ok())
        .filter(|u| u.is_on(&ctx.company.domain))
        .ok_or_else(|| Failure::new(requirement, "the operation's page is not HTTPS on the company's domain"))?;
    Ok((operation, url))
}

/// Runs `body` with a fresh browser of the agent, stopping it whatever happens.
async fn with_browser<T>(
    ctx: &Context,
    instance: &str,
    body: impl AsyncFnOnce(&ControlledBrowser) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let browser = ctx
        .host
        .launch(&ctx.browser, instance, &|_| {})
        .await
        .map_err(|e| Failure::new("PAP-5-04", format!("the agent's browser did not start: {e}")))?
        .browser;
    let result = body(&browser).await;
    drop(browser);
    let _ = ctx.host.stop(instance, Duration::from_secs(2)).await;
    result
}

/// The join needs a grant (AIP-63 C1): the runner, as the operator, grants the agent's browsers
/// the company's domain once, and the agent takes its permit.
fn permit(ctx: &Context, rule: &'static str) -> Result<pap_browser::consent::JoinPermit, Failure> {
    use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator};
    let fail = |e: pap_browser::consent::ConsentError| Failure::new(rule, format!("the consent host: {e}"));
    let consent = ConsentHost::open(
        &ctx.browser.state_dir,
        std::sync::Arc::new(pap_shared::SystemClock),
        std::sync::Arc::new(pap_shared::SystemRng),
    )
    .map_err(fail)?;
    let domain = ctx.company.domain.as_str();
    if consent.permit_join(&Caller::local_agent(), domain).is_err() {
        consent
            .grant(
                &Operator::from_operator_channel("conformance"),
                GrantRequest::native_login("conformance", &[domain]),
            )
            .map_err(fail)?;
    }
    consent.permit_join(&Caller::local_agent(), domain).map_err(fail)
}

/// `lifecycle.browser-joins-session`.
pub(super) async fn browser_joins_session(ctx: &Context) -> Result<(), Failure> {
    let session = ctx.signed_in_user("PAP-5-01").await?;
    let (_, page_url) = propose(ctx, &session, "standing", "PAP-5-01").await?;
    with_browser(ctx, "conformance-joins", async |browser| {
        let page = browser
            .new_page()
            .await
            .map_err(|e| Failure::new("PAP-5-01", e.to_string()))?;
        let mut requests = page
            .event_listener::<EventRequestWillBeSent>()
            .await
            .map_err(|e| Failure::new("PAP-5-01", e.to_string()))?;
        let permit = permit(ctx, "PAP-5-01")?;
        let outcome = join(
            &ctx.client,
            &ctx.company,
            &session,
            &page_url,
            pap_agent::JoinTab::New(&page),
            &permit,
            &ctx.browser.persons,
            DEADLINE,
        )
        .await
        .map_err(|e| Failure::new("PAP-5-01", format!("the browser did not join: {e}")))?;
        if outcome.status != 200 {
            return Err(Failure::new(
                "PAP-5-10",
                format!("the joined page answered {}, not 200", outcome.status),
            ));
        }
        // The endpoint's first answer, as the browser saw it: exactly 303.
        let endpoint = ctx
            .company
            .browser_session_endpoint
            .as_ref()
            .map(|e| e.as_str().to_owned())
            .unwrap_or_default();
        let mut redirect = None;
        while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(1), requests.next()).await {
            if event.request.url.contains("eyJ")
                || serde_json::to_string(&event.request.headers)
                    .unwrap_or_default()
                    .contains("eyJ")
            {
                return Err(Failure::new(
                    "PAP-5-03",
                    "the assertion appeared in a URL or a request header",
                ));
            }
            if let Some(response) = event.redirect_response.as_ref().filter(|r| r.url == endpoint) {
                redirect = Some(response.status);
            }
        }
        if redirect != Some(303) {
            return Err(Failure::new(
                "PAP-5-01",
                format!("the join was not answered with 303 See Other (saw {redirect:?})"),
            ));
        }
        // The cookie as the browser stored it.
        let cookies = page
            .get_cookies()
            .await
            .map_err(|e| Failure::new("PAP-5-12", e.to_string()))?;
        let session_cookies: Vec<_> = cookies
            .iter()
            .filter(|c| c.name.starts_with("__Host-") || c.name == COOKIE)
            .collect();
        let cookie = session_cookies
            .first()
            .ok_or_else(|| Failure::new("PAP-5-12", "the join set no __Host- cookie"))?;
        if !(cookie.secure && cookie.http_only) {
            return Err(Failure::new("PAP-5-12", "the cookie is not Secure and HttpOnly"));
        }
        if !matches!(cookie.same_site, Some(CookieSameSite::Lax | CookieSameSite::None)) {
            return Err(Failure::new("PAP-5-12", "the cookie is not SameSite=Lax or None"));
        }
        if !cookie.session || cookie.expires > 0.0 {
            return Err(Failure::new(
                "PAP-5-11",
                "the cookie has a lifetime of its own (Max-Age or Expires)",
            ));
        }
        if cookie.path != "/" || cookie.domain.starts_with('.') {
            return Err(Failure::new("PAP-5-12", "the cookie is not Path=/ and host-only"));
        }
        // Sign-out shows on the website's next request.
        let token = session
            .account_token
            .as_ref()
            .ok_or_else(|| Failure::new("PAP-5-10", "the sign-in gave no Account Token"))?;
        ctx.client
            .revoke(&ctx.company, token)
            .await
            .map_err(|e| Failure::new("PAP-5-10", format!("revocation failed: {e}")))?;
        let mut responses = page
            .event_listener::<EventResponseReceived>()
            .await
            .map_err(|e| Failure::new("PAP-5-10", e.to_string()))?;
        page.reload()
            .await
            .map_err(|e| Failure::new("PAP-5-10", e.to_string()))?;
        let status = tokio::time::timeout(DEADLINE, async {
            while let Some(event) = responses.next().await {
                if event.r#type == ResourceType::Document {
                    return Some(event.response.status);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        match status {
            Some(401 | 403 | 404) => Ok(()),
            other => Err(Failure::new(
                "PAP-5-10",
                format!("signed out, the page still answered {other:?}"),
            )),
        }
    })
    .await
}

/// `lifecycle.browser-assertion-refused`: raw POSTs (no browser), as the reference runner sends
/// them, after one valid assertion got 303.
pub(super) async fn browser_assertion_refused(ctx: &Context) -> Result<(), Failure> {
    let endpoint = ctx
        .company
        .browser_session_endpoint
        .clone()
        .ok_or_else(|| Failure::new("PAP-5-05", "the company publishes no browser-session endpoint"))?;
    let user = pap_agent::new_pairwise_user(ctx.client.rng().as_ref());
    let key = ctx
        .client
        .new_dpop_key()
        .map_err(|e| Failure::new("PAP-5-08", e.to_string()))?;
    let session = ctx
        .client
        .start_session(&ctx.company, &user, key)
        .await
        .map_err(|e| Failure::new("PAP-5-08", format!("starting a Session: {e}")))?;
    let now = ctx.client.clock().now().as_secs() - 5;
    let claims = |jti: String| {
        json!({
            "iss": ctx.client.identity().client_id().as_str(), "sub": session.user.as_str(), "aud": endpoint.as_str(),
            "session_id": session.session_id.as_str(), "return_to": format!("https://{}/", ctx.company.domain),
            "iat": now, "exp": now + 60, "jti": jti,
        })
    };
    let sign = |typ: &str, claims: &Value| -> Result<String, Failure> {
        Ok(ctx
            .client
            .identity()
            .key()
            .sign(typ, claims)
            .map_err(|_| Failure::new("PAP-5-05", "signing failed"))?
            .secret()
            .to_owned())
    };
    let post = async |assertion: &str| -> Result<(u16, bool), Failure> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("assertion", assertion)
            .finish();
        let answer = ctx
            .http
            .post(endpoint.url().clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| Failure::new("PAP-5-05", format!("the POST failed: {e}")))?;
        Ok((answer.status().as_u16(), answer.headers().contains_key("set-cookie")))
    };

    let valid = sign(BROWSER_ASSERTION_TYP, &claims(ctx.jti()))?;
    let (status, _) = post(&valid).await?;
    if status != 303 {
        return Err(Failure::new(
            "PAP-5-05",
            format!("a valid assertion got {status}, not 303"),
        ));
    }
    let mutate = |change: &dyn Fn(&mut Value)| {
        let mut c = claims(ctx.jti());
        change(&mut c);
        c
    };
    let foreign = mutate(&|c| c["return_to"] = json!("https://evil.example/"));
    let other_user = mutate(&|c| c["sub"] = json!(pap_agent::new_pairwise_user(ctx.client.rng().as_ref()).as_str()));
    let long_lived = mutate(&|c| c["exp"] = json!(now + 600));
    let other_audience = mutate(&|c| c["aud"] = json!(format!("{}/elsewhere", endpoint.origin())));
    let session_assertion = claims(ctx.jti());
    // (what, requirement, the signed assertion, whether the refusal precedes the replay check
    // in every implementation, so its jti must stay unused)
    let refusals: [(&str, &'static str, String, Option<&Value>); 6] = [
        (
            "a foreign return_to",
            "PAP-5-09",
            sign(BROWSER_ASSERTION_TYP, &foreign)?,
            Some(&foreign),
        ),
        (
            "a Session assertion (typ JWT)",
            "PAP-5-05",
            sign("JWT", &session_assertion)?,
            Some(&session_assertion),
        ),
        (
            "another user's Session",
            "PAP-5-08",
            sign(BROWSER_ASSERTION_TYP, &other_user)?,
            None,
        ),
        (
            "a long-lived assertion",
            "PAP-5-06",
            sign(BROWSER_ASSERTION_TYP, &long_lived)?,
            Some(&long_lived),
        ),
        (
            "another audience",
            "PAP-5-06",
            sign(BROWSER_ASSERTION_TYP, &other_audience)?,
            Some(&other_audience),
        ),
        ("a replayed assertion", "PAP-5-07", valid.clone(), None),
    ];
    for (what, requirement, assertion, _) in &refusals {
        let (status, cookie) = post(assertion).await?;
        if status != 400 {
            return Err(Failure::new(requirement, format!("{what} got {status}, not 400")));
        }
        if cookie {
            return Err(Failure::new(
                requirement,
                format!("{what} was refused with a Set-Cookie"),
            ));
        }
    }
    // A refusal before the replay check uses nothing up: the same jti, now in a valid
    // assertion, still joins.
    for (what, _, _, refused) in &refusals {
        let Some(refused) = refused else { continue };
        let jti = refused["jti"].as_str().unwrap_or_default().to_owned();
        let (status, _) = post(&sign(BROWSER_ASSERTION_TYP, &claims(jti))?).await?;
        if status != 303 {
            return Err(Failure::new(
                "PAP-5-07",
                format!("after refusing {what}, its jti could not be used ({status})"),
            ));
        }
    }
    Ok(())
}

/// `operations.web-confirm-at-most-once`.
pub(super) async fn web_confirm_at_most_once(ctx: &Context) -> Result<(), Failure> {
    if ctx.company.operations_endpoint.is_none() {
        return Err(Failure::new(
            "OPS-6-02",
            "operations v1 is not negotiated with this company",
        ));
    }
    let session = ctx.signed_in_user("OPS-6-02").await?;
    let (operation, page_url) = propose(ctx, &session, "user", "OPS-6-02").await?;
    with_browser(ctx, "conformance-confirm", async |browser| {
        let page = browser
            .new_page()
            .await
            .map_err(|e| Failure::new("OPS-6-02", e.to_string()))?;
        let permit = permit(ctx, "OPS-6-02")?;
        join(
            &ctx.client,
            &ctx.company,
            &session,
            &page_url,
            pap_agent::JoinTab::New(&page),
            &permit,
            &ctx.browser.persons,
            DEADLINE,
        )
        .await
        .map_err(|e| Failure::new("OPS-6-02", format!("the browser did not join: {e}")))?;
        click_and_land(&page, "button[value=confirm]", DEADLINE)
            .await
            .map_err(|e| Failure::new("OPS-6-02", format!("confirming on the page: {e}")))?;
        Ok(())
    })
    .await?;
    let read = ctx
        .client
        .read_operation(&ctx.company, &session, &operation.operation_id)
        .await
        .map_err(|e| Failure::new("OPS-6-02", format!("reading the operation: {e}")))?;
    if read.state == OperationState::Proposed || read.confirmation.is_none() {
        return Err(Failure::new(
            "OPS-6-02",
            "the page's confirm did not confirm the operation",
        ));
    }
    if read
        .confirmation
        .as_ref()
        .is_some_and(|c| c.revision != operation.revision)
    {
        return Err(Failure::new(
            "OPS-3-02",
            "the confirmation is for another revision than the page showed",
        ));
    }
    let again = ctx
        .client
        .confirm_operation(&ctx.company, &session, &operation)
        .await
        .map_err(|e| Failure::new("OPS-6-02", format!("a second confirm was not answered 200: {e}")))?;
    if again != read {
        return Err(Failure::new("OPS-6-02", "a second confirm changed the operation"));
    }
    match ctx.performed(&operation.operation_id).await {
        None | Some(Ok(1)) => Ok(()),
        Some(Ok(n)) => Err(Failure::new(
            "OPS-6-02",
            format!("the operation was performed {n} times"),
        )),
        Some(Err(e)) => Err(Failure::new("OPS-6-02", format!("the operator API could not say: {e}"))),
    }
}
