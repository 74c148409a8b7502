//! Structured answers: check the JSON a model wrote against the declared
//! output fields.

use crate::options::FieldType;
use serde_json::{Map, Value};

/// Takes the declared fields from a JSON object, typed; every problem is
/// listed, so one error names all that is wrong with an answer.
pub fn map_outputs(
    value: &Value,
    outputs: &[(String, FieldType)],
) -> Result<Map<String, Value>, String> {
    let Some(object) = value.as_object() else {
        return Err(format!("expected a JSON object, got {}", kind(value)));
    };
    let mut mapped = Map::new();
    let mut problems = Vec::new();
    for (field, field_type) in outputs {
        match object.get(field) {
            None | Some(Value::Null) => problems.push(format!("`{field}` is missing")),
            Some(v) => match typed(v, field_type) {
                Ok(v) => {
                    mapped.insert(field.clone(), v);
                }
                Err(e) => problems.push(format!("`{field}` {e}")),
            },
        }
    }
    if problems.is_empty() {
        Ok(mapped)
    } else {
        Err(problems.join("; "))
    }
}

fn typed(value: &Value, field_type: &FieldType) -> Result<Value, String> {
    let wrong = || {
        Err(format!(
            "should be {}, got {}",
            describe(field_type),
            kind(value)
        ))
    };
    match field_type {
        FieldType::String => match value {
            Value::String(_) => Ok(value.clone()),
            _ => wrong(),
        },
        FieldType::Number => match value {
            Value::Number(_) => Ok(value.clone()),
            _ => wrong(),
        },
        FieldType::Integer => match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(value.clone()),
            // 4.0 is an integer a model wrote with a decimal point.
            Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                Ok(Value::from(n.as_f64().unwrap_or_default() as i64))
            }
            _ => wrong(),
        },
        FieldType::Boolean => match value {
            Value::Bool(_) => Ok(value.clone()),
            _ => wrong(),
        },
        FieldType::Enum(allowed) => match value.as_str() {
            // Case is forgiven; the declared spelling is what is written.
            Some(text) => allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(text.trim()))
                .map(|a| Value::String(a.clone()))
                .ok_or_else(|| format!("is `{text}`, not one of {}", allowed.join(", "))),
            None => wrong(),
        },
    }
}

fn describe(field_type: &FieldType) -> String {
    match field_type {
        FieldType::String => "a string".into(),
        FieldType::Integer => "an integer".into(),
        FieldType::Number => "a number".into(),
        FieldType::Boolean => "true or false".into(),
        FieldType::Enum(values) => format!("one of {}", values.join(", ")),
    }
}

fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > 40 => "a long string".into(),
        Value::String(s) => format!("\"{s}\""),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The JSON Schema of an object with exactly these fields, for providers'
/// `json_schema` response format (strict mode wants every field required
/// and no others).
pub fn object_schema(outputs: &[(String, FieldType)], extra: Option<(&str, Value)>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    if let Some((name, schema)) = extra {
        properties.insert(name.to_string(), schema);
        required.push(Value::String(name.to_string()));
    }
    for (field, field_type) in outputs {
        let schema = match field_type {
            FieldType::String => serde_json::json!({"type": "string"}),
            FieldType::Integer => serde_json::json!({"type": "integer"}),
            FieldType::Number => serde_json::json!({"type": "number"}),
            FieldType::Boolean => serde_json::json!({"type": "boolean"}),
            FieldType::Enum(values) => serde_json::json!({"type": "string", "enum": values}),
        };
        properties.insert(field.clone(), schema);
        required.push(Value::String(field.clone()));
    }
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outputs() -> Vec<(String, FieldType)> {
        vec![
            (
                "label".into(),
                FieldType::Enum(vec!["positive".into(), "negative".into()]),
            ),
            ("score".into(), FieldType::Integer),
            ("ratio".into(), FieldType::Number),
            ("urgent".into(), FieldType::Boolean),
            ("reason".into(), FieldType::String),
        ]
    }

    #[test]
    fn declared_fields_are_typed_and_enums_take_their_declared_spelling() {
        let v = json!({"label": "Positive", "score": 4.0, "ratio": 0.5, "urgent": false,
                       "reason": "ok", "extra": 1});
        let mapped = map_outputs(&v, &outputs()).unwrap();
        assert_eq!(
            Value::Object(mapped),
            json!({"label": "positive", "score": 4, "ratio": 0.5, "urgent": false, "reason": "ok"})
        );
    }

    #[test]
    fn every_problem_is_named() {
        let v = json!({"label": "meh", "score": 4.5, "ratio": "half", "urgent": "yes"});
        let err = map_outputs(&v, &outputs()).unwrap_err();
        for part in [
            "`label` is `meh`, not one of positive, negative",
            "`score` should be an integer, got 4.5",
            "`ratio` should be a number",
            "`urgent` should be true or false",
            "`reason` is missing",
        ] {
            assert!(err.contains(part), "{part} not in {err}");
        }
        assert!(
            map_outputs(&json!([1]), &outputs())
                .unwrap_err()
                .contains("an array")
        );
    }

    #[test]
    fn schema_requires_every_field() {
        let schema = object_schema(&outputs()[..2], None);
        assert_eq!(schema["required"], json!(["label", "score"]));
        assert_eq!(
            schema["properties"]["label"]["enum"],
            json!(["positive", "negative"])
        );
        assert_eq!(schema["additionalProperties"], json!(false));
    }
}
