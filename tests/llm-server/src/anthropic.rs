//! TEST TOOL — Anthropic's Messages API (`POST /v1/messages`) over the same
//! scripted answers as the chat route: it checks what Anthropic checks
//! (`anthropic-version`, `max_tokens`, no `system` role in `messages`), answers
//! with content blocks, `stop_reason` and `usage.input_tokens/output_tokens`,
//! cuts an answer at `max_tokens` words, and words its errors as Anthropic
//! does (`{type: "error", error: {type, message}}`, 529 `overloaded_error`).

use super::{OUTPUT_TOKEN_WINDOW, REQUEST_WINDOW, Shared, TOKEN_WINDOW, answer_as_chat};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let wire: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    if let Some(refusal) = refuse(&headers, &wire) {
        return refusal;
    }
    let chat = chat_shape(&wire);
    let response = answer_as_chat(&shared, uri.path(), &headers, &chat.to_string(), &wire).await;
    let status = response.status();
    let retry_after = response.headers().get("retry-after").cloned();
    let windows = rate_headers(response.headers());
    let bytes = match axum::body::to_bytes(response.into_body(), 16 << 20).await {
        Ok(bytes) => bytes,
        // A scripted broken connection: break this one too.
        Err(_) => return error(StatusCode::BAD_GATEWAY, "api_error", "connection broke"),
    };
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let mut response = if status.is_success() {
        match message(&answer, wire["max_tokens"].as_u64().unwrap_or(u64::MAX)) {
            Some(message) => (
                status,
                [("content-type", "application/json")],
                message.to_string(),
            )
                .into_response(),
            // A scripted malformed body: pass it on as it is.
            None => (status, bytes).into_response(),
        }
    } else {
        let said = answer["error"]["message"].as_str().unwrap_or("error");
        error(status, error_type(status), said)
    };
    if let Some(value) = retry_after {
        response.headers_mut().insert("retry-after", value);
    }
    for (name, value) in windows {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// The chat route's rate windows (`x-ratelimit-*`, `retry-after-ms`) as
/// Anthropic words them: `anthropic-ratelimit-{requests,tokens}-*`, each
/// reset the RFC 3339 time the window is full again, and a refusal's wait in
/// whole seconds in `retry-after`. The server's token window counts input
/// and output tokens together, as `tokens` does; of the windows Anthropic
/// enforces apart, it keeps the output one when told (`output-tokens`).
fn rate_headers(chat: &HeaderMap) -> Vec<(&'static str, String)> {
    let text = |name: &str| chat.get(name).and_then(|v| v.to_str().ok());
    let mut headers = Vec::new();
    for ((_, [limit, left, reset]), [its_limit, its_left, its_reset]) in [
        (
            REQUEST_WINDOW,
            [
                "anthropic-ratelimit-requests-limit",
                "anthropic-ratelimit-requests-remaining",
                "anthropic-ratelimit-requests-reset",
            ],
        ),
        (
            TOKEN_WINDOW,
            [
                "anthropic-ratelimit-tokens-limit",
                "anthropic-ratelimit-tokens-remaining",
                "anthropic-ratelimit-tokens-reset",
            ],
        ),
        (
            OUTPUT_TOKEN_WINDOW,
            [
                "anthropic-ratelimit-output-tokens-limit",
                "anthropic-ratelimit-output-tokens-remaining",
                "anthropic-ratelimit-output-tokens-reset",
            ],
        ),
    ] {
        if let Some(value) = text(limit) {
            headers.push((its_limit, value.to_string()));
        }
        if let Some(value) = text(left) {
            headers.push((its_left, value.to_string()));
        }
        let full_in = text(reset).and_then(|v| v.strip_suffix('s')?.parse::<f64>().ok());
        if let Some(seconds) = full_in {
            let at = SystemTime::now() + Duration::from_secs_f64(seconds.max(0.0));
            headers.push((its_reset, humantime::format_rfc3339_seconds(at).to_string()));
        }
    }
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        headers.push(("retry-after", ((ms / 1000.0).ceil() as u64).to_string()));
    }
    headers
}

fn refuse(headers: &HeaderMap, wire: &Value) -> Option<Response> {
    let bad = |message: &str| {
        Some(error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message,
        ))
    };
    if let Some(message) = refuse_headers(headers) {
        return bad(message);
    }
    if wire.is_null() {
        return bad("There was an error parsing the body of your request");
    }
    refuse_params(wire).and_then(bad)
}

/// What is wrong with the request's headers, as Anthropic words it.
pub(crate) fn refuse_headers(headers: &HeaderMap) -> Option<&'static str> {
    (!headers.contains_key("anthropic-version")).then_some("anthropic-version: header is required")
}

/// What is wrong with a Messages body, as Anthropic words it.
pub(crate) fn refuse_params(wire: &Value) -> Option<&'static str> {
    if wire["max_tokens"].as_u64().is_none() {
        return Some("max_tokens: Field required");
    }
    let messages = wire["messages"].as_array();
    if messages.is_none_or(|m| m.iter().any(|m| m["role"] == "system")) {
        return Some(
            "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` \
             parameter, not \"system\" as an input message role.",
        );
    }
    None
}

/// The request in the chat shape the scripted answers read.
pub(crate) fn chat_shape(wire: &Value) -> Value {
    let mut messages = Vec::new();
    if !wire["system"].is_null() {
        messages.push(json!({"role": "system", "content": text_of(&wire["system"])}));
    }
    for m in wire["messages"].as_array().into_iter().flatten() {
        messages.push(json!({"role": m["role"], "content": text_of(&m["content"])}));
    }
    json!({"model": wire["model"], "messages": messages, "temperature": wire["temperature"]})
}

/// A Messages answer from the chat answer, cut at `max_tokens` words.
pub(crate) fn message(chat: &Value, max_tokens: u64) -> Option<Value> {
    let text = chat["choices"][0]["message"]["content"].as_str()?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let (text, stop_reason) = if words.len() as u64 > max_tokens {
        (words[..max_tokens as usize].join(" "), "max_tokens")
    } else {
        (text.to_string(), "end_turn")
    };
    let output_tokens = text.split_whitespace().count();
    Some(json!({
        "id": chat["id"].as_str().unwrap_or("msg").replace("chatcmpl", "msg"),
        "type": "message",
        "role": "assistant",
        "model": chat["model"],
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": chat["usage"]["prompt_tokens"], "output_tokens": output_tokens}
    }))
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

pub(crate) fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

pub(crate) fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}
