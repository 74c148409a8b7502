//! The `weir:transform` world bindings of the chaos guest.

wit_bindgen::generate!({
    path: "../../wit/0.1.0",
    world: "node",
});

use exports::weir::transform::transform::{self as wit, Guest, NodeInfo};
use weir::transform::{audit, executor, log};

struct Component;

/// The imports, on behalf of one row (its index in the current call).
struct RowHost(u32);

impl crate::Host for RowHost {
    fn log(&self, message: &str) {
        log::log(log::Level::Warn, message);
    }

    fn attach(&self, key: &str, value: &str) {
        audit::attach(self.0, key, value);
    }

    fn wait_on(&self, endpoint: &str) {
        let request = executor::Request {
            endpoint: endpoint.to_string(),
            body: r#"{"model":"chaos","messages":[{"role":"user","content":"hold"}]}"#.into(),
            row: self.0,
        };
        // Only the wait matters, not the answer.
        let _ = executor::send(&[request]);
    }
}

impl Guest for Component {
    fn configure(_options: String) -> Result<NodeInfo, String> {
        Ok(NodeInfo {
            output_fields: vec!["ok".into(), "fan".into()],
        })
    }

    fn process(rows: Vec<String>) -> Vec<wit::Outcome> {
        rows.iter()
            .enumerate()
            .map(|(i, row)| match crate::act(row, &RowHost(i as u32)) {
                Ok(out) => wit::Outcome::Rows(out),
                Err((code, message)) => wit::Outcome::Failed(wit::RowError { code, message }),
            })
            .collect()
    }
}

export!(Component);
