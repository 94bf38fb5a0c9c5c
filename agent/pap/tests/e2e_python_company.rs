//! End to end against the public Python reference company ("Manzanita", which no one here wrote,
//! served by `conformance/interop/peer/company.py`), over real TLS on 127.0.0.1, with real Chromium.
//!
//! Needs `PAP_PEER_PYTHON`: a Python with `conformance/interop/peer/requirements.txt` (`.ci/run`
//! makes one). Without it this test fails, saying so: it is never skipped.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use std::process::Stdio;
use std::time::Duration;

use support::{Captured, Stage, Target, approve_on_device_page, story};
use tokio::io::AsyncBufReadExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium and the Python reference (PAP_PEER_PYTHON); .ci/run runs it"]
async fn the_whole_story_against_the_python_reference_company_in_chromium() {
    let python = std::env::var("PAP_PEER_PYTHON").expect(
        "PAP_PEER_PYTHON must name a Python with conformance/interop/peer/requirements.txt (bash .ci/run sets it up)",
    );
    let peer = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance/interop/peer/company.py");
    assert!(peer.exists(), "{} is missing", peer.display());
    let logs = Captured::install();
    let stage = Stage::new("e2e-python-company", &["manzanita.example", "atlas.example"]).await;

    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut company = tokio::process::Command::new(&python)
        .arg(&peer)
        .args(["--port", &port.to_string(), "--agent-domain", "atlas.example"])
        .args(["--agent-port", &stage.documents_addr.port().to_string()])
        .arg("--cert")
        .arg(&stage.cert)
        .arg("--key")
        .arg(&stage.key)
        .arg("--ca")
        .arg(&stage.ca_pem)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Ready when it says so: the peer prints its first line once it accepts connections.
    let mut lines = tokio::io::BufReader::new(company.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(ready.starts_with("serving https://manzanita.example"), "{ready}");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let ca = stage.ca_der.clone();
    let operator_ca = stage.ca_der.clone();
    let target = Target {
        domain: "manzanita.example",
        addr,
        proposal_path: "/api/orders/ord_7Hk2/exchanges",
        approve: Box::new(move |code| {
            let ca = ca.clone();
            Box::pin(async move {
                approve_on_device_page(
                    &ca,
                    "manzanita.example",
                    addr,
                    &code,
                    "ada",
                    "correct horse battery staple",
                )
                .await;
            })
        }),
        performed: Box::new(move |id| {
            let ca = operator_ca.clone();
            Box::pin(async move { operator_count(&ca, addr, &id).await })
        }),
    };
    story(&stage, &target, &logs).await;
    company.kill().await.unwrap();
    std::fs::remove_dir_all(&stage.work).unwrap();
}

/// The peer's test-only operator hook: how often the operation's action ran.
async fn operator_count(ca: &rustls::pki_types::CertificateDer<'static>, addr: std::net::SocketAddr, id: &str) -> u64 {
    let roots = pap_net::tls::trust_roots(std::slice::from_ref(ca)).unwrap();
    let http = pap_agent::testkit::plain_http_client(roots, &[("manzanita.example".to_owned(), addr)].into()).unwrap();
    let url = format!("https://manzanita.example/_operator/performed/{id}");
    let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice::<serde_json::Value>(&body).unwrap()["count"]
        .as_u64()
        .unwrap()
}
