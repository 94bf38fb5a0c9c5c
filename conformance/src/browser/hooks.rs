//! The hooks, by id (aip-63-tables.md §5). Each starts from a known state and says what failed.

use pap_agent::{CallGate, InstanceState, Launch, parse_manifest, tool_spec};
use pap_shared::{ToolErrorCode, ToolResult};
use serde_json::{Value, json};

use super::{Hook, Level, ProviderUnderTest};

macro_rules! hook {
    ($id:literal, [$($rule:literal),+], $level:expr, $f:path) => {
        Hook { id: $id, rule: &[$($rule),+], level: $level, run: |p| Box::pin($f(p)) }
    };
}

/// Every hook, in the order the suite runs them.
pub const HOOKS: &[Hook] = &[
    hook!("core.manifest.schema", ["M1"], Level::Core, manifest_m1),
    hook!("core.manifest.remote-sink", ["M2"], Level::Core, manifest_m2),
    hook!("core.manifest.cdp-endpoint", ["M3"], Level::Core, manifest_m3),
    hook!("core.manifest.implements-gate", ["M4"], Level::Core, manifest_m4),
    hook!("core.manifest.profile-modes", ["M5"], Level::Core, manifest_m5),
    hook!("core.manifest.conformance-claims", ["M6"], Level::Core, manifest_m6),
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
    hook!("core.tools.navigate", ["T1"], Level::Core, tool_navigate),
    hook!("core.tools.evaluate", ["T1"], Level::Core, tool_evaluate),
    hook!("core.tools.get-dom", ["T1"], Level::Core, tool_get_dom),
    hook!("core.tools.screenshot", ["T1"], Level::Core, tool_screenshot),
    hook!("interaction.targets.keepalive", ["L11"], Level::Interaction, keepalive),
    hook!(
        "interaction.targets.stale-handle",
        ["L12"],
        Level::Interaction,
        stale_handle
    ),
];

const PAGE: &str = "data:text/html,<title>conformance</title><h1 id=h>hello</h1>";

fn ok(result: ToolResult, what: &str) -> Result<Value, String> {
    match result {
        ToolResult::Ok(value) => Ok(value),
        ToolResult::Err(e) => Err(format!("{what} failed: {} {}", e.code.as_str(), e.message)),
    }
}

async fn running(p: &dyn ProviderUnderTest) -> Result<(), String> {
    p.launch()
        .await
        .map(|_| ())
        .map_err(|e| format!("launch failed: {} {}", e.code.as_str(), e.message))
}

async fn fresh_target(p: &dyn ProviderUnderTest) -> Result<String, String> {
    running(p).await?;
    let opened = ok(
        p.call("browser.navigate", json!({ "url": PAGE })).await,
        "browser.navigate",
    )?;
    opened["target"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "browser.navigate returned no target".into())
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

async fn manifest_m1(p: &dyn ProviderUnderTest) -> Result<(), String> {
    rule_breaks(p, "M1")
}
async fn manifest_m2(p: &dyn ProviderUnderTest) -> Result<(), String> {
    rule_breaks(p, "M2")
}
async fn manifest_m3(p: &dyn ProviderUnderTest) -> Result<(), String> {
    rule_breaks(p, "M3")
}
async fn manifest_m4(p: &dyn ProviderUnderTest) -> Result<(), String> {
    rule_breaks(p, "M4")
}
async fn manifest_m5(p: &dyn ProviderUnderTest) -> Result<(), String> {
    rule_breaks(p, "M5")
}
async fn manifest_m6(p: &dyn ProviderUnderTest) -> Result<(), String> {
    rule_breaks(p, "M6")
}

async fn tools_ids(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let manifest =
        parse_manifest(&p.manifest_text(), None).map_err(|d| format!("the manifest does not load: {}", d[0]))?;
    for implements in &manifest.implements {
        if implements.tool.starts_with("browser.") && tool_spec(&implements.tool).is_none() {
            return Err(format!(
                "{} is in the reserved browser. namespace but is not a reserved tool",
                implements.tool
            ));
        }
    }
    Ok(())
}

async fn tools_resolver(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let manifest =
        parse_manifest(&p.manifest_text(), None).map_err(|d| format!("the manifest does not load: {}", d[0]))?;
    let mut without = manifest.clone();
    without.browser.capabilities = pap_agent::Capabilities::default();
    without.id = format!("{}-without-capabilities", manifest.id);
    for implements in &manifest.implements {
        let Some(gate) = tool_spec(&implements.tool).and_then(|s| s.gate) else {
            continue;
        };
        let both = [without.clone(), manifest.clone()];
        let chosen = pap_agent::resolve(&both, &implements.tool, Some(gate)).map(|m| m.id.clone());
        if chosen.as_deref() != Some(manifest.id.as_str()) {
            return Err(format!("{} needing {gate} resolved to {chosen:?}", implements.tool));
        }
    }
    Ok(())
}

async fn tools_unsupported(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let manifest =
        parse_manifest(&p.manifest_text(), None).map_err(|d| format!("the manifest does not load: {}", d[0]))?;
    let target = fresh_target(p).await?;
    let missing = pap_agent::RESERVED_TOOLS
        .iter()
        .find(|t| !manifest.implements.iter().any(|i| i.tool == t.id));
    let Some(missing) = missing else { return Ok(()) };
    match p.call(missing.id, json!({ "target": target })).await {
        ToolResult::Err(e) if e.code == ToolErrorCode::Unsupported => {
            let named = e
                .cause
                .as_ref()
                .and_then(|c| c["capability"].as_str())
                .map(str::to_owned);
            match named {
                Some(capability) if e.message.contains(&capability) => Ok(()),
                _ => Err(format!(
                    "{} answered browser:unsupported without naming the capability",
                    missing.id
                )),
            }
        }
        ToolResult::Err(e) => Err(format!(
            "{} answered {} instead of browser:unsupported",
            missing.id,
            e.code.as_str()
        )),
        ToolResult::Ok(_) => Err(format!("{} is not listed but answered a result", missing.id)),
    }
}

async fn tools_error_codes(p: &dyn ProviderUnderTest) -> Result<(), String> {
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
    match p.call("browser.navigate", json!({ "url": PAGE })).await {
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
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
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
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
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
    let unmarked = p.plant_unmarked().await;
    let launched = p.launch().await.map_err(|e| format!("launch failed: {}", e.message))?;
    p.stop().await.map_err(|e| format!("stop failed: {}", e.message))?;
    if let Some(pid) = launched.pid
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
    for now in [0, 1_000, 2_000] {
        s.launch(now)
            .map_err(|e| format!("launch {now} refused: {}", e.message))?;
        s.launch_failed(now + 10, "exited with status 1");
    }
    let health = s.health();
    if health.state != InstanceState::CrashLooping {
        return Err(format!("after three failed launches the state is {}", health.state));
    }
    if health.reason.as_deref() != Some("exited with status 1") {
        return Err("health() does not carry the last failure".into());
    }
    match s.launch(3_000) {
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
    for now in [0, 1, 2] {
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
    let orphan = p.plant_orphan().await;
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
    s.launch(0).map_err(|e| format!("launch refused: {}", e.message))?;
    for now in (5_000..=300_000).step_by(5_000) {
        s.progress(now);
        if let Some(stalled) = s.tick(now) {
            return Err(format!(
                "a launch progressing every 5 s was killed at {now} ms: {}",
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
    if s.tick(120_000).is_none() {
        return Err("a launch with no progress outlived its 120 s budget".into());
    }
    Ok(())
}

async fn starting_wait(p: &dyn ProviderUnderTest) -> Result<(), String> {
    let mut s = p.supervision();
    s.launch(1_000).map_err(|e| format!("launch refused: {}", e.message))?;
    match s.call(61_000) {
        CallGate::Wait(60_000) => {}
        other => {
            return Err(format!(
                "a call while starting did not wait the remaining budget: {other:?}"
            ));
        }
    }
    match s.call(121_000) {
        CallGate::Refuse(e) if e.code == ToolErrorCode::Starting && e.retryable == Some(true) => Ok(()),
        other => Err(format!(
            "after the budget the call did not fail with retryable browser:starting: {other:?}"
        )),
    }
}

async fn fresh_userdir(p: &dyn ProviderUnderTest) -> Result<(), String> {
    running(p).await?;
    let Some(dir) = p.user_data_dir().await else {
        return Ok(());
    };
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let defaults = [home.join(".config/chromium"), home.join(".config/google-chrome")];
    if defaults.iter().any(|d| dir.starts_with(d)) {
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

async fn tool_navigate(p: &dyn ProviderUnderTest) -> Result<(), String> {
    fresh_target(p).await.map(|_| ())
}

async fn tool_evaluate(p: &dyn ProviderUnderTest) -> Result<(), String> {
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

async fn tool_get_dom(p: &dyn ProviderUnderTest) -> Result<(), String> {
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

async fn tool_screenshot(p: &dyn ProviderUnderTest) -> Result<(), String> {
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
