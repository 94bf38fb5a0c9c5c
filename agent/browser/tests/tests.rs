//! pap-browser's integration tests in one binary (ripgrep's `tests/tests.rs` shape: one link of
//! the crate), each file a module named for what it tests. Tests that need Chromium say so in
//! their `#[ignore]` reason; `cargo test` lists them as ignored and `.ci/run` runs them all
//! (`-- --include-ignored`).

mod attach;
mod chromium_profile_source;
mod devtools_pipe;
mod faults;
mod layers;
mod lifecycle;
mod navigation;
mod page_model;
mod revoke_fan_out;
mod sandbox;
mod stale_profiles;
mod tools;
