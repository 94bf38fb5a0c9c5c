//! The `pap-agent` binary as its operator runs it, for the tests of its MCP hosts: a state
//! directory with an identity whose documents our reference company reads, the CLI run to the
//! end, `host serve` started and waited for, and a device's MCP client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pap_agent::{Identity, documents_router};
use pap_net::listener::TlsListener;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tokio::io::AsyncBufReadExt as _;

use super::Stage;

/// The binary under test.
pub const AGENT: &str = env!("CARGO_BIN_EXE_pap-agent");

/// An agent's state directory (`STAGE/state`) with an identity for `atlas.example`, whose
/// documents are served on the stage's documents address, and our reference company (which
/// reads them) started: the company and where it listens. The stage's certificate must name
/// `atlas.example`.
pub async fn agent_and_company(stage: &mut Stage) -> (PathBuf, pap_shop::ReferenceCompany, SocketAddr) {
    let state = stage.work.join("state");
    pap(&state, &["identity", "init", "atlas.example"]);
    let identity = std::sync::Arc::new(Identity::load(&state).unwrap());
    let documents = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    stage.documents_addr = documents.local_addr().unwrap();
    let tls = TlsListener::new(documents, &stage.cert_pem, &std::fs::read(&stage.key).unwrap()).unwrap();
    tokio::spawn(axum::serve(tls, documents_router(identity)).into_future());
    let (company, addr) = super::start_reference_company(stage).await;
    (state, company, addr)
}

/// The global options that route `shop.example` to `addr` and trust the stage's CA.
pub fn test_network(stage: &Stage, addr: SocketAddr) -> Vec<String> {
    vec![
        "--connect".to_owned(),
        format!("shop.example={addr}"),
        "--trust-ca".to_owned(),
        stage.ca_pem.display().to_string(),
    ]
}

/// Runs `pap-agent --state-dir STATE ARGS` to its end; its stdout. Fails the test on failure.
pub fn pap(state: &Path, args: &[&str]) -> String {
    let out = Command::new(AGENT)
        .args(["--state-dir", state.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `pap-agent --state-dir STATE ARGS`, which must fail; its stderr (what it said why).
pub fn pap_fails(state: &Path, args: &[&str]) -> String {
    let out = Command::new(AGENT)
        .args(["--state-dir", state.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// An MCP client of the official Rust SDK on `http://ADDR/mcp`, presenting `bearer`.
pub async fn mcp_device(addr: SocketAddr, bearer: &str) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(bearer);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

/// Calls the tool `name` over MCP: Ok(its structured result) or Err(the AIP-14 error object).
pub async fn mcp_call(client: &RunningService<RoleClient, ()>, name: &str, input: Value) -> Result<Value, Value> {
    let Value::Object(arguments) = input else {
        unreachable!("arguments are objects")
    };
    let result = client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments))
        .await
        .unwrap();
    let structured = result.structured_content.unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        Err(structured)
    } else {
        Ok(structured)
    }
}

/// Pairs a device called `name` with the host at `addr`: a one-time code from `pap-agent pair`,
/// exchanged at `POST /pair` (and refused a second time). The device's id and bearer.
pub async fn pair_over_http(http: &reqwest::Client, addr: SocketAddr, state: &Path, name: &str) -> (String, String) {
    let code = pap(state, &["pair", "--name", name]).trim().to_owned();
    let redeem = || {
        http.post(format!("http://{addr}/pair"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "code": code }).to_string())
            .send()
    };
    let paired: Value = serde_json::from_str(&redeem().await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(redeem().await.unwrap().status(), 400, "a pairing code worked twice");
    (
        paired["deviceId"].as_str().unwrap().to_owned(),
        paired["bearer"].as_str().unwrap().to_owned(),
    )
}

/// `/health` of the host at `addr`, as JSON.
pub async fn health(http: &reqwest::Client, addr: SocketAddr) -> Value {
    let answer = http.get(format!("http://{addr}/health")).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    serde_json::from_str(&answer.text().await.unwrap()).unwrap()
}

/// `VmRSS` of process `pid`, in KiB.
pub fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Starts `pap-agent --state-dir STATE GLOBAL host serve --listen 127.0.0.1:0`; waits (60 s at
/// most) for the line that says where it listens.
pub async fn host_serve(state: &Path, global: &[String]) -> (tokio::process::Child, SocketAddr) {
    host_serve_with(state, global, &["--listen", "127.0.0.1:0"]).await
}

/// [`host_serve`] with `serve` as the options of `host serve`.
pub async fn host_serve_with(state: &Path, global: &[String], serve: &[&str]) -> (tokio::process::Child, SocketAddr) {
    let mut child = tokio::process::Command::new(AGENT)
        .args(["--state-dir", state.to_str().unwrap()])
        .args(global)
        .args(["host", "serve"])
        .args(serve)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let url = line
                .strip_prefix("listening on http://")
                .or_else(|| line.strip_prefix("listening on https://"));
            if let Some(url) = url {
                return url.trim_end_matches("/mcp").parse::<SocketAddr>().unwrap();
            }
        }
        panic!("host serve ended before it listened");
    })
    .await
    .expect("host serve did not listen in 60 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}

/// `host serve` with the person's console beside it (`--console 127.0.0.1:0`): the host, where
/// MCP listens, and the console's one-time link (the one line on its stdout).
pub async fn host_serve_with_console(state: &Path, global: &[String]) -> (tokio::process::Child, SocketAddr, String) {
    let mut child = tokio::process::Command::new(AGENT)
        .args(["--state-dir", state.to_str().unwrap()])
        .args(global)
        .args(["host", "serve", "--listen", "127.0.0.1:0", "--console", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut err = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (link, addr) = tokio::time::timeout(Duration::from_secs(60), async {
        let link = out.next_line().await.unwrap().expect("no console link");
        while let Some(line) = err.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("listening on http://") {
                return (link, url.trim_end_matches("/mcp").parse::<SocketAddr>().unwrap());
            }
        }
        panic!("host serve ended before it listened");
    })
    .await
    .expect("host serve did not listen in 60 s");
    tokio::spawn(async move { while let Ok(Some(_)) = err.next_line().await {} });
    (child, addr, link)
}

/// The browsers of `state` the process table shows.
pub fn browsers(state: &Path) -> Vec<pap_browser::chromium::BrowserProcess> {
    pap_browser::chromium::browsers_of(&pap_browser::chromium::ProcTable, state).unwrap()
}

/// Waits (30 s at most) until a browser of `state` runs: a host launching at start, before
/// any call. Polls the process table, since nothing of the host's reports the launch.
pub async fn until_a_browser_runs(state: &Path) {
    tokio::time::timeout(Duration::from_secs(30), async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while browsers(state).is_empty() {
            tick.tick().await;
        }
    })
    .await
    .expect("no browser launched without a call");
}

/// Ends `host` with SIGTERM and waits (30 s at most) for a clean exit; no browser of `state`
/// may be left.
pub async fn stop_host(mut host: tokio::process::Child, state: &Path) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(host.id().unwrap()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), host.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(ended.success(), "host serve did not end cleanly: {ended:?}");
    let left = browsers(state);
    assert!(left.is_empty(), "the host left its browser running: {left:?}");
}

/// A rendezvous broker on loopback (in process, its journal kept): its `ws://` URL and stats.
pub async fn rendezvous() -> (String, std::sync::Arc<pap_pair::broker::BrokerStats>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/", listener.local_addr().unwrap());
    let stats = std::sync::Arc::new(pap_pair::broker::BrokerStats::default());
    stats.journal.keep(100_000);
    tokio::spawn(pap_pair::broker::serve(
        listener,
        pap_pair::broker::BrokerLimits::default(),
        stats.clone(),
        std::future::pending(),
    ));
    (url, stats)
}

/// `pap-agent pair accept` on the device's state `device`, given `offer` and then `answer` on
/// stdin: whether it succeeded, its stdout and stderr, and how long it took (pairing included).
pub async fn pair_accept(
    device: &Path,
    global: &[String],
    offer: &str,
    answer: &str,
) -> (bool, String, String, Duration) {
    use tokio::io::AsyncWriteExt as _;
    let started = std::time::Instant::now();
    let mut child = tokio::process::Command::new(AGENT)
        .args(["--state-dir", device.to_str().unwrap()])
        .args(global)
        .args(["pair", "accept", "--name", "test-device"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{offer}\n{answer}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("pair accept did not end in 60 s")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        started.elapsed(),
    )
}

/// Starts `pap-agent pair connect FINGERPRINT --listen 127.0.0.1:0` on the device's state;
/// waits (60 s at most) for the line that says where it listens. Its stderr lines after that
/// go to the returned channel.
pub async fn pair_connect(
    device: &Path,
    global: &[String],
    fingerprint: &str,
) -> (
    tokio::process::Child,
    SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let mut child = tokio::process::Command::new(AGENT)
        .args(["--state-dir", device.to_str().unwrap()])
        .args(global)
        .args(["pair", "connect", fingerprint, "--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("listening on http://") {
                return url.trim_end_matches("/mcp").parse::<SocketAddr>().unwrap();
            }
        }
        panic!("pair connect ended before it listened");
    })
    .await
    .expect("pair connect did not listen in 60 s");
    let (said, heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = said.send(line);
        }
    });
    (child, addr, heard)
}

/// Starts `pap-agent ARGS` and waits (60 s at most) for its stderr line that starts with
/// `prefix`: the child and the first word after the prefix (where it listens). Its later
/// stderr is drained, so it never blocks on a full pipe.
pub async fn agent_saying(args: &[&str], prefix: &str) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(AGENT)
        .args(args)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let said = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.split_whitespace().next().unwrap_or_default().to_owned();
            }
        }
        panic!("pap-agent {args:?} ended before it said {prefix:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("pap-agent {args:?} did not say {prefix:?} in 60 s"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, said)
}

/// The agent's identity, and the client installed as the operator installs it (`install-mcp`):
/// a device of its own, its credential in a file. Answers that file and the device's id.
pub fn installed(stage: &Stage, state: &Path) -> (String, String) {
    pap(state, &["identity", "init", "atlas.example"]);
    let config = stage.work.join("cursor-mcp.json");
    pap(
        state,
        &[
            "install-mcp",
            "--client",
            "cursor",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let entry: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let args: Vec<String> = serde_json::from_value(entry["mcpServers"]["pap-agent-browser"]["args"].clone()).unwrap();
    let bearer_file = args.last().unwrap().clone();
    let listed: serde_json::Value = serde_json::from_str(&pap(state, &["devices", "list"])).unwrap();
    let device = listed["devices"][0]["id"].as_str().unwrap().to_owned();
    (bearer_file, device)
}

/// `pap-agent host stdio` for the device whose credential is `bearer_file`, `shop.example`
/// routed to the company at `addr`, with `extra` arguments of `host stdio`.
pub fn stdio_host(
    stage: &Stage,
    state: &Path,
    addr: SocketAddr,
    bearer_file: &str,
    extra: &[&str],
) -> tokio::process::Command {
    let mut host = tokio::process::Command::new(AGENT);
    host.args([
        "--state-dir",
        state.to_str().unwrap(),
        "--connect",
        &format!("shop.example={addr}"),
        "--trust-ca",
        stage.ca_pem.to_str().unwrap(),
        "host",
        "stdio",
        "--bearer-file",
        bearer_file,
    ]);
    host.args(extra);
    host
}
