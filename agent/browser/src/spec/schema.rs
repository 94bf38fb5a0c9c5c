//! The published contract, `schemas/BROWSER.schema.json`, compiled ([`compile`]), and applied
//! to a record shape by name in tests.

#[cfg(test)]
use super::manifest::BROWSER_SCHEMA;

/// The keywords whose meaning in draft 2019-09/2020-12 is not draft 7's: a schema that uses
/// none of them (and puts no assertion beside a `$ref`) validates the same under both.
#[cfg(test)]
const NEWER_THAN_DRAFT_7: [&str; 11] = [
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "minContains",
    "maxContains",
];

/// Compiles `schema` (the published 2020-12 contract, or a part of it) into a validator.
///
/// Compiled as draft 2020-12, `jsonschema` 0.30 takes about 230 MB at its peak for this schema
/// (measured: 231 MB of the process's high-water mark, against 7 MB as draft 7), which every
/// process that loads a manifest or writes a grant then keeps. The schema uses no keyword whose
/// meaning differs between the drafts and no assertion beside a `$ref` (checked by
/// `the_schema_validates_the_same_as_draft_7`), so it is compiled as draft 7, formats left as
/// annotations as 2020-12 has them; the published file still says 2020-12.
pub(crate) fn compile(
    schema: &serde_json::Value,
) -> Result<jsonschema::Validator, Box<jsonschema::ValidationError<'static>>> {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(false)
        .build(&schema)
        .map_err(Box::new)
}

#[cfg(test)]
/// Checks `value` against one of the schema's `$defs` (`grant`, `ledgerRecord`): the shapes the
/// consent host writes are the schema's, checked on every write.
pub(crate) fn check_def(def: &'static str, value: &serde_json::Value) -> Result<(), String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static VALIDATORS: OnceLock<Mutex<HashMap<&'static str, std::sync::Arc<jsonschema::Validator>>>> = OnceLock::new();
    let cache = VALIDATORS.get_or_init(Mutex::default);
    let validator = {
        let mut cache = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match cache.get(def) {
            Some(v) => v.clone(),
            None => {
                let mut schema: serde_json::Value =
                    serde_json::from_str(BROWSER_SCHEMA).map_err(|_| "the schema is not JSON".to_owned())?;
                let object = schema.as_object_mut().ok_or("the schema is not an object")?;
                for key in ["allOf", "required", "properties", "type"] {
                    object.remove(key);
                }
                object.insert("$ref".into(), serde_json::Value::from(format!("#/$defs/{def}")));
                let compiled =
                    std::sync::Arc::new(compile(&schema).map_err(|_| format!("the {def} schema does not compile"))?);
                cache.insert(def, compiled.clone());
                compiled
            }
        }
    };
    match validator.iter_errors(value).next() {
        None => Ok(()),
        // The instance path and the rule, never the instance's value (it may be a secret's neighbour).
        Some(error) => Err(format!(
            "does not fit $defs/{def} at {} (rule {})",
            error.instance_path, error.schema_path
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    /// What makes compiling as draft 7 ([`compile`]) the same validation as 2020-12.
    #[test]
    fn the_schema_validates_the_same_as_draft_7() {
        fn walk(value: &serde_json::Value, at: &str, found: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(object) => {
                    for key in object.keys() {
                        if NEWER_THAN_DRAFT_7.contains(&key.as_str()) {
                            found.push(format!("{at}/{key}"));
                        }
                    }
                    let annotations = ["$ref", "description", "$comment", "title", "examples", "default"];
                    if object.contains_key("$ref") && object.keys().any(|k| !annotations.contains(&k.as_str())) {
                        found.push(format!("{at}: an assertion beside $ref"));
                    }
                    for (key, inner) in object {
                        walk(inner, &format!("{at}/{key}"), found);
                    }
                }
                serde_json::Value::Array(items) => {
                    for (i, inner) in items.iter().enumerate() {
                        walk(inner, &format!("{at}/{i}"), found);
                    }
                }
                _ => {}
            }
        }
        let schema: serde_json::Value = serde_json::from_str(BROWSER_SCHEMA).unwrap();
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        let mut found = Vec::new();
        walk(&schema, "", &mut found);
        assert!(
            found.is_empty(),
            "compile it as 2020-12 again, or change these: {found:?}"
        );
        compile(&schema).unwrap();
    }
}
