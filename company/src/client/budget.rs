//! Who may make the resolver fetch, and how much at once (security review N1).
//!
//! A fetch is triggered by strangers (an unauthenticated token request names any `client_id`),
//! and a slow agent site holds its fetch for up to the entry's deadline. One pool for all was
//! one stranger's to hold: naming slow documents under many names, seven requests a second kept
//! every permit taken, and every agent whose keys were not cached was refused. So a fetch takes
//! three slots at once, or is refused at once ([`ResolveError::Busy`]), waiting for none:
//!
//! - one of [`ResolverConfig::max_in_flight`] for all fetches;
//! - for a *first contact* (a `client_id` no person let in here: see `ClientKeys::vouch`;
//!   answering a fetch is not enough, review S3), also one of
//!   [`ResolverConfig::max_first_contacts_in_flight`]: strangers hold at most that share, and
//!   the rest is kept for agents it knows (a refetch when their documents expire, a rotated
//!   key, an agent that serves `no-store`);
//! - one of [`ResolverConfig::max_in_flight_per_domain`] for the `client_id`'s registrable
//!   domain: whoever holds one domain (and a wildcard certificate for it) names any number of
//!   clients under it, and holds that many slots, no more;
//! - when the request that triggered it was made inside [`as_requester`] (the reference company
//!   does so for every request, with the client's address), one of
//!   [`ResolverConfig::max_in_flight_per_requester`] for that address: one host naming clients
//!   under many domains holds that many, no more.
//!
//! [`ResolverConfig::max_in_flight`]: super::ResolverConfig::max_in_flight
//! [`ResolverConfig::max_first_contacts_in_flight`]: super::ResolverConfig::max_first_contacts_in_flight
//! [`ResolverConfig::max_in_flight_per_domain`]: super::ResolverConfig::max_in_flight_per_domain
//! [`ResolverConfig::max_in_flight_per_requester`]: super::ResolverConfig::max_in_flight_per_requester

use std::sync::Arc;

use pap_net::shares::{PerKey, Share};
use std::time::Duration;

use pap_shared::ClientId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ResolveError;

/// How many `client_id`s the resolver remembers as known (vouched for: a person let them in),
/// at most (the least used are forgotten first: such a client counts as a first contact
/// again, no worse). A stranger cannot add to it (review S3); an account holder can, at most
/// [`VOUCHES_PER_ACCOUNT`] clients. Held in the process: empty after
/// a restart. An agent whose users only join signed-out Sessions is never known here.
pub const KNOWN_CLIENTS: u64 = 100_000;
/// How many clients one account makes known at most (review S3): a person uses an agent or
/// a few; an account holder scripting sign-ins for a fleet of clients gets 8 known, no more.
pub const VOUCHES_PER_ACCOUNT: usize = 8;
/// How long a known `client_id` stays known without being vouched for again: longer than a
/// Session lives, so an agent joining a signed-in Session this process vouched for stays known.
const KNOWN_FOR: Duration = Duration::from_secs(7 * 24 * 3_600);

tokio::task_local! {
    /// Who made the request being served: the key of its client address.
    static REQUESTER: String;
}

/// Runs `request` as one from `address` (a key for the client: an IPv4 address, an IPv6 /64):
/// every fetch of agents' documents it makes counts against that address's share.
pub async fn as_requester<F: Future>(address: String, request: F) -> F::Output {
    REQUESTER.scope(address, request).await
}

/// The key of the address the request being served came from, when the app said
/// ([`as_requester`]).
pub(crate) fn requester() -> Option<String> {
    REQUESTER.try_with(Clone::clone).ok()
}

/// The resolver's fetch slots.
#[derive(Debug)]
pub(super) struct FetchBudget {
    all: Arc<Semaphore>,
    first_contacts: Arc<Semaphore>,
    /// Slots per registrable domain of the `client_id`.
    domains: PerKey<String>,
    /// Slots per requester address.
    requesters: PerKey<String>,
    known: moka::sync::Cache<ClientId, ()>,
    /// The clients each account vouched for (at most [`VOUCHES_PER_ACCOUNT`]).
    by_account: moka::sync::Cache<String, Arc<std::sync::Mutex<Vec<ClientId>>>>,
}

/// Which share ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Exhausted {
    All,
    FirstContacts,
    Domain,
    Requester,
}

impl Exhausted {
    /// A label for the busy counter.
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::FirstContacts => "first_contacts",
            Self::Domain => "domain",
            Self::Requester => "requester",
        }
    }
}

/// The slots one fetch holds until it is dropped.
#[derive(Debug)]
pub(super) struct FetchSlots {
    _all: OwnedSemaphorePermit,
    _first_contact: Option<OwnedSemaphorePermit>,
    #[cfg_attr(not(test), allow(dead_code, reason = "held for its Drop; read by the tests"))]
    domain: Share<String>,
    _requester: Option<Share<String>>,
}

impl FetchSlots {
    /// The registrable domain the fetch counts against.
    #[cfg(test)]
    fn domain(&self) -> &str {
        self.domain.key()
    }
}

impl FetchBudget {
    pub(super) fn new(all: usize, first_contacts: usize, per_domain: usize, per_requester: usize) -> Self {
        Self {
            all: Arc::new(Semaphore::new(all)),
            first_contacts: Arc::new(Semaphore::new(first_contacts)),
            domains: PerKey::new(per_domain),
            requesters: PerKey::new(per_requester),
            known: moka::sync::Cache::builder()
                .max_capacity(KNOWN_CLIENTS)
                .time_to_idle(KNOWN_FOR)
                .build(),
            by_account: moka::sync::Cache::builder()
                .max_capacity(KNOWN_CLIENTS)
                .time_to_idle(KNOWN_FOR)
                .build(),
        }
    }

    /// The slots for a fetch of `client_id`'s documents, or which share is exhausted.
    pub(super) fn take(&self, client_id: &ClientId) -> Result<FetchSlots, Exhausted> {
        let domain = pap_shared::registrable_domain(client_id.url().domain().unwrap_or_default());
        // Slots taken first are given back on any refusal below (they drop).
        let domain = self.domains.take(domain).ok_or(Exhausted::Domain)?;
        let requester = match requester() {
            Some(address) => Some(self.requesters.take(address).ok_or(Exhausted::Requester)?),
            None => None,
        };
        let first_contact = if self.known.contains_key(client_id) {
            None
        } else {
            let permit = self.first_contacts.clone().try_acquire_owned();
            Some(permit.map_err(|_| Exhausted::FirstContacts)?)
        };
        let all = self.all.clone().try_acquire_owned().map_err(|_| Exhausted::All)?;
        Ok(FetchSlots {
            _all: all,
            _first_contact: first_contact,
            domain,
            _requester: requester,
        })
    }

    /// Remembers that the company accepted `client_id`'s work for `account` (see
    /// `ClientKeys::vouch`): its next fetches are no first contact. Past
    /// [`VOUCHES_PER_ACCOUNT`] clients an account's word makes no new client known (a client
    /// already known stays known).
    pub(super) fn vouched(&self, client_id: &ClientId, account: &str) {
        let vouched = self.by_account.get_with(account.to_owned(), Arc::default);
        let mut clients = vouched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !clients.contains(client_id) {
            if clients.len() >= VOUCHES_PER_ACCOUNT {
                tracing::info!(%client_id, "an account past its vouches: the client stays a first contact");
                return;
            }
            clients.push(client_id.clone());
        }
        self.known.insert(client_id.clone(), ());
    }

    /// Whether the company vouched for `client_id` (it is no first contact).
    pub(super) fn is_known(&self, client_id: &ClientId) -> bool {
        self.known.contains_key(client_id)
    }

    /// Fetch slots free now, over all fetches.
    pub(super) fn available(&self) -> usize {
        self.all.available_permits()
    }
}

impl From<Exhausted> for ResolveError {
    fn from(_: Exhausted) -> Self {
        ResolveError::Busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(host: &str) -> ClientId {
        ClientId::parse(&format!("https://{host}/agent.json")).unwrap()
    }

    #[test]
    fn one_domain_holds_at_most_its_share_whatever_the_names_under_it() {
        let budget = FetchBudget::new(32, 16, 2, 4);
        let a = budget.take(&client("r1.atk.example")).unwrap();
        let _b = budget.take(&client("r2.atk.example")).unwrap();
        assert_eq!(a.domain(), "atk.example");
        assert_eq!(budget.take(&client("r3.atk.example")).unwrap_err(), Exhausted::Domain);
        assert!(budget.take(&client("atlas.example")).is_ok(), "another domain");
        drop(a);
        assert!(budget.take(&client("r3.atk.example")).is_ok(), "a slot given back");
    }

    #[test]
    fn first_contacts_hold_at_most_their_share_and_known_clients_keep_the_rest() {
        let budget = FetchBudget::new(4, 2, 1, 4);
        let known = client("atlas.example");
        budget.vouched(&known, "acct_ada");
        let strangers: Vec<_> = (0..2)
            .map(|i| budget.take(&client(&format!("s{i}.example"))).unwrap())
            .collect();
        assert_eq!(
            budget.take(&client("s9.example")).unwrap_err(),
            Exhausted::FirstContacts
        );
        let _known = budget.take(&known).unwrap();
        assert_eq!(budget.available(), 1);
        drop(strangers);
        assert_eq!(budget.available(), 3);
    }

    #[test]
    fn a_refused_fetch_gives_its_domain_slot_back() {
        let budget = FetchBudget::new(1, 1, 1, 4);
        let _held = budget.take(&client("one.example")).unwrap();
        assert_eq!(
            budget.take(&client("two.example")).unwrap_err(),
            Exhausted::FirstContacts
        );
        assert_eq!(budget.domains.keys(), 1, "two.example holds nothing");
    }

    #[tokio::test]
    async fn one_requester_holds_at_most_its_share_whatever_the_domains_it_names() {
        let budget = FetchBudget::new(32, 16, 2, 2);
        let held = as_requester("203.0.113.66".into(), async {
            let held: Vec<_> = (0..2)
                .map(|i| budget.take(&client(&format!("d{i}.example"))).unwrap())
                .collect();
            assert_eq!(budget.take(&client("d9.example")).unwrap_err(), Exhausted::Requester);
            held
        })
        .await;
        as_requester("198.51.100.7".into(), async {
            assert!(budget.take(&client("d9.example")).is_ok(), "another address");
        })
        .await;
        assert!(
            budget.take(&client("d8.example")).is_ok(),
            "no requester, no such share"
        );
        drop(held);
    }

    #[test]
    fn one_account_makes_at_most_its_vouches_known() {
        let budget = FetchBudget::new(32, 16, 2, 4);
        for i in 0..VOUCHES_PER_ACCOUNT {
            budget.vouched(&client(&format!("c{i}.example")), "acct_fleet");
        }
        let one_more = client("c99.example");
        budget.vouched(&one_more, "acct_fleet");
        assert!(!budget.is_known(&one_more), "past the account's vouches");
        assert!(budget.is_known(&client("c0.example")));
        budget.vouched(&client("c0.example"), "acct_fleet");
        assert!(
            budget.is_known(&client("c0.example")),
            "vouching again for one of its own"
        );
        budget.vouched(&one_more, "acct_ada");
        assert!(budget.is_known(&one_more), "another account's word");
    }
}
