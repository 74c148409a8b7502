//! Host-side bindings of every released `weir:transform` contract.
//!
//! Each released version keeps its own bindings, generated from its own folder
//! under `wit/`, so a component built against an older contract keeps loading
//! after the contract grows. The newest version's types are the ones the rest
//! of the host works with; older versions are converted at the boundary, each
//! to the next one up.

pub mod v0_1;
pub mod v0_2;
pub mod v0_3;

pub use v0_3::exports::weir::transform::transform::{ConfigError, NodeInfo, Outcome};
pub use v0_3::weir::transform::chat::{ChatAnswer, ChatError, ChatRequest, Message, Usage};
pub use v0_3::weir::transform::executor::{CallError, Request, Response};
pub use v0_3::weir::transform::log::Level;
/// A row error as a component returns it.
pub use v0_3::weir::transform::types::RowError as GuestRowError;
