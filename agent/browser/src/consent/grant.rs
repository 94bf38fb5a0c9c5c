//! A grant (AIP-63 §4, `$defs/grant`): which domains' session material, from which source, may
//! reach which sinks. The stored shape is the schema's (closed), and a grant is made from it
//! only when the schema's rules hold: its domains or the full profile, never both (C2, C3); a
//! full-profile grant with local sinks only; at least one sink.

use serde::{Deserialize, Serialize};

use pap_shared::{GrantDomain, UnixTime};

/// Where a grant's material comes from (`source`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// What kind of source.
    pub kind: SourceKind,
    /// The profile (a path, or the instance for `native-login`).
    pub profile: String,
}

/// A source's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// A Chrome-family profile directory.
    Chrome,
    /// A Firefox profile directory (not readable here).
    Firefox,
    /// A storage-state file.
    File,
    /// The instance signs in itself; nothing is imported.
    NativeLogin,
}

/// Where material may go (`sinks[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Sink {
    /// This host's own browser instances.
    Local,
    /// A remote provider, acknowledged by a human in the ledger record `ackSeq` (C6).
    Remote {
        /// The remote provider.
        #[serde(rename = "providerId")]
        provider_id: String,
        /// The `seq` of its `sink-ack` record.
        #[serde(rename = "ackSeq")]
        ack_seq: u64,
    },
}

/// How the grant was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantedVia {
    /// Per domain, after a presence scan (C5).
    Interactive,
    /// Named on the command line.
    Flag,
}

/// What a grant covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantScope {
    /// These domains and their subdomains (C2).
    Domains(Vec<GrantDomain>),
    /// The whole profile, asked for by name (C3).
    FullProfile,
}

/// A grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "GrantRecord", into = "GrantRecord")]
pub struct Grant {
    /// Its id (`g_` and 128 random bits).
    pub id: String,
    /// The consent session it was given in.
    pub session_id: String,
    /// Where the material comes from.
    pub source: Source,
    /// Where it may go (at least one).
    pub sinks: Vec<Sink>,
    /// When.
    pub granted_at: UnixTime,
    /// How.
    pub granted_via: GrantedVia,
    /// How many cookies the store holds for it.
    pub cookie_count: u64,
    /// The paired device it is scoped to (C12).
    pub device_id: Option<String>,
    /// When it ends by itself.
    pub expires_at: Option<UnixTime>,
    /// When it was revoked.
    pub revoked_at: Option<UnixTime>,
    /// What it covers.
    pub scope: GrantScope,
}

impl Grant {
    /// Whether it is in force at `now`: not revoked, not expired.
    pub fn is_active(&self, now: UnixTime) -> bool {
        self.revoked_at.is_none() && !self.is_expired(now)
    }

    /// Whether its `expiresAt` has passed.
    pub fn is_expired(&self, now: UnixTime) -> bool {
        self.expires_at.is_some_and(|end| now >= end)
    }

    /// Whether it is the full profile (C3).
    pub fn is_full_profile(&self) -> bool {
        self.scope == GrantScope::FullProfile
    }

    /// Its domains; `None` for a full-profile grant.
    pub fn domains(&self) -> Option<&[GrantDomain]> {
        match &self.scope {
            GrantScope::Domains(domains) => Some(domains),
            GrantScope::FullProfile => None,
        }
    }

    /// Whether it covers `host` (a full-profile grant covers every host).
    pub fn covers(&self, host: &str) -> bool {
        match &self.scope {
            GrantScope::Domains(domains) => domains.iter().any(|d| d.covers(host)),
            GrantScope::FullProfile => true,
        }
    }

    /// Whether a call from `device` may see it (C12): a device-scoped grant only from its device.
    pub fn visible_to(&self, device: Option<&str>) -> bool {
        self.device_id.as_deref().is_none_or(|scoped| Some(scoped) == device)
    }
}

/// A grant exactly as `$defs/grant` writes it (closed): what `grants.json` holds.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GrantRecord {
    id: String,
    session_id: String,
    source: Source,
    sinks: Vec<Sink>,
    #[serde(with = "pap_shared::rfc3339")]
    granted_at: UnixTime,
    granted_via: GrantedVia,
    cookie_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    #[serde(
        default,
        with = "pap_shared::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    expires_at: Option<UnixTime>,
    #[serde(
        default,
        with = "pap_shared::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    revoked_at: Option<UnixTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    domains: Option<Vec<GrantDomain>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    full_profile: Option<bool>,
}

/// Why a stored grant breaks `$defs/grant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidGrant {
    /// Neither or both of `domains` and `fullProfile: true`, or an empty or repeated domain list.
    #[error("a grant names its domains (at least one, each once) or the full profile, exactly one of them")]
    Scope,
    /// A full-profile grant names a remote sink (C3).
    #[error("a full-profile grant has local sinks only")]
    RemoteFullProfile,
    /// No sink, or an empty id, session or device.
    #[error("a grant has an id, a session, at least one sink and no empty field")]
    Empty,
}

impl TryFrom<GrantRecord> for Grant {
    type Error = InvalidGrant;

    fn try_from(record: GrantRecord) -> Result<Self, InvalidGrant> {
        let scope = match (record.domains, record.full_profile) {
            (Some(domains), None) => {
                let unique = domains.iter().enumerate().all(|(i, d)| !domains[..i].contains(d));
                if domains.is_empty() || !unique {
                    return Err(InvalidGrant::Scope);
                }
                GrantScope::Domains(domains)
            }
            (None, Some(true)) => GrantScope::FullProfile,
            _ => return Err(InvalidGrant::Scope),
        };
        if scope == GrantScope::FullProfile && record.sinks.iter().any(|s| matches!(s, Sink::Remote { .. })) {
            return Err(InvalidGrant::RemoteFullProfile);
        }
        let empty = |s: &str| s.is_empty();
        if record.sinks.is_empty()
            || empty(&record.id)
            || empty(&record.session_id)
            || empty(&record.source.profile)
            || record.device_id.as_deref().is_some_and(empty)
            || record
                .sinks
                .iter()
                .any(|s| matches!(s, Sink::Remote { provider_id, .. } if provider_id.is_empty()))
        {
            return Err(InvalidGrant::Empty);
        }
        Ok(Self {
            id: record.id,
            session_id: record.session_id,
            source: record.source,
            sinks: record.sinks,
            granted_at: record.granted_at,
            granted_via: record.granted_via,
            cookie_count: record.cookie_count,
            device_id: record.device_id,
            expires_at: record.expires_at,
            revoked_at: record.revoked_at,
            scope,
        })
    }
}

impl From<Grant> for GrantRecord {
    fn from(grant: Grant) -> Self {
        let (domains, full_profile) = match grant.scope {
            GrantScope::Domains(domains) => (Some(domains), None),
            GrantScope::FullProfile => (None, Some(true)),
        };
        Self {
            id: grant.id,
            session_id: grant.session_id,
            source: grant.source,
            sinks: grant.sinks,
            granted_at: grant.granted_at,
            granted_via: grant.granted_via,
            cookie_count: grant.cookie_count,
            device_id: grant.device_id,
            expires_at: grant.expires_at,
            revoked_at: grant.revoked_at,
            domains,
            full_profile,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> UnixTime {
        UnixTime::parse_rfc3339(text).unwrap()
    }

    fn grant() -> Grant {
        Grant {
            id: "g_0123456789abcdef0123456789abcdef".into(),
            session_id: "cs_1".into(),
            source: Source {
                kind: SourceKind::File,
                profile: "/tmp/state.json".into(),
            },
            sinks: vec![Sink::Local],
            granted_at: at("2026-11-30T12:00:00Z"),
            granted_via: GrantedVia::Flag,
            cookie_count: 2,
            device_id: None,
            expires_at: Some(at("2026-11-30T13:00:00Z")),
            revoked_at: None,
            scope: GrantScope::Domains(vec![GrantDomain::parse("shop.example").unwrap()]),
        }
    }

    fn read(json: serde_json::Value) -> Result<Grant, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_grant_reads_back_as_written() {
        let ok = grant();
        let json = serde_json::to_value(&ok).unwrap();
        assert_eq!(json["grantedAt"], "2026-11-30T12:00:00Z");
        assert_eq!(json["domains"], serde_json::json!(["shop.example"]));
        assert!(json.get("fullProfile").is_none());
        assert_eq!(read(json).unwrap(), ok);
    }

    #[test]
    fn a_stored_grant_with_both_scopes_or_none_or_a_remote_full_profile_is_refused() {
        let ok = serde_json::to_value(grant()).unwrap();
        let mut both = ok.clone();
        both["fullProfile"] = true.into();
        assert!(read(both).unwrap_err().contains("exactly one"));
        let mut neither = ok.clone();
        neither.as_object_mut().unwrap().remove("domains");
        assert!(read(neither).is_err());
        let mut remote_full = ok.clone();
        remote_full.as_object_mut().unwrap().remove("domains");
        remote_full["fullProfile"] = true.into();
        read(remote_full.clone()).unwrap();
        remote_full["sinks"] =
            serde_json::json!([{"kind": "local"}, {"kind": "remote", "providerId": "cloud", "ackSeq": 3}]);
        assert!(read(remote_full).unwrap_err().contains("local sinks only"));
        let mut unknown = ok.clone();
        unknown["note"] = "x".into();
        assert!(read(unknown).is_err());
        let mut no_sink = ok;
        no_sink["sinks"] = serde_json::json!([]);
        assert!(read(no_sink).is_err());
    }

    #[test]
    fn every_grant_shape_the_host_writes_fits_the_schema() {
        // Lockstep with `$defs/grant`: domains or the full profile, remote sinks, a device,
        // an expiry, a revocation.
        let mut remote = grant();
        remote.sinks.push(Sink::Remote {
            provider_id: "cloud".into(),
            ack_seq: 4,
        });
        remote.device_id = Some("phone".into());
        remote.revoked_at = Some(at("2026-11-30T12:30:00Z"));
        let mut full = grant();
        full.scope = GrantScope::FullProfile;
        full.granted_via = GrantedVia::Interactive;
        full.source.kind = SourceKind::Chrome;
        full.expires_at = None;
        let mut native = grant();
        native.source = Source {
            kind: SourceKind::NativeLogin,
            profile: "cli".into(),
        };
        for shape in [grant(), remote, full, native] {
            let json = serde_json::to_value(&shape).unwrap();
            crate::spec::schema::check_def("grant", &json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(read(json).unwrap(), shape);
        }
    }

    #[test]
    fn coverage_expiry_and_device_scope() {
        let mut g = grant();
        assert!(g.covers("shop.example") && g.covers("www.shop.example"));
        assert!(!g.covers("evilshop.example") && !g.covers("example"));
        assert!(g.is_active(at("2026-11-30T12:59:59Z")));
        assert!(!g.is_active(at("2026-11-30T13:00:00Z")));
        assert!(g.visible_to(None) && g.visible_to(Some("phone")));
        g.device_id = Some("phone".into());
        assert!(g.visible_to(Some("phone")));
        assert!(!g.visible_to(Some("laptop")) && !g.visible_to(None));
    }
}
