//! Anthropic's Messages API behind the chat shape components speak. A
//! component sends an OpenAI-style chat request; the host sends Anthropic's
//! (`system` at the top level, `max_tokens` always, `stop_sequences`), and
//! hands back Anthropic's answer with the chat fields added beside its own
//! (`choices`, `usage.prompt_tokens`), so components written for one shape
//! read either provider, and nothing the provider said is dropped. A body
//! that is already in Anthropic's shape passes through. The Messages API has
//! no `response_format`: a `json_schema` one becomes an instruction at the
//! end of the last user message, stating the schema.

use serde_json::{Map, Value, json};

/// Sent when the request names no `max_tokens`: the Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

pub const API_VERSION: &str = "2023-06-01";

/// Chat request fields the Messages API has no place for.
const DROPPED: &[&str] = &[
    "response_format",
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
    "top_logprobs",
    "n",
    "seed",
    "parallel_tool_calls",
];

/// The Messages API body for a chat request; anything that is not a JSON
/// object is sent as it is, and the endpoint says what is wrong with it.
pub fn request(body: &str) -> String {
    let Ok(Value::Object(mut chat)) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    let mut system: Vec<String> = Vec::new();
    if let Some(Value::Array(messages)) = chat.get_mut("messages") {
        messages.retain(|message| {
            if message.get("role").and_then(Value::as_str) != Some("system") {
                return true;
            }
            match message.get("content") {
                Some(Value::String(text)) => system.push(text.clone()),
                Some(other) => system.push(text_of(other)),
                None => {}
            }
            false
        });
    }
    if !system.is_empty() && !chat.contains_key("system") {
        chat.insert("system".into(), Value::String(system.join("\n\n")));
    }
    let max_tokens = chat
        .remove("max_completion_tokens")
        .or_else(|| chat.remove("max_tokens"))
        .unwrap_or(json!(DEFAULT_MAX_TOKENS));
    chat.insert("max_tokens".into(), max_tokens);
    if let Some(stop) = chat.remove("stop") {
        let sequences = match stop {
            Value::String(one) => json!([one]),
            many => many,
        };
        chat.entry("stop_sequences").or_insert(sequences);
    }
    if let Some(Value::String(user)) = chat.remove("user") {
        let metadata = chat.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(metadata) = metadata {
            metadata.entry("user_id").or_insert(Value::String(user));
        }
    }
    if let Some(schema) = chat
        .get("response_format")
        .filter(|f| f.get("type").and_then(Value::as_str) == Some("json_schema"))
        .and_then(|f| f.pointer("/json_schema/schema"))
        .cloned()
    {
        ask_for_schema(&mut chat, &schema);
    }
    for field in DROPPED {
        chat.remove(*field);
    }
    Value::Object(chat).to_string()
}

/// Appends the schema the request asked the answer to follow to its last
/// user message: what `response_format` says, in the only place the
/// Messages API has for it.
fn ask_for_schema(chat: &mut Map<String, Value>, schema: &Value) {
    let instruction =
        format!("\n\nAnswer with only a JSON object, no other text.\nJSON Schema: {schema}");
    let Some(Value::Array(messages)) = chat.get_mut("messages") else {
        return;
    };
    let Some(last) = messages
        .iter_mut()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return;
    };
    match last.get_mut("content") {
        Some(Value::String(text)) => text.push_str(&instruction),
        Some(Value::Array(blocks)) => {
            blocks.push(json!({"type": "text", "text": instruction.trim_start()}));
        }
        _ => {}
    }
}

/// A successful Messages answer with the chat fields added: `choices` with
/// the text of its content blocks and `finish_reason`, and `usage` with
/// `prompt_tokens` and `completion_tokens` beside Anthropic's own counts.
pub fn answer(body: &str) -> String {
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    if message.contains_key("choices") {
        return body.to_string();
    }
    let text = message.get("content").map(text_of).unwrap_or_default();
    let finish = match message.get("stop_reason").and_then(Value::as_str) {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    };
    message.insert(
        "choices".into(),
        json!([{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }]),
    );
    if let Some(Value::Object(usage)) = message.get_mut("usage") {
        add_chat_usage(usage);
    }
    message
        .entry("object")
        .or_insert(Value::String("chat.completion".into()));
    Value::Object(message).to_string()
}

fn add_chat_usage(usage: &mut Map<String, Value>) {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let prompt = count("input_tokens")
        + count("cache_read_input_tokens")
        + count("cache_creation_input_tokens");
    let completion = count("output_tokens");
    usage.insert("prompt_tokens".into(), json!(prompt));
    usage.insert("completion_tokens".into(), json!(completion));
    usage.insert("total_tokens".into(), json!(prompt + completion));
}

/// The text of a string or of content blocks.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_becomes_a_messages_request() {
        let chat = json!({
            "model": "claude-haiku-4-5",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"}
            ],
            "temperature": 0,
            "stop": "\n\n",
            "response_format": {"type": "json_object"},
            "user": "u1"
        });
        let sent: Value = serde_json::from_str(&request(&chat.to_string())).unwrap();
        assert_eq!(
            sent,
            json!({
                "model": "claude-haiku-4-5",
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "Hi"}],
                "temperature": 0,
                "max_tokens": DEFAULT_MAX_TOKENS,
                "stop_sequences": ["\n\n"],
                "metadata": {"user_id": "u1"}
            })
        );
    }

    #[test]
    fn a_json_schema_becomes_an_instruction_in_the_last_user_message() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let chat = json!({
            "messages": [{"role": "user", "content": "Count: abc"}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "a", "strict": true, "schema": schema}}
        });
        let sent: Value = serde_json::from_str(&request(&chat.to_string())).unwrap();
        assert_eq!(sent.get("response_format"), None);
        let text = sent["messages"][0]["content"].as_str().unwrap();
        assert_eq!(
            text,
            format!(
                "Count: abc\n\nAnswer with only a JSON object, no other text.\nJSON Schema: {schema}"
            )
        );
        let object = json!({"messages": [{"role": "user", "content": "x"}],
                            "response_format": {"type": "json_object"}});
        let sent: Value = serde_json::from_str(&request(&object.to_string())).unwrap();
        assert_eq!(sent["messages"][0]["content"], "x");
    }

    #[test]
    fn a_messages_request_passes_through() {
        let native = json!({
            "model": "m", "max_tokens": 10,
            "system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
        });
        let sent: Value = serde_json::from_str(&request(&native.to_string())).unwrap();
        assert_eq!(sent, native);
    }

    #[test]
    fn an_answer_gains_the_chat_fields_and_keeps_its_own() {
        let message = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "posi"}, {"type": "text", "text": "tive"}],
            "stop_reason": "max_tokens", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 3}
        });
        let got: Value = serde_json::from_str(&answer(&message.to_string())).unwrap();
        assert_eq!(got["choices"][0]["message"]["content"], "positive");
        assert_eq!(got["choices"][0]["finish_reason"], "length");
        assert_eq!(got["usage"]["prompt_tokens"], 12);
        assert_eq!(got["usage"]["completion_tokens"], 3);
        assert_eq!(got["usage"]["input_tokens"], 12);
        assert_eq!(got["content"], message["content"]);
        assert_eq!(got["stop_reason"], "max_tokens");
    }
}
