//! The built-in `llm` transform: renders a prompt from each row, asks a chat model
//! through the host's executor and writes the answer onto the row.
//!
//! Everything but `component` is plain Rust that runs and is tested natively; the
//! `component` module only adapts it to the `weir:transform` world.

pub mod bundle;
pub mod chat;
pub mod hashing;
pub mod host;
pub mod node;
pub mod options;
pub mod parse;
pub mod prompt;

#[cfg(target_arch = "wasm32")]
mod component;
