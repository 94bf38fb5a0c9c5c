//! pap-agent's integration tests in one binary (ripgrep's `tests/tests.rs` shape: one link of the
//! crate, shared fixtures in `support`), each file a module named for what it tests. Three tests
//! stay binaries of their own: they install a process-wide log subscriber to read what the agent
//! logged (`consent_revoke`, `e2e_python_company`, `e2e_reference_company`).
//!
//! Tests that need a component beyond Rust say so in their `#[ignore]` reason (Chromium, the
//! Python reference, Redis); `cargo test` lists them as ignored, and `.ci/run` runs them all
//! (`-- --include-ignored`).

mod support;

mod cli_browser;
mod cli_consent;
mod console;
mod contexts;
mod device_pacing;
mod documents;
mod identity_serve;
mod join_tabs;
mod mcp_aip7;
mod mcp_http;
mod mcp_python_sdk;
mod mcp_recovery;
mod mcp_stdio;
mod pages;
mod pair_page;
mod private_addresses;
mod rendezvous;
mod tunnel;
mod tunnel_frames;

/// The check the stories use for an assertion in URLs, headers and logs (`support::holds_jws`).
#[test]
fn a_jws_is_found_where_it_is_even_cut_short_and_a_bare_eyj_is_not_one() {
    let jws = "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJhIn0.c2lnbmF0dXJl";
    for holding in [
        jws.to_owned(),
        format!("https://shop.example/x?assertion={jws}&y=1"),
        format!("{{\"referer\":\"https://a/#{jws}\"}}"),
        format!("level=debug body=assertion={jws}"),
        "eyJhbGciOiJub25lIn0.e30.".to_owned(),
        // Cut short after the header or within the payload: still an assertion's start.
        format!("assertion={}", &jws[..25]),
        "value=eyJhbGciOiJFUzI1NiJ9.".to_owned(),
    ] {
        assert!(support::holds_jws(&holding), "{holding}");
    }
    for clean in [
        "https://shop.example/operations/op_4024VnWtMb-eyJf2Uo9gfHnaQ",
        "__Host-poppy_session=Q3eyJ_x9; path=/",
        "eyJ",
        "eyJabc.",
        "eyJabc..def.",
        "127.0.0.1:39873 eyJ.x",
        // A header-like run that is no JOSE header, then a dot.
        "id=eyJhYmMiOiJkIn0.rest",
    ] {
        assert!(!support::holds_jws(clean), "{clean}");
    }
}
