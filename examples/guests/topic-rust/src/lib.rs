//! `topic`: labels each row's text with one of the configured topics, asked
//! of a chat model.
//!
//! Options (the node's `options:` in the pipeline file):
//! - `labels` (required): the topics to choose from;
//! - `field` (default `text`): the row field to classify;
//! - `output` (default `topic`): the field the label is written to;
//! - `model`: sent as the request's model when given;
//! - `endpoint`: which granted endpoint to ask; by default the only one.
//!
//! Row errors: `missing_field`, `unknown_label` (the model answered something
//! else), and the chat codes of `weir_sdk::chat::answer`.

use serde::Deserialize;
use serde_json::Value;
use weir_sdk::chat::Chat;
use weir_sdk::{ConfigError, NodeCx, Row, RowCx, RowError, Transform};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    labels: Vec<String>,
    #[serde(default = "default_field")]
    field: String,
    #[serde(default = "default_output")]
    output: String,
    model: Option<String>,
    endpoint: Option<String>,
}

fn default_field() -> String {
    "text".into()
}

fn default_output() -> String {
    "topic".into()
}

pub struct Topic {
    options: Options,
    endpoint: String,
    system_prompt: String,
}

impl Transform for Topic {
    fn configure(options: Value, node: &NodeCx) -> Result<Self, ConfigError> {
        let options: Options = weir_sdk::options(options)?;
        if options.labels.is_empty() {
            return Err(ConfigError::at(&["labels"], "give at least one label"));
        }
        let endpoint = node.endpoint(options.endpoint.as_deref())?;
        let system_prompt = format!(
            "Classify the text into exactly one of these labels: {}. Answer with the label only.",
            options.labels.join(", ")
        );
        Ok(Topic {
            options,
            endpoint,
            system_prompt,
        })
    }

    fn output_fields(&self) -> Vec<String> {
        vec![self.options.output.clone()]
    }

    fn process_row(&self, mut row: Row, cx: &RowCx) -> Result<Vec<Row>, RowError> {
        let text = row.str_field(&self.options.field)?;
        let chat = Chat::new()
            .model(self.options.model.as_deref())
            .temperature(0.0)
            .system(self.system_prompt.as_str())
            .user(text);
        let answer = cx.chat(&self.endpoint, &chat)?;
        let label = self.label(&answer).ok_or_else(|| {
            RowError::new(
                "unknown_label",
                format!(
                    "the model answered `{}`, which is not one of: {}",
                    answer.trim(),
                    self.options.labels.join(", ")
                ),
            )
        })?;
        row.set(&self.options.output, label);
        Ok(vec![row])
    }
}

impl Topic {
    /// The configured label the answer names, ignoring case, surrounding
    /// space and a final full stop.
    fn label(&self, answer: &str) -> Option<&str> {
        let answer = answer.trim().trim_end_matches('.').trim();
        self.options
            .labels
            .iter()
            .find(|label| label.eq_ignore_ascii_case(answer))
            .map(String::as_str)
    }
}

weir_sdk::export_transform!(Topic);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weir_sdk::testing::{self, MockHost};

    fn options() -> Value {
        json!({"labels": ["billing", "shipping", "other"]})
    }

    #[test]
    fn labels_the_row_with_what_the_model_answered() {
        let host = MockHost::new().grant("llm").reply_chat("llm", " Shipping.\n");
        let results =
            testing::run::<Topic>(&host, options(), vec![json!({"id": 7, "text": "Where is my parcel?"})])
                .unwrap();
        let rows = results[0].as_ref().unwrap();
        assert_eq!(rows[0].get("topic"), Some(&json!("shipping")));
        assert_eq!(rows[0].get("id"), Some(&json!(7)));
        let body = &host.request_bodies()[0];
        assert_eq!(body["messages"][1]["content"], "Where is my parcel?");
        assert!(body["messages"][0]["content"].as_str().unwrap().contains("billing, shipping, other"));
    }

    #[test]
    fn an_answer_outside_the_labels_fails_that_row_only() {
        let host = MockHost::new()
            .grant("llm")
            .reply_chat("llm", "weather")
            .reply_chat("llm", "billing");
        let results = testing::run::<Topic>(
            &host,
            options(),
            vec![json!({"text": "Is it raining?"}), json!({"text": "Refund me"})],
        )
        .unwrap();
        assert_eq!(results[0].as_ref().unwrap_err().code, "unknown_label");
        assert_eq!(results[1].as_ref().unwrap()[0].get("topic"), Some(&json!("billing")));
    }

    #[test]
    fn a_row_without_the_field_fails_without_a_call() {
        let host = MockHost::new().grant("llm");
        let results = testing::run::<Topic>(&host, options(), vec![json!({"body": "x"})]).unwrap();
        assert_eq!(results[0].as_ref().unwrap_err().code, "missing_field");
        assert!(host.requests().is_empty());
    }

    #[test]
    fn bad_options_name_the_option() {
        let host = MockHost::new().grant("a").grant("b");
        let err = testing::run::<Topic>(&host, json!({"labels": []}), vec![]).err().unwrap();
        assert_eq!(err.path, ["labels"]);
        let err = testing::run::<Topic>(&host, options(), vec![]).err().unwrap();
        assert_eq!(err.path, ["endpoint"]);
        let err = testing::run::<Topic>(&host, json!({"labels": ["x"], "colour": 1}), vec![])
            .err()
            .unwrap();
        assert_eq!(err.path, ["colour"]);
        assert!(err.message.contains("unknown field `colour`"), "{err}");
    }
}
