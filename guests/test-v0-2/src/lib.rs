//! TEST TOOL — a component of the `weir:transform@0.2.0` contract, written
//! against its own bindings and never moved to a newer one, so tests can run
//! a 0.2.0 component beside newer ones. It writes the node's name, as the
//! 0.2.0 `context` import gives it, into `v2_node`, and refuses any option.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({
        path: "../../wit/0.2.0",
        world: "node",
    });

    use exports::weir::transform::transform::{Guest, NodeInfo, Outcome, RowError};
    use weir::transform::context;

    struct Component;

    impl Guest for Component {
        fn configure(options: String) -> Result<NodeInfo, String> {
            match serde_json::from_str::<serde_json::Value>(&options) {
                Ok(serde_json::Value::Object(map)) if map.is_empty() => Ok(NodeInfo {
                    output_fields: vec!["v2_node".into()],
                }),
                Ok(serde_json::Value::Object(map)) => {
                    let name = map.keys().next().cloned().unwrap_or_default();
                    Err(format!("options.{name}: this component takes no options"))
                }
                _ => Err("options: expected a mapping".into()),
            }
        }

        fn process(rows: Vec<String>) -> Vec<Outcome> {
            let node = context::node_name();
            rows.iter()
                .map(
                    |text| match serde_json::from_str::<serde_json::Value>(text) {
                        Ok(serde_json::Value::Object(mut row)) => {
                            row.insert("v2_node".into(), node.clone().into());
                            Outcome::Rows(vec![serde_json::Value::Object(row).to_string()])
                        }
                        _ => Outcome::Failed(RowError {
                            code: "not_an_object".into(),
                            message: "the row is not a JSON object".into(),
                        }),
                    },
                )
                .collect()
        }
    }

    export!(Component);
}
