//! Who may use the console: the person who holds the one-time link the command printed, and
//! from then on the browser holding the cookie that link set. Nothing a device holds opens it: a
//! device's bearer is another kind of secret, and a request carrying one is refused before any
//! of this is read (the console's first guard).
//!
//! Codes and sessions live in the console's memory only (a restart signs everyone out, and the
//! command prints a new link); each is 256 random bits, kept as its SHA-256, compared by that
//! digest. A signed-in browser's forms carry a CSRF token bound to its cookie (HMAC-SHA256 of
//! the cookie under a key of this console's), so every page of one browser carries the same
//! token and no other browser's token passes. Bounded: [`CODES`] links outstanding,
//! [`SESSIONS`] browsers signed in (the least recently used goes first).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use pap_shared::{Rng, UnixTime};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// How long a link works, seconds.
pub const LINK_LIFETIME: i64 = 10 * 60;
/// How long a signed-in browser stays signed in without a request, seconds.
pub const IDLE: i64 = 12 * 60 * 60;
/// Links outstanding at once (the oldest is dropped past it).
pub const CODES: usize = 4;
/// Browsers signed in at once (the least recently used is signed out past it).
pub const SESSIONS: usize = 16;

/// A secret of the console (a link's code, a cookie, a CSRF token): shown only where it must go.
pub struct Secret(Zeroizing<String>);

impl Secret {
    fn fresh(rng: &dyn Rng) -> Self {
        use base64::Engine as _;
        let mut bytes = Zeroizing::new([0_u8; 32]);
        rng.fill(bytes.as_mut());
        Self(Zeroizing::new(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes.as_ref()),
        ))
    }

    /// `text` as a secret (a link that carries a code).
    pub(super) fn new(text: String) -> Self {
        Self(Zeroizing::new(text))
    }

    /// The secret itself, for the one place it goes (the link, the cookie, the form).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

type Digest = [u8; 32];

fn digest(secret: &str) -> Digest {
    Sha256::digest(secret.as_bytes()).into()
}

#[derive(Default)]
struct State {
    codes: Vec<(Digest, UnixTime)>,
    /// Signed-in browsers by their cookie's digest: when each was last seen.
    sessions: HashMap<Digest, UnixTime>,
}

/// The console's links and signed-in browsers.
pub struct Logins {
    state: Mutex<State>,
    /// The key CSRF tokens are made under.
    csrf_key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Logins(..)")
    }
}

impl Logins {
    /// No link given yet, nobody signed in.
    pub fn new(rng: &dyn Rng) -> Self {
        let mut csrf_key = Zeroizing::new([0_u8; 32]);
        rng.fill(csrf_key.as_mut());
        Self {
            state: Mutex::default(),
            csrf_key,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh one-time code for the link, valid for [`LINK_LIFETIME`].
    pub fn code(&self, now: UnixTime, rng: &dyn Rng) -> Secret {
        let code = Secret::fresh(rng);
        let mut state = self.state();
        state.codes.retain(|(_, expires)| now < *expires);
        if state.codes.len() >= CODES {
            state.codes.remove(0);
        }
        state.codes.push((digest(code.expose()), now.plus(LINK_LIFETIME)));
        code
    }

    /// Spends `code` (once): the cookie of a new signed-in browser, or `None` for a code that
    /// was used, expired or never given.
    pub fn redeem(&self, code: &str, now: UnixTime, rng: &dyn Rng) -> Option<Secret> {
        let presented = digest(code);
        let mut state = self.state();
        state.codes.retain(|(_, expires)| now < *expires);
        let at = state.codes.iter().position(|(d, _)| *d == presented)?;
        state.codes.remove(at);
        if state.sessions.len() >= SESSIONS
            && let Some(oldest) = state.sessions.iter().min_by_key(|(_, seen)| **seen).map(|(k, _)| *k)
        {
            state.sessions.remove(&oldest);
        }
        let cookie = Secret::fresh(rng);
        state.sessions.insert(digest(cookie.expose()), now);
        Some(cookie)
    }

    /// Whether `cookie` is a signed-in browser's (and then it is seen now).
    pub fn signed_in(&self, cookie: &str, now: UnixTime) -> bool {
        let mut state = self.state();
        state.sessions.retain(|_, seen| now < seen.plus(IDLE));
        state
            .sessions
            .get_mut(&digest(cookie))
            .map(|seen| *seen = now)
            .is_some()
    }

    /// The CSRF token the forms of the browser whose cookie is `cookie` carry.
    pub fn csrf_for(&self, cookie: &str) -> Secret {
        use base64::Engine as _;
        use hmac::Mac as _;
        let mut mac = match hmac::Hmac::<Sha256>::new_from_slice(self.csrf_key.as_ref()) {
            Ok(mac) => mac,
            // HMAC takes a key of any length.
            Err(_) => return Secret(Zeroizing::new(String::new())),
        };
        mac.update(cookie.as_bytes());
        Secret(Zeroizing::new(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()),
        ))
    }

    /// Whether `csrf` is the token of the browser whose cookie is `cookie` (compared in
    /// constant time).
    pub fn csrf_matches(&self, cookie: &str, csrf: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        let expected = self.csrf_for(cookie);
        !csrf.is_empty() && bool::from(expected.expose().as_bytes().ct_eq(csrf.as_bytes()))
    }

    /// Signs the browser whose cookie is `cookie` out.
    pub fn sign_out(&self, cookie: &str) {
        self.state().sessions.remove(&digest(cookie));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use pap_shared::SystemRng;

    #[test]
    fn a_link_signs_in_once_and_expires() {
        let logins = Logins::new(&SystemRng);
        let now = UnixTime::from_secs(1_800_000_000);
        let code = logins.code(now, &SystemRng);
        let cookie = logins.redeem(code.expose(), now, &SystemRng).unwrap();
        assert!(
            logins.redeem(code.expose(), now, &SystemRng).is_none(),
            "a link works once"
        );
        assert!(logins.signed_in(cookie.expose(), now));
        let csrf = logins.csrf_for(cookie.expose());
        assert!(logins.csrf_matches(cookie.expose(), csrf.expose()));
        assert!(!logins.csrf_matches(cookie.expose(), "forged"));
        assert!(!logins.csrf_matches(cookie.expose(), ""));
        // Another console's token for the same cookie does not pass.
        let other = Logins::new(&SystemRng);
        assert!(!logins.csrf_matches(cookie.expose(), other.csrf_for(cookie.expose()).expose()));
        assert!(!logins.signed_in("forged", now));
        let late = logins.code(now, &SystemRng);
        assert!(
            logins
                .redeem(late.expose(), now.plus(LINK_LIFETIME), &SystemRng)
                .is_none()
        );
        // Idle past the limit, the browser is signed out.
        assert!(!logins.signed_in(cookie.expose(), now.plus(IDLE)));
        assert_eq!(format!("{code:?}"), "Secret(..)");
    }

    #[test]
    fn sessions_and_links_are_bounded() {
        let logins = Logins::new(&SystemRng);
        let now = UnixTime::from_secs(1_800_000_000);
        let first = logins.code(now, &SystemRng);
        for _ in 0..CODES {
            let _ = logins.code(now, &SystemRng);
        }
        assert!(
            logins.redeem(first.expose(), now, &SystemRng).is_none(),
            "the oldest link was dropped"
        );
        let mut cookies = Vec::new();
        for i in 0..=SESSIONS {
            let code = logins.code(now, &SystemRng);
            let at = now.plus(i64::try_from(i).unwrap());
            cookies.push(logins.redeem(code.expose(), at, &SystemRng).unwrap());
        }
        let at = now.plus(100);
        assert!(
            !logins.signed_in(cookies[0].expose(), at),
            "the least recently used went"
        );
        assert!(logins.signed_in(cookies[SESSIONS].expose(), at));
    }
}
