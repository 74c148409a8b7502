//! Structured answers (TEST TOOL): JSON that follows the request's
//! `json_schema`, every value derived from the text it answers, so a test can
//! tell whether a row received its own answer.

use crate::{Script, mix};
use serde_json::{Map, Value, json};

/// The value a field of this schema gets for `input`: strings echo it,
/// numbers count its characters, enums and booleans pick by that count.
pub fn derived_value(schema: &Value, input: &str) -> Value {
    let n = input.chars().count();
    if let Some(values) = schema["enum"].as_array() {
        return values[n % values.len().max(1)].clone();
    }
    match schema["type"].as_str() {
        Some("integer") => json!(n),
        Some("number") => json!(n as f64 / 2.0),
        Some("boolean") => json!(n.is_multiple_of(2)),
        _ => json!(format!("echo: {input}")),
    }
}

/// The answer text for a request with a `json_schema` response format, or
/// whose prompt ends with an instruction paragraph holding a
/// `JSON Schema: {…}` line (followed as a model would: the values are
/// derived from the message before that paragraph, whichever way the
/// schema came); a bundle's items are
/// read from its prompt's `{"id": …, "input": …}` lines.
pub fn answer(script: &Script, body: &Value, user_message: &str, sequence: u64) -> String {
    let (schema, input) = match &body["response_format"]["json_schema"]["schema"] {
        Value::Null => match schema_in_prompt(user_message) {
            Some(found) => found,
            None => return crate::expected_answer(crate::Reply::Structured, user_message),
        },
        // A model answers the question, not the instruction after it.
        schema => match schema_in_prompt(user_message) {
            Some((_, question)) => (schema.clone(), question),
            None => (schema.clone(), user_message),
        },
    };
    let value = match schema["properties"].get("answers") {
        Some(answers) => bundle(script, &answers["items"], input, sequence),
        None => Value::Object(object(script, &schema, input, sequence)),
    };
    let text = value.to_string();
    if script.decorate {
        format!("Here is the JSON you asked for:\n```json\n{text}\n```\nAnything else?")
    } else {
        text
    }
}

/// The schema a prompt's last paragraph states on a `JSON Schema: ` line,
/// and the message before that paragraph.
pub fn schema_in_prompt(message: &str) -> Option<(Value, &str)> {
    const LABEL: &str = "JSON Schema: ";
    let at = message.rfind(LABEL)?;
    let line = message[at + LABEL.len()..].lines().next()?;
    let schema: Value = serde_json::from_str(line).ok()?;
    let paragraph = message[..at].rfind("\n\n").unwrap_or(0);
    Some((schema, &message[..paragraph]))
}

fn object(script: &Script, schema: &Value, input: &str, salt: u64) -> Map<String, Value> {
    let mut out = Map::new();
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let broken = roll(salt, 1) < script.invalid_rate;
    for (i, (field, field_schema)) in properties.iter().enumerate() {
        if field == "id" {
            continue;
        }
        let value = derived_value(field_schema, input);
        // The first field of a broken answer gets a value of the wrong type.
        let value = match (broken && i == 0, value) {
            (true, Value::String(_)) => json!(12345),
            (true, _) => json!("not the declared type"),
            (false, v) => v,
        };
        out.insert(field.clone(), value);
    }
    out
}

fn bundle(script: &Script, item_schema: &Value, prompt: &str, sequence: u64) -> Value {
    let items: Vec<(String, String)> = prompt
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| {
            Some((
                v["id"].as_str()?.to_string(),
                v["input"].as_str()?.to_string(),
            ))
        })
        .collect();
    let mut entries = Vec::new();
    for (k, (id, input)) in items.iter().enumerate() {
        let salt = sequence.wrapping_mul(1000).wrapping_add(k as u64);
        let mut entry = object(script, item_schema, input, salt);
        entry.insert("id".into(), json!(id));
        if roll(salt, 2) < script.bundle_fault_rate {
            match mix(salt) % 3 {
                0 => {}
                1 => {
                    entries.push(Value::Object(entry.clone()));
                    entries.push(Value::Object(entry));
                }
                _ => {
                    entry.insert("id".into(), json!(format!("{id}-unknown")));
                    entries.push(Value::Object(entry));
                }
            }
            continue;
        }
        entries.push(Value::Object(entry));
    }
    // Models do not keep the order: answer in reverse, rotated by the sequence.
    entries.reverse();
    if !entries.is_empty() {
        let by = (sequence as usize) % entries.len();
        entries.rotate_left(by);
    }
    json!({ "answers": entries })
}

/// A number in [0, 1) from the salt, the same on every run.
fn roll(salt: u64, stream: u64) -> f64 {
    (mix(salt.wrapping_mul(31).wrapping_add(stream)) >> 11) as f64 / (1u64 << 53) as f64
}
