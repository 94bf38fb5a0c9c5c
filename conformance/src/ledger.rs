//! The requirement ledger: rule id -> code -> tests.

use std::path::Path;

use serde::Deserialize;

/// The whole ledger.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// Its rules, in file order.
    #[serde(rename = "rule")]
    pub rules: Vec<Rule>,
}

/// Whether a rule is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Code and tests are named.
    Implemented,
    /// Some is built; `open` says what is not.
    Partial,
    /// Not built; `open` says which issue builds it.
    Open,
}

/// One normative rule.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The spec's id, e.g. `PAP-5-05`.
    pub id: String,
    /// Who must follow it.
    pub role: String,
    /// The rule's words.
    pub statement: String,
    /// Its status.
    pub status: Status,
    /// Where the code is.
    #[serde(default)]
    pub code: Vec<String>,
    /// `FILE::TEST` for Rust tests, `python-runner:CASE` for a reference-runner case,
    /// `pap-conformance:CASE` for a PAP case, `aip63-suite:HOOK` for an AIP-63 suite hook,
    /// `replicas:CHECK` for a check of the replicas run, `fuzz:TARGET` for a fuzz target of
    /// `conformance/fuzz/` (its committed corpus replays as a test) that covers the rule's parser.
    #[serde(default)]
    pub tests: Vec<String>,
    /// What is left, for a partial or open rule.
    #[serde(default)]
    pub open: Option<String>,
}

impl Ledger {
    /// Parses the ledger's text.
    pub fn parse(text: &str) -> Result<Self, RequirementLedgerError> {
        toml::from_str(text).map_err(|e| RequirementLedgerError::Syntax(e.message().to_owned()))
    }

    /// Checks the ledger against the repository at `root`: ids unique; an implemented or
    /// partial rule names code and tests; an open or partial one says what is open; every
    /// `FILE::TEST` names an existing file holding `fn TEST`; every reference-runner case is one
    /// `.ci/test` runs. Returns every problem found.
    pub fn check(&self, root: &Path, runner_cases: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for rule in &self.rules {
            if !seen.insert(rule.id.as_str()) {
                problems.push(format!("{}: listed twice", rule.id));
            }
            let built = matches!(rule.status, Status::Implemented | Status::Partial);
            if built && (rule.code.is_empty() || rule.tests.is_empty()) {
                problems.push(format!("{}: built but names no code or no test", rule.id));
            }
            if rule.status != Status::Implemented && rule.open.is_none() {
                problems.push(format!("{}: not implemented but says nothing of what is open", rule.id));
            }
            for code in &rule.code {
                if let Some(problem) = code_problem(root, code) {
                    problems.push(format!("{}: {problem}", rule.id));
                }
            }
            for test in &rule.tests {
                if let Some(case) = test.strip_prefix("pap-conformance:") {
                    if !crate::pap::CASES.iter().any(|c| c.id == case) {
                        problems.push(format!("{}: pap-conformance has no case {case}", rule.id));
                    }
                    continue;
                }
                if let Some(hook) = test.strip_prefix("aip63-suite:") {
                    if !crate::browser::HOOKS.iter().any(|h| h.id == hook) {
                        problems.push(format!("{}: the AIP-63 suite has no hook {hook}", rule.id));
                    }
                    continue;
                }
                if let Some(check) = test.strip_prefix("replicas:") {
                    if !crate::replicas::CHECKS.contains(&check) {
                        problems.push(format!("{}: pap-conformance replicas has no check {check}", rule.id));
                    }
                    continue;
                }
                if let Some(target) = test.strip_prefix("fuzz:") {
                    let pack = root.join("conformance/fuzz/corpus").join(format!("{target}.b64"));
                    if !pack.is_file() {
                        problems.push(format!(
                            "{}: no fuzz target {target} (conformance/fuzz/corpus/{target}.b64)",
                            rule.id
                        ));
                    }
                    continue;
                }
                if let Some(case) = test.strip_prefix("python-runner:") {
                    if !runner_cases.contains(&case) {
                        problems.push(format!("{}: runner case {case} is not run by .ci/test", rule.id));
                    }
                    continue;
                }
                let Some((file, name)) = test.split_once("::") else {
                    problems.push(format!("{}: {test} is not FILE::TEST", rule.id));
                    continue;
                };
                match std::fs::read_to_string(root.join(file)) {
                    Ok(source) if source.contains(&format!("fn {name}(")) => {}
                    Ok(_) => problems.push(format!("{}: {file} has no test {name}", rule.id)),
                    Err(_) => problems.push(format!("{}: {file} does not exist", rule.id)),
                }
            }
        }
        problems
    }
}

/// What is wrong with a `code` entry (`FILE` or `FILE: NAME …`), if anything: the file must
/// exist, and the first name after it must stand in it (a whole word), so a move or a rename
/// that leaves the ledger behind is caught. Free text (no `/` in it) is not checked; a path
/// outside the repository (`../…`) is a problem: a clone has nothing beside it.
fn code_problem(root: &Path, code: &str) -> Option<String> {
    let (file, named) = match code.split_once(": ") {
        Some((file, named)) => (file, Some(named)),
        None => (code, None),
    };
    if file.starts_with("..") {
        return Some(format!("{file}: outside the repository"));
    }
    if !file.contains('/') {
        return None;
    }
    let Ok(source) = std::fs::read_to_string(root.join(file)) else {
        return Some(format!("{file} does not exist"));
    };
    let name: String = named?
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let whole_word = |at: usize| {
        let before = source[..at].chars().next_back();
        let after = source[at + name.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !part(before) && !part(after)
    };
    let found = name.is_empty() || source.match_indices(name.as_str()).any(|(at, _)| whole_word(at));
    (!found).then(|| format!("{file} has no {name}"))
}

/// Why the ledger could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequirementLedgerError {
    /// Not valid TOML of the ledger's shape.
    #[error("the ledger is not valid: {0}")]
    Syntax(String),
}
