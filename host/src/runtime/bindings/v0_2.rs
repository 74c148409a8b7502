//! `weir:transform@0.2.0`: the current contract.

wasmtime::component::bindgen!({
    path: "../wit/0.2.0",
    world: "node",
    // `send` may stop the component: a row that waits on a provider batch
    // drops its instance and runs again once the answers are in.
    imports: { "weir:transform/executor.send": async | trappable, default: async },
    exports: { default: async },
});
