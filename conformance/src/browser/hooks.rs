//! The hooks, by id (aip-63-tables.md §5). Each starts from a known state and says what failed.

use pap_browser::spec::{CallGate, InstanceState, Launch, ToolId, parse_manifest};
use pap_browser::spec::{ToolErrorCode, ToolResult};
use serde_json::{Value, json};

use super::{Body, Hook, Level, ProviderUnderTest, ToolsUnderTest, pages, profile};

macro_rules! hook {
    ($id:literal, [$($rule:literal),+], $level:expr, $f:path) => {
        Hook { id: $id, rule: &[$($rule),+], level: $level, run: Body::Provider(|p| Box::pin($f(p))), needs: None }
    };
    // A hook that needs only the tools: it runs against an MCP host too.
    ($id:literal, [$($rule:literal),+], $level:expr, tools $f:path) => {
        Hook { id: $id, rule: &[$($rule),+], level: $level, run: Body::Tools(|p| Box::pin($f(p))), needs: None }
    };
    // A hook of a vendor tool: it runs only against a provider that offers the tool.
    ($id:literal, [$($rule:literal),+], $level:expr, vendor $tool:expr, $f:path) => {
        Hook { id: $id, rule: &[$($rule),+], level: $level, run: Body::Tools(|p| Box::pin($f(p))), needs: Some($tool) }
    };
    // M1-M6: the manifest loader's diagnostics that name the rule.
    ($id:literal, manifest $rule:literal) => {
        Hook { id: $id, rule: &[$rule], level: Level::Core, run: Body::Provider(|p| Box::pin(async move { rule_breaks(p, $rule) })), needs: None }
    };
}

/// Every hook, in the order the suite runs them.
pub const HOOKS: &[Hook] = &[
    hook!("core.manifest.schema", manifest "M1"),
    hook!("core.manifest.remote-sink", manifest "M2"),
    hook!("core.manifest.cdp-endpoint", manifest "M3"),
    hook!("core.manifest.implements-gate", manifest "M4"),
    hook!("core.manifest.profile-modes", manifest "M5"),
    hook!("core.manifest.conformance-claims", manifest "M6"),
    hook!("core.tools.ids", ["T1"], Level::Core, tools_ids),
    hook!("core.tools.resolver-filter", ["T2"], Level::Core, tools_resolver),
    hook!("core.tools.unsupported", ["T3"], Level::Core, tools_unsupported),
    hook!("core.tools.error-codes", ["T4"], Level::Core, tools_error_codes),
    hook!("core.lifecycle.states", ["L1"], Level::Core, lifecycle_states),
    hook!(
        "core.lifecycle.launch-idempotent",
        ["L2"],
        Level::Core,
        launch_idempotent
    ),
    hook!("core.lifecycle.attach-not-ready", ["L3"], Level::Core, attach_not_ready),
    hook!("core.lifecycle.health-pure", ["L4"], Level::Core, health_pure),
    hook!("core.lifecycle.stop-sweep", ["L5"], Level::Core, stop_sweep),
    hook!("core.supervision.crash-loop", ["L6"], Level::Core, crash_loop),
    hook!(
        "core.supervision.reset-operator-only",
        ["L7"],
        Level::Core,
        reset_operator_only
    ),
    hook!("core.supervision.reap-on-start", ["L8"], Level::Core, reap_on_start),
    hook!("core.supervision.launch-budget", ["L9"], Level::Core, launch_budget),
    hook!("core.supervision.starting-wait", ["L10"], Level::Core, starting_wait),
    hook!(
        "core.lifecycle.chrome-fresh-userdir",
        ["L13"],
        Level::Core,
        fresh_userdir
    ),
    hook!("core.tools.navigate", ["T1"], Level::Core, tools tool_navigate),
    hook!("core.tools.evaluate", ["T1"], Level::Core, tools tool_evaluate),
    hook!("core.tools.get-dom", ["T1"], Level::Core, tools tool_get_dom),
    hook!("core.tools.screenshot", ["T1"], Level::Core, tools tool_screenshot),
    hook!("core.navigation.https-only", ["SEC-H3"], Level::Core, tools navigation_rule),
    hook!("interaction.targets.keepalive", ["L11"], Level::Interaction, keepalive),
    hook!(
        "interaction.tools.click-fill",
        ["T1"],
        Level::Interaction,
        tools tool_click_fill
    ),
    hook!("interaction.tools.tabs", ["T1"], Level::Interaction, tools tool_tabs),
    hook!(
        "interaction.vendor.page-model",
        ["T1"],
        Level::Interaction,
        vendor ToolId::Snapshot,
        vendor_page_model
    ),
    hook!(
        "interaction.targets.stale-handle",
        ["L12"],
        Level::Interaction,
        stale_handle
    ),
    hook!("network.tools.requests", ["T1"], Level::Network, tools tool_requests),
    hook!("network.tools.cdp-send", ["T1"], Level::Network, tools tool_cdp_send),
    hook!("download.tools.download", ["T1"], Level::Download, tool_download),
    hook!(
        "profile.consent.grant-required",
        ["C1"],
        Level::Profile,
        profile::grant_required
    ),
    hook!(
        "profile.consent.domains-explicit",
        ["C2"],
        Level::Profile,
        profile::domains_explicit
    ),
    hook!(
        "profile.consent.full-profile",
        ["C3"],
        Level::Profile,
        profile::full_profile
    ),
    hook!(
        "profile.consent.no-default-all",
        ["C4"],
        Level::Profile,
        profile::no_default_all
    ),
    hook!(
        "profile.consent.presence-scan",
        ["C5"],
        Level::Profile,
        profile::presence_scan
    ),
    hook!("profile.consent.sink-ack", ["C6"], Level::Profile, profile::sink_ack),
    hook!(
        "profile.consent.agent-cannot-widen",
        ["C7"],
        Level::Profile,
        profile::agent_cannot_widen
    ),
    hook!(
        "profile.consent.revoke-deletes",
        ["C8"],
        Level::Profile,
        profile::revoke_deletes
    ),
    hook!(
        "profile.consent.never-print",
        ["C9"],
        Level::Profile,
        profile::never_print
    ),
    hook!(
        "profile.consent.context-isolation",
        ["SEC-M5"],
        Level::Profile,
        profile::context_isolation
    ),
    hook!(
        "profile.consent.ledger-append-only",
        ["C10"],
        Level::Profile,
        profile::ledger_append_only
    ),
    hook!(
        "profile.consent.perms-and-encryption",
        ["C11"],
        Level::Profile,
        profile::perms_and_encryption
    ),
    hook!(
        "profile.consent.device-scope",
        ["C12"],
        Level::Profile,
        profile::device_scope
    ),
    hook!(
        "profile.consent.pairing-revoked",
        ["C13"],
        Level::Profile,
        profile::pairing_revoked
    ),
];

fn ok(result: ToolResult, what: &str) -> Result<Value, String> {
    match result {
        ToolResult::Ok(value) => Ok(value),
        ToolResult::Err(e) => Err(format!("{what} failed: {} {}", e.code.as_str(), e.message)),
    }
}

async fn running(p: &dyn ToolsUnderTest) -> Result<(), String> {
    p.launch()
        .await
        .map(|_| ())
        .map_err(|e| format!("launch failed: {} {}", e.code.as_str(), e.message))
}

async fn fresh_target(p: &dyn ToolsUnderTest) -> Result<String, String> {
    running(p).await?;
    let opened = ok(
        p.call("browser.navigate", json!({ "url": pages::page(pages::HELLO).await? }))
            .await,
        "browser.navigate",
    )?;
    opened["target"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "browser.navigate returned no target".into())
}

/// Brings the provider to a stopped state from wherever the previous hook left it. A redundant
/// stop that fails is L5's finding (`core.lifecycle.stop-sweep`), not this hook's.
async fn settle_stopped(p: &dyn ProviderUnderTest) {
    let _ = p.stop().await;
}

/// The provider's manifest, loaded; when it does not load, every diagnostic.
fn loaded(p: &dyn ProviderUnderTest) -> Result<pap_browser::spec::BrowserManifest, String> {
    parse_manifest(&p.manifest_text(), None).map_err(|diagnostics| {
        let all: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        format!("the manifest does not load: {}", all.join("; "))
    })
}

fn rule_breaks(p: &dyn ProviderUnderTest, rule: &str) -> Result<(), String> {
    match parse_manifest(&p.manifest_text(), None) {
        Ok(_) => Ok(()),
        Err(diagnostics) => {
            let mine: Vec<String> = diagnostics
                .iter()
                .filter(|d| d.rule == rule)
                .map(ToString::to_string)
                .collect();
            if mine.is_empty() { Ok(()) } else { Err(mine.join("; ")) }
        }
    }
}

async fn tools_ids(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let manifest = loaded(p)?;
    for implements in &manifest.implements {
        if implements.tool.starts_with("browser.") && implements.reserved().is_none() {
            return Err(format!(
                "{} is in the reserved browser. namespace but is not a reserved tool",
                implements.tool
            ));
        }
    }
    Ok(())
}

async fn tools_resolver(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let manifest = loaded(p)?;
    let mut without = manifest.clone();
    without.browser.capabilities = pap_browser::spec::Capabilities::default();
    without.id = format!("{}-without-capabilities", manifest.id);
    for implements in &manifest.implements {
        let Some(gate) = implements.reserved().and_then(|t| t.spec().gate) else {
            continue;
        };
        let both = [without.clone(), manifest.clone()];
        let chosen = pap_browser::spec::resolve(&both, &implements.tool, Some(gate)).map(|m| m.id.clone());
        if chosen.as_deref() != Some(manifest.id.as_str()) {
            return Err(format!("{} needing {gate} resolved to {chosen:?}", implements.tool));
        }
    }
    Ok(())
}

async fn tools_unsupported(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let manifest = loaded(p)?;
    let target = fresh_target(p).await?;
    // Without `cdp`, `browser.list_requests` in particular (aip-63-tables §5, core).
    let missing = ToolId::ALL
        .into_iter()
        .filter(|t| !manifest.lists(t.as_str()))
        .min_by_key(|t| (*t != ToolId::ListRequests, *t));
    let Some(missing) = missing else { return Ok(()) };
    let missing = missing.as_str();
    match p.call(missing, json!({ "target": target })).await {
        ToolResult::Err(e) if e.code == ToolErrorCode::Unsupported => {
            let named = e
                .cause
                .as_ref()
                .and_then(|c| c["capability"].as_str())
                .map(str::to_owned);
            match named {
                Some(capability) if e.message.contains(&capability) => Ok(()),
                _ => Err(format!(
                    "{missing} answered browser:unsupported without naming the capability"
                )),
            }
        }
        ToolResult::Err(e) => Err(format!(
            "{missing} answered {} instead of browser:unsupported",
            e.code.as_str()
        )),
        ToolResult::Ok(_) => Err(format!("{missing} is not listed but answered a result")),
    }
}

async fn tools_error_codes(p: &dyn ProviderUnderTest) -> Result<(), String> {
    settle_stopped(p).await;
    match p.call("browser.navigate", json!({ "url": "about:blank" })).await {
        ToolResult::Err(e)
            if e.code == ToolErrorCode::NotReady && e.cause.as_ref().is_some_and(|c| c.get("state").is_some()) =>
        {
            Ok(())
        }
        ToolResult::Err(e) => Err(format!(
            "a call to a stopped browser answered {} ({})",
            e.code.as_str(),
            e.message
        )),
        ToolResult::Ok(_) => Err("a call to a stopped browser answered a result".into()),
    }
}

const STATES: [InstanceState; 7] = [
    InstanceState::Absent,
    InstanceState::Starting,
    InstanceState::Healthy,
    InstanceState::Degraded,
    InstanceState::Stopping,
    InstanceState::Stopped,
    InstanceState::CrashLooping,
];

async fn lifecycle_states(p: &dyn ProviderUnderTest) -> Result<(), String> {
    settle_stopped(p).await;
    let before = p.health().await.state;
    if !matches!(before, InstanceState::Absent | InstanceState::Stopped) || !STATES.contains(&before) {
        return Err(format!("before launch the state is {before}"));
    }
    running(p).await?;
    let up = p.health().await.state;
    if !up.is_usable() {
        return Err(format!("after launch the state is {up}"));
    }
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
    let after = p.health().await.state;
    if after != InstanceState::Stopped {
        return Err(format!("after stop the state is {after}, not stopped"));
    }
    Ok(())
}

async fn launch_idempotent(p: &dyn ProviderUnderTest) -> Result<(), String> {
    settle_stopped(p).await;
    let first = p.launch().await.map_err(|e| format!("launch failed: {}", e.message))?;
    let second = p
        .launch()
        .await
        .map_err(|e| format!("the second launch failed: {}", e.message))?;
    if first.pid != second.pid || first.boot_id != second.boot_id {
        return Err(format!(
            "a second launch started another instance ({:?} then {:?})",
            first.pid, second.pid
        ));
    }
    if !second.was_already_running {
        return Err("the second launch did not say wasAlreadyRunning".into());
    }
    Ok(())
}

async fn attach_not_ready(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let target = fresh_target(p).await?;
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
    match p
        .call("browser.evaluate", json!({ "target": target, "expression": "1" }))
        .await
    {
        ToolResult::Err(e) if e.code == ToolErrorCode::NotReady => {
            let state = e.cause.as_ref().and_then(|c| c["state"].as_str()).map(str::to_owned);
            if state.is_some() {
                Ok(())
            } else {
                Err("browser:not_ready does not carry the state".into())
            }
        }
        ToolResult::Err(e) => Err(format!("a stopped instance answered {}", e.code.as_str())),
        ToolResult::Ok(_) => Err("a stopped instance answered a result".into()),
    }
}

async fn health_pure(p: &dyn ProviderUnderTest) -> Result<(), String> {
    running(p).await?;
    let before = p.target_count().await.ok_or("the provider cannot count its targets")?;
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let state = p.health().await.state;
        if started.elapsed() > std::time::Duration::from_secs(5) {
            return Err("health() took longer than timeoutMs (5000)".into());
        }
        if !state.is_usable() {
            return Err(format!("a running instance reports {state}"));
        }
    }
    let after = p.target_count().await.ok_or("the provider cannot count its targets")?;
    if after != before {
        Err(format!("health() opened targets ({before} -> {after})"))
    } else {
        Ok(())
    }
}

async fn stop_sweep(p: &dyn ProviderUnderTest) -> Result<(), String> {
    settle_stopped(p).await;
    let unmarked = p.plant_unmarked().await?;
    let launched = p.launch().await.map_err(|e| format!("launch failed: {}", e.message))?;
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
    if launched.was_already_running {
        // From stopped, a launch that found the instance running attached to one the host did
        // not start: stop must leave it, and only a forced stop may end it.
        if let Some(pid) = launched.pid {
            if !p.is_running(pid) {
                return Err(format!("stop ended {pid}, an instance the host did not launch"));
            }
            p.launch()
                .await
                .map_err(|e| format!("attaching again failed: {}", e.message))?;
            p.stop_forced()
                .await
                .map_err(|e| format!("the forced stop failed: {}", e.message))?;
            if p.is_running(pid) {
                return Err(format!("the forced stop left {pid} running"));
            }
        }
    } else if let Some(pid) = launched.pid
        && p.is_running(pid)
    {
        return Err(format!("the browser process {pid} survived stop"));
    }
    if !p.is_running(unmarked) {
        return Err(format!("stop ended process {unmarked}, which carries no marker"));
    }
    p.stop()
        .await
        .map_err(|e| format!("a second stop failed: {}", e.message))
}

async fn crash_loop(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let mut s = p.supervision();
    let policy = s.policy();
    for n in 0..policy.max_failures {
        let now = 1_000 * n as u64;
        s.launch(now)
            .map_err(|e| format!("launch {now} refused: {}", e.message))?;
        s.launch_failed(now + 10, "exited with status 1");
    }
    let health = s.health();
    if health.state != InstanceState::CrashLooping {
        return Err(format!(
            "after {} failed launches in a row the state is {}",
            policy.max_failures, health.state
        ));
    }
    if health.reason.as_deref() != Some("exited with status 1") {
        return Err("health() does not carry the last failure".into());
    }
    match s.launch(1_000 * policy.max_failures as u64) {
        Err(e) if e.code == ToolErrorCode::CrashLooping && e.message.contains("exited with status 1") => Ok(()),
        Err(e) => Err(format!(
            "a fourth launch answered {} without the last failure",
            e.code.as_str()
        )),
        Ok(_) => Err("a fourth launch was spawned".into()),
    }
}

async fn reset_operator_only(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let mut s = p.supervision();
    for now in 0..s.policy().max_failures as u64 {
        s.launch(now).map_err(|e| format!("launch refused: {}", e.message))?;
        s.launch_failed(now, "boom");
    }
    for now in [600_000, 86_400_000] {
        let _ = s.tick(now);
        if s.launch(now).is_ok() || s.health().state != InstanceState::CrashLooping {
            return Err(format!("crash-looping was left without an operator (at {now} ms)"));
        }
        if !matches!(s.call(now), CallGate::Refuse(_)) {
            return Err("a tool call got through a crash-looping instance".into());
        }
    }
    match s.operator_reset(86_400_001) {
        Ok(Launch::Spawn { .. }) => Ok(()),
        other => Err(format!("an operator reset did not relaunch: {other:?}")),
    }
}

async fn reap_on_start(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let orphan = p.plant_orphan().await?;
    if !p.is_running(orphan) {
        return Err("the planted orphan did not start".into());
    }
    p.host_start().await;
    if p.is_running(orphan) {
        Err(format!("the orphan {orphan} left by a killed host survived the start"))
    } else {
        Ok(())
    }
}

async fn launch_budget(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let mut s = p.supervision();
    let policy = s.policy();
    // Progress twice per progress window, to just short of the hard ceiling: never killed.
    let step = (policy.progress_window / 2).max(1);
    let last = policy.hard_ceiling.saturating_sub(1);
    s.launch(0).map_err(|e| format!("launch refused: {}", e.message))?;
    for now in (step..=last).step_by(usize::try_from(step).unwrap_or(usize::MAX)) {
        s.progress(now);
        if let Some(stalled) = s.tick(now) {
            return Err(format!(
                "a launch progressing every {step} ms was killed at {now} ms: {}",
                stalled.reason
            ));
        }
    }
    s.ready();
    if s.health().state != InstanceState::Healthy || s.health().reason.is_some() {
        return Err("the slow launch was counted as a failure".into());
    }
    let mut s = p.supervision();
    s.launch(0).map_err(|e| format!("launch refused: {}", e.message))?;
    if s.tick(policy.budget.max(policy.progress_window)).is_none() {
        return Err(format!(
            "a launch with no progress outlived its {} ms budget",
            policy.budget
        ));
    }
    Ok(())
}

async fn starting_wait(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let mut s = p.supervision();
    let budget = s.policy().budget;
    let half = budget / 2;
    s.launch(1_000).map_err(|e| format!("launch refused: {}", e.message))?;
    match s.call(1_000 + half) {
        CallGate::Wait(remaining) if remaining == budget - half => {}
        other => {
            return Err(format!(
                "a call while starting did not wait the remaining budget: {other:?}"
            ));
        }
    }
    match s.call(1_000 + budget) {
        CallGate::Refuse(e) if e.code == ToolErrorCode::Starting && e.retryable == Some(true) => Ok(()),
        other => Err(format!(
            "after the budget the call did not fail with retryable browser:starting: {other:?}"
        )),
    }
}

async fn fresh_userdir(p: &dyn ProviderUnderTest) -> Result<(), String> {
    running(p).await?;
    let Some(dir) = p.user_data_dir().await else {
        // Only a remote browser has no profile directory here; a local one must show it.
        let manifest = loaded(p)?;
        return match manifest.browser.location {
            pap_browser::spec::Location::Remote => Ok(()),
            pap_browser::spec::Location::Local => {
                Err("a local provider does not report its user-data directory".into())
            }
        };
    };
    if pap_browser::chromium::is_default_profile(&dir) {
        return Err(format!(
            "the instance runs on a default user-data directory {}",
            dir.display()
        ));
    }
    if !dir.exists() {
        Err(format!("the user-data directory {} does not exist", dir.display()))
    } else {
        Ok(())
    }
}

async fn tool_navigate(p: &dyn ToolsUnderTest) -> Result<(), String> {
    fresh_target(p).await.map(|_| ())
}

async fn tool_evaluate(p: &dyn ToolsUnderTest) -> Result<(), String> {
    let target = fresh_target(p).await?;
    let value = ok(
        p.call(
            "browser.evaluate",
            json!({ "target": target, "expression": "document.getElementById('h').textContent" }),
        )
        .await,
        "browser.evaluate",
    )?;
    if value["value"] == "hello" {
        Ok(())
    } else {
        Err(format!("evaluate answered {}", value["value"]))
    }
}

async fn tool_get_dom(p: &dyn ToolsUnderTest) -> Result<(), String> {
    let target = fresh_target(p).await?;
    let dom = ok(
        p.call("browser.get_dom", json!({ "target": target, "selector": "#h" }))
            .await,
        "browser.get_dom",
    )?;
    if dom["html"].as_str().is_some_and(|h| h.contains("hello")) {
        Ok(())
    } else {
        Err(format!("get_dom answered {}", dom["html"]))
    }
}

async fn tool_screenshot(p: &dyn ToolsUnderTest) -> Result<(), String> {
    let target = fresh_target(p).await?;
    let shot = ok(
        p.call("browser.screenshot", json!({ "target": target })).await,
        "browser.screenshot",
    )?;
    if shot["bytes"].as_u64().is_some_and(|b| b > 0) {
        Ok(())
    } else {
        Err("the screenshot is empty".into())
    }
}

async fn keepalive(p: &dyn ProviderUnderTest) -> Result<(), String> {
    running(p).await?;
    let opened = ok(
        p.call("browser.tabs", json!({ "action": "open", "keepAlive": true }))
            .await,
        "browser.tabs open",
    )?;
    let target = opened["target"]
        .as_str()
        .ok_or("tabs open returned no target")?
        .to_owned();
    p.reap_idle().await;
    ok(
        p.call("browser.evaluate", json!({ "target": target, "expression": "1" }))
            .await,
        "a keepAlive target after the idle reaper",
    )
    .map(|_| ())
}

async fn stale_handle(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let target = fresh_target(p).await?;
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
    running(p).await?;
    match p
        .call("browser.evaluate", json!({ "target": target, "expression": "1" }))
        .await
    {
        ToolResult::Err(e) if e.code == ToolErrorCode::TargetGone => Ok(()),
        ToolResult::Err(e) => Err(format!("a handle of the previous boot answered {}", e.code.as_str())),
        ToolResult::Ok(_) => Err("a handle of the previous boot was rebound to a new target".into()),
    }
}

async fn tool_click_fill(p: &dyn ToolsUnderTest) -> Result<(), String> {
    running(p).await?;
    let opened = ok(
        p.call("browser.navigate", json!({ "url": pages::page(pages::FORM).await? }))
            .await,
        "browser.navigate",
    )?;
    let target = opened["target"].as_str().ok_or("browser.navigate returned no target")?;
    ok(
        p.call(
            "browser.fill",
            json!({ "target": target, "selector": "#name", "value": "Ada" }),
        )
        .await,
        "browser.fill",
    )?;
    ok(
        p.call("browser.click", json!({ "target": target, "selector": "#go" }))
            .await,
        "browser.click",
    )?;
    let out = ok(
        p.call(
            "browser.evaluate",
            json!({ "target": target, "expression": "document.getElementById('out').textContent" }),
        )
        .await,
        "browser.evaluate",
    )?;
    if out["value"] == "hi Ada" {
        Ok(())
    } else {
        Err(format!("after fill and click the page shows {}", out["value"]))
    }
}

/// The ref on the first line of a snapshot that holds `part`.
fn ref_on(snapshot: &str, part: &str) -> Result<String, String> {
    let line = snapshot
        .lines()
        .find(|line| line.contains(part))
        .ok_or_else(|| format!("the snapshot has no {part}: {snapshot}"))?;
    let at = line.find("[ref=").ok_or_else(|| format!("no ref on {line}"))? + 5;
    let end = line[at..].find(']').ok_or_else(|| format!("no ref on {line}"))?;
    Ok(line[at..at + end].to_owned())
}

/// The page model, vendor tools under the provider's own namespace (`pap.browser.`, T1's MAY),
/// run against a provider that offers them: a snapshot of a form with refs; a fill, an option
/// chosen and a click by those refs, waited for by the text they make; a click that opens a
/// `confirm()` returns with it, dismissed by `handle_dialog`; the console; an element as JPEG;
/// the viewport resized; the page as PDF; back to it from another page.
async fn vendor_page_model(p: &dyn ToolsUnderTest) -> Result<(), String> {
    running(p).await?;
    let url = pages::page(pages::MODEL).await?;
    let opened = ok(
        p.call("browser.navigate", json!({ "url": url })).await,
        "browser.navigate",
    )?;
    let target = opened["target"].as_str().ok_or("browser.navigate returned no target")?;
    let snapshot = ok(
        p.call("pap.browser.snapshot", json!({ "target": target })).await,
        "pap.browser.snapshot",
    )?;
    let text = snapshot["snapshot"].as_str().ok_or("the snapshot has no text")?;
    let name = ref_on(text, "textbox \"Name\"")?;
    let size = ref_on(text, "combobox \"Size\"")?;
    let go = ref_on(text, "button \"Go\"")?;
    let ask = ref_on(text, "button \"Ask\"")?;
    let call = async |tool: &str, input: Value| ok(p.call(tool, input).await, tool);
    call("browser.fill", json!({ "target": target, "ref": name, "value": "Ada" })).await?;
    call(
        "pap.browser.select_option",
        json!({ "target": target, "ref": size, "values": ["Large"] }),
    )
    .await?;
    call("browser.click", json!({ "target": target, "ref": go })).await?;
    call(
        "pap.browser.wait_for",
        json!({ "target": target, "text": "hi Ada l", "timeoutMs": 5000 }),
    )
    .await?;
    let asked = call("browser.click", json!({ "target": target, "ref": ask })).await?;
    if asked["dialog"]["type"] != "confirm" {
        return Err(format!("a click that opens confirm() answered {asked}"));
    }
    call(
        "pap.browser.handle_dialog",
        json!({ "target": target, "accept": false }),
    )
    .await?;
    call(
        "pap.browser.wait_for",
        json!({ "target": target, "text": "no", "timeoutMs": 5000 }),
    )
    .await?;
    let console = call("pap.browser.console_messages", json!({ "target": target })).await?;
    if !console["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["text"] == "model page"))
    {
        return Err(format!("the console shows {console}"));
    }
    let shot = call(
        "browser.screenshot",
        json!({ "target": target, "ref": go, "format": "jpeg" }),
    )
    .await?;
    if shot["format"] != "jpeg" {
        return Err(format!("an element's JPEG answered format {}", shot["format"]));
    }
    call(
        "pap.browser.resize",
        json!({ "target": target, "width": 640, "height": 480 }),
    )
    .await?;
    let pdf = call("pap.browser.pdf_save", json!({ "target": target })).await?;
    if pdf["bytes"].as_u64().unwrap_or(0) == 0 {
        return Err(format!("the PDF is empty: {pdf}"));
    }
    let other = pages::page(pages::HELLO).await?;
    call("browser.navigate", json!({ "url": other, "target": target })).await?;
    let back = call("pap.browser.navigate_back", json!({ "target": target })).await?;
    if back["url"] != url.as_str() {
        return Err(format!("navigate_back landed on {}", back["url"]));
    }
    Ok(())
}

async fn tool_tabs(p: &dyn ToolsUnderTest) -> Result<(), String> {
    running(p).await?;
    let opened = ok(
        p.call("browser.tabs", json!({ "action": "open" })).await,
        "browser.tabs open",
    )?;
    let target = opened["target"]
        .as_str()
        .ok_or("tabs open returned no target")?
        .to_owned();
    let listed = ok(
        p.call("browser.tabs", json!({ "action": "list" })).await,
        "browser.tabs list",
    )?;
    let ids: Vec<&str> = listed["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["target"].as_str().or(t.as_str()))
        .collect();
    if !ids.contains(&target.as_str()) {
        return Err(format!("tabs list does not show the opened target {target}: {listed}"));
    }
    ok(
        p.call("browser.tabs", json!({ "action": "close", "target": target }))
            .await,
        "browser.tabs close",
    )?;
    match p
        .call("browser.evaluate", json!({ "target": target, "expression": "1" }))
        .await
    {
        ToolResult::Err(_) => Ok(()),
        ToolResult::Ok(_) => Err("a closed target still answers".into()),
    }
}

/// The navigation rule (security review H3): no tool takes the browser to `file:`, `chrome:`,
/// a top-level `data:` document or a loopback service nobody named, and a page of the suite's
/// origin reaches no such service by redirect, `fetch` or image either.
async fn navigation_rule(p: &dyn ToolsUnderTest) -> Result<(), String> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    running(p).await?;
    // 127.0.0.2 is loopback too, and not the suite's origin: nobody named it.
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let unnamed = pages::serve_on(
        [127, 0, 0, 2],
        axum::Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "a local service" }
        }),
    )
    .await?;
    for url in [
        "file:///etc/hostname",
        "chrome://version",
        "data:text/html,<p>a document nobody serves</p>",
        &format!("{unnamed}/"),
    ] {
        if let ToolResult::Ok(value) = p.call("browser.navigate", json!({ "url": url })).await {
            return Err(format!("browser.navigate went to {url}: {value}"));
        }
    }
    let away = format!("{unnamed}/redirected");
    let site = pages::serve_on(
        [127, 0, 0, 1],
        axum::Router::new()
            .route(
                "/",
                axum::routing::get(|| async { axum::response::Html("<h1 id=h>a page of the suite</h1>") }),
            )
            .route(
                "/away",
                axum::routing::get(move || async move { axum::response::Redirect::temporary(&away) }),
            ),
    )
    .await?;
    // Refused or not (a provider may report the blocked hop either way), it must not arrive.
    let _ = p
        .call("browser.navigate", json!({ "url": format!("{site}/away") }))
        .await;
    let opened = ok(
        p.call("browser.navigate", json!({ "url": format!("{site}/") })).await,
        "browser.navigate",
    )?;
    let target = opened["target"].as_str().ok_or("browser.navigate returned no target")?;
    // The page's own requests, each settled before the count is read.
    let script = format!(
        "Promise.all([fetch('{unnamed}/fetched').then(() => 'reached', () => 'refused'), \
         new Promise(done => {{ const i = new Image(); i.onload = i.onerror = () => done('settled'); \
         i.src = '{unnamed}/image'; }})])"
    );
    ok(
        p.call("browser.evaluate", json!({ "target": target, "expression": script }))
            .await,
        "browser.evaluate",
    )?;
    match hits.load(Ordering::SeqCst) {
        0 => Ok(()),
        n => Err(format!("{n} request(s) reached a loopback service nobody named")),
    }
}

async fn tool_requests(p: &dyn ToolsUnderTest) -> Result<(), String> {
    let base = pages::fixture().await?;
    running(p).await?;
    let opened = ok(
        p.call("browser.navigate", json!({ "url": format!("{base}/") })).await,
        "browser.navigate",
    )?;
    let target = opened["target"].as_str().ok_or("browser.navigate returned no target")?;
    // The page's fetch may land after the load event, and its body only once it has loaded:
    // ask again until both answer, 10 s at most.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(20));
    let mut last = String::from("the page's fetch never showed in browser.list_requests");
    while tokio::time::Instant::now() < deadline {
        tick.tick().await;
        let requests = ok(
            p.call("browser.list_requests", json!({ "target": target })).await,
            "browser.list_requests",
        )?;
        let found = requests["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["url"].as_str().is_some_and(|u| u.ends_with("/data.json")) && r["status"] == 200)
            .cloned();
        let Some(request) = found else { continue };
        let input = json!({ "target": target, "requestId": request["requestId"] });
        match p.call("browser.get_request_body", input).await {
            ToolResult::Ok(body) => {
                return match body["body"].as_str().map(serde_json::from_str::<Value>) {
                    Some(Ok(value)) if value == json!({ "answer": 42 }) => Ok(()),
                    _ => Err(format!("get_request_body answered {}", body["body"])),
                };
            }
            ToolResult::Err(e) => last = format!("browser.get_request_body failed: {} {}", e.code.as_str(), e.message),
        }
    }
    Err(last)
}

async fn tool_cdp_send(p: &dyn ToolsUnderTest) -> Result<(), String> {
    let target = fresh_target(p).await?;
    let input = json!({ "target": target, "method": "Runtime.evaluate", "params": { "expression": "6*7", "returnByValue": true } });
    let answer = ok(p.call("browser.cdp_send", input).await, "browser.cdp_send")?;
    if answer["result"]["result"]["value"] == 42 {
        Ok(())
    } else {
        Err(format!("cdp_send answered {answer}"))
    }
}

async fn tool_download(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let base = pages::fixture().await?;
    let target = fresh_target(p).await?;
    let download = ok(
        p.call(
            "browser.download",
            json!({ "target": target, "url": format!("{base}/report.txt") }),
        )
        .await,
        "browser.download",
    )?;
    let path = download["path"].as_str().ok_or("browser.download returned no path")?;
    match std::fs::read_to_string(path) {
        Ok(text) if text == "quarterly numbers\n" => Ok(()),
        Ok(text) => Err(format!("the download holds {} bytes, not the served file", text.len())),
        Err(e) => Err(format!("the download at {path} cannot be read: {e}")),
    }
}
