//! AIP-63 §4, consent for the agent's browser: per-domain grants (C1-C5), sinks (C6), what an
//! agent may and may not do (C7), revoke that deletes (C8), values that never print (C9), the
//! append-only ledger (C10), files 0600/0700 with material sealed (C11), device scope and
//! pairing revocation (C12, C13).
//!
//! [`ConsentHost`] is the one door: a grant is made only with an [`Operator`] (the human's
//! channel, the CLI), material leaves the store only as an [`Injection`] the host builds for an
//! active grant, and every grant, refresh, revoke, sink acknowledgement and refused agent attempt
//! is a ledger record.
//!
//! Where things are: `request` (who asks for what), `grant` (the stored shape), `grants` (the
//! grants file and its lock), `material` and `chromium_profile` (sources and the sealed store),
//! `effects` (injections, permits, revoke scopes and what running browsers report), `ledger`,
//! `tools` (the agent's profile tools), `error`; the policy itself is here.

mod chromium_profile;
mod effects;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod grant;
mod grants;
mod ledger;
mod material;
mod redact;
mod request;
mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use self::effects::{
    Forgotten, Injection, JoinPermit, LiveError, LiveInstances, NoInstances, RefreshReport, Refreshed, RevokeReport,
    Revoked, Scope,
};
pub use self::error::ConsentError;
pub use self::grant::{Grant, GrantScope, GrantedVia, InvalidGrant, Sink, Source, SourceKind};
use self::grants::GrantStore;
pub use self::ledger::{
    Actor, ActorKind, Broken, Derived, Entry, Event, EventKind, Ledger, LedgerError, LocalOutcome, MAX_REASON, Record,
    RecordError, RemoteOutcome, Summary,
};
pub(crate) use self::material::Origin as StorageOrigin;
pub use self::material::SourceError;
use self::material::{MaterialStore, NameSalt};
use self::request::system;
pub use self::request::{Caller, FULL_PROFILE_WARNING, GrantRequest, ScopeRequest, SourceSpec};
pub(crate) use self::tools::input_schema as profile_input_schema;
pub use self::tools::profile_tool;
pub use crate::spec::{AgentCaller, Operator};
use crate::store::{SealingKey, private_dir};
use pap_shared::{Clock, GrantDomain, Rng};

/// Most `deny` records one consent host writes per minute (review L9): past it an agent's
/// refused attempts are refused all the same and counted, and the next record written says how
/// many went unrecorded, so refused calls cannot grow the ledger without bound.
pub const DENY_RECORDS_PER_MINUTE: u32 = 30;

/// The `deny` records written in the current minute, and the refusals not recorded since the
/// last one written.
#[derive(Debug, Default)]
struct DenyBudget {
    window_start: i64,
    written: u32,
    unrecorded: u64,
}

impl DenyBudget {
    /// Whether a deny at `now` (seconds) is recorded; if so, how many went unrecorded before it.
    fn take(&mut self, now: i64) -> Option<u64> {
        if now.saturating_sub(self.window_start) >= 60 {
            self.window_start = now;
            self.written = 0;
        }
        if self.written >= DENY_RECORDS_PER_MINUTE {
            self.unrecorded = self.unrecorded.saturating_add(1);
            return None;
        }
        self.written += 1;
        Some(std::mem::take(&mut self.unrecorded))
    }
}

/// The consent host of one agent state directory.
pub struct ConsentHost {
    dir: PathBuf,
    deny_budget: std::sync::Mutex<DenyBudget>,
    grants: GrantStore,
    ledger: Ledger,
    store: MaterialStore,
    salt: NameSalt,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
}

impl std::fmt::Debug for ConsentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsentHost")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Who revokes: a caller (the operator, or an agent within what it may see), or the host itself
/// (an expiry, a revoked pairing), which may revoke any grant.
enum Revoker<'a> {
    Caller(&'a Caller),
    System(Actor),
}

impl Revoker<'_> {
    fn actor(&self) -> Actor {
        match self {
            Self::Caller(caller) => caller.actor(),
            Self::System(actor) => actor.clone(),
        }
    }
}

/// What the first step of a revoke did under the store's lock: the grant stopped counting (or
/// narrowed), its sealed material for the scope deleted.
struct Narrowed {
    /// The grant as it now stands.
    grant: Grant,
    /// The domains revoked; `None` for the whole grant.
    domains: Option<Vec<GrantDomain>>,
    /// The whole grant ended.
    whole: bool,
    /// Sealed material was deleted.
    deleted: bool,
    /// The storage origins (ports included) the material held in the scope.
    origins: Vec<String>,
}

impl ConsentHost {
    /// Opens `state_dir/consent/` (0700), its ledger, its sealed store and the key and salt under
    /// `state_dir/keys/` (0600), making what is missing and tightening what is loose (C11).
    pub fn open(state_dir: &Path, clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Result<Self, ConsentError> {
        private_dir(state_dir)?;
        let dir = private_dir(&state_dir.join("consent"))?;
        // Whatever is already there (grants, ledger, sealed material, keys) is tightened too.
        for existing in [dir.clone(), state_dir.join("keys")] {
            tighten_tree(&existing)?;
        }
        let key = SealingKey::open(state_dir, rng.as_ref())?;
        Ok(Self {
            grants: GrantStore::new(&dir),
            ledger: Ledger::open(state_dir)?,
            store: MaterialStore::open(&dir, key)?,
            salt: NameSalt::open(state_dir, rng.as_ref())?,
            dir,
            deny_budget: std::sync::Mutex::default(),
            clock,
            rng,
        })
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The directory (`state_dir/consent`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The presence scan (C5): per-host cookie counts of a source, reading no value.
    pub fn scan(&self, source: &SourceSpec) -> Result<BTreeMap<String, u64>, ConsentError> {
        match source {
            SourceSpec::StorageState(path) => Ok(material::scan_storage_state(path)?),
            SourceSpec::ChromiumProfile(path) => Ok(chromium_profile::scan(path)?),
            SourceSpec::NativeLogin(_) => Ok(BTreeMap::new()),
        }
    }

    /// Makes a grant on the operator's channel (C1-C5): domains checked against the Public
    /// Suffix List, or the full profile by name; only covered material is read, sealed and
    /// counted; the ledger records it (names as salted hashes).
    pub fn grant(&self, operator: &Operator, request: GrantRequest) -> Result<Grant, ConsentError> {
        let scope = match &request.scope {
            ScopeRequest::Domains(names) if names.is_empty() => return Err(ConsentError::NoDomains),
            ScopeRequest::Domains(names) => GrantScope::Domains(parse_domains(names)?),
            ScopeRequest::FullProfile => GrantScope::FullProfile,
        };
        let _lock = self.grants.lock()?;
        let material = request.source.read(&|host: &str| match &scope {
            GrantScope::Domains(domains) => domains.iter().any(|d| d.covers(host)),
            GrantScope::FullProfile => true,
        })?;
        let grant = Grant {
            id: format!("g_{}", self.random_hex(16)),
            session_id: format!("cs_{}", self.random_hex(8)),
            source: request.source.to_source(),
            sinks: vec![Sink::Local],
            granted_at: self.clock.now(),
            granted_via: if request.interactive {
                GrantedVia::Interactive
            } else {
                GrantedVia::Flag
            },
            cookie_count: material.cookie_count(),
            device_id: request.device_id,
            expires_at: request.expires_at,
            revoked_at: None,
            scope,
        };
        self.store.save(self.rng.as_ref(), &grant.id, &material)?;
        let entry = Entry {
            actor: Caller::Operator(operator.clone()).actor(),
            event: Event::Grant {
                grant_id: grant.id.clone(),
                session_id: grant.session_id.clone(),
                domains: grant.domains().map(names),
                cookie_count: grant.cookie_count,
                name_hashes: self.salt.hashes(&material),
            },
        };
        if let Err(e) = self.ledger.append(&entry, self.clock.now()) {
            // Nothing unrecorded stays: the sealed material goes with the failed record.
            let _ = self.store.delete(&grant.id);
            return Err(e.into());
        }
        let mut grants = self.grants.load()?;
        grants.push(grant.clone());
        self.grants.save(&grants)?;
        Ok(grant)
    }

    /// A human acknowledges remote sink `provider_id` (run by `operator_name`) for a grant (C6):
    /// a `sink-ack` record, and the sink joins the grant with that record's `seq`.
    pub fn acknowledge_sink(
        &self,
        operator: &Operator,
        grant_id: &str,
        provider_id: &str,
        operator_name: &str,
    ) -> Result<Grant, ConsentError> {
        let _lock = self.grants.lock()?;
        let mut grants = self.grants.load()?;
        let now = self.clock.now();
        let grant = grants
            .iter_mut()
            .find(|g| g.id == grant_id && g.is_active(now))
            .ok_or_else(|| ConsentError::UnknownGrant(grant_id.into()))?;
        if grant.is_full_profile() {
            return Err(ConsentError::FullProfileRemote);
        }
        let seq = self.ledger.append(
            &Entry {
                actor: Caller::Operator(operator.clone()).actor(),
                event: Event::SinkAck {
                    grant_id: grant.id.clone(),
                    sink_id: provider_id.into(),
                    reason: Some(truncate(&format!("operated by {operator_name}"))),
                },
            },
            now,
        )?;
        grant
            .sinks
            .retain(|s| !matches!(s, Sink::Remote { provider_id: p, .. } if p == provider_id));
        grant.sinks.push(Sink::Remote {
            provider_id: provider_id.into(),
            ack_seq: seq,
        });
        let updated = grant.clone();
        self.grants.save(&grants)?;
        Ok(updated)
    }

    /// The grants `caller` may see (C12: a device-scoped grant only from its device; never
    /// values), active ones only.
    pub fn list(&self, caller: &Caller) -> Result<Vec<Grant>, ConsentError> {
        let now = self.clock.now();
        let revoked_devices = self.grants.revoked_devices()?;
        Ok(self
            .grants
            .load()?
            .into_iter()
            .filter(|g| g.is_active(now) && visible(g, caller, &revoked_devices))
            .collect())
    }

    fn find_visible(&self, caller: &Caller, grant_id: &str) -> Result<(Vec<Grant>, usize), ConsentError> {
        let grants = self.grants.load()?;
        let now = self.clock.now();
        let revoked_devices = self.grants.revoked_devices()?;
        let index = grants
            .iter()
            .position(|g| g.id == grant_id && g.is_active(now) && visible(g, caller, &revoked_devices))
            .ok_or_else(|| ConsentError::UnknownGrant(grant_id.into()))?;
        Ok((grants, index))
    }

    /// Re-reads a grant's domains (all, or `domains` among them) from its own source (C7: an
    /// agent may refresh the same source with the same or fewer domains; anything else is refused
    /// and recorded as `deny`). Returns the injection for the refreshed material.
    pub fn refresh(
        &self,
        caller: &Caller,
        grant_id: &str,
        domains: Option<&[String]>,
        source: Option<&SourceSpec>,
    ) -> Result<(Refreshed, Injection), ConsentError> {
        let _lock = self.grants.lock()?;
        let (mut grants, index) = self.find_visible(caller, grant_id)?;
        let grant = &grants[index];
        let own_source = SourceSpec::from_source(&grant.source).ok_or(ConsentError::SourceNotReadable {
            kind: grant.source.kind,
        })?;
        if source.is_some_and(|s| *s != own_source) {
            return Err(self.deny(
                caller,
                grant_id,
                "refresh asked for another source profile than the grant's",
            ));
        }
        let scope: Vec<GrantDomain> = match (domains, grant.domains()) {
            (None, Some(granted)) => granted.to_vec(),
            (None, None) => Vec::new(),
            (Some(asked), granted) => {
                let asked = parse_domains(asked)?;
                // Same or fewer: each asked domain is one the grant covers.
                if let Some(outside) = asked.iter().find(|d| !grant.covers(d.as_str())) {
                    let reason = format!("refresh asked for {outside}, which the grant does not name");
                    return Err(self.deny(caller, grant_id, &reason));
                }
                let _ = granted;
                asked
            }
        };
        let everything = grant.is_full_profile() && scope.is_empty();
        let in_scope = |host: &str| everything || scope.iter().any(|d| d.covers(host));
        let fresh = own_source.read(&in_scope)?;
        let mut stored = self.store.load(grant_id)?;
        stored.replace(fresh.clone(), in_scope);
        self.store.save(self.rng.as_ref(), grant_id, &stored)?;
        let count = stored.cookie_count();
        self.ledger.append(
            &Entry {
                actor: caller.actor(),
                event: Event::Refresh {
                    grant_id: grant_id.into(),
                    domains: names(&scope),
                    full_profile: everything,
                    cookie_count: count,
                    name_hashes: self.salt.hashes(&fresh),
                },
            },
            self.clock.now(),
        )?;
        grants[index].cookie_count = count;
        let grant = grants[index].clone();
        self.grants.save(&grants)?;
        Ok((
            Refreshed { grant, domains: scope },
            Injection {
                grant_id: grant_id.into(),
                cookies: fresh.cookies,
                origins: fresh.origins,
            },
        ))
    }

    /// Records an agent's refused attempt (C7), at most [`DENY_RECORDS_PER_MINUTE`] a minute,
    /// and returns the error it sees.
    pub fn deny(&self, caller: &Caller, grant_id: &str, reason: &str) -> ConsentError {
        let now = self.clock.now();
        let budget = self
            .deny_budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(now.as_secs());
        let Some(unrecorded) = budget else {
            return ConsentError::Refused(reason.into());
        };
        let recorded = if unrecorded == 0 {
            reason.to_owned()
        } else {
            format!("[{unrecorded} earlier refusal(s) not recorded] {reason}")
        };
        let entry = Entry {
            actor: caller.actor(),
            event: Event::Deny {
                grant_id: Some(grant_id.to_owned()).filter(|g| !g.is_empty()),
                reason: truncate(&recorded),
            },
        };
        match self.ledger.append(&entry, now) {
            Ok(_) => ConsentError::Refused(reason.into()),
            Err(e) => e.into(),
        }
    }

    /// Revokes a grant whole, or some of its domains (C8): the grant stops counting first, then
    /// the sealed material for the scope is deleted, the running browsers give up its cookies,
    /// storage and tabs, remote sinks are asked to end their session, and the `revoke` record
    /// carries both outcomes. Reports only after all of that.
    pub async fn revoke(
        &self,
        caller: &Caller,
        grant_id: &str,
        domains: Option<&[String]>,
        live: &dyn LiveInstances,
    ) -> Result<Revoked, ConsentError> {
        self.revoke_as(Revoker::Caller(caller), grant_id, domains, live).await
    }

    async fn revoke_as(
        &self,
        revoker: Revoker<'_>,
        grant_id: &str,
        domains: Option<&[String]>,
        live: &dyn LiveInstances,
    ) -> Result<Revoked, ConsentError> {
        let narrowed = self.narrow(&revoker, grant_id, domains)?;
        let live_scope = match (&narrowed.domains, narrowed.grant.domains()) {
            (Some(asked), _) => asked.clone(),
            (None, Some(granted)) => granted.to_vec(),
            (None, None) => Vec::new(),
        };
        let scope = if narrowed.grant.is_full_profile() && narrowed.whole {
            Scope::Everything
        } else {
            Scope::Domains(&live_scope)
        };
        let forgotten = live.forget(scope, &narrowed.origins).await;
        let remote = end_remote_sinks(&narrowed.grant, live).await;
        let (forgotten, live_error) = match forgotten {
            Ok(f) => (f, None),
            Err(e) => (Forgotten::default(), Some(e)),
        };
        let derived = Derived {
            local: if narrowed.deleted || forgotten.cookies > 0 || forgotten.tabs > 0 {
                LocalOutcome::Deleted
            } else {
                LocalOutcome::None
            },
            remote,
        };
        self.ledger.append(
            &Entry {
                actor: revoker.actor(),
                event: Event::Revoke {
                    grant_id: grant_id.into(),
                    domains: narrowed.domains.as_deref().map(names),
                    derived,
                    reason: live_error
                        .as_ref()
                        .map(|e| truncate(&format!("a running browser could not be cleaned: {e}"))),
                },
            },
            self.clock.now(),
        )?;
        match live_error {
            Some(e) => Err(ConsentError::Live(e)),
            None => Ok(Revoked {
                grant: narrowed.grant,
                forgotten,
                derived,
            }),
        }
    }

    /// The first step of a revoke, under the store's lock: the grant stops counting (a whole
    /// revoke) or narrows (some domains) before anything else, and the sealed material for the
    /// scope is deleted. An expired or pairing-revoked grant can still be revoked: that is how
    /// it is cleaned.
    fn narrow(
        &self,
        revoker: &Revoker<'_>,
        grant_id: &str,
        domains: Option<&[String]>,
    ) -> Result<Narrowed, ConsentError> {
        let _lock = self.grants.lock()?;
        let mut grants = self.grants.load()?;
        let revoked_devices = self.grants.revoked_devices()?;
        let may_revoke = |g: &Grant| match revoker {
            Revoker::System(_) => true,
            Revoker::Caller(caller) => visible(g, caller, &revoked_devices),
        };
        let index = grants
            .iter()
            .position(|g| g.id == grant_id && g.revoked_at.is_none() && may_revoke(g))
            .ok_or_else(|| ConsentError::UnknownGrant(grant_id.into()))?;
        let grant = &mut grants[index];
        let asked: Option<Vec<GrantDomain>> = match (domains, &grant.scope) {
            (None, _) => None,
            (Some(_), GrantScope::FullProfile) => return Err(ConsentError::FullProfileByDomain),
            (Some(asked), GrantScope::Domains(granted)) => {
                let asked = parse_domains(asked)?;
                if let Some(outside) = asked.iter().find(|d| !granted.contains(d)) {
                    return Err(ConsentError::NotInGrant {
                        domain: outside.as_str().to_owned(),
                    });
                }
                Some(asked)
            }
        };
        let remaining: Vec<GrantDomain> = match (&asked, grant.domains()) {
            (Some(asked), Some(granted)) => granted.iter().filter(|d| !asked.contains(d)).cloned().collect(),
            _ => Vec::new(),
        };
        let whole = asked.is_none() || remaining.is_empty();
        // First the grant stops counting, so nothing can use it while the rest happens.
        if whole {
            grant.revoked_at = Some(self.clock.now());
        } else {
            grant.scope = GrantScope::Domains(remaining);
        }
        // The storage origins the material held in scope, ports included, go to the live
        // instances with the scope.
        let (deleted, origins) = if whole {
            // A grant without material (a native login) has nothing to load.
            let origins = self
                .store
                .load(grant_id)
                .map(|stored| stored.origins_where(|_| true))
                .unwrap_or_default();
            (self.store.delete(grant_id)?, origins)
        } else {
            let asked = asked.clone().unwrap_or_default();
            let covered = |host: &str| asked.iter().any(|d| d.covers(host));
            let mut stored = self.store.load(grant_id)?;
            let before = stored.cookies.len() + stored.origins.len();
            let origins = stored.origins_where(covered);
            stored.retain(|host| !covered(host));
            let deleted = before != stored.cookies.len() + stored.origins.len();
            grant.cookie_count = stored.cookie_count();
            self.store.save(self.rng.as_ref(), grant_id, &stored)?;
            (deleted, origins)
        };
        let grant = grant.clone();
        self.grants.save(&grants)?;
        Ok(Narrowed {
            grant,
            domains: asked,
            whole,
            deleted,
            origins,
        })
    }

    /// Revokes every grant whose `expiresAt` has passed (a `system` revoke each).
    pub async fn expire(&self, live: &dyn LiveInstances) -> Result<usize, ConsentError> {
        let now = self.clock.now();
        let expired: Vec<String> = self
            .grants
            .load()?
            .into_iter()
            .filter(|g| g.revoked_at.is_none() && g.is_expired(now))
            .map(|g| g.id)
            .collect();
        for id in &expired {
            self.revoke_as(Revoker::System(system("expiry", None)), id, None, live)
                .await?;
        }
        Ok(expired.len())
    }

    /// AIP-59 revoked the pairing of `device_id` (C13): its grants stop counting at once (the
    /// device is recorded first), then each is revoked under C8.
    pub async fn revoke_pairing(
        &self,
        _operator: &Operator,
        device_id: &str,
        live: &dyn LiveInstances,
    ) -> Result<Vec<Revoked>, ConsentError> {
        {
            let _lock = self.grants.lock()?;
            self.grants.add_revoked_device(device_id)?;
        }
        let scoped: Vec<String> = self
            .grants
            .load()?
            .into_iter()
            .filter(|g| g.revoked_at.is_none() && g.device_id.as_deref() == Some(device_id))
            .map(|g| g.id)
            .collect();
        // Every grant of the device is revoked, whatever an earlier one met (review N12): a
        // browser that could not be cleaned for one grant must not keep the next grant alive.
        let mut out = Vec::new();
        let mut unclean = Vec::new();
        let mut failed = None;
        for id in scoped {
            let revoker = Revoker::System(system("pairing-revoked", Some(device_id)));
            match self.revoke_as(revoker, &id, None, live).await {
                Ok(revoked) => out.push(revoked),
                Err(ConsentError::Live(error)) => unclean.push(error),
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        if let Some(error) = failed {
            return Err(error);
        }
        LiveError::all(unclean).map_or(Ok(out), |error| Err(ConsentError::Live(error)))
    }

    /// Leave to join `host` from this host's browser: an active grant visible to `caller`, with
    /// a local sink, that covers it. Otherwise `browser:consent_required` naming the host.
    pub fn permit_join(&self, caller: &Caller, host: &str) -> Result<JoinPermit, ConsentError> {
        let grant = self
            .list(caller)?
            .into_iter()
            .find(|g| g.covers(host) && g.sinks.contains(&Sink::Local))
            .ok_or_else(|| ConsentError::ConsentRequired { domain: host.into() })?;
        Ok(JoinPermit {
            grant_id: grant.id,
            host: host.to_ascii_lowercase(),
        })
    }

    /// Replaces every value held for an active grant (cookies and storage, 8 characters or
    /// longer) wherever it appears in the strings of `value`, raw or in an encoding the host
    /// recognises (`redact`: base64 at any alignment, hex, percent, JSON escapes, runs of 8
    /// characters), and says how many it replaced (C9, review M4): what a page shows an agent
    /// through a tool (`btoa(document.cookie)` from `browser.evaluate`, a body that echoes a
    /// cookie) is redacted.
    pub fn redact(&self, value: &mut serde_json::Value) -> Result<usize, ConsentError> {
        let now = self.clock.now();
        let mut materials = Vec::new();
        for grant in self.grants.load()?.iter().filter(|g| g.is_active(now)) {
            materials.push(self.store.load(&grant.id)?);
        }
        let secrets = materials.iter().flat_map(|m| {
            m.cookies.iter().map(|c| c.value.expose()).chain(
                m.origins
                    .iter()
                    .flat_map(|o| o.local_storage.iter().map(|i| i.value.expose())),
            )
        });
        Ok(redact::Redactor::new(secrets).map_or(0, |redactor| redactor.redact(value)))
    }

    /// The grant `caller` may use on `host` in a local browser: the first active one covering it
    /// with the local sink.
    pub fn local_grant_for(&self, caller: &Caller, host: &str) -> Result<Option<Grant>, ConsentError> {
        Ok(self
            .list(caller)?
            .into_iter()
            .find(|g| g.covers(host) && g.sinks.contains(&Sink::Local)))
    }

    /// The material of the grant `caller` may use on `host` in a local browser (the first active
    /// one covering it with the local sink), or `None`: what a tab on `host`, or a join to it,
    /// runs with, in a browser context of its own (review M5).
    pub fn local_injection_for(&self, caller: &Caller, host: &str) -> Result<Option<Injection>, ConsentError> {
        match self.local_grant_for(caller, host)? {
            Some(grant) => self.local_injection_of(caller, &grant.id),
            None => Ok(None),
        }
    }

    /// The material of grant `grant_id`, if `caller` may use it in a local browser (active,
    /// visible to it, with the local sink).
    pub fn local_injection_of(&self, caller: &Caller, grant_id: &str) -> Result<Option<Injection>, ConsentError> {
        let usable = self
            .list(caller)?
            .into_iter()
            .any(|g| g.id == grant_id && g.sinks.contains(&Sink::Local));
        if !usable {
            return Ok(None);
        }
        let material = self.store.load(grant_id)?;
        Ok(Some(Injection {
            cookies: material.cookies,
            origins: material.origins,
            grant_id: grant_id.to_owned(),
        }))
    }

    /// Whether the grant `grant_id` (in force or not) lets a tab reach a host at or under
    /// `domain`: it covers `domain`, or one of its domains lies under it; a full-profile grant
    /// reaches every host. An unknown grant reaches nothing. What the tool host asks to know
    /// whether a grant's cookie jar can hold a Session on one of the person's sites (AIP-7).
    pub fn grant_reaches(&self, grant_id: &str, domain: &str) -> Result<bool, ConsentError> {
        Ok(self.grants.load()?.iter().any(|g| {
            g.id == grant_id
                && (g.covers(domain)
                    || g.domains()
                        .is_some_and(|ds| ds.iter().any(|d| crate::persons::host_is_under(d.as_str(), domain))))
        }))
    }

    /// Whether grant `grant_id` still counts for anyone: active, and the device it is scoped to
    /// (if any) still paired. A browser context of a grant that does not is ended (M5).
    pub fn still_counts(&self, grant_id: &str) -> Result<bool, ConsentError> {
        let now = self.clock.now();
        let revoked_devices = self.grants.revoked_devices()?;
        Ok(self.grants.load()?.iter().any(|g| {
            g.id == grant_id && g.is_active(now) && !g.device_id.as_ref().is_some_and(|d| revoked_devices.contains(d))
        }))
    }

    /// The material of every grant `caller` may use, for this host's own instances (at launch).
    pub fn local_injections(&self, caller: &Caller) -> Result<Vec<Injection>, ConsentError> {
        let mut out = Vec::new();
        for grant in self.list(caller)? {
            if grant.sinks.contains(&Sink::Local) {
                let material = self.store.load(&grant.id)?;
                out.push(Injection {
                    cookies: material.cookies,
                    origins: material.origins,
                    grant_id: grant.id,
                });
            }
        }
        Ok(out)
    }

    /// The material of a grant for remote provider `provider_id` (C6): refused unless the grant
    /// names that sink with the `seq` of a human `sink-ack` record for it.
    pub fn remote_injection(
        &self,
        caller: &Caller,
        grant_id: &str,
        provider_id: &str,
    ) -> Result<Injection, ConsentError> {
        let (grants, index) = self.find_visible(caller, grant_id)?;
        let grant = &grants[index];
        let refused = || ConsentError::SinkNotAcknowledged {
            provider_id: provider_id.into(),
        };
        let ack_seq = grant
            .sinks
            .iter()
            .find_map(|s| match s {
                Sink::Remote {
                    provider_id: p,
                    ack_seq,
                } if p == provider_id => Some(*ack_seq),
                _ => None,
            })
            .ok_or_else(refused)?;
        let records = self.ledger.records().map_err(LedgerError::Broken)?;
        let acknowledged = records.iter().any(|r| {
            r.seq == ack_seq
                && r.entry.actor.kind == ActorKind::Human
                && matches!(&r.entry.event, Event::SinkAck { grant_id: g, sink_id, .. }
                    if g == grant_id && sink_id == provider_id)
        });
        if !acknowledged || grant.is_full_profile() {
            return Err(refused());
        }
        let material = self.store.load(grant_id)?;
        Ok(Injection {
            grant_id: grant_id.into(),
            cookies: material.cookies,
            origins: material.origins,
        })
    }

    fn random_hex(&self, bytes: usize) -> String {
        let mut buf = vec![0u8; bytes];
        self.rng.fill(&mut buf);
        buf.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// All grants, revoked ones included.
    pub fn all(&self) -> Result<Vec<Grant>, ConsentError> {
        self.grants.load()
    }
}

/// Whether `caller` may see `grant` (C12: a device-scoped grant only from its device; the
/// operator sees all), and no revoked pairing has ended it (C13: at once, whatever the revoke
/// did after).
fn visible(grant: &Grant, caller: &Caller, revoked_devices: &[String]) -> bool {
    let device_ok = match caller {
        Caller::Operator(_) => true,
        Caller::Agent(_) => grant.visible_to(caller.device()),
    };
    device_ok && !grant.device_id.as_ref().is_some_and(|d| revoked_devices.contains(d))
}

/// Asks each remote sink of `grant` to end its session (C8); the worst outcome over the sinks.
async fn end_remote_sinks(grant: &Grant, live: &dyn LiveInstances) -> RemoteOutcome {
    let mut worst = RemoteOutcome::NotApplicable;
    for sink in &grant.sinks {
        if let Sink::Remote { provider_id, .. } = sink {
            worst = worst.max(live.end_remote(provider_id).await);
        }
    }
    worst
}

/// Directories under `dir` (and `dir`) 0700, files 0600 (C11), whatever made them.
fn tighten_tree(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    private_dir(dir)?;
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            tighten_tree(&entry.path())?;
        } else if kind.is_file() {
            #[cfg(unix)]
            std::fs::set_permissions(entry.path(), std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        }
    }
    Ok(())
}

fn parse_domains(names: &[String]) -> Result<Vec<GrantDomain>, ConsentError> {
    let mut out: Vec<GrantDomain> = Vec::new();
    for name in names {
        let domain = GrantDomain::parse(name).map_err(|why| ConsentError::InvalidDomain {
            domain: name.clone(),
            why,
        })?;
        if !out.contains(&domain) {
            out.push(domain);
        }
    }
    if out.is_empty() {
        return Err(ConsentError::NoDomains);
    }
    Ok(out)
}

fn names(domains: &[GrantDomain]) -> Vec<String> {
    domains.iter().map(|d| d.as_str().to_owned()).collect()
}

/// A ledger `reason` is at most [`MAX_REASON`] characters.
fn truncate(text: &str) -> String {
    text.chars().take(MAX_REASON).collect()
}

#[cfg(test)]
mod tests;
