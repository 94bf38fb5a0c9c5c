//! Domains a consent grant may name (AIP-63 C2): explicit registrable domains or hosts,
//! lowercase, IDNA-normalised, at least two labels; never `*`, a wildcard, a leading dot, an IP
//! literal, a bare TLD, or a name that is itself a public suffix (`co.uk`, `github.io`), checked
//! against the full Public Suffix List shipped in this crate (`data/public_suffix_list.dat`, from
//! PyPI's versioned `publicsuffixlist` package: `data/public_suffix_list.source` says which, and
//! `data/refresh-public-suffix-list.sh` refreshes it). A name under an unlisted TLD
//! (`shop.example`) is allowed.

use std::fmt;
use std::sync::OnceLock;

use publicsuffix::{List, Psl as _};
use serde::{Deserialize, Serialize};

use crate::domain::CompanyDomain;

/// The Public Suffix List, as shipped.
const PUBLIC_SUFFIX_LIST: &str = include_str!("../data/public_suffix_list.dat");

fn list() -> &'static List {
    static LIST: OnceLock<List> = OnceLock::new();
    // The shipped list is a fixed file that parses; a test proves it does.
    LIST.get_or_init(|| {
        PUBLIC_SUFFIX_LIST
            .parse()
            .expect("the shipped Public Suffix List parses")
    })
}

/// The registrable domain of `host` (its public suffix and one label more, by the shipped list:
/// `a.b.example.co.uk` -> `example.co.uk`), lowercase; the host itself when it has none (a
/// public suffix, a single label). Who controls one registrable domain controls every name
/// under it, so budgets shared by strangers are counted per registrable domain.
pub fn registrable_domain(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    list()
        .domain(host.as_bytes())
        .and_then(|domain| std::str::from_utf8(domain.as_bytes()).ok().map(str::to_owned))
        .unwrap_or(host)
}

/// A domain a grant covers, with its subdomains.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GrantDomain(String);

impl GrantDomain {
    /// Parses a grant domain (C2).
    pub fn parse(text: &str) -> Result<Self, InvalidGrantDomain> {
        let trimmed = text.trim();
        if trimmed.contains('*') {
            return Err(InvalidGrantDomain::Wildcard);
        }
        if trimmed.starts_with('.') {
            return Err(InvalidGrantDomain::LeadingDot);
        }
        if trimmed.parse::<std::net::IpAddr>().is_ok() || trimmed.starts_with('[') {
            return Err(InvalidGrantDomain::IpLiteral);
        }
        if !trimmed.contains('.') || trimmed.ends_with('.') && trimmed.matches('.').count() == 1 {
            return Err(InvalidGrantDomain::SingleLabel);
        }
        let domain = CompanyDomain::try_from(trimmed).map_err(|_| InvalidGrantDomain::Malformed)?;
        let name = domain.as_str();
        let suffix = list().suffix(name.as_bytes()).ok_or(InvalidGrantDomain::Malformed)?;
        if suffix.is_known() && suffix.as_bytes() == name.as_bytes() {
            return Err(InvalidGrantDomain::PublicSuffix);
        }
        Ok(Self(name.to_owned()))
    }

    /// The normalised name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `host` is this domain or a subdomain of it.
    pub fn covers(&self, host: &str) -> bool {
        // A GrantDomain is a valid CompanyDomain by construction.
        CompanyDomain::try_from(self.0.as_str()).is_ok_and(|d| d.covers(host))
    }
}

impl TryFrom<String> for GrantDomain {
    type Error = InvalidGrantDomain;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<GrantDomain> for String {
    fn from(domain: GrantDomain) -> Self {
        domain.0
    }
}

impl fmt::Debug for GrantDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GrantDomain({})", self.0)
    }
}

impl fmt::Display for GrantDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a name cannot be granted (C2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidGrantDomain {
    /// An IP address, not a name.
    #[error("an IP literal cannot be granted")]
    IpLiteral,
    /// Starts with a dot.
    #[error("a leading dot is not a domain")]
    LeadingDot,
    /// Not a host name.
    #[error("not a valid domain name")]
    Malformed,
    /// Itself a public suffix (`co.uk`, `github.io`): every site under it would be granted.
    #[error("a public suffix cannot be granted")]
    PublicSuffix,
    /// One label (`localhost`, a bare TLD).
    #[error("a single label cannot be granted")]
    SingleLabel,
    /// `*` or `*.example.com`.
    #[error("a wildcard cannot be granted")]
    Wildcard,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_list_parses_and_is_the_full_list() {
        assert!(!list().is_empty());
        assert!(
            PUBLIC_SUFFIX_LIST
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with("//"))
                .count()
                > 9_000
        );
    }

    #[test]
    fn the_shipped_list_is_current() {
        // The list says when it was cut; Debian 12's snapshot was 2023-02-09.
        let version = PUBLIC_SUFFIX_LIST
            .lines()
            .find_map(|l| l.strip_prefix("// VERSION: "))
            .unwrap();
        assert!(version[..4] >= *"2026", "{version}");
        // Suffixes listed after 2023: a grant may not name them, only a name under them.
        for suffix in ["a2hosted.com", "1cooldns.com"] {
            assert!(GrantDomain::parse(suffix).is_err(), "{suffix}");
            assert!(GrantDomain::parse(&format!("shop.{suffix}")).is_ok(), "shop.{suffix}");
        }
    }

    #[test]
    fn a_registrable_domain_is_the_public_suffix_and_one_label() {
        assert_eq!(registrable_domain("r1.atk.example"), "atk.example");
        assert_eq!(registrable_domain("A.B.Example.CO.UK."), "example.co.uk");
        assert_eq!(registrable_domain("me.github.io"), "me.github.io");
        assert_eq!(registrable_domain("x.me.github.io"), "me.github.io");
        assert_eq!(registrable_domain("co.uk"), "co.uk", "a public suffix is its own");
    }

    #[test]
    fn explicit_registrable_domains_and_hosts_are_granted() {
        for ok in [
            "shop.example",
            "Shop.Example",
            "www.shop.example",
            "bbc.co.uk",
            "news.bbc.co.uk",
            "user.github.io",
            "bücher.de",
        ] {
            assert!(GrantDomain::parse(ok).is_ok(), "{ok}");
        }
        assert_eq!(GrantDomain::parse("bücher.de").unwrap().as_str(), "xn--bcher-kva.de");
        assert!(GrantDomain::parse("shop.example").unwrap().covers("a.shop.example"));
    }

    #[test]
    fn wildcards_dots_ips_single_labels_and_public_suffixes_are_refused() {
        let cases = [
            ("*", InvalidGrantDomain::Wildcard),
            ("*.example.com", InvalidGrantDomain::Wildcard),
            (".example.com", InvalidGrantDomain::LeadingDot),
            ("127.0.0.1", InvalidGrantDomain::IpLiteral),
            ("[::1]", InvalidGrantDomain::IpLiteral),
            ("com", InvalidGrantDomain::SingleLabel),
            ("localhost", InvalidGrantDomain::SingleLabel),
            ("co.uk", InvalidGrantDomain::PublicSuffix),
            ("github.io", InvalidGrantDomain::PublicSuffix),
            ("s3.amazonaws.com", InvalidGrantDomain::PublicSuffix),
            ("blogspot.com", InvalidGrantDomain::PublicSuffix),
            ("", InvalidGrantDomain::SingleLabel),
            ("shop..example", InvalidGrantDomain::Malformed),
        ];
        for (text, why) in cases {
            assert_eq!(GrantDomain::parse(text), Err(why), "{text:?}");
        }
        assert!(serde_json::from_str::<GrantDomain>("\"co.uk\"").is_err());
    }
}
