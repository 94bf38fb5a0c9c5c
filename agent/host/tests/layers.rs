//! The host knows nothing of PAP (nor of any embedder): read from its sources and its manifest,
//! it names no PAP agent, company, Session or wallet. What an embedder serves beside the
//! browser's tools comes in through `ExtraTools`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_host_names_no_pap_agent_company_or_wallet() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for path in sources(&root.join("src")) {
        let text = std::fs::read_to_string(&path).unwrap();
        // Code only: comments may say what the host is for.
        let code: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for forbidden in ["pap_agent", "pap_company", "pap_shop", "PapClient", "PapTool", "Wallet"] {
            assert!(!code.contains(forbidden), "{} names {forbidden}", path.display());
        }
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for forbidden in ["pap-agent", "pap-company", "pap-shop"] {
        assert!(
            !manifest.lines().any(|l| l.trim_start().starts_with(forbidden)),
            "pap-host depends on {forbidden}"
        );
    }
}
