//! `weir:transform@0.2.0`: its types are the same shapes as 0.3.0's, less
//! the `chat` import and the typed configure error; the functions here
//! convert between them.

wasmtime::component::bindgen!({
    path: "../wit/0.2.0",
    world: "node",
    // `send` may stop the component: a row that waits on a provider batch
    // drops its instance and runs again once the answers are in.
    imports: { "weir:transform/executor.send": async | trappable, default: async },
    exports: { default: async },
});

use super::v0_3;
use exports::weir::transform::transform as export;
use v0_3::weir::transform::executor as current;
use weir::transform::{executor, log};

pub fn request_to_current(r: executor::Request) -> current::Request {
    current::Request {
        endpoint: r.endpoint,
        body: r.body,
        row: r.row,
    }
}

pub fn response_from_current(r: current::Response) -> executor::Response {
    executor::Response {
        status: r.status,
        body: r.body,
        attempts: r.attempts,
        latency_ms: r.latency_ms,
    }
}

pub fn call_error_from_current(e: current::CallError) -> executor::CallError {
    match e {
        current::CallError::Denied(m) => executor::CallError::Denied(m),
        current::CallError::Status(r) => executor::CallError::Status(response_from_current(r)),
        current::CallError::DeadlineExceeded(m) => executor::CallError::DeadlineExceeded(m),
        current::CallError::Transport(m) => executor::CallError::Transport(m),
    }
}

pub fn level_to_current(level: log::Level) -> super::Level {
    use super::Level as Current;
    match level {
        log::Level::Trace => Current::Trace,
        log::Level::Debug => Current::Debug,
        log::Level::Info => Current::Info,
        log::Level::Warn => Current::Warn,
        log::Level::Error => Current::Error,
    }
}

pub fn node_info_to_current(info: export::NodeInfo) -> super::NodeInfo {
    super::NodeInfo {
        output_fields: info.output_fields,
    }
}

pub fn outcome_to_current(outcome: export::Outcome) -> super::Outcome {
    match outcome {
        export::Outcome::Rows(rows) => super::Outcome::Rows(rows),
        export::Outcome::Failed(e) => super::Outcome::Failed(super::GuestRowError {
            code: e.code,
            message: e.message,
        }),
    }
}

// The host side of the 0.2.0 imports: converted to 0.3.0's and handed on.

use crate::runtime::state::GuestState;

impl weir::transform::types::Host for GuestState {}

impl weir::transform::executor::Host for GuestState {
    async fn send(
        &mut self,
        requests: Vec<executor::Request>,
    ) -> wasmtime::Result<Vec<Result<executor::Response, executor::CallError>>> {
        let requests = requests.into_iter().map(request_to_current).collect();
        Ok(current::Host::send(self, requests)
            .await?
            .into_iter()
            .map(|result| {
                result
                    .map(response_from_current)
                    .map_err(call_error_from_current)
            })
            .collect())
    }
}

impl weir::transform::audit::Host for GuestState {
    async fn attach(&mut self, row: u32, key: String, value: String) {
        v0_3::weir::transform::audit::Host::attach(self, row, key, value).await
    }
}

impl weir::transform::log::Host for GuestState {
    async fn log(&mut self, level: log::Level, message: String) {
        v0_3::weir::transform::log::Host::log(self, level_to_current(level), message).await
    }
}

impl weir::transform::context::Host for GuestState {
    async fn node_name(&mut self) -> String {
        v0_3::weir::transform::context::Host::node_name(self).await
    }

    async fn endpoints(&mut self) -> Vec<String> {
        v0_3::weir::transform::context::Host::endpoints(self).await
    }
}
