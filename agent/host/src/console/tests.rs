#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use pap_shared::{ManualClock, SystemRng};
use tower::ServiceExt as _;

use super::requests::{AccessRequests, Filed, RequestState};
use super::*;

const PORT: u16 = 7879;

struct Fixture {
    dir: crate::scratch::Dir,
    console: Arc<Console>,
    clock: Arc<ManualClock>,
}

fn fixture() -> Fixture {
    let dir = crate::scratch::Dir::new("pap-console");
    let clock = ManualClock::at(1_800_000_000);
    let unpair = Arc::new(HostUnpair::new(dir.path(), clock.clone(), Arc::new(SystemRng)));
    let console = Arc::new(Console::new(
        dir.path(),
        PORT,
        unpair,
        clock.clone(),
        Arc::new(SystemRng),
    ));
    Fixture { dir, console, clock }
}

/// The console's `Host` (its own name, `pap-….localhost:PORT`).
fn host(console: &Console) -> String {
    console.origin().trim_start_matches("http://").to_owned()
}

fn get(console: &Console, path: &str) -> axum::http::request::Builder {
    Request::get(path).header(header::HOST, host(console))
}

fn post(console: &Console, path: &str) -> axum::http::request::Builder {
    Request::post(path)
        .header(header::HOST, host(console))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
}

async fn send(console: &Arc<Console>, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = console.clone().router().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// Signs a browser in with a fresh link: its cookie header.
async fn signed_in(console: &Arc<Console>) -> String {
    let link = console.link();
    let path = link.expose().strip_prefix(console.origin()).unwrap().to_owned();
    let (status, headers, _) = send(console, get(console, &path).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let set = headers.get(header::SET_COOKIE).unwrap().to_str().unwrap().to_owned();
    assert!(set.starts_with("__Host-pap-console="), "{set}");
    for attribute in ["Path=/", "Secure", "HttpOnly", "SameSite=Strict"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains("Domain") && !set.contains("Max-Age") && !set.contains("Expires"));
    // The link works once.
    let (again, _, _) = send(console, get(console, &path).body(Body::empty()).unwrap()).await;
    assert_eq!(again, StatusCode::FORBIDDEN);
    set.split(';').next().unwrap().to_owned()
}

fn file(dir: &std::path::Path, device: &str, domain: &str, why: &str) -> requests::AccessRequest {
    match AccessRequests::at(dir)
        .file(
            device,
            domain,
            "pap_join",
            why,
            ManualClock::at(1_800_000_000).now(),
            &SystemRng,
        )
        .unwrap()
    {
        Filed::Asked(request) => request,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_device_bearer_is_refused_on_every_route_before_anything_is_read() {
    let Fixture { console, .. } = fixture();
    let link = console.link();
    let login = link.expose().strip_prefix(console.origin()).unwrap().to_owned();
    for (method, path) in [
        ("GET", "/"),
        ("GET", login.as_str()),
        ("POST", "/requests/ar_x/grant"),
        ("POST", "/requests/ar_x/decline"),
        ("POST", "/grants/g_x/revoke"),
        ("POST", "/devices/dev_x/unpair"),
        ("POST", "/logout"),
        ("GET", "/nowhere"),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, host(&console))
            .header(header::AUTHORIZATION, "Bearer pap_dev_secret")
            .body(Body::empty())
            .unwrap();
        let (status, _, body) = send(&console, request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
        assert!(body.contains("a device's credential is refused here"), "{body}");
    }
    // The link the bearer's request carried was not spent: the person's browser still signs in.
    let (status, _, _) = send(&console, get(&console, &login).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn without_the_cookie_or_from_another_host_nothing_is_shown() {
    let Fixture { console, .. } = fixture();
    let (status, _, body) = send(&console, get(&console, "/").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("one-time link"));
    let (status, _, _) = send(
        &console,
        get(&console, "/")
            .header(header::COOKIE, "__Host-pap-console=forged")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let cookie = signed_in(&console).await;
    // Not even under 127.0.0.1: the console answers at its own name only, whose cookie no other
    // local server's port gets.
    let plain = Request::get("/")
        .header(header::HOST, "127.0.0.1:7879")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&console, plain).await.0, StatusCode::FORBIDDEN);
    assert!(console.origin().starts_with("http://pap-") && console.origin().ends_with(".localhost:7879"));
    let rebound = Request::get("/")
        .header(header::HOST, "attacker.example:7879")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&console, rebound).await.0, StatusCode::FORBIDDEN);
    let (status, headers, _) = send(
        &console,
        get(&console, "/")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let csp = headers.get(header::CONTENT_SECURITY_POLICY).unwrap().to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
}

#[tokio::test]
async fn the_person_grants_a_request_once_with_the_lifetime_chosen() {
    let Fixture { dir, console, clock } = fixture();
    let request = file(
        dir.path(),
        "dev_a",
        "shop.example",
        "<script>alert(1)</script> to buy shoes",
    );
    let cookie = signed_in(&console).await;
    let (status, _, page) = send(
        &console,
        get(&console, "/")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("shop.example") && page.contains(&request.id));
    assert!(page.contains("&lt;script&gt;") && !page.contains("<script>"), "escaped");
    let csrf = console.logins.csrf_for(cookie.split_once('=').unwrap().1);
    let action = format!("/requests/{}/grant", request.id);
    let form = format!("csrf={}&lifetime=86400", csrf.expose());
    // Not from the console's own page: refused; a forged token: refused.
    let (status, _, _) = send(
        &console,
        post(&console, &action)
            .header(header::COOKIE, &cookie)
            .body(Body::from(form.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = send(
        &console,
        post(&console, &action)
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, console.origin())
            .body(Body::from("csrf=forged&lifetime=86400"))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let nothing = ConsentHost::open(dir.path(), clock.clone(), Arc::new(SystemRng)).unwrap();
    assert!(
        nothing.all().unwrap().is_empty(),
        "nothing was granted by the refused forms"
    );
    let granted = || {
        post(&console, &action)
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, console.origin())
            .body(Body::from(form.clone()))
            .unwrap()
    };
    let (status, headers, _) = send(&console, granted()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers.get(header::LOCATION).unwrap(), "/");
    // A second click changes nothing.
    let (status, _, _) = send(&console, granted()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let grants = ConsentHost::open(dir.path(), clock.clone(), Arc::new(SystemRng))
        .unwrap()
        .all()
        .unwrap();
    assert_eq!(grants.len(), 1);
    let grant = &grants[0];
    assert_eq!(grant.device_id.as_deref(), Some("dev_a"));
    assert!(grant.covers("shop.example") && !grant.covers("other.example"));
    assert_eq!(grant.expires_at, Some(clock.now().plus(86_400)));
    let answered = AccessRequests::at(dir.path()).list().unwrap();
    assert_eq!(answered[0].state, RequestState::Granted);
    assert_eq!(answered[0].grant_id.as_deref(), Some(grant.id.as_str()));
    // The grant is listed with its revoke, and revoking it ends it.
    let (_, _, page) = send(
        &console,
        get(&console, "/")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(page.contains(&format!("/grants/{}/revoke", grant.id)));
    let (status, _, _) = send(
        &console,
        post(&console, &format!("/grants/{}/revoke", grant.id))
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, console.origin())
            .body(Body::from(format!("csrf={}", csrf.expose())))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let after = ConsentHost::open(dir.path(), clock.clone(), Arc::new(SystemRng))
        .unwrap()
        .all()
        .unwrap();
    assert!(!after[0].is_active(clock.now()));
}

#[tokio::test]
async fn a_lifetime_the_console_does_not_offer_grants_nothing() {
    let Fixture { dir, console, clock } = fixture();
    let request = file(dir.path(), "dev_a", "shop.example", "");
    let cookie = signed_in(&console).await;
    let csrf = console.logins.csrf_for(cookie.split_once('=').unwrap().1);
    let (status, _, _) = send(
        &console,
        post(&console, &format!("/requests/{}/grant", request.id))
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, console.origin())
            .body(Body::from(format!("csrf={}&lifetime=99999999", csrf.expose())))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let host = ConsentHost::open(dir.path(), clock, Arc::new(SystemRng)).unwrap();
    assert!(host.all().unwrap().is_empty());
    assert_eq!(
        AccessRequests::at(dir.path()).list().unwrap()[0].state,
        RequestState::Pending
    );
}

#[tokio::test]
async fn unpairing_from_the_console_refuses_the_device_s_credential_from_then_on() {
    let Fixture { dir, console, clock } = fixture();
    let devices = Devices::at(dir.path());
    let code = devices.start_pairing("phone", 60, clock.as_ref(), &SystemRng).unwrap();
    let (device, bearer) = devices.redeem(code.expose(), clock.as_ref(), &SystemRng).unwrap();
    let cookie = signed_in(&console).await;
    let (_, _, page) = send(
        &console,
        get(&console, "/")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(page.contains("phone") && page.contains(&format!("/devices/{}/unpair", device.id)));
    let csrf = console.logins.csrf_for(cookie.split_once('=').unwrap().1);
    let (status, _, _) = send(
        &console,
        post(&console, &format!("/devices/{}/unpair", device.id))
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, console.origin())
            .body(Body::from(format!("csrf={}", csrf.expose())))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(devices.authenticate(&bearer).unwrap(), None);
    assert!(devices.list().unwrap().is_empty());
    // Unpairing it again says there is no such device, and changes nothing.
    let (status, _, body) = send(
        &console,
        post(&console, &format!("/devices/{}/unpair", device.id))
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, console.origin())
            .body(Body::from(format!("csrf={}", csrf.expose())))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body.contains("no paired device"), "{body}");
}
