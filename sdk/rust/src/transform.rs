//! The trait a transform implements, and what it is handed while it works.

use crate::chat::{self, Chat};
use crate::config_error::ConfigError;
use crate::host::{CallError, ChatAnswer, ChatError, Host, Level, Request, Response};
use crate::row::{Row, RowError};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A transform node. One value is built per component instance by
/// [`Transform::configure`] and then processes many calls of rows.
pub trait Transform: Sized + 'static {
    /// Builds the node from its `options` in the pipeline file (a JSON
    /// object). An error names the option at fault by its path, so weir can
    /// point at its line; text in the form `options.NAME: …` converts to one.
    fn configure(options: Value, node: &NodeCx) -> Result<Self, ConfigError>;

    /// The fields this node adds to rows, in order (the CSV columns it adds).
    fn output_fields(&self) -> Vec<String>;

    /// Processes one row: the rows that replace it (usually one), or an error
    /// that fails this row alone.
    fn process_row(&self, row: Row, cx: &RowCx) -> Result<Vec<Row>, RowError>;

    /// Processes the rows of one call, one result per row in order. The
    /// default handles them one by one; override it to send every row's
    /// requests in a single concurrent [`Host::send`].
    fn process(&self, rows: Vec<Row>, host: &dyn Host) -> Vec<Result<Vec<Row>, RowError>> {
        rows.into_iter()
            .enumerate()
            .map(|(index, row)| self.process_row(row, &RowCx::new(host, index as u32)))
            .collect()
    }
}

/// The contract as it is, rows as JSON text: for a transform that handles
/// rows and batches itself (weir's built-in `llm` does). Every [`Transform`]
/// is one; [`crate::export_transform!`] exports either.
pub trait RawTransform: Sized + 'static {
    /// Builds the node from its options, the JSON text of the pipeline file's
    /// `options:`.
    fn configure(options: &str, host: &dyn Host) -> Result<Self, ConfigError>;

    fn output_fields(&self) -> Vec<String>;

    /// One result per row (a JSON object each), in order: output rows as
    /// JSON text, or the row's error.
    fn process(&self, rows: &[String], host: &dyn Host) -> Vec<Result<Vec<String>, RowError>>;
}

impl<T: Transform> RawTransform for T {
    fn configure(options: &str, host: &dyn Host) -> Result<Self, ConfigError> {
        let options = serde_json::from_str(options)
            .map_err(|e| ConfigError::whole(format!("not valid JSON: {e}")))?;
        T::configure(options, &NodeCx::from_host(host))
    }

    fn output_fields(&self) -> Vec<String> {
        Transform::output_fields(self)
    }

    fn process(&self, rows: &[String], host: &dyn Host) -> Vec<Result<Vec<String>, RowError>> {
        let to_text = |result: Result<Vec<Row>, RowError>| {
            result.map(|rows| rows.iter().map(Row::to_json).collect())
        };
        match rows
            .iter()
            .map(|r| Row::parse(r))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(parsed) => Transform::process(self, parsed, host)
                .into_iter()
                .map(to_text)
                .collect(),
            // The host sends JSON objects; should one not be, it fails alone.
            Err(_) => rows
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    to_text(
                        Row::parse(text)
                            .and_then(|row| self.process_row(row, &RowCx::new(host, i as u32))),
                    )
                })
                .collect(),
        }
    }
}

/// What a node knows about itself while it is configured.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCx {
    /// The node's name in the pipeline file.
    pub name: String,
    /// The granted endpoints, in the pipeline file's order.
    pub endpoints: Vec<String>,
}

impl NodeCx {
    pub fn from_host(host: &dyn Host) -> Self {
        Self {
            name: host.node_name(),
            endpoints: host.endpoints(),
        }
    }

    /// The endpoint to use: `chosen` if given and granted, else the only
    /// granted one. The error is about `options.endpoint`.
    pub fn endpoint(&self, chosen: Option<&str>) -> Result<String, ConfigError> {
        match (chosen, self.endpoints.as_slice()) {
            (Some(name), granted) if granted.iter().any(|g| g == name) => Ok(name.to_string()),
            (Some(name), granted) => Err(ConfigError::at(
                &["endpoint"],
                format!(
                    "`{name}` is not granted to node `{}` (granted: {})",
                    self.name,
                    list(granted)
                ),
            )),
            (None, [only]) => Ok(only.clone()),
            (None, granted) => Err(ConfigError::at(
                &["endpoint"],
                format!(
                    "node `{}` is granted {} endpoints ({}); name the one to use",
                    self.name,
                    granted.len(),
                    list(granted)
                ),
            )),
        }
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The host, seen from one row of the current call: requests and audit
/// entries are filed under this row.
pub struct RowCx<'a> {
    host: &'a dyn Host,
    row: u32,
}

impl<'a> RowCx<'a> {
    pub fn new(host: &'a dyn Host, row: u32) -> Self {
        Self { host, row }
    }

    /// This row's index within the current call.
    pub fn index(&self) -> u32 {
        self.row
    }

    pub fn send(&self, endpoint: &str, body: String) -> Result<Response, CallError> {
        self.host
            .send(vec![Request {
                endpoint: endpoint.to_string(),
                body,
                row: self.row,
            }])
            .pop()
            .unwrap_or_else(|| Err(CallError::Transport("the host returned no result".into())))
    }

    /// Sends a chat request in the typed shape: the host writes the
    /// provider's body and reads its answer.
    pub fn complete(&self, endpoint: &str, chat: &Chat) -> Result<ChatAnswer, ChatError> {
        self.host
            .complete(vec![chat.request(endpoint, self.row)])
            .pop()
            .unwrap_or_else(|| {
                Err(ChatError::Call(CallError::Transport(
                    "the host returned no result".into(),
                )))
            })
    }

    /// Sends a chat request and returns the model's text answer.
    pub fn chat(&self, endpoint: &str, chat: &Chat) -> Result<String, RowError> {
        chat::completed(self.complete(endpoint, chat))
    }

    pub fn attach(&self, key: &str, value: &str) {
        self.host.attach(self.row, key, value);
    }

    pub fn log(&self, level: Level, message: &str) {
        self.host.log(level, message);
    }
}

/// Deserializes a node's options into `T`. An unknown field is refused by
/// its name, so weir points at its line.
pub fn options<T: DeserializeOwned>(options: Value) -> Result<T, ConfigError> {
    serde_json::from_value(options).map_err(|e| ConfigError::from(format!("options: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(endpoints: &[&str]) -> NodeCx {
        NodeCx {
            name: "tag".into(),
            endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn the_endpoint_is_the_chosen_or_the_only_one() {
        assert_eq!(node(&["llm"]).endpoint(None).unwrap(), "llm");
        assert_eq!(node(&["a", "b"]).endpoint(Some("b")).unwrap(), "b");
        let err = node(&["a", "b"]).endpoint(None).unwrap_err();
        assert_eq!(err.path, ["endpoint"]);
        assert!(err.message.contains("a, b"), "{err}");
        let err = node(&[]).endpoint(Some("x")).unwrap_err();
        assert!(err.message.contains("granted: none"), "{err}");
    }
}
