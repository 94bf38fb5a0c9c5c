//! AIP-63 §4, consent for the agent's browser. So far: the append-only ledger (C10, C11).
//! Grants, injection, revoke and the profile tools build on it (issue #7).

pub(crate) mod ledger;
