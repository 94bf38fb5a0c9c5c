//! Where the agent's browser may go (security review H3): `https:` to a public name or address,
//! `about:blank`, and the origins an operator named, nothing else.
//!
//! A tool caller is a restricted principal (C7) that page content can steer. If the browser
//! loads `file:` it reads the agent's own files (the storage-state a grant came from holds the
//! cookies of every domain the person *declined*), `chrome:` exposes the browser's internals,
//! a top-level `data:` page is a document the caller wrote on an origin nobody owns, and a
//! loopback or private address reaches services that trust the machine. The same decision is
//! made twice: by the tools, before they navigate (a typed `permission_denied`), and by the
//! browser itself for every request it sends (`crate::chromium`'s request guard), so that no
//! other route (a page's script, an iframe, a redirect, a new window) gets around it.
//!
//! Pure: it reads the URL's text only. A public name that resolves to a private address is not
//! seen here (see the README's security section for what covers it and what does not).

use std::fmt;

use url::{Host, Url};

/// An origin an operator named as reachable although the rule would refuse it, e.g. a local
/// test server: `http://127.0.0.1:8080`, or a range of ports `http://127.0.0.1:47100-47199` for
/// a suite that serves pages on several. A port is always explicit (review N17): a name with no
/// port would open every service on the host (a public page could then send requests to each
/// of them); [`NamedOrigin::every_port`] is for a program's own in-process test servers, never
/// for an operator's flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedOrigin {
    scheme: String,
    host: String,
    /// The ports named, inclusive; `None`: every port (only through `every_port`).
    ports: Option<(u16, u16)>,
}

/// Why a [`NamedOrigin`] was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "a named origin is `http://HOST:PORT` or `https://HOST:PORT` (or a range `:LOW-HIGH` of at most \
     {MAX_PORT_RANGE} ports) with no path: {0}"
)]
pub struct InvalidOrigin(String);

/// The most ports one named origin may span.
pub const MAX_PORT_RANGE: u16 = 1000;

impl NamedOrigin {
    /// Parses `scheme://host:port` or `scheme://host:low-high`: the port is required.
    pub fn parse(text: &str) -> Result<Self, InvalidOrigin> {
        let invalid = || InvalidOrigin(text.chars().take(100).collect());
        let trimmed = text.strip_suffix('/').unwrap_or(text);
        let (rest, ports) = trimmed.rsplit_once(':').ok_or_else(invalid)?;
        let ports = match ports.split_once('-') {
            Some((low, high)) => (low.parse::<u16>(), high.parse::<u16>()),
            None => (ports.parse::<u16>(), ports.parse::<u16>()),
        };
        let (Ok(low), Ok(high)) = ports else {
            return Err(invalid());
        };
        if low == 0 || high < low || high - low >= MAX_PORT_RANGE {
            return Err(invalid());
        }
        let mut origin = Self::every_port(rest).map_err(|_| invalid())?;
        origin.ports = Some((low, high));
        Ok(origin)
    }

    /// `scheme://host` with every port of the host: for a program's own in-process test servers
    /// on ports it cannot know in advance (the conformance suite's provider runs), never for an
    /// operator's flag ([`NamedOrigin::parse`] requires a port).
    pub fn every_port(text: &str) -> Result<Self, InvalidOrigin> {
        let invalid = || InvalidOrigin(text.chars().take(100).collect());
        let url = Url::parse(text).map_err(|_| invalid())?;
        let plain = url.username().is_empty()
            && url.password().is_none()
            && url.query().is_none()
            && url.fragment().is_none()
            && url.port().is_none()
            && matches!(url.path(), "" | "/");
        if !matches!(url.scheme(), "http" | "https") || !plain || text.trim_end_matches('/').ends_with(':') {
            return Err(invalid());
        }
        let host = url.host_str().ok_or_else(invalid)?.to_owned();
        Ok(Self {
            scheme: url.scheme().to_owned(),
            host,
            ports: None,
        })
    }

    fn covers(&self, url: &Url) -> bool {
        url.scheme() == self.scheme
            && url.host_str() == Some(self.host.as_str())
            && self.ports.is_none_or(|(low, high)| {
                url.port_or_known_default()
                    .is_some_and(|port| (low..=high).contains(&port))
            })
    }
}

impl fmt::Display for NamedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.ports {
            Some((low, high)) if low == high => write!(f, ":{low}"),
            Some((low, high)) => write!(f, ":{low}-{high}"),
            None => Ok(()),
        }
    }
}

/// Why the browser may not go somewhere. It names the scheme or the host, never the rest of
/// the URL (a path or query can carry a secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a URL at all.
    #[error("not a URL")]
    NotAUrl,
    /// A scheme other than `https:` (`file:`, `chrome:`, `data:`, `http:`, `javascript:`, ...).
    #[error("the agent's browser loads only https: pages, not {0}:")]
    Scheme(String),
    /// A loopback, private, link-local or otherwise non-public address, or a `localhost` name.
    #[error("the agent's browser does not reach {0}, a local or private address nobody named")]
    Address(String),
    /// User information in the URL (`https://user:pass@host/`): a way to smuggle a credential.
    #[error("the URL carries user information")]
    UserInfo,
}

/// The rule for one browser: `https:` to public hosts and `about:blank`, plus named origins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NavigationPolicy {
    named: Vec<NamedOrigin>,
}

impl NavigationPolicy {
    /// Only the rule: no origin named.
    pub fn https_only() -> Self {
        Self::default()
    }

    /// The rule plus `named` origins (e.g. a loopback test server).
    pub fn naming(named: impl IntoIterator<Item = NamedOrigin>) -> Self {
        Self {
            named: named.into_iter().collect(),
        }
    }

    /// Names one more origin.
    pub fn name(&mut self, origin: NamedOrigin) {
        if !self.named.contains(&origin) {
            self.named.push(origin);
        }
    }

    /// The origins named beyond the rule.
    pub fn named(&self) -> &[NamedOrigin] {
        &self.named
    }

    /// Whether a tab may be sent to `url` (a tool's navigation): `about:blank`, or a request
    /// [`Self::request`] allows.
    pub fn navigation(&self, url: &str) -> Result<(), Refused> {
        if url == "about:blank" {
            return Ok(());
        }
        self.request(url)
    }

    /// Whether the browser may send a request to `url`, for any reason (a navigation, a
    /// subresource, a redirect, a page's `fetch`).
    pub fn request(&self, url: &str) -> Result<(), Refused> {
        let url = Url::parse(url).map_err(|_| Refused::NotAUrl)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused::UserInfo);
        }
        if self.named.iter().any(|named| named.covers(&url)) {
            return Ok(());
        }
        if url.scheme() != "https" {
            return Err(Refused::Scheme(url.scheme().chars().take(32).collect()));
        }
        let public = match url.host() {
            Some(Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                name != "localhost" && !name.ends_with(".localhost")
            }
            Some(Host::Ipv4(ip)) => pap_shared::is_public_address(ip.into()),
            Some(Host::Ipv6(ip)) => pap_shared::is_public_address(ip.into()),
            None => false,
        };
        if public {
            Ok(())
        } else {
            Err(Refused::Address(
                url.host_str().unwrap_or_default().chars().take(255).collect(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_to_public_hosts_and_about_blank() {
        let policy = NavigationPolicy::https_only();
        for ok in [
            "https://shop.example/orders",
            "https://93.184.215.14/",
            "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/",
            "about:blank",
        ] {
            assert_eq!(policy.navigation(ok), Ok(()), "{ok}");
        }
        for (refused, why) in [
            ("file:///home/u/state.json", Refused::Scheme("file".into())),
            ("FILE:///etc/passwd", Refused::Scheme("file".into())),
            ("chrome://version", Refused::Scheme("chrome".into())),
            ("data:text/html,<p>x</p>", Refused::Scheme("data".into())),
            ("javascript:alert(1)", Refused::Scheme("javascript".into())),
            ("http://shop.example/", Refused::Scheme("http".into())),
            ("about:config", Refused::Scheme("about".into())),
            ("https://127.0.0.1/", Refused::Address("127.0.0.1".into())),
            // The browser spells an IPv4 address in decimal as its dotted form, and so does `url`.
            ("https://2130706433/", Refused::Address("127.0.0.1".into())),
            ("https://0x7f.1/", Refused::Address("127.0.0.1".into())),
            ("https://10.0.0.5:8443/", Refused::Address("10.0.0.5".into())),
            (
                "https://169.254.169.254/latest/meta-data",
                Refused::Address("169.254.169.254".into()),
            ),
            ("https://[::1]/", Refused::Address("[::1]".into())),
            (
                "https://[::ffff:192.168.1.1]/",
                Refused::Address("[::ffff:c0a8:101]".into()),
            ),
            ("https://localhost:9222/json", Refused::Address("localhost".into())),
            ("https://api.LOCALHOST./", Refused::Address("api.localhost.".into())),
            ("https://user:pw@shop.example/", Refused::UserInfo),
            ("not a url", Refused::NotAUrl),
        ] {
            assert_eq!(policy.navigation(refused), Err(why), "{refused}");
        }
        // about:blank is a tab's start, not something the network is asked for.
        assert_eq!(policy.request("about:blank"), Err(Refused::Scheme("about".into())));
    }

    #[test]
    fn a_named_origin_opens_exactly_itself_and_an_operator_names_its_ports() {
        let range = NamedOrigin::parse("http://127.0.0.1:41200-41299").unwrap();
        let one_port = NamedOrigin::parse("https://10.0.0.5:8443/").unwrap();
        assert_eq!(range.to_string(), "http://127.0.0.1:41200-41299");
        assert_eq!(one_port.to_string(), "https://10.0.0.5:8443");
        let policy = NavigationPolicy::naming([range, one_port]);
        for ok in [
            "http://127.0.0.1:41234/page",
            "http://127.0.0.1:41200/",
            "https://10.0.0.5:8443/x",
        ] {
            assert_eq!(policy.request(ok), Ok(()), "{ok}");
        }
        for refused in [
            "https://127.0.0.1:41234/",
            "http://127.0.0.1:41300/",
            "http://127.0.0.1/",
            "http://127.0.0.2:41234/",
            "https://10.0.0.5/",
            "file:///etc/passwd",
            "http://u:p@127.0.0.1:41234/",
        ] {
            assert!(policy.request(refused).is_err(), "{refused}");
        }
        // Review N17: no port, no name; nor a range past MAX_PORT_RANGE, nor an upside-down one.
        for invalid in [
            "http://127.0.0.1",
            "http://127.0.0.1/",
            "http://127.0.0.1:",
            "http://127.0.0.1:1-65535",
            "http://127.0.0.1:90-80",
            "http://127.0.0.1:0",
            "file:///",
            "http://h:1/path",
            "http://u@h:1",
            "ftp://h:1",
            "http://h:1?q",
            "",
        ] {
            assert!(NamedOrigin::parse(invalid).is_err(), "{invalid}");
        }
        // A program's own test servers may name every port, on purpose and in code.
        let every = NamedOrigin::every_port("http://127.0.0.1").unwrap();
        assert_eq!(NavigationPolicy::naming([every]).request("http://127.0.0.1:1/"), Ok(()));
        assert!(NamedOrigin::every_port("http://127.0.0.1:8080").is_err());
    }

    #[test]
    fn a_refusal_never_repeats_the_path_or_query() {
        let refused = NavigationPolicy::https_only()
            .navigation("file:///home/u/.ssh/id_ed25519?token=SECRET")
            .unwrap_err()
            .to_string();
        assert!(!refused.contains("ssh") && !refused.contains("SECRET"), "{refused}");
    }
}
