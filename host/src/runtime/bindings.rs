//! Host-side bindings of the `weir:transform@0.1.0` world.

wasmtime::component::bindgen!({
    path: "../wit/0.1.0",
    world: "node",
    imports: { default: async },
    exports: { default: async },
});

pub use self::exports::weir::transform::transform::{NodeInfo, Outcome};
pub use self::weir::transform::executor::{CallError, Request, Response};
pub use self::weir::transform::log::Level;
/// A row error as a component returns it.
pub use self::weir::transform::types::RowError as GuestRowError;

/// The contract version the bindings above were generated from.
pub const WIT_VERSION: &str = "0.1.0";
