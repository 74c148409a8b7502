//! A configured `llm` node: turns a batch of rows into one outcome per row.

use crate::chat::{self, Failure};
use crate::hashing;
use crate::host::{Host, Level, Request};
use crate::options::LlmOptions;
use crate::prompt::Prompts;
use serde_json::{Map, Value};

pub type Row = Map<String, Value>;

/// One outcome per input row; mirrors `transform.outcome` in the WIT.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Rows(Vec<String>),
    Failed { code: String, message: String },
}

impl Outcome {
    fn failed(code: &str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

impl From<Failure> for Outcome {
    fn from(f: Failure) -> Self {
        Outcome::failed(f.code, f.message)
    }
}

pub struct LlmNode {
    options: LlmOptions,
    prompts: Prompts,
    template_hash: String,
}

impl LlmNode {
    pub fn configure(options_json: &str) -> Result<Self, String> {
        let options = LlmOptions::from_json(options_json)?;
        let prompts = Prompts::compile(&options.template, options.system_prompt.as_deref())?;
        let template_hash = hashing::template_hash(&options.template);
        Ok(Self {
            options,
            prompts,
            template_hash,
        })
    }

    pub fn output_fields(&self) -> Vec<String> {
        self.options.output_fields()
    }

    /// Renders every row first and sends all their requests in one executor call,
    /// so the rows of a batch wait on the endpoint together rather than in turn.
    pub fn process(&self, rows: &[String], host: &impl Host) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; rows.len()];
        let mut parsed: Vec<Option<Row>> = vec![None; rows.len()];
        let mut requests = Vec::new();
        for (index, text) in rows.iter().enumerate() {
            let row_index = index as u32;
            match self.prepare(row_index, text, host) {
                Ok((row, body)) => {
                    parsed[index] = Some(row);
                    requests.push(Request {
                        endpoint: self.options.endpoint.clone(),
                        body,
                        row: row_index,
                    });
                }
                Err(outcome) => outcomes[index] = Some(outcome),
            }
        }
        let rows_sent: Vec<u32> = requests.iter().map(|r| r.row).collect();
        let results = if requests.is_empty() {
            Vec::new()
        } else {
            host.send(requests)
        };
        if results.len() != rows_sent.len() {
            host.log(
                Level::Warn,
                &format!(
                    "executor returned {} results for {} requests",
                    results.len(),
                    rows_sent.len()
                ),
            );
        }
        let mut results = results.into_iter();
        for row_index in rows_sent {
            let index = row_index as usize;
            let outcome = match results.next() {
                Some(result) => match (chat::interpret(result), parsed[index].take()) {
                    (Ok(answer), Some(row)) => self.enrich(row, answer),
                    (Err(failure), _) => failure.into(),
                    (Ok(_), None) => Outcome::failed("internal_error", "row was not parsed"),
                },
                None => Outcome::failed("llm_call_failed", "the executor returned no result"),
            };
            outcomes[index] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::failed("internal_error", "row has no outcome")))
            .collect()
    }

    /// Parses the row, records its hashes and renders its request body.
    fn prepare(
        &self,
        row_index: u32,
        text: &str,
        host: &impl Host,
    ) -> Result<(Row, String), Outcome> {
        let row: Row = serde_json::from_str(text).map_err(|e| {
            Outcome::failed("invalid_row", format!("row is not a JSON object: {e}"))
        })?;
        host.attach(row_index, "template_hash", &self.template_hash);
        match hashing::variables_hash(&row) {
            Ok(hash) => host.attach(row_index, "variables_hash", &hash),
            Err(e) => host.log(Level::Debug, &e),
        }
        let prompt = self
            .prompts
            .render(&row)
            .map_err(|e| Outcome::failed("template_rendering_failed", e))?;
        Ok((row, chat::request_body(&self.options, &prompt)))
    }

    fn enrich(&self, mut row: Row, answer: chat::Answer) -> Outcome {
        let field = &self.options.response_field;
        row.insert(field.clone(), Value::String(answer.content));
        row.insert(format!("{field}_usage"), answer.usage);
        row.insert(format!("{field}_model"), answer.model);
        Outcome::Rows(vec![Value::Object(row).to_string()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{CallError, Response};
    use std::cell::RefCell;

    /// A scripted host: answers each request with the next scripted result and
    /// records everything the node asked of it.
    #[derive(Default)]
    struct ScriptedHost {
        replies: RefCell<Vec<Result<Response, CallError>>>,
        sent: RefCell<Vec<Request>>,
        attached: RefCell<Vec<(u32, String, String)>>,
    }

    impl ScriptedHost {
        fn replying(replies: Vec<Result<Response, CallError>>) -> Self {
            Self {
                replies: RefCell::new(replies),
                ..Default::default()
            }
        }
    }

    impl Host for ScriptedHost {
        fn send(&self, requests: Vec<Request>) -> Vec<Result<Response, CallError>> {
            let mut replies = self.replies.borrow_mut();
            let results = requests.iter().map(|_| replies.remove(0)).collect();
            self.sent.borrow_mut().extend(requests);
            results
        }
        fn attach(&self, row: u32, key: &str, value: &str) {
            self.attached
                .borrow_mut()
                .push((row, key.to_string(), value.to_string()));
        }
        fn log(&self, _level: Level, _message: &str) {}
    }

    fn answer(text: &str) -> Result<Response, CallError> {
        Ok(Response {
            status: 200,
            body: serde_json::json!({
                "model": "m",
                "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                "usage": {"total_tokens": 9}
            })
            .to_string(),
            attempts: 1,
            latency_ms: 1,
        })
    }

    fn node() -> LlmNode {
        LlmNode::configure(r#"{"template": "Classify: {{ row.text }}", "model": "m"}"#).unwrap()
    }

    #[test]
    fn each_row_gets_its_own_answer_in_order() {
        let host = ScriptedHost::replying(vec![answer("positive"), answer("negative")]);
        let rows = vec![
            r#"{"id":"1","text":"love it"}"#.to_string(),
            r#"{"id":"2","text":"hate it"}"#.to_string(),
        ];
        let out = node().process(&rows, &host);
        let texts: Vec<Value> = out
            .iter()
            .map(|o| match o {
                Outcome::Rows(r) => serde_json::from_str(&r[0]).unwrap(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(texts[0]["id"], "1");
        assert_eq!(texts[0]["llm_response"], "positive");
        assert_eq!(texts[1]["id"], "2");
        assert_eq!(texts[1]["llm_response"], "negative");
        assert_eq!(texts[1]["llm_response_usage"]["total_tokens"], 9);
        let sent = host.sent.borrow();
        assert_eq!(sent.len(), 2);
        assert!(sent[1].body.contains("Classify: hate it"));
        assert_eq!(sent[1].row, 1);
        assert_eq!(sent[0].endpoint, "llm");
    }

    #[test]
    fn a_template_error_fails_only_its_row_and_sends_nothing_for_it() {
        let host = ScriptedHost::replying(vec![answer("ok")]);
        let rows = vec![
            r#"{"id":"1"}"#.to_string(),
            r#"{"id":"2","text":"fine"}"#.to_string(),
        ];
        let out = node().process(&rows, &host);
        match &out[0] {
            Outcome::Failed { code, message } => {
                assert_eq!(code, "template_rendering_failed");
                assert!(message.contains("row.text"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(out[1], Outcome::Rows(_)));
        assert_eq!(host.sent.borrow().len(), 1);
        assert_eq!(host.sent.borrow()[0].row, 1);
    }

    #[test]
    fn call_failures_become_row_errors() {
        let host = ScriptedHost::replying(vec![
            Err(CallError::DeadlineExceeded("still 429".into())),
            answer("fine"),
        ]);
        let rows = vec![r#"{"text":"a"}"#.to_string(), r#"{"text":"b"}"#.to_string()];
        let out = node().process(&rows, &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "retry_timeout"));
        assert!(matches!(out[1], Outcome::Rows(_)));
    }

    #[test]
    fn hashes_are_attached_per_row() {
        let host = ScriptedHost::replying(vec![answer("x")]);
        node().process(&[r#"{"text":"a"}"#.to_string()], &host);
        let attached = host.attached.borrow();
        let keys: Vec<&str> = attached.iter().map(|(_, k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["template_hash", "variables_hash"]);
        assert_eq!(
            attached[0].2,
            hashing::template_hash("Classify: {{ row.text }}")
        );
    }

    #[test]
    fn a_row_that_is_not_an_object_fails_alone() {
        let host = ScriptedHost::replying(vec![answer("x")]);
        let out = node().process(&["[1,2]".to_string(), r#"{"text":"a"}"#.to_string()], &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "invalid_row"));
        assert!(matches!(out[1], Outcome::Rows(_)));
    }
}
