//! The three PAP cases of the browser-session bridge, played by our agent (`pap-agent`'s
//! library, real Chromium) against any company: `lifecycle.browser-joins-session`,
//! `lifecycle.browser-assertion-refused`, `operations.web-confirm-at-most-once`.
//!
//! Each checks at least what the Python reference's runner checks (wire doc §1.2-1.4), plus the
//! cookie's attributes as the browser stored them, that refusals failing before the replay check
//! consume no `jti`, and, when the operator API can say, that the operation ran exactly once.
//! A failure message starts with the requirement it breaks.

mod cases;
mod scenario;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use pap_agent::{Company, PapClient, Session, new_pairwise_user};
use pap_browser::chromium::{BrowserHost, ChromiumConfig};
use pap_shared::Rng;

pub use self::scenario::{Proposal, Scenario};
pub use crate::report::{CaseResult, Outcome, Report};

/// How the user's approval of Device Sign-In is played (`conformance/interop/README.md`).
#[derive(Clone, Debug)]
pub enum Approver {
    /// The user opens `https://DOMAIN/device?user_code=…` in their own HTTP client, and posts
    /// every hidden input back with their user name and password.
    DevicePage {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
    /// `POST {operator}/approve-device {"user_code", "account", "scopes"}`.
    Operator,
}

/// Everything a case needs.
pub struct Context {
    /// The agent's PAP client.
    pub client: PapClient,
    /// The company, discovered once.
    pub company: Company,
    /// What the company offers.
    pub scenario: Scenario,
    /// How the user approves sign-ins.
    pub approver: Approver,
    /// The operator API's base URL, if any (`/approve-device`, `/performed/{id}`).
    pub operator: Option<String>,
    /// An HTTP client for the user, the operator and the raw POSTs of the refusal case: the
    /// agent's trust and routing, no redirects, no cookies.
    pub http: reqwest::Client,
    /// Where the agent's browsers are launched from.
    pub browser: ChromiumConfig,
    /// The agent's browsers.
    pub host: BrowserHost,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("company", &self.company.domain)
            .finish_non_exhaustive()
    }
}

/// Why a case failed: the requirement, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The requirement id the check shows.
    pub requirement: &'static str,
    /// What went wrong.
    pub message: String,
}

impl Failure {
    pub(crate) fn new(requirement: &'static str, message: impl Into<String>) -> Self {
        Self {
            requirement,
            message: message.into(),
        }
    }
}

type CaseFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

/// One case: its id, the requirements it shows, and how it runs.
pub struct Case {
    /// The reference's case id.
    pub id: &'static str,
    /// The requirement ids it shows.
    pub requirements: &'static [&'static str],
    run: for<'a> fn(&'a Context) -> CaseFuture<'a>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("id", &self.id).finish_non_exhaustive()
    }
}

/// The cases, in the order they run: one list, data for the runner, the reports and the ledger.
pub const CASES: &[Case] = &[
    Case {
        id: "lifecycle.browser-joins-session",
        requirements: &["PAP-5-01", "PAP-5-03", "PAP-5-10", "PAP-5-11", "PAP-5-12"],
        run: |ctx| Box::pin(cases::browser_joins_session(ctx)),
    },
    Case {
        id: "lifecycle.browser-assertion-refused",
        requirements: &["PAP-5-05", "PAP-5-06", "PAP-5-07", "PAP-5-08", "PAP-5-09"],
        run: |ctx| Box::pin(cases::browser_assertion_refused(ctx)),
    },
    Case {
        id: "operations.web-confirm-at-most-once",
        requirements: &["OPS-6-02", "OPS-3-02"],
        run: |ctx| Box::pin(cases::web_confirm_at_most_once(ctx)),
    },
];

/// The longest a case may take.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the cases whose ids are in `only` (all when empty), each within [`CASE_TIMEOUT`].
pub async fn run(ctx: &Context, only: &[String]) -> Report {
    let mut report = Report::default();
    for case in CASES
        .iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.id))
    {
        let body = async {
            (case.run)(ctx)
                .await
                .map_err(|f| format!("{}: {}", f.requirement, f.message))
        };
        report
            .results
            .push(CaseResult::timed(case.id, case.requirements, CASE_TIMEOUT, body).await);
    }
    report
}

impl Context {
    /// A new user with a signed-in Session (Device Sign-In, approved by the user).
    pub(crate) async fn signed_in_user(&self, requirement: &'static str) -> Result<Session, Failure> {
        let fail = |what: &str, e: &dyn std::fmt::Display| Failure::new(requirement, format!("{what}: {e}"));
        let user = new_pairwise_user(self.client.rng().as_ref());
        let key = self.client.new_dpop_key().map_err(|e| fail("a DPoP key", &e))?;
        let mut session = self
            .client
            .start_session(&self.company, &user, key)
            .await
            .map_err(|e| fail("starting a Session", &e))?;
        let scopes: Vec<&str> = self.scenario.scopes.iter().map(String::as_str).collect();
        let device = self
            .client
            .device_begin(&self.company, &scopes)
            .await
            .map_err(|e| fail("Device Sign-In", &e))?;
        self.approve(&device.user_code)
            .await
            .map_err(|e| fail("the user's approval", &e))?;
        self.client
            .device_wait(&self.company, &mut session, &device)
            .await
            .map_err(|e| fail("Device Sign-In", &e))?;
        Ok(session)
    }

    async fn approve(&self, user_code: &str) -> Result<(), String> {
        let base = format!("https://{}", self.company.domain);
        match &self.approver {
            Approver::Operator => {
                let operator = self.operator.as_deref().ok_or("no operator URL")?;
                let account = self.scenario.accounts.first().ok_or("no account in the scenario")?;
                let body = serde_json::json!({"user_code": user_code, "account": account, "scopes": null});
                let answer = self
                    .http
                    .post(format!("{operator}/approve-device"))
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !answer.status().is_success() {
                    return Err(format!("the operator answered {}", answer.status()));
                }
                Ok(())
            }
            Approver::DevicePage { username, password } => {
                pap_agent::testkit::approve_on_device_page(&self.http, &base, user_code, username, password)
                    .await
                    .map_err(|e| match std::error::Error::source(&e) {
                        Some(cause) => format!("{e}: {cause}"),
                        None => e.to_string(),
                    })
            }
        }
    }

    /// How many times the operator API says the operation ran, when there is one.
    pub(crate) async fn performed(&self, operation_id: &str) -> Option<Result<u64, String>> {
        let operator = self.operator.as_deref()?;
        let result = async {
            let answer = self
                .http
                .get(format!("{operator}/performed/{operation_id}"))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let body: serde_json::Value =
                serde_json::from_slice(&answer.bytes().await.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            body["count"].as_u64().ok_or_else(|| "no count".to_owned())
        };
        Some(result.await)
    }

    /// A 22-character `jti` (128 bits).
    pub(crate) fn jti(&self) -> String {
        pap_shared::Jti::generate(self.client.rng().as_ref() as &dyn Rng)
            .as_str()
            .to_owned()
    }
}
