//! OpenAI chat-completions requests, and their answers turned into text or a
//! row error with a stable code. weir's `openai` and `azure-openai` endpoints
//! take these bodies; the host adds the URL and the key.

use crate::host::{CallError, ChatAnswer, ChatError, ChatRequest, Message, Response, excerpt};
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
    /// Other body parameters, sent as given.
    extra: Map<String, Value>,
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

    /// Any other body parameter (`top_p`, `seed`, `stop`, ...), sent as
    /// given; the typed fields above are written over one of the same name.
    pub fn param(mut self, name: &str, value: Value) -> Self {
        self.extra.insert(name.to_string(), value);
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

    /// The typed request to `endpoint` for row `row`, for [`crate::Host::complete`].
    pub fn request(&self, endpoint: &str, row: u32) -> ChatRequest {
        ChatRequest {
            endpoint: endpoint.to_string(),
            row,
            messages: self
                .messages
                .iter()
                .map(|(role, content)| Message {
                    role: role.clone(),
                    content: content.clone(),
                })
                .collect(),
            model: self.model.clone(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            response_format: self
                .json_object
                .then(|| json!({"type": "json_object"}).to_string()),
            extra: (!self.extra.is_empty()).then(|| Value::Object(self.extra.clone()).to_string()),
        }
    }

    /// The request body as JSON text, for [`crate::Host::send`].
    pub fn body(&self) -> String {
        let mut body = self.extra.clone();
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

/// A successful answer: the model's text, and the usage and model the
/// provider reported (`null` when it did not).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub content: String,
    pub usage: Value,
    pub model: Value,
    /// The answer reached `max_tokens` (`finish_reason: length`): what is
    /// there is the start of what the model would have said.
    pub truncated: bool,
}

/// The model's whole text from the final result of a chat request; an
/// answer cut at `max_tokens` is `response_truncated`. See [`interpret`].
pub fn answer(result: Result<Response, CallError>) -> Result<String, RowError> {
    let answer = interpret(result)?;
    if answer.truncated {
        return Err(truncated(&answer.content));
    }
    Ok(answer.content)
}

/// The model's whole text from the result of a typed chat request, with the
/// row errors of [`answer`].
pub fn completed(result: Result<ChatAnswer, ChatError>) -> Result<String, RowError> {
    let answer = interpret_completed(result)?;
    if answer.truncated {
        return Err(truncated(&answer.content));
    }
    Ok(answer.content)
}

/// [`interpret`] for the result of a typed chat request: the same answers and
/// row error codes, read from the host's typed answer.
pub fn interpret_completed(result: Result<ChatAnswer, ChatError>) -> Result<Answer, RowError> {
    let answer = match result {
        Ok(answer) => answer,
        Err(ChatError::Call(e)) => return interpret(Err(e)),
        Err(ChatError::InvalidRequest(m)) => return Err(RowError::new("invalid_request", m)),
        Err(ChatError::Unreadable(r)) => {
            return Err(RowError::new(
                "invalid_response",
                format!("the answer is not a chat answer: {}", excerpt(&r.body)),
            ));
        }
    };
    let truncated = answer.finish_reason == "length";
    if truncated && answer.text.trim().is_empty() {
        return Err(self::truncated(&answer.text));
    }
    if answer.finish_reason == "content_filter" {
        return Err(RowError::new(
            "content_filtered",
            "the provider's content filter withheld the answer",
        ));
    }
    if answer.text.trim().is_empty()
        && let Some(refusal) = serde_json::from_str::<Value>(&answer.body)
            .ok()
            .as_ref()
            .and_then(|body| body.pointer("/choices/0/message"))
            .and_then(refused)
    {
        return Err(refusal);
    }
    if answer.text.trim().is_empty() {
        return Err(RowError::new(
            "empty_response",
            "the model answered with no text",
        ));
    }
    // The provider's own usage object, with whatever counts it gave.
    let body: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    Ok(Answer {
        content: answer.text,
        usage: body.get("usage").cloned().unwrap_or(Value::Null),
        model: answer.model.map_or(Value::Null, Value::String),
        truncated,
    })
}

/// The row error for an answer cut at `max_tokens`, where a cut answer is
/// of no use (JSON, say).
pub fn truncated(partial: &str) -> RowError {
    RowError::new(
        "response_truncated",
        format!(
            "the answer was cut off at max_tokens; raise max_tokens. Partial answer: {}",
            excerpt(partial)
        ),
    )
}

/// The answer from the final result of a chat request. Failures get the
/// codes weir's built-in `llm` transform uses: `llm_call_failed`,
/// `retry_timeout`, `endpoint_denied`, `invalid_response`, `empty_response`,
/// `content_filtered`, `context_length_exceeded`. An answer cut at
/// `max_tokens` is kept, marked `truncated`: whether the start of an answer
/// is of use is the caller's to say ([`truncated`] gives the row error).
pub fn interpret(result: Result<Response, CallError>) -> Result<Answer, RowError> {
    match result {
        Ok(response) if (200..300).contains(&response.status) => parse_answer(&response.body),
        Ok(response) | Err(CallError::Status(response)) => Err(status_error(&response)),
        Err(CallError::DeadlineExceeded(m)) => Err(RowError::new("retry_timeout", m)),
        Err(CallError::Transport(m)) => Err(RowError::new("llm_call_failed", m)),
        Err(CallError::Denied(m)) => Err(RowError::new("endpoint_denied", m)),
    }
}

fn parse_answer(body: &str) -> Result<Answer, RowError> {
    let invalid = |what: String| RowError::new("invalid_response", what);
    let value: Value = serde_json::from_str(body).map_err(|e| {
        invalid(format!(
            "the endpoint's answer is not JSON ({e}): {}",
            excerpt(body)
        ))
    })?;
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| invalid(format!("the answer has no choices: {}", excerpt(body))))?;
    let content = choice
        .pointer("/message/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    let finish = choice.get("finish_reason").and_then(Value::as_str);
    let truncated = finish == Some("length");
    match finish {
        Some("length") if content.trim().is_empty() => return Err(self::truncated(content)),
        Some("content_filter") => {
            return Err(RowError::new(
                "content_filtered",
                "the provider's content filter withheld the answer",
            ));
        }
        _ => {}
    }
    if content.trim().is_empty()
        && let Some(refusal) = choice.get("message").and_then(refused)
    {
        return Err(refusal);
    }
    if content.trim().is_empty() {
        return Err(RowError::new(
            "empty_response",
            "the model answered with no text",
        ));
    }
    Ok(Answer {
        content: content.to_string(),
        usage: value.get("usage").cloned().unwrap_or(Value::Null),
        model: value.get("model").cloned().unwrap_or(Value::Null),
        truncated,
    })
}

/// The row error for a message that declines to answer instead of
/// answering (OpenAI's `refusal`, with structured outputs): the same code as
/// Anthropic's `refusal` stop reason, with the model's own words.
fn refused(message: &Value) -> Option<RowError> {
    let refusal = message.get("refusal")?.as_str()?.trim();
    (!refusal.is_empty()).then(|| {
        RowError::new(
            "content_filtered",
            format!("the model refused to answer: {}", excerpt(refusal)),
        )
    })
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
    let attempts = match response.attempts {
        0 | 1 => String::new(),
        n => format!(" after {n} attempts"),
    };
    RowError::new(
        row_code,
        format!("HTTP {}{attempts}: {message}", response.status),
    )
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
        let with_seed = Chat::new()
            .param("seed", json!(7))
            .param("model", json!("x"));
        let body: Value =
            serde_json::from_str(&with_seed.model(Some("m")).user("u").body()).unwrap();
        assert_eq!((&body["seed"], &body["model"]), (&json!(7), &json!("m")));
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
    fn truncated_answers_are_marked_and_filtered_and_empty_ones_are_row_errors() {
        let truncated = r#"{"choices":[{"message":{"content":"posi"},"finish_reason":"length"}]}"#;
        let cut = interpret(ok(200, truncated)).unwrap();
        assert!(cut.truncated);
        assert_eq!(cut.content, "posi");
        assert_eq!(
            answer(ok(200, truncated)).unwrap_err().code,
            "response_truncated"
        );
        let nothing = r#"{"choices":[{"message":{"content":""},"finish_reason":"length"}]}"#;
        assert_eq!(
            interpret(ok(200, nothing)).unwrap_err().code,
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
        let refused = r#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#;
        let error = interpret(ok(200, refused)).unwrap_err();
        assert_eq!(error.code, "content_filtered");
        assert_eq!(
            error.message,
            "the model refused to answer: I can't help with that."
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
    fn a_typed_answer_gets_the_same_row_errors_as_a_raw_one() {
        for body in [
            r#"{"model":"m1","choices":[{"message":{"content":"positive"},"finish_reason":"stop"}],
               "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#,
            r#"{"choices":[{"message":{"content":"posi"},"finish_reason":"length"}]}"#,
            r#"{"choices":[{"message":{"content":""},"finish_reason":"length"}]}"#,
            r#"{"choices":[{"message":{"content":null},"finish_reason":"content_filter"}]}"#,
            r#"{"choices":[{"message":{"content":"  "},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"message":{"content":null,"refusal":"No."},"finish_reason":"stop"}]}"#,
            "<html>oops</html>",
        ] {
            let raw = interpret(ok(200, body));
            let typed = interpret_completed(crate::complete::read(Response {
                status: 200,
                body: body.into(),
                attempts: 1,
                latency_ms: 1,
            }));
            match (raw, typed) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{body}"),
                (Err(a), Err(b)) => {
                    assert_eq!(a.code, b.code, "{body}");
                    if body.contains("refusal") {
                        assert_eq!(a.message, b.message);
                    }
                }
                (a, b) => panic!("{body}: {a:?} against {b:?}"),
            }
        }
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
