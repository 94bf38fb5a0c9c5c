//! The reference company's configuration file (TOML): who the company is, what it offers, its
//! demo accounts (password hashes only) and the API calls that propose operations.

use std::net::SocketAddr;
use std::path::PathBuf;

use pap_shared::CompanyDomain;
use serde::Deserialize;

/// The whole configuration. Unknown keys are refused, so a typo is not silently ignored.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompanyConfig {
    /// `organization.domain`; every public URL is `https://{domain}/...` with no port.
    pub domain: CompanyDomain,
    /// `organization.name`, shown on the website.
    pub name: String,
    /// Where to listen for HTTPS (overridden by `--listen`).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// PEM certificate chain (overridden by `--cert`).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// PEM private key (overridden by `--key`).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// Where the operator API listens, plain HTTP on loopback only (overridden by
    /// `--admin-listen`); off when absent.
    #[serde(default)]
    pub admin_listen: Option<SocketAddr>,
    /// The load balancers in front of the company (extended by `--trusted-proxy`): from them,
    /// the client's address for the `/device` throttle is the last `X-Forwarded-For` entry that
    /// is not one of them (review N8). Empty: the TCP peer is the client.
    #[serde(default)]
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Allows the test-only flags `--trust-ca` and `--resolve`. Never set in production.
    #[serde(default)]
    pub testing: bool,
    /// Device Sign-In poll interval, seconds (RFC 8628 `interval`).
    #[serde(default = "default_device_interval")]
    pub device_interval: u64,
    /// How long a Session lives, seconds.
    #[serde(default = "default_session_lifetime")]
    pub session_lifetime: i64,
    /// The scopes the company offers.
    #[serde(rename = "scope", default)]
    pub scopes: Vec<ScopeConfig>,
    /// Accounts users sign in to.
    #[serde(rename = "account", default)]
    pub accounts: Vec<AccountConfig>,
    /// API calls that propose an operation.
    #[serde(rename = "proposal", default)]
    pub proposals: Vec<ProposalConfig>,
    /// API calls that read (GET) and answer a fixed JSON document.
    #[serde(rename = "read", default)]
    pub reads: Vec<ReadConfig>,
}

/// A read-only API call: `GET {path}` with a signed-in Session holding `scope` answers `body`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadConfig {
    /// An axum path under `/api/`.
    pub path: String,
    /// The scope the Session needs.
    pub scope: String,
    /// The JSON document answered (a string holding JSON).
    pub body: String,
}

fn default_device_interval() -> u64 {
    5
}

fn default_session_lifetime() -> i64 {
    3_600
}

/// One scope.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeConfig {
    /// Its name, e.g. `orders:write`.
    pub name: String,
    /// What it lets the agent do.
    pub description: String,
}

/// One account.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    /// The account's id (what the operator API and Sessions name).
    pub id: String,
    /// What the user types on the device page.
    pub username: String,
    /// An Argon2 PHC string (`pap-company hash-password` makes one).
    pub password_hash: String,
    /// The scopes this account may grant.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for AccountConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountConfig")
            .field("id", &self.id)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// An API call that proposes an operation: `POST {path}` answers 202 with the operation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposalConfig {
    /// An axum path under `/api/`, e.g. `/api/orders/{order_id}/exchanges`; its parameters fill
    /// `{name}` in the summary.
    pub path: String,
    /// What the operation does, with `{param}` placeholders.
    pub summary: String,
    /// Whether only the user may approve it (no standing permission).
    #[serde(default)]
    pub user_approval_required: bool,
    /// Scopes the Session needs to confirm it.
    pub scopes: Vec<String>,
    /// What the OpenAPI description says of it.
    #[serde(default)]
    pub description: Option<String>,
}

impl CompanyConfig {
    /// Parses and checks a configuration file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.message().to_owned()))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let offered = |s: &String| self.scopes.iter().any(|o| &o.name == s);
        if self.name.trim().is_empty() {
            return Err(ConfigError::Invalid("name is empty".into()));
        }
        if !(1..=300).contains(&self.device_interval) {
            return Err(ConfigError::Invalid("device_interval must be 1..=300".into()));
        }
        if !(60..=86_400).contains(&self.session_lifetime) {
            return Err(ConfigError::Invalid("session_lifetime must be 60..=86400".into()));
        }
        for account in &self.accounts {
            if let Some(s) = account.scopes.iter().find(|s| !offered(s)) {
                return Err(ConfigError::Invalid(format!(
                    "account {} names unknown scope {s}",
                    account.id
                )));
            }
            if argon2::PasswordHash::new(&account.password_hash).is_err() {
                return Err(ConfigError::Invalid(format!(
                    "account {} has no valid password hash",
                    account.id
                )));
            }
        }
        for read in &self.reads {
            if !read.path.starts_with("/api/") || !offered(&read.scope) {
                return Err(ConfigError::Invalid(format!(
                    "read {} is not under /api/ or names an unknown scope",
                    read.path
                )));
            }
            if serde_json::from_str::<serde_json::Value>(&read.body).is_err() {
                return Err(ConfigError::Invalid(format!(
                    "read {} has a body that is not JSON",
                    read.path
                )));
            }
        }
        for proposal in &self.proposals {
            if !proposal.path.starts_with("/api/") {
                return Err(ConfigError::Invalid(format!(
                    "proposal path {} is not under /api/",
                    proposal.path
                )));
            }
            if let Some(s) = proposal.scopes.iter().find(|s| !offered(s)) {
                return Err(ConfigError::Invalid(format!(
                    "proposal {} names unknown scope {s}",
                    proposal.path
                )));
            }
        }
        Ok(())
    }

    /// `https://{domain}`: the origin of every public URL.
    pub fn base(&self) -> String {
        format!("https://{}", self.domain)
    }

    /// The account with this id or user name.
    pub fn account(&self, id_or_username: &str) -> Option<&AccountConfig> {
        self.accounts
            .iter()
            .find(|a| a.id == id_or_username || a.username == id_or_username)
    }
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not valid TOML of the expected shape.
    #[error("the configuration is not valid: {0}")]
    Syntax(String),
    /// Valid TOML that breaks a rule.
    #[error("the configuration is not usable: {0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_parses() {
        let config = CompanyConfig::parse(include_str!("../../shop.example.toml")).unwrap();
        assert_eq!(config.domain.as_str(), "shop.example");
        assert_eq!(config.account("ada").unwrap().id, "acct_ada");
        assert_eq!(config.proposals.len(), 2);
    }

    #[test]
    fn refuses_unknown_keys_and_unknown_scopes() {
        let base = include_str!("../../shop.example.toml");
        assert!(matches!(
            CompanyConfig::parse(&format!("typo = 1\n{base}")),
            Err(ConfigError::Syntax(_))
        ));
        let bad = base.replace("scopes = [\"orders:write\"]", "scopes = [\"orders:delete\"]");
        assert!(matches!(CompanyConfig::parse(&bad), Err(ConfigError::Invalid(_))));
    }
}
