//! The crate's layers hold, read from its sources: each layer imports only the layers below it
//! (`tools` > `chromium` > `consent` > `store` and `spec`, with `persons` beneath them all), the spec layer does no I/O (no
//! tokio, no chromiumoxide, no clock, no socket, no process), and the tool surface never names the
//! operator's proof (AIP-63 C7: it acts for agents only).

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
        }
    }
    out
}

/// The code of a source file without its tests (a `mod tests` file, or what follows
/// `#[cfg(test)]`).
fn code(path: &Path, text: &str) -> String {
    if path.ends_with("tests.rs") {
        return String::new();
    }
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    // Comments name other layers freely; only code counts.
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn layer(name: &str) -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(name);
    let files = if root.is_dir() {
        sources(&root)
    } else {
        vec![(root.with_extension("rs"), String::new())]
    };
    files
        .into_iter()
        .map(|(path, text)| {
            let code = code(&path, &text);
            (path, code)
        })
        .collect()
}

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    let above = |layer: &str| -> &'static [&'static str] {
        match layer {
            "spec" => &["crate::consent", "crate::chromium", "crate::tools", "crate::store"],
            "store" => &["crate::consent", "crate::chromium", "crate::tools"],
            "consent" => &["crate::chromium", "crate::tools"],
            "chromium" => &["crate::tools"],
            // What is the person's (AIP-7) depends on nothing of the kit: the request guard and
            // the tools judge by it.
            "persons" => &[
                "crate::spec",
                "crate::consent",
                "crate::chromium",
                "crate::tools",
                "crate::store",
            ],
            _ => &[],
        }
    };
    for name in ["spec", "store", "persons", "consent", "chromium", "tools"] {
        for (path, code) in layer(name) {
            for forbidden in above(name) {
                assert!(
                    !code.contains(forbidden),
                    "{} (layer {name}) reaches up to {forbidden}",
                    path.display()
                );
            }
        }
    }
}

/// The spec layer starts no process, opens no socket, drives no browser and reads no clock (it
/// reads a manifest's file when asked to load one, and nothing else).
#[test]
fn the_spec_layer_does_no_io_but_reading_a_manifest() {
    for (path, code) in layer("spec") {
        for io in [
            "tokio",
            "chromiumoxide",
            "std::net",
            "std::process",
            "reqwest",
            "SystemTime",
            "Instant",
        ] {
            assert!(!code.contains(io), "{} (the spec layer) uses {io}", path.display());
        }
    }
}

#[test]
fn the_tool_surface_never_names_the_operator() {
    for (path, code) in layer("tools") {
        assert!(
            !code.contains("Operator"),
            "{} (the tool surface) names the operator's proof",
            path.display()
        );
    }
    let profile_tools =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/consent/tools.rs")).unwrap();
    assert!(
        !profile_tools.contains("Operator"),
        "the profile tools name the operator's proof"
    );
}
