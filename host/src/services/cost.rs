//! What a call costs: the endpoint's price times the usage the provider
//! returned, or an estimate, marked as such, where it returned none.

use crate::config::PriceSpec;
use serde_json::Value;

/// Tokens one call used.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
    /// Prompt tokens the provider served from its own prompt cache.
    pub cached_prompt: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallCost {
    pub usd: f64,
    /// Usage was missing, so tokens were estimated from the text.
    pub estimated: bool,
}

/// What OpenAI, Azure OpenAI and Anthropic take off for Batch API answers:
/// half the online price.
pub const DEFAULT_BATCH_DISCOUNT: f64 = 0.5;

/// The share of the online price a Batch API answer costs.
pub fn batch_factor(price: &PriceSpec) -> f64 {
    1.0 - price.batch_discount.unwrap_or(DEFAULT_BATCH_DISCOUNT)
}

/// Output tokens assumed at least for the first requests of an endpoint.
const FIRST_OUTPUT_TOKENS: u64 = 16;

/// Rough tokens of a text: about four characters each.
fn tokens_in(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The usage an answer reports, read without building the rest of it (the
/// answer's text is skipped, not kept).
pub fn usage_in(answer: &str) -> Option<Usage> {
    #[derive(serde::Deserialize)]
    struct Answer {
        usage: Option<Value>,
    }
    usage_of(&serde_json::from_str::<Answer>(answer).ok()?.usage?)
}

/// What an OpenAI-shaped (`prompt_tokens`) or Anthropic-shaped
/// (`input_tokens`) `usage` object counts; nothing for one that counts
/// neither.
fn usage_of(usage: &Value) -> Option<Usage> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    // Anthropic's own counts first: they tell cache reads apart.
    if let Some(input) = count("input_tokens") {
        let cache_read = count("cache_read_input_tokens").unwrap_or(0);
        let cache_write = count("cache_creation_input_tokens").unwrap_or(0);
        return Some(Usage {
            prompt: input + cache_read + cache_write,
            completion: count("output_tokens").unwrap_or(0),
            cached_prompt: cache_read,
        });
    }
    if let Some(prompt) = count("prompt_tokens") {
        let cached = usage
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        return Some(Usage {
            prompt,
            completion: count("completion_tokens").unwrap_or(0),
            cached_prompt: cached.min(prompt),
        });
    }
    None
}

/// The rates (USD per million tokens) for a request's model.
fn rates(price: &PriceSpec, model: Option<&str>) -> (f64, f64, f64) {
    match model.and_then(|m| price.models.get(m)) {
        Some(p) => (
            p.input_per_million,
            p.output_per_million,
            p.cached_input_per_million.unwrap_or(p.input_per_million),
        ),
        None => (
            price.input_per_million,
            price.output_per_million,
            price
                .cached_input_per_million
                .unwrap_or(price.input_per_million),
        ),
    }
}

pub fn cost_of(price: &PriceSpec, model: Option<&str>, usage: Usage) -> f64 {
    let (input, output, cached) = rates(price, model);
    let fresh = usage.prompt.saturating_sub(usage.cached_prompt);
    (fresh as f64 * input + usage.cached_prompt as f64 * cached + usage.completion as f64 * output)
        / 1e6
}

/// The cost of a call from its request and successful answer.
pub fn call_cost(price: &PriceSpec, request: &str, answer: &str) -> CallCost {
    call_cost_of(price, request, answer, usage_in(answer))
}

/// The cost of a call whose answer's `usage` was read already: the texts
/// are parsed again only to estimate what a usage-less answer cost.
pub fn call_cost_of(
    price: &PriceSpec,
    request: &str,
    answer: &str,
    usage: Option<Usage>,
) -> CallCost {
    if let Some(usage) = usage {
        #[derive(serde::Deserialize)]
        struct Request {
            model: Option<String>,
        }
        let model = serde_json::from_str::<Request>(request)
            .ok()
            .and_then(|r| r.model);
        return CallCost {
            usd: cost_of(price, model.as_deref(), usage),
            estimated: false,
        };
    }
    let request: Value = serde_json::from_str(request).unwrap_or(Value::Null);
    let answer: Value = serde_json::from_str(answer).unwrap_or(Value::Null);
    let usage = Usage {
        prompt: tokens_in(&prompt_text(&request)),
        completion: tokens_in(&answer_text(&answer)),
        cached_prompt: 0,
    };
    CallCost {
        usd: cost_of(price, request.get("model").and_then(Value::as_str), usage),
        estimated: true,
    }
}

/// What a request is expected to cost, held against a budget while it is
/// on the wire: what the endpoint's calls have cost on average once some
/// were answered; before that, its prompt estimated from the text and an
/// answer as long as the prompt (at least 16 tokens, at most `max_tokens`).
pub fn estimate(price: &PriceSpec, request: &str, mean_so_far: Option<f64>) -> f64 {
    if let Some(mean) = mean_so_far {
        return mean;
    }
    let request: Value = serde_json::from_str(request).unwrap_or(Value::Null);
    let model = request.get("model").and_then(Value::as_str);
    let prompt = tokens_in(&prompt_text(&request));
    let output = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| request.get(*k).and_then(Value::as_u64))
        .unwrap_or(u64::MAX)
        .min(prompt.max(FIRST_OUTPUT_TOKENS));
    let usage = Usage {
        prompt,
        completion: output,
        cached_prompt: 0,
    };
    cost_of(price, model, usage)
}

/// The text of a chat request's messages (and Anthropic's `system`).
fn prompt_text(request: &Value) -> String {
    let mut text = String::new();
    if let Some(system) = request.get("system") {
        collect_text(system, &mut text);
    }
    if let Some(messages) = request.get("messages").and_then(Value::as_array) {
        for message in messages {
            if let Some(content) = message.get("content") {
                collect_text(content, &mut text);
            }
        }
    }
    text
}

fn answer_text(answer: &Value) -> String {
    let mut text = String::new();
    if let Some(choices) = answer.get("choices").and_then(Value::as_array) {
        for choice in choices {
            if let Some(content) = choice.pointer("/message/content") {
                collect_text(content, &mut text);
            }
        }
    }
    if let Some(content) = answer.get("content") {
        collect_text(content, &mut text);
    }
    text
}

/// Strings, and the `text` of content blocks.
fn collect_text(value: &Value, into: &mut String) {
    match value {
        Value::String(s) => into.push_str(s),
        Value::Array(items) => items.iter().for_each(|item| collect_text(item, into)),
        Value::Object(block) => {
            if let Some(Value::String(s)) = block.get("text") {
                into.push_str(s);
            }
        }
        _ => {}
    }
}

/// Whether a request may get a different answer each time it is sent:
/// temperature above 0, or left to the provider's default (1).
pub fn samples(request: &Value) -> bool {
    request
        .get("temperature")
        .and_then(Value::as_f64)
        .is_none_or(|t| t > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price() -> PriceSpec {
        serde_json::from_value(serde_json::json!({
            "input_per_million": 0.15, "output_per_million": 0.60,
            "cached_input_per_million": 0.075,
            "models": {"big": {"input_per_million": 2.5, "output_per_million": 10.0}}
        }))
        .unwrap()
    }

    #[test]
    fn openai_usage_with_cached_tokens_and_per_model_prices() {
        let answer = r#"{"usage":{"prompt_tokens":1000,"completion_tokens":200,
            "prompt_tokens_details":{"cached_tokens":400}}}"#;
        let cost = call_cost(&price(), r#"{"model":"small"}"#, answer);
        let expected = (600.0 * 0.15 + 400.0 * 0.075 + 200.0 * 0.60) / 1e6;
        assert!((cost.usd - expected).abs() < 1e-15, "{cost:?}");
        assert!(!cost.estimated);
        let big = call_cost(&price(), r#"{"model":"big"}"#, answer);
        assert!((big.usd - (1000.0 * 2.5 + 200.0 * 10.0) / 1e6).abs() < 1e-15);
    }

    #[test]
    fn anthropic_usage_counts_cache_reads_as_prompt_tokens() {
        let answer = r#"{"content":[{"type":"text","text":"hi"}],
            "usage":{"input_tokens":100,"output_tokens":10,"cache_read_input_tokens":50}}"#;
        let cost = call_cost(&price(), "{}", answer);
        let expected = (100.0 * 0.15 + 50.0 * 0.075 + 10.0 * 0.60) / 1e6;
        assert!((cost.usd - expected).abs() < 1e-15);
    }

    #[test]
    fn usage_is_read_from_the_answer_alone_and_is_none_where_it_counts_nothing() {
        let answer = r#"{"choices":[{"message":{"content":"x"}}],
            "usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
        let usage = Usage {
            prompt: 3,
            completion: 1,
            cached_prompt: 0,
        };
        assert_eq!(usage_in(answer), Some(usage));
        assert_eq!(usage_in(r#"{"usage":{"completion_tokens":1}}"#), None);
        assert_eq!(usage_in(r#"{"usage":null}"#), None);
        assert_eq!(usage_in("not json"), None);
        let request = r#"{"model":"big","messages":[]}"#;
        assert_eq!(
            call_cost_of(&price(), request, answer, Some(usage)),
            call_cost(&price(), request, answer)
        );
        assert!(
            (call_cost(&price(), request, answer).usd - (3.0 * 2.5 + 10.0) / 1e6).abs() < 1e-15
        );
    }

    #[test]
    fn missing_usage_is_estimated_and_marked() {
        let request = r#"{"messages":[{"role":"user","content":"abcdefgh"}]}"#;
        let answer = r#"{"choices":[{"message":{"content":"abcd"}}]}"#;
        let cost = call_cost(&price(), request, answer);
        assert!(cost.estimated);
        assert!((cost.usd - (2.0 * 0.15 + 1.0 * 0.60) / 1e6).abs() < 1e-15);
    }

    #[test]
    fn the_estimate_is_the_mean_so_far_or_the_text_and_max_tokens() {
        let request = r#"{"max_tokens":10,"messages":[{"role":"user","content":"abcd"}]}"#;
        let first = estimate(&price(), request, None);
        assert!((first - (0.15 + 10.0 * 0.60) / 1e6).abs() < 1e-15);
        let long = format!(
            r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
            "a".repeat(400)
        );
        let first = estimate(&price(), &long, None);
        assert!((first - (100.0 * 0.15 + 100.0 * 0.60) / 1e6).abs() < 1e-15);
        assert_eq!(estimate(&price(), request, Some(0.5)), 0.5);
        assert!(samples(&serde_json::json!({})));
        assert!(!samples(&serde_json::json!({"temperature": 0})));
    }
}
