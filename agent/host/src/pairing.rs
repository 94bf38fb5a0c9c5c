//! AIP-59 pairing, the host side: the only way an agent runtime reaches the agent's browser
//! (AIP-63, "Auth model": every client, local ones included, is a paired device presenting its
//! device credential; no static token).
//!
//! The operator starts a pairing (`pap-agent pair`): a one-time code with a short lifetime,
//! which the device exchanges at the host for its bearer (`POST /pair`). A local client the
//! operator installs (`pap-agent install-mcp`) gets a device minted directly. The host keeps
//! only a SHA-256 of each bearer (a 256-bit random value, so a fast hash is enough and nothing
//! stored can be replayed) in `STATE/devices.json` (0600), compares in constant time, and reads
//! the file on every request: a device revoked from another process is refused on its very next
//! request (C13).
//!
//! Guessing a code is bounded twice: a code is 40 random bits that live minutes, and
//! [`MAX_FAILED_REDEEMS`] wrong codes void every pending one (the operator starts again).

use std::fs::File;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use pap_browser::store::SealingKey;
use pap_shared::{Clock, Rng, UnixTime};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

/// How long a pairing code lives by default, and at most.
pub const CODE_LIFETIME: u64 = 300;
/// The longest lifetime an operator may give a code.
pub const MAX_CODE_LIFETIME: u64 = 900;
/// Wrong codes (in a row, across all pending ones) after which every pending code is void.
pub const MAX_FAILED_REDEEMS: u32 = 5;
/// The prefix of a device bearer (so a leaked one is recognisable by secret scanners).
const BEARER_PREFIX: &str = "papdev_";
/// Crockford's base32 alphabet: no I, L, O or U, so a code read aloud or retyped survives.
const CODE_ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A device's credential. It prints as `Bearer(..)`: never in a log, error or report.
pub struct Bearer(Zeroizing<String>);

impl Bearer {
    /// The credential, for the one place it is written (the device's own config or file).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A bearer the device presented (from its `Authorization` header or file).
    pub fn presented(text: &str) -> Self {
        Self(Zeroizing::new(text.trim().to_owned()))
    }

    fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(..)")
    }
}

/// A one-time pairing code, as the operator reads it to the device (`XXXX-XXXX`).
pub struct PairingCode {
    code: Zeroizing<String>,
    /// When it stops working.
    pub expires_at: UnixTime,
}

impl PairingCode {
    /// The code, for the operator's terminal (its one place).
    pub fn expose(&self) -> &str {
        &self.code
    }
}

impl std::fmt::Debug for PairingCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairingCode")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// A paired device, as `devices list` shows it (no credential).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Its `deviceId` (AIP-63 C12 scopes grants by it).
    pub id: String,
    /// The name the operator gave it.
    pub name: String,
    /// When it was paired.
    #[serde(with = "pap_shared::rfc3339")]
    pub paired_at: UnixTime,
    /// How it was paired: `code` (a device that redeemed a pairing code) or `install` (a local
    /// client `install-mcp` configured).
    pub via: String,
    /// When a host last served it (kept to the minute: [`LAST_SEEN_GRANULARITY`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "pap_shared::rfc3339::option"
    )]
    pub last_seen: Option<UnixTime>,
}

/// How stale `lastSeen` may be: a host writes it at most this often per device (seconds), so
/// requests do not each rewrite the devices file.
pub const LAST_SEEN_GRANULARITY: i64 = 60;

/// The devices paired at one moment.
pub struct Paired(Vec<DeviceRecord>);

impl std::fmt::Debug for Paired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paired").field("devices", &self.0.len()).finish()
    }
}

impl Paired {
    /// The device `bearer` belongs to, if any, compared in constant time against every stored
    /// digest (no early exit).
    pub fn authenticate(&self, bearer: &Bearer) -> Option<Device> {
        let presented = base64url(&bearer.digest());
        let mut found = None;
        for entry in &self.0 {
            if bool::from(entry.bearer_sha256.as_bytes().ct_eq(presented.as_bytes())) {
                found = Some(entry.device.clone());
            }
        }
        found
    }

    /// Whether `id` is paired.
    pub fn has(&self, id: &str) -> bool {
        self.0.iter().any(|d| d.device.id == id)
    }
}

/// Why a name or id names no one device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceLookupError {
    /// No device has that id or name.
    #[error("no paired device has the id or name {0:?} (see `pap-agent devices list`)")]
    None(String),
    /// Several devices bear that name.
    #[error("{} devices are named {name:?}; name one by id: {}", ids.len(), ids.join(", "))]
    Ambiguous {
        /// The name.
        name: String,
        /// The ids bearing it.
        ids: Vec<String>,
    },
    /// The devices file could not be read.
    #[error(transparent)]
    Store(#[from] DevicesError),
}

/// Why a pairing code was not exchanged. Says nothing about which codes exist.
#[derive(Debug, thiserror::Error)]
pub enum RedeemError {
    /// No pending code matches, it expired, or it was already used.
    #[error("that pairing code is not valid (wrong, expired or already used)")]
    Invalid,
    /// Too many wrong codes: every pending code is void.
    #[error("too many wrong pairing codes: every pending code is void; start a new pairing")]
    Voided,
    /// The devices file could not be read or written.
    #[error(transparent)]
    Store(#[from] DevicesError),
}

/// The devices file could not be read or written: the host refuses (fails closed).
#[derive(Debug, thiserror::Error)]
pub enum DevicesError {
    /// Reading, writing or locking it failed.
    #[error("the devices file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It holds something else than this agent writes.
    #[error("the devices file {path} is not what this agent writes: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// Where it stopped parsing (serde_json's errors quote no content).
        #[source]
        source: serde_json::Error,
    },
    /// The state directory's sealing key, which seals the pair roots, could not be opened.
    #[error("the sealing key of the pair roots (STATE/keys/store.key): {0}")]
    Sealing(#[source] pap_browser::store::SealError),
}

/// What `devices.json` holds.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Record {
    devices: Vec<DeviceRecord>,
    #[serde(default)]
    codes: Vec<CodeRecord>,
    #[serde(default)]
    failed_redeems: u32,
    /// Open `pair/v2` offers (AIP-59 §1.5): single-use, short-lived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    offers: Vec<OfferRecord>,
    /// Revoked `pair/v2` pairings still answered with `pairing_revoked` (§6.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tombstones: Vec<TombstoneRecord>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DeviceRecord {
    #[serde(flatten)]
    device: Device,
    /// SHA-256 of the bearer, base64url.
    bearer_sha256: String,
    /// A device paired over a rendezvous: its broker and pair root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tunnel: Option<TunnelRecord>,
}

/// A `pair/v2` pairing's broker and pair root: the root derives each day's route and auth
/// tokens and the device's bearer, so nothing else about it is kept. The root is sealed with
/// the state directory's key, bound to the device's id (base64url of the sealed bytes), so a
/// copy of `devices.json` alone (a backup, a support bundle) pairs nobody (review S5); a root
/// an older version wrote in clear is read and sealed on the file's next write.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TunnelRecord {
    rendezvous: String,
    pair_root: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OfferRecord {
    /// The offer's route (it reaches the broker anyway).
    route: String,
    /// SHA-256 of its auth token, base64url: the token itself is never kept.
    auth_sha256: String,
    rendezvous: String,
    /// The name the operator chose (else the device's own `clientName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(with = "pap_shared::rfc3339")]
    expires_at: UnixTime,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TombstoneRecord {
    device_id: String,
    rendezvous: String,
    #[serde(with = "pap_shared::rfc3339")]
    until: UnixTime,
    /// Each day's route and auth digest over the grace window: no pair root.
    epochs: Vec<EpochRecord>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EpochRecord {
    epoch: u64,
    route: String,
    auth_sha256: String,
}

/// How long a revoked `pair/v2` pairing keeps answering its device with an authenticated
/// `pairing_revoked` (AIP-59 §6.2; the reference's 14 days), in days.
pub const TOMBSTONE_DAYS: u64 = 14;

/// What a host parks on (AIP-59 §2.4, §6.2): read from disk on each rescan.
#[derive(Default)]
pub struct TunnelTargets {
    /// Open offers: `(route, rendezvous)`.
    pub offers: Vec<(String, String)>,
    /// Pairings: `(device id, rendezvous, pair root)`.
    pub pairings: Vec<(String, String, Zeroizing<[u8; 32]>)>,
    /// Tombstones: `(device id, rendezvous, epoch, route)` for the epochs they cover.
    pub tombstones: Vec<(String, String, u64, String)>,
}

impl std::fmt::Debug for TunnelTargets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelTargets")
            .field("offers", &self.offers.len())
            .field("pairings", &self.pairings.len())
            .field("tombstones", &self.tombstones.len())
            .finish()
    }
}

/// The bearer a `pair/v2` device is served as: derived from its pair root, so the host keeps
/// no second secret and injects it in memory (it never crosses the tunnel).
pub fn tunnel_bearer(pair_root: &[u8; 32]) -> Bearer {
    let mut hasher = Sha256::new();
    hasher.update(b"pap-agent/tunnel-bearer/v1");
    hasher.update(pair_root);
    let derived = Zeroizing::new(<[u8; 32]>::from(hasher.finalize()));
    Bearer(Zeroizing::new(format!(
        "{BEARER_PREFIX}{}",
        base64url(derived.as_ref())
    )))
}

/// What a pair root is sealed for: the device it belongs to (so roots cannot be swapped).
fn root_purpose(device_id: &str) -> String {
    format!("pap-host pair root {device_id}")
}

/// The pair root `stored` for `device_id`: sealed, or in clear as an older version wrote it.
fn open_root(key: &SealingKey, device_id: &str, stored: &str) -> Option<Zeroizing<[u8; 32]>> {
    let bytes = Zeroizing::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(stored).ok()?);
    let plain = if bytes.len() == 32 {
        bytes
    } else {
        key.open_sealed(&root_purpose(device_id), &bytes).ok()?
    };
    let mut root = Zeroizing::new([0_u8; 32]);
    if plain.len() != 32 {
        return None;
    }
    root.copy_from_slice(&plain);
    Some(root)
}

/// `root` sealed for `device_id`, as stored.
fn seal_root(key: &SealingKey, rng: &dyn Rng, device_id: &str, root: &[u8; 32]) -> Result<String, DevicesError> {
    key.seal(rng, &root_purpose(device_id), root)
        .map(|sealed| base64url(&sealed))
        .map_err(DevicesError::Sealing)
}

fn digest_matches(stored: &str, presented: &str) -> bool {
    bool::from(stored.as_bytes().ct_eq(digest_text(presented).as_bytes()))
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CodeRecord {
    /// SHA-256 of the normalised code, base64url.
    code_sha256: String,
    name: String,
    #[serde(with = "pap_shared::rfc3339")]
    expires_at: UnixTime,
}

/// The paired devices of one agent (`STATE/devices.json`).
#[derive(Clone, Debug)]
pub struct Devices {
    path: PathBuf,
    state_dir: PathBuf,
}

impl Devices {
    /// The devices of the agent whose state directory is `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("devices.json"),
            state_dir: state_dir.to_owned(),
        }
    }

    /// Pairs a device the operator installs locally: its bearer, returned once.
    pub fn mint(
        &self,
        name: &str,
        via: &str,
        clock: &dyn Clock,
        rng: &dyn Rng,
    ) -> Result<(Device, Bearer), DevicesError> {
        self.update(|record| Ok(mint_into(record, name, via, clock.now(), rng)))
    }

    /// Starts a pairing: a one-time code for a device called `name`, living `lifetime` seconds
    /// (at most [`MAX_CODE_LIFETIME`]).
    pub fn start_pairing(
        &self,
        name: &str,
        lifetime: u64,
        clock: &dyn Clock,
        rng: &dyn Rng,
    ) -> Result<PairingCode, DevicesError> {
        self.update(|record| {
            let now = clock.now();
            record.codes.retain(|c| c.expires_at > now);
            let mut raw = [0u8; 8];
            rng.fill(&mut raw);
            // 8 symbols of 5 bits each: 40 bits.
            let symbols: String = raw
                .iter()
                .map(|b| char::from(CODE_ALPHABET[usize::from(b & 31)]))
                .collect();
            let code = Zeroizing::new(format!("{}-{}", &symbols[..4], &symbols[4..]));
            let expires_at = now.plus(i64::try_from(lifetime.min(MAX_CODE_LIFETIME)).unwrap_or(0));
            record.codes.push(CodeRecord {
                code_sha256: digest_text(&normalise(&code)),
                name: name.to_owned(),
                expires_at,
            });
            Ok(PairingCode { code, expires_at })
        })
    }

    /// Exchanges a pairing code for a device and its bearer: once, before it expires.
    pub fn redeem(&self, code: &str, clock: &dyn Clock, rng: &dyn Rng) -> Result<(Device, Bearer), RedeemError> {
        self.update(|record| {
            let now = clock.now();
            record.codes.retain(|c| c.expires_at > now);
            let presented = digest_text(&normalise(code));
            let matched = record
                .codes
                .iter()
                .position(|c| bool::from(c.code_sha256.as_bytes().ct_eq(presented.as_bytes())));
            let Some(index) = matched else {
                record.failed_redeems += 1;
                if record.failed_redeems >= MAX_FAILED_REDEEMS {
                    record.codes.clear();
                    record.failed_redeems = 0;
                    return Ok(Err(RedeemError::Voided));
                }
                return Ok(Err(RedeemError::Invalid));
            };
            let pending = record.codes.remove(index);
            record.failed_redeems = 0;
            Ok(Ok(mint_into(record, &pending.name, "code", now, rng)))
        })?
    }

    /// The device `bearer` belongs to, if any: read from disk now, compared in constant time
    /// against every stored digest.
    pub fn authenticate(&self, bearer: &Bearer) -> Result<Option<Device>, DevicesError> {
        Ok(self.load()?.authenticate(bearer))
    }

    /// The devices paired now (read from disk), to authenticate a request and to see who was
    /// unpaired since.
    pub fn load(&self) -> Result<Paired, DevicesError> {
        Ok(Paired(self.read()?.devices))
    }

    /// The paired devices.
    pub fn list(&self) -> Result<Vec<Device>, DevicesError> {
        Ok(self.read()?.devices.into_iter().map(|d| d.device).collect())
    }

    /// The id of the device `name_or_id` names: its id, or the name of exactly one device.
    pub fn resolve(&self, name_or_id: &str) -> Result<String, DeviceLookupError> {
        let devices = self.list()?;
        if devices.iter().any(|d| d.id == name_or_id) {
            return Ok(name_or_id.to_owned());
        }
        let named: Vec<&Device> = devices.iter().filter(|d| d.name == name_or_id).collect();
        match named.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => Err(DeviceLookupError::None(name_or_id.to_owned())),
            many => Err(DeviceLookupError::Ambiguous {
                name: name_or_id.to_owned(),
                ids: many.iter().map(|d| d.id.clone()).collect(),
            }),
        }
    }

    /// Records that a host served `device` (as just authenticated) at `now`, when its
    /// `lastSeen` is older than [`LAST_SEEN_GRANULARITY`]: a write at most once a minute per
    /// device, none otherwise.
    pub fn seen(&self, device: &Device, now: UnixTime) -> Result<(), DevicesError> {
        let stale = |seen: Option<UnixTime>| seen.is_none_or(|t| now.since(t) >= LAST_SEEN_GRANULARITY);
        if !stale(device.last_seen) {
            return Ok(());
        }
        self.update(|record| {
            if let Some(entry) = record.devices.iter_mut().find(|d| d.device.id == device.id)
                && stale(entry.device.last_seen)
            {
                entry.device.last_seen = Some(now);
            }
            Ok(())
        })
    }

    /// Unpairs `id` at `now`: its bearer is refused from the next request on. A `pair/v2`
    /// pairing leaves a tombstone: each day's route and auth digest for [`TOMBSTONE_DAYS`],
    /// and no pair root (AIP-59 §6.2). Whether it was paired.
    pub fn revoke(&self, id: &str, now: UnixTime) -> Result<bool, DevicesError> {
        let key = self.sealing()?;
        self.update(|record| {
            record.tombstones.retain(|t| t.until > now);
            let Some(index) = record.devices.iter().position(|d| d.device.id == id) else {
                return Ok(false);
            };
            let removed = record.devices.remove(index);
            if let Some(tunnel) = removed.tunnel
                && let Some(root) = open_root(&key, id, &tunnel.pair_root)
            {
                let today = pap_pair::derive::epoch_of(now.as_secs().saturating_mul(1000));
                let epochs = (today.saturating_sub(1)..=today + TOMBSTONE_DAYS)
                    .filter_map(|epoch| {
                        let tokens = pap_pair::derive::epoch_tokens(&root, epoch).ok()?;
                        Some(EpochRecord {
                            epoch,
                            route: tokens.route,
                            auth_sha256: digest_text(&tokens.auth),
                        })
                    })
                    .collect();
                let grace = i64::try_from(TOMBSTONE_DAYS * 86_400).unwrap_or(i64::MAX);
                record.tombstones.push(TombstoneRecord {
                    device_id: removed.device.id,
                    rendezvous: tunnel.rendezvous,
                    until: now.plus(grace),
                    epochs,
                });
            }
            Ok(true)
        })
    }

    /// Opens a `pair/v2` offer: its route, its auth token (kept as a digest), the broker, the
    /// name the operator chose, and when it lapses.
    pub fn open_offer(
        &self,
        route: &str,
        auth: &str,
        rendezvous: &str,
        name: Option<&str>,
        expires_at: UnixTime,
        now: UnixTime,
    ) -> Result<(), DevicesError> {
        self.update(|record| {
            record.offers.retain(|o| o.expires_at > now);
            record.offers.push(OfferRecord {
                route: route.to_owned(),
                auth_sha256: digest_text(auth),
                rendezvous: rendezvous.to_owned(),
                name: name.map(str::to_owned),
                expires_at,
            });
            Ok(())
        })
    }

    /// What a host parks on at `now`: open offers, each pairing's root, and the epochs of live
    /// tombstones (today's and yesterday's, §2.4).
    pub fn tunnel_targets(&self, now: UnixTime) -> Result<TunnelTargets, DevicesError> {
        let record = self.read()?;
        let today = pap_pair::derive::epoch_of(now.as_secs().saturating_mul(1000));
        let mut targets = TunnelTargets {
            offers: record
                .offers
                .iter()
                .filter(|o| o.expires_at > now)
                .map(|o| (o.route.clone(), o.rendezvous.clone()))
                .collect(),
            ..TunnelTargets::default()
        };
        let key = self.sealing()?;
        for device in &record.devices {
            if let Some(tunnel) = &device.tunnel
                && let Some(root) = open_root(&key, &device.device.id, &tunnel.pair_root)
            {
                targets
                    .pairings
                    .push((device.device.id.clone(), tunnel.rendezvous.clone(), root));
            }
        }
        for tombstone in record.tombstones.iter().filter(|t| t.until > now) {
            for epoch in tombstone
                .epochs
                .iter()
                .filter(|e| e.epoch + 1 >= today && e.epoch <= today)
            {
                targets.tombstones.push((
                    tombstone.device_id.clone(),
                    tombstone.rendezvous.clone(),
                    epoch.epoch,
                    epoch.route.clone(),
                ));
            }
        }
        Ok(targets)
    }

    /// Whether `auth` is the auth token of the open offer on `route` at `now` (constant time on
    /// digests). Checking spends nothing: a wrong auth leaves the offer open (§1.5).
    pub fn offer_auth_ok(&self, route: &str, auth: &str, now: UnixTime) -> Result<bool, DevicesError> {
        Ok(self
            .read()?
            .offers
            .iter()
            .any(|o| o.route == route && o.expires_at > now && digest_matches(&o.auth_sha256, auth)))
    }

    /// Spends the offer on `route` whose auth is `auth`, pairing a device named as the operator
    /// chose (else `client_name`) with `pair_root`: once, under the lock, so two hellos racing
    /// for one offer pair one device. `None` when the offer is gone, spent or lapsed.
    pub fn spend_offer(
        &self,
        route: &str,
        auth: &str,
        client_name: &str,
        pair_root: &[u8; 32],
        now: UnixTime,
        rng: &dyn Rng,
    ) -> Result<Option<Device>, DevicesError> {
        let key = self.sealing()?;
        self.update(|record| {
            record.offers.retain(|o| o.expires_at > now);
            let Some(index) = record
                .offers
                .iter()
                .position(|o| o.route == route && digest_matches(&o.auth_sha256, auth))
            else {
                return Ok(None);
            };
            let offer = record.offers.remove(index);
            let name = offer.name.unwrap_or_else(|| client_name.to_owned());
            let bearer = tunnel_bearer(pair_root);
            let mut id = [0u8; 9];
            id.copy_from_slice(&Sha256::digest(bearer.0.as_bytes())[..9]);
            let device = Device {
                id: format!("dev_{}", base64url(&id)),
                name,
                paired_at: now,
                via: "pair/v2".to_owned(),
                last_seen: None,
            };
            record.devices.push(DeviceRecord {
                device: device.clone(),
                bearer_sha256: base64url(&bearer.digest()),
                tunnel: Some(TunnelRecord {
                    rendezvous: offer.rendezvous,
                    pair_root: seal_root(&key, rng, &device.id, pair_root)?,
                }),
            });
            Ok(Some(device))
        })
    }

    /// The pair root of the `pair/v2` device `id`, while it is paired.
    pub fn pair_root_of(&self, id: &str) -> Result<Option<Zeroizing<[u8; 32]>>, DevicesError> {
        let record = self.read()?;
        let Some(tunnel) = record
            .devices
            .iter()
            .find(|d| d.device.id == id)
            .and_then(|d| d.tunnel.as_ref())
        else {
            return Ok(None);
        };
        Ok(open_root(&self.sealing()?, id, &tunnel.pair_root))
    }

    /// The state directory's sealing key (made on first use), which seals the pair roots.
    fn sealing(&self) -> Result<SealingKey, DevicesError> {
        SealingKey::open(&self.state_dir, &pap_shared::SystemRng).map_err(DevicesError::Sealing)
    }

    /// Whether `auth` is the epoch auth a tombstone of `device_id` kept for `epoch` (constant
    /// time on digests).
    pub fn tombstone_auth_ok(
        &self,
        device_id: &str,
        epoch: u64,
        auth: &str,
        now: UnixTime,
    ) -> Result<bool, DevicesError> {
        Ok(self
            .read()?
            .tombstones
            .iter()
            .filter(|t| t.device_id == device_id && t.until > now)
            .flat_map(|t| t.epochs.iter())
            .any(|e| e.epoch == epoch && digest_matches(&e.auth_sha256, auth)))
    }

    fn read(&self) -> Result<Record, DevicesError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| DevicesError::Format {
                path: self.path.clone(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(source) => Err(self.io(source)),
        }
    }

    /// Reads, changes and writes the file under an exclusive lock, so a pairing in one process
    /// and a revoke in another never lose each other's change.
    fn update<T>(&self, change: impl FnOnce(&mut Record) -> Result<T, DevicesError>) -> Result<T, DevicesError> {
        let _lock = self.lock()?;
        let mut record = self.read()?;
        let answer = change(&mut record)?;
        self.seal_clear_roots(&mut record)?;
        let bytes = serde_json::to_vec_pretty(&record).map_err(|source| DevicesError::Format {
            path: self.path.clone(),
            source,
        })?;
        pap_browser::store::write_private(&self.path, &bytes).map_err(|e| self.io(e))?;
        Ok(answer)
    }

    /// Seals the roots an older version kept in clear (review S5), before the file is written.
    fn seal_clear_roots(&self, record: &mut Record) -> Result<(), DevicesError> {
        let clear = |stored: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(stored)
                .is_ok_and(|bytes| Zeroizing::new(bytes).len() == 32)
        };
        if !record
            .devices
            .iter()
            .any(|d| d.tunnel.as_ref().is_some_and(|t| clear(&t.pair_root)))
        {
            return Ok(());
        }
        let key = self.sealing()?;
        for device in &mut record.devices {
            let id = device.device.id.clone();
            if let Some(tunnel) = device.tunnel.as_mut()
                && clear(&tunnel.pair_root)
                && let Some(root) = open_root(&key, &id, &tunnel.pair_root)
            {
                tunnel.pair_root = seal_root(&key, &pap_shared::SystemRng, &id, &root)?;
            }
        }
        Ok(())
    }

    fn lock(&self) -> Result<File, DevicesError> {
        pap_shared::fs::lock_exclusive(&self.path.with_extension("lock")).map_err(|e| self.io(e))
    }

    fn io(&self, source: std::io::Error) -> DevicesError {
        DevicesError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

fn mint_into(record: &mut Record, name: &str, via: &str, now: UnixTime, rng: &dyn Rng) -> (Device, Bearer) {
    let mut secret = Zeroizing::new([0u8; 32]);
    rng.fill(secret.as_mut());
    let bearer = Bearer(Zeroizing::new(format!("{BEARER_PREFIX}{}", base64url(secret.as_ref()))));
    let mut id = [0u8; 9];
    rng.fill(&mut id);
    let device = Device {
        id: format!("dev_{}", base64url(&id)),
        name: name.to_owned(),
        paired_at: now,
        via: via.to_owned(),
        last_seen: None,
    };
    record.devices.push(DeviceRecord {
        device: device.clone(),
        bearer_sha256: base64url(&bearer.digest()),
        tunnel: None,
    });
    (device, bearer)
}

/// A code as typed: case and separators do not matter.
fn normalise(code: &str) -> Zeroizing<String> {
    Zeroizing::new(
        code.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_uppercase())
            .collect(),
    )
}

fn digest_text(text: &str) -> String {
    base64url(&Sha256::digest(text.as_bytes()))
}

fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use pap_shared::{SystemRng, UnixTime};

    #[derive(Debug)]
    struct At(i64);
    impl Clock for At {
        fn now(&self) -> UnixTime {
            UnixTime::from_secs(self.0)
        }
    }

    fn devices() -> (crate::scratch::Dir, Devices) {
        let dir = crate::scratch::Dir::new("pap-pairing");
        let devices = Devices::at(dir.path());
        (dir, devices)
    }

    #[test]
    fn a_code_pairs_once_before_it_expires_and_the_file_holds_no_secret() {
        let (dir, devices) = devices();
        let code = devices.start_pairing("phone", 60, &At(1000), &SystemRng).unwrap();
        assert_eq!(code.expose().len(), 9);
        let typed = code.expose().to_lowercase().replace('-', " ");
        let (device, bearer) = devices.redeem(&typed, &At(1059), &SystemRng).unwrap();
        assert_eq!((device.name.as_str(), device.via.as_str()), ("phone", "code"));
        assert!(matches!(
            devices.redeem(code.expose(), &At(1059), &SystemRng),
            Err(RedeemError::Invalid)
        ));
        assert_eq!(devices.authenticate(&bearer).unwrap(), Some(device));
        let stored = std::fs::read_to_string(dir.path().join("devices.json")).unwrap();
        assert!(!stored.contains(bearer.expose()) && !stored.contains(code.expose()));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("devices.json"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(!format!("{bearer:?} {code:?}").contains(bearer.expose()));

        let late = devices.start_pairing("tablet", 60, &At(2000), &SystemRng).unwrap();
        assert!(matches!(
            devices.redeem(late.expose(), &At(2060), &SystemRng),
            Err(RedeemError::Invalid)
        ));
    }

    #[test]
    fn an_offer_is_spent_once_by_its_right_auth_and_a_wrong_auth_spends_nothing() {
        let (_dir, devices) = devices();
        let now = UnixTime::from_secs(1_800_000_000);
        let tokens = pap_pair::derive::offer_tokens("offer-secret").unwrap();
        devices
            .open_offer(
                &tokens.route,
                &tokens.auth,
                "ws://127.0.0.1:1/",
                Some("phone"),
                now.plus(600),
                now,
            )
            .unwrap();
        let root = [7_u8; 32];
        // A wrong auth is refused and leaves the offer open (AIP-59 §1.5).
        assert!(!devices.offer_auth_ok(&tokens.route, "wrong", now).unwrap());
        assert!(
            devices
                .spend_offer(&tokens.route, "wrong", "x", &root, now, &SystemRng)
                .unwrap()
                .is_none()
        );
        assert!(devices.offer_auth_ok(&tokens.route, &tokens.auth, now).unwrap());
        let device = devices
            .spend_offer(&tokens.route, &tokens.auth, "its own name", &root, now, &SystemRng)
            .unwrap()
            .unwrap();
        assert_eq!((device.name.as_str(), device.via.as_str()), ("phone", "pair/v2"));
        // Single use.
        assert!(
            devices
                .spend_offer(&tokens.route, &tokens.auth, "x", &root, now, &SystemRng)
                .unwrap()
                .is_none()
        );
        assert!(!devices.offer_auth_ok(&tokens.route, &tokens.auth, now).unwrap());
        // The device is served with the bearer its root derives; the file keeps neither the
        // offer's auth nor that bearer.
        assert_eq!(
            devices.authenticate(&tunnel_bearer(&root)).unwrap(),
            Some(device.clone())
        );
        let file = std::fs::read_to_string(devices.path.clone()).unwrap();
        assert!(!file.contains(tokens.auth.as_str()) && !file.contains(tunnel_bearer(&root).expose()));
        // A lapsed offer pairs no one.
        let later = pap_pair::derive::offer_tokens("second").unwrap();
        devices
            .open_offer(&later.route, &later.auth, "ws://127.0.0.1:1/", None, now.plus(600), now)
            .unwrap();
        assert!(
            devices
                .spend_offer(&later.route, &later.auth, "x", &root, now.plus(600), &SystemRng)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn pair_roots_are_sealed_to_their_device_and_a_root_kept_in_clear_is_sealed_on_the_next_write() {
        let (dir, devices) = devices();
        let now = UnixTime::from_secs(1_800_000_000);
        let pair = |secret: &str, root: [u8; 32], name: &str| {
            let tokens = pap_pair::derive::offer_tokens(secret).unwrap();
            devices
                .open_offer(
                    &tokens.route,
                    &tokens.auth,
                    "ws://127.0.0.1:1/",
                    None,
                    now.plus(600),
                    now,
                )
                .unwrap();
            devices
                .spend_offer(&tokens.route, &tokens.auth, name, &root, now, &SystemRng)
                .unwrap()
                .unwrap()
        };
        let (root_a, root_b) = ([5_u8; 32], [6_u8; 32]);
        let (a, b) = (pair("first", root_a, "phone"), pair("second", root_b, "laptop"));
        // devices.json names neither root (review S5); the host still derives both.
        let file = std::fs::read_to_string(devices.path.clone()).unwrap();
        assert!(!file.contains(&base64url(&root_a)) && !file.contains(&base64url(&root_b)));
        assert_eq!(*devices.pair_root_of(&a.id).unwrap().unwrap(), root_a);
        assert_eq!(devices.tunnel_targets(now).unwrap().pairings.len(), 2);
        // Without the state's key, a copy of the file pairs nobody.
        let copy = Devices::at(&dir.path().join("elsewhere"));
        std::fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
        std::fs::copy(&devices.path, &copy.path).unwrap();
        assert!(copy.pair_root_of(&a.id).unwrap().is_none());
        // A sealed root moved to another device opens for none.
        let mut record: serde_json::Value = serde_json::from_str(&file).unwrap();
        let sealed_a = record["devices"][0]["tunnel"]["pairRoot"].clone();
        record["devices"][1]["tunnel"]["pairRoot"] = sealed_a;
        std::fs::write(&devices.path, serde_json::to_vec(&record).unwrap()).unwrap();
        assert!(devices.pair_root_of(&b.id).unwrap().is_none());
        // A root an older version kept in clear is read, and sealed by the next write.
        record["devices"][1]["tunnel"]["pairRoot"] = serde_json::json!(base64url(&root_b));
        std::fs::write(&devices.path, serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(*devices.pair_root_of(&b.id).unwrap().unwrap(), root_b);
        devices.seen(&a, now).unwrap();
        let file = std::fs::read_to_string(devices.path.clone()).unwrap();
        assert!(!file.contains(&base64url(&root_b)), "the clear root was not sealed");
        assert_eq!(*devices.pair_root_of(&b.id).unwrap().unwrap(), root_b);
    }

    #[test]
    fn a_revoked_pairing_leaves_a_tombstone_of_epoch_digests_and_no_root() {
        let (_dir, devices) = devices();
        let now = UnixTime::from_secs(1_800_000_000);
        let tokens = pap_pair::derive::offer_tokens("offer-secret").unwrap();
        devices
            .open_offer(
                &tokens.route,
                &tokens.auth,
                "ws://127.0.0.1:1/",
                None,
                now.plus(600),
                now,
            )
            .unwrap();
        let root = [9_u8; 32];
        let device = devices
            .spend_offer(&tokens.route, &tokens.auth, "laptop", &root, now, &SystemRng)
            .unwrap()
            .unwrap();
        let today = pap_pair::derive::epoch_of(now.as_secs() * 1000);
        let targets = devices.tunnel_targets(now).unwrap();
        assert_eq!(targets.pairings.len(), 1);
        assert!(devices.revoke(&device.id, now).unwrap());
        assert!(devices.pair_root_of(&device.id).unwrap().is_none());
        let file = std::fs::read_to_string(devices.path.clone()).unwrap();
        assert!(!file.contains(&base64url(&root)), "the tombstone keeps no pair root");
        let epoch = pap_pair::derive::epoch_tokens(&root, today).unwrap();
        assert!(
            !file.contains(epoch.auth.as_str()),
            "nor an auth token, only its digest"
        );
        assert!(devices.tombstone_auth_ok(&device.id, today, &epoch.auth, now).unwrap());
        assert!(!devices.tombstone_auth_ok(&device.id, today, "wrong", now).unwrap());
        assert!(
            !devices
                .tombstone_auth_ok(&device.id, today + 1, &epoch.auth, now)
                .unwrap()
        );
        // It is parked on today's and yesterday's routes, until the grace window ends.
        let targets = devices.tunnel_targets(now).unwrap();
        assert!(targets.pairings.is_empty());
        let routes: Vec<u64> = targets.tombstones.iter().map(|t| t.2).collect();
        assert_eq!(routes, vec![today - 1, today]);
        assert_eq!(targets.tombstones[1].3, epoch.route);
        let after = now.plus(i64::try_from(TOMBSTONE_DAYS * 86_400).unwrap());
        assert!(devices.tunnel_targets(after).unwrap().tombstones.is_empty());
        assert!(
            !devices
                .tombstone_auth_ok(&device.id, today, &epoch.auth, after)
                .unwrap()
        );
    }

    #[test]
    fn wrong_codes_void_every_pending_one() {
        let (_dir, devices) = devices();
        let code = devices.start_pairing("phone", 300, &At(0), &SystemRng).unwrap();
        for _ in 1..MAX_FAILED_REDEEMS {
            assert!(matches!(
                devices.redeem("0000-0000", &At(1), &SystemRng),
                Err(RedeemError::Invalid)
            ));
        }
        assert!(matches!(
            devices.redeem("0000-0000", &At(1), &SystemRng),
            Err(RedeemError::Voided)
        ));
        assert!(matches!(
            devices.redeem(code.expose(), &At(2), &SystemRng),
            Err(RedeemError::Invalid)
        ));
    }

    #[test]
    fn a_revoked_device_is_refused_and_others_are_not() {
        let (_dir, devices) = devices();
        let (a, bearer_a) = devices.mint("cursor", "install", &At(0), &SystemRng).unwrap();
        let (b, bearer_b) = devices.mint("claude", "install", &At(0), &SystemRng).unwrap();
        assert_ne!(a.id, b.id);
        assert!(devices.revoke(&a.id, UnixTime::from_secs(0)).unwrap());
        assert!(!devices.revoke(&a.id, UnixTime::from_secs(0)).unwrap());
        assert_eq!(devices.authenticate(&bearer_a).unwrap(), None);
        assert_eq!(devices.authenticate(&bearer_b).unwrap(), Some(b));
        assert_eq!(
            devices.authenticate(&Bearer::presented("papdev_nothing")).unwrap(),
            None
        );
    }

    #[test]
    fn a_devices_file_that_cannot_be_read_fails_closed() {
        let (dir, devices) = devices();
        std::fs::write(dir.path().join("devices.json"), b"{not json").unwrap();
        assert!(devices.authenticate(&Bearer::presented("papdev_x")).is_err());
    }

    #[test]
    fn a_device_is_named_by_id_or_by_a_name_only_one_bears_and_its_last_seen_kept_to_the_minute() {
        let (dir, devices) = devices();
        let (phone, _) = devices.mint("phone", "code", &At(1_000), &SystemRng).unwrap();
        let (laptop, _) = devices.mint("laptop", "code", &At(1_000), &SystemRng).unwrap();
        let (_, _) = devices.mint("laptop", "install", &At(1_000), &SystemRng).unwrap();
        assert_eq!(devices.resolve(&phone.id).unwrap(), phone.id);
        assert_eq!(devices.resolve("phone").unwrap(), phone.id);
        assert!(matches!(devices.resolve("laptop"), Err(DeviceLookupError::Ambiguous { ids, .. }) if ids.len() == 2));
        assert!(matches!(devices.resolve("tablet"), Err(DeviceLookupError::None(_))));
        assert!(
            devices.resolve(&laptop.id).is_ok(),
            "an id resolves even when its name is shared"
        );

        // lastSeen: written when stale, not again within the minute.
        assert_eq!(phone.last_seen, None);
        devices.seen(&phone, UnixTime::from_secs(2_000)).unwrap();
        let listed = |id: &str| devices.list().unwrap().into_iter().find(|d| d.id == id).unwrap();
        let seen = listed(&phone.id);
        assert_eq!(seen.last_seen, Some(UnixTime::from_secs(2_000)));
        devices.seen(&seen, UnixTime::from_secs(2_030)).unwrap();
        assert_eq!(listed(&phone.id).last_seen, Some(UnixTime::from_secs(2_000)));
        devices.seen(&seen, UnixTime::from_secs(2_060)).unwrap();
        assert_eq!(listed(&phone.id).last_seen, Some(UnixTime::from_secs(2_060)));
        let shown = serde_json::to_value(listed(&phone.id)).unwrap();
        assert!(
            shown["pairedAt"].is_string() && shown["lastSeen"].is_string(),
            "{shown}"
        );
        drop(dir);
    }
}
