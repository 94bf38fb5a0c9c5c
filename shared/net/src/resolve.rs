//! A DNS resolver for reqwest that answers only public addresses (PAP-3-10): whatever name a
//! stranger's document gives, the client never dials loopback, a private network or a
//! link-local address. Test runs name their exceptions explicitly ([`PublicOnly::with_overrides`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Resolves through the system, keeping only public addresses; a name with none fails.
///
/// Overrides (`name -> address`, or `*.parent -> address` for every name under `parent`) are
/// answered first and as given: they are how a test on 127.0.0.1 reaches its own servers.
#[derive(Clone, Debug, Default)]
pub struct PublicOnly {
    overrides: Arc<HashMap<String, SocketAddr>>,
}

impl PublicOnly {
    /// Public addresses only, no exception.
    pub fn new() -> Self {
        Self::default()
    }

    /// Public addresses, except the names of `overrides` (a test's own servers).
    pub fn with_overrides(overrides: HashMap<String, SocketAddr>) -> Self {
        Self {
            overrides: Arc::new(overrides),
        }
    }

    /// The overridden address of `name`: its own entry, or a `*.parent` entry for a name under
    /// `parent` (a load test's many agents on one test server).
    pub fn overridden(&self, name: &str) -> Option<SocketAddr> {
        if let Some(addr) = self.overrides.get(name) {
            return Some(*addr);
        }
        let mut rest = name;
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(addr) = self.overrides.get(&format!("*.{parent}")) {
                return Some(*addr);
            }
            rest = parent;
        }
        None
    }
}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            if let Some(addr) = this.overridden(name.as_str()) {
                return Ok(Box::new(std::iter::once(addr)) as Addrs);
            }
            let public: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await?
                .filter(|a| pap_shared::is_public_address(a.ip()))
                .collect();
            if public.is_empty() {
                return Err("the name has no public address".into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn overrides_match_a_name_or_a_wildcard_parent() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let resolver = PublicOnly::with_overrides(HashMap::from([
            ("atlas.example".to_owned(), addr),
            ("*.atk.example".to_owned(), addr),
        ]));
        assert_eq!(resolver.overridden("atlas.example"), Some(addr));
        assert_eq!(resolver.overridden("a1.atk.example"), Some(addr));
        assert_eq!(resolver.overridden("x.a1.atk.example"), Some(addr));
        assert_eq!(resolver.overridden("atk.example"), None);
        assert_eq!(resolver.overridden("other.example"), None);
    }

    #[tokio::test]
    async fn loopback_is_no_public_address() {
        let name: Name = "localhost".parse().unwrap();
        let refused = PublicOnly::new().resolve(name).await;
        assert!(refused.is_err(), "localhost resolved to something public");
    }
}
