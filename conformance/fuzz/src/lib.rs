//! Fuzz targets for every parser that faces a stranger, each a plain function of the fuzzer's
//! bytes that panics when a property fails.
//!
//! The company side ([`company`]) parses what an unauthenticated client sends and what an
//! agent's host serves; the agent side ([`agent`]) parses what a company serves and what a person
//! hands it. Each target asserts more than "no panic" where a property exists: what parses
//! serialises and parses back the same, an accepted `return_to` is on the company's domain, a
//! verified assertion's claims are what was signed, a refused request changes no store.
//!
//! [`TARGETS`] names them all: `libfuzzer/` (nightly, `cargo fuzz`) wraps each in a binary of
//! the same name, and `tests/replay.rs` (stable) replays every committed corpus entry and crash
//! reproducer through the same function, so a fixed crash stays fixed.

pub mod agent;
pub mod company;
mod fixture;
pub mod seeds;

/// A fuzz target: its name (the corpus directory and the cargo-fuzz binary) and its function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The name, as `cargo fuzz run NAME` takes it.
    pub name: &'static str,
    /// Who sends what it parses: a stranger to the company, or a company (or a person's file)
    /// to the agent. The README's execution goals differ (10 million and 1 million).
    pub side: Side,
    /// The target itself.
    pub run: fn(&[u8]),
}

/// Which side of the bridge a target's parser is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The company parses it from an unauthenticated client or an agent's host.
    Company,
    /// The agent parses it from a company or from a file a person hands it.
    Agent,
}

/// Every target, company side first.
pub const TARGETS: &[Target] = &[
    company_target("browser_session_form", company::browser_session_form),
    company_target("browser_assertion", company::browser_assertion),
    company_target("compact_jws", company::compact_jws),
    company_target("browser_claims", company::browser_claims),
    company_target("return_to", company::return_to),
    company_target("dpop_proof", company::dpop_proof),
    company_target("client_assertion", company::client_assertion),
    company_target("client_metadata", company::client_metadata),
    company_target("jwks", company::jwks),
    agent_target("discovery", agent::discovery),
    agent_target("oauth_metadata", agent::oauth_metadata),
    agent_target("token_response", agent::token_response),
    agent_target("operation", agent::operation),
    agent_target("storage_state", agent::storage_state),
    agent_target("chromium_profile", agent::chromium_profile),
    agent_target("manifest", agent::manifest),
    agent_target("ledger_line", agent::ledger_line),
    agent_target("grants", agent::grants),
    agent_target("tool_input", agent::tool_input),
];

const fn company_target(name: &'static str, run: fn(&[u8])) -> Target {
    Target {
        name,
        side: Side::Company,
        run,
    }
}

const fn agent_target(name: &'static str, run: fn(&[u8])) -> Target {
    Target {
        name,
        side: Side::Agent,
        run,
    }
}
