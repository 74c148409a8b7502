//! The RFC 8785 (JCS) text of a parsed JSON document, written in one pass.
//!
//! The audit trail hashes every request and answer body canonically, and the
//! response cache keys on the same hash, so this runs several times per row.
//! `serde_jcs` serializes any `Serialize` type, and to do so it re-parses
//! every object key and buffers every member in a map of its own; for a
//! document already parsed into a `Value` that costs several times the
//! writing. This module writes the same bytes (a test compares the two on
//! documents that exercise each rule) and leaves number formatting to the
//! crate JCS names for it, `ryu-js`.

use serde_json::{Map, Value};

/// The canonical text of `value`; `None` when JCS gives it none (a number
/// that is not a finite double), for the caller's own fallback.
pub fn to_string(value: &Value) -> Option<String> {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out)?;
    into_text(out)
}

/// The canonical text of a JSON object, such as a source row.
pub fn object_to_string(members: &Map<String, Value>) -> Option<String> {
    let mut out = Vec::with_capacity(256);
    write_object(members, &mut out)?;
    into_text(out)
}

fn into_text(out: Vec<u8>) -> Option<String> {
    // Only whole UTF-8 strings, ASCII punctuation and digits were written.
    String::from_utf8(out).ok()
}

/// Appends the canonical text of `value` to `out`.
fn write(value: &Value, out: &mut Vec<u8>) -> Option<()> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // JCS numbers are IEEE-754 doubles in ECMAScript's shortest form,
        // integers included: 2^53 + 1 is written as 9007199254740992.
        Value::Number(number) => {
            let double = number.as_f64().filter(|d| d.is_finite())?;
            out.extend_from_slice(ryu_js::Buffer::new().format_finite(double).as_bytes());
        }
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(members) => write_object(members, out)?,
    }
    Some(())
}

fn write_object(members: &Map<String, Value>, out: &mut Vec<u8>) -> Option<()> {
    // Members in the order of their names' UTF-16 code units.
    let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    out.push(b'{');
    for (i, (name, member)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(name, out);
        out.push(b':');
        write(member, out)?;
    }
    out.push(b'}');
    Some(())
}

/// JCS escapes exactly what serde_json's compact writer does: the quote,
/// the backslash and the control characters, with `\b \f \n \r \t` short and
/// the rest as `\u00xx` in lowercase hex; everything else is kept as UTF-8.
fn write_string(text: &str, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same_as_serde_jcs(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            to_string(&value).unwrap(),
            serde_jcs::to_string(&value).unwrap(),
            "for {text}"
        );
    }

    #[test]
    fn writes_what_serde_jcs_writes() {
        for text in [
            r#"{"b":1,"a":[true,false,null],"c":{"z":"","y":{}}}"#,
            r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Rate: \"great\"\n\ttab\u0001\u001f\u007f"}],"temperature":0.7}"#,
            // Numbers: integers beyond 2^53, exponents, negative zero,
            // fractions ECMAScript writes without an exponent or with one.
            r#"[0,-0,1,-1,9007199254740993,18446744073709551615,-9223372036854775808,1e21,1e20,1.5e-7,0.000001,123.456,5e-324,1.7976931348623157e308,100,1E2,0.1]"#,
            // Names ordered by UTF-16: U+1F600 (a surrogate pair) sorts
            // before U+FB01, unlike in UTF-8.
            r#"{"\ufb01":1,"\ud83d\ude00":2,"a":3,"é":4,"":5,"A":6,"aa":7}"#,
            r#"{"\u20ac":"€","\u2028":"\u2028","slash":"a/b","back":"\\"}"#,
            r#"[[],{},[{}],"",[[[1]]]]"#,
            r#""just a string""#,
            "null",
        ] {
            same_as_serde_jcs(text);
        }
    }

    /// Documents built from a fixed-seed generator: nested arrays and
    /// objects, names and strings from characters JCS treats differently
    /// (controls, quotes, non-BMP, the BMP above the surrogates), numbers
    /// of every magnitude.
    #[test]
    fn generated_documents_match_serde_jcs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const CHARS: &[char] = &[
            'a',
            'B',
            'z',
            '0',
            ' ',
            '"',
            '\\',
            '/',
            '\n',
            '\t',
            '\u{1}',
            '\u{1f}',
            '\u{7f}',
            'é',
            '€',
            '\u{2028}',
            '\u{e000}',
            '\u{fb01}',
            '\u{ffff}',
            '😀',
            '\u{10ffff}',
        ];
        fn text(next: &mut impl FnMut() -> u64) -> String {
            (0..next() % 6)
                .map(|_| CHARS[(next() % CHARS.len() as u64) as usize])
                .collect()
        }
        fn value(next: &mut impl FnMut() -> u64, depth: u32) -> Value {
            match next() % if depth > 3 { 5 } else { 7 } {
                0 => Value::Null,
                1 => Value::Bool(next().is_multiple_of(2)),
                2 => json!(next() as i64 >> (next() % 64)),
                3 => json!(f64::from_bits(next()) % 1e30),
                4 => Value::String(text(next)),
                5 => Value::Array((0..next() % 4).map(|_| value(next, depth + 1)).collect()),
                _ => Value::Object(
                    (0..next() % 5)
                        .map(|_| (text(next), value(next, depth + 1)))
                        .collect(),
                ),
            }
        }
        for _ in 0..2000 {
            let document = value(&mut next, 0);
            if let Value::Object(members) = &document {
                assert_eq!(
                    object_to_string(members),
                    serde_jcs::to_string(members).ok()
                );
            }
            assert_eq!(
                to_string(&document),
                serde_jcs::to_string(&document).ok(),
                "for {document}"
            );
        }
    }

    #[test]
    fn key_order_and_spacing_do_not_change_the_text() {
        let a = json!({"x": [1, 2], "y": {"b": 2, "a": 1}});
        let b: Value =
            serde_json::from_str(r#"{ "y" : { "a" : 1, "b" : 2 }, "x" : [ 1, 2 ] }"#).unwrap();
        assert_eq!(to_string(&a), to_string(&b));
        assert_eq!(to_string(&a).unwrap(), r#"{"x":[1,2],"y":{"a":1,"b":2}}"#);
    }
}
