//! Our MCP hosts driven by the official MCP Python SDK (`mcp` from PyPI, pinned in
//! `conformance/interop/mcp-requirements.txt`), a client nobody here wrote, through
//! `conformance/interop/mcp_client.py`: over streamable HTTP with a bearer it pairs for itself
//! (`POST /pair` with a code from `pap-agent pair`), through an AIP-59 `pair/v2` tunnel (a
//! device paired with `pair offer`/`pair accept` over a rendezvous broker, its
//! `pair connect` endpoint on loopback, and the same tunnel over stdio as
//! `install-mcp --tunnel` configured it), and over stdio as the config
//! `pap-agent install-mcp --client cursor` wrote spawns the host. Each time it lists the tools
//! (every name one Claude Desktop accepts; the names are printed), loads a page of our company
//! and gets a screenshot, carries a Session of its own into the website (`pap_session_start`,
//! `pap_signin_start` approved here by the person at the company, `pap_propose`, `pap_join`
//! onto the operation's page), reads the page, sees its own click on the confirm button refused
//! (AIP-7) and `file:` refused; the operation is performed 0 times. It reconnects 50 times
//! without ending a session (no DELETE), and all 50 work. It also times a tool
//! call's round trip, direct and through the tunnel (p50, p99 of 100), and prints them.
//!
//! Needs `PAP_MCP_PYTHON`: a Python with that requirements file (`.ci/run` makes one). Without
//! it this test fails, saying so: it is never skipped.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::path::Path;
use std::time::Duration;

use support::Stage;
use support::cli_agent::{
    agent_and_company, host_serve, pair_accept, pair_connect, pap, rendezvous, stop_host, test_network,
};
use tokio::io::AsyncBufReadExt as _;

/// Runs the Python client with `args`, approving at `company` (as the person) the sign-in it
/// asks for; the JSON line it printed.
async fn python_device(python: &str, args: &[&str], company: &pap_shop::ReferenceCompany) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/interop/mcp_client.py");
    let mut child = tokio::process::Command::new(python)
        .arg(script)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    let finished = tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(code) = line.strip_prefix("mcp_client: approve ") {
                company.approve_device(code.trim(), "acct_ada", None).await.unwrap();
            }
            said.push(line);
        }
        child.wait_with_output().await.unwrap()
    })
    .await
    .expect("the MCP Python SDK client did not finish in 180 s");
    let said = said.join("\n");
    assert!(
        finished.status.success(),
        "the MCP Python SDK client failed ({args:?}): {said}"
    );
    eprintln!("{said}");
    serde_json::from_slice(&finished.stdout).unwrap()
}

/// What every run must show: MCP-safe names, a join onto the operation page, the tool's
/// confirm refused and the operation never performed by it.
async fn check(seen: &serde_json::Value, company: &pap_shop::ReferenceCompany) {
    let names: Vec<&str> = seen["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    eprintln!("the tools the SDK listed: {}", names.join(", "));
    assert!(names.iter().all(|n| pap_browser::spec::is_mcp_name(n)), "{names:?}");
    assert!(
        names.contains(&"pap_join") && names.contains(&"browser_navigate"),
        "{names:?}"
    );
    assert!(seen["screenshotBytes"].as_u64().unwrap() > 1000, "{seen}");
    assert_eq!(seen["confirmRefused"], true, "{seen}");
    eprintln!(
        "protocol {}: the operation's resource watched with {}",
        seen["protocolVersion"], seen["resourceWatched"]
    );
    assert!(seen["resourceWatched"].is_string(), "{seen}");
    let operation = seen["operation"].as_str().unwrap();
    assert!(seen["joined"].as_str().unwrap().ends_with(operation), "{seen}");
    assert_eq!(
        company.performed(operation).await.unwrap().unwrap_or(0),
        0,
        "a tool performed it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium and the official MCP Python SDK (PAP_MCP_PYTHON); .ci/run runs it"]
async fn the_official_python_sdk_drives_our_hosts_over_http_and_stdio() {
    let python = std::env::var("PAP_MCP_PYTHON").expect(
        "PAP_MCP_PYTHON must name a Python with conformance/interop/mcp-requirements.txt (bash .ci/run sets it up)",
    );
    let mut stage = Stage::new("mcp-python", &["shop.example", "atlas.example"]).await;
    let (state, company, shop) = agent_and_company(&mut stage).await;
    let network = test_network(&stage, shop);
    let with_network = |args: &[&str]| -> Vec<String> {
        network
            .iter()
            .cloned()
            .chain(args.iter().map(|a| (*a).to_owned()))
            .collect()
    };
    let run = |args: &[&str]| {
        let args = with_network(args);
        pap(&state, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // The operator grants the shop to the agent's browser (every device may join it).
    run(&["consent", "grant", "--domain", "shop.example"]);

    // Streamable HTTP: the client pairs with a one-time code, then speaks MCP with its bearer.
    let (host, addr) = host_serve(&state, &network).await;
    let code = pap(&state, &["pair", "--name", "python-sdk"]).trim().to_owned();
    let seen = python_device(&python, &["http", &format!("http://{addr}"), &code], &company).await;
    check(&seen, &company).await;

    // A client that reconnects 50 times without ending a session (no DELETE) gets 50 working
    // sessions: past the device's cap, its own least recently used one ends (issue 39).
    let vscode = stage.work.join("vscode-mcp.json");
    pap(
        &state,
        &[
            "install-mcp",
            "--client",
            "vscode",
            "--config",
            vscode.to_str().unwrap(),
        ],
    );
    let bearer = state.join("devices/vscode.bearer");
    let counted = python_device(
        &python,
        &["reconnect", &format!("http://{addr}"), bearer.to_str().unwrap(), "50"],
        &company,
    )
    .await;
    assert_eq!(counted["working"], 50, "{counted}");

    // A tool call's round trip on the direct path, to set the tunnel's beside.
    let code = pap(&state, &["pair", "--name", "python-rtt"]).trim().to_owned();
    let direct = python_device(&python, &["rtt", &format!("http://{addr}"), "code", &code], &company).await;

    // AIP-59 pair/v2: the same host from a device that reaches it only through a rendezvous
    // broker, end to end encrypted; the SDK speaks to the device's loopback endpoint.
    let (rendezvous_url, broker) = rendezvous().await;
    let offer = pap(
        &state,
        &[
            "pair",
            "offer",
            "--rendezvous",
            &rendezvous_url,
            "--name",
            "python-tunnel",
        ],
    )
    .trim()
    .to_owned();
    let device = stage.work.join("device");
    let (paired, fingerprint, said, pairing_took) = pair_accept(&device, &[], &offer, "yes").await;
    assert!(paired, "pair accept failed: {said}");
    let (mut connect, endpoint, _) = pair_connect(&device, &[], fingerprint.trim()).await;
    let bearer_file = pap_host::tunnel::device::endpoint_bearer_path(&device, fingerprint.trim());
    let bearer_file = bearer_file.to_str().unwrap();
    let seen = python_device(
        &python,
        &["tunnel", &format!("http://{endpoint}"), bearer_file],
        &company,
    )
    .await;
    check(&seen, &company).await;
    let tunnelled = python_device(
        &python,
        &["rtt", &format!("http://{endpoint}"), "bearer-file", bearer_file],
        &company,
    )
    .await;
    eprintln!(
        "pair/v2: `pair accept` took {} ms (process start, offer check, dial, handshake, hello frame); \
         browser_profile_list round trip over 100 calls: direct p50 {} ms p99 {} ms; through the \
         broker p50 {} ms p99 {} ms; the broker relayed {} messages",
        pairing_took.as_millis(),
        direct["p50Ms"],
        direct["p99Ms"],
        tunnelled["p50Ms"],
        tunnelled["p99Ms"],
        broker.journal.lines().iter().filter(|l| l.starts_with("relay")).count()
    );
    connect.kill().await.unwrap();

    // The same tunnel for a client that only spawns servers: `install-mcp --tunnel` configures
    // it to run `pap-agent pair stdio FINGERPRINT` on the device.
    let remote = stage.work.join("cursor-remote-mcp.json");
    pap(
        &device,
        &[
            "install-mcp",
            "--client",
            "cursor",
            "--config",
            remote.to_str().unwrap(),
            "--tunnel",
            fingerprint.trim(),
        ],
    );
    let seen = python_device(&python, &["stdio", remote.to_str().unwrap()], &company).await;
    check(&seen, &company).await;
    stop_host(host, &state).await;

    // Stdio: the host spawned as install-mcp configured the client.
    let config = stage.work.join("cursor-mcp.json");
    run(&[
        "install-mcp",
        "--client",
        "cursor",
        "--config",
        config.to_str().unwrap(),
    ]);
    let seen = python_device(&python, &["stdio", config.to_str().unwrap()], &company).await;
    check(&seen, &company).await;
    let left = pap_browser::chromium::browsers_of(&pap_browser::chromium::ProcTable, &state).unwrap();
    assert!(left.is_empty(), "the stdio host left its browser running: {left:?}");

    let _ = std::fs::remove_dir_all(&stage.work);
}
