//! A grant (AIP-63 §4, `$defs/grant`): which domains' session material, from which source, may
//! reach which sinks. The stored shape is the schema's, checked on every write, so a grant the
//! schema refuses is never kept.

use serde::{Deserialize, Serialize};

use pap_shared::{GrantDomain, UnixTime};

/// Where a grant's material comes from (`source`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// `chrome`, `firefox`, `file` or `native-login`.
    pub kind: String,
    /// The profile (a path, or the instance for `native-login`).
    pub profile: String,
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

/// A grant, in the schema's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// Its id (`g_` and 128 random bits).
    pub id: String,
    /// The consent session it was given in.
    pub session_id: String,
    /// Where the material comes from.
    pub source: Source,
    /// Where it may go.
    pub sinks: Vec<Sink>,
    /// When (RFC 3339).
    pub granted_at: String,
    /// `interactive` or `flag`.
    pub granted_via: String,
    /// How many cookies the store holds for it.
    pub cookie_count: u64,
    /// The paired device it is scoped to (C12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// When it ends by itself (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When it was revoked (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    /// The domains it covers, with their subdomains; absent for a full-profile grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<GrantDomain>>,
    /// A full-profile grant (C3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_profile: Option<bool>,
}

impl Grant {
    /// Whether it is in force at `now`: not revoked, not expired.
    pub fn is_active(&self, now: UnixTime) -> bool {
        self.revoked_at.is_none() && !self.is_expired(now)
    }

    /// Whether its `expiresAt` has passed.
    pub fn is_expired(&self, now: UnixTime) -> bool {
        self.expires_at
            .as_deref()
            .and_then(parse_rfc3339)
            .is_some_and(|end| now.as_secs() >= end.as_secs())
    }

    /// Whether it covers `host` (a full-profile grant covers every host).
    pub fn covers(&self, host: &str) -> bool {
        self.full_profile == Some(true)
            || self
                .domains
                .as_ref()
                .is_some_and(|domains| domains.iter().any(|d| d.covers(host)))
    }

    /// Whether a call from `device` may see it (C12): a device-scoped grant only from its device.
    pub fn visible_to(&self, device: Option<&str>) -> bool {
        self.device_id.as_deref().is_none_or(|scoped| Some(scoped) == device)
    }
}

/// Checks `grant` against the schema's `$defs/grant`.
pub(crate) fn check_grant(grant: &Grant) -> Result<(), String> {
    let value = serde_json::to_value(grant).map_err(|_| "not serialisable".to_owned())?;
    crate::spec::schema::check_def("grant", &value)
}

/// Parses the RFC 3339 UTC times this crate writes (`2026-11-30T12:00:00Z`).
pub(crate) fn parse_rfc3339(text: &str) -> Option<UnixTime> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let mut time = time.splitn(3, ':');
    let (hour, minute) = (time.next()?.parse::<i64>().ok()?, time.next()?.parse::<i64>().ok()?);
    let second = time.next()?.split('.').next()?.parse::<i64>().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(UnixTime::from_secs(days * 86_400 + hour * 3_600 + minute * 60 + second))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            id: "g_0123456789abcdef0123456789abcdef".into(),
            session_id: "cs_1".into(),
            source: Source {
                kind: "file".into(),
                profile: "/tmp/state.json".into(),
            },
            sinks: vec![Sink::Local],
            granted_at: "2026-11-30T12:00:00Z".into(),
            granted_via: "flag".into(),
            cookie_count: 2,
            device_id: None,
            expires_at: Some("2026-11-30T13:00:00Z".into()),
            revoked_at: None,
            domains: Some(vec![GrantDomain::parse("shop.example").unwrap()]),
            full_profile: None,
        }
    }

    #[test]
    fn rfc3339_round_trips_with_unix_time() {
        for secs in [0, 1_764_504_000, 1_798_000_123] {
            let t = UnixTime::from_secs(secs);
            assert_eq!(parse_rfc3339(&t.to_rfc3339()), Some(t));
        }
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn a_grant_fits_the_schema_and_the_schema_refuses_both_scopes_or_a_remote_full_profile() {
        let ok = grant();
        check_grant(&ok).unwrap();
        let mut both = ok.clone();
        both.full_profile = Some(true);
        assert!(check_grant(&both).is_err());
        let mut remote_full = ok.clone();
        remote_full.domains = None;
        remote_full.full_profile = Some(true);
        check_grant(&remote_full).unwrap();
        remote_full.sinks.push(Sink::Remote {
            provider_id: "cloud".into(),
            ack_seq: 3,
        });
        assert!(check_grant(&remote_full).is_err());
    }

    #[test]
    fn coverage_expiry_and_device_scope() {
        let mut g = grant();
        assert!(g.covers("shop.example") && g.covers("www.shop.example"));
        assert!(!g.covers("evilshop.example") && !g.covers("example"));
        let at = |s: &str| parse_rfc3339(s).unwrap();
        assert!(g.is_active(at("2026-11-30T12:59:59Z")));
        assert!(!g.is_active(at("2026-11-30T13:00:00Z")));
        assert!(g.visible_to(None) && g.visible_to(Some("phone")));
        g.device_id = Some("phone".into());
        assert!(g.visible_to(Some("phone")));
        assert!(!g.visible_to(Some("laptop")) && !g.visible_to(None));
    }
}
