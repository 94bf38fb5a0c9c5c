//! Review N14: `pap-agent identity serve` faces every company as a stranger. Run as a person
//! runs it: a connection that completes its handshake and then says nothing is closed within
//! the header deadline (it used to be held for good), and SIGTERM stops the server cleanly.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

/// `ServeLimits::default().header_read_timeout`, and how late a close may be seen past it.
const HEADER_DEADLINE: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_secs(4);

#[tokio::test]
async fn a_silent_company_is_closed_at_the_header_deadline_and_sigterm_stops_the_server() {
    let dir = std::env::temp_dir().join(format!("pap-identity-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let agent = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_pap-agent"));
        command.arg("--state-dir").arg(&state).args(args);
        command
    };
    let init = agent(&["identity", "init", "atlas.example"]).output().await.unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let certs = pap_net::dev_certs::write_dev_certs(&dir.join("certs"), &["atlas.example".into()]).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = agent(&["identity", "serve", "--listen", &listen])
        .arg("--cert")
        .arg(&certs.cert)
        .arg("--key")
        .arg(&certs.key)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut said = BufReader::new(server.stderr.take().unwrap()).lines();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = said.next_line().await.unwrap() {
            if line.starts_with("serving https://atlas.example/agent.json") {
                return;
            }
        }
        panic!("identity serve ended before it served");
    })
    .await
    .expect("identity serve did not say it serves within 20 s");
    tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });

    // A stranger: the handshake, then silence.
    let ca = rustls_pemfile::certs(&mut &std::fs::read(&certs.ca).unwrap()[..])
        .next()
        .unwrap()
        .unwrap();
    let roots = pap_net::tls::trust_roots(&[ca]).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(pap_net::tls::client_config(roots).unwrap()));
    let name = rustls::pki_types::ServerName::try_from("atlas.example").unwrap();
    let tcp = tokio::net::TcpStream::connect(&listen).await.unwrap();
    let mut silent = tls.connect(name, tcp).await.unwrap();
    let started = Instant::now();
    let mut byte = [0_u8; 1];
    let closed = tokio::time::timeout(HEADER_DEADLINE + GRACE, silent.read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "a silent connection was held past {:?}",
        HEADER_DEADLINE + GRACE
    );
    let held = started.elapsed();
    assert!(
        held >= HEADER_DEADLINE - Duration::from_secs(1),
        "closed after {held:?}: too early"
    );
    eprintln!("a silent connection was closed after {held:?}");

    // SIGTERM: the server stops accepting and exits 0.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("identity serve did not stop within 10 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "identity serve ended with {status} at SIGTERM");
    std::fs::remove_dir_all(&dir).unwrap();
}
