//! AIP-59 §2 and §3.4: every pairing secret yields a route token (the only value a broker
//! sees) and an auth token (only ever inside the sealed hello), by HKDF-SHA256 under distinct
//! labels, so a broker that logs every route still cannot compute an auth token; and the pair
//! root both peers derive from a first-contact handshake.

use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use zeroize::Zeroizing;

use crate::PairError;

const OFFER_SALT: &[u8] = b"agentproto/pair-offer";
const ROUTE_INFO: &[u8] = b"agentproto/rv-route";
const AUTH_INFO: &[u8] = b"agentproto/rv-auth";
const ROUTE_SALT: &[u8] = b"agentproto/rv-route-salt";
const AUTH_SALT: &[u8] = b"agentproto/rv-auth-salt";
const PAIR_ROOT_INFO: &[u8] = b"agentproto/pair-root";
/// A route token's length: 16 bytes, 22 base64url characters.
const ROUTE_LEN: usize = 16;
/// An auth token's length: 32 bytes, 43 base64url characters.
const AUTH_LEN: usize = 32;
const MS_PER_DAY: i64 = 86_400_000;

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-SHA256 of `ikm` with `salt` and `info`, `len` bytes.
pub(crate) fn hkdf(ikm: &[u8], salt: &[u8], info: &[&[u8]], len: usize) -> Result<Zeroizing<Vec<u8>>, PairError> {
    let mut out = Zeroizing::new(vec![0_u8; len]);
    Salt::new(HKDF_SHA256, salt)
        .extract(ikm)
        .expand(info, Len(len))
        .and_then(|okm| okm.fill(&mut out))
        .map_err(|_| PairError::Crypto)?;
    Ok(out)
}

/// A route token and its auth token, both base64url without padding.
#[derive(Clone, PartialEq, Eq)]
pub struct RouteAuth {
    /// The meeting point on the broker (`?t=`): authenticates nothing.
    pub route: String,
    /// The proof, sealed in the hello and compared in constant time by the daemon.
    pub auth: Zeroizing<String>,
}

impl std::fmt::Debug for RouteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteAuth")
            .field("route", &self.route)
            .field("auth", &"[redacted]")
            .finish()
    }
}

/// The offer's tokens, from its secret `s` exactly as the URL carries it.
pub fn offer_tokens(secret: &str) -> Result<RouteAuth, PairError> {
    let route = hkdf(secret.as_bytes(), OFFER_SALT, &[ROUTE_INFO], ROUTE_LEN)?;
    let auth = hkdf(secret.as_bytes(), OFFER_SALT, &[AUTH_INFO], AUTH_LEN)?;
    Ok(RouteAuth {
        route: URL_SAFE_NO_PAD.encode(route.as_slice()),
        auth: Zeroizing::new(URL_SAFE_NO_PAD.encode(auth.as_slice())),
    })
}

/// A pairing's tokens for `epoch` (a UTC day number), from its 32-byte pair root.
pub fn epoch_tokens(pair_root: &[u8; 32], epoch: u64) -> Result<RouteAuth, PairError> {
    let day = epoch.to_be_bytes();
    let route = hkdf(pair_root, ROUTE_SALT, &[ROUTE_INFO, &day], ROUTE_LEN)?;
    let auth = hkdf(pair_root, AUTH_SALT, &[AUTH_INFO, &day], AUTH_LEN)?;
    Ok(RouteAuth {
        route: URL_SAFE_NO_PAD.encode(route.as_slice()),
        auth: Zeroizing::new(URL_SAFE_NO_PAD.encode(auth.as_slice())),
    })
}

/// The epoch of a time in unix milliseconds: its UTC day number.
pub fn epoch_of(unix_ms: i64) -> u64 {
    u64::try_from(unix_ms.div_euclid(MS_PER_DAY)).unwrap_or(0)
}

/// The pair root from a first-contact session's two direction keys (in either order: they
/// are sorted byte-wise, so both peers get the same root) and its transcript hash.
pub fn pair_root(one: &[u8; 32], other: &[u8; 32], transcript: &[u8; 32]) -> Result<Zeroizing<[u8; 32]>, PairError> {
    let (low, high) = if one <= other { (one, other) } else { (other, one) };
    let ikm = Zeroizing::new([&low[..], &high[..]].concat());
    let okm = hkdf(&ikm, transcript, &[PAIR_ROOT_INFO], 32)?;
    let mut root = Zeroizing::new([0_u8; 32]);
    root.copy_from_slice(&okm);
    Ok(root)
}
