//! Who is asking, for throttles (review N8): the TCP peer, or, when the peer is one of the
//! operator's load balancers (`trusted_proxies`), the address it forwarded in `X-Forwarded-For`.
//!
//! Only the balancers' own entries are trusted: the header is read from its right end (the
//! entry the nearest balancer appended), skipping the addresses of trusted balancers, and the
//! first other entry is the client. Anything a client wrote further left is its own claim and
//! ignored. A header that cannot be read makes the balancer itself the client (fail closed:
//! every such request shares one budget). IPv6 addresses count by their /64, which one host
//! usually holds whole, so rotating through it buys no fresh budget.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::HeaderMap;

/// The header load balancers append the client's address to.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The address a request counts against: an IPv4 address, or an IPv6 /64 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientAddress(IpAddr);

impl ClientAddress {
    /// The client of a request that arrived from `peer` with `headers`, given the operator's
    /// `trusted_proxies`.
    pub(crate) fn of(peer: Option<SocketAddr>, headers: &HeaderMap, trusted_proxies: &[IpAddr]) -> Option<Self> {
        let peer = canonical(peer?.ip());
        if !trusted_proxies.contains(&peer) {
            return Some(Self::counted(peer));
        }
        let mut forwarded = headers
            .get_all(FORWARDED_FOR)
            .iter()
            .map(|value| value.to_str().ok())
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
            .into_iter()
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        while let Some(entry) = forwarded.pop() {
            let Ok(address) = entry.parse::<IpAddr>().map(canonical) else {
                // Not an address the balancer wrote: trust nothing further left.
                break;
            };
            if !trusted_proxies.contains(&address) {
                return Some(Self::counted(address));
            }
        }
        Some(Self::counted(peer))
    }

    fn counted(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Self(address),
            IpAddr::V6(v6) => {
                let segments = v6.segments();
                let prefix = Ipv6Addr::new(segments[0], segments[1], segments[2], segments[3], 0, 0, 0, 0);
                Self(IpAddr::V6(prefix))
            }
        }
    }

    /// The text a throttle keys on (`203.0.113.7`, `2001:db8:1:2::/64`).
    pub(crate) fn key(&self) -> String {
        match self.0 {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("{v6}/64"),
        }
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`, a dual-stack socket's view) is that
/// IPv4 address.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(address: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(address.parse().unwrap(), 443))
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(FORWARDED_FOR, value.parse().unwrap());
        }
        headers
    }

    fn client(peer_address: &str, headers: &HeaderMap, proxies: &[&str]) -> String {
        let proxies: Vec<IpAddr> = proxies.iter().map(|p| p.parse().unwrap()).collect();
        ClientAddress::of(peer(peer_address), headers, &proxies).unwrap().key()
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client_whatever_the_header_says() {
        let headers = forwarded(&["198.51.100.9"]);
        assert_eq!(client("203.0.113.7", &headers, &[]), "203.0.113.7");
        assert_eq!(client("203.0.113.7", &headers, &["10.0.0.1"]), "203.0.113.7");
    }

    #[test]
    fn behind_a_trusted_balancer_the_client_is_the_last_untrusted_entry() {
        // The client claimed 1.2.3.4 itself; the balancer appended what it saw.
        let headers = forwarded(&["1.2.3.4, 198.51.100.9"]);
        assert_eq!(client("10.0.0.1", &headers, &["10.0.0.1"]), "198.51.100.9");
        // Two balancers in a row, each trusted, across two header lines.
        let headers = forwarded(&["1.2.3.4, 198.51.100.9", "10.0.0.2"]);
        assert_eq!(client("10.0.0.1", &headers, &["10.0.0.1", "10.0.0.2"]), "198.51.100.9");
    }

    #[test]
    fn a_missing_or_unreadable_header_makes_the_balancer_the_client() {
        assert_eq!(client("10.0.0.1", &HeaderMap::new(), &["10.0.0.1"]), "10.0.0.1");
        let headers = forwarded(&["1.2.3.4, not-an-address"]);
        assert_eq!(client("10.0.0.1", &headers, &["10.0.0.1"]), "10.0.0.1");
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            client("2001:db8:1:2:aaaa::1", &HeaderMap::new(), &[]),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            client("2001:db8:1:2:bbbb::9", &HeaderMap::new(), &[]),
            "2001:db8:1:2::/64"
        );
        assert_eq!(client("::ffff:203.0.113.7", &HeaderMap::new(), &[]), "203.0.113.7");
    }
}
