//! The company's own cookie for a joined browser (PAP-5-10..12).
//!
//! The value is its Session's hash tag ([`crate::slot`], 4 hex digits, so that a Redis Cluster
//! finds its binding in the Session's slot) and 32 random bytes (base64url, 43 characters); the
//! company stores only its SHA-256, bound to the Session id, and looks the Session up on every
//! request.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderValue;
use pap_shared::{Clock, Rng, SessionId, UnixTime};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::share::Owner;
use crate::slot::SlotTag;
use crate::store::{Bounded, StoreError, WhenFull};

/// The cookie's name. The `__Host-` prefix makes browsers insist on `Secure`, `Path=/` and no
/// `Domain`, so no subdomain can set or shadow it.
pub const SESSION_COOKIE_NAME: &str = "__Host-poppy_session";

/// The attributes, in the order the project documents them. No `Max-Age`, `Expires` or
/// `Domain`: the cookie has no lifetime of its own, it stands for the Session while it is live.
const SESSION_COOKIE_ATTRIBUTES: &str = "; Path=/; Secure; HttpOnly; SameSite=Lax";

/// Length of a cookie value: a hash tag of 4 hex digits, then 32 bytes in unpadded base64url.
const VALUE_LEN: usize = 4 + 43;

/// A `__Host-poppy_session` value. A bearer credential for the website: redacted `Debug`, no
/// `Display`, `Clone` or `PartialEq`, zeroized on drop.
pub struct SessionCookie(Zeroizing<String>);

impl SessionCookie {
    /// A fresh value for a browser joining `session`: the Session's hash tag and 32 random
    /// bytes.
    pub fn generate(rng: &dyn Rng, session: &SessionId) -> Self {
        let mut bytes = Zeroizing::new([0u8; 32]);
        rng.fill(bytes.as_mut());
        // A Session id the company did not mint has no tag, and no Session: its cookie is
        // never bound. It still gets a cookie of the one shape.
        let tag = SlotTag::of_session(session).unwrap_or_else(|| SlotTag::of(Owner::named("session", "untagged")));
        // Written into the zeroized string itself: no copy of the value is left in memory.
        let mut value = Zeroizing::new(String::with_capacity(VALUE_LEN));
        value.push_str(tag.as_str());
        URL_SAFE_NO_PAD.encode_string(bytes.as_ref(), &mut value);
        Self(value)
    }

    /// A value read from a `Cookie` header, if it has the shape of one this company issued.
    pub fn from_value(value: &str) -> Option<Self> {
        let shaped = pap_shared::is_base64url(value, VALUE_LEN, VALUE_LEN);
        shaped.then(|| Self(Zeroizing::new(value.to_owned())))
    }

    /// The hash the company stores instead of the value.
    pub fn hash(&self) -> CookieHash {
        CookieHash {
            hash: Sha256::digest(self.0.as_bytes()).into(),
            tag: SlotTag::of_minted(&self.0, ""),
        }
    }

    /// The `Set-Cookie` header value: exactly
    /// `__Host-poppy_session=<value>; Path=/; Secure; HttpOnly; SameSite=Lax`.
    pub fn set_cookie_header(&self) -> HeaderValue {
        let mut header =
            String::with_capacity(SESSION_COOKIE_NAME.len() + 1 + VALUE_LEN + SESSION_COOKIE_ATTRIBUTES.len());
        header.push_str(SESSION_COOKIE_NAME);
        header.push('=');
        header.push_str(&self.0);
        header.push_str(SESSION_COOKIE_ATTRIBUTES);
        let mut value =
            HeaderValue::try_from(header).expect("a base64url value and fixed attributes are visible ASCII");
        value.set_sensitive(true);
        value
    }

    /// Reads every `__Host-poppy_session` value from a request's `Cookie` headers (HTTP/2
    /// clients such as Chromium send one header per cookie).
    pub fn from_headers(headers: &http::HeaderMap) -> Vec<Self> {
        headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|h| h.to_str().ok())
            .flat_map(cookie::Cookie::split_parse)
            .filter_map(Result::ok)
            .filter(|c| c.name() == SESSION_COOKIE_NAME)
            .filter_map(|c| Self::from_value(c.value()))
            .collect()
    }

    /// The value.
    ///
    /// # Security Warning
    ///
    /// Whoever has the value is the Session on the website. Use it only to derive bound tokens
    /// (such as a CSRF token); never log, store or return it.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionCookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionCookie([redacted])")
    }
}

/// SHA-256 of a cookie value: what the company stores; and the value's hash tag, which
/// places its binding in a Redis Cluster.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CookieHash {
    hash: [u8; 32],
    tag: Option<SlotTag>,
}

impl CookieHash {
    /// The hash's bytes, for a store's key.
    #[cfg(feature = "redis")]
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.hash
    }

    /// The value's hash tag, for a store's key.
    #[cfg(feature = "redis")]
    pub(crate) fn tag(&self) -> Option<SlotTag> {
        self.tag
    }
}

impl fmt::Debug for CookieHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CookieHash(..)")
    }
}

/// What a cookie stands for: its Session, in the sign-out epoch it joined
/// ([`crate::stores::SessionRecord::epoch`]). A cookie of an earlier epoch stands for nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The Session.
    pub session: SessionId,
    /// The Session's epoch when the browser joined.
    pub epoch: u64,
}

/// How many cookies one Session keeps bound in the embedded store: a join past it ends the
/// Session's oldest cookie (that browser is logged out), so one Session joining in a loop holds
/// a fixed amount of memory.
pub const BINDINGS_PER_SESSION: usize = 16;

/// How many cookie bindings the embedded store holds at most; past it the least recently used
/// goes (its browser is logged out: safe, never a wrong Session).
pub const COOKIE_CAPACITY: u64 = 1_000_000;

/// Which Session a cookie stands for.
#[async_trait]
pub trait CookieBindings: Send + Sync + fmt::Debug {
    /// Binds `cookie` to `binding` until `until` (the Session's expiry). A store may end the
    /// Session's oldest cookies to keep its share bounded.
    async fn bind(&self, cookie: CookieHash, binding: Binding, until: UnixTime) -> Result<(), StoreError>;
    /// What `cookie` is bound to, if anything.
    async fn lookup(&self, cookie: &CookieHash) -> Result<Option<Binding>, StoreError>;
    /// Forgets `cookie` (its Session ended, or was signed out since).
    async fn forget(&self, cookie: &CookieHash) -> Result<(), StoreError>;
}

/// Cookie bindings held in this process (moka), each until its Session's expiry, at most
/// [`BINDINGS_PER_SESSION`] per Session and [`COOKIE_CAPACITY`] in all.
#[derive(Clone)]
pub struct MemoryCookieBindings {
    bindings: Arc<Bounded<CookieHash, Binding>>,
    /// Each Session's cookies, oldest first, behind a lock of their own.
    by_session: Arc<Bounded<SessionId, Arc<Mutex<VecDeque<CookieHash>>>>>,
}

impl MemoryCookieBindings {
    /// Empty bindings whose expiry reads `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            bindings: Arc::new(Bounded::new(COOKIE_CAPACITY, WhenFull::Evict, clock.clone())),
            by_session: Arc::new(Bounded::new(COOKIE_CAPACITY, WhenFull::Evict, clock)),
        }
    }

    /// How many cookies are bound.
    pub fn len(&self) -> u64 {
        self.bindings.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the bindings whose Session has expired.
    pub fn sweep(&self) {
        self.bindings.sweep();
        self.by_session.sweep();
    }
}

impl fmt::Debug for MemoryCookieBindings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryCookieBindings")
            .field("bindings", &self.bindings)
            .finish()
    }
}

#[async_trait]
impl CookieBindings for MemoryCookieBindings {
    async fn bind(&self, cookie: CookieHash, binding: Binding, until: UnixTime) -> Result<(), StoreError> {
        // The Session's list and its cap, under the list's own lock; the cookies past the cap
        // end. One lookup of the list, no copy of it.
        let cookies = self
            .by_session
            .get_or_insert(binding.session.clone(), Arc::default, until);
        {
            let mut cookies = cookies.lock().unwrap_or_else(PoisonError::into_inner);
            cookies.push_back(cookie);
            while cookies.len() > BINDINGS_PER_SESSION {
                if let Some(ended) = cookies.pop_front() {
                    self.bindings.forget(&ended);
                }
            }
        }
        self.bindings.insert(cookie, binding, until)
    }

    async fn lookup(&self, cookie: &CookieHash) -> Result<Option<Binding>, StoreError> {
        Ok(self.bindings.get(cookie))
    }

    async fn forget(&self, cookie: &CookieHash) -> Result<(), StoreError> {
        self.bindings.remove(cookie);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use pap_shared::SystemRng;

    use super::*;

    /// A Session id as the company mints them (with its owner's hash tag).
    fn session() -> SessionId {
        let owner = Owner::named("domain", "atlas.example");
        SessionId::parse(&SlotTag::of(owner).mint("ses_", &[1; 16])).unwrap()
    }

    #[derive(Debug)]
    struct Fixed;
    impl Clock for Fixed {
        fn now(&self) -> UnixTime {
            UnixTime::from_secs(1_000)
        }
    }

    #[tokio::test]
    async fn a_session_keeps_its_newest_cookies_and_the_oldest_end_first() {
        let bindings = MemoryCookieBindings::new(Arc::new(Fixed));
        let session = session();
        let cookies: Vec<SessionCookie> = (0..BINDINGS_PER_SESSION + 4)
            .map(|_| SessionCookie::generate(&SystemRng, &session))
            .collect();
        for cookie in &cookies {
            let binding = Binding {
                session: session.clone(),
                epoch: 0,
            };
            bindings
                .bind(cookie.hash(), binding, UnixTime::from_secs(2_000))
                .await
                .unwrap();
        }
        assert_eq!(
            bindings.len(),
            BINDINGS_PER_SESSION as u64,
            "one Session joining in a loop holds a fixed share"
        );
        for (i, cookie) in cookies.iter().enumerate() {
            let bound = bindings.lookup(&cookie.hash()).await.unwrap().is_some();
            assert_eq!(bound, i >= 4, "cookie {i}");
        }
    }

    #[test]
    fn set_cookie_is_exactly_as_specified() {
        let cookie = SessionCookie::generate(&SystemRng, &session());
        let header = cookie.set_cookie_header();
        let text = header.to_str().unwrap();
        assert_eq!(
            text,
            format!(
                "__Host-poppy_session={}; Path=/; Secure; HttpOnly; SameSite=Lax",
                cookie.secret()
            )
        );
        assert_eq!(cookie.secret().len(), 47);
        // It carries its Session's hash tag, and its hash the same.
        let tag = SlotTag::of_session(&session()).unwrap();
        assert!(cookie.secret().starts_with(tag.as_str()));
        assert_eq!(cookie.hash().tag, Some(tag));
        // The cookie crate reads it back with exactly these attributes and no lifetime.
        let parsed = cookie::Cookie::parse(text).unwrap();
        assert_eq!(parsed.name(), SESSION_COOKIE_NAME);
        assert_eq!(parsed.path(), Some("/"));
        assert_eq!(parsed.secure(), Some(true));
        assert_eq!(parsed.http_only(), Some(true));
        assert_eq!(parsed.same_site(), Some(cookie::SameSite::Lax));
        assert_eq!(parsed.max_age(), None);
        assert_eq!(parsed.expires(), None);
        assert_eq!(parsed.domain(), None);
        assert!(header.is_sensitive());
    }

    #[test]
    fn values_are_random_and_debug_is_redacted() {
        let a = SessionCookie::generate(&SystemRng, &session());
        let b = SessionCookie::generate(&SystemRng, &session());
        assert_ne!(a.secret(), b.secret());
        assert_ne!(a.hash(), b.hash());
        assert!(!format!("{a:?}").contains(a.secret()));
    }

    #[test]
    fn reads_every_cookie_header() {
        let a = SessionCookie::generate(&SystemRng, &session());
        let mut headers = http::HeaderMap::new();
        headers.append(http::header::COOKIE, HeaderValue::from_static("other=1"));
        headers.append(
            http::header::COOKIE,
            HeaderValue::try_from(format!("x=2; __Host-poppy_session={}", a.secret())).unwrap(),
        );
        headers.append(
            http::header::COOKIE,
            HeaderValue::from_static("__Host-poppy_session=short"),
        );
        let found = SessionCookie::from_headers(&headers);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].hash(), a.hash());
    }
}
