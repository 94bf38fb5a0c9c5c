//! Device Sign-In pacing (RFC 8628 §3.5) against our reference company over real TLS, with the
//! agent and the company on one stepped clock: the agent waits `interval` between polls, adds
//! 5 s to every later wait after a `slow_down`, and stops at `expires_in` without polling again.
//! The waits are injected (`Pause`), so each case is exact and takes no real time.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pap_agent::{ClientError, Pause, new_pairwise_user};
use pap_shared::{Clock, SystemClock, SystemRng, UnixTime};
use support::Stage;

/// One clock for the agent and the company, moved only by the agent's waits.
#[derive(Debug)]
struct Stepped(AtomicI64);

impl Clock for Stepped {
    fn now(&self) -> UnixTime {
        UnixTime::from_secs(self.0.load(Ordering::SeqCst))
    }
}

/// The agent's waits: each is recorded and moves the clock by as much, except the first, which
/// moves it by `first_short` seconds less (a poll that reaches the company early). After the
/// `approve_after`-th wait the user approves.
struct Waits {
    clock: Arc<Stepped>,
    first_short: i64,
    seen: Mutex<Vec<u64>>,
    approve_after: Option<usize>,
    approve: Box<dyn Fn() -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>,
}

#[async_trait::async_trait]
impl Pause for Waits {
    async fn pause(&self, wait: Duration) {
        let count = {
            let mut seen = self.seen.lock().unwrap();
            let short = if seen.is_empty() { self.first_short } else { 0 };
            seen.push(wait.as_secs());
            let step = i64::try_from(wait.as_secs()).unwrap() - short;
            self.clock.0.fetch_add(step, Ordering::SeqCst);
            seen.len()
        };
        if self.approve_after == Some(count) {
            (self.approve)().await;
        }
    }
}

struct Run {
    waits: Vec<u64>,
    polls: usize,
    outcome: Result<(), ClientError>,
    interval: u64,
    expires_in: u64,
}

/// A Session, a Device Sign-In, and the agent's polling under `Waits`.
async fn poll(label: &str, first_short: i64, approve_after: Option<usize>) -> Run {
    let stage = Stage::new(label, &["shop.example", "atlas.example"]).await;
    let clock = Arc::new(Stepped(AtomicI64::new(SystemClock.now().as_secs())));
    let polls = Arc::new(AtomicUsize::new(0));
    let counted = polls.clone();
    let (company, addr) = support::start_reference_company_on(&stage, clock.clone(), move |router| {
        router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let counted = counted.clone();
                async move {
                    if request.uri().path() == "/oauth/token" {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    next.run(request).await
                }
            },
        ))
    })
    .await;
    let (client, shop) = support::client_on(&stage, "shop.example", addr, clock.clone()).await;
    let mut session = client
        .start_session(&shop, &new_pairwise_user(&SystemRng), client.new_dpop_key().unwrap())
        .await
        .unwrap();
    let device = client.device_begin(&shop, &["orders:read"]).await.unwrap();
    let user_code = device.user_code.clone();
    let waits = Arc::new(Waits {
        clock: clock.clone(),
        first_short,
        seen: Mutex::new(Vec::new()),
        approve_after,
        approve: Box::new(move || {
            let (company, user_code) = (company.clone(), user_code.clone());
            Box::pin(async move { company.approve_device(&user_code, "acct_ada", None).await.unwrap() })
        }),
    });
    // The Session itself took one token request; count the polls only.
    let before = polls.load(Ordering::SeqCst);
    let outcome = client
        .with_pause(waits.clone())
        .device_wait(&shop, &mut session, &device)
        .await;
    if outcome.is_ok() {
        assert!(
            session.signed_in,
            "device_wait succeeded with the Session not signed in"
        );
    }
    let _ = std::fs::remove_dir_all(&stage.work);
    Run {
        waits: waits.seen.lock().unwrap().clone(),
        polls: polls.load(Ordering::SeqCst) - before,
        outcome,
        interval: device.interval,
        expires_in: device.expires_in,
    }
}

#[tokio::test]
async fn the_agent_polls_at_the_interval_and_is_signed_in_once_approved() {
    let run = poll("pacing-interval", 0, Some(3)).await;
    run.outcome.unwrap();
    // Never early, so never slowed down: three waits of `interval`, three polls.
    assert_eq!(run.waits, [run.interval; 3]);
    assert_eq!(run.polls, 3);
}

#[tokio::test]
async fn after_slow_down_every_later_wait_is_five_seconds_longer() {
    // The first poll arrives a second early: the company answers slow_down.
    let run = poll("pacing-slow-down", 1, Some(3)).await;
    run.outcome.unwrap();
    let slowed = run.interval + 5;
    assert_eq!(run.waits, [run.interval, slowed, slowed]);
    assert_eq!(run.polls, 3);
}

#[tokio::test]
async fn an_unapproved_code_expires_and_is_not_polled_past_its_lifetime() {
    let run = poll("pacing-expiry", 0, None).await;
    assert!(
        matches!(
            &run.outcome,
            Err(ClientError::Protocol {
                code: pap_shared::OAuthErrorCode::ExpiredToken,
                ..
            })
        ),
        "{:?}",
        run.outcome.as_ref().err()
    );
    let waits = usize::try_from(run.expires_in / run.interval).unwrap();
    assert_eq!(run.waits.len(), waits, "waits until the code expired");
    // The last wait reached the lifetime: the agent stopped without sending that poll.
    assert_eq!(run.polls, waits - 1);
}
