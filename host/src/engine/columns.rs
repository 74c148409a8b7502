//! The fields rows carry from node to node: the sinks' CSV header, and the
//! check that no node writes a field its rows already have.

use super::setup::Node;
use crate::config::{BatchMode, PipelineFile};
use std::sync::Arc;

use super::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

/// The fields after the last node, in order (`None` when the source does not
/// say its fields up front, as with JSON Lines). A node whose output field is
/// already on its input rows (a source column, or an earlier node's output)
/// is refused: one would silently overwrite the other.
pub fn through_nodes(
    file: &PipelineFile,
    source: Option<Vec<String>>,
    nodes: &[Arc<Node>],
) -> Result<Option<Vec<String>>> {
    let mut known = source.clone().unwrap_or_default();
    let mut complete = source.is_some();
    for node in nodes {
        let transform = node
            .config
            .batch
            .as_ref()
            .is_some_and(|b| b.mode == BatchMode::Transform);
        if transform {
            // A batch's output rows are new rows: only its own fields.
            known.clear();
            complete = true;
        }
        for field in node.runtime.output_fields() {
            if known.contains(field) {
                let whose = if transform {
                    "its own output"
                } else {
                    "its input rows"
                };
                return Err(file.error_at(
                    &["transforms", &node.config.index.to_string(), "options"],
                    format!(
                        "transform `{}` writes the field `{field}`, which {whose} already have; \
                         rename the output (e.g. `response_field` or the query's outputs)",
                        node.config.name
                    ),
                )
                .into());
            }
            known.push(field.clone());
        }
    }
    Ok(complete.then_some(known))
}
