//! The built-in `llm` transform: renders a prompt from each row, asks a chat model
//! through the host's executor and writes the answer onto the row.
//!
//! It is plain Rust that runs and is tested natively; `weir-sdk` makes it
//! the component's `weir:transform` implementation. Its options are listed
//! in the README's table of the `llm` transform; here, `options` reads them,
//! `endpoint` picks the endpoint, `prompt` renders, `chat` builds the
//! request (with `params` merged last and `format`'s output contract),
//! `parse` and `bundle` read the answers, and `node` drives a batch of rows
//! through it all.

pub mod bundle;
pub mod chat;
pub mod endpoint;
pub mod format;
pub mod hashing;
pub mod node;
pub mod options;
pub mod params;
pub mod parse;
pub mod prompt;

use weir_sdk::{ConfigError, Host, RawTransform, RowError};

impl RawTransform for node::LlmNode {
    /// Its messages name the option as `options.PATH`, which becomes the
    /// refusal's path.
    fn configure(options: &str, host: &dyn Host) -> Result<Self, ConfigError> {
        node::LlmNode::configure(options, &host.endpoints()).map_err(ConfigError::from)
    }

    fn output_fields(&self) -> Vec<String> {
        node::LlmNode::output_fields(self)
    }

    fn process(&self, rows: &[String], host: &dyn Host) -> Vec<Result<Vec<String>, RowError>> {
        node::LlmNode::process(self, rows, host)
            .into_iter()
            .map(|outcome| match outcome {
                node::Outcome::Rows(rows) => Ok(rows),
                node::Outcome::Failed { code, message } => Err(RowError { code, message }),
            })
            .collect()
    }
}

weir_sdk::export_transform!(node::LlmNode);
