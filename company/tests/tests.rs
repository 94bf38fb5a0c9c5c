//! pap-company's integration tests in one binary (one link of the crate, the fixtures in `support`), each file a module named for what it tests. Tests that need `redis-server` say so in their `#[ignore]` reason; `.ci/run` runs them all (`-- --include-ignored`).

mod support;

mod canary;
mod layers;
mod redis;
mod resolver;
mod route;
mod verify;
