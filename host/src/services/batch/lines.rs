//! Batch lines on the wire: what weir sends for each request, and what a
//! result line says, for OpenAI and Azure OpenAI (a JSONL file of
//! `{custom_id, method, url, body}`; results `{custom_id, response, error}`)
//! and Anthropic (`{custom_id, params}`; results `{custom_id, result}`).

use crate::services::cost;
use crate::services::executor::{Verdict, anthropic, classify_status};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// Which wire format a batch speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    /// Azure OpenAI: lines go to `/chat/completions`, and `model` names the
    /// deployment.
    Azure,
    Anthropic,
}

/// One request as a batch line.
pub fn line(wire: Wire, custom_id: &str, body: &str, deployment: Option<&str>) -> Value {
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    match wire {
        Wire::OpenAi => json!({
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": parsed,
        }),
        Wire::Azure => {
            let mut body = parsed;
            if let (Value::Object(fields), Some(deployment)) = (&mut body, deployment) {
                fields.insert("model".into(), Value::String(deployment.to_string()));
            }
            json!({
                "custom_id": custom_id,
                "method": "POST",
                "url": "/chat/completions",
                "body": body,
            })
        }
        Wire::Anthropic => {
            let params: Value =
                serde_json::from_str(&anthropic::request(body)).unwrap_or(Value::Null);
            json!({ "custom_id": custom_id, "params": params })
        }
    }
}

/// What became of one request in a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum LineOutcome {
    /// A 2xx answer, in the chat shape components read.
    Answer { status: u16, body: String },
    /// An answer no retry can change (a 4xx): the row gets it as its error.
    Failed { status: u16, body: String },
    /// Capacity, a server error, expiry or cancellation: another batch may
    /// answer it.
    Retry { reason: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct LineResult {
    pub custom_id: String,
    pub outcome: LineOutcome,
}

impl LineResult {
    /// (prompt, completion) tokens of an answer that reports its usage.
    pub fn tokens(&self) -> Option<(u64, u64)> {
        let LineOutcome::Answer { body, .. } = &self.outcome else {
            return None;
        };
        cost::usage_in(body).map(|u| (u.prompt, u.completion))
    }
}

/// The results in a results file; lines that cannot be read are skipped
/// and counted, and their requests go into another batch.
pub fn parse_results(wire: Wire, text: &str) -> (Vec<LineResult>, usize) {
    let mut results = Vec::new();
    let mut unreadable = 0;
    for line in text.lines() {
        match parse_line(wire, line) {
            Some(Some(result)) => results.push(result),
            Some(None) => unreadable += 1,
            None => {}
        }
    }
    (results, unreadable)
}

/// One line of a results file: None for a blank line, Some(None) for one
/// that cannot be read.
pub fn parse_line(wire: Wire, line: &str) -> Option<Option<LineResult>> {
    if line.trim().is_empty() {
        return None;
    }
    Some(
        serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| match wire {
                Wire::OpenAi | Wire::Azure => openai_result(&v),
                Wire::Anthropic => anthropic_result(&v),
            }),
    )
}

fn openai_result(line: &Value) -> Option<LineResult> {
    let custom_id = line.get("custom_id")?.as_str()?.to_string();
    let response = line.get("response").filter(|r| !r.is_null());
    let outcome = match response {
        Some(response) => {
            let status = response.get("status_code")?.as_u64()? as u16;
            let body = match response.get("body") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            by_status(status, body)
        }
        None => {
            let error = line.get("error").cloned().unwrap_or(Value::Null);
            let code = error.get("code").and_then(Value::as_str).unwrap_or("");
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the batch gave no answer for this request");
            if code.contains("expired") || code.contains("cancel") || code.is_empty() {
                LineOutcome::Retry {
                    reason: format!(
                        "{} ({message})",
                        if code.is_empty() { "no answer" } else { code }
                    ),
                }
            } else {
                LineOutcome::Failed {
                    status: 400,
                    body: json!({ "error": error }).to_string(),
                }
            }
        }
    };
    Some(LineResult { custom_id, outcome })
}

fn anthropic_result(line: &Value) -> Option<LineResult> {
    let custom_id = line.get("custom_id")?.as_str()?.to_string();
    let result = line.get("result")?;
    let outcome = match result.get("type")?.as_str()? {
        "succeeded" => LineOutcome::Answer {
            status: 200,
            body: anthropic::answer(&result.get("message")?.to_string()),
        },
        "errored" => {
            let error = result.get("error").cloned().unwrap_or(Value::Null);
            let kind = error
                .pointer("/error/type")
                .and_then(Value::as_str)
                .unwrap_or("api_error")
                .to_string();
            let status = match kind.as_str() {
                "rate_limit_error" => 429,
                "overloaded_error" => 529,
                "api_error" => 500,
                "authentication_error" => 401,
                "permission_error" => 403,
                "not_found_error" => 404,
                _ => 400,
            };
            by_status(status, error.to_string())
        }
        other => LineOutcome::Retry {
            reason: other.to_string(),
        },
    };
    Some(LineResult { custom_id, outcome })
}

/// A line's answer judged as an online answer would be: what the executor
/// would retry goes into another batch, what it would not fails the row.
fn by_status(status: u16, body: String) -> LineOutcome {
    match classify_status(status, &HeaderMap::new(), &body, true) {
        Verdict::Success => LineOutcome::Answer { status, body },
        Verdict::Fatal => LineOutcome::Failed { status, body },
        _ => LineOutcome::Retry {
            reason: format!("status {status}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_lines_tell_answers_from_failures_and_retries() {
        let text = [
            r#"{"id":"r1","custom_id":"a","response":{"status_code":200,"request_id":"x","body":{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}},"error":null}"#,
            r#"{"id":"r2","custom_id":"b","response":{"status_code":400,"body":{"error":{"message":"bad"}}},"error":null}"#,
            r#"{"id":"r3","custom_id":"c","response":{"status_code":429,"body":{}},"error":null}"#,
            r#"{"id":"r4","custom_id":"d","response":null,"error":{"code":"batch_expired","message":"late"}}"#,
            "not json",
        ]
        .join("\n");
        let (results, unreadable) = parse_results(Wire::OpenAi, &text);
        assert_eq!(unreadable, 1);
        assert!(matches!(
            results[0].outcome,
            LineOutcome::Answer { status: 200, .. }
        ));
        assert_eq!(results[0].tokens(), Some((3, 1)));
        assert!(matches!(
            results[1].outcome,
            LineOutcome::Failed { status: 400, .. }
        ));
        assert!(matches!(results[2].outcome, LineOutcome::Retry { .. }));
        assert!(
            matches!(&results[3].outcome, LineOutcome::Retry { reason } if reason.contains("batch_expired"))
        );
    }

    #[test]
    fn a_line_is_judged_as_its_answer_online_would_be() {
        let text = [
            r#"{"custom_id":"quota","response":{"status_code":429,"body":{"error":{"code":"insufficient_quota","message":"no"}}}}"#,
            r#"{"custom_id":"broken","response":{"status_code":200,"body":"<html>"}}"#,
        ]
        .join("\n");
        let (results, _) = parse_results(Wire::OpenAi, &text);
        // Out of quota will not clear in another batch; a 2xx that is not
        // JSON is asked again, as online.
        assert!(matches!(
            results[0].outcome,
            LineOutcome::Failed { status: 429, .. }
        ));
        assert!(matches!(results[1].outcome, LineOutcome::Retry { .. }));
    }

    #[test]
    fn anthropic_results_come_back_in_the_chat_shape() {
        let text = [
            r#"{"custom_id":"a","result":{"type":"succeeded","message":{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":4,"output_tokens":2}}}}"#,
            r#"{"custom_id":"b","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"no"}}}}"#,
            r#"{"custom_id":"c","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"busy"}}}}"#,
            r#"{"custom_id":"d","result":{"type":"expired"}}"#,
        ]
        .join("\n");
        let (results, _) = parse_results(Wire::Anthropic, &text);
        let LineOutcome::Answer { body, .. } = &results[0].outcome else {
            panic!("{:?}", results[0])
        };
        let answer: Value = serde_json::from_str(body).unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], "hi");
        assert_eq!(results[0].tokens(), Some((4, 2)));
        assert!(matches!(
            results[1].outcome,
            LineOutcome::Failed { status: 400, .. }
        ));
        assert!(matches!(results[2].outcome, LineOutcome::Retry { .. }));
        assert!(matches!(results[3].outcome, LineOutcome::Retry { .. }));
    }

    #[test]
    fn azure_lines_name_the_deployment() {
        let line = line(
            Wire::Azure,
            "x",
            r#"{"model":"gpt","messages":[]}"#,
            Some("dep"),
        );
        assert_eq!(line["body"]["model"], "dep");
        assert_eq!(line["url"], "/chat/completions");
    }
}
