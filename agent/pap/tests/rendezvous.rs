//! `pap-agent rendezvous` run as a person runs it: it says where it listens, pairs a host and
//! a device dialling one route, relays their messages, and stops cleanly on SIGTERM.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio_tungstenite::tungstenite::Message;

const DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_broker_pairs_a_host_and_a_device_on_a_route_and_stops_on_sigterm() {
    let mut broker = tokio::process::Command::new(env!("CARGO_BIN_EXE_pap-agent"))
        .args(["rendezvous", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut said = BufReader::new(broker.stderr.take().unwrap()).lines();
    let base = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = said.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("rendezvous broker on ") {
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("the broker ended before it listened");
    })
    .await
    .expect("the broker did not say where it listens");
    let dial = |side: &str| tokio_tungstenite::connect_async(format!("{base}v1?side={side}&t=G8SO5JOFLKZDqugteQRpFw"));
    let (mut host, _) = dial("daemon").await.unwrap();
    // The host parks first; the device's dial completes the pair whenever it lands.
    let (mut device, _) = dial("client").await.unwrap();
    device.send(Message::text("hello through the broker")).await.unwrap();
    let relayed = tokio::time::timeout(DEADLINE, host.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(relayed, Message::text("hello through the broker"));

    let pid = nix::unistd::Pid::from_raw(i32::try_from(broker.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(DEADLINE, broker.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}
