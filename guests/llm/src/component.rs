//! The `weir:transform` world bindings: a thin adapter over `LlmNode`.

use crate::host::{CallError, Host, Level, Request, Response};
use crate::node::{LlmNode, Outcome};
use std::cell::RefCell;

wit_bindgen::generate!({
    path: "../../wit/0.2.0",
    world: "node",
});

use exports::weir::transform::transform::{self as wit, Guest, NodeInfo};
use weir::transform::{audit, executor, log};

thread_local! {
    // A component instance is single-threaded and configured once before use.
    static NODE: RefCell<Option<LlmNode>> = const { RefCell::new(None) };
}

struct Component;

impl Guest for Component {
    fn configure(options: String) -> Result<NodeInfo, String> {
        let node = LlmNode::configure(&options)?;
        let info = NodeInfo {
            output_fields: node.output_fields(),
        };
        NODE.with(|slot| *slot.borrow_mut() = Some(node));
        Ok(info)
    }

    fn process(rows: Vec<String>) -> Vec<wit::Outcome> {
        NODE.with(|slot| match slot.borrow().as_ref() {
            Some(node) => node
                .process(&rows, &WitHost)
                .into_iter()
                .map(to_wit)
                .collect(),
            None => rows
                .iter()
                .map(|_| {
                    wit::Outcome::Failed(wit::RowError {
                        code: "not_configured".into(),
                        message: "process was called before configure".into(),
                    })
                })
                .collect(),
        })
    }
}

fn to_wit(outcome: Outcome) -> wit::Outcome {
    match outcome {
        Outcome::Rows(rows) => wit::Outcome::Rows(rows),
        Outcome::Failed { code, message } => wit::Outcome::Failed(wit::RowError { code, message }),
    }
}

struct WitHost;

impl Host for WitHost {
    fn send(&self, requests: Vec<Request>) -> Vec<Result<Response, CallError>> {
        let requests: Vec<executor::Request> = requests
            .into_iter()
            .map(|r| executor::Request {
                endpoint: r.endpoint,
                body: r.body,
                row: r.row,
            })
            .collect();
        executor::send(&requests)
            .into_iter()
            .map(|result| result.map(from_wit_response).map_err(from_wit_error))
            .collect()
    }

    fn attach(&self, row: u32, key: &str, value: &str) {
        audit::attach(row, key, value);
    }

    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
        };
        log::log(level, message);
    }
}

fn from_wit_response(r: executor::Response) -> Response {
    Response {
        status: r.status,
        body: r.body,
        attempts: r.attempts,
        latency_ms: r.latency_ms,
    }
}

fn from_wit_error(e: executor::CallError) -> CallError {
    match e {
        executor::CallError::Denied(m) => CallError::Denied(m),
        executor::CallError::Status(r) => CallError::Status(from_wit_response(r)),
        executor::CallError::DeadlineExceeded(m) => CallError::DeadlineExceeded(m),
        executor::CallError::Transport(m) => CallError::Transport(m),
    }
}

export!(Component);
