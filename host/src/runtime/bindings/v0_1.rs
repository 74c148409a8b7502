//! `weir:transform@0.1.0`: the first released contract. Its types are the
//! same shapes as 0.2.0's; the functions here convert between them.

wasmtime::component::bindgen!({
    path: "../wit/0.1.0",
    world: "node",
    // `send` may stop the component: a row that waits on a provider batch
    // drops its instance and runs again once the answers are in.
    imports: { "weir:transform/executor.send": async | trappable, default: async },
    exports: { default: async },
});

use super::v0_2;
use exports::weir::transform::transform as export;
use weir::transform::{executor, log};

pub fn request_to_current(r: executor::Request) -> v0_2::weir::transform::executor::Request {
    v0_2::weir::transform::executor::Request {
        endpoint: r.endpoint,
        body: r.body,
        row: r.row,
    }
}

pub fn response_from_current(r: v0_2::weir::transform::executor::Response) -> executor::Response {
    executor::Response {
        status: r.status,
        body: r.body,
        attempts: r.attempts,
        latency_ms: r.latency_ms,
    }
}

pub fn call_error_from_current(
    e: v0_2::weir::transform::executor::CallError,
) -> executor::CallError {
    use v0_2::weir::transform::executor::CallError as Current;
    match e {
        Current::Denied(m) => executor::CallError::Denied(m),
        Current::Status(r) => executor::CallError::Status(response_from_current(r)),
        Current::DeadlineExceeded(m) => executor::CallError::DeadlineExceeded(m),
        Current::Transport(m) => executor::CallError::Transport(m),
    }
}

pub fn level_to_current(level: log::Level) -> v0_2::weir::transform::log::Level {
    use v0_2::weir::transform::log::Level as Current;
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

// The host side of the 0.1.0 imports: converted to 0.2.0's and handed on.

use crate::runtime::state::GuestState;

impl weir::transform::types::Host for GuestState {}

impl weir::transform::executor::Host for GuestState {
    async fn send(
        &mut self,
        requests: Vec<weir::transform::executor::Request>,
    ) -> wasmtime::Result<
        Vec<Result<weir::transform::executor::Response, weir::transform::executor::CallError>>,
    > {
        let requests = requests.into_iter().map(request_to_current).collect();
        Ok(v0_2::weir::transform::executor::Host::send(self, requests)
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
        v0_2::weir::transform::audit::Host::attach(self, row, key, value).await
    }
}

impl weir::transform::log::Host for GuestState {
    async fn log(&mut self, level: weir::transform::log::Level, message: String) {
        v0_2::weir::transform::log::Host::log(self, level_to_current(level), message).await
    }
}
