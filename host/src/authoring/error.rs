//! Why a guest could not be scaffolded or built.

use crate::context::Contextual;

/// An error of the crates that make components (wit-component, wit-parser,
/// wit-bindgen), with its causes.
pub type ToolError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    IoAt(#[from] Contextual<std::io::Error>),
    #[error(transparent)]
    Wasm(#[from] wasmparser::BinaryReaderError),
    #[error(transparent)]
    Tool(ToolError),
    /// A folder, a name or a toolchain weir cannot build with, or a build
    /// step that failed.
    #[error("{0}")]
    Invalid(String),
}

/// For `map_err`: an error of the component-making crates.
pub fn tool(error: impl Into<ToolError>) -> BuildError {
    BuildError::Tool(error.into())
}
