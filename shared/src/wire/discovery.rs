//! Discovery (PAP §3, wire doc §2.1-2.2): a company's `/.well-known/poppy.json` and its
//! issuer's OAuth Authorization Server Metadata (RFC 8414). The reference company writes these
//! types; the agent reads them. Members PAP does not define are ignored on read (a company may
//! add its own); members PAP defines are read as their types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::CompanyDomain;

/// The protocol version this bridge speaks.
pub const PROTOCOL_VERSION: &str = "0.2";

/// `/.well-known/poppy.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// `0.2`.
    pub protocol_version: String,
    /// Who the company is.
    pub organization: Organization,
    /// Where and how its agents authenticate.
    pub auth: DiscoveryAuth,
    /// Its APIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apis: Vec<Api>,
    /// Its website's PAP endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<Web>,
    /// Extensions it offers.
    #[serde(default, skip_serializing_if = "Extensions::is_empty")]
    pub extensions: Extensions,
}

/// `organization`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Organization {
    /// Its display name.
    pub name: String,
    /// Its domain: the host discovery was asked of.
    pub domain: CompanyDomain,
}

/// `auth`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveryAuth {
    /// The OAuth issuer, compared exactly with the metadata's `issuer`.
    pub issuer: String,
    /// Device Sign-In, when offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceSignIn>,
    /// Each of the company's own scopes, with what it lets an agent do.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom_scopes: BTreeMap<String, String>,
}

/// `auth.device`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSignIn {
    /// The scopes a Device Sign-In may ask for.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// One of `apis[]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Api {
    /// `openapi`, or another kind.
    #[serde(rename = "type")]
    pub kind: String,
    /// Where its description is.
    pub url: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `web`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Web {
    /// Where a browser assertion is posted (PAP §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser_session_endpoint: Option<String>,
}

/// `extensions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extensions {
    /// Operations v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<OperationsExtension>,
}

impl Extensions {
    fn is_empty(&self) -> bool {
        self.operations.is_none()
    }
}

/// `extensions.operations`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationsExtension {
    /// `1`.
    pub version: String,
    /// The operations endpoint.
    pub endpoint: String,
}

/// The issuer's OAuth Authorization Server Metadata (RFC 8414 §2, with RFC 8628 and RFC 9449
/// members and PAP's `poppy_domains`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationServerMetadata {
    /// Equal to `auth.issuer`, exactly.
    pub issuer: String,
    /// The token endpoint.
    pub token_endpoint: String,
    /// RFC 7009 revocation.
    pub revocation_endpoint: String,
    /// RFC 8628 device authorization, when offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_authorization_endpoint: Option<String>,
    /// The grant types it takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grant_types_supported: Vec<String>,
    /// How clients authenticate (`private_key_jwt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_endpoint_auth_methods_supported: Vec<String>,
    /// The algorithms of client assertions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_endpoint_auth_signing_alg_values_supported: Vec<String>,
    /// The algorithms of DPoP proofs; absent: not said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
    /// Its scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// The company domains this issuer serves (PAP §3.2).
    #[serde(default)]
    pub poppy_domains: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn discovery_reads_what_pap_defines_and_ignores_what_it_does_not() {
        let wire = json!({
            "protocol_version": "0.2",
            "organization": {"name": "Shop Example", "domain": "shop.example", "logo": "x"},
            "auth": {"issuer": "https://shop.example", "device": {"scopes": ["orders:read"]},
                     "custom_scopes": {"orders:read": "Read orders"}},
            "apis": [{"type": "openapi", "url": "https://shop.example/api/openapi.json"}],
            "web": {"browser_session_endpoint": "https://shop.example/poppy/browser-session"},
            "extensions": {"operations": {"version": "1", "endpoint": "https://shop.example/poppy/operations"},
                           "conversations": {"version": "1"}},
            "company_specific": true,
        });
        let doc: Discovery = serde_json::from_value(wire).unwrap();
        assert_eq!(doc.organization.domain.as_str(), "shop.example");
        assert_eq!(doc.apis[0].kind, "openapi");
        assert_eq!(doc.extensions.operations.as_ref().unwrap().version, "1");
        let again: Discovery = serde_json::from_value(serde_json::to_value(&doc).unwrap()).unwrap();
        assert_eq!(again, doc);
        // A domain that is not a company domain is not read.
        let bad = json!({"protocol_version": "0.2", "organization": {"name": "x", "domain": "127.0.0.1"},
            "auth": {"issuer": "https://x.example"}});
        assert!(serde_json::from_value::<Discovery>(bad).is_err());
    }

    #[test]
    fn metadata_reads_the_members_pap_uses() {
        let wire = json!({"issuer": "https://shop.example", "token_endpoint": "https://shop.example/oauth/token",
            "revocation_endpoint": "https://shop.example/oauth/revoke", "poppy_domains": ["shop.example"],
            "dpop_signing_alg_values_supported": ["ES256"], "response_types_supported": []});
        let meta: AuthorizationServerMetadata = serde_json::from_value(wire).unwrap();
        assert_eq!(meta.poppy_domains, ["shop.example"]);
        assert!(meta.device_authorization_endpoint.is_none());
        assert_eq!(
            meta.dpop_signing_alg_values_supported.as_deref(),
            Some(&["ES256".to_owned()][..])
        );
    }
}
