//! `weir:transform@0.3.0`: the current contract.

wasmtime::component::bindgen!({
    path: "../wit/0.3.0",
    world: "node",
    // `send` and `complete` may stop the component: a row that waits on a
    // provider batch drops its instance and runs again once the answers are in.
    imports: {
        "weir:transform/executor.send": async | trappable,
        "weir:transform/chat.complete": async | trappable,
        default: async,
    },
    exports: { default: async },
});

// The host side of the 0.3.0 imports: the guest-facing surface of this
// contract version, in one place.

use super::{CallError, Level, Request, Response};
use crate::runtime::state::GuestState;
use weir::transform::chat::{ChatAnswer, ChatError, ChatRequest};

impl weir::transform::types::Host for GuestState {}

impl weir::transform::executor::Host for GuestState {
    async fn send(
        &mut self,
        requests: Vec<Request>,
    ) -> wasmtime::Result<Vec<Result<Response, CallError>>> {
        GuestState::send(self, requests).await
    }
}

impl weir::transform::chat::Host for GuestState {
    async fn complete(
        &mut self,
        requests: Vec<ChatRequest>,
    ) -> wasmtime::Result<Vec<Result<ChatAnswer, ChatError>>> {
        GuestState::complete(self, requests).await
    }
}

impl weir::transform::audit::Host for GuestState {
    async fn attach(&mut self, row: u32, key: String, value: String) {
        GuestState::attach(self, row, key, value)
    }
}

impl weir::transform::log::Host for GuestState {
    async fn log(&mut self, level: Level, message: String) {
        GuestState::log(self, level, message)
    }
}

impl weir::transform::context::Host for GuestState {
    async fn node_name(&mut self) -> String {
        GuestState::node_name(self)
    }

    async fn endpoints(&mut self) -> Vec<String> {
        self.granted_endpoints()
    }
}
