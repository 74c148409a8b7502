//! Host-side bindings of every released `weir:transform` contract.
//!
//! Each released version keeps its own bindings, generated from its own folder
//! under `wit/`, so a component built against an older contract keeps loading
//! after the contract grows. The newest version's types are the ones the rest
//! of the host works with; older versions are converted at the boundary.

pub mod v0_1;
pub mod v0_2;

pub use v0_2::exports::weir::transform::transform::{NodeInfo, Outcome};
pub use v0_2::weir::transform::executor::{CallError, Request, Response};
pub use v0_2::weir::transform::log::Level;
/// A row error as a component returns it.
pub use v0_2::weir::transform::types::RowError as GuestRowError;
