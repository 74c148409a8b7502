//! OpenAI chat-completions bodies for the `llm` node's queries; answers are
//! read by `weir_sdk::chat::interpret`.

use crate::format::Asked;
use crate::options::{LlmOptions, Query};
use crate::prompt::Rendered;
use serde_json::{Value, json};

/// Builds the request body. Only options the user set are sent, so provider
/// defaults apply otherwise. `schema` is the JSON Schema the answer must
/// follow when `asked` is `json_schema`; `follow_up` are (role, content)
/// messages after the prompt's own.
pub fn request_body(
    options: &LlmOptions,
    query: &Query,
    prompt: &Rendered,
    asked: Asked,
    schema: impl FnOnce() -> Value,
    follow_up: &[(&str, String)],
) -> String {
    let mut messages = Vec::with_capacity(2 + follow_up.len());
    if let Some(system) = &prompt.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": prompt.user}));
    for (role, content) in follow_up {
        messages.push(json!({"role": role, "content": content}));
    }
    let mut body = serde_json::Map::new();
    if let Some(model) = &options.model {
        body.insert("model".into(), json!(model));
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(t) = options.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(m) = query.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    match asked {
        Asked::Nothing => {}
        Asked::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Asked::JsonSchema => {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema",
                       "json_schema": {"name": schema_name(&query.name), "strict": options.strict,
                                       "schema": schema()}}),
            );
        }
    }
    crate::params::merge(&mut body, &options.params);
    Value::Object(body).to_string()
}

/// Providers accept `[a-zA-Z0-9_-]{1,64}` as a schema name.
fn schema_name(query: &str) -> String {
    let name: String = query
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "answer".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LlmOptions {
        LlmOptions::from_json(r#"{"template":"t","model":"gpt-x","temperature":0,"max_tokens":5}"#)
            .unwrap()
    }

    fn body_of(options: &LlmOptions, prompt: &Rendered) -> Value {
        let query = &options.queries().unwrap()[0];
        let asked = Asked::for_format(query.response_format, false);
        serde_json::from_str(&request_body(
            options,
            query,
            prompt,
            asked,
            || json!({}),
            &[],
        ))
        .unwrap()
    }

    #[test]
    fn body_carries_only_what_is_set() {
        let prompt = Rendered {
            system: Some("sys".into()),
            user: "hello".into(),
        };
        let body = body_of(&options(), &prompt);
        assert_eq!(
            body,
            json!({"model":"gpt-x","messages":[{"role":"system","content":"sys"},
                   {"role":"user","content":"hello"}],"temperature":0.0,"max_tokens":5})
        );
        let bare = LlmOptions::from_json(r#"{"template":"t"}"#).unwrap();
        let prompt = Rendered {
            system: None,
            user: "u".into(),
        };
        assert_eq!(
            body_of(&bare, &prompt),
            json!({"messages":[{"role":"user","content":"u"}]})
        );
    }

    #[test]
    fn json_formats_are_requested() {
        let prompt = Rendered {
            system: None,
            user: "u".into(),
        };
        let object = LlmOptions::from_json(
            r#"{"template":"t","outputs":{"a":"string"},"response_format":"json_object"}"#,
        )
        .unwrap();
        assert_eq!(
            body_of(&object, &prompt)["response_format"],
            json!({"type": "json_object"})
        );
        let schema = LlmOptions::from_json(
            r#"{"template":"t","outputs":{"a":"string"},"response_format":"json_schema",
                "response_field":"my answer"}"#,
        )
        .unwrap();
        let format = &body_of(&schema, &prompt)["response_format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["name"], "my_answer");
        assert_eq!(format["json_schema"]["strict"], true);
        let loose =
            LlmOptions::from_json(r#"{"template":"t","outputs":{"a":"string"},"strict":false}"#)
                .unwrap();
        let format = &body_of(&loose, &prompt)["response_format"];
        assert_eq!(
            format["type"], "json_schema",
            "auto asks for a schema first"
        );
        assert_eq!(format["json_schema"]["strict"], false);
    }
}
