//! The verifier library stays a library: what a company mounting the route compiles is the
//! route, the verifier and its stores, never the reference shop, a CLI, a config format, a
//! certificate maker, a log or metrics exporter, or Redis unless asked for (review: one product
//! per crate). Read from the manifest and the sources, so a new dependency or a shop import
//! fails here before anyone's build grows.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::Path;

const NEVER_IN_THE_LIBRARY: &[&str] = &[
    "argon2",
    "clap",
    "toml",
    "rcgen",
    "tracing-subscriber",
    "metrics-exporter-prometheus",
    "pap-shop",
];

#[test]
fn the_library_depends_on_no_part_of_the_shop() {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap();
    let names: Vec<&str> = dependencies
        .lines()
        .filter_map(|line| line.split(['.', ' ', '=']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect();
    assert!(
        names.contains(&"pap-shared"),
        "the dependency list was not read: {names:?}"
    );
    for never in NEVER_IN_THE_LIBRARY {
        assert!(!names.contains(never), "pap-company depends on {never}");
    }
    let redis = dependencies.lines().find(|line| line.starts_with("redis")).unwrap();
    assert!(
        redis.contains("optional = true"),
        "Redis is a feature of the library, off by default"
    );
    assert!(manifest.contains("default = []"), "no feature is on by default");
}

#[test]
fn no_source_of_the_library_names_the_shop() {
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    let mut read = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            read += 1;
            for shop in ["pap_shop", "ReferenceCompany", "LocalCompany", "CompanyConfig"] {
                assert!(!source.contains(shop), "{} names {shop}", path.display());
            }
        }
    }
    assert!(read > 10, "the sources were not read");
}
