//! What is the person's in the agent's browser (AIP-7: agents never decide).
//!
//! A company the agent holds a Session with shows the person pages where they decide (an
//! operation's confirm and cancel forms, a device sign-in's approval). In the agent's browser
//! those pages load with the Session's cookie, so whatever sends their form *is* the person's
//! decision, as far as the company can tell. A guard built on which pages a tool happened to
//! see, or on a URL read before the action, loses to a restart, another process or a race
//! (security review 2026-12-04, S1 and S2). So the decision is made where the decision itself
//! happens, from facts that do not depend on what one process saw:
//!
//! - **The person's sites** come from durable state every process of the agent shares
//!   ([`PersonsSites`]: for the PAP agent, the companies its wallet on disk holds a record of),
//!   read again at every judgement.
//! - **Every request the browser sends is judged as it leaves** (the request guard of
//!   [`crate::chromium`], browser-wide CDP `Fetch` interception at the request stage, which sees
//!   each page, frame, popup and worker): a request that is not `GET`, `HEAD` or `OPTIONS` to a
//!   host at or under one of the person's sites is refused, whatever made it (a click, a key, a
//!   script, a page of another site, a redirect), unless it comes from a tab the person holds
//!   ([`Persons::hold_for_person`]) or is the agent's own join to that company
//!   ([`Persons::join_pass`]). Reading (`GET`) stays open.
//!
//! There is no window between a check and an action: the request is the action. A tab the
//! person holds is one no tool ever had a handle to (the tool host opens it for the person), so
//! no tool's late effect can ride the person's allowance. When the sites cannot be read, every
//! state-changing request to any host is refused (fail closed).
//!
//! The tool host adds typed refusals in front (scripts never run in a cookie jar that can hold
//! the person's Session; a click or fill on a state-changing form of the person's site is
//! refused in the page's own document); this module is what holds when those are raced.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How many holds and passes may stand at once (each is one tab the person holds or one join in
/// flight): past it a new one is refused, never an old one dropped.
pub const MAX_ALLOWANCES: usize = 1024;

/// Where the person's sites come from: durable state shared by every process of the agent, read
/// anew at each call.
pub trait PersonsSites: Send + Sync + fmt::Debug {
    /// The domains whose state-changing requests are the person's (`shop.example`: that host
    /// and every host under it). An error refuses every state-changing request (fail closed).
    fn domains(&self) -> std::io::Result<Vec<String>>;
}

/// A fixed list of the person's sites (a demo, a test, an operator's own list).
#[derive(Clone, Debug, Default)]
pub struct StaticSites(Vec<String>);

impl StaticSites {
    /// The sites `domains` names (lowercased, without a trailing dot).
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(domains: I) -> Self {
        Self(domains.into_iter().map(|d| normalized(d.as_ref())).collect())
    }
}

impl PersonsSites for StaticSites {
    fn domains(&self) -> std::io::Result<Vec<String>> {
        Ok(self.0.clone())
    }
}

fn normalized(domain: &str) -> String {
    domain.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` is `domain` or a host under it.
pub fn host_is_under(host: &str, domain: &str) -> bool {
    let host = host.trim_end_matches('.');
    if domain.is_empty() || host.len() < domain.len() {
        return false;
    }
    let (head, tail) = host.split_at(host.len() - domain.len());
    tail.eq_ignore_ascii_case(domain) && (head.is_empty() || head.ends_with('.'))
}

/// Methods that read: never the person's decision (PAP §5: a decision is a form posted with a
/// CSRF token; `OPTIONS` is a CORS preflight, whose request proper is judged on its own).
pub fn is_safe_method(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS"]
        .iter()
        .any(|safe| method.eq_ignore_ascii_case(safe))
}

/// What the agent's browser may send on the person's behalf: the person's sites, the tabs the
/// person holds, the joins in flight. Cheap to clone; every clone is the same table.
#[derive(Clone)]
pub struct Persons {
    inner: Arc<Inner>,
}

struct Inner {
    sites: Arc<dyn PersonsSites>,
    allowances: Mutex<HashMap<u64, Allowance>>,
    next: AtomicU64,
    refused: AtomicU64,
}

/// What one hold or pass lets through.
#[derive(Clone, Debug)]
enum Allowance {
    /// Every request of this frame (a tab's main frame: its target id).
    Person { frame: String },
    /// A `POST` of this frame to exactly this URL: the agent's own join.
    Join { frame: String, endpoint: String },
}

impl fmt::Debug for Persons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Persons")
            .field("sites", &self.inner.sites)
            .field("refused", &self.refused())
            .finish_non_exhaustive()
    }
}

impl Default for Persons {
    fn default() -> Self {
        Self::none()
    }
}

/// How the guard answers one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It goes.
    Allow,
    /// It does not: why, naming the rule and the host, never the rest of the URL.
    Refuse(String),
}

impl Persons {
    /// No site is the person's: every request goes (a browser that holds no one's Session).
    pub fn none() -> Self {
        Self::new(Arc::new(StaticSites::default()))
    }

    /// The person's sites as `sites` reads them.
    pub fn new(sites: Arc<dyn PersonsSites>) -> Self {
        Self {
            inner: Arc::new(Inner {
                sites,
                allowances: Mutex::default(),
                next: AtomicU64::new(1),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// The person's sites now.
    pub fn domains(&self) -> std::io::Result<Vec<String>> {
        Ok(self.inner.sites.domains()?.iter().map(|d| normalized(d)).collect())
    }

    /// Whether `host` is on one of the person's sites now (an error when they cannot be read:
    /// the caller refuses).
    pub fn covers(&self, host: &str) -> std::io::Result<bool> {
        Ok(self.domains()?.iter().any(|d| host_is_under(host, d)))
    }

    /// Judges one request the browser is about to send: `method` to `url` from the frame
    /// `frame` (CDP's `frameId`; a tab's main frame has its target's id), whose `Origin` header
    /// (the page that made it) is `origin`.
    ///
    /// A tab the person holds sends to the person's sites only what a page of the person's sites
    /// made: the hold is the tab's, and the tab may have gone on to another site since (a
    /// redirect, a link the person followed on the live picture), whose page could post to the
    /// person's site as the person (security review of the console, second reading). Without an
    /// `Origin`, or with `null`, it is refused.
    pub fn judge(&self, method: &str, url: &str, frame: &str, origin: Option<&str>) -> Verdict {
        if is_safe_method(method) {
            return Verdict::Allow;
        }
        let Some(host) = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned)) else {
            return Verdict::Allow;
        };
        let domains = match self.domains() {
            Ok(domains) => domains,
            Err(error) => {
                self.inner.refused.fetch_add(1, Ordering::Relaxed);
                return Verdict::Refuse(format!(
                    "AIP-7: the person's sites could not be read ({}); no state-changing request goes",
                    error.kind()
                ));
            }
        };
        if !domains.iter().any(|d| host_is_under(&host, d)) {
            return Verdict::Allow;
        }
        let from_persons_site = origin
            .and_then(|o| url::Url::parse(o).ok())
            .and_then(|o| o.host_str().map(str::to_owned))
            .is_some_and(|made_by| domains.iter().any(|d| host_is_under(&made_by, d)));
        let allowed = self.allowances().values().any(|allowance| match allowance {
            Allowance::Person { frame: held } => held == frame && from_persons_site,
            Allowance::Join { frame: held, endpoint } => {
                held == frame && method.eq_ignore_ascii_case("POST") && endpoint == url
            }
        });
        if allowed {
            return Verdict::Allow;
        }
        self.inner.refused.fetch_add(1, Ordering::Relaxed);
        Verdict::Refuse(format!(
            "AIP-7: a {method} to {host}, a site where the person decides, from a tab the person does not hold"
        ))
    }

    /// How many requests this table refused (for the operator and the tests).
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Lets every request of the tab whose main frame is `frame` through, until the hold drops.
    /// Only for a tab no tool can reach (the tool host's person's tabs, the operator's own
    /// join): a tab a tool held could still carry that tool's late effect.
    pub fn hold_for_person(&self, frame: impl Into<String>) -> Result<PersonsHold, AllowancesFull> {
        self.allow(Allowance::Person { frame: frame.into() })
    }

    /// Lets one kind of request through, until the pass drops: a `POST` of the tab whose main
    /// frame is `frame` to exactly `endpoint`, the company's browser-session endpoint (the
    /// agent's own join; it joins a Session and decides nothing).
    pub fn join_pass(&self, frame: impl Into<String>, endpoint: &url::Url) -> Result<PersonsHold, AllowancesFull> {
        self.allow(Allowance::Join {
            frame: frame.into(),
            endpoint: endpoint.as_str().to_owned(),
        })
    }

    /// Whether the tab whose main frame is `frame` is held by the person now.
    pub fn is_held(&self, frame: &str) -> bool {
        self.allowances()
            .values()
            .any(|a| matches!(a, Allowance::Person { frame: held } if held == frame))
    }

    fn allow(&self, allowance: Allowance) -> Result<PersonsHold, AllowancesFull> {
        let mut allowances = self.allowances();
        if allowances.len() >= MAX_ALLOWANCES {
            return Err(AllowancesFull);
        }
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        allowances.insert(id, allowance);
        Ok(PersonsHold {
            persons: self.clone(),
            id,
        })
    }

    fn allowances(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Allowance>> {
        // Every critical section is one map operation.
        self.inner
            .allowances
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A hold of the person's (or a join's pass): what it lets through ends when it drops.
#[must_use = "the allowance ends when this is dropped"]
pub struct PersonsHold {
    persons: Persons,
    id: u64,
}

impl fmt::Debug for PersonsHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersonsHold").field("id", &self.id).finish()
    }
}

impl Drop for PersonsHold {
    fn drop(&mut self) {
        self.persons.allowances().remove(&self.id);
    }
}

/// [`MAX_ALLOWANCES`] holds and passes stand already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the browser holds {MAX_ALLOWANCES} tabs for the person and joins already")]
pub struct AllowancesFull;

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> Persons {
        Persons::new(Arc::new(StaticSites::new(["Shop.Example."])))
    }

    #[test]
    fn a_state_changing_request_to_the_persons_site_is_refused_and_reading_is_not() {
        let persons = shop();
        for url in [
            "https://shop.example/operations/op_1",
            "https://www.shop.example/anything",
            "https://SHOP.example./x",
            "https://shop.example:8443/operations/op_1",
        ] {
            for method in ["POST", "PUT", "PATCH", "DELETE", "post", "PROPFIND"] {
                assert!(
                    matches!(persons.judge(method, url, "F1", SHOP), Verdict::Refuse(_)),
                    "{method} {url}"
                );
            }
            for method in ["GET", "HEAD", "OPTIONS", "get"] {
                assert_eq!(persons.judge(method, url, "F1", SHOP), Verdict::Allow, "{method} {url}");
            }
        }
        for other in [
            "https://notshop.example/operations/op_1",
            "https://shop.example.evil.example/operations/op_1",
            "https://example/x",
            "data:text/html,x",
        ] {
            assert_eq!(persons.judge("POST", other, "F1", SHOP), Verdict::Allow, "{other}");
        }
        assert_eq!(persons.refused(), 4 * 6);
        assert_eq!(
            Persons::none().judge("POST", "https://shop.example/x", "F1", SHOP),
            Verdict::Allow
        );
    }

    /// The `Origin` of a page of the shop.
    const SHOP: Option<&str> = Some("https://shop.example");

    #[test]
    fn a_held_tab_sends_to_the_persons_site_only_what_a_page_of_the_persons_site_made() {
        let persons = shop();
        let op = "https://shop.example/operations/op_1";
        let _held = persons.hold_for_person("PERSON").unwrap();
        assert_eq!(persons.judge("POST", op, "PERSON", SHOP), Verdict::Allow);
        assert_eq!(
            persons.judge("POST", op, "PERSON", Some("https://www.shop.example")),
            Verdict::Allow
        );
        for other in [Some("https://evil.example"), Some("null"), None, Some("not a url")] {
            assert!(
                matches!(persons.judge("POST", op, "PERSON", other), Verdict::Refuse(_)),
                "{other:?}"
            );
        }
    }

    #[test]
    fn the_persons_tab_and_the_agents_join_pass_and_nothing_else_does() {
        let persons = shop();
        let op = "https://shop.example/operations/op_1";
        let endpoint = url::Url::parse("https://shop.example/poppy/browser-session").unwrap();
        let held = persons.hold_for_person("PERSON").unwrap();
        let pass = persons.join_pass("JOIN", &endpoint).unwrap();
        assert!(persons.is_held("PERSON") && !persons.is_held("JOIN"));
        assert_eq!(persons.judge("POST", op, "PERSON", SHOP), Verdict::Allow);
        assert_eq!(persons.judge("POST", endpoint.as_str(), "JOIN", SHOP), Verdict::Allow);
        // A join's pass is for its endpoint and method only, in its own tab only.
        assert!(matches!(persons.judge("POST", op, "JOIN", SHOP), Verdict::Refuse(_)));
        assert!(matches!(
            persons.judge("PUT", endpoint.as_str(), "JOIN", SHOP),
            Verdict::Refuse(_)
        ));
        assert!(matches!(
            persons.judge("POST", endpoint.as_str(), "TOOL", SHOP),
            Verdict::Refuse(_)
        ));
        assert!(matches!(persons.judge("POST", op, "TOOL", SHOP), Verdict::Refuse(_)));
        drop((held, pass));
        assert!(!persons.is_held("PERSON"));
        assert!(matches!(persons.judge("POST", op, "PERSON", SHOP), Verdict::Refuse(_)));
        assert!(matches!(
            persons.judge("POST", endpoint.as_str(), "JOIN", SHOP),
            Verdict::Refuse(_)
        ));
    }

    #[derive(Debug)]
    struct Unreadable;

    impl PersonsSites for Unreadable {
        fn domains(&self) -> std::io::Result<Vec<String>> {
            Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
        }
    }

    #[test]
    fn sites_that_cannot_be_read_refuse_every_state_changing_request() {
        let persons = Persons::new(Arc::new(Unreadable));
        assert!(matches!(
            persons.judge("POST", "https://anywhere.example/", "F1", SHOP),
            Verdict::Refuse(_)
        ));
        assert_eq!(
            persons.judge("GET", "https://anywhere.example/", "F1", SHOP),
            Verdict::Allow
        );
        assert!(persons.covers("anywhere.example").is_err());
    }

    #[test]
    fn allowances_are_bounded_and_a_full_table_refuses_rather_than_forgets() {
        let persons = shop();
        let holds: Vec<PersonsHold> = (0..MAX_ALLOWANCES)
            .map(|i| persons.hold_for_person(format!("F{i}")).unwrap())
            .collect();
        assert_eq!(persons.hold_for_person("one more").unwrap_err(), AllowancesFull);
        assert!(persons.is_held("F0"));
        drop(holds);
        let _room = persons.hold_for_person("now there is room").unwrap();
    }

    #[test]
    fn a_host_is_under_a_domain_only_on_a_label_boundary() {
        assert!(host_is_under("shop.example", "shop.example"));
        assert!(host_is_under("a.b.shop.example", "shop.example"));
        assert!(host_is_under("shop.example.", "shop.example"));
        assert!(!host_is_under("evilshop.example", "shop.example"));
        assert!(!host_is_under("example", "shop.example"));
        assert!(!host_is_under("shop.example", ""));
    }
}
