//! pap-shop's integration tests in one binary (one link of the crate, the fixtures in `support`), each file a module named for what it tests. Tests that need `redis-server` say so in their `#[ignore]` reason; `.ci/run` runs them all (`-- --include-ignored`).

mod support;

mod cli;
mod hostile;
mod pages;
mod reference;
