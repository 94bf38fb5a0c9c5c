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
pub enum ResolveError {
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
    Store(#[from] StoreError),
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
    Store(#[from] StoreError),
}

/// The devices file could not be read or written: the host refuses (fails closed).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
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
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DeviceRecord {
    #[serde(flatten)]
    device: Device,
    /// SHA-256 of the bearer, base64url.
    bearer_sha256: String,
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
}

impl Devices {
    /// The devices of the agent whose state directory is `state_dir`.
    pub fn at(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("devices.json"),
        }
    }

    /// Pairs a device the operator installs locally: its bearer, returned once.
    pub fn mint(
        &self,
        name: &str,
        via: &str,
        clock: &dyn Clock,
        rng: &dyn Rng,
    ) -> Result<(Device, Bearer), StoreError> {
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
    ) -> Result<PairingCode, StoreError> {
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
    pub fn authenticate(&self, bearer: &Bearer) -> Result<Option<Device>, StoreError> {
        Ok(self.load()?.authenticate(bearer))
    }

    /// The devices paired now (read from disk), to authenticate a request and to see who was
    /// unpaired since.
    pub fn load(&self) -> Result<Paired, StoreError> {
        Ok(Paired(self.read()?.devices))
    }

    /// The paired devices.
    pub fn list(&self) -> Result<Vec<Device>, StoreError> {
        Ok(self.read()?.devices.into_iter().map(|d| d.device).collect())
    }

    /// The id of the device `name_or_id` names: its id, or the name of exactly one device.
    pub fn resolve(&self, name_or_id: &str) -> Result<String, ResolveError> {
        let devices = self.list()?;
        if devices.iter().any(|d| d.id == name_or_id) {
            return Ok(name_or_id.to_owned());
        }
        let named: Vec<&Device> = devices.iter().filter(|d| d.name == name_or_id).collect();
        match named.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => Err(ResolveError::None(name_or_id.to_owned())),
            many => Err(ResolveError::Ambiguous {
                name: name_or_id.to_owned(),
                ids: many.iter().map(|d| d.id.clone()).collect(),
            }),
        }
    }

    /// Records that a host served `device` (as just authenticated) at `now`, when its
    /// `lastSeen` is older than [`LAST_SEEN_GRANULARITY`]: a write at most once a minute per
    /// device, none otherwise.
    pub fn seen(&self, device: &Device, now: UnixTime) -> Result<(), StoreError> {
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

    /// Unpairs `id`: its bearer is refused from the next request on. Whether it was paired.
    pub fn revoke(&self, id: &str) -> Result<bool, StoreError> {
        self.update(|record| {
            let before = record.devices.len();
            record.devices.retain(|d| d.device.id != id);
            Ok(record.devices.len() != before)
        })
    }

    fn read(&self) -> Result<Record, StoreError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StoreError::Format {
                path: self.path.clone(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(source) => Err(self.io(source)),
        }
    }

    /// Reads, changes and writes the file under an exclusive lock, so a pairing in one process
    /// and a revoke in another never lose each other's change.
    fn update<T>(&self, change: impl FnOnce(&mut Record) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let _lock = self.lock()?;
        let mut record = self.read()?;
        let answer = change(&mut record)?;
        let bytes = serde_json::to_vec_pretty(&record).map_err(|source| StoreError::Format {
            path: self.path.clone(),
            source,
        })?;
        pap_browser::store::write_private(&self.path, &bytes).map_err(|e| self.io(e))?;
        Ok(answer)
    }

    fn lock(&self) -> Result<nix::fcntl::Flock<File>, StoreError> {
        let path = self.path.with_extension("lock");
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(|e| self.io(e))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| self.io(std::io::Error::from(errno)))
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
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

    fn devices() -> (tempdir::Dir, Devices) {
        let dir = tempdir::Dir::new();
        let devices = Devices::at(dir.path());
        (dir, devices)
    }

    mod tempdir {
        pub(super) struct Dir(std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Self {
                let mut raw = [0u8; 8];
                pap_shared::Rng::fill(&pap_shared::SystemRng, &mut raw);
                let path = std::env::temp_dir().join(format!("pap-pairing-{}", u64::from_le_bytes(raw)));
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }
            pub(super) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
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
        assert!(devices.revoke(&a.id).unwrap());
        assert!(!devices.revoke(&a.id).unwrap());
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
        assert!(matches!(devices.resolve("laptop"), Err(ResolveError::Ambiguous { ids, .. }) if ids.len() == 2));
        assert!(matches!(devices.resolve("tablet"), Err(ResolveError::None(_))));
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
