//! The PAP steps as MCP tools (`pap.*`), beside the browser's: what an agent runtime needs to
//! carry a Session from a company's API into its website.
//!
//! | tool                  | does                                                            |
//! |-----------------------|-----------------------------------------------------------------|
//! | `pap.discover`        | reads a company's discovery                                     |
//! | `pap.session.start`   | starts a (signed-out) Session                                   |
//! | `pap.signin.start`    | starts Device Sign-In: answers where *the person* approves      |
//! | `pap.signin.status`   | how that sign-in stands (the host polls in the background)      |
//! | `pap.propose`         | calls the company's API; answers the operation it proposes      |
//! | `pap.operation`       | reads an operation                                              |
//! | `pap.join`            | joins the Session in a new tab of the caller's, on `returnTo`   |
//! | `pap.signout`         | revokes the Account Token: the company signs the Session out    |
//!
//! What is not a tool, on purpose (AIP-7, agents never decide): approving a sign-in, confirming
//! or cancelling an operation, granting session material. A sign-in is approved by the person
//! at the company; an operation is confirmed by the person on its page (`pap.join` lands the
//! agent's browser there so the person sees it in the Session, and the page confirms at most
//! once with its own CSRF-bound form); grants come only from the operator's channel. Nothing a
//! tool answers carries a token or an assertion.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pap_browser::consent::Caller;
use pap_browser::spec::{AgentCaller, ToolError, ToolErrorCode};
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_shared::{CompanyDomain, HttpsUrl, SystemRng};
use rmcp::model::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::client::{ClientError, Company, PapClient, new_pairwise_user};
use crate::wallet::Wallet;

/// How long a join may take to land.
const JOIN_DEADLINE: Duration = Duration::from_secs(20);

/// The PAP tools of one agent.
pub struct PapTools {
    client: PapClient,
    state_dir: PathBuf,
    sealing: SealingKey,
    /// One change of a company record at a time (a sign-in finishing in the background and a
    /// call of a tool may both write one).
    records: tokio::sync::Mutex<()>,
    /// The Device Sign-Ins started here, by company: one entry per company with a record here
    /// (an entry is made only after that company's discovery and `device_begin` succeeded), the
    /// latest replacing the one before.
    signins: Mutex<HashMap<String, SignIn>>,
}

impl std::fmt::Debug for PapTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PapTools")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// How a Device Sign-In started by `pap.signin.start` stands.
#[derive(Clone, Debug)]
enum SignIn {
    Pending {
        user_code: String,
        verification_uri: String,
    },
    SignedIn {
        scope: String,
    },
    Failed {
        why: String,
    },
}

/// The `pap.*` tool names, in the table's order.
pub const NAMES: [&str; 8] = [
    "pap.discover",
    "pap.session.start",
    "pap.signin.start",
    "pap.signin.status",
    "pap.propose",
    "pap.operation",
    "pap.join",
    "pap.signout",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OnCompany {
    domain: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SigninStart {
    domain: String,
    #[serde(default)]
    scope: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Propose {
    domain: String,
    method: String,
    path: String,
    #[serde(default)]
    body: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadOperation {
    domain: String,
    id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Join {
    domain: String,
    return_to: String,
}

impl PapTools {
    /// The PAP tools of the agent whose client is `client` and state is `state_dir`.
    pub fn new(client: PapClient, state_dir: PathBuf, sealing: SealingKey) -> Arc<Self> {
        Arc::new(Self {
            client,
            state_dir,
            sealing,
            records: tokio::sync::Mutex::default(),
            signins: Mutex::default(),
        })
    }

    /// The tools as MCP lists them.
    pub fn listed() -> Vec<Tool> {
        let domain = json!({"type": "string", "description": "The company's domain, e.g. shop.example"});
        let schema = |properties: Value, required: &[&str]| {
            let object = json!({
                "type": "object", "properties": properties, "required": required,
                "additionalProperties": false,
            });
            Arc::new(object.as_object().cloned().unwrap_or_default())
        };
        let on_company = schema(json!({ "domain": domain }), &["domain"]);
        vec![
            Tool::new(
                "pap.discover",
                "Read a company's PAP discovery: its name, what it offers.",
                on_company.clone(),
            ),
            Tool::new(
                "pap.session.start",
                "Start a (signed-out) PAP Session with a company.",
                on_company.clone(),
            ),
            Tool::new(
                "pap.signin.start",
                "Start Device Sign-In for the Session: answers the URL and code the PERSON opens and \
                 approves at the company (the agent cannot approve); then ask pap.signin.status.",
                schema(
                    json!({ "domain": domain, "scope": {"type": "string", "description": "Scopes, space-separated"} }),
                    &["domain"],
                ),
            ),
            Tool::new(
                "pap.signin.status",
                "How the Device Sign-In started with pap.signin.start stands: pending, signed_in or failed.",
                on_company.clone(),
            ),
            Tool::new(
                "pap.propose",
                "Call the company's API in the Session to propose an operation; answers the operation \
                 (the person confirms it on its page, never the agent).",
                schema(
                    json!({
                        "domain": domain, "method": {"type": "string"}, "path": {"type": "string"},
                        "body": {"description": "The JSON body"},
                    }),
                    &["domain", "method", "path"],
                ),
            ),
            Tool::new(
                "pap.operation",
                "Read an operation of the Session.",
                schema(json!({ "domain": domain, "id": {"type": "string"} }), &["domain", "id"]),
            ),
            Tool::new(
                "pap.join",
                "Join the Session in the agent's browser: a new tab lands on returnTo (an https URL on \
                 the company's domain) signed in as the Session; answers the tab's target.",
                schema(
                    json!({ "domain": domain, "returnTo": {"type": "string"} }),
                    &["domain", "returnTo"],
                ),
            ),
            Tool::new(
                "pap.signout",
                "Sign the Session out: the company revokes its Account Token (the website follows).",
                on_company,
            ),
        ]
    }

    /// Calls the PAP tool `name` as `caller`; a join opens its tab in `tools`.
    pub async fn call(
        self: &Arc<Self>,
        tools: &ToolHost,
        caller: &AgentCaller,
        name: &str,
        input: Value,
    ) -> Result<Value, ToolError> {
        match name {
            "pap.discover" => {
                let OnCompany { domain } = parse(input)?;
                let company = self.discover(&domain).await?;
                Ok(json!({
                    "domain": company.domain.as_str(), "name": company.name,
                    "browserSession": company.browser_session_endpoint.is_some(),
                    "deviceSignIn": company.device_authorization_endpoint.is_some(),
                    "operations": company.operations_endpoint.is_some(),
                }))
            }
            "pap.session.start" => {
                let OnCompany { domain } = parse(input)?;
                self.start_session(&domain).await
            }
            "pap.signin.start" => {
                let SigninStart { domain, scope } = parse(input)?;
                self.start_signin(&domain, scope.as_deref().unwrap_or("orders:read orders:write"))
                    .await
            }
            "pap.signin.status" => {
                let OnCompany { domain } = parse(input)?;
                let domain = company_domain(&domain)?;
                let signins = self.signins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok(match signins.get(domain.as_str()) {
                    None => json!({ "state": "none" }),
                    Some(SignIn::Pending {
                        user_code,
                        verification_uri,
                    }) => json!({ "state": "pending", "userCode": user_code, "verificationUri": verification_uri }),
                    Some(SignIn::SignedIn { scope }) => json!({ "state": "signed_in", "scope": scope }),
                    Some(SignIn::Failed { why }) => json!({ "state": "failed", "message": why }),
                })
            }
            "pap.propose" => {
                let Propose {
                    domain,
                    method,
                    path,
                    body,
                } = parse(input)?;
                let (company, wallet) = self.record(&domain).await?;
                let session = wallet.session.as_ref().ok_or_else(no_session)?;
                let body = body.unwrap_or_else(|| json!({}));
                let operation = self
                    .client
                    .propose(&company, session, &method, &path, &body)
                    .await
                    .map_err(|e| pap_error(&e))?;
                serde_json::to_value(operation).map_err(|_| internal("the operation"))
            }
            "pap.operation" => {
                let ReadOperation { domain, id } = parse(input)?;
                let (company, wallet) = self.record(&domain).await?;
                let session = wallet.session.as_ref().ok_or_else(no_session)?;
                let operation = self
                    .client
                    .read_operation(&company, session, &id)
                    .await
                    .map_err(|e| pap_error(&e))?;
                serde_json::to_value(operation).map_err(|_| internal("the operation"))
            }
            "pap.join" => {
                let Join { domain, return_to } = parse(input)?;
                self.join(tools, caller, &domain, &return_to).await
            }
            "pap.signout" => {
                let OnCompany { domain } = parse(input)?;
                self.sign_out(&domain).await
            }
            _ => Err(ToolError::new(ToolErrorCode::NotFound, "no PAP tool by that name")),
        }
    }

    async fn discover(&self, domain: &str) -> Result<Company, ToolError> {
        self.client
            .discover(&company_domain(domain)?)
            .await
            .map_err(|e| pap_error(&e))
    }

    /// The company and its record (with the Session, if one was started).
    async fn record(&self, domain: &str) -> Result<(Company, Wallet), ToolError> {
        let company = self.discover(domain).await?;
        let wallet = Wallet::load(&self.state_dir, &company.domain, &self.sealing)
            .map_err(|e| internal(&e.to_string()))?
            .ok_or_else(no_session)?;
        Ok((company, wallet))
    }

    async fn start_session(&self, domain: &str) -> Result<Value, ToolError> {
        let company = self.discover(domain).await?;
        let _record = self.records.lock().await;
        let mut wallet = match Wallet::load(&self.state_dir, &company.domain, &self.sealing)
            .map_err(|e| internal(&e.to_string()))?
        {
            Some(wallet) => wallet,
            None => Wallet::new(
                &self.state_dir,
                &company.domain,
                new_pairwise_user(&SystemRng),
                self.client.new_dpop_key().map_err(|e| pap_error(&e))?,
            )
            .map_err(|e| internal(&e.to_string()))?,
        };
        let session = self
            .client
            .start_session(&company, &wallet.user, wallet.dpop_key.clone())
            .await
            .map_err(|e| pap_error(&e))?;
        let answer = json!({ "sessionId": session.session_id.as_str(), "signedIn": session.signed_in });
        wallet.session = Some(session);
        wallet
            .save(&self.sealing, &SystemRng)
            .map_err(|e| internal(&e.to_string()))?;
        Ok(answer)
    }

    /// Starts Device Sign-In and polls it in the background (RFC 8628 pacing): the call answers
    /// at once with where the person approves.
    async fn start_signin(self: &Arc<Self>, domain: &str, scope: &str) -> Result<Value, ToolError> {
        let (company, wallet) = self.record(domain).await?;
        if wallet.session.is_none() {
            return Err(no_session());
        }
        let scopes: Vec<&str> = scope.split(' ').filter(|s| !s.is_empty()).collect();
        let device = self
            .client
            .device_begin(&company, &scopes)
            .await
            .map_err(|e| pap_error(&e))?;
        let url = device
            .verification_uri_complete
            .as_ref()
            .unwrap_or(&device.verification_uri)
            .as_str()
            .to_owned();
        let pending = SignIn::Pending {
            user_code: device.user_code.clone(),
            verification_uri: url.clone(),
        };
        let key = company.domain.as_str().to_owned();
        let user_code = device.user_code.clone();
        self.signins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.clone(), pending);
        let tools = self.clone();
        tokio::spawn(async move {
            let outcome = tools.finish_signin(&company, wallet, &device).await;
            let state = match outcome {
                Ok(scope) => SignIn::SignedIn { scope },
                Err(error) => SignIn::Failed { why: error.message },
            };
            tools
                .signins
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key, state);
        });
        Ok(json!({
            "state": "pending", "verificationUri": url, "userCode": user_code,
            "message": "the person opens verificationUri and approves userCode at the company; ask pap.signin.status",
        }))
    }

    async fn finish_signin(
        &self,
        company: &Company,
        mut wallet: Wallet,
        device: &crate::client::DeviceAuthorization,
    ) -> Result<String, ToolError> {
        let session = wallet.session.as_mut().ok_or_else(no_session)?;
        self.client
            .device_wait(company, session, device)
            .await
            .map_err(|e| pap_error(&e))?;
        let scope = session.scope.clone();
        let _record = self.records.lock().await;
        wallet
            .save(&self.sealing, &SystemRng)
            .map_err(|e| internal(&e.to_string()))?;
        Ok(scope)
    }

    /// A join in a new tab of `caller`'s, in its context for the company's grant (C1, C12: a
    /// device that no grant of its covers is refused `browser:consent_required`).
    async fn join(
        &self,
        tools: &ToolHost,
        caller: &AgentCaller,
        domain: &str,
        return_to: &str,
    ) -> Result<Value, ToolError> {
        let (company, wallet) = self.record(domain).await?;
        let session = wallet.session.as_ref().ok_or_else(no_session)?;
        let return_to = HttpsUrl::parse(return_to)
            .map_err(|_| ToolError::new(ToolErrorCode::InputInvalid, "returnTo is not an https URL"))?;
        let permit = tools
            .consent()
            .permit_join(&Caller::Agent(caller.clone()), company.domain.as_str())
            .map_err(|e| e.to_tool_error())?;
        let (target, page) = tools
            .open_tab(caller, &format!("https://{}/", company.domain.as_str()))
            .await?;
        let outcome = crate::join(
            &self.client,
            &company,
            session,
            &return_to,
            &page,
            &permit,
            JOIN_DEADLINE,
        )
        .await
        .map_err(|e| match &e {
            crate::JoinError::Timeout => ToolError::new(ToolErrorCode::Timeout, e.to_string()),
            crate::JoinError::ConsentRequired(domain) => {
                ToolError::new(ToolErrorCode::ConsentRequired, e.to_string()).with_cause(json!({ "domain": domain }))
            }
            crate::JoinError::ForeignReturnTo => ToolError::new(ToolErrorCode::InputInvalid, e.to_string()),
            crate::JoinError::Refused(status) => {
                ToolError::new(ToolErrorCode::PermissionDenied, e.to_string()).with_cause(json!({ "status": status }))
            }
            _ => internal(&e.to_string()),
        })?;
        Ok(json!({ "target": target, "url": outcome.landed.as_str(), "status": outcome.status }))
    }

    async fn sign_out(&self, domain: &str) -> Result<Value, ToolError> {
        let (company, mut wallet) = self.record(domain).await?;
        let _record = self.records.lock().await;
        let session = wallet.session.as_mut().ok_or_else(no_session)?;
        let token = session
            .account_token
            .take()
            .ok_or_else(|| ToolError::new(ToolErrorCode::InputInvalid, "the Session is not signed in"))?;
        self.client.revoke(&company, &token).await.map_err(|e| pap_error(&e))?;
        session.signed_in = false;
        wallet
            .save(&self.sealing, &SystemRng)
            .map_err(|e| internal(&e.to_string()))?;
        Ok(json!({ "signedOut": company.domain.as_str() }))
    }
}

fn parse<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input).map_err(|e| {
        // serde_json's message names the field and the expected type, never the value.
        ToolError::new(ToolErrorCode::InputInvalid, format!("the input: {e}"))
    })
}

fn company_domain(domain: &str) -> Result<CompanyDomain, ToolError> {
    CompanyDomain::try_from(domain)
        .map_err(|_| ToolError::new(ToolErrorCode::InputInvalid, "domain is not a company domain"))
}

fn no_session() -> ToolError {
    ToolError::new(
        ToolErrorCode::NotFound,
        "no Session with this company: call pap.session.start first",
    )
}

fn internal(what: &str) -> ToolError {
    ToolError::new(ToolErrorCode::Internal, what.to_owned())
}

/// A PAP client error as a tool error: the company's refusal is `permission_denied` with its
/// status and OAuth error code; a transport failure is retryable.
fn pap_error(error: &ClientError) -> ToolError {
    match error {
        ClientError::Protocol { status, code } => ToolError::new(ToolErrorCode::PermissionDenied, error.to_string())
            .with_cause(json!({ "status": status, "error": code.to_string() })),
        ClientError::Transport(_) => ToolError::new(ToolErrorCode::Timeout, error.to_string()),
        ClientError::Unsupported(_) => ToolError::new(ToolErrorCode::NotFound, error.to_string()),
        _ => internal(&error.to_string()),
    }
}
