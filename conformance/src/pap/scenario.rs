//! What the runner must know about a company: the format of
//! `conformance/interop/shop.example.scenario.json`.

use std::collections::HashMap;

use serde::Deserialize;

/// A company's scenario.
#[derive(Clone, Debug, Deserialize)]
pub struct Scenario {
    /// Scopes asked for at Device Sign-In.
    pub scopes: Vec<String>,
    /// The accounts the user signs in to; the first is used.
    #[serde(default = "default_accounts")]
    pub accounts: Vec<String>,
    /// `user` (needs the user's approval) and `standing` (any proposal whose page is shown).
    pub proposals: HashMap<String, Proposal>,
    /// The website's confirm form fields (informational: the runner clicks the page's button).
    #[serde(default)]
    pub web_confirm_form: Option<serde_json::Value>,
}

fn default_accounts() -> Vec<String> {
    vec!["acct_ada".into()]
}

/// An API call that proposes an operation.
#[derive(Clone, Debug, Deserialize)]
pub struct Proposal {
    /// HTTP method.
    pub method: String,
    /// Path on the API origin.
    pub path: String,
    /// JSON body (`{}` when absent).
    #[serde(default)]
    pub body: Option<serde_json::Value>,
}

impl Scenario {
    /// Parses a scenario file's text.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}
