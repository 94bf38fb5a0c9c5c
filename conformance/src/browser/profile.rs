//! The profile level's hooks (AIP-63 §4, C1-C13), against any provider's
//! [`ProfileUnderTest`](super::ProfileUnderTest). Each hook works on its own domain (`cN.example`),
//! plants cookie values it then looks for where they must not be, and leaves no grant in force.

use std::path::{Path, PathBuf};

use pap_browser::consent::{GrantRequest, GrantedVia, ScopeRequest, SourceSpec};
use pap_browser::spec::{ToolError, ToolErrorCode, ToolResult};
use pap_shared::{Rng as _, SystemRng};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::{ProfileUnderTest, ProviderUnderTest};

fn surface(p: &dyn ProviderUnderTest) -> Result<&dyn ProfileUnderTest, String> {
    p.profile()
        .ok_or_else(|| "the provider offers no profile surface (grants, its instance's cookies and tabs)".into())
}

async fn running(p: &dyn ProviderUnderTest) -> Result<&dyn ProfileUnderTest, String> {
    p.launch()
        .await
        .map_err(|e| format!("launch failed: {} {}", e.code.as_str(), e.message))?;
    surface(p)
}

/// A storage-state file with one cookie per `(name, domain)`, each value a fresh planted secret.
fn source(profile: &dyn ProfileUnderTest, label: &str, cookies: &[(&str, &str)]) -> Result<(PathBuf, String), String> {
    let mut bytes = [0u8; 12];
    SystemRng.fill(&mut bytes);
    let planted = format!(
        "PLANTED{label}{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let cookies: Vec<Value> = cookies
        .iter()
        .map(|(name, domain)| {
            json!({"name": name, "value": planted, "domain": domain, "path": "/", "secure": true, "httpOnly": true, "sameSite": "Lax"})
        })
        .collect();
    let path = profile.scratch().join(format!("{label}-storage-state.json"));
    std::fs::write(&path, json!({ "cookies": cookies, "origins": [] }).to_string())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok((path, planted))
}

fn request(source: &Path, domains: &[&str]) -> GrantRequest {
    GrantRequest::for_domains(SourceSpec::StorageState(source.to_owned()), domains)
}

fn ok(result: ToolResult, what: &str) -> Result<Value, String> {
    match result {
        ToolResult::Ok(value) => Ok(value),
        ToolResult::Err(e) => Err(format!("{what} failed: {} {}", e.code.as_str(), e.message)),
    }
}

fn refused(result: ToolResult, code: ToolErrorCode, what: &str) -> Result<ToolError, String> {
    match result {
        ToolResult::Err(e) if e.code == code => Ok(e),
        ToolResult::Err(e) => Err(format!("{what} answered {}, not {}", e.code.as_str(), code.as_str())),
        ToolResult::Ok(value) => Err(format!("{what} was allowed: {value}")),
    }
}

/// Revokes `grant` through the agent's tool (how every hook leaves nothing in force).
async fn revoke(profile: &dyn ProfileUnderTest, device: Option<&str>, grant: &str) -> Result<Value, String> {
    ok(
        profile
            .call_as(device, "browser.profile.revoke", json!({ "grantId": grant }))
            .await,
        "browser.profile.revoke",
    )
}

fn ledger(profile: &dyn ProfileUnderTest) -> Vec<Value> {
    std::fs::read_to_string(profile.consent_dir().join("ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn consent_required(result: Result<(), ToolError>, host: &str, why: &str) -> Result<(), String> {
    match result {
        Err(e) if e.code == ToolErrorCode::ConsentRequired && e.cause.as_ref().is_some_and(|c| c["domain"] == host) => {
            Ok(())
        }
        Err(e) => Err(format!(
            "{why}: the join for {host} failed with {} (cause {:?}), not browser:consent_required naming it",
            e.code.as_str(),
            e.cause
        )),
        Ok(()) => Err(format!("{why}: the join for {host} was permitted")),
    }
}

fn holds(cookies: &[(String, String)], host: &str) -> bool {
    cookies
        .iter()
        .any(|(_, domain)| domain.trim_start_matches('.') == host || domain.ends_with(&format!(".{host}")))
}

/// C1: material enters only through a grant.
pub(super) async fn grant_required(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = running(p).await?;
    let (path, _) = source(profile, "c1", &[("session", "c1.example")])?;
    profile.inject_granted().await?;
    if holds(&profile.cookies().await, "c1.example") {
        return Err("the instance holds c1.example's cookie without any grant".into());
    }
    consent_required(profile.permit_join(None, "c1.example"), "c1.example", "without a grant")?;
    let grant = profile.grant(request(&path, &["c1.example"]))?;
    profile.inject_granted().await?;
    if !holds(&profile.cookies().await, "c1.example") {
        return Err("the granted cookie did not reach the instance".into());
    }
    profile
        .permit_join(None, "c1.example")
        .map_err(|e| format!("with a grant the join is refused: {}", e.message))?;
    revoke(profile, None, &grant.id).await.map(|_| ())
}

/// C2: explicit registrable domains or hosts only.
pub(super) async fn domains_explicit(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, _) = source(profile, "c2", &[("session", "c2.example")])?;
    // The empty list is C4's (`no-default-all`).
    let bad: [&[&str]; 7] = [
        &["*"],
        &["*.c2.example"],
        &[".c2.example"],
        &["com"],
        &["co.uk"],
        &["github.io"],
        &["127.0.0.1"],
    ];
    for domains in bad {
        if let Ok(grant) = profile.grant(request(&path, domains)) {
            let _ = revoke(profile, None, &grant.id).await;
            return Err(format!("a grant for {domains:?} was accepted"));
        }
    }
    let grant = profile.grant(request(&path, &["c2.example"]))?;
    let covered = profile.permit_join(None, "www.c2.example");
    let sibling = profile.permit_join(None, "notc2.example");
    revoke(profile, None, &grant.id).await?;
    covered.map_err(|e| format!("a grant for c2.example does not cover www.c2.example: {}", e.message))?;
    consent_required(sibling, "notc2.example", "a grant for c2.example")
}

/// C3: the named full-profile grant: a warning, a ledger record, local sinks only.
pub(super) async fn full_profile(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let warning = profile.full_profile_warning().to_ascii_lowercase();
    if !(warning.contains("every domain") || warning.contains("all domains")) || !warning.contains("profile") {
        return Err(format!(
            "the full-profile warning does not say the entire profile, every domain, is exposed: {warning:?}"
        ));
    }
    let (path, _) = source(profile, "c3", &[("session", "c3.example")])?;
    let mut asked = request(&path, &[]);
    asked.scope = ScopeRequest::FullProfile;
    let grant = profile.grant(asked)?;
    let recorded = ledger(profile)
        .iter()
        .any(|r| r["event"] == "grant" && r["grantId"] == grant.id.as_str() && r["fullProfile"] == true);
    let remote = profile.acknowledge_sink(&grant.id, "remote.test");
    revoke(profile, None, &grant.id).await?;
    if !grant.is_full_profile() || grant.domains().is_some() {
        return Err("the full-profile grant is not recorded as fullProfile without domains".into());
    }
    if !recorded {
        return Err("no ledger grant record with fullProfile: true".into());
    }
    match remote {
        Ok(_) => Err("a remote sink was added to a full-profile grant".into()),
        Err(_) => Ok(()),
    }
}

/// C4: a non-interactive request without domains fails and changes nothing.
pub(super) async fn no_default_all(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, _) = source(profile, "c4", &[("session", "c4.example")])?;
    let before = ledger(profile).len();
    match profile.grant(request(&path, &[])) {
        Ok(grant) => {
            let _ = revoke(profile, None, &grant.id).await;
            Err(format!("a request without domains made a grant ({:?})", grant.scope))
        }
        Err(_) if ledger(profile).len() != before => Err("the refused request changed the ledger".into()),
        Err(_) => Ok(()),
    }
}

/// C5: the presence scan counts per domain and reads no value; then only chosen domains are read.
pub(super) async fn presence_scan(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, planted) = source(
        profile,
        "c5",
        &[("a1", "a.c5.example"), ("a2", "a.c5.example"), ("b1", "b.c5.example")],
    )?;
    let scan = profile.scan(&path)?;
    let shown = format!("{scan:?}");
    if shown.contains(&planted) {
        return Err("the presence scan shows a cookie value".into());
    }
    if scan.get("a.c5.example") != Some(&2) || scan.get("b.c5.example") != Some(&1) {
        return Err(format!("the scan's per-domain counts are wrong: {shown}"));
    }
    let mut asked = request(&path, &["a.c5.example"]);
    asked.interactive = true;
    let grant = profile.grant(asked)?;
    revoke(profile, None, &grant.id).await?;
    if grant.cookie_count != 2 || grant.granted_via != GrantedVia::Interactive {
        return Err(format!(
            "the interactive grant of a.c5.example holds {} cookie(s) via {:?}",
            grant.cookie_count, grant.granted_via
        ));
    }
    Ok(())
}

/// C6: a remote sink gets material only after a human's sink-ack.
pub(super) async fn sink_ack(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, _) = source(profile, "c6", &[("session", "c6.example")])?;
    let grant = profile.grant(request(&path, &["c6.example"]))?;
    let result = async {
        if let Ok(count) = profile.remote_injection(&grant.id, "remote.test") {
            return Err(format!("{count} cookie(s) went to a remote sink nobody acknowledged"));
        }
        let acked = profile.acknowledge_sink(&grant.id, "remote.test")?;
        let ack_seq = acked
            .sinks
            .iter()
            .find_map(|s| match s {
                pap_browser::consent::Sink::Remote { provider_id, ack_seq } if provider_id == "remote.test" => {
                    Some(*ack_seq)
                }
                _ => None,
            })
            .ok_or("the acknowledged sink is not on the grant")?;
        let record = ledger(profile).into_iter().find(|r| r["seq"] == ack_seq);
        if !record.is_some_and(|r| r["event"] == "sink-ack" && r["actor"]["kind"] == "human") {
            return Err(format!("ackSeq {ack_seq} is not a human sink-ack record"));
        }
        profile
            .remote_injection(&grant.id, "remote.test")
            .map_err(|e| format!("the acknowledged sink is refused: {}", e.message))?;
        match profile.remote_injection(&grant.id, "other.test") {
            Ok(_) => Err("a second, unacknowledged remote sink got the material".into()),
            Err(_) => Ok(()),
        }
    }
    .await;
    revoke(profile, None, &grant.id).await?;
    result
}

/// C7: an agent refreshes within its grant; every widening is refused and recorded as deny.
pub(super) async fn agent_cannot_widen(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = running(p).await?;
    let (path, _) = source(profile, "c7", &[("session", "c7.example"), ("other", "c7x.example")])?;
    let (other_source, _) = source(profile, "c7-other", &[("session", "c7.example")])?;
    let grant = profile.grant(request(&path, &["c7.example"]))?;
    let result = async {
        ok(
            profile
                .call_as(None, "browser.profile.refresh", json!({ "grantId": grant.id }))
                .await,
            "a refresh within the grant",
        )?;
        let denies_before = ledger(profile).iter().filter(|r| r["event"] == "deny").count();
        refused(
            profile
                .call_as(
                    None,
                    "browser.profile.refresh",
                    json!({ "grantId": grant.id, "domains": ["c7.example", "c7x.example"] }),
                )
                .await,
            ToolErrorCode::PermissionDenied,
            "a refresh adding a domain",
        )?;
        refused(
            profile
                .call_as(
                    None,
                    "browser.profile.refresh",
                    json!({ "grantId": grant.id, "source": other_source.display().to_string() }),
                )
                .await,
            ToolErrorCode::PermissionDenied,
            "a refresh from another source",
        )?;
        if let ToolResult::Ok(_) = profile
            .call_as(None, "browser.profile.grant", json!({"domains": ["c7x.example"]}))
            .await
        {
            return Err("an agent tool created a grant".into());
        }
        let records = ledger(profile);
        let denies = records.iter().filter(|r| r["event"] == "deny").count();
        if denies < denies_before + 2 {
            return Err(format!(
                "{} deny record(s) for 2 refused widenings",
                denies - denies_before
            ));
        }
        if let Some(bad) = records.iter().find(|r| {
            r["actor"]["kind"] == "agent" && !["refresh", "revoke", "deny"].contains(&r["event"].as_str().unwrap_or(""))
        }) {
            return Err(format!("an agent wrote a {} record", bad["event"]));
        }
        if holds(&profile.cookies().await, "c7x.example") {
            return Err("the refused domain's cookie reached the instance".into());
        }
        Ok(())
    }
    .await;
    revoke(profile, None, &grant.id).await?;
    result
}

/// C8: revoke deletes the material, the instance's cookies and the tabs, before it reports.
pub(super) async fn revoke_deletes(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = running(p).await?;
    let (path, _) = source(profile, "c8", &[("session", "c8.example"), ("session", "c8b.example")])?;
    let grant = profile.grant(request(&path, &["c8.example", "c8b.example"]))?;
    profile.inject_granted().await?;
    profile.open_tab("https://c8.example/").await?;
    let narrowed = ok(
        profile
            .call_as(
                None,
                "browser.profile.revoke",
                json!({ "grantId": grant.id, "domains": ["c8.example"] }),
            )
            .await,
        "a domain-level revoke",
    )?;
    let cookies = profile.cookies().await;
    let tabs = profile.tabs().await;
    let joined = profile.permit_join(None, "c8.example");
    let kept = holds(&cookies, "c8b.example");
    let whole = revoke(profile, None, &grant.id).await?;
    let after = profile.cookies().await;
    if holds(&cookies, "c8.example") {
        return Err("after revoke the instance still holds c8.example's cookie".into());
    }
    if tabs.iter().any(|t| t.contains("c8.example")) {
        return Err(format!("after revoke a tab on c8.example is open: {tabs:?}"));
    }
    consent_required(joined, "c8.example", "after revoking c8.example")?;
    if !kept || narrowed["grant"]["domains"] != json!(["c8b.example"]) {
        return Err(format!(
            "a domain-level revoke did not narrow the grant: {}",
            narrowed["grant"]
        ));
    }
    if holds(&after, "c8b.example") {
        return Err("after the whole revoke the instance still holds c8b.example's cookie".into());
    }
    let records = ledger(profile);
    let revokes: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "revoke" && r["grantId"] == grant.id.as_str())
        .collect();
    if revokes.len() != 2 || revokes.iter().any(|r| r["derived"]["local"] != "deleted") {
        return Err(format!(
            "the revoke records do not say the material was deleted: {revokes:?}"
        ));
    }
    if whole["derived"]["remote"] != "not-applicable" {
        return Err(format!(
            "a local grant's revoke says remote {}",
            whole["derived"]["remote"]
        ));
    }
    Ok(())
}

/// Review M5: a grant's cookies live apart. A tab on a page no grant covers (a hostile site a
/// tool visits) runs in a jar without them, so its cross-site requests ride no granted session,
/// while the instance holds them for the grant's own pages.
pub(super) async fn context_isolation(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = running(p).await?;
    let (path, _) = source(profile, "m5", &[("session", "m5.example")])?;
    let grant = profile.grant(request(&path, &["m5.example"]))?;
    let result = async {
        profile.inject_granted().await?;
        if !holds(&profile.cookies().await, "m5.example") {
            return Err("the granted cookie did not reach the instance".to_owned());
        }
        let page = super::pages::page(super::pages::HELLO).await?;
        let opened = ok(
            p.call("browser.navigate", json!({ "url": page })).await,
            "browser.navigate",
        )?;
        let target = opened["target"].as_str().ok_or("browser.navigate returned no target")?;
        if holds(&profile.target_jar(target).await?, "m5.example") {
            return Err("a tab on a page no grant covers shares a jar with m5.example's session".into());
        }
        Ok(())
    }
    .await;
    revoke(profile, None, &grant.id).await?;
    result
}

/// C9: no value in a tool result, an error, the ledger or a file of the consent store.
pub(super) async fn never_print(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = running(p).await?;
    let (path, planted) = source(profile, "c9", &[("session", "c9.example"), ("other", "c9x.example")])?;
    let grant = profile.grant(request(&path, &["c9.example"]))?;
    profile.inject_granted().await?;
    let mut seen = Vec::new();
    for (tool, input) in [
        ("browser.profile.list", json!({})),
        ("browser.profile.refresh", json!({ "grantId": grant.id })),
        (
            "browser.profile.refresh",
            json!({ "grantId": grant.id, "domains": ["c9.example", "c9x.example"] }),
        ),
        ("browser.profile.revoke", json!({ "grantId": grant.id })),
        ("browser.profile.refresh", json!({ "grantId": grant.id })),
    ] {
        seen.push((
            tool.to_owned(),
            profile.call_as(None, tool, input).await.to_json().to_string(),
        ));
    }
    if let Err(e) = profile.permit_join(None, "c9.example") {
        seen.push(("the refused join".into(), serde_json::to_string(&e).unwrap_or_default()));
    }
    for file in files(&profile.consent_dir()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        seen.push((file.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()));
    }
    match seen.iter().find(|(_, text)| text.contains(&planted)) {
        Some((place, _)) => Err(format!("a planted cookie value is in {place}")),
        None => Ok(()),
    }
}

/// C10: one record per line, seq from 0, prev the hash of the line before; an edited, deleted
/// or truncated line is detected.
pub(super) async fn ledger_append_only(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, _) = source(profile, "c10", &[("session", "c10.example")])?;
    let grant = profile.grant(request(&path, &["c10.example"]))?;
    revoke(profile, None, &grant.id).await?;
    let text = std::fs::read_to_string(profile.consent_dir().join("ledger.jsonl")).map_err(|e| e.to_string())?;
    let lines: Vec<&str> = text.lines().collect();
    let mut prev: Option<String> = None;
    for (index, line) in lines.iter().enumerate() {
        let record: Value =
            serde_json::from_str(line).map_err(|_| format!("line {} is not one JSON record", index + 1))?;
        if record["seq"].as_u64() != u64::try_from(index).ok() {
            return Err(format!("line {} has seq {}", index + 1, record["seq"]));
        }
        if record.get("prev").and_then(Value::as_str).map(str::to_owned) != prev {
            return Err(format!("line {}'s prev is not the hash of the line before", index + 1));
        }
        prev = Some(
            Sha256::digest(line.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        );
    }
    let count = profile.verify_ledger(&profile.consent_dir())?;
    if count != u64::try_from(lines.len()).unwrap_or(0) {
        return Err(format!(
            "ledger verify counts {count} records, the file has {}",
            lines.len()
        ));
    }
    if lines.len() < 3 {
        return Err("the ledger has fewer than 3 records after a grant and a revoke".into());
    }
    let middle = lines.len() / 2;
    let edited: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i == middle {
                l.replacen("\"seq\"", "\"seq\" ", 1)
            } else {
                (*l).to_owned()
            }
        })
        .collect();
    let deleted: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != middle)
        .map(|(_, l)| (*l).to_owned())
        .collect();
    let truncated: Vec<String> = lines[..lines.len() - 1].iter().map(|l| (*l).to_owned()).collect();
    for (what, tampered) in [
        ("an edited line", edited),
        ("a deleted line", deleted),
        ("a truncated ledger", truncated),
    ] {
        let copy = profile.scratch().join(format!("c10-{}", what.replace(' ', "-")));
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).map_err(|e| e.to_string())?;
        for entry in std::fs::read_dir(profile.consent_dir())
            .map_err(|e| e.to_string())?
            .flatten()
        {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("ledger") {
                std::fs::copy(entry.path(), copy.join(&name)).map_err(|e| e.to_string())?;
            }
        }
        std::fs::write(copy.join("ledger.jsonl"), tampered.join("\n") + "\n").map_err(|e| e.to_string())?;
        if let Ok(n) = profile.verify_ledger(&copy) {
            return Err(format!("ledger verify passed {what} ({n} records)"));
        }
    }
    Ok(())
}

/// C11: directories 0700, files 0600, material sealed.
pub(super) async fn perms_and_encryption(p: &dyn ProviderUnderTest) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let profile = surface(p)?;
    let (path, planted) = source(profile, "c11", &[("c11-cookie-name", "c11.example")])?;
    let grant = profile.grant(request(&path, &["c11.example"]))?;
    let dir = profile.consent_dir();
    let mut problems = Vec::new();
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    };
    if mode(&dir) != 0o700 {
        problems.push(format!("{} is {:o}", dir.display(), mode(&dir)));
    }
    for file in files(&dir) {
        if mode(&file) != 0o600 {
            problems.push(format!("{} is {:o}", file.display(), mode(&file)));
        }
        if let Some(parent) = file.parent().filter(|d| mode(d) != 0o700) {
            problems.push(format!("{} is {:o}", parent.display(), mode(parent)));
        }
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        if text.contains(&planted) || text.contains("c11-cookie-name") {
            problems.push(format!("{} holds the material in clear", file.display()));
        }
    }
    revoke(profile, None, &grant.id).await?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// C12: a device-scoped grant is absent for every other device.
pub(super) async fn device_scope(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, _) = source(profile, "c12", &[("session", "c12.example")])?;
    let mut asked = request(&path, &["c12.example"]);
    asked.device_id = Some("phone".into());
    let grant = profile.grant(asked)?;
    let other = profile.permit_join(Some("laptop"), "c12.example");
    let own = profile.permit_join(Some("phone"), "c12.example");
    let listed_other = profile.call_as(Some("laptop"), "browser.profile.list", json!({})).await;
    let refreshed_other = profile
        .call_as(
            Some("laptop"),
            "browser.profile.refresh",
            json!({ "grantId": grant.id }),
        )
        .await;
    revoke(profile, Some("phone"), &grant.id).await?;
    consent_required(other, "c12.example", "from another device")?;
    own.map_err(|e| format!("the grant's own device is refused: {}", e.message))?;
    let listed = ok(listed_other, "browser.profile.list from another device")?;
    if listed["grants"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g["id"] == grant.id.as_str()))
    {
        return Err("another device lists the device-scoped grant".into());
    }
    if let ToolResult::Ok(_) = refreshed_other {
        return Err("another device refreshed the device-scoped grant".into());
    }
    Ok(())
}

/// C13: a revoked pairing's grants stop counting at once and are revoked.
pub(super) async fn pairing_revoked(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let profile = surface(p)?;
    let (path, _) = source(profile, "c13", &[("session", "c13.example")])?;
    let mut asked = request(&path, &["c13.example"]);
    asked.device_id = Some("watch".into());
    let grant = profile.grant(asked)?;
    profile
        .permit_join(Some("watch"), "c13.example")
        .map_err(|e| format!("the paired device is refused before revocation: {}", e.message))?;
    profile.pairing_revoked("watch").await?;
    let after = profile.permit_join(Some("watch"), "c13.example");
    let revoked = ledger(profile)
        .iter()
        .any(|r| r["event"] == "revoke" && r["grantId"] == grant.id.as_str());
    if after.is_ok() {
        let _ = revoke(profile, Some("watch"), &grant.id).await;
    }
    consent_required(after, "c13.example", "after the pairing was revoked")?;
    if revoked {
        Ok(())
    } else {
        Err("no revoke record for the revoked pairing's grant".into())
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}
