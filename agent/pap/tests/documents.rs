//! `identity serve`'s listener under idle strangers (security review M9): connections that
//! never say hello hold up no other, and the agent's documents stay reachable.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::{Duration, Instant};

use support::Stage;

#[tokio::test]
async fn fifty_silent_connections_do_not_keep_a_company_from_the_agents_documents() {
    let stage = Stage::new("documents", &["atlas.example"]).await;
    // Fifty strangers connect and say nothing (each would have held the listener for 10 s).
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(tokio::net::TcpStream::connect(stage.documents_addr).await.unwrap());
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add(stage.ca_der.clone()).unwrap();
    let http =
        pap_agent::testkit::plain_http_client(roots, &[("atlas.example".to_owned(), stage.documents_addr)].into())
            .unwrap();
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(3),
        http.get("https://atlas.example/jwks.json").send(),
    )
    .await
    .expect("the documents did not answer while strangers held connections")
    .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(3));
    // Review N1: a minute's caching, not `no-store`, so a company fetches the documents once a
    // minute per agent rather than on every token request and join.
    for document in ["jwks.json", "agent.json"] {
        let answer = http
            .get(format!("https://atlas.example/{document}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{document}");
        assert_eq!(answer.headers()["cache-control"], "max-age=60", "{document}");
    }
    drop(silent);
    std::fs::remove_dir_all(&stage.work).unwrap();
}
