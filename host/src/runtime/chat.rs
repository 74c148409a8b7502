//! `chat.complete`: a typed chat request written as a chat-completions
//! body, sent the way `send` sends, and its answer read back. One writer and
//! one reader serve every provider: for an `anthropic` endpoint the executor
//! turns the body into a Messages request and the answer into the chat
//! shape (`services::executor::anthropic`), as it does for `send`.

use super::bindings::{ChatAnswer, ChatError, ChatRequest, Request, Response, Usage};
use super::state::GuestState;
use serde_json::{Map, Value, json};

impl GuestState {
    /// The requests that can be written go out in one `send`, so they share
    /// its pooling, audit records and provider batches; one that cannot is
    /// answered in its place without being sent.
    pub(super) async fn complete(
        &mut self,
        requests: Vec<ChatRequest>,
    ) -> wasmtime::Result<Vec<Result<ChatAnswer, ChatError>>> {
        let mut refused = Vec::with_capacity(requests.len());
        let mut raw = Vec::with_capacity(requests.len());
        for request in requests {
            match body(&request) {
                Ok(body) => {
                    refused.push(None);
                    raw.push(Request {
                        endpoint: request.endpoint,
                        body,
                        row: request.row,
                    });
                }
                Err(message) => refused.push(Some(ChatError::InvalidRequest(message))),
            }
        }
        let mut sent = self.send(raw).await?.into_iter();
        Ok(refused
            .into_iter()
            .map(|refusal| match refusal {
                Some(error) => Err(error),
                None => match sent.next().expect("one result per request sent") {
                    Ok(response) => read(response),
                    Err(e) => Err(ChatError::Call(e)),
                },
            })
            .collect())
    }
}

/// The chat-completions body of `request`: its `extra` parameters, with the
/// typed fields written over them.
fn body(request: &ChatRequest) -> Result<String, String> {
    let mut body = match &request.extra {
        Some(text) => object(text, "extra")?,
        None => Map::new(),
    };
    if let Some(model) = &request.model {
        body.insert("model".into(), json!(model));
    }
    let messages = request
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if let Some(max_tokens) = request.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = request.temperature {
        let number = serde_json::Number::from_f64(temperature)
            .ok_or_else(|| format!("temperature {temperature} is not a finite number"))?;
        body.insert("temperature".into(), Value::Number(number));
    }
    if let Some(text) = &request.response_format {
        body.insert(
            "response_format".into(),
            Value::Object(object(text, "response-format")?),
        );
    }
    Ok(Value::Object(body).to_string())
}

fn object(text: &str, field: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("{field} is not a JSON object: {text}")),
        Err(e) => Err(format!("{field} is not valid JSON: {e}")),
    }
}

/// A successful answer in the chat shape, read; anything else is kept whole
/// as `unreadable`.
fn read(response: Response) -> Result<ChatAnswer, ChatError> {
    let Some(choice) = serde_json::from_str::<Value>(&response.body)
        .ok()
        .and_then(|v| first_choice(&v))
    else {
        return Err(ChatError::Unreadable(response));
    };
    Ok(ChatAnswer {
        text: choice.text,
        finish_reason: choice.finish_reason,
        usage: choice.usage,
        model: choice.model,
        status: response.status,
        attempts: response.attempts,
        latency_ms: response.latency_ms,
        body: response.body,
    })
}

struct Choice {
    text: String,
    finish_reason: String,
    usage: Option<Usage>,
    model: Option<String>,
}

fn first_choice(answer: &Value) -> Option<Choice> {
    let choice = answer.get("choices")?.as_array()?.first()?;
    let text = match choice.pointer("/message/content") {
        Some(Value::String(text)) => text.clone(),
        // Content parts, as some servers send them.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    };
    let finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some(known @ ("stop" | "length" | "content_filter" | "tool_calls")) => known,
        // The name before tool calls replaced function calls.
        Some("function_call") => "tool_calls",
        _ => "other",
    };
    let usage = answer.get("usage").filter(|u| u.is_object()).map(|u| {
        let count = |key: &str| {
            u.get(key)
                .and_then(Value::as_u64)
                .map_or(0, |n| n.min(u32::MAX as u64) as u32)
        };
        Usage {
            input_tokens: count("prompt_tokens"),
            output_tokens: count("completion_tokens"),
        }
    });
    Some(Choice {
        text,
        finish_reason: finish_reason.to_string(),
        usage,
        model: answer
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::Message;

    fn request() -> ChatRequest {
        ChatRequest {
            endpoint: "llm".into(),
            row: 0,
            messages: vec![
                Message {
                    role: "system".into(),
                    content: "Be brief.".into(),
                },
                Message {
                    role: "user".into(),
                    content: "Hi".into(),
                },
            ],
            model: Some("m".into()),
            max_tokens: Some(20),
            temperature: Some(0.2),
            response_format: Some(r#"{"type":"json_object"}"#.into()),
            extra: Some(r#"{"top_p":0.5,"model":"other","seed":7}"#.into()),
        }
    }

    fn response(body: Value) -> Response {
        Response {
            status: 200,
            body: body.to_string(),
            attempts: 2,
            latency_ms: 31,
        }
    }

    #[test]
    fn the_typed_fields_are_written_over_the_extra_ones() {
        let body: Value = serde_json::from_str(&body(&request()).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "top_p": 0.5, "model": "m", "seed": 7,
                "messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Hi"}],
                "max_tokens": 20, "temperature": 0.2,
                "response_format": {"type": "json_object"}
            })
        );
    }

    #[test]
    fn a_request_that_cannot_be_written_says_which_field_is_wrong() {
        let extra = ChatRequest {
            extra: Some("[1]".into()),
            ..request()
        };
        assert!(
            body(&extra)
                .unwrap_err()
                .starts_with("extra is not a JSON object")
        );
        let format = ChatRequest {
            response_format: Some("{".into()),
            ..request()
        };
        assert!(
            body(&format)
                .unwrap_err()
                .starts_with("response-format is not valid JSON")
        );
        let temperature = ChatRequest {
            temperature: Some(f64::NAN),
            ..request()
        };
        assert!(
            body(&temperature)
                .unwrap_err()
                .contains("not a finite number")
        );
    }

    #[test]
    fn an_answer_is_read_with_its_reason_usage_and_model() {
        let answer = read(response(json!({
            "model": "m-2024",
            "choices": [{"message": {"role": "assistant", "content": "hello"},
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3}
        })))
        .unwrap();
        assert_eq!(answer.text, "hello");
        assert_eq!(answer.finish_reason, "length");
        let usage = answer.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (12, 3));
        assert_eq!(answer.model.as_deref(), Some("m-2024"));
        assert_eq!(
            (answer.status, answer.attempts, answer.latency_ms),
            (200, 2, 31)
        );
    }

    #[test]
    fn a_tool_call_has_no_text_and_an_unknown_reason_is_other() {
        let tool = read(response(json!({
            "choices": [{"message": {"content": null}, "finish_reason": "function_call"}]
        })))
        .unwrap();
        assert_eq!(
            (tool.text.as_str(), tool.finish_reason.as_str()),
            ("", "tool_calls")
        );
        assert!(tool.usage.is_none());
        let odd = read(response(
            json!({"choices": [{"message": {"content": "x"}}]}),
        ))
        .unwrap();
        assert_eq!(odd.finish_reason, "other");
    }

    #[test]
    fn an_answer_that_is_no_chat_answer_is_kept_whole() {
        for body in [
            json!({"result": "x"}),
            json!({"choices": []}),
            json!("text"),
        ] {
            match read(response(body.clone())) {
                Err(ChatError::Unreadable(r)) => assert_eq!(r.body, body.to_string()),
                other => panic!("{body} read as {other:?}"),
            }
        }
    }
}
