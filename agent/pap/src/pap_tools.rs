//! The PAP steps as MCP tools, beside the browser's: what an agent runtime needs to carry a
//! Session from a company's API into its website. Each tool is a [`PapTool`] with its input
//! type; MCP lists it by the kit's one name mapping ([`pap_browser::spec::mcp_name`]).
//!
//! | tool (MCP name)       | does                                                                  |
//! |-----------------------|-----------------------------------------------------------------------|
//! | `pap_discover`        | reads a company's discovery                                           |
//! | `pap_session_start`   | starts a (signed-out) Session of the calling device's                 |
//! | `pap_signin_start`    | starts Device Sign-In: answers where *the person* approves            |
//! | `pap_signin_status`   | how that sign-in stands (the host polls in the background)            |
//! | `pap_propose`         | sends a proposal the company's OpenAPI declares; answers the operation |
//! | `pap_operation`       | reads an operation                                                    |
//! | `pap_join`            | joins the device's Session in a new tab of the device's, on `returnTo` |
//! | `pap_signout`         | revokes the device's Account Token: the company signs it out          |
//!
//! **A Session per device** (review N5): every paired device holds its own Sessions
//! ([`Holder::Device`]); no device reads, replaces, signs out or ends another's. Starting a
//! Session over one signed in revokes the old Account Token first; unpairing a device signs its
//! Sessions out at each company ([`sign_out_device`]).
//!
//! What is not a tool, on purpose (AIP-7, agents never decide): approving a sign-in, confirming
//! or cancelling an operation, granting session material. A sign-in is approved by the person
//! at the company; an operation is confirmed by the person on its page. No sequence of these
//! tools does either (review N2): `pap_propose` sends only what the company's OpenAPI declares
//! as a proposal (a `202` operation), never anything under the operations endpoint; and the
//! website of every company the wallet holds a record of is the person's where it changes
//! state: the agent's browser sends no state-changing request there but the join's own, except
//! from a tab the person holds (`pap_browser::persons`, fed by [`crate::wallet::WalletSites`] from the
//! wallet on disk: whatever process proposed the operation, across restarts). Tools read those
//! pages, and never click, fill or script their forms. Grants come only from the operator's
//! channel. Nothing a tool answers carries a token or an assertion.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pap_browser::consent::Caller;
use pap_browser::spec::mcp_name;
use pap_browser::spec::{AgentCaller, ToolError, ToolErrorCode};
use pap_browser::store::SealingKey;
use pap_browser::tools::ToolHost;
use pap_host::{ExtraTools, NeedsBrowser};
use pap_shared::{CompanyDomain, HttpsUrl, SystemRng};
use rmcp::model::{Tool, ToolAnnotations};
use schemars::{JsonSchema, schema_for};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::client::{ClientError, Company, PapClient, new_pairwise_user};
use crate::join::{JoinError, JoinTab, join};
use crate::wallet::{Holder, Wallet, WalletError};

/// How long a join may take to land.
const JOIN_DEADLINE: Duration = Duration::from_secs(20);

/// The PAP tools of one agent.
pub struct PapTools {
    pub(crate) client: PapClient,
    pub(crate) state_dir: PathBuf,
    sealing: SealingKey,
    /// One change of a company record at a time (a sign-in finishing in the background and a
    /// call of a tool may both write one).
    records: tokio::sync::Mutex<()>,
    /// The Device Sign-Ins started here, by holder and company: one entry per Session record
    /// here (an entry is made only after that company's discovery and `device_begin` succeeded),
    /// the latest replacing (and ending the poll of) the one before.
    signins: Mutex<HashMap<(Holder, String), SignIn>>,
    /// Itself, for the background poll of a sign-in (which outlives the call that started it).
    me: Weak<PapTools>,
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
        /// The background poll, ended when the sign-in is replaced.
        poller: tokio::task::AbortHandle,
    },
    SignedIn {
        scope: String,
    },
    Failed {
        why: String,
    },
}

/// The PAP tools, a closed set (the shape of [`pap_browser::spec::ToolId`]): each names its
/// input type, and its MCP name comes from the kit's one mapping ([`mcp_name`]), so no tool
/// name is spelled anywhere else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PapTool {
    /// `pap.discover` (`OnCompany`).
    Discover,
    /// `pap.session.start` (`OnCompany`).
    SessionStart,
    /// `pap.signin.start` (`SigninStart`).
    SigninStart,
    /// `pap.signin.status` (`OnCompany`).
    SigninStatus,
    /// `pap.propose` (`Propose`).
    Propose,
    /// `pap.operation` (`ReadOperation`).
    Operation,
    /// `pap.join` (`Join`).
    Join,
    /// `pap.signout` (`OnCompany`).
    Signout,
}

impl PapTool {
    /// Every PAP tool, in the table's order.
    pub const ALL: [PapTool; 8] = [
        Self::Discover,
        Self::SessionStart,
        Self::SigninStart,
        Self::SigninStatus,
        Self::Propose,
        Self::Operation,
        Self::Join,
        Self::Signout,
    ];

    /// Its id in the kit's vocabulary (`pap.session.start`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Discover => "pap.discover",
            Self::SessionStart => "pap.session.start",
            Self::SigninStart => "pap.signin.start",
            Self::SigninStatus => "pap.signin.status",
            Self::Propose => "pap.propose",
            Self::Operation => "pap.operation",
            Self::Join => "pap.join",
            Self::Signout => "pap.signout",
        }
    }

    /// Its name on an MCP surface (`pap_session_start`).
    pub fn mcp_name(self) -> String {
        mcp_name(self.as_str())
    }

    /// The PAP tool an MCP surface names `name`, if it is one.
    pub fn from_mcp_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.mcp_name() == name)
    }

    /// One line on what it does, as MCP lists it.
    fn description(self) -> &'static str {
        match self {
            Self::Discover => "Read a company's PAP discovery: its name, what it offers.",
            Self::SessionStart => "Start a (signed-out) PAP Session with a company, for this device.",
            Self::SigninStart => {
                "Start Device Sign-In for this device's Session: answers the URL and code the PERSON \
                 opens and approves at the company (the agent cannot approve); then ask pap_signin_status."
            }
            Self::SigninStatus => {
                "How the Device Sign-In started with pap_signin_start stands: pending, signed_in or failed."
            }
            Self::Propose => {
                "Propose an operation through one of the proposals the company's OpenAPI declares; answers \
                 the proposed operation (the person confirms it on its page, never the agent). Subscribe to \
                 the resource pap://DOMAIN/operations/OPERATION_ID to hear when the person decides."
            }
            Self::Operation => "Read an operation of this device's Session.",
            Self::Join => {
                "Join this device's Session in the agent's browser: a new tab lands on returnTo (an https \
                 URL on the company's domain) signed in as the Session; answers the tab's target. The \
                 company's forms that change state (an operation's confirm) are the person's: tools read them, \
                 never submit them, and scripts do not run in the tab; ask the person to confirm on the page. \
                 Without the person's grant for the site it fails with consent_required and asks the person \
                 in their console (say why in reason); call again once they answer."
            }
            Self::Signout => {
                "Sign this device's Session out: the company revokes its Account Token (the website follows)."
            }
        }
    }

    /// What a client may assume of it (MCP's tool annotations): (title, read only, destructive,
    /// idempotent, open world). Proposing changes nothing until the person confirms.
    fn annotations(self) -> ToolAnnotations {
        let (title, read_only, destructive, idempotent, open_world) = match self {
            Self::Discover => ("Read a company's discovery", true, false, true, true),
            Self::SessionStart => ("Start a PAP Session", false, true, false, true),
            Self::SigninStart => ("Start Device Sign-In", false, false, false, true),
            Self::SigninStatus => ("Check a sign-in", true, false, true, false),
            Self::Propose => ("Propose an operation", false, false, false, true),
            Self::Operation => ("Read an operation", true, false, true, true),
            Self::Join => ("Join the Session in the browser", false, false, false, true),
            Self::Signout => ("Sign the Session out", false, true, true, true),
        };
        ToolAnnotations::with_title(title)
            .read_only(read_only)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(open_world)
    }

    /// The JSON Schema of its input, made from the closed type it parses into.
    fn input_schema(self) -> serde_json::Map<String, Value> {
        let schema = match self {
            Self::Discover | Self::SessionStart | Self::SigninStatus | Self::Signout => schema_for!(OnCompany),
            Self::SigninStart => schema_for!(SigninStart),
            Self::Propose => schema_for!(Propose),
            Self::Operation => schema_for!(ReadOperation),
            Self::Join => schema_for!(Join),
        };
        match schema.to_value() {
            Value::Object(object) => object,
            _ => serde_json::Map::new(),
        }
    }
}

/// The input of a tool that names only the company.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnCompany {
    /// The company's domain, e.g. shop.example.
    domain: String,
}

/// `pap.signin.start`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SigninStart {
    /// The company's domain, e.g. shop.example.
    domain: String,
    /// Scopes, space-separated (default: orders:read orders:write).
    #[serde(default)]
    scope: Option<String>,
}

/// `pap.propose`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Propose {
    /// The company's domain, e.g. shop.example.
    domain: String,
    /// The HTTP method of a proposal the company's OpenAPI declares (POST).
    method: String,
    /// Its path, a path the OpenAPI declares with its parameters filled in (/api/orders/ord_1/exchanges).
    path: String,
    /// The JSON body.
    #[serde(default)]
    body: Option<Value>,
}

/// `pap.operation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadOperation {
    /// The company's domain, e.g. shop.example.
    domain: String,
    /// The operation's id.
    id: String,
}

/// `pap.join`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Join {
    /// The company's domain, e.g. shop.example.
    domain: String,
    /// Where the tab lands: an https URL on the company's domain.
    return_to: String,
    /// Why you need the person's browser on this site, in a sentence: without a grant the call
    /// files a request for access, and the person reads this in their console before answering.
    #[serde(default)]
    #[allow(dead_code, reason = "read by the MCP host when it files a request for access")]
    reason: Option<String>,
}

impl PapTools {
    /// The PAP tools of the agent whose client is `client` and state is `state_dir`.
    pub fn new(client: PapClient, state_dir: PathBuf, sealing: SealingKey) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            client,
            state_dir,
            sealing,
            records: tokio::sync::Mutex::default(),
            signins: Mutex::default(),
            me: me.clone(),
        })
    }

    /// The tools as MCP lists them.
    pub fn listed() -> Vec<Tool> {
        PapTool::ALL
            .into_iter()
            .map(|tool| {
                Tool::new(tool.mcp_name(), tool.description(), Arc::new(tool.input_schema()))
                    .with_annotations(tool.annotations())
            })
            .collect()
    }

    /// Calls the PAP tool `tool` as `caller`, on the Sessions `caller` holds (review N5); a join
    /// opens its tab in `tools`.
    pub async fn call_tool(
        &self,
        tools: &ToolHost,
        caller: &AgentCaller,
        tool: PapTool,
        input: Value,
    ) -> Result<Value, ToolError> {
        let holder = Holder::of(caller.device_id());
        match tool {
            PapTool::Discover => {
                let OnCompany { domain } = parse(input)?;
                let company = self.discover(&domain).await?;
                serde_json::to_value(company.report())
                    .map_err(|e| ToolError::new(ToolErrorCode::Internal, e.to_string()))
            }
            PapTool::SessionStart => {
                let OnCompany { domain } = parse(input)?;
                self.start_session(&holder, &domain).await
            }
            PapTool::SigninStart => {
                let SigninStart { domain, scope } = parse(input)?;
                self.start_signin(&holder, &domain, scope.as_deref().unwrap_or("orders:read orders:write"))
                    .await
            }
            PapTool::SigninStatus => {
                let OnCompany { domain } = parse(input)?;
                let domain = company_domain(&domain)?;
                let signins = self.signins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok(match signins.get(&(holder, domain.as_str().to_owned())) {
                    None => json!({ "state": "none" }),
                    Some(SignIn::Pending {
                        user_code,
                        verification_uri,
                        ..
                    }) => json!({ "state": "pending", "userCode": user_code, "verificationUri": verification_uri }),
                    Some(SignIn::SignedIn { scope }) => json!({ "state": "signed_in", "scope": scope }),
                    Some(SignIn::Failed { why }) => json!({ "state": "failed", "message": why }),
                })
            }
            PapTool::Propose => {
                let Propose {
                    domain,
                    method,
                    path,
                    body,
                } = parse(input)?;
                let (company, wallet) = self.record(&holder, &domain).await?;
                let session = wallet.session.as_ref().ok_or_else(no_session)?;
                let body = body.unwrap_or_else(|| json!({}));
                let operation = self
                    .client
                    .propose_declared(&company, session, &method, &path, &body)
                    .await
                    .map_err(|e| pap_error(&e))?;
                // The person's console lists it until the company says it no longer waits.
                if let Some(url) = &operation.url {
                    let recorded =
                        crate::decisions::Proposals::at(&self.state_dir).record(crate::decisions::Proposal {
                            device_id: caller.device_id().map(str::to_owned),
                            domain: company.domain.as_str().to_owned(),
                            operation_id: operation.operation_id.clone(),
                            url: url.clone(),
                            proposed_at: self.client.clock().now(),
                        });
                    if let Err(error) = recorded {
                        tracing::warn!(%error, "recording a proposal for the person's console");
                    }
                }
                serde_json::to_value(operation).map_err(|_| internal("the operation"))
            }
            PapTool::Operation => {
                let ReadOperation { domain, id } = parse(input)?;
                let operation = self.read_operation_as(caller, &domain, &id).await?;
                serde_json::to_value(operation).map_err(|_| internal("the operation"))
            }
            PapTool::Join => {
                let Join { domain, return_to, .. } = parse(input)?;
                self.join(tools, caller, &holder, &domain, &return_to).await
            }
            PapTool::Signout => {
                let OnCompany { domain } = parse(input)?;
                self.sign_out(&holder, &domain).await
            }
        }
    }

    /// Reads operation `id` at `domain` with `caller`'s own Session (`pap_operation`, and the
    /// operation's resource). A company that did not answer, or answered 5xx, may answer a
    /// retry (the error says so); anything else will not.
    pub(crate) async fn read_operation_as(
        &self,
        caller: &AgentCaller,
        domain: &str,
        id: &str,
    ) -> Result<pap_shared::Operation, ToolError> {
        let holder = Holder::of(caller.device_id());
        // No Session of this holder's with this company: nothing is fetched (naming a host
        // makes the agent fetch none of its documents).
        let named = company_domain(domain)?;
        let held =
            Wallet::load_held(&self.state_dir, &named, &holder, &self.sealing).map_err(|e| internal(&e.to_string()))?;
        if held.is_none_or(|wallet| wallet.session.is_none()) {
            return Err(no_session());
        }
        let (company, wallet) = self.record(&holder, domain).await?;
        let session = wallet.session.as_ref().ok_or_else(no_session)?;
        self.client
            .read_operation(&company, session, id)
            .await
            .map_err(|e| match &e {
                ClientError::Protocol { status, .. } if *status >= 500 => pap_error(&e).retryable(),
                _ => pap_error(&e),
            })
    }

    async fn discover(&self, domain: &str) -> Result<Company, ToolError> {
        self.client
            .discover(&company_domain(domain)?)
            .await
            .map_err(|e| pap_error(&e))
    }

    /// The company and `holder`'s record of it (with the Session, if one was started).
    pub(crate) async fn record(&self, holder: &Holder, domain: &str) -> Result<(Company, Wallet), ToolError> {
        let company = self.discover(domain).await?;
        let wallet = self.load(holder, &company)?.ok_or_else(no_session)?;
        Ok((company, wallet))
    }

    fn load(&self, holder: &Holder, company: &Company) -> Result<Option<Wallet>, ToolError> {
        Wallet::load_held(&self.state_dir, &company.domain, holder, &self.sealing).map_err(|e| internal(&e.to_string()))
    }

    /// Starts a Session for `holder` (a device's own, review N5). One it replaces is signed
    /// out first: its Account Token is revoked at the company, or nothing is replaced. Every
    /// holder presents the agent's one pairwise User ID; a device's Session gets its own DPoP
    /// key.
    async fn start_session(&self, holder: &Holder, domain: &str) -> Result<Value, ToolError> {
        let company = self.discover(domain).await?;
        let _record = self.records.lock().await;
        let mut wallet = match self.load(holder, &company)? {
            Some(wallet) => wallet,
            None => {
                let user = self.pairwise_user(&company)?;
                let dpop = self.client.new_dpop_key().map_err(|e| pap_error(&e))?;
                Wallet::new_held(&self.state_dir, &company.domain, holder.clone(), user, dpop)
                    .map_err(|e| internal(&e.to_string()))?
            }
        };
        if let Some(token) = wallet.session.as_ref().and_then(|s| s.account_token.as_ref()) {
            self.client.revoke(&company, token).await.map_err(|e| pap_error(&e))?;
        }
        // A sign-in still waiting on the Session being replaced ends with it.
        self.forget_signin(holder, &company);
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

    /// The agent's pairwise User ID for `company`: its own record's, made (and kept, with no
    /// Session) when there is none yet, so every holder presents the same one.
    fn pairwise_user(&self, company: &Company) -> Result<pap_shared::PairwiseUserId, ToolError> {
        if let Some(agent) = self.load(&Holder::Agent, company)? {
            return Ok(agent.user);
        }
        let user = new_pairwise_user(&SystemRng);
        let dpop = self.client.new_dpop_key().map_err(|e| pap_error(&e))?;
        Wallet::new(&self.state_dir, &company.domain, user.clone(), dpop)
            .and_then(|w| w.save(&self.sealing, &SystemRng))
            .map_err(|e| internal(&e.to_string()))?;
        Ok(user)
    }

    /// Ends the background poll of `holder`'s sign-in with `company`, if one runs.
    fn forget_signin(&self, holder: &Holder, company: &Company) {
        let key = (holder.clone(), company.domain.as_str().to_owned());
        let mut signins = self.signins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(SignIn::Pending { poller, .. }) = signins.remove(&key) {
            poller.abort();
        }
    }

    /// Starts Device Sign-In for `holder`'s Session and polls it in the background (RFC 8628
    /// pacing): the call answers at once with where the person approves. One poll per holder
    /// and company: a new start ends the one before (review N10).
    async fn start_signin(&self, holder: &Holder, domain: &str, scope: &str) -> Result<Value, ToolError> {
        let tools = self.me.upgrade().ok_or_else(|| internal("the PAP tools are ending"))?;
        let (company, mut wallet) = self.record(holder, domain).await?;
        let session = wallet.session.take().ok_or_else(no_session)?;
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
        let key = (holder.clone(), company.domain.as_str().to_owned());
        let user_code = device.user_code.clone();
        let mut signins = self.signins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let poll_key = key.clone();
        let holder = holder.clone();
        let poller = tokio::spawn(async move {
            let outcome = tools.finish_signin(&holder, &company, session, &device).await;
            let state = match outcome {
                Ok(scope) => SignIn::SignedIn { scope },
                Err(error) => SignIn::Failed { why: error.message },
            };
            tools
                .signins
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(poll_key, state);
        })
        .abort_handle();
        let pending = SignIn::Pending {
            user_code: user_code.clone(),
            verification_uri: url.clone(),
            poller,
        };
        if let Some(SignIn::Pending { poller, .. }) = signins.insert(key, pending) {
            poller.abort();
        }
        Ok(json!({
            "state": "pending", "verificationUri": url, "userCode": user_code,
            "message": "the person opens verificationUri and approves userCode at the company; ask pap_signin_status",
        }))
    }

    /// Waits for the person's approval, then writes the signed-in Session into `holder`'s
    /// record as it is *now* (read under the lock): if the Session was replaced meanwhile, the
    /// new Account Token is revoked instead of overwriting the newer Session (review N5).
    async fn finish_signin(
        &self,
        holder: &Holder,
        company: &Company,
        mut session: crate::client::Session,
        device: &crate::client::DeviceAuthorization,
    ) -> Result<String, ToolError> {
        self.client
            .device_wait(company, &mut session, device)
            .await
            .map_err(|e| pap_error(&e))?;
        let scope = session.scope.clone();
        let _record = self.records.lock().await;
        let current = self.load(holder, company)?;
        let still_this = current
            .as_ref()
            .and_then(|w| w.session.as_ref())
            .is_some_and(|s| s.session_id == session.session_id);
        let Some(mut wallet) = current.filter(|_| still_this) else {
            if let Some(token) = &session.account_token {
                self.client.revoke(company, token).await.map_err(|e| pap_error(&e))?;
            }
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                "the Session was replaced while the person signed in; its sign-in was revoked",
            ));
        };
        wallet.session = Some(session);
        wallet
            .save(&self.sealing, &SystemRng)
            .map_err(|e| internal(&e.to_string()))?;
        Ok(scope)
    }

    /// A join in a new tab of `caller`'s, in its context for the company's grant (C1, C12: a
    /// device that no grant of its covers is refused `browser:consent_required`), on `holder`'s
    /// Session. The company is the person's site from its record on (AIP-7): the join's POST
    /// goes on its own pass, and nothing else of the tab's changes state there.
    async fn join(
        &self,
        tools: &ToolHost,
        caller: &AgentCaller,
        holder: &Holder,
        domain: &str,
        return_to: &str,
    ) -> Result<Value, ToolError> {
        let (company, wallet) = self.record(holder, domain).await?;
        let session = wallet.session.as_ref().ok_or_else(no_session)?;
        let return_to = HttpsUrl::parse(return_to)
            .ok()
            .filter(|u| u.is_on(&company.domain))
            .ok_or_else(|| {
                ToolError::new(
                    ToolErrorCode::InputInvalid,
                    "returnTo is not an https URL on the company's domain",
                )
            })?;
        let permit = tools
            .consent()
            .permit_join(&Caller::Agent(caller.clone()), company.domain.as_str())
            .map_err(|e| e.to_tool_error())?;
        let company_root = format!("https://{}/", company.domain.as_str());
        let (target, page) = tools.open_tab(caller, &company_root).await?;
        let outcome = join(
            &self.client,
            &company,
            session,
            &return_to,
            JoinTab::New(&page),
            &permit,
            tools.persons(),
            JOIN_DEADLINE,
        )
        .await;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                // The caller gets no target of a failed join, so the tab goes with it (a
                // caller retrying a retryable failure would otherwise fill its tabs).
                tools.close_tab(caller, &target).await;
                return Err(join_error(&error));
            }
        };
        // The next join here takes a tab opened meanwhile (issue 42). Best effort: a browser
        // that cannot open it now leaves the next join to open its own.
        let _ahead = tools.open_ahead(caller, &company_root).await;
        Ok(json!({ "target": target, "url": outcome.landed.as_str(), "status": outcome.status }))
    }

    /// Signs `holder`'s Session out: its Account Token revoked at the company, the record
    /// changed under the lock it was read under.
    async fn sign_out(&self, holder: &Holder, domain: &str) -> Result<Value, ToolError> {
        let company = self.discover(domain).await?;
        let _record = self.records.lock().await;
        let mut wallet = self.load(holder, &company)?.ok_or_else(no_session)?;
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

/// The PAP tools served beside the browser's by the paired MCP host (`pap-host`).
#[async_trait::async_trait]
impl ExtraTools for PapTools {
    fn listed(&self) -> Vec<Tool> {
        Self::listed()
    }

    fn serves(&self, name: &str) -> Option<NeedsBrowser> {
        PapTool::from_mcp_name(name).map(|tool| match tool {
            PapTool::Join => NeedsBrowser::Yes,
            _ => NeedsBrowser::No,
        })
    }

    async fn call(
        &self,
        tools: &ToolHost,
        caller: &AgentCaller,
        name: &str,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        let tool = PapTool::from_mcp_name(name)
            .ok_or_else(|| ToolError::new(ToolErrorCode::Unsupported, "no PAP tool has that name"))?;
        self.call_tool(tools, caller, tool, arguments).await
    }
}

/// Signs out and removes every Session the unpaired device `device` held (review N5): each
/// company's Account Token revoked, then the record deleted. Every company is tried; what
/// failed is returned with the company's domain (the record of a company that could not be
/// reached is kept, so a later unpair can try again).
pub async fn sign_out_device(
    client: &PapClient,
    state_dir: &std::path::Path,
    sealing: &SealingKey,
    device: &str,
) -> Result<Vec<(String, String)>, WalletError> {
    let holder = Holder::Device(device.to_owned());
    let mut failed = Vec::new();
    for domain in Wallet::held_by_device(state_dir, device)? {
        let outcome = async {
            let Some(wallet) = Wallet::load_held(state_dir, &domain, &holder, sealing)? else {
                return Ok::<_, anyhow::Error>(());
            };
            if let Some(token) = wallet.session.as_ref().and_then(|s| s.account_token.as_ref()) {
                let company = client.discover(&domain).await?;
                client.revoke(&company, token).await?;
            }
            wallet.remove()?;
            Ok(())
        }
        .await;
        if let Err(error) = outcome {
            failed.push((domain.as_str().to_owned(), error.to_string()));
        }
    }
    Ok(failed)
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
        "no Session with this company: call pap_session_start first",
    )
}

fn internal(what: &str) -> ToolError {
    ToolError::new(ToolErrorCode::Internal, what.to_owned())
}

/// A failed join as a tool error. A tab moved under the join (another caller navigated it
/// before the form was built) posted nothing: `internal`, since no AIP-14 code names it, and
/// retryable, since the next join opens a tab of its own.
fn join_error(error: &JoinError) -> ToolError {
    match error {
        JoinError::Timeout => ToolError::new(ToolErrorCode::Timeout, error.to_string()),
        JoinError::ConsentRequired(domain) => {
            ToolError::new(ToolErrorCode::ConsentRequired, error.to_string()).with_cause(json!({ "domain": domain }))
        }
        JoinError::ForeignReturnTo => ToolError::new(ToolErrorCode::InputInvalid, error.to_string()),
        JoinError::Refused(status) => {
            ToolError::new(ToolErrorCode::PermissionDenied, error.to_string()).with_cause(json!({ "status": status }))
        }
        JoinError::TabMoved => internal(&error.to_string())
            .retryable()
            .with_cause(json!({ "reason": "tab_moved" })),
        _ => internal(&error.to_string()),
    }
}

/// A PAP client error as a tool error: the company's refusal is `permission_denied` with its
/// status and OAuth error code; a transport failure is retryable.
fn pap_error(error: &ClientError) -> ToolError {
    match error {
        ClientError::Undeclared => {
            ToolError::new(ToolErrorCode::PermissionDenied, error.to_string()).with_cause(json!({ "rule": "AIP-7" }))
        }
        ClientError::Protocol { status, code } => ToolError::new(ToolErrorCode::PermissionDenied, error.to_string())
            .with_cause(json!({ "status": status, "error": code.to_string() })),
        ClientError::Transport(_) => ToolError::new(ToolErrorCode::Timeout, error.to_string()),
        ClientError::Unsupported(_) => ToolError::new(ToolErrorCode::NotFound, error.to_string()),
        _ => internal(&error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_whose_tab_moved_is_retryable_and_no_other_internal_failure_is() {
        let json = |error: &JoinError| serde_json::to_value(join_error(error)).expect("a tool error serialises");
        let moved = json(&JoinError::TabMoved);
        assert_eq!(moved["code"], "internal", "{moved}");
        assert_eq!(moved["retryable"], true, "{moved}");
        assert_eq!(moved["cause"]["reason"], "tab_moved", "{moved}");
        let signing = json(&JoinError::Signing);
        assert_eq!(signing["code"], "internal", "{signing}");
        assert!(signing.get("retryable").is_none(), "{signing}");
        let refused = json(&JoinError::Refused(403));
        assert_eq!(refused["code"], "permission_denied", "{refused}");
        assert_eq!(refused["cause"]["status"], 403, "{refused}");
    }

    #[test]
    fn every_pap_tool_lists_a_closed_object_schema_that_model_apis_take() {
        for tool in PapTools::listed() {
            let schema = &tool.input_schema;
            assert_eq!(schema.get("type"), Some(&json!("object")), "{}", tool.name);
            for combinator in ["oneOf", "anyOf", "allOf"] {
                assert!(
                    !schema.contains_key(combinator),
                    "{} has a top-level {combinator}",
                    tool.name
                );
            }
            assert_eq!(schema.get("additionalProperties"), Some(&json!(false)), "{}", tool.name);
            let as_value = serde_json::Value::Object(schema.as_ref().clone());
            if let Err(error) = jsonschema::draft202012::meta::validate(&as_value) {
                panic!("{}'s input schema is not valid JSON Schema 2020-12: {error}", tool.name);
            }
            assert!(pap_browser::spec::is_mcp_name(&tool.name), "{}", tool.name);
            let annotations = tool.annotations.as_ref().expect("annotated");
            assert!(annotations.title.is_some(), "{}", tool.name);
            for hint in [
                annotations.read_only_hint,
                annotations.destructive_hint,
                annotations.idempotent_hint,
                annotations.open_world_hint,
            ] {
                assert!(hint.is_some(), "{} lacks a hint", tool.name);
            }
        }
    }
}
