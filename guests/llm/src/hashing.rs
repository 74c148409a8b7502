//! Hashes recorded in the audit trail so a row's prompt can be proven later
//! without storing it: SHA-256 over the template text, and over the row's
//! canonical JSON (RFC 8785), so key order and number spelling do not matter.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub fn template_hash(template: &str) -> String {
    hex::encode(Sha256::digest(template.as_bytes()))
}

pub fn variables_hash(row: &Map<String, Value>) -> Result<String, String> {
    let canonical =
        serde_jcs::to_vec(row).map_err(|e| format!("row cannot be canonicalised: {e}"))?;
    Ok(hex::encode(Sha256::digest(&canonical)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variables_hash_ignores_key_order() {
        let a = json!({"a": 1, "b": "x"});
        let b = json!({"b": "x", "a": 1.0});
        assert_eq!(
            variables_hash(a.as_object().unwrap()).unwrap(),
            variables_hash(b.as_object().unwrap()).unwrap()
        );
        let c = json!({"a": 2, "b": "x"});
        assert_ne!(
            variables_hash(a.as_object().unwrap()).unwrap(),
            variables_hash(c.as_object().unwrap()).unwrap()
        );
    }

    #[test]
    fn template_hash_is_sha256_hex() {
        assert_eq!(
            template_hash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
