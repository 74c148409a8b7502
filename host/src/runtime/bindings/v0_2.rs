//! `weir:transform@0.2.0`: the current contract.

wasmtime::component::bindgen!({
    path: "../wit/0.2.0",
    world: "node",
    imports: { default: async },
    exports: { default: async },
});
