//! Every committed corpus entry and crash reproducer, replayed through its target on stable:
//! `conformance/fuzz/corpus/<target>.b64` (inputs the fuzzer kept for their coverage, seeded from
//! real inputs, one a line in base64: `corpus.py`) and `conformance/fuzz/regressions/<target>/`
//! (each input that once failed, kept after its fix, one a file).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use pap_fuzz::TARGETS;

/// The inputs of `target`'s committed corpus.
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let pack = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(format!("{target}.b64"));
    let text = std::fs::read_to_string(&pack).unwrap_or_else(|e| panic!("{}: {e}", pack.display()));
    text.lines()
        .map(|line| {
            base64::engine::general_purpose::STANDARD
                .decode(line)
                .unwrap_or_else(|e| panic!("{}: a line is no base64: {e}", pack.display()))
        })
        .collect()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = listing
        .map(|entry| {
            entry
                .map(|e| e.path())
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        })
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_entry_and_reproducer_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut replayed = 0;
    for target in TARGETS {
        let corpus = corpus(target.name);
        assert!(!corpus.is_empty(), "{}: no committed corpus", target.name);
        for (line, data) in corpus.iter().enumerate() {
            let outcome = std::panic::catch_unwind(|| (target.run)(data));
            assert!(
                outcome.is_ok(),
                "{}: line {} of its corpus fails its target",
                target.name,
                line + 1
            );
            replayed += 1;
        }
        for file in entries(&root.join("regressions").join(target.name)) {
            let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| (target.run)(&data));
            assert!(outcome.is_ok(), "{}: {} fails its target", target.name, file.display());
            replayed += 1;
        }
    }
    eprintln!("{replayed} inputs replayed through {} targets", TARGETS.len());
}

#[test]
fn every_target_has_a_cargo_fuzz_binary_of_its_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("libfuzzer");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_else(|e| panic!("{e}"));
    for target in TARGETS {
        let source = root.join("fuzz_targets").join(format!("{}.rs", target.name));
        let text = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        assert!(
            text.contains(&format!("pap_fuzz::{}::{}", module(target.side), target.name)),
            "{}",
            source.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{}\"", target.name)),
            "{} not in libfuzzer/Cargo.toml",
            target.name
        );
    }
}

fn module(side: pap_fuzz::Side) -> &'static str {
    match side {
        pap_fuzz::Side::Company => "company",
        pap_fuzz::Side::Agent => "agent",
    }
}

#[test]
fn the_run_script_gives_the_company_side_goal_to_exactly_the_company_side_targets() {
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("run.sh")).unwrap_or_else(|e| panic!("{e}"));
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix("company_side=\""))
        .unwrap_or_else(|| panic!("run.sh names no company_side"));
    let mut listed: Vec<&str> = line.trim_end_matches('"').split_whitespace().collect();
    let mut company: Vec<&str> = TARGETS
        .iter()
        .filter(|t| t.side == pap_fuzz::Side::Company)
        .map(|t| t.name)
        .collect();
    listed.sort_unstable();
    company.sort_unstable();
    assert_eq!(listed, company);
}

#[test]
fn the_grant_source_seeds_reach_the_cookies() {
    let most =
        |target: &str, count: fn(&[u8]) -> usize| corpus(target).iter().map(|data| count(data)).max().unwrap_or(0);
    // The real Chromium database holds the three cookies its page set (v10, the basic store).
    assert_eq!(most("chromium_profile", pap_fuzz::agent::chromium_profile_cookies), 3);
    assert!(most("storage_state", pap_fuzz::agent::storage_state_cookies) >= 3);
}
