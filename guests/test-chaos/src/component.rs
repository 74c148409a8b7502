//! The `weir:transform` world bindings of the chaos guest.

wit_bindgen::generate!({
    path: "../../wit/0.1.0",
    world: "node",
});

use exports::weir::transform::transform::{self as wit, Guest, NodeInfo};

struct Component;

impl Guest for Component {
    fn configure(_options: String) -> Result<NodeInfo, String> {
        Ok(NodeInfo {
            output_fields: vec!["ok".into()],
        })
    }

    fn process(rows: Vec<String>) -> Vec<wit::Outcome> {
        rows.iter()
            .map(|row| match crate::act(row) {
                Ok(out) => wit::Outcome::Rows(vec![out]),
                Err(message) => wit::Outcome::Failed(wit::RowError {
                    code: "bad_row".into(),
                    message,
                }),
            })
            .collect()
    }
}

export!(Component);
