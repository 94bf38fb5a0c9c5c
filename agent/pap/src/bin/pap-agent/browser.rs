//! `pap-agent browser`: the controlled browser's lifecycle, as the operator sees it.

use std::sync::Arc;

use std::time::{Duration, Instant};

use anyhow::bail;
use pap_browser::chromium::{BrowserHost, ChromiumConfig};
use pap_browser::spec::{InstanceState, Lifecycle, OperatorReset};
use pap_browser::tools::ToolHost;
use pap_browser::{chromium, consent};

use crate::cli::BrowserCommand;

/// `pap-agent browser status|stop`: what the process table shows of this state directory's
/// browsers, and the operator's stop. The per-instance supervisor state (crash-looping, and the
/// operator reset out of it) lives in one agent process today; see the README.
#[allow(clippy::print_stdout, reason = "the report is the command's output")]
pub(crate) async fn browser_command(state: &std::path::Path, command: &BrowserCommand) -> anyhow::Result<()> {
    match command {
        BrowserCommand::Status => {
            let browsers = chromium::browsers_of(&chromium::ProcTable, state)?;
            if browsers.is_empty() {
                println!("no browsers of {}", state.display());
            }
            let host = BrowserHost::persistent(state, lifecycle()?.policy())?;
            for (instance, health) in host.recorded() {
                let reason = health.reason.unwrap_or_default();
                println!("{instance}\t{}\t{reason}", health.state);
            }
            for b in browsers {
                let host = match (b.host, b.host_alive) {
                    (Some(pid), true) => format!("agent {pid} running"),
                    (Some(pid), false) => format!("agent {pid} gone (an orphan: the next start sweeps it)"),
                    (None, _) => "agent unknown".to_owned(),
                };
                let state = chromium::probe_profile(&b.user_data_dir, Duration::from_secs(5)).await;
                println!(
                    "{}\t{state}\tpid {}\t{host}\t{}",
                    b.instance,
                    b.pid,
                    b.user_data_dir.display()
                );
            }
            Ok(())
        }
        BrowserCommand::Stop => {
            let scope = chromium::SweepScope::StateDir {
                state_dir: state.to_owned(),
            };
            let ended = chromium::sweep(&chromium::ProcTable, &scope, Duration::from_secs(2)).await?;
            println!("ended {ended} process(es)");
            Ok(())
        }
        BrowserCommand::Reset { instance } => {
            let host = BrowserHost::persistent(state, lifecycle()?.policy())?;
            let now = host.health(instance).state;
            if now != InstanceState::CrashLooping {
                bail!("{instance} is {now}, not crash-looping: there is nothing to reset");
            }
            let started = Instant::now();
            let config = ChromiumConfig::new(state.to_owned()).with_lifecycle(&lifecycle()?);
            let reset = OperatorReset::new(&consent::Operator::from_operator_channel("cli"));
            host.reset(&config, instance, reset, &|_| {}).await?;
            let launched = started.elapsed().as_millis();
            host.stop(instance, Duration::from_secs(2)).await?;
            println!("{instance}: reset; Chromium launched in {launched} ms and was stopped; it may launch again");
            Ok(())
        }
    }
}

/// The lifecycle the agent's Chromium runs by: its shipped manifest's (AIP-63 §3).
pub(crate) fn lifecycle() -> anyhow::Result<Lifecycle> {
    let manifest = chromium::manifest().map_err(|diagnostics| {
        let all: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("the shipped Chromium manifest does not load: {}", all.join("; "))
    })?;
    Ok(manifest.browser.lifecycle)
}

/// A long-running host's supervision of its browser: the health loop probing it every
/// `lifecycle.health.intervalMs` (L1, L4), and the recovery that relaunches it when it exits
/// on its own. Both end when the returned handles drop.
pub(crate) fn supervise(
    host: &BrowserHost,
    tools: &Arc<ToolHost>,
) -> anyhow::Result<(pap_browser::chromium::HealthLoop, pap_browser::tools::Recovery)> {
    let interval = Duration::from_millis(lifecycle()?.health.interval_ms);
    Ok((host.start_health_loop(interval), tools.start_recovery()))
}

/// `--launch-at-start`: launches the host's browser in the background, so the first tool call
/// finds it running instead of paying the launch (issue 42: the first call 320 to 370 ms
/// shorter at p50 in the `first_call` bench; it still opens its first tab).
/// A call that comes while it is under way waits for it, as for any starting browser (L10, up to
/// the launch's remaining budget). A launch that fails is logged, and the first call that needs
/// the browser launches again (a failed launch counts toward the crash loop, L6).
pub(crate) fn launch_at_start(tools: &Arc<ToolHost>) -> LaunchAtStart {
    let tools = tools.clone();
    LaunchAtStart(tokio::spawn(async move {
        let started = Instant::now();
        match tools.launch().await {
            Ok(launched) => tracing::info!(
                boot_id = launched.boot_id,
                millis = started.elapsed().as_millis() as u64,
                "launched the browser at start"
            ),
            Err(error) => tracing::warn!(error = %error.message, "the browser did not launch at start"),
        }
    }))
}

/// The launch [`launch_at_start`] began; it stops (if still under way) when this drops.
pub(crate) struct LaunchAtStart(tokio::task::JoinHandle<()>);

impl Drop for LaunchAtStart {
    fn drop(&mut self) {
        self.0.abort();
    }
}
