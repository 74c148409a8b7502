//! Servers that cannot do structured output: llama.cpp's server answers 500
//! to `response_format: json_schema`. Such a 500 is no passing fault, so
//! until the endpoint has accepted a schema it is final: the component can
//! ask another way at once (the `llm` node's `response_format: auto` asks
//! for `json_object`) instead of after every retry. Once a schema has been
//! accepted, a 500 is an ordinary transient failure again. A refusal is
//! remembered for the rest of the run: later requests for a schema get it at
//! once, unsent, as an open breaker fails requests without sending them.

use super::Response;
use super::retry::Verdict;
use crate::config::EndpointKind;
use serde_json::Value;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct SchemaSupport {
    /// Anthropic's Messages API has no `response_format`: it is left out of
    /// the request, so the endpoint never judges one.
    applies: bool,
    accepted: AtomicBool,
    /// The endpoint's answer when it refused a schema: (status, body).
    refused: Mutex<Option<(u16, String)>>,
}

impl SchemaSupport {
    pub fn new(kind: EndpointKind) -> Self {
        Self {
            applies: matches!(kind, EndpointKind::Openai | EndpointKind::AzureOpenai),
            accepted: AtomicBool::new(false),
            refused: Mutex::new(None),
        }
    }

    /// The endpoint's refusal, for a request that asks for a schema again:
    /// no attempt is made.
    pub fn known_refusal(&self, body: &str) -> Option<Response> {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let (status, said) = refused.as_ref()?;
        asks_for_schema(body).then(|| Response {
            status: *status,
            body: said.clone(),
            attempts: 0,
            latency: Duration::ZERO,
        })
    }

    /// The verdict on an attempt of `body`, given the status and body it
    /// was answered with.
    pub fn judge(&self, body: &str, answer: Option<(u16, &str)>, verdict: Verdict) -> Verdict {
        let status = answer.map(|(status, _)| status);
        if !self.applies {
            return verdict;
        }
        let accepted = self.accepted.load(Ordering::Relaxed);
        match verdict {
            Verdict::Success if !accepted && asks_for_schema(body) => {
                self.accepted.store(true, Ordering::Relaxed);
                verdict
            }
            Verdict::Transient if status == Some(500) && !accepted && asks_for_schema(body) => {
                let said = answer.map(|(_, said)| said.to_string()).unwrap_or_default();
                *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some((500, said));
                Verdict::Fatal
            }
            _ => verdict,
        }
    }
}

fn asks_for_schema(body: &str) -> bool {
    // Most bodies do not name it at all: no need to parse those.
    body.contains("json_schema")
        && serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|b| b.pointer("/response_format/type").cloned())
            .is_some_and(|t| t == "json_schema")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str =
        r#"{"messages":[],"response_format":{"type":"json_schema","json_schema":{}}}"#;
    const OBJECT: &str = r#"{"messages":[],"response_format":{"type":"json_object"}}"#;

    #[test]
    fn a_500_to_a_schema_is_final_until_a_schema_is_accepted() {
        let support = SchemaSupport::new(EndpointKind::Openai);
        assert_eq!(
            support.judge(SCHEMA, Some((500, "no")), Verdict::Transient),
            Verdict::Fatal
        );
        assert_eq!(
            support.judge(OBJECT, Some((500, "down")), Verdict::Transient),
            Verdict::Transient
        );
        assert_eq!(
            support.judge(SCHEMA, Some((502, "proxy")), Verdict::Transient),
            Verdict::Transient
        );
        assert_eq!(
            support.judge(SCHEMA, Some((200, "{}")), Verdict::Success),
            Verdict::Success
        );
        assert_eq!(
            support.judge(SCHEMA, Some((500, "no")), Verdict::Transient),
            Verdict::Transient,
            "after a schema was accepted, a 500 is a passing fault"
        );
    }

    #[test]
    fn a_refusal_is_remembered_for_schema_requests_only() {
        let support = SchemaSupport::new(EndpointKind::Openai);
        assert_eq!(support.known_refusal(SCHEMA), None);
        support.judge(SCHEMA, Some((500, "no schemas here")), Verdict::Transient);
        let refusal = support.known_refusal(SCHEMA).unwrap();
        assert_eq!(
            (refusal.status, refusal.body.as_str(), refusal.attempts),
            (500, "no schemas here", 0)
        );
        assert_eq!(support.known_refusal(OBJECT), None);
    }

    #[test]
    fn anthropic_endpoints_are_left_alone() {
        let support = SchemaSupport::new(EndpointKind::Anthropic);
        assert_eq!(
            support.judge(SCHEMA, Some((500, "no")), Verdict::Transient),
            Verdict::Transient
        );
    }
}
