//! Names and URLs with PAP's rules built in: [`CompanyDomain`] (a company's
//! `organization.domain`) and [`HttpsUrl`] (every URL PAP exchanges is HTTPS).
//!
//! Both are parsed once at the boundary and cannot be built unvalidated, so a `return_to`
//! check (PAP-5-02, PAP-5-09) is a method call on already-normalised values.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use url::{Host, Url};

/// Longest URL accepted anywhere in the bridge, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// A company's domain: lowercase ASCII (IDNA A-labels), at least two labels, no trailing dot,
/// not an IP literal.
///
/// PartialEq compares the normalised form, so `Shop.Example.` equals `shop.example`.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CompanyDomain(String);

impl CompanyDomain {
    /// The normalised name, e.g. `shop.example` or `xn--bcher-kva.example`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `host` is this domain or one of its subdomains.
    ///
    /// `host` is compared case-insensitively with one trailing dot ignored, so callers can pass
    /// a `url::Url` host as it comes; it is never treated as a pattern. A host with an empty
    /// label (`shop.example..`, `a..shop.example`) is no host name and is covered by nothing.
    pub fn covers(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        if host.split('.').any(str::is_empty) {
            return false;
        }
        if host.len() == self.0.len() {
            return host.eq_ignore_ascii_case(&self.0);
        }
        // A subdomain: "<label(s)>.<domain>", with the dot at the right place.
        let Some(cut) = host.len().checked_sub(self.0.len() + 1) else {
            return false;
        };
        host.is_char_boundary(cut)
            && host.as_bytes()[cut] == b'.'
            && host[cut + 1..].eq_ignore_ascii_case(&self.0)
            && cut > 0
    }
}

impl TryFrom<&str> for CompanyDomain {
    type Error = InvalidCompanyDomain;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        let trimmed = value.strip_suffix('.').unwrap_or(value);
        if trimmed.is_empty() || trimmed.starts_with('.') || trimmed.ends_with('.') {
            return Err(InvalidCompanyDomain);
        }
        // IDNA (UTS #46) maps to lowercase A-labels and refuses what cannot be a host name.
        let ascii = idna::domain_to_ascii(trimmed).map_err(|_| InvalidCompanyDomain)?;
        if ascii.len() > 253 || ascii.parse::<std::net::IpAddr>().is_ok() {
            return Err(InvalidCompanyDomain);
        }
        let labels: Vec<&str> = ascii.split('.').collect();
        if labels.len() < 2 {
            return Err(InvalidCompanyDomain);
        }
        for label in &labels {
            let valid_chars = label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if label.is_empty() || label.len() > 63 || !valid_chars || label.starts_with('-') || label.ends_with('-') {
                return Err(InvalidCompanyDomain);
            }
        }
        // A numeric top label is an IPv4 literal in disguise (`1.2.3.4` handled above, `a.123` here).
        if labels.last().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
            return Err(InvalidCompanyDomain);
        }
        Ok(Self(ascii))
    }
}

impl TryFrom<String> for CompanyDomain {
    type Error = InvalidCompanyDomain;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::try_from(value.as_str())
    }
}

impl From<CompanyDomain> for String {
    fn from(domain: CompanyDomain) -> Self {
        domain.0
    }
}

impl fmt::Debug for CompanyDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompanyDomain({})", self.0)
    }
}

impl fmt::Display for CompanyDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The text is not a usable company domain (a DNS name of at least two labels, not an IP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a valid company domain")]
pub struct InvalidCompanyDomain;

/// An absolute `https` URL with a host and no user information.
///
/// The text as received is kept for exact comparisons (an assertion's `aud` is compared
/// character for character with the published endpoint), next to the parsed form.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HttpsUrl {
    original: String,
    parsed: Url,
}

impl HttpsUrl {
    /// Parses `text` as an HTTPS URL.
    pub fn parse(text: &str) -> Result<Self, InvalidHttpsUrl> {
        if text.len() > MAX_URL_LEN {
            return Err(InvalidHttpsUrl::TooLong);
        }
        // The URL parser silently drops tabs and newlines and trims spaces; refusing them keeps
        // the original text equal in meaning to what was checked.
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(InvalidHttpsUrl::Malformed);
        }
        let parsed = Url::parse(text).map_err(|_| InvalidHttpsUrl::Malformed)?;
        if parsed.scheme() != "https" {
            return Err(InvalidHttpsUrl::NotHttps);
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(InvalidHttpsUrl::UserInfo);
        }
        if parsed.host().is_none() {
            return Err(InvalidHttpsUrl::Malformed);
        }
        Ok(Self {
            original: text.to_owned(),
            parsed,
        })
    }

    /// The text as received.
    pub fn as_str(&self) -> &str {
        &self.original
    }

    /// The parsed URL, normalised by the WHATWG rules (ASCII, lowercase host, percent-encoded).
    pub fn url(&self) -> &Url {
        &self.parsed
    }

    /// The host name when the URL names one (not an IP literal), lowercase, without a trailing
    /// dot. A name with an empty label (`shop.example..`, which the URL parser accepts) is none.
    pub fn domain(&self) -> Option<&str> {
        match self.parsed.host()? {
            Host::Domain(name) => {
                let name = name.strip_suffix('.').unwrap_or(name);
                (!name.split('.').any(str::is_empty)).then_some(name)
            }
            Host::Ipv4(_) | Host::Ipv6(_) => None,
        }
    }

    /// Whether this URL is on `domain` or one of its subdomains (any port, any path): the
    /// `return_to` rule of PAP-5-02 and PAP-5-09.
    pub fn is_on(&self, domain: &CompanyDomain) -> bool {
        self.domain().is_some_and(|host| domain.covers(host))
    }

    /// `scheme://host[:port]` of this URL, as the parser normalised it.
    pub fn origin(&self) -> String {
        self.parsed.origin().ascii_serialization()
    }
}

impl TryFrom<String> for HttpsUrl {
    type Error = InvalidHttpsUrl;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<HttpsUrl> for String {
    fn from(url: HttpsUrl) -> Self {
        url.original
    }
}

impl fmt::Debug for HttpsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HttpsUrl({})", self.original)
    }
}

impl fmt::Display for HttpsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

/// Why a text is not an [`HttpsUrl`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHttpsUrl {
    /// Not an absolute URL with a host, or it holds whitespace or control characters.
    #[error("not an absolute URL with a host")]
    Malformed,
    /// The scheme is not `https`.
    #[error("the URL is not https")]
    NotHttps,
    /// Longer than [`MAX_URL_LEN`].
    #[error("the URL is too long")]
    TooLong,
    /// The URL carries a user name or password (`https://shop.example@evil.com/`).
    #[error("the URL carries user information")]
    UserInfo,
}

/// Whether `ip` is a globally routable unicast address (not loopback, private, link-local,
/// shared, documentation, benchmarking, multicast or reserved): the only addresses a company
/// fetches an agent's documents from, and an agent reaches a company at (PAP-3-10), unless a
/// test names an address explicitly.
pub fn is_public_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0)
                || (a == 198 && (18..20).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_address(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8
                || first == 0x0064)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> CompanyDomain {
        CompanyDomain::try_from("shop.example").unwrap()
    }

    #[test]
    fn domain_is_normalised() {
        assert_eq!(CompanyDomain::try_from("Shop.EXAMPLE.").unwrap(), shop());
        assert_eq!(
            CompanyDomain::try_from("bücher.example").unwrap().as_str(),
            "xn--bcher-kva.example"
        );
    }

    #[test]
    fn domain_refuses_what_is_not_a_company_name() {
        for bad in [
            "",
            ".",
            "example",
            ".shop.example",
            "shop..example",
            "shop.example..",
            "127.0.0.1",
            "a.123",
            "-shop.example",
            "shop-.example",
            "sh op.example",
            "*.shop.example",
            "[::1]",
            "shop.example:443",
        ] {
            assert_eq!(CompanyDomain::try_from(bad), Err(InvalidCompanyDomain), "{bad:?}");
        }
    }

    #[test]
    fn covers_the_domain_and_its_subdomains_only() {
        let d = shop();
        assert!(d.covers("shop.example"));
        assert!(d.covers("SHOP.example."));
        assert!(d.covers("www.shop.example"));
        assert!(d.covers("a.b.shop.example"));
        assert!(!d.covers("evilshop.example"));
        assert!(!d.covers("shop.example.evil.com"));
        assert!(!d.covers(".shop.example"));
        assert!(!d.covers("example"));
        assert!(!d.covers(""));
    }

    #[test]
    fn return_to_rule() {
        let d = shop();
        let on = |s: &str| HttpsUrl::parse(s).map(|u| u.is_on(&d));
        assert_eq!(on("https://shop.example/orders/1"), Ok(true));
        assert_eq!(on("https://Shop.Example./x"), Ok(true));
        assert_eq!(on("https://help.shop.example:8443/x?y#z"), Ok(true));
        assert_eq!(on("https://evilshop.example/"), Ok(false));
        assert_eq!(on("https://shop.example.evil.com/"), Ok(false));
        assert_eq!(on("https://127.0.0.1/"), Ok(false));
        assert_eq!(on("https://shop.example@evil.com/"), Err(InvalidHttpsUrl::UserInfo));
        assert_eq!(on("http://shop.example/"), Err(InvalidHttpsUrl::NotHttps));
        assert_eq!(on("https://shop.example/\n"), Err(InvalidHttpsUrl::Malformed));
        assert_eq!(on("/relative"), Err(InvalidHttpsUrl::Malformed));
    }

    #[test]
    fn a_host_with_an_empty_label_is_on_no_domain() {
        // Found by the `return_to` fuzz target: `shop.example..` lost one trailing dot in
        // `domain()` and another in `covers`, and was taken for the company's.
        let d = shop();
        for text in [
            "https://shop.example../",
            "https://a..shop.example/",
            "https://.shop.example/",
            "https://shop..example/",
        ] {
            let url = HttpsUrl::parse(text);
            assert!(
                url.as_ref().map_or(true, |u| !u.is_on(&d)),
                "{text} taken for the company's"
            );
            assert!(url.map_or(true, |u| u.domain().is_none()), "{text} has a host name");
        }
        assert!(!d.covers("shop.example.."));
        assert!(!d.covers("a..shop.example"));
        assert!(!d.covers(".shop.example"));
        assert!(d.covers("shop.example."));
    }

    #[test]
    fn idn_hosts_compare_in_their_ascii_form() {
        let d = CompanyDomain::try_from("bücher.example").unwrap();
        assert!(HttpsUrl::parse("https://www.BÜCHER.example/").unwrap().is_on(&d));
        assert!(HttpsUrl::parse("https://www.xn--bcher-kva.example/").unwrap().is_on(&d));
    }

    #[test]
    fn url_keeps_the_original_text() {
        let u = HttpsUrl::parse("https://Shop.example/a").unwrap();
        assert_eq!(u.as_str(), "https://Shop.example/a");
        assert_eq!(u.url().as_str(), "https://shop.example/a");
        assert_eq!(u.origin(), "https://shop.example");
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<HttpsUrl>("\"http://x.example/\"").is_err());
        assert!(serde_json::from_str::<CompanyDomain>("\"localhost\"").is_err());
    }
    #[test]
    fn public_address_policy() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "2001:db8::1",
            "::",
        ] {
            assert!(!is_public_address(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public_address(public.parse().unwrap()), "{public}");
        }
    }
}
