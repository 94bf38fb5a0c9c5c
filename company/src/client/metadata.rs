//! The agent's Client ID Metadata Document, as the company reads it (wire doc §2.3).

use pap_shared::{ClientId, HttpsUrl};
use serde::Deserialize;

use super::ResolveError;

/// A validated Client ID Metadata Document.
#[derive(Clone, Debug)]
pub struct ClientMetadata {
    client_id: ClientId,
    client_name: String,
    jwks_uri: HttpsUrl,
    extensions: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct RawMetadata {
    client_id: String,
    client_name: String,
    jwks_uri: String,
    #[serde(default)]
    redirect_uris: Vec<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    extensions: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ClientMetadata {
    /// Parses and checks the document fetched from `fetched`: `client_id` equal to that URL,
    /// a non-empty `client_name`, `jwks_uri` and every redirect URI HTTPS on the `client_id`'s
    /// host, `token_endpoint_auth_method` absent or `private_key_jwt`, extension versions strings.
    pub fn parse(json: &[u8], fetched: &ClientId) -> Result<Self, ResolveError> {
        let raw: RawMetadata =
            serde_json::from_slice(json).map_err(|_| ResolveError::InvalidMetadata("not a metadata object"))?;
        if raw.client_id != fetched.as_str() {
            return Err(ResolveError::InvalidMetadata("client_id differs from the URL fetched"));
        }
        if raw.client_name.trim().is_empty() {
            return Err(ResolveError::InvalidMetadata("client_name is empty"));
        }
        let host = fetched
            .url()
            .domain()
            .map(str::to_owned)
            .ok_or(ResolveError::Forbidden("client_id has no host name"))?;
        let on_host = |text: &str| HttpsUrl::parse(text).ok().filter(|u| u.domain() == Some(host.as_str()));
        let jwks_uri =
            on_host(&raw.jwks_uri).ok_or(ResolveError::InvalidMetadata("jwks_uri is not on the client_id host"))?;
        if raw.redirect_uris.iter().any(|u| on_host(u).is_none()) {
            return Err(ResolveError::InvalidMetadata(
                "a redirect URI is not on the client_id host",
            ));
        }
        if raw
            .token_endpoint_auth_method
            .as_deref()
            .is_some_and(|m| m != "private_key_jwt")
        {
            return Err(ResolveError::InvalidMetadata(
                "token_endpoint_auth_method is not private_key_jwt",
            ));
        }
        let extensions = raw.extensions.unwrap_or_default();
        let numeric_version = extensions
            .values()
            .any(|e| e.get("version").is_some_and(|v| !v.is_string()));
        if numeric_version {
            return Err(ResolveError::InvalidMetadata("an extension version is not a string"));
        }
        Ok(Self {
            client_id: fetched.clone(),
            client_name: raw.client_name,
            jwks_uri,
            extensions,
        })
    }

    /// The `client_id`.
    pub fn client_id(&self) -> &ClientId {
        &self.client_id
    }

    /// The agent's display name.
    pub fn client_name(&self) -> &str {
        &self.client_name
    }

    /// Where the agent publishes its keys.
    pub fn jwks_uri(&self) -> &HttpsUrl {
        &self.jwks_uri
    }

    /// The version the agent declares for `extension`, e.g. `Some("1")` for `operations`.
    pub fn extension_version(&self, extension: &str) -> Option<&str> {
        self.extensions.get(extension)?.get("version")?.as_str()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn id() -> ClientId {
        ClientId::parse("https://atlas.example/agent.json").unwrap()
    }

    fn doc() -> serde_json::Value {
        json!({
            "client_id": "https://atlas.example/agent.json",
            "client_name": "Atlas",
            "jwks_uri": "https://atlas.example/jwks.json",
            "redirect_uris": ["https://atlas.example/oauth/callback"],
            "token_endpoint_auth_method": "private_key_jwt",
            "extensions": {"operations": {"version": "1"}}
        })
    }

    fn parse(v: &serde_json::Value) -> Result<ClientMetadata, ResolveError> {
        ClientMetadata::parse(&serde_json::to_vec(v).unwrap(), &id())
    }

    fn with(member: &str, value: serde_json::Value) -> Result<ClientMetadata, ResolveError> {
        let mut v = doc();
        v[member] = value;
        parse(&v)
    }

    #[test]
    fn reads_a_valid_document() {
        let m = parse(&doc()).unwrap();
        assert_eq!(m.jwks_uri().as_str(), "https://atlas.example/jwks.json");
        assert_eq!(m.extension_version("operations"), Some("1"));
        assert_eq!(m.client_name(), "Atlas");
    }

    #[test]
    fn refuses_what_the_wire_doc_refuses() {
        let invalid = |r: Result<ClientMetadata, ResolveError>| matches!(r, Err(ResolveError::InvalidMetadata(_)));
        assert!(invalid(with("client_id", json!("https://atlas.example/other.json"))));
        assert!(invalid(with("client_name", json!(" "))));
        assert!(invalid(with("jwks_uri", json!("https://evil.example/jwks.json"))));
        assert!(invalid(with("jwks_uri", json!("http://atlas.example/jwks.json"))));
        assert!(invalid(with("redirect_uris", json!(["https://evil.example/cb"]))));
        assert!(invalid(with(
            "token_endpoint_auth_method",
            json!("client_secret_basic")
        )));
        assert!(invalid(with("extensions", json!({"operations": {"version": 1}}))));
        assert!(invalid(ClientMetadata::parse(b"[]", &id())));
    }
}
