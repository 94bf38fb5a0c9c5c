//! The agent's parsers of what a company serves (discovery, OAuth metadata, token and device
//! responses, operations) and of what a person hands it or it reads back (storage-state files,
//! Chromium cookie databases, provider manifests, its ledger and grants).

use std::path::PathBuf;
use std::sync::OnceLock;

use pap_browser::consent::{Grant, Record, fuzzing};
use pap_browser::spec::parse_manifest;
use pap_shared::{
    AuthorizationServerMetadata, DeviceAuthorizationResponse, Discovery, OAuthErrorBody, Operation, OperationResult,
    TokenResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Parses `data` as `T`; when it parses, what it writes parses back equal.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(data: &[u8]) -> Option<T> {
    let value: T = serde_json::from_slice(data).ok()?;
    let written = serde_json::to_vec(&value).unwrap_or_else(|e| panic!("a parsed value does not write: {e}"));
    let again: T = serde_json::from_slice(&written).unwrap_or_else(|e| panic!("a written value does not parse: {e}"));
    assert_eq!(again, value, "changed on a write and a read");
    Some(value)
}

/// A company's discovery document (`/.well-known/poppy`).
pub fn discovery(data: &[u8]) {
    round_trip::<Discovery>(data);
}

/// A company's OAuth authorization server metadata.
pub fn oauth_metadata(data: &[u8]) {
    round_trip::<AuthorizationServerMetadata>(data);
}

/// A token-endpoint or device-authorization response, or an OAuth error body: the error body
/// round-trips, and a token response never prints its tokens.
pub fn token_response(data: &[u8]) {
    round_trip::<OAuthErrorBody>(data);
    if let Ok(response) = serde_json::from_slice::<TokenResponse>(data) {
        let printed = format!("{response:?}");
        // What the public fields print by themselves: a company may well put a token's text in
        // one of them (CI's 10-second run found a `session_id` that held the access token);
        // the tokens' own fields must add no occurrence of it.
        let public = format!(
            "{:?}",
            (
                &response.token_type,
                response.expires_in,
                &response.scope,
                &response.session_id,
                response.signed_in
            )
        );
        for token in std::iter::once(&response.access_token).chain(response.refresh_token.as_ref()) {
            // Long enough that the struct's own text cannot contain it by chance.
            if token.secret().len() >= 24 {
                let times = |text: &str| text.matches(token.secret()).count();
                assert!(times(&printed) <= times(&public), "a token response printed its token");
            }
        }
    }
    let _ = serde_json::from_slice::<DeviceAuthorizationResponse>(data);
}

/// An operation document and an operation's result.
pub fn operation(data: &[u8]) {
    round_trip::<Operation>(data);
    round_trip::<OperationResult>(data);
}

/// A storage-state file handed to `consent grant --from-storage-state`.
pub fn storage_state(data: &[u8]) {
    fuzzing::storage_state(data);
}

/// How many cookies a storage-state file yields (for the tests: the seeds reach the read).
pub fn storage_state_cookies(data: &[u8]) -> usize {
    fuzzing::storage_state(data)
}

/// A Chromium profile's cookie database handed to `consent grant --from-chromium-profile`.
pub fn chromium_profile(data: &[u8]) {
    chromium_profile_cookies(data);
}

/// How many cookies a cookie database yields, decrypted (for the tests: the seeds reach the
/// decryption).
pub fn chromium_profile_cookies(data: &[u8]) -> usize {
    fuzzing::chromium_profile(scratch(), data)
}

/// An AIP-63 provider manifest (YAML frontmatter and body): what parses writes out and reads back
/// the same.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(manifest) = parse_manifest(text, None) else {
        return;
    };
    let written = serde_json::to_vec(&manifest).unwrap_or_else(|e| panic!("a manifest does not write: {e}"));
    let again: pap_browser::spec::BrowserManifest =
        serde_json::from_slice(&written).unwrap_or_else(|e| panic!("a written manifest does not read: {e}"));
    assert_eq!(again, manifest, "a manifest changed on a write and a read");
}

/// One line of the consent ledger as `verify` and an append read it back: a line that parses is
/// written back as a line that parses to the same record, and writing is stable.
pub fn ledger_line(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(record) = Record::parse_line(text) else {
        return;
    };
    let line = record.to_line();
    let again = Record::parse_line(&line).unwrap_or_else(|e| panic!("a written ledger line does not parse: {e}"));
    assert_eq!(again, record, "a record changed on a write and a read");
    assert_eq!(again.to_line(), line, "writing a record is not stable");
}

/// A tool caller's input (an LLM that page content can steer), as each reserved tool parses it:
/// an `input_invalid` error quotes nothing the caller sent (C9: the caller may have been handed a
/// secret to smuggle out through an error or a log). Checked with canaries: every key and string
/// the caller chose (all but the tools' own field and variant names, kept so the input still
/// reaches each check) is replaced by a unique token that no error may contain.
pub fn tool_input(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = pap_browser::tools::fuzzing::tool_input_errors(&input);
    let mut canaries = 0;
    let marked = with_canaries(&input, &mut canaries);
    for error in pap_browser::tools::fuzzing::tool_input_errors(&marked) {
        assert!(
            !error.message.contains(CANARY),
            "an input error quoted what the caller sent: {}",
            error.message
        );
    }
}

const CANARY: &str = "Qz7CANARY";

/// The tools' own names in their inputs: field names and `tabs` actions.
const OURS: &[&str] = &[
    "url",
    "target",
    "keepAlive",
    "expression",
    "selector",
    "fullPage",
    "trusted",
    "value",
    "action",
    "requestId",
    "method",
    "params",
    "open",
    "close",
    "list",
    "switch",
];

/// `value` with every key and string not in [`OURS`] replaced by a unique canary.
fn with_canaries(value: &serde_json::Value, n: &mut usize) -> serde_json::Value {
    let mut canary = |text: &str| {
        if OURS.contains(&text) {
            text.to_owned()
        } else {
            *n += 1;
            format!("{CANARY}{n}")
        }
    };
    match value {
        serde_json::Value::String(text) => serde_json::Value::String(canary(text)),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(|v| with_canaries(v, n)).collect())
        }
        serde_json::Value::Object(fields) => serde_json::Value::Object(
            fields
                .iter()
                .map(|(key, v)| {
                    let key = if OURS.contains(&key.as_str()) {
                        key.clone()
                    } else {
                        *n += 1;
                        format!("{CANARY}{n}")
                    };
                    (key, with_canaries(v, n))
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The consent store's `grants.json` as it is read back.
pub fn grants(data: &[u8]) {
    round_trip::<Vec<Grant>>(data);
}

/// The prefix of a process's scratch directory in the temp dir; its process id follows.
const SCRATCH_PREFIX: &str = "pap-fuzz-";

/// A directory of this process's own for targets that need a file on disk.
fn scratch() -> &'static std::path::Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let temp = std::env::temp_dir();
        remove_ended_scratches(&temp);
        let dir = temp.join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        dir
    })
}

/// Removes the scratch directories of processes that have ended. A fuzzing process cannot remove
/// its own (it is reused until the process exits, and libFuzzer ends it), so each replay test
/// and each fuzz run left one behind. Only where `/proc` tells which processes live; a directory
/// whose process id is in use again is left.
fn remove_ended_scratches(temp: &std::path::Path) {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(SCRATCH_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scratch_of_an_ended_process_is_removed_and_a_living_ones_kept() {
        let temp = std::env::temp_dir().join(format!("pap-fuzz-sweep-test-{}", std::process::id()));
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        ended.wait().unwrap();
        let (gone, kept) = (
            temp.join(format!("{SCRATCH_PREFIX}{}", ended.id())),
            temp.join(format!("{SCRATCH_PREFIX}{}", std::process::id())),
        );
        let other = temp.join("pap-fuzz-not-a-pid");
        for dir in [&gone, &kept, &other] {
            std::fs::create_dir_all(dir.join("Network")).unwrap();
        }
        remove_ended_scratches(&temp);
        assert!(!gone.exists(), "an ended process's scratch stayed");
        assert!(kept.exists(), "a living process's scratch went");
        assert!(other.exists(), "a directory not named by a process id went");
        std::fs::remove_dir_all(&temp).unwrap();
    }
}
