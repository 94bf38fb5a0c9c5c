//! Granted values kept out of tool results (review M4): a tool caller reads pages, and a page
//! of a granted site can hold its own cookie values (a script's `document.cookie`, an echoing
//! endpoint). The host replaces every granted value it can recognise in a result, raw or
//! encoded:
//!
//! - raw, and any run of [`WINDOW`] characters of it (a value split across results, or cut);
//! - base64 and base64url at each of the three byte alignments it can sit at inside a longer
//!   encoded text (`btoa(document.cookie)`), hex in either case, percent-encoded (every byte, or
//!   as `encodeURIComponent` leaves it), and JSON `\uXXXX` escapes in either case.
//!
//! All patterns go into one Aho-Corasick automaton, so a result is scanned once however many
//! values are granted. What stays possible is an encoding the host does not know (a cipher of
//! the page's own, chunks shorter than [`WINDOW`] spread over results): redaction is a second
//! line; the first is that a tool's tab on another site never holds the grant's cookies (M5).

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// What stands where a granted value was.
pub(super) const REDACTED: &str = "[granted value redacted]";

/// The shortest run of a value's characters that is redacted on its own.
pub(super) const WINDOW: usize = 8;

/// The recognisers of a set of granted values.
pub(super) struct Redactor {
    patterns: AhoCorasick,
}

impl Redactor {
    /// Recognisers for `secrets` (values shorter than [`WINDOW`] are too common to find safely
    /// and are left out); `None` with nothing to find.
    pub(super) fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        let mut patterns: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.chars().count() >= WINDOW)
            .flat_map(encodings)
            .filter(|p| p.len() >= WINDOW)
            .collect();
        patterns.sort();
        patterns.dedup();
        if patterns.is_empty() {
            return None;
        }
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()
            .map(|patterns| Self { patterns })
    }

    /// Replaces every recognised value in the strings of `value`; how many were replaced.
    pub(super) fn redact(&self, value: &mut serde_json::Value) -> usize {
        match value {
            serde_json::Value::String(text) => {
                let found = self.patterns.find_iter(text.as_str()).count();
                if found > 0 {
                    let with = vec![REDACTED; self.patterns.patterns_len()];
                    *text = self.patterns.replace_all(text, &with);
                }
                found
            }
            serde_json::Value::Array(items) => items.iter_mut().map(|v| self.redact(v)).sum(),
            serde_json::Value::Object(fields) => fields.values_mut().map(|v| self.redact(v)).sum(),
            _ => 0,
        }
    }
}

/// Every form of `secret` the host recognises.
fn encodings(secret: &str) -> Vec<String> {
    let bytes = secret.as_bytes();
    let mut out = vec![secret.to_owned()];
    // Runs of WINDOW characters: a value split across results, or cut short.
    let chars: Vec<char> = secret.chars().collect();
    for run in chars.windows(WINDOW) {
        out.push(run.iter().collect());
    }
    // Base64 at each alignment: encoded behind 0, 1 or 2 bytes of anything, only the characters
    // that depend on the secret's bytes alone are kept.
    for lead in 0..3_usize {
        let mut shifted = vec![0_u8; lead];
        shifted.extend_from_slice(bytes);
        let encoded = STANDARD_NO_PAD.encode(&shifted);
        // The first `lead` bytes touch the first ceil(lead * 4 / 3) characters; the last group
        // is partial unless the length is a multiple of three.
        let skip = (lead * 4).div_ceil(3);
        let whole = shifted.len() / 3 * 4;
        if whole > skip {
            let core = &encoded[skip..whole];
            out.push(core.to_owned());
            out.push(core.replace('+', "-").replace('/', "_"));
        }
    }
    out.push(STANDARD.encode(bytes));
    out.push(URL_SAFE_NO_PAD.encode(bytes));
    // Hex, both cases.
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    out.push(hex.to_ascii_uppercase());
    out.push(hex);
    // Percent-encoding: every byte, both cases; and as encodeURIComponent leaves it.
    let every: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
    out.push(every.to_ascii_lowercase());
    out.push(every);
    out.push(uri_component(secret));
    // JSON escapes of every character, both cases of the hex digits.
    let lower: String = secret.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
    let upper: String = secret.encode_utf16().map(|u| format!("\\u{u:04X}")).collect();
    out.push(lower);
    out.push(upper);
    out
}

/// `encodeURIComponent(text)`.
fn uri_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use serde_json::json;

    use super::*;

    const SECRET: &str = "s3cr3t-V4lue+/of=the~grant";

    fn leaks(redactor: &Redactor, text: &str) -> String {
        let mut value = json!({ "result": text });
        redactor.redact(&mut value);
        value["result"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_granted_value_is_found_in_every_encoding_the_host_knows() {
        // Review M4: what a tool caller could make a page return, each form tried.
        let redactor = Redactor::new([SECRET]).unwrap();
        let bytes = SECRET.as_bytes();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut forms = vec![
            ("raw", format!("sid={SECRET}; theme=dark")),
            ("hex", format!("0x{hex}")),
            ("HEX", hex.to_ascii_uppercase()),
            ("percent", bytes.iter().map(|b| format!("%{b:02X}")).collect()),
            ("percent lower", bytes.iter().map(|b| format!("%{b:02x}")).collect()),
            ("encodeURIComponent", uri_component(SECRET)),
            (
                "json escapes",
                SECRET.chars().map(|c| format!("\\u{:04x}", u32::from(c))).collect(),
            ),
            (
                "json escapes upper",
                SECRET.chars().map(|c| format!("\\u{:04X}", u32::from(c))).collect(),
            ),
        ];
        // btoa(document.cookie): the value after 0, 1 or 2 bytes of other cookies.
        for lead in ["", "a", "ab", "sid=", "x; sid="] {
            let cookie = format!("{lead}{SECRET}; theme=dark");
            forms.push(("base64", STANDARD.encode(cookie.as_bytes())));
            forms.push(("base64url", URL_SAFE_NO_PAD.encode(cookie.as_bytes())));
        }
        for (form, text) in forms {
            let seen = leaks(&redactor, &text);
            assert!(seen.contains(REDACTED), "{form} not recognised: {text}");
            assert!(!seen.contains(SECRET), "{form}: the raw value is left");
        }
    }

    #[test]
    fn a_value_split_across_results_is_found_in_each_part() {
        let redactor = Redactor::new([SECRET]).unwrap();
        let (head, tail) = SECRET.split_at(SECRET.len() / 2);
        for part in [head, tail] {
            let seen = leaks(&redactor, &format!("part: {part}"));
            assert!(seen.contains(REDACTED), "the part {part} passed");
            // What is left of a part is shorter than a window: no run of the value remains.
            let left = seen.replace(REDACTED, "");
            assert!(
                SECRET
                    .as_bytes()
                    .windows(WINDOW)
                    .all(|run| !left.as_bytes().windows(WINDOW).any(|l| l == run)),
                "{left}"
            );
        }
    }

    #[test]
    fn text_without_a_granted_value_is_left_as_it_was() {
        let redactor = Redactor::new([SECRET]).unwrap();
        let text = "An ordinary page: orders, prices, s3cr3t (too short to mean anything).".to_owned();
        assert_eq!(leaks(&redactor, &text), text);
        assert!(
            Redactor::new(["short"]).is_none(),
            "a value under a window is not searched"
        );
    }
}
