//! OpenAI chat-completions requests, and their answers turned into text or a
//! row error with a stable code. weir's `openai` and `azure-openai` endpoints
//! take these bodies; the host adds the URL and the key.

use crate::host::{CallError, Response, excerpt};
use crate::row::RowError;
use serde_json::{Map, Value, json};

/// A chat request. Only what is set is sent, so provider defaults apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chat {
    model: Option<String>,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    json_object: bool,
    messages: Vec<(String, String)>,
}

impl Chat {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn model(mut self, model: Option<&str>) -> Self {
        self.model = model.map(str::to_string);
        self
    }

    pub fn temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Asks for a JSON object answer (`response_format: json_object`).
    pub fn json_object(mut self) -> Self {
        self.json_object = true;
        self
    }

    pub fn system(self, content: impl Into<String>) -> Self {
        self.message("system", content)
    }

    pub fn user(self, content: impl Into<String>) -> Self {
        self.message("user", content)
    }

    pub fn message(mut self, role: &str, content: impl Into<String>) -> Self {
        self.messages.push((role.to_string(), content.into()));
        self
    }

    /// The request body as JSON text.
    pub fn body(&self) -> String {
        let mut body = Map::new();
        if let Some(model) = &self.model {
            body.insert("model".into(), json!(model));
        }
        let messages = self
            .messages
            .iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        body.insert("messages".into(), Value::Array(messages));
        if let Some(t) = self.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(m) = self.max_tokens {
            body.insert("max_tokens".into(), json!(m));
        }
        if self.json_object {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Value::Object(body).to_string()
    }
}

/// The model's text from the final result of a chat request. Failures get the
/// codes weir's built-in `llm` transform uses: `llm_call_failed`,
/// `retry_timeout`, `endpoint_denied`, `invalid_response`, `empty_response`,
/// `response_truncated`, `content_filtered`, `context_length_exceeded`.
pub fn answer(result: Result<Response, CallError>) -> Result<String, RowError> {
    match result {
        Ok(response) if (200..300).contains(&response.status) => content(&response.body),
        Ok(response) | Err(CallError::Status(response)) => Err(status_error(&response)),
        Err(CallError::DeadlineExceeded(m)) => Err(RowError::new("retry_timeout", m)),
        Err(CallError::Transport(m)) => Err(RowError::new("llm_call_failed", m)),
        Err(CallError::Denied(m)) => Err(RowError::new("endpoint_denied", m)),
    }
}

fn content(body: &str) -> Result<String, RowError> {
    let invalid = |what: String| RowError::new("invalid_response", what);
    let value: Value = serde_json::from_str(body)
        .map_err(|e| invalid(format!("the answer is not JSON ({e}): {}", excerpt(body))))?;
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| invalid(format!("the answer has no choices: {}", excerpt(body))))?;
    let text = choice
        .pointer("/message/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => Err(RowError::new(
            "response_truncated",
            format!("the answer was cut off at max_tokens: {}", excerpt(text)),
        )),
        Some("content_filter") => Err(RowError::new(
            "content_filtered",
            "the provider's content filter withheld the answer",
        )),
        _ if text.trim().is_empty() => Err(RowError::new(
            "empty_response",
            "the model answered with no text",
        )),
        _ => Ok(text.to_string()),
    }
}

/// Picks the row error code from the provider's error code, never its wording.
fn status_error(response: &Response) -> RowError {
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
    RowError::new(row_code, format!("HTTP {}: {message}", response.status))
}

/// An OpenAI-shaped successful answer carrying `content`, as a provider
/// would send it; for scripted hosts and fixtures.
pub fn reply_body(content: &str) -> String {
    json!({
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(status: u16, body: &str) -> Result<Response, CallError> {
        Ok(Response {
            status,
            body: body.into(),
            attempts: 1,
            latency_ms: 1,
        })
    }

    #[test]
    fn only_what_is_set_is_sent() {
        let body: Value = serde_json::from_str(&Chat::new().user("hi").body()).unwrap();
        assert_eq!(
            body,
            json!({"messages": [{"role": "user", "content": "hi"}]})
        );
        let body: Value = serde_json::from_str(
            &Chat::new()
                .model(Some("m"))
                .temperature(0.0)
                .max_tokens(3)
                .json_object()
                .system("s")
                .user("u")
                .body(),
        )
        .unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["max_tokens"], 3);
        assert_eq!(body["response_format"]["type"], "json_object");
    }

    #[test]
    fn answers_and_failures_get_their_codes() {
        assert_eq!(answer(ok(200, &reply_body("yes"))).unwrap(), "yes");
        let code = |r| answer(r).unwrap_err().code;
        assert_eq!(code(ok(200, "nope")), "invalid_response");
        assert_eq!(code(ok(200, &reply_body("  "))), "empty_response");
        assert_eq!(
            code(ok(
                200,
                r#"{"choices":[{"finish_reason":"length","message":{"content":"x"}}]}"#
            )),
            "response_truncated"
        );
        assert_eq!(
            code(ok(
                400,
                r#"{"error":{"code":"context_length_exceeded","message":"long"}}"#
            )),
            "context_length_exceeded"
        );
        let e = answer(ok(500, "oops")).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("llm_call_failed", "HTTP 500: oops")
        );
        assert_eq!(
            code(Err(CallError::DeadlineExceeded("t".into()))),
            "retry_timeout"
        );
        assert_eq!(code(Err(CallError::Denied("d".into()))), "endpoint_denied");
    }
}
