//! Our MCP hosts driven by the official MCP Python SDK (`mcp` from PyPI, pinned in
//! `conformance/interop/mcp-requirements.txt`), a client nobody here wrote, through
//! `conformance/interop/mcp_client.py`: over streamable HTTP with a bearer it pairs for itself
//! (`POST /pair` with a code from `pap-agent pair`), and over stdio as the config
//! `pap-agent install-mcp --client cursor` wrote spawns the host. Each time it lists the tools,
//! loads a page of our company and gets a screenshot, joins the agent's PAP Session through the
//! `pap.join` tool landing on an operation's page, and sees `file:` refused.
//!
//! Needs `PAP_MCP_PYTHON`: a Python with that requirements file (`.ci/run` makes one). Without
//! it this test fails, saying so: it is never skipped.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use support::Stage;
use support::cli_agent::{AGENT, agent_and_company, host_serve, pap, stop_host, test_network};
use tokio::io::AsyncBufReadExt as _;

/// Runs the Python client with `args`; the JSON line it printed.
fn python_client(python: &str, args: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/interop/mcp_client.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP Python SDK client failed ({args:?}): {said}"
    );
    eprint!("{said}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

    // The operator: a signed-in Session (the person approves the sign-in at the company), an
    // operation proposed on it, and the shop granted to the agent's browser.
    run(&["session", "shop.example"]);
    let mut signin = tokio::process::Command::new(AGENT)
        .args(["--state-dir", state.to_str().unwrap()])
        .args(with_network(&["signin", "shop.example"]))
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(signin.stderr.take().unwrap()).lines();
    let code = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some((_, code)) = line.split_once("approve the code ") {
                return code.trim().to_owned();
            }
        }
        panic!("signin ended before it showed a code");
    })
    .await
    .unwrap();
    company.approve_device(&code, "acct_ada", None).await.unwrap();
    let signed = tokio::time::timeout(Duration::from_secs(60), signin.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(signed.success(), "signin failed");
    let operation: serde_json::Value = serde_json::from_str(&run(&[
        "propose",
        "shop.example",
        "POST",
        "/api/orders/ord_7Hk2/exchanges",
    ]))
    .unwrap();
    let page = operation["url"].as_str().unwrap().to_owned();
    run(&["consent", "grant", "--domain", "shop.example"]);

    // Streamable HTTP: the client pairs with a one-time code, then speaks MCP with its bearer.
    let (host, addr) = host_serve(&state, &network).await;
    let code = pap(&state, &["pair", "--name", "python-sdk"]).trim().to_owned();
    let seen = python_client(&python, &["http", &format!("http://{addr}"), &code, &page]);
    assert_eq!(seen["joined"], page.as_str(), "{seen}");
    assert!(seen["screenshotBytes"].as_u64().unwrap() > 1000, "{seen}");
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
    let seen = python_client(&python, &["stdio", config.to_str().unwrap(), &page]);
    assert_eq!(seen["joined"], page.as_str(), "{seen}");
    let left = pap_browser::chromium::browsers_of(&pap_browser::chromium::ProcTable, &state).unwrap();
    assert!(left.is_empty(), "the stdio host left its browser running: {left:?}");

    let _ = std::fs::remove_dir_all(&stage.work);
}
