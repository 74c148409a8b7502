//! The hashes the audit trail records: SHA-256, over RFC 8785 canonical JSON
//! where the input is JSON, so equal documents hash equal whatever their
//! key order or number spelling.

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};

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

/// `canonical_text` of a parsed JSON document, the same text written faster.
pub fn canonical_value_text(value: &serde_json::Value) -> String {
    crate::canonical::to_string(value).unwrap_or_else(|| canonical_text(value))
}

/// `canonical_text` of a row, the same text written faster.
pub fn canonical_row_text(row: &crate::types::Row) -> String {
    crate::canonical::object_to_string(row).unwrap_or_else(|| canonical_text(row))
}

/// Hashes JSON text canonically when it parses, or its raw bytes otherwise.
pub fn json_text_sha256(text: &str) -> String {
    parsed_json_sha256(serde_json::from_str(text).ok().as_ref(), text)
}

/// `json_text_sha256` of `text`, for a caller that parsed it already
/// (`parsed` is None when it is not JSON).
pub fn parsed_json_sha256(parsed: Option<&serde_json::Value>, text: &str) -> String {
    match parsed {
        Some(value) => sha256_hex(canonical_value_text(value)),
        None => sha256_hex(text),
    }
}

/// Identifies a secret (an API key) without storing anything that reveals it.
pub fn secret_fingerprint(secret: &str) -> String {
    let digest = Sha256::digest(format!("weir secret fingerprint\0{secret}"));
    hex::encode(&digest[..8])
}

/// The SHA-256 of a file's bytes, read in chunks.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut reader = HashingReader::new(std::fs::File::open(path)?);
    let hash = reader.hash();
    std::io::copy(&mut reader, &mut std::io::sink())?;
    Ok(hash.finished().map(|(_, hex)| hex).unwrap_or_default())
}

/// Hashes every byte read through it, so a file is hashed by the read that
/// parses it instead of a second pass over it.
pub struct HashingReader<R> {
    inner: R,
    hash: ContentHash,
}

impl<R> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            hash: ContentHash::default(),
        }
    }

    /// A handle on the hash, which outlives the reader it is taken from.
    pub fn hash(&self) -> ContentHash {
        self.hash.clone()
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Ok(mut state) = self.hash.0.lock() {
            if n == 0 && !buf.is_empty() {
                state.at_end = true;
            } else {
                state.hasher.update(&buf[..n]);
                state.bytes += n as u64;
            }
        }
        Ok(n)
    }
}

/// The hash of what a `HashingReader` has read. Shared with the reader, as
/// the reader itself ends up deep inside a row parser.
#[derive(Clone, Default)]
pub struct ContentHash(Arc<Mutex<HashState>>);

#[derive(Default)]
struct HashState {
    hasher: Sha256,
    bytes: u64,
    at_end: bool,
}

impl ContentHash {
    /// Bytes read and their SHA-256, once the reader reached the end of its
    /// input; none before, as the hash of a prefix identifies nothing.
    pub fn finished(&self) -> Option<(u64, String)> {
        let state = self.0.lock().ok()?;
        state
            .at_end
            .then(|| (state.bytes, hex::encode(state.hasher.clone().finalize())))
    }
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

    #[test]
    fn a_hashing_reader_hashes_what_it_read_once_it_reached_the_end() {
        let data = b"id,text\n1,a\n".repeat(1000);
        let mut reader = HashingReader::new(&data[..]);
        let hash = reader.hash();
        let mut first = [0u8; 100];
        reader.read_exact(&mut first).unwrap();
        assert_eq!(hash.finished(), None, "a prefix has no hash");
        std::io::copy(&mut reader, &mut std::io::sink()).unwrap();
        assert_eq!(
            hash.finished(),
            Some((data.len() as u64, sha256_hex(&data)))
        );
    }
}
