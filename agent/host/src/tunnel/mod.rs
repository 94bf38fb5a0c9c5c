//! Reaching the agent's browser from another machine: AIP-59 `pair/v2` over a rendezvous
//! broker, end to end encrypted ([`pap_pair`] holds the protocol; this module its two ends).
//!
//! ```text
//!  operator   pap-agent pair offer --rendezvous wss://…      an offer (URL, web form, QR)
//!  host       pap-agent host serve                            parks on the offer's route,
//!             (host::HostTunnel)                              then on each pairing's epoch
//!                                                             routes; serves /mcp and /health
//!  device     pap-agent pair accept   (device::accept)        checks the offer, pairs, shows
//!                                                             the fingerprint and the host's
//!                                                             name, asks, keeps a credential
//!             pap-agent pair connect  (device::TunnelClient)  a loopback MCP endpoint that
//!                                                             tunnels every request to the host
//! ```
//!
//! The host's identity (an X25519 and an Ed25519 key pair) lives in `STATE/pair/daemon.json`
//! (0600), like the agent's other secrets. An open offer, a pairing's root and a revoked
//! pairing's tombstone live in the devices file beside the other devices ([`crate::pairing`]),
//! so `devices list` and `devices revoke` treat every device alike and a running host sees a
//! change on its next rescan ([`host::RESCAN`]).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use pap_pair::keys::{DaemonKeys, Ed25519Secret, X25519Secret};
use pap_pair::offer::Offer;
use pap_shared::{Clock, Rng, UnixTime};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::pairing::{Devices, DevicesError};

pub mod device;
pub mod host;
pub mod page;

/// How long an offer lives by default (AIP-59 §1.5: the reference's 10 minutes), seconds.
pub const OFFER_LIFETIME: u64 = 600;
/// The longest lifetime an operator may give an offer, seconds.
pub const MAX_OFFER_LIFETIME: u64 = 3600;
/// The offer secret's bytes: 256 bits from the CSPRNG (§1.1 asks at least 128).
const OFFER_SECRET_BYTES: usize = 32;

/// Why the host's identity or an offer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DaemonKeysError {
    /// Reading or writing the identity file failed.
    #[error("the pairing identity {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The identity file holds something else than this agent writes.
    #[error("the pairing identity {0} is not what this agent writes")]
    Format(PathBuf),
    /// A key operation failed.
    #[error(transparent)]
    Pair(#[from] pap_pair::PairError),
    /// The devices file could not be written.
    #[error(transparent)]
    Store(#[from] DevicesError),
    /// An offer for a broker a pairing may not use (security review S4).
    #[error(
        "the rendezvous must be a wss:// URL (ws:// only on this machine's loopback: plain WebSocket shows every route to anyone on the path)"
    )]
    Rendezvous,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct IdentityFile {
    /// PKCS #8 v1, standard base64.
    x25519: String,
    /// PKCS #8 v1, standard base64.
    ed25519: String,
}

impl Drop for IdentityFile {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.x25519);
        zeroize::Zeroize::zeroize(&mut self.ed25519);
    }
}

/// Where the host's pairing identity is kept.
pub fn identity_path(state_dir: &Path) -> PathBuf {
    state_dir.join("pair").join("daemon.json")
}

/// The host's pairing identity: read from the state directory, or made (from `rng`) and kept
/// there (0600) on first use.
pub fn daemon_keys(state_dir: &Path, rng: &dyn Rng) -> Result<DaemonKeys, DaemonKeysError> {
    let path = identity_path(state_dir);
    let io = |source| DaemonKeysError::Io {
        path: path.clone(),
        source,
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    pap_browser::store::private_dir(&dir).map_err(io)?;
    // Under an exclusive lock: two first uses racing (an offer and a starting host) make one
    // identity, not two.
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let lock = options.open(dir.join("daemon.lock")).map_err(io)?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| io(std::io::Error::from(errno)))?;
    match std::fs::read(&path) {
        Ok(bytes) => {
            let bytes = Zeroizing::new(bytes);
            let file: IdentityFile =
                serde_json::from_slice(&bytes).map_err(|_| DaemonKeysError::Format(path.clone()))?;
            let decode = |text: &str| {
                STANDARD
                    .decode(text)
                    .map(Zeroizing::new)
                    .map_err(|_| DaemonKeysError::Format(path.clone()))
            };
            Ok(DaemonKeys {
                x25519: X25519Secret::from_pkcs8(&decode(&file.x25519)?)?,
                ed25519: Ed25519Secret::from_pkcs8(&decode(&file.ed25519)?)?,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let keys = DaemonKeys::generate(rng)?;
            let file = IdentityFile {
                x25519: STANDARD.encode(keys.x25519.to_pkcs8().as_slice()),
                ed25519: STANDARD.encode(keys.ed25519.to_pkcs8().as_slice()),
            };
            let json =
                Zeroizing::new(serde_json::to_vec_pretty(&file).map_err(|_| DaemonKeysError::Format(path.clone()))?);
            pap_browser::store::write_private(&path, &json).map_err(io)?;
            Ok(keys)
        }
        Err(source) => Err(io(source)),
    }
}

/// Mints a single-use `pair/v2` offer (§1) for the broker at `rendezvous`, living `lifetime`
/// seconds (at most [`MAX_OFFER_LIFETIME`]), for a device the operator calls `name` (else the
/// device's own name). The offer is opened in the devices file, where a running host finds it.
pub fn mint_offer(
    state_dir: &Path,
    rendezvous: &str,
    lifetime: u64,
    name: Option<&str>,
    clock: &dyn Clock,
    rng: &dyn Rng,
) -> Result<Offer, DaemonKeysError> {
    if !pap_pair::offer::rendezvous_allowed(rendezvous) {
        return Err(DaemonKeysError::Rendezvous);
    }
    let keys = daemon_keys(state_dir, rng)?;
    let mut raw = Zeroizing::new([0_u8; OFFER_SECRET_BYTES]);
    rng.fill(raw.as_mut());
    let secret = Zeroizing::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw.as_ref()));
    let tokens = pap_pair::derive::offer_tokens(&secret)?;
    let now = clock.now();
    let exp = now.plus(i64::try_from(lifetime.min(MAX_OFFER_LIFETIME)).unwrap_or(0));
    Devices::at(state_dir).open_offer(&tokens.route, &tokens.auth, rendezvous, name, exp, now)?;
    Ok(Offer {
        rendezvous: rendezvous.to_owned(),
        fingerprint: keys.fingerprint()?,
        daemon_x25519: keys.x25519.public()?,
        daemon_ed25519: keys.ed25519.public()?,
        secret,
        exp: exp.as_secs(),
    })
}

/// The epoch (UTC day) of `now`.
pub(crate) fn epoch_at(now: UnixTime) -> u64 {
    pap_pair::derive::epoch_of(now.as_secs().saturating_mul(1000))
}

/// Reconnect delays: jittered, capped, exponential (§5.7), from half a second to 30 seconds.
#[derive(Debug)]
pub(crate) struct Backoff {
    next_ms: u64,
}

impl Backoff {
    const FIRST_MS: u64 = 500;
    const CAP_MS: u64 = 30_000;

    pub(crate) fn new() -> Self {
        Self {
            next_ms: Self::FIRST_MS,
        }
    }

    /// The next delay: uniformly between half of the current step and the step, which then
    /// doubles up to the cap.
    pub(crate) fn next(&mut self, rng: &dyn Rng) -> std::time::Duration {
        let step = self.next_ms;
        self.next_ms = (step * 2).min(Self::CAP_MS);
        let mut raw = [0_u8; 8];
        rng.fill(&mut raw);
        let half = step / 2;
        std::time::Duration::from_millis(half + u64::from_le_bytes(raw) % (half + 1))
    }

    pub(crate) fn reset(&mut self) {
        self.next_ms = Self::FIRST_MS;
    }
}

/// A name a peer chose, made safe to show and store: printable, at most 64 characters.
pub(crate) fn shown_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect::<String>()
        .trim()
        .to_owned();
    if cleaned.is_empty() {
        "device".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[derive(Debug)]
    struct Counting(std::sync::atomic::AtomicU8);
    impl Rng for Counting {
        fn fill(&self, buf: &mut [u8]) {
            for b in buf {
                *b = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn backoff_is_jittered_within_its_step_and_capped() {
        let rng = Counting(std::sync::atomic::AtomicU8::new(7));
        let mut backoff = Backoff::new();
        let mut steps = Vec::new();
        for _ in 0..10 {
            steps.push(backoff.next(&rng).as_millis());
        }
        assert!((250..=500).contains(&steps[0]), "{steps:?}");
        assert!((500..=1000).contains(&steps[1]), "{steps:?}");
        assert!(steps.iter().all(|s| *s <= 30_000), "{steps:?}");
        assert!(steps[9] >= 15_000, "{steps:?}");
        backoff.reset();
        assert!(backoff.next(&rng).as_millis() <= 500);
    }

    #[test]
    fn a_shown_name_is_printable_and_bounded() {
        assert_eq!(shown_name("phone\u{1b}[31m"), "phone[31m");
        assert_eq!(shown_name(&"x".repeat(100)).len(), 64);
        assert_eq!(shown_name("  \n"), "device");
    }
}
