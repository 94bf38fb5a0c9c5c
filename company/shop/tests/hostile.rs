//! The reference company under a stranger's use (security review H5, M2, M3, L2, L11): guessing
//! is throttled and learns nothing, what one client asks for is capped, and a week of traffic
//! leaves every store as it found it once the records expire.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use http::{StatusCode, header};
use pap_shop::CompanyStores;
use pap_shop::limits::{ACCOUNT_ATTEMPTS, ADDRESS_ATTEMPTS, ATTEMPT_WINDOW, LOOKUP_ATTEMPTS, PENDING_PER_CLIENT};
use serde_json::{Value, json};
use support::shop::*;

const USER: &str = "usr_conf_AAAAAAAAAAAAAAAAAAAAAA";

async fn pending_code(shop: &Shop) -> Value {
    let device = shop.device_code("orders:read").await;
    assert_eq!(device.status(), StatusCode::OK);
    body_json(device).await
}

#[tokio::test]
async fn a_made_up_code_answers_the_same_for_a_right_and_a_wrong_password() {
    let shop = shop();
    // Before: 400 for the right password (it got as far as the code), 401 for a wrong one.
    for password in [PASSWORD, "wrong"] {
        assert_eq!(
            shop.approve_on_page("BBBB-BBBB", "ada", password).await,
            StatusCode::BAD_REQUEST,
            "{password}"
        );
    }
}

#[tokio::test]
async fn password_guesses_past_the_limit_get_429_with_retry_after_for_known_and_unknown_names() {
    let shop = shop();
    let code = pending_code(&shop).await;
    let user_code = code["user_code"].as_str().unwrap();
    for name in ["ada", "nobody"] {
        for _ in 0..ACCOUNT_ATTEMPTS {
            assert_eq!(
                shop.approve_on_page(user_code, name, "guess").await,
                StatusCode::UNAUTHORIZED
            );
        }
        let refused = shop.approve_on_page_answer(user_code, name, "guess").await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{name}");
        let wait: i64 = refused.headers()[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=ATTEMPT_WINDOW).contains(&wait), "{wait}");
    }
    // Even the right password waits out the window: the limit is on trying, not on failing.
    assert_eq!(
        shop.approve_on_page(user_code, "ada", PASSWORD).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    shop.clock.advance(ATTEMPT_WINDOW);
    // The code lives ten minutes, the window fifteen: a fresh code for the new window.
    let fresh = pending_code(&shop).await;
    assert_eq!(
        shop.approve_on_page(fresh["user_code"].as_str().unwrap(), "ada", PASSWORD)
            .await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_client_holds_at_most_its_cap_of_pending_codes() {
    let shop = shop();
    let mut user_codes = std::collections::HashSet::new();
    for _ in 0..PENDING_PER_CLIENT {
        let code = pending_code(&shop).await;
        assert!(
            user_codes.insert(code["user_code"].as_str().unwrap().to_owned()),
            "codes are distinct"
        );
    }
    let refused = shop.device_code("orders:read").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body_json(refused).await, json!({"error": "temporarily_unavailable"}));
    // Codes live ten minutes: then the client may ask again.
    shop.clock.advance(600);
    assert_eq!(shop.device_code("orders:read").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_approval_polled_with_a_bad_session_is_kept_for_the_right_one() {
    let shop = shop();
    let session = shop.start_session(USER).await;
    let code = pending_code(&shop).await;
    assert_eq!(
        shop.approve_on_page(code["user_code"].as_str().unwrap(), "ada", PASSWORD)
            .await,
        StatusCode::OK
    );
    shop.clock.advance(1);
    let poll = |session_id: String| {
        let device_code = code["device_code"].as_str().unwrap().to_owned();
        let shop = &shop;
        async move {
            shop.token_request(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", &device_code),
                ("session_id", &session_id),
            ])
            .await
        }
    };
    // Before: the approval was consumed before the Session was checked, and lost.
    let wrong = poll("ses_AAAAAAAAAAAAAAAAAAAAAA".to_owned()).await;
    assert_eq!(body_json(wrong).await, json!({"error": "invalid_session"}));
    let right = poll(session["session_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(right.status(), StatusCode::OK);
    // Consumed once.
    let again = poll(session["session_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(body_json(again).await, json!({"error": "invalid_grant"}));
}

#[tokio::test]
async fn renewing_a_session_in_a_loop_holds_a_bounded_number_of_tokens() {
    let shop = shop();
    let session = shop.start_session(USER).await;
    let session_id = session["session_id"].as_str().unwrap().to_owned();
    for _ in 0..50 {
        let assertion = shop.session_assertion(USER, "JWT");
        let renewed = shop
            .token_request(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                ("assertion", &assertion),
                ("session_id", &session_id),
            ])
            .await;
        assert_eq!(renewed.status(), StatusCode::OK);
    }
    let sizes = shop.company.store_sizes();
    assert_eq!(sizes["session"], 1);
    assert_eq!(
        sizes["access"],
        u64::try_from(pap_shop::limits::SESSION_TOKENS_PER_SESSION).unwrap()
    );
}

/// A week of traffic on an injected clock: each simulated hour an agent starts a Session,
/// signs in on the device page, joins a browser, proposes and confirms an operation with an
/// idempotency key, renews, refreshes, and a stranger guesses a password. Once every record's
/// time has passed, every store is back to where it started.
#[tokio::test]
async fn a_week_of_traffic_leaves_every_store_at_its_baseline_once_records_expire() {
    let shop = shop();
    let baseline = shop.company.store_sizes();
    assert!(baseline.values().all(|n| *n == 0), "{baseline:?}");
    let mut peak = baseline.clone();
    for hour in 0..7 * 24 {
        let user = format!("usr_week_{hour:0>22}");
        let signed = shop.sign_in(&user).await;
        let cookie = shop
            .join(&user, &signed.session_id, "https://shop.example/orders")
            .await;
        assert!(cookie.starts_with("__Host-poppy_session="));
        let operation = shop.propose(&signed, "exchanges").await;
        assert_eq!(operation["state"], json!("proposed"));
        let refreshed = shop
            .token_request(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", &signed.account_token),
                ("session_id", &signed.session_id),
            ])
            .await;
        assert_eq!(refreshed.status(), StatusCode::OK);
        let stranger = pending_code(&shop).await;
        assert_eq!(
            shop.approve_on_page(stranger["user_code"].as_str().unwrap(), "ada", "guess")
                .await,
            StatusCode::UNAUTHORIZED
        );
        for (store, n) in shop.company.store_sizes() {
            let high = peak.entry(store).or_default();
            *high = (*high).max(n);
        }
        shop.clock.advance(3_600);
        // Maintenance, as `pap-company serve` runs it each minute.
        shop.company.sweep();
    }
    // Every kind of record was held at some point: the check below is not vacuous.
    let kinds = [
        "session",
        "client-sessions",
        "access",
        "session-tokens",
        "account-token",
        "family",
        "session-account",
        "device",
        "user-code",
        "client-devices",
        "attempts-account",
        "attempts-address",
        "operation",
        "proposal",
        "account-operations",
        "replay_marks",
        "cookie_bindings",
    ];
    let idle: Vec<_> = kinds.iter().filter(|k| peak.get(**k).is_none_or(|n| *n == 0)).collect();
    assert!(idle.is_empty(), "never used: {idle:?} (peak {peak:?})");
    // The longest-lived records (Account Tokens, 90 days) then expire.
    shop.clock.advance(91 * 86_400);
    shop.company.sweep();
    assert_eq!(shop.company.store_sizes(), baseline, "peak was {peak:?}");
}

#[tokio::test]
async fn a_path_parameter_cannot_write_prose_into_the_confirm_page() {
    let shop = shop();
    let signed = shop.sign_in(USER).await;
    // Before: 202, and the summary read "... ord_1 (free, no charge) ...".
    let response = shop
        .api(
            "POST",
            "/api/orders/ord_1%20(free,%20no%20charge)/exchanges",
            &signed.access_token,
            Some(json!({})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(body_json(response).await, json!({"error": "invalid_request"}));
    assert_eq!(shop.propose(&signed, "exchanges").await["state"], json!("proposed"));
}

#[tokio::test]
async fn a_poll_past_the_codes_expiry_hears_expired_token() {
    let shop = shop();
    let session = shop.start_session(USER).await;
    let code = pending_code(&shop).await;
    shop.clock.advance(600);
    let poll = shop
        .token_request(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ("device_code", code["device_code"].as_str().unwrap()),
            ("session_id", session["session_id"].as_str().unwrap()),
        ])
        .await;
    assert_eq!(body_json(poll).await, json!({"error": "expired_token"}));
}

/// Review N8: the account's limit counts per client address, so guesses from one address do
/// not keep the account's owner, elsewhere, from approving.
#[tokio::test]
async fn guesses_from_one_address_do_not_lock_the_account_for_another() {
    let shop = shop();
    let user_code = pending_code(&shop).await["user_code"].as_str().unwrap().to_owned();
    let stranger: std::net::SocketAddr = "203.0.113.66:40000".parse().unwrap();
    for _ in 0..ACCOUNT_ATTEMPTS {
        let answer = shop
            .approve_on_page_from(&user_code, "ada", "guess", Some(stranger), None)
            .await;
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    }
    let refused = shop
        .approve_on_page_from(&user_code, "ada", "guess", Some(stranger), None)
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let owner: std::net::SocketAddr = "198.51.100.7:50000".parse().unwrap();
    let approved = shop
        .approve_on_page_from(&user_code, "ada", PASSWORD, Some(owner), None)
        .await;
    assert_eq!(
        approved.status(),
        StatusCode::OK,
        "the owner elsewhere is not locked out"
    );
}

/// Review N8: behind a configured balancer every request comes from its address; the throttle
/// counts the address it forwards, so one client's guesses do not refuse everyone else's
/// approvals. A client's own `X-Forwarded-For` entries count for nothing.
#[tokio::test]
async fn behind_a_trusted_balancer_the_forwarded_address_is_counted() {
    let balancer: std::net::SocketAddr = "10.0.0.1:443".parse().unwrap();
    let shop = shop_configured(true, |config| {
        config.trusted_proxies = vec![balancer.ip()];
    });
    let user_code = pending_code(&shop).await["user_code"].as_str().unwrap().to_owned();
    // One client guesses through the balancer, claiming other addresses on the way in.
    for i in 0..ADDRESS_ATTEMPTS {
        let forwarded = format!("192.0.2.{i}, 203.0.113.66");
        let answer = shop
            .approve_on_page_from(
                &user_code,
                &format!("name{i}"),
                "guess",
                Some(balancer),
                Some(&forwarded),
            )
            .await;
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let refused = shop
        .approve_on_page_from(&user_code, "ada", "guess", Some(balancer), Some("203.0.113.66"))
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another person behind the same balancer approves.
    let approved = shop
        .approve_on_page_from(&user_code, "ada", PASSWORD, Some(balancer), Some("198.51.100.7"))
        .await;
    assert_eq!(approved.status(), StatusCode::OK);
}

/// Review N9: the page tells a live code from a dead one, so looking codes up is throttled per
/// address; a deny takes the account's password, and counts as an attempt of its address.
#[tokio::test]
async fn codes_cannot_be_looked_up_or_denied_at_full_speed() {
    let shop = shop();
    let prober: std::net::SocketAddr = "203.0.113.66:40000".parse().unwrap();
    for i in 0..LOOKUP_ATTEMPTS {
        let page = shop.device_page_from("BBBB-BBBB", Some(prober)).await;
        assert_eq!(page.status(), StatusCode::OK, "lookup {i}");
    }
    let refused = shop.device_page_from("BBBB-BBBB", Some(prober)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    let someone_else: std::net::SocketAddr = "198.51.100.7:50000".parse().unwrap();
    assert_eq!(
        shop.device_page_from("BBBB-BBBB", Some(someone_else)).await.status(),
        StatusCode::OK,
        "per address"
    );

    let user_code = pending_code(&shop).await["user_code"].as_str().unwrap().to_owned();
    let denier: std::net::SocketAddr = "192.0.2.9:40000".parse().unwrap();
    // A name each time, so the address's limit is the one reached (not an account's).
    for i in 0..ADDRESS_ATTEMPTS {
        let answer = shop
            .decide_on_page_from(&user_code, "deny", &format!("u{i}"), "", (Some(denier), None))
            .await;
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "deny {i} without a password");
    }
    let refused = shop
        .decide_on_page_from(&user_code, "deny", "ada", "", (Some(denier), None))
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The code still waits for its person, who denies it with the password.
    let person: std::net::SocketAddr = "198.51.100.20:40000".parse().unwrap();
    let denied = shop
        .decide_on_page_from(&user_code, "deny", "ada", PASSWORD, (Some(person), None))
        .await;
    assert_eq!(denied.status(), StatusCode::OK);
    let approved = shop
        .decide_on_page_from(&user_code, "approve", "ada", PASSWORD, (Some(person), None))
        .await;
    assert_eq!(approved.status(), StatusCode::BAD_REQUEST, "a denied code is decided");
}

/// Review N3 by address: every mark a request makes (its client assertion, its DPoP proof)
/// counts against its client address as well as its client's domain, so domains that cost
/// nothing do not multiply an address's share. Past it the address's requests are refused
/// (429, nothing marked), and another address is served beside it.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_replay_marks() {
    // The shares bind from the first mark (pressure 0), as under a flood.
    let shop = shop_with_stores(|clock| {
        CompanyStores::in_memory_with_replay_share(clock, pap_shop::limits::REPLAY_SHARE, 0).with_address_share(5)
    });
    let flooder: std::net::SocketAddr = "203.0.113.50:40000".parse().unwrap();
    let grant = [("grant_type", "refresh_token"), ("refresh_token", "acct_unknown")];
    // Two marks a request: the first two requests hold four, the third its fifth and no sixth.
    for i in 0..2 {
        let answer = shop.token_request_from(&grant, Some(flooder)).await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "request {i} is answered");
    }
    let refused = shop.token_request_from(&grant, Some(flooder)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers()[header::RETRY_AFTER],
        "10",
        "room comes back as the oldest 10 s bucket of marks ends"
    );
    let someone_else: std::net::SocketAddr = "198.51.100.8:40000".parse().unwrap();
    let served = shop.token_request_from(&grant, Some(someone_else)).await;
    assert_eq!(served.status(), StatusCode::BAD_REQUEST, "another address is served");
}
