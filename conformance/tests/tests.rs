//! pap-conformance's integration tests in one binary, each file a module named for what it tests. Tests that need Chromium say so in their `#[ignore]` reason; `.ci/run` runs them all (`-- --include-ignored`).

mod broken_company;
mod browser_suite;
mod ledger;
