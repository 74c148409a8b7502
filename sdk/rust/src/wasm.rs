//! The component side: the `weir:transform` bindings, the host as the real
//! imports, and the exports that [`crate::export_transform!`] wires to a
//! [`RawTransform`].

use crate::host::{CallError, Host, Level, Request, Response};
use crate::transform::RawTransform;
use std::any::Any;
use std::cell::RefCell;

pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.2.0",
        world: "node",
        pub_export_macro: true,
        export_macro_name: "export_node",
        default_bindings_module: "weir_sdk::wasm::bindings",
    });
}

use bindings::exports::weir::transform::transform::{NodeInfo, Outcome, RowError};
use bindings::weir::transform::{audit, context, executor, log};

thread_local! {
    // A component instance is single-threaded and configured once before use.
    static NODE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

pub fn configure<T: RawTransform>(options: String) -> Result<NodeInfo, String> {
    let node = T::configure(&options, &WitHost)?;
    let info = NodeInfo {
        output_fields: node.output_fields(),
    };
    NODE.with(|slot| *slot.borrow_mut() = Some(Box::new(node)));
    Ok(info)
}

pub fn process<T: RawTransform>(rows: Vec<String>) -> Vec<Outcome> {
    NODE.with(|slot| {
        let slot = slot.borrow();
        let Some(node) = slot.as_ref().and_then(|n| n.downcast_ref::<T>()) else {
            let failed = || failed("not_configured", "process was called before configure");
            return rows.iter().map(|_| failed()).collect();
        };
        node.process(&rows, &WitHost)
            .into_iter()
            .map(|result| match result {
                Ok(rows) => Outcome::Rows(rows),
                Err(e) => failed(&e.code, &e.message),
            })
            .collect()
    })
}

fn failed(code: &str, message: &str) -> Outcome {
    Outcome::Failed(RowError {
        code: code.into(),
        message: message.into(),
    })
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
            .map(|result| result.map(response).map_err(call_error))
            .collect()
    }

    fn attach(&self, row: u32, key: &str, value: &str) {
        audit::attach(row, key, value);
    }

    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        };
        log::log(level, message);
    }

    fn node_name(&self) -> String {
        context::node_name()
    }

    fn endpoints(&self) -> Vec<String> {
        context::endpoints()
    }
}

fn response(r: executor::Response) -> Response {
    Response {
        status: r.status,
        body: r.body,
        attempts: r.attempts,
        latency_ms: r.latency_ms,
    }
}

fn call_error(e: executor::CallError) -> CallError {
    match e {
        executor::CallError::Denied(m) => CallError::Denied(m),
        executor::CallError::Status(r) => CallError::Status(response(r)),
        executor::CallError::DeadlineExceeded(m) => CallError::DeadlineExceeded(m),
        executor::CallError::Transport(m) => CallError::Transport(m),
    }
}
