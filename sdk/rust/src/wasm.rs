//! The component side: the `weir:transform` bindings, the host as the real
//! imports, and the exports that [`crate::export_transform!`] wires to a
//! [`RawTransform`].

use crate::host::{
    CallError, ChatAnswer, ChatError, ChatRequest, Host, Level, Request, Response, Usage,
};
use crate::transform::RawTransform;
use std::any::Any;
use std::cell::RefCell;

pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.3.0",
        world: "node",
        pub_export_macro: true,
        export_macro_name: "export_node",
        default_bindings_module: "weir_sdk::wasm::bindings",
    });
}

use bindings::exports::weir::transform::transform::{ConfigError, NodeInfo, Outcome, RowError};
use bindings::weir::transform::{audit, chat, context, executor, log};

thread_local! {
    // A component instance is single-threaded and configured once before use.
    static NODE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

pub fn configure<T: RawTransform>(options: String) -> Result<NodeInfo, ConfigError> {
    let node = T::configure(&options, &WitHost).map_err(|e| ConfigError {
        path: e.path,
        message: e.message,
    })?;
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

    fn complete(&self, requests: Vec<ChatRequest>) -> Vec<Result<ChatAnswer, ChatError>> {
        let requests: Vec<chat::ChatRequest> = requests
            .into_iter()
            .map(|r| chat::ChatRequest {
                endpoint: r.endpoint,
                row: r.row,
                messages: r
                    .messages
                    .into_iter()
                    .map(|m| chat::Message {
                        role: m.role,
                        content: m.content,
                    })
                    .collect(),
                model: r.model,
                max_tokens: r.max_tokens,
                temperature: r.temperature,
                response_format: r.response_format,
                extra: r.extra,
            })
            .collect();
        chat::complete(&requests)
            .into_iter()
            .map(|result| result.map(chat_answer).map_err(chat_error))
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

fn chat_answer(a: chat::ChatAnswer) -> ChatAnswer {
    ChatAnswer {
        text: a.text,
        finish_reason: a.finish_reason,
        usage: a.usage.map(|u| Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        }),
        model: a.model,
        status: a.status,
        attempts: a.attempts,
        latency_ms: a.latency_ms,
        body: a.body,
    }
}

fn chat_error(e: chat::ChatError) -> ChatError {
    match e {
        chat::ChatError::Call(e) => ChatError::Call(call_error(e)),
        chat::ChatError::InvalidRequest(m) => ChatError::InvalidRequest(m),
        chat::ChatError::Unreadable(r) => ChatError::Unreadable(response(r)),
    }
}
