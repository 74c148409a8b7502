//! What weir's host does for a typed chat request, written over `send`: the
//! chat-completions body it writes and how it reads the answer. A scripted
//! host ([`crate::testing::MockHost`]) answers `complete` this way, so a
//! transform's tests see the bodies the real host would send.

use crate::host::{ChatAnswer, ChatError, ChatRequest, Host, Request, Response, Usage};
use serde_json::{Map, Value, json};

pub(crate) fn over_send<H: Host + ?Sized>(
    host: &H,
    requests: Vec<ChatRequest>,
) -> Vec<Result<ChatAnswer, ChatError>> {
    let written: Vec<Result<Request, String>> = requests
        .into_iter()
        .map(|r| {
            body(&r).map(|body| Request {
                endpoint: r.endpoint,
                body,
                row: r.row,
            })
        })
        .collect();
    let sendable = written.iter().filter_map(|w| w.as_ref().ok()).cloned();
    let mut sent = host.send(sendable.collect()).into_iter();
    written
        .into_iter()
        .map(|w| match w {
            Err(message) => Err(ChatError::InvalidRequest(message)),
            Ok(_) => match sent.next() {
                Some(Ok(response)) => read(response),
                Some(Err(e)) => Err(ChatError::Call(e)),
                None => Err(ChatError::Call(crate::host::CallError::Transport(
                    "the host returned no result".into(),
                ))),
            },
        })
        .collect()
}

/// The chat-completions body: `extra`, with the typed fields over it.
pub fn body(request: &ChatRequest) -> Result<String, String> {
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
    if let Some(t) = request.temperature {
        let number = serde_json::Number::from_f64(t)
            .ok_or_else(|| format!("temperature {t} is not a finite number"))?;
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

/// A successful answer in the chat shape, read; anything else is unreadable.
pub fn read(response: Response) -> Result<ChatAnswer, ChatError> {
    let parsed: Option<Value> = serde_json::from_str(&response.body).ok();
    let Some(choice) = parsed
        .as_ref()
        .and_then(|v| v.get("choices")?.as_array()?.first())
    else {
        return Err(ChatError::Unreadable(response));
    };
    let answer = parsed.as_ref().expect("parsed above");
    let text = match choice.pointer("/message/content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    };
    let finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some(known @ ("stop" | "length" | "content_filter" | "tool_calls")) => known,
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
    Ok(ChatAnswer {
        text,
        finish_reason: finish_reason.to_string(),
        usage,
        model: answer
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        status: response.status,
        attempts: response.attempts,
        latency_ms: response.latency_ms,
        body: response.body,
    })
}
