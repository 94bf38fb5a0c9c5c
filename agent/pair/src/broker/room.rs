//! The broker's sockets, counted by who holds them, and room made for a newcomer by closing a
//! socket of whoever holds the most (security review S6).
//!
//! A cap taken before `accept` stops the accept loop for everyone once strangers hold every
//! socket: sixteen IPv6 /64s (one /60) did, re-parking every two minutes. Here the loop always
//! accepts, and a socket past the cap is seated only by closing one of the heaviest holder:
//!
//! ```text
//!  address   IPv4 as it is, IPv6 by its /64          at most `per_address`, past it refused
//!  network   IPv4 by its /24, IPv6 by its /48        the unit the cap is shared by
//!  full      a newcomer whose network holds at least two fewer sockets than the heaviest
//!            network is seated, and that network's heaviest address loses its oldest parked
//!            socket (its oldest live pair's only if none is parked); otherwise the newcomer
//!            is refused; ties go to the lowest network and address, so the choice does not
//!            depend on a hash map's order
//! ```
//!
//! So sockets are shared max-min fairly between networks: a flood from many addresses of a
//! few networks evicts itself, and a host on a network of its own that holds fewer than the
//! heaviest keeps its sockets and gets new ones. (An attacker with more networks than the cap
//! divided by a host's sockets can still crowd it; no per-network rule stops that.) Evicted
//! sockets are told through their [`Seat`], so the task holding one ends cleanly (its route
//! freed, its counterpart told).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// The address a peer counts as for its own share (IPv6 by its /64).
pub(super) fn address_of(peer: IpAddr) -> IpAddr {
    pap_net::serve::counted_address(peer)
}

/// The network a peer's sockets are shared by when the room is full: IPv4 by its /24, IPv6 by
/// its /48 (a site's usual allocation).
pub(super) fn network_of(peer: IpAddr) -> IpAddr {
    match address_of(peer) {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, 0))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
        }
    }
}

/// Why a socket was not seated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Its address holds its share already.
    Address,
    /// The room is full and its network holds as many as any other (or nearly).
    Full,
}

/// The sockets held, by network and address, each with the signal that closes it.
#[derive(Debug)]
pub(super) struct Room {
    max: usize,
    per_address: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    next_id: u64,
    /// Sockets per network.
    networks: HashMap<IpAddr, usize>,
    /// Each address's sockets, oldest first.
    addresses: HashMap<IpAddr, VecDeque<Socket>>,
}

/// One seated socket: its id, whether it is one side of a live pair, and its eviction signal.
#[derive(Debug)]
struct Socket {
    id: u64,
    live: bool,
    evict: Arc<Notify>,
}

impl Room {
    /// At most `max` sockets, `per_address` from one address.
    pub(super) fn new(max: usize, per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            per_address: per_address.max(1),
            held: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sockets held now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().total
    }

    /// A seat for a socket from `peer`, closing the oldest socket of the heaviest holder if the
    /// room is full and `peer`'s network holds at least two fewer than it.
    pub(super) fn seat(self: &Arc<Self>, peer: IpAddr) -> Result<Seat, Refused> {
        let (address, network) = (address_of(peer), network_of(peer));
        let mut held = self.lock();
        if held.addresses.get(&address).map_or(0, VecDeque::len) >= self.per_address {
            return Err(Refused::Address);
        }
        if held.total >= self.max {
            let own = held.networks.get(&network).copied().unwrap_or(0);
            let heaviest = held
                .networks
                .iter()
                .max_by_key(|(network, count)| (**count, std::cmp::Reverse(**network)))
                .map(|(network, count)| (*network, *count));
            let Some((victim_network, count)) = heaviest.filter(|(_, count)| own + 1 < *count) else {
                return Err(Refused::Full);
            };
            debug_assert!(count > 0);
            let victim_address = held
                .addresses
                .iter()
                .filter(|(address, _)| network_of(**address) == victim_network)
                .max_by_key(|(address, sockets)| (sockets.len(), std::cmp::Reverse(**address)))
                .map(|(address, _)| *address);
            let Some(victim_address) = victim_address else {
                return Err(Refused::Full);
            };
            if let Some(evicted) = held.remove_oldest(victim_address, victim_network) {
                evicted.evict.notify_one();
            }
        }
        let id = held.next_id;
        held.next_id += 1;
        let evicted = Arc::new(Notify::new());
        held.total += 1;
        *held.networks.entry(network).or_default() += 1;
        held.addresses.entry(address).or_default().push_back(Socket {
            id,
            live: false,
            evict: evicted.clone(),
        });
        Ok(Seat {
            id,
            address,
            network,
            evicted,
            room: self.clone(),
        })
    }
}

impl Held {
    /// Forgets `address`'s oldest parked socket (of `network`), or its oldest if all are
    /// live, returning it.
    fn remove_oldest(&mut self, address: IpAddr, network: IpAddr) -> Option<Socket> {
        let sockets = self.addresses.get_mut(&address)?;
        let at = sockets.iter().position(|socket| !socket.live).unwrap_or(0);
        let oldest = sockets.remove(at)?;
        if sockets.is_empty() {
            self.addresses.remove(&address);
        }
        self.forget_one(network);
        Some(oldest)
    }

    /// Forgets socket `id` of `address`, if it is still held (an evicted one is not).
    fn remove(&mut self, id: u64, address: IpAddr, network: IpAddr) {
        let Some(sockets) = self.addresses.get_mut(&address) else {
            return;
        };
        let Some(at) = sockets.iter().position(|socket| socket.id == id) else {
            return;
        };
        sockets.remove(at);
        if sockets.is_empty() {
            self.addresses.remove(&address);
        }
        self.forget_one(network);
    }

    fn forget_one(&mut self, network: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(count) = self.networks.get_mut(&network) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.networks.remove(&network);
            }
        }
    }
}

/// One socket's place in the [`Room`], given back when dropped; [`Seat::evicted`] completes
/// when the room closed it to seat another.
#[derive(Debug)]
pub(super) struct Seat {
    id: u64,
    address: IpAddr,
    network: IpAddr,
    evicted: Arc<Notify>,
    room: Arc<Room>,
}

impl Seat {
    /// Completes once this socket has been evicted (at once if it already was).
    pub(super) async fn evicted(&self) {
        self.evicted.notified().await;
    }

    /// Marks this socket one side of a live pair: its address's parked sockets are closed
    /// before it when the room needs one.
    pub(super) fn live(&self) {
        let mut held = self.room.lock();
        if let Some(socket) = held
            .addresses
            .get_mut(&self.address)
            .and_then(|sockets| sockets.iter_mut().find(|socket| socket.id == self.id))
        {
            socket.live = true;
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.room.lock().remove(self.id, self.address, self.network);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    fn v4(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    async fn is_evicted(seat: &Seat) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(1), seat.evicted())
            .await
            .is_ok()
    }

    #[test]
    fn networks_are_ipv4_slash_24_and_ipv6_slash_48_addresses_ipv6_slash_64() {
        assert_eq!(network_of(v4("192.0.2.77")), v4("192.0.2.0"));
        assert_eq!(network_of(v4("2001:db8:1:2:3::4")), v4("2001:db8:1::"));
        assert_eq!(address_of(v4("2001:db8:1:2:3::4")), v4("2001:db8:1:2::"));
        assert_eq!(network_of(v4("::ffff:192.0.2.77")), v4("192.0.2.0"));
    }

    #[tokio::test]
    async fn a_full_room_seats_a_lighter_network_by_closing_the_heaviest_holders_oldest_socket() {
        let room = Room::new(4, 3);
        // One network fills the room from two addresses (3 and 1 sockets).
        let a1 = room.seat(v4("192.0.2.1")).unwrap();
        let a2 = room.seat(v4("192.0.2.1")).unwrap();
        let _a3 = room.seat(v4("192.0.2.1")).unwrap();
        let _b1 = room.seat(v4("192.0.2.2")).unwrap();
        assert_eq!(room.seat(v4("192.0.2.1")).err(), Some(Refused::Address));
        // Its own network gets nothing more once it is full...
        assert_eq!(room.seat(v4("192.0.2.3")).err(), Some(Refused::Full));
        // ...a newcomer's network does, from the heaviest address's oldest socket.
        let c1 = room.seat(v4("198.51.100.1")).unwrap();
        assert!(is_evicted(&a1).await);
        assert!(!is_evicted(&a2).await);
        assert_eq!(room.len(), 4);
        // Dropping the evicted seat gives back nothing twice.
        drop(a1);
        assert_eq!(room.len(), 4);
        // Networks at 3 and 1: the second newcomer (1 + 1 < 3) takes another from the first.
        let _c2 = room.seat(v4("198.51.100.1")).unwrap();
        assert!(is_evicted(&a2).await);
        // At 2 and 2, neither takes from the other.
        assert_eq!(room.seat(v4("198.51.100.2")).err(), Some(Refused::Full));
        assert_eq!(room.seat(v4("192.0.2.9")).err(), Some(Refused::Full));
        drop(c1);
        assert_eq!(room.len(), 3);
        assert!(room.seat(v4("203.0.113.1")).is_ok());
    }

    #[tokio::test]
    async fn a_parked_socket_goes_before_a_live_pairs_and_ties_go_to_the_lowest_network() {
        let room = Room::new(4, 4);
        // Two networks of two sockets each: the tie goes to the lower network, 192.0.2.0.
        let live = room.seat(v4("192.0.2.1")).unwrap();
        let parked = room.seat(v4("192.0.2.1")).unwrap();
        let other = [
            room.seat(v4("198.51.100.1")).unwrap(),
            room.seat(v4("198.51.100.1")).unwrap(),
        ];
        live.live();
        // 0 + 1 < 2: a third network is seated, and the older socket, being live, is kept.
        let _newcomer = room.seat(v4("203.0.113.1")).unwrap();
        assert!(is_evicted(&parked).await);
        assert!(!is_evicted(&live).await);
        for seat in &other {
            assert!(!is_evicted(seat).await);
        }
    }
}
