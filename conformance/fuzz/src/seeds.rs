//! Seed inputs made here, for the targets whose real inputs are signed by the company fixture's
//! agent or are cases the tests already name. `conformance/fuzz/seed-corpus.sh` adds the inputs other
//! programs produce (the Python reference's documents, our agent's identity, ledger and grants,
//! a real Chromium cookie database) and then minimises each corpus.

use std::io;
use std::path::Path;

use pap_shared::{
    BROWSER_ASSERTION_TYP, BrowserAssertionClaims, BrowserAssertionRequest, CompactJws, DpopRequest, HttpsUrl, Jti,
    Jwks, PairwiseUserId, SigningKey, UnixTime, create_dpop_proof,
};
use serde_json::json;

use crate::fixture::{self, CountingRng, NOW, USER};

/// Writes every seed under `out/<target>/<name>`; returns how many.
pub fn write(out: &Path) -> io::Result<usize> {
    let mut written = 0;
    let mut put = |target: &str, name: &str, bytes: &[u8]| -> io::Result<()> {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        written += 1;
        Ok(())
    };

    let valid = valid_assertion()?;
    let form = |assertion: &str| format!("assertion={assertion}");
    put("browser_session_form", "valid-join", form(valid.secret()).as_bytes())?;
    put(
        "browser_session_form",
        "repeated-assertion",
        format!("{}&{}", form(valid.secret()), form(valid.secret())).as_bytes(),
    )?;
    put(
        "browser_session_form",
        "no-assertion",
        b"return_to=https%3A%2F%2Fshop.example%2F",
    )?;
    put("browser_session_form", "alg-none", form(&alg_none()).as_bytes())?;
    put("browser_session_form", "empty", b"")?;

    for (name, bytes) in [
        ("zeros", vec![0u8; 256]),
        ("ones", vec![1u8; 256]),
        ("counting", (0..=255u8).collect()),
    ] {
        put("browser_assertion", name, &bytes)?;
        put("dpop_proof", name, &bytes)?;
    }

    put("compact_jws", "browser-assertion", valid.secret().as_bytes())?;
    put("compact_jws", "alg-none", alg_none().as_bytes())?;
    put("compact_jws", "dpop-proof", dpop_proof()?.secret().as_bytes())?;

    let payload = |jws: &CompactJws| -> io::Result<Vec<u8>> {
        pap_shared::UnverifiedJws::parse(jws.secret())
            .map(|p| p.payload().to_vec())
            .map_err(io::Error::other)
    };
    put("browser_claims", "valid", &payload(&valid)?)?;

    for (name, url) in [
        ("operation-page", "https://shop.example/operations/op_1"),
        ("subdomain-port-query", "https://www.shop.example:8443/a?b=c#d"),
        ("userinfo", "https://ada@shop.example/"),
        ("http", "http://shop.example/"),
        ("lookalike", "https://shop.example.evil.example/"),
        ("suffix-lookalike", "https://evilshop.example/"),
        ("trailing-dot", "https://shop.example./"),
        ("address", "https://127.0.0.1/"),
        ("idn", "https://xn--shp-sna.example/"),
        ("percent-host", "https://shop%2eexample/"),
        ("backslash", "https:\\\\shop.example\\"),
        ("tab", "https://shop.exa\tmple/"),
    ] {
        put("return_to", name, url.as_bytes())?;
    }

    put(
        "client_assertion",
        "valid",
        json!({
            "iss": fixture::CLIENT_ID, "sub": fixture::CLIENT_ID, "aud": "https://shop.example",
            "iat": NOW, "exp": NOW + 60, "jti": "a-client-assertion-id-0001",
        })
        .to_string()
        .as_bytes(),
    )?;

    let es256 = Jwks::from_keys(vec![fixture::agent_key().public_key().clone()]);
    put("jwks", "es256", es256.to_json().to_string().as_bytes())?;
    let rsa =
        SigningKey::generate_rs256(&CountingRng::new("pap-fuzz rsa seed"), 2048, "rsa-1").map_err(io::Error::other)?;
    let both = Jwks::from_keys(vec![
        fixture::agent_key().public_key().clone(),
        rsa.public_key().clone(),
    ]);
    put("jwks", "es256-and-rs256", both.to_json().to_string().as_bytes())?;

    for (name, operation) in operations() {
        put("operation", name, operation.to_string().as_bytes())?;
    }
    put(
        "token_response",
        "session-token",
        json!({
            "access_token": "st_0123456789abcdefghijklmnopqrstuv", "token_type": "DPoP", "expires_in": 3600,
            "scope": "orders:read", "session_id": "ses_0123456789abcdefghijkl", "signed_in": false,
        })
        .to_string()
        .as_bytes(),
    )?;
    put(
        "token_response",
        "device-authorization",
        json!({
            "device_code": "dc_0123456789abcdefghijklmnop", "user_code": "WDJB-MJHT",
            "verification_uri": "https://shop.example/device",
            "verification_uri_complete": "https://shop.example/device?user_code=WDJB-MJHT",
            "expires_in": 600, "interval": 5,
        })
        .to_string()
        .as_bytes(),
    )?;
    for (name, input) in [
        ("navigate", json!({ "url": "https://shop.example/", "keepAlive": true })),
        ("tabs-open", json!({ "action": "open", "url": "https://shop.example/" })),
        ("tabs-close", json!({ "action": "close", "target": "t1-1" })),
        (
            "click-trusted",
            json!({ "target": "t1-1", "selector": "#confirm", "trusted": true }),
        ),
        (
            "fill",
            json!({ "target": "t1-1", "selector": "input[name=q]", "value": "coffee" }),
        ),
        (
            "cdp-send",
            json!({ "target": "t1-1", "method": "Runtime.evaluate", "params": { "expression": "1" } }),
        ),
        ("get-request-body", json!({ "target": "t1-1", "requestId": "1000.1" })),
        ("null", serde_json::Value::Null),
    ] {
        put("tool_input", name, input.to_string().as_bytes())?;
    }
    Ok(written)
}

/// A join the fixture company accepts (once).
pub(crate) fn valid_assertion() -> io::Result<CompactJws> {
    let company = fixture::company();
    let user = PairwiseUserId::parse(USER).map_err(io::Error::other)?;
    let return_to = HttpsUrl::parse("https://shop.example/operations/op_1").map_err(io::Error::other)?;
    let request = BrowserAssertionRequest {
        client_id: &fixture::client_id(),
        user: &user,
        endpoint: &fixture::endpoint(),
        session_id: &company.session,
        return_to: &return_to,
        company_domain: &fixture::domain(),
    };
    let jti = Jti::generate(&CountingRng::new("pap-fuzz seed jti"));
    let claims =
        BrowserAssertionClaims::build(&request, UnixTime::from_secs(NOW - 5), 60, jti).map_err(io::Error::other)?;
    fixture::agent_key()
        .sign(BROWSER_ASSERTION_TYP, &claims)
        .map_err(io::Error::other)
}

/// An unsigned token claiming `alg: none` (every verifier here refuses it).
fn alg_none() -> String {
    use base64::Engine as _;
    let b64 = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.AA",
        b64(json!({ "alg": "none", "typ": BROWSER_ASSERTION_TYP })),
        b64(json!({ "iss": fixture::CLIENT_ID }))
    )
}

fn dpop_proof() -> io::Result<CompactJws> {
    let request = DpopRequest {
        method: "POST",
        htu: "https://shop.example/token",
        access_token: None,
        nonce: None,
    };
    create_dpop_proof(
        fixture::agent_key(),
        &request,
        UnixTime::from_secs(NOW),
        "a-proof-id-of-sixteen-or-more",
    )
    .map_err(io::Error::other)
}

/// Operations as the wire facts give them: proposed, confirmed, final.
fn operations() -> [(&'static str, serde_json::Value); 3] {
    [
        (
            "proposed",
            json!({
                "operation_id": "op_0123456789abcdefghijkl", "revision": 1, "state": "proposed",
                "summary": "Reorder 2 bags of coffee for 24.00 EUR", "terms": { "total": "24.00", "currency": "EUR" },
                "expires_at": "2026-10-11T09:15:05Z", "user_approval_required": true,
                "url": "https://shop.example/operations/op_0123456789abcdefghijkl",
                "confirmation": null, "result": null,
            }),
        ),
        (
            "in-progress",
            json!({
                "operation_id": "op_0123456789abcdefghijkl", "revision": 1, "state": "in_progress",
                "summary": "Reorder 2 bags of coffee", "user_approval_required": false,
                "confirmation": { "revision": 1, "approved_by": "user", "confirmed_at": "2026-11-30T08:41:01.855399Z" },
                "result": null,
            }),
        ),
        (
            "succeeded",
            json!({
                "operation_id": "op_0123456789abcdefghijkl", "revision": 1, "state": "succeeded",
                "summary": "Reorder 2 bags of coffee",
                "confirmation": { "revision": 1, "approved_by": "agent", "confirmed_at": "2026-11-30T08:41:01Z" },
                "result": { "summary": "Ordered." },
            }),
        ),
    ]
}
