//! `pap-agent consent`: grants, the ledger, refresh and revoke, as the operator runs them.

use std::sync::Arc;

use anyhow::bail;
use pap_browser::consent;
use pap_shared::{SystemClock, SystemRng};

use crate::cli::{ConsentCommand, LedgerCommand};
use crate::util::print_json;

/// `pap-agent consent ...`: the operator's channel (C7).
pub(crate) async fn consent_command(state: &std::path::Path, command: &ConsentCommand) -> anyhow::Result<()> {
    use pap_browser::chromium::LiveProfiles;
    use pap_browser::consent::{Caller, ConsentHost, GrantRequest, Operator, ScopeRequest, SourceSpec};
    // The ledger is checked as it stands: nothing is opened (or made) to do it.
    let open = || ConsentHost::open(state, Arc::new(SystemClock), Arc::new(SystemRng));
    let operator = Operator::from_operator_channel("cli");
    let live = LiveProfiles::new(state);
    let report = match command {
        ConsentCommand::Ledger {
            command: LedgerCommand::Verify,
        } => {
            let ledger = consent::Ledger::open(state)?;
            return match ledger.verify() {
                Ok(summary) => {
                    eprintln!("{}: {} record(s), intact", ledger.path().display(), summary.records);
                    Ok(())
                }
                Err(broken) => bail!("{}: {broken}", ledger.path().display()),
            };
        }
        ConsentCommand::Grant {
            domains,
            source,
            chromium_profile,
            interactive,
            full_profile,
            device,
            expires_in,
        } => {
            let host = open()?;
            let source = match (source, chromium_profile) {
                (Some(path), _) => SourceSpec::StorageState(path.clone()),
                (None, Some(dir)) => SourceSpec::ChromiumProfile(dir.clone()),
                (None, None) => SourceSpec::NativeLogin("cli".into()),
            };
            let scope = if *full_profile {
                eprintln!("{}", consent::FULL_PROFILE_WARNING);
                ScopeRequest::FullProfile
            } else if *interactive && domains.is_empty() {
                ScopeRequest::Domains(ask_per_domain(&host.scan(&source)?)?)
            } else {
                ScopeRequest::Domains(domains.clone())
            };
            let grant = host.grant(
                &operator,
                GrantRequest {
                    source,
                    scope,
                    interactive: *interactive,
                    device_id: device.clone(),
                    expires_at: expires_in.map(|s| pap_shared::Clock::now(&SystemClock).plus(s)),
                },
            )?;
            serde_json::to_value(&grant)?
        }
        ConsentCommand::List => {
            let host = open()?;
            // Grants past their expiresAt are revoked (C8) before the list is shown.
            host.expire(&live).await?;
            serde_json::json!({ "grants": host.list(&Caller::Operator(operator))? })
        }
        ConsentCommand::Refresh { grant, domains } => {
            let host = open()?;
            let domains = (!domains.is_empty()).then_some(domains.as_slice());
            let (refreshed, injection) = host.refresh(&Caller::Operator(operator), grant, domains, None)?;
            // The fresh material goes into the state directory's running browsers too.
            let injected = consent::LiveInstances::inject(&live, &injection)
                .await
                .map_err(|e| anyhow::anyhow!("the refresh is recorded, but a running browser did not take it: {e}"))?;
            serde_json::to_value(consent::RefreshReport {
                grant: refreshed.grant,
                injected,
            })?
        }
        ConsentCommand::Revoke { grant, domains } => {
            let host = open()?;
            let domains = (!domains.is_empty()).then_some(domains.as_slice());
            let revoked = host.revoke(&Caller::Operator(operator), grant, domains, &live).await?;
            serde_json::to_value(revoked.report())?
        }
        ConsentCommand::SinkAck {
            grant,
            provider,
            operated_by,
        } => {
            let host = open()?;
            eprintln!("acknowledging remote sink {provider}, operated by {operated_by}, for grant {grant}");
            serde_json::to_value(host.acknowledge_sink(&operator, grant, provider, operated_by)?)?
        }
        ConsentCommand::PairingRevoked { device } => {
            let host = open()?;
            let revoked = host.revoke_pairing(&operator, device, &live).await?;
            serde_json::json!({ "revoked": revoked.iter().map(|r| r.grant.id.clone()).collect::<Vec<_>>() })
        }
    };
    print_json(&report);
    Ok(())
}

/// C5: the scan's per-domain counts first (no value read yet), then a question per domain; only
/// the domains answered `y` are granted (and only then are values read).
pub(crate) fn ask_per_domain(counts: &std::collections::BTreeMap<String, u64>) -> anyhow::Result<Vec<String>> {
    use std::io::BufRead as _;
    if counts.is_empty() {
        bail!("the source holds no cookies or storage");
    }
    eprintln!("the source holds (a presence scan: no value has been read):");
    for (host, count) in counts {
        eprintln!("  {host}: {count} cookie(s)");
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut chosen = Vec::new();
    for host in counts.keys() {
        eprint!("grant {host}? [y/N] ");
        let answer = lines.next().transpose()?.unwrap_or_default();
        if answer.trim().eq_ignore_ascii_case("y") || answer.trim().eq_ignore_ascii_case("yes") {
            chosen.push(host.clone());
        }
    }
    Ok(chosen)
}
