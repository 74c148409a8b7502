//! The output contract a request carries: the `response_format` it asks
//! for, the instruction a prompt gets where no schema holds the model to the
//! outputs, and how a server that cannot do `json_schema` says so.

use crate::options::{FieldType, ResponseFormat};
use serde_json::Value;
use weir_sdk::host::{CallError, Response};

/// What one request asks of the answer's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    Nothing,
    JsonObject,
    JsonSchema,
}

impl Asked {
    /// `schema_refused`: the endpoint has refused `json_schema` this run.
    pub fn for_format(format: ResponseFormat, schema_refused: bool) -> Self {
        match format {
            ResponseFormat::None => Asked::Nothing,
            ResponseFormat::JsonObject => Asked::JsonObject,
            ResponseFormat::JsonSchema => Asked::JsonSchema,
            ResponseFormat::Auto if schema_refused => Asked::JsonObject,
            ResponseFormat::Auto => Asked::JsonSchema,
        }
    }
}

/// Appended to the user message where no schema is enforced: the fields by
/// name and type for the model to read, the schema itself, which states them
/// exactly, and last the object's shape with its keys. Small models copy the
/// schema back instead of answering unless the last thing they read is the
/// shape to fill in (SmolLM2-135M: 0 of 20 answers usable without that line,
/// 20 of 20 with it). `json_object` also needs the word JSON in the messages.
pub fn instruction(outputs: &[(String, FieldType)], schema: &Value) -> String {
    let mut text =
        String::from("\n\nAnswer with only a JSON object, no other text, with these fields:\n");
    for (name, field_type) in outputs {
        text.push_str(&format!("- {name}: {}\n", field_type.in_a_prompt()));
    }
    text.push_str(&format!("JSON Schema: {schema}\n"));
    let keys: Vec<String> = outputs
        .iter()
        .map(|(name, _)| format!("{}: ...", Value::from(name.as_str())))
        .collect();
    text.push_str(&format!(
        "The object looks like this: {{{}}}",
        keys.join(", ")
    ));
    text
}

/// Whether a request's failure is the endpoint refusing `json_schema`:
/// llama.cpp's server answers 500 (the host does not retry that before the
/// endpoint has accepted a schema, hence a single attempt), and
/// OpenAI-compatible servers answer 400 or 422 naming the response format.
pub fn refuses_schema(result: &Result<Response, CallError>) -> bool {
    let Err(CallError::Status(response)) = result else {
        return false;
    };
    match response.status {
        500 => response.attempts <= 1,
        400 | 422 => {
            let body = response.body.to_ascii_lowercase();
            body.contains("response_format") || body.contains("json_schema")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::object_schema;

    fn refusal(status: u16, attempts: u32, body: &str) -> Result<Response, CallError> {
        Err(CallError::Status(Response {
            status,
            body: body.into(),
            attempts,
            latency_ms: 1,
        }))
    }

    #[test]
    fn auto_asks_for_a_schema_until_the_endpoint_refuses_one() {
        assert_eq!(
            Asked::for_format(ResponseFormat::Auto, false),
            Asked::JsonSchema
        );
        assert_eq!(
            Asked::for_format(ResponseFormat::Auto, true),
            Asked::JsonObject
        );
        assert_eq!(
            Asked::for_format(ResponseFormat::JsonSchema, true),
            Asked::JsonSchema
        );
        assert_eq!(
            Asked::for_format(ResponseFormat::None, false),
            Asked::Nothing
        );
    }

    #[test]
    fn the_instruction_names_every_field_and_its_type() {
        let outputs = vec![
            (
                "label".to_string(),
                FieldType::Enum(vec!["a".into(), "b".into()]),
            ),
            ("score".to_string(), FieldType::Integer),
        ];
        let text = instruction(&outputs, &object_schema(&outputs, None));
        assert!(text.contains("JSON object"), "{text}");
        assert!(
            text.contains("- label: one of: a, b\n- score: integer\n"),
            "{text}"
        );
        assert!(text.contains(r#"JSON Schema: {"type":"object""#), "{text}");
        assert!(
            text.ends_with(r#"The object looks like this: {"label": ..., "score": ...}"#),
            "{text}"
        );
    }

    #[test]
    fn refusals_are_told_from_other_failures() {
        assert!(refuses_schema(&refusal(500, 1, "{}")));
        assert!(
            !refuses_schema(&refusal(500, 4, "{}")),
            "an outage, retried"
        );
        assert!(refuses_schema(&refusal(
            400,
            1,
            r#"{"error":{"message":"Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."}}"#
        )));
        assert!(!refuses_schema(&refusal(
            400,
            1,
            r#"{"error":{"message":"bad"}}"#
        )));
        assert!(!refuses_schema(&Err(CallError::Transport("reset".into()))));
    }
}
