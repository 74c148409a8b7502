//! OpenAI chat-completions bodies: what is sent, and how an answer or a failure
//! becomes row fields or a row error with a stable code.

use crate::host::{CallError, Response};
use crate::options::{LlmOptions, Query, ResponseFormat};
use crate::prompt::Rendered;
use serde_json::{Value, json};

/// Builds the request body. Only options the user set are sent, so provider
/// defaults apply otherwise. `schema` is the JSON Schema the answer must
/// follow when the query asks for `json_schema`.
pub fn request_body(
    options: &LlmOptions,
    query: &Query,
    prompt: &Rendered,
    schema: impl FnOnce() -> Value,
) -> String {
    let mut messages = Vec::with_capacity(2);
    if let Some(system) = &prompt.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": prompt.user}));
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
    match query.response_format {
        ResponseFormat::Text => {}
        ResponseFormat::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ResponseFormat::JsonSchema => {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema",
                       "json_schema": {"name": schema_name(&query.name), "strict": true,
                                       "schema": schema()}}),
            );
        }
    }
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

/// A successful answer, reduced to what goes onto the row.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub content: String,
    pub usage: Value,
    pub model: Value,
}

/// A failure that becomes a row error.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Interprets the executor's result for one request.
pub fn interpret(result: Result<Response, CallError>) -> Result<Answer, Failure> {
    match result {
        Ok(response) if (200..300).contains(&response.status) => parse_answer(&response.body),
        Ok(response) | Err(CallError::Status(response)) => Err(status_failure(&response)),
        Err(CallError::DeadlineExceeded(m)) => Err(Failure::new("retry_timeout", m)),
        Err(CallError::Transport(m)) => Err(Failure::new("llm_call_failed", m)),
        Err(CallError::Denied(m)) => Err(Failure::new("endpoint_denied", m)),
    }
}

fn parse_answer(body: &str) -> Result<Answer, Failure> {
    let value: Value = serde_json::from_str(body).map_err(|e| {
        Failure::new(
            "invalid_response",
            format!("the endpoint's answer is not JSON ({e}): {}", excerpt(body)),
        )
    })?;
    let choice = value.get("choices").and_then(|c| c.get(0)).ok_or_else(|| {
        Failure::new(
            "invalid_response",
            format!("the answer has no choices: {}", excerpt(body)),
        )
    })?;
    let content = choice
        .pointer("/message/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => {
            return Err(Failure::new(
                "response_truncated",
                format!(
                    "the answer was cut off at max_tokens; raise max_tokens. Partial answer: {}",
                    excerpt(content)
                ),
            ));
        }
        Some("content_filter") => {
            return Err(Failure::new(
                "content_filtered",
                "the provider's content filter withheld the answer",
            ));
        }
        _ => {}
    }
    if content.trim().is_empty() {
        return Err(Failure::new(
            "empty_response",
            "the model answered with no text",
        ));
    }
    Ok(Answer {
        content: content.to_string(),
        usage: value.get("usage").cloned().unwrap_or(Value::Null),
        model: value.get("model").cloned().unwrap_or(Value::Null),
    })
}

/// Uses the provider's error code, never its wording, to pick the row error code.
fn status_failure(response: &Response) -> Failure {
    let parsed: Option<Value> = serde_json::from_str(&response.body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let code = error
        .and_then(|e| e.get("code"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| excerpt(&response.body));
    let row_code = match code {
        "context_length_exceeded" => "context_length_exceeded",
        "content_filter" | "content_policy_violation" => "content_filtered",
        _ => "llm_call_failed",
    };
    let attempts = match response.attempts {
        1 => String::new(),
        n => format!(" after {n} attempts"),
    };
    Failure::new(
        row_code,
        format!("HTTP {}{attempts}: {message}", response.status),
    )
}

/// Keeps error messages readable when a body is huge (an HTML error page, say).
fn excerpt(text: &str) -> String {
    const LIMIT: usize = 300;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(status: u16, body: &str) -> Result<Response, CallError> {
        Ok(Response {
            status,
            body: body.into(),
            attempts: 1,
            latency_ms: 5,
        })
    }

    fn options() -> LlmOptions {
        LlmOptions::from_json(r#"{"template":"t","model":"gpt-x","temperature":0,"max_tokens":5}"#)
            .unwrap()
    }

    fn body_of(options: &LlmOptions, prompt: &Rendered) -> Value {
        let query = &options.queries().unwrap()[0];
        serde_json::from_str(&request_body(options, query, prompt, || json!({}))).unwrap()
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
    }

    #[test]
    fn answer_is_extracted_with_usage_and_model() {
        let a = interpret(ok(
            200,
            r#"{"model":"m1","choices":[{"message":{"content":"positive"},"finish_reason":"stop"}],
               "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#,
        ))
        .unwrap();
        assert_eq!(a.content, "positive");
        assert_eq!(a.model, json!("m1"));
        assert_eq!(a.usage["total_tokens"], json!(4));
    }

    #[test]
    fn truncated_filtered_and_empty_answers_are_row_errors() {
        let truncated = r#"{"choices":[{"message":{"content":"posi"},"finish_reason":"length"}]}"#;
        assert_eq!(
            interpret(ok(200, truncated)).unwrap_err().code,
            "response_truncated"
        );
        let filtered =
            r#"{"choices":[{"message":{"content":null},"finish_reason":"content_filter"}]}"#;
        assert_eq!(
            interpret(ok(200, filtered)).unwrap_err().code,
            "content_filtered"
        );
        let empty = r#"{"choices":[{"message":{"content":"  "},"finish_reason":"stop"}]}"#;
        assert_eq!(
            interpret(ok(200, empty)).unwrap_err().code,
            "empty_response"
        );
        assert_eq!(
            interpret(ok(200, "<html>oops</html>")).unwrap_err().code,
            "invalid_response"
        );
        assert_eq!(
            interpret(ok(200, r#"{"choices":[]}"#)).unwrap_err().code,
            "invalid_response"
        );
    }

    #[test]
    fn provider_error_codes_pick_the_row_error_code() {
        let ctx = r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#;
        let f = interpret(Err(CallError::Status(Response {
            status: 400,
            body: ctx.into(),
            attempts: 1,
            latency_ms: 1,
        })))
        .unwrap_err();
        assert_eq!(f.code, "context_length_exceeded");
        assert_eq!(f.message, "HTTP 400: too long");

        let f = interpret(Err(CallError::Status(Response {
            status: 500,
            body: "<html>Bad gateway</html>".into(),
            attempts: 4,
            latency_ms: 1,
        })))
        .unwrap_err();
        assert_eq!(f.code, "llm_call_failed");
        assert_eq!(
            f.message,
            "HTTP 500 after 4 attempts: <html>Bad gateway</html>"
        );
    }

    #[test]
    fn executor_failures_map_to_codes() {
        let f = interpret(Err(CallError::DeadlineExceeded("429 for 300 s".into()))).unwrap_err();
        assert_eq!(f.code, "retry_timeout");
        let f = interpret(Err(CallError::Transport("connection refused".into()))).unwrap_err();
        assert_eq!(f.code, "llm_call_failed");
        let f = interpret(Err(CallError::Denied("no endpoint `x`".into()))).unwrap_err();
        assert_eq!(f.code, "endpoint_denied");
    }
}
