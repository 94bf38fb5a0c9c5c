//! The published contract, `schemas/BROWSER.schema.json`, applied to a record shape by name.

use super::manifest::BROWSER_SCHEMA;

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
                let compiled = std::sync::Arc::new(
                    jsonschema::validator_for(&schema).map_err(|_| format!("the {def} schema does not compile"))?,
                );
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
