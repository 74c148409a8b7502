//! Bundles: several rows in one prompt, one JSON answer per row, matched by
//! the identifier each row was given in the prompt, never by position.

use crate::options::FieldType;
use crate::parse;
use serde_json::{Map, Value, json};

/// The identifier a row carries in a bundled prompt: its place in the batch
/// the host handed over (the same number the host audits the row under).
pub fn row_id(row: u32) -> String {
    format!("r{row}")
}

/// Wraps each row's own rendered prompt in a request for one JSON entry per row.
pub fn prompt(items: &[(u32, String)], outputs: &[(String, FieldType)]) -> String {
    let fields: Vec<String> = outputs
        .iter()
        .map(|(name, t)| format!("{name} ({})", t.in_a_prompt()))
        .collect();
    let mut text = format!(
        "Answer each of the {} items below on its own. Reply with only a JSON object \
         {{\"answers\": [...]}} holding exactly one entry per item: an object with the item's \
         \"id\" and the fields {}.\n\nItems:\n",
        items.len(),
        fields.join(", ")
    );
    for (row, input) in items {
        text.push_str(&json!({"id": row_id(*row), "input": input}).to_string());
        text.push('\n');
    }
    text
}

/// The schema of a bundled answer, for the `json_schema` response format.
pub fn schema(outputs: &[(String, FieldType)]) -> Value {
    let entry = parse::object_schema(outputs, Some(("id", json!({"type": "string"}))));
    json!({
        "type": "object",
        "properties": {"answers": {"type": "array", "items": entry}},
        "required": ["answers"],
        "additionalProperties": false,
    })
}

/// Why a bundled row has no answer of its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Miss {
    /// No entry carried the row's id.
    Missing,
    /// Several entries carried it: which one is meant cannot be known.
    Duplicated(usize),
    /// Its entry was there but its fields were wrong.
    Invalid(String),
}

/// One result per row, and the ids of entries no row was given.
pub type Split = (Vec<Result<Map<String, Value>, Miss>>, Vec<String>);

/// Splits a bundled answer into one result per row of `rows`, in that order.
/// Entries with ids no row was given are returned for the log.
pub fn split(
    answer: &Value,
    rows: &[u32],
    outputs: &[(String, FieldType)],
) -> Result<Split, String> {
    let entries = match answer {
        Value::Array(items) => items,
        Value::Object(o) => match o.get("answers") {
            Some(Value::Array(items)) => items,
            _ => return Err("the bundled answer has no \"answers\" list".into()),
        },
        _ => return Err("the bundled answer is not a JSON object or list".into()),
    };
    let ids: Vec<String> = rows.iter().map(|r| row_id(*r)).collect();
    let mut found: Vec<Vec<&Value>> = vec![Vec::new(); rows.len()];
    let mut unknown = Vec::new();
    for entry in entries {
        let id = match entry.get("id") {
            Some(Value::String(s)) => s.trim().to_string(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                unknown.push("(no id)".to_string());
                continue;
            }
        };
        match ids.iter().position(|known| *known == id) {
            Some(at) => found[at].push(entry),
            None => unknown.push(id),
        }
    }
    let results = found
        .into_iter()
        .map(|entries| match entries.as_slice() {
            [] => Err(Miss::Missing),
            [entry] => parse::map_outputs(entry, outputs).map_err(Miss::Invalid),
            several => Err(Miss::Duplicated(several.len())),
        })
        .collect();
    Ok((results, unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn outputs() -> Vec<(String, FieldType)> {
        vec![("n".to_string(), FieldType::Integer)]
    }

    #[test]
    fn entries_are_matched_by_id_whatever_their_order() {
        let answer = json!({"answers": [{"id": "r5", "n": 50}, {"id": "r3", "n": 30}]});
        let (results, unknown) = split(&answer, &[3, 5], &outputs()).unwrap();
        assert_eq!(results[0].as_ref().unwrap()["n"], 30);
        assert_eq!(results[1].as_ref().unwrap()["n"], 50);
        assert!(unknown.is_empty());
    }

    #[test]
    fn missing_duplicated_unknown_and_invalid_entries_fail_only_their_rows() {
        let answer = json!([
            {"id": "r1", "n": 1}, {"id": "r2", "n": 2}, {"id": "r2", "n": 3},
            {"id": "r9", "n": 9}, {"id": "r4", "n": "four"}
        ]);
        let (results, unknown) = split(&answer, &[1, 2, 3, 4], &outputs()).unwrap();
        assert_eq!(results[0].as_ref().unwrap()["n"], 1);
        assert_eq!(results[1], Err(Miss::Duplicated(2)));
        assert_eq!(results[2], Err(Miss::Missing));
        assert!(matches!(&results[3], Err(Miss::Invalid(e)) if e.contains("integer")));
        assert_eq!(unknown, vec!["r9"]);
    }

    #[test]
    fn the_prompt_names_every_row_by_its_id() {
        let text = prompt(&[(0, "a".into()), (7, "b".into())], &outputs());
        assert!(text.contains(r#"{"id":"r0","input":"a"}"#), "{text}");
        assert!(text.contains(r#"{"id":"r7","input":"b"}"#), "{text}");
        assert!(text.contains("n (integer)"), "{text}");
    }

    proptest! {
        /// Whatever a model does to the list — shuffle it, drop, repeat or
        /// invent entries — a row gets the value written for its own id or a
        /// miss, never another row's value.
        #[test]
        fn no_row_ever_gets_another_rows_answer(
            rows in proptest::collection::btree_set(0u32..200, 1..20),
            copies in proptest::collection::vec(0usize..3, 20),
            invented in proptest::collection::vec(200u32..400, 0..4),
            seed in any::<u64>(),
        ) {
            let rows: Vec<u32> = rows.into_iter().collect();
            let mut entries = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                for _ in 0..copies[i] {
                    entries.push(json!({"id": row_id(*row), "n": row * 10}));
                }
            }
            for row in &invented {
                entries.push(json!({"id": row_id(*row), "n": row * 10}));
            }
            // A deterministic shuffle from the seed.
            let len = entries.len();
            for i in (1..len).rev() {
                let j = (seed.wrapping_mul(i as u64 + 1).rotate_left(17) % (i as u64 + 1)) as usize;
                entries.swap(i, j);
            }
            let (results, unknown) = split(&Value::Array(entries), &rows, &outputs()).unwrap();
            prop_assert_eq!(results.len(), rows.len());
            for (i, row) in rows.iter().enumerate() {
                match (&results[i], copies[i]) {
                    (Ok(fields), 1) => prop_assert_eq!(&fields["n"], &json!(row * 10)),
                    (Err(Miss::Missing), 0) => {}
                    (Err(Miss::Duplicated(n)), c) => prop_assert_eq!(*n, c),
                    (other, c) => prop_assert!(false, "row {} with {} copies: {:?}", row, c, other),
                }
            }
            prop_assert_eq!(unknown.len(), invented.len());
        }
    }
}
