//! The hashes the audit trail records: SHA-256, over RFC 8785 canonical JSON
//! where the input is JSON, so equal documents hash equal whatever their
//! key order or number spelling.

use serde::Serialize;
use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes.as_ref()))
}

/// Falls back to hashing the serde_json text when the value has no canonical
/// form (JSON text from outside can hold numbers JCS refuses).
pub fn canonical_sha256<T: Serialize>(value: &T) -> String {
    sha256_hex(canonical_text(value))
}

/// The RFC 8785 text of `value`, or its serde_json text when it has none:
/// what `canonical_sha256` hashes, and what the audit keeps as its payload.
pub fn canonical_text<T: Serialize>(value: &T) -> String {
    serde_jcs::to_string(value)
        .or_else(|_| serde_json::to_string(value))
        .unwrap_or_default()
}

/// Hashes JSON text canonically when it parses, or its raw bytes otherwise.
pub fn json_text_sha256(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => canonical_sha256(&value),
        Err(_) => sha256_hex(text),
    }
}

/// Identifies a secret (an API key) without storing anything that reveals it.
pub fn secret_fingerprint(secret: &str) -> String {
    let digest = Sha256::digest(format!("weir secret fingerprint\0{secret}"));
    hex::encode(&digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_hash_ignores_key_order_and_spacing() {
        assert_eq!(
            json_text_sha256(r#"{"b": 1, "a": [1, 2]}"#),
            json_text_sha256(r#"{"a":[1,2],"b":1}"#)
        );
        assert_eq!(
            canonical_sha256(&json!({"a": 1})),
            json_text_sha256(r#"{"a":1}"#)
        );
        assert_ne!(
            json_text_sha256(r#"{"a":1}"#),
            json_text_sha256(r#"{"a":2}"#)
        );
    }

    #[test]
    fn fingerprint_does_not_contain_the_secret() {
        let f = secret_fingerprint("sk-canary-123");
        assert_eq!(f.len(), 16);
        assert!(!f.contains("canary"));
        assert_ne!(f, secret_fingerprint("sk-canary-124"));
    }
}
