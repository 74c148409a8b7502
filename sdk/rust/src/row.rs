//! Rows as a transform sees them: JSON objects, and the error that fails one.

use serde_json::{Map, Value};

/// One row: a JSON object whose fields keep their order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row(pub Map<String, Value>);

impl Row {
    /// Parses a row as the host sends it.
    pub fn parse(text: &str) -> Result<Row, RowError> {
        match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Ok(Row(map)),
            Ok(other) => Err(RowError::new(
                "invalid_row",
                format!("the row is not a JSON object but {}", kind(&other)),
            )),
            Err(e) => Err(RowError::new(
                "invalid_row",
                format!("the row is not valid JSON: {e}"),
            )),
        }
    }

    pub fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field)
    }

    /// The text of `field`; a `missing_field` error names the field when it is
    /// absent or not a string.
    pub fn str_field(&self, field: &str) -> Result<&str, RowError> {
        match self.0.get(field) {
            Some(Value::String(text)) => Ok(text),
            Some(other) => Err(RowError::new(
                "missing_field",
                format!("field `{field}` is {}, not text", kind(other)),
            )),
            None => Err(RowError::new(
                "missing_field",
                format!("the row has no field `{field}`"),
            )),
        }
    }

    /// Sets `field`, keeping its place if it exists, else appending it.
    pub fn set(&mut self, field: &str, value: impl Into<Value>) {
        self.0.insert(field.to_string(), value.into());
    }

    pub fn to_json(&self) -> String {
        Value::Object(self.0.clone()).to_string()
    }

    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

impl TryFrom<Value> for Row {
    type Error = RowError;
    fn try_from(value: Value) -> Result<Self, RowError> {
        match value {
            Value::Object(map) => Ok(Row(map)),
            other => Err(RowError::new(
                "invalid_row",
                format!("a row must be a JSON object, not {}", kind(&other)),
            )),
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why one row failed at this node. `code` is stable and machine-readable
/// (users count and filter on it); `message` says what went wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    pub code: String,
    pub message: String,
}

impl RowError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_and_set_in_order() {
        let mut row = Row::parse(r#"{"id":1,"text":"hi"}"#).unwrap();
        assert_eq!(row.str_field("text").unwrap(), "hi");
        assert_eq!(row.str_field("id").unwrap_err().code, "missing_field");
        assert!(
            row.str_field("nope")
                .unwrap_err()
                .message
                .contains("`nope`")
        );
        row.set("out", "x");
        assert_eq!(row.to_json(), r#"{"id":1,"text":"hi","out":"x"}"#);
        assert_eq!(Row::parse("[1]").unwrap_err().code, "invalid_row");
    }
}
