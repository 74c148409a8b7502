//! TEST TOOL, not a transform to use: a guest that misbehaves on purpose, so
//! tests can check that weir keeps a guest inside its box. Each row's `act`
//! field picks what happens to it:
//!
//! - `loop`: spins forever;
//! - `alloc`: allocates memory until something stops it;
//! - `panic`: panics (which aborts: a trap);
//! - `big`: comes back with a field of `size` bytes;
//! - anything else: comes back with `ok: true`.

use serde_json::{Map, Value};

#[cfg(target_arch = "wasm32")]
mod component;

/// The output row for `row` (JSON text), or an error message; `loop`,
/// `alloc` and `panic` never return.
pub fn act(row: &str) -> Result<String, String> {
    let mut row: Map<String, Value> =
        serde_json::from_str(row).map_err(|e| format!("the row is not a JSON object: {e}"))?;
    match row.get("act").and_then(Value::as_str).unwrap_or_default() {
        "loop" => spin(),
        "alloc" => hoard(),
        "panic" => panic!("asked to panic"),
        "big" => {
            let size = row.get("size").and_then(Value::as_u64).unwrap_or(1 << 20) as usize;
            row.insert("ok".into(), Value::String("x".repeat(size)));
        }
        _ => {
            row.insert("ok".into(), Value::Bool(true));
        }
    }
    Ok(Value::Object(row).to_string())
}

fn spin() -> ! {
    let mut i: u64 = 0;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

fn hoard() -> ! {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        held.push(std::hint::black_box(vec![1u8; 1 << 20]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_row_comes_back_marked() {
        assert_eq!(act(r#"{"id":1}"#).unwrap(), r#"{"id":1,"ok":true}"#);
        assert_eq!(
            act(r#"{"act":"big","size":3}"#).unwrap(),
            r#"{"act":"big","size":3,"ok":"xxx"}"#
        );
        assert!(act("[1]").is_err());
    }
}
