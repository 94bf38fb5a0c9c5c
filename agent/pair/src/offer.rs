//! AIP-59 §1: the offer a daemon mints and a client checks before it opens any socket.
//!
//! ```text
//!  agentproto://pair?v=2&rv=<ws(s) URL>&id=<fingerprint>&pk=<X25519 SPKI>&sk=<Ed25519 SPKI>&s=<secret>&exp=<unix s>
//!  https://<pair page>#<the same parameters>         (the web form: the offer in the fragment)
//! ```
//!
//! Keys travel as base64url without padding; the parameters are form-encoded, as the
//! reference's `URLSearchParams` writes them.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use zeroize::Zeroizing;

use crate::PairError;
use crate::keys::{Ed25519Public, X25519Public, is_fingerprint};

/// The offer format's version.
pub const OFFER_VERSION: &str = "2";
const CANONICAL_PREFIX: &str = "agentproto://pair?";

/// A checked offer.
#[derive(Clone, PartialEq, Eq)]
pub struct Offer {
    /// The broker both sides dial (`ws:` or `wss:`).
    pub rendezvous: String,
    /// The daemon's fingerprint, equal to its X25519 key's.
    pub fingerprint: String,
    /// The daemon's X25519 key (`pk`).
    pub daemon_x25519: X25519Public,
    /// The daemon's Ed25519 key (`sk`).
    pub daemon_ed25519: Ed25519Public,
    /// The one-time secret (`s`): it derives the offer's route and auth tokens and is never
    /// sent anywhere itself.
    pub secret: Zeroizing<String>,
    /// When the offer expires, unix seconds.
    pub exp: i64,
}

impl std::fmt::Debug for Offer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offer")
            .field("rendezvous", &self.rendezvous)
            .field("fingerprint", &self.fingerprint)
            .field("secret", &"[redacted]")
            .field("exp", &self.exp)
            .finish_non_exhaustive()
    }
}

/// Whether `url`'s host is this machine's loopback (`127.0.0.0/8`, `::1`, `localhost`).
fn on_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Whether a pairing may use the broker at `rendezvous`: `wss:` anywhere, `ws:` only on this
/// machine's loopback. Off loopback, plain WebSocket shows every route to an on-path observer,
/// who can squat it or replay a day's hello (security review S4); every command that dials,
/// mints or reads an offer asks this.
pub fn rendezvous_allowed(rendezvous: &str) -> bool {
    url::Url::parse(rendezvous).is_ok_and(|url| match url.scheme() {
        "wss" => url.host().is_some(),
        "ws" => on_loopback(&url),
        _ => false,
    })
}

impl Offer {
    /// The parameters, form-encoded in the reference's order.
    fn query(&self) -> Zeroizing<String> {
        Zeroizing::new(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("v", OFFER_VERSION)
                .append_pair("rv", &self.rendezvous)
                .append_pair("id", &self.fingerprint)
                .append_pair("pk", &URL_SAFE_NO_PAD.encode(self.daemon_x25519.to_spki()))
                .append_pair("sk", &URL_SAFE_NO_PAD.encode(self.daemon_ed25519.to_spki()))
                .append_pair("s", &self.secret)
                .append_pair("exp", &self.exp.to_string())
                .finish(),
        )
    }

    /// The canonical form, `agentproto://pair?…`.
    pub fn to_url(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("{CANONICAL_PREFIX}{}", self.query().as_str()))
    }

    /// The web form: `template` with `{fp}` replaced by the fingerprint, then the parameters
    /// in its fragment (§1.2, §1.3). The template must be an `https` URL without a fragment;
    /// `http` only on this machine's loopback (a page served here, which browsers treat as a
    /// secure context), `localhost` and its subdomains included: `http://{fp}.localhost:PORT/pair`
    /// gives each host an origin of its own (§5.8), which browsers resolve to loopback.
    pub fn to_web_url(&self, template: &str) -> Result<Zeroizing<String>, PairError> {
        let page = template.replace("{fp}", &self.fingerprint);
        let parsed = url::Url::parse(&page).map_err(|_| PairError::MalformedOffer("pair page"))?;
        let local = on_loopback(&parsed)
            || parsed
                .host_str()
                .is_some_and(|name| name.to_ascii_lowercase().ends_with(".localhost"));
        let secure = parsed.scheme() == "https" || (parsed.scheme() == "http" && local);
        if !secure || parsed.fragment().is_some() || page.contains('#') {
            return Err(PairError::MalformedOffer("pair page"));
        }
        Ok(Zeroizing::new(format!("{page}#{}", self.query().as_str())))
    }

    /// Checks an offer in either form (§1.4) at `now` (unix seconds): every parameter present
    /// once and valid, `rv` a `ws:`/`wss:` URL, `id` the fingerprint of `pk`, `exp` not passed.
    /// A `v=1` offer is [`PairError::Outdated`].
    pub fn parse(text: &str, now: i64) -> Result<Self, PairError> {
        let text = text.trim();
        let query = if let Some(query) = text.strip_prefix(CANONICAL_PREFIX) {
            query
        } else if text.starts_with("https://") || text.starts_with("http://") {
            text.split_once('#')
                .map(|(_, fragment)| fragment)
                .filter(|fragment| !fragment.is_empty())
                .ok_or(PairError::MalformedOffer("no offer in the fragment"))?
        } else {
            return Err(PairError::MalformedOffer("not an agentproto://pair offer"));
        };
        let mut params: Vec<(String, Zeroizing<String>)> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            if params.iter().any(|(held, _)| *held == name) {
                return Err(PairError::MalformedOffer("a parameter given twice"));
            }
            params.push((name.into_owned(), Zeroizing::new(value.into_owned())));
        }
        let get = |name: &'static str| {
            params
                .iter()
                .find(|(held, _)| held == name)
                .map(|(_, value)| value.as_str())
                .filter(|value| !value.is_empty())
                .ok_or(PairError::MalformedOffer(name))
        };
        match get("v")? {
            OFFER_VERSION => {}
            "1" => return Err(PairError::Outdated),
            _ => return Err(PairError::MalformedOffer("v")),
        }
        let rendezvous = get("rv")?;
        if !rendezvous_allowed(rendezvous) {
            return Err(PairError::MalformedOffer("rv"));
        }
        let fingerprint = get("id")?;
        if !is_fingerprint(fingerprint) {
            return Err(PairError::MalformedOffer("id"));
        }
        let key = |name: &'static str| {
            let text = get(name)?;
            if !is_base64url(text) {
                return Err(PairError::MalformedOffer(name));
            }
            URL_SAFE_NO_PAD
                .decode(text)
                .map_err(|_| PairError::MalformedOffer(name))
        };
        let daemon_x25519 = X25519Public::from_spki(&key("pk")?).map_err(|_| PairError::MalformedOffer("pk"))?;
        let daemon_ed25519 = Ed25519Public::from_spki(&key("sk")?).map_err(|_| PairError::MalformedOffer("sk"))?;
        let secret = get("s")?;
        if !is_base64url(secret) {
            return Err(PairError::MalformedOffer("s"));
        }
        let exp: i64 = get("exp")?
            .parse()
            .ok()
            .filter(|exp| *exp > 0)
            .ok_or(PairError::MalformedOffer("exp"))?;
        if daemon_x25519.fingerprint() != fingerprint {
            return Err(PairError::MalformedOffer("id is not the fingerprint of pk"));
        }
        if exp <= now {
            return Err(PairError::OfferExpired);
        }
        Ok(Self {
            rendezvous: rendezvous.to_owned(),
            fingerprint: fingerprint.to_owned(),
            daemon_x25519,
            daemon_ed25519,
            secret: Zeroizing::new(secret.to_owned()),
            exp,
        })
    }
}

fn is_base64url(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
