//! TEST TOOL — asks each row's `text` of a chat model through the
//! `weir:transform@0.3.0` `chat` import, every row of a call in one
//! `complete`, and writes the typed answer onto the row: `answer`,
//! `finish_reason`, `input_tokens`, `output_tokens`, `answer_model`.
//!
//! Options: `endpoint` (default: the only granted one), `model`,
//! `max_tokens`, `params.temperature` (0 to 2), refused by its path, and
//! `params.stream`, sent as given.

use serde::Deserialize;
use serde_json::Value;
use weir_sdk::chat::Chat;
use weir_sdk::{ChatAnswer, ChatError, ConfigError, Host, NodeCx, Row, RowCx, RowError, Transform};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    endpoint: Option<String>,
    model: Option<String>,
    max_tokens: Option<u32>,
    #[serde(default)]
    params: Params,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Params {
    temperature: Option<f64>,
    stream: Option<bool>,
}

pub struct TestChat {
    endpoint: String,
    options: Options,
}

const FIELDS: [&str; 5] = [
    "answer",
    "finish_reason",
    "input_tokens",
    "output_tokens",
    "answer_model",
];

impl Transform for TestChat {
    fn configure(options: Value, node: &NodeCx) -> Result<Self, ConfigError> {
        let options: Options = weir_sdk::options(options)?;
        if let Some(t) = options.params.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ConfigError::at(
                &["params", "temperature"],
                format!("must be between 0 and 2, got {t}"),
            ));
        }
        let endpoint = node.endpoint(options.endpoint.as_deref())?;
        Ok(Self { endpoint, options })
    }

    fn output_fields(&self) -> Vec<String> {
        FIELDS.iter().map(|f| f.to_string()).collect()
    }

    fn process_row(&self, row: Row, cx: &RowCx) -> Result<Vec<Row>, RowError> {
        let chat = self.chat(row.str_field("text")?);
        fill(row, cx.complete(&self.endpoint, &chat))
    }

    /// Every row's request goes in one `complete`, as a provider batch takes them.
    fn process(&self, rows: Vec<Row>, host: &dyn Host) -> Vec<Result<Vec<Row>, RowError>> {
        let mut requests = Vec::new();
        let mut asked = Vec::new();
        for (index, row) in rows.iter().enumerate() {
            match row.str_field("text") {
                Ok(text) => {
                    requests.push(self.chat(text).request(&self.endpoint, index as u32));
                    asked.push(Ok(()));
                }
                Err(e) => asked.push(Err(e)),
            }
        }
        let mut answers = host.complete(requests).into_iter();
        rows.into_iter()
            .zip(asked)
            .map(|(row, asked)| {
                asked?;
                fill(row, answers.next().expect("one answer per request"))
            })
            .collect()
    }
}

fn fill(mut row: Row, result: Result<ChatAnswer, ChatError>) -> Result<Vec<Row>, RowError> {
    let answer = result.map_err(|e| RowError::new("chat_failed", e.to_string()))?;
    row.set("answer", answer.text);
    row.set("finish_reason", answer.finish_reason);
    let usage = answer.usage.map(|u| (u.input_tokens, u.output_tokens));
    row.set("input_tokens", usage.map(|u| u.0));
    row.set("output_tokens", usage.map(|u| u.1));
    row.set("answer_model", answer.model);
    Ok(vec![row])
}

impl TestChat {
    fn chat(&self, text: &str) -> Chat {
        let mut chat = Chat::new()
            .model(self.options.model.as_deref())
            .system("Answer briefly.")
            .user(text);
        if let Some(t) = self.options.params.temperature {
            chat = chat.temperature(t);
        }
        if let Some(m) = self.options.max_tokens {
            chat = chat.max_tokens(m);
        }
        if let Some(stream) = self.options.params.stream {
            chat = chat.param("stream", Value::Bool(stream));
        }
        chat
    }
}

weir_sdk::export_transform!(TestChat);
