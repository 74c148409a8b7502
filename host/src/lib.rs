//! weir: run LLM batch pipelines whose transforms are sandboxed WebAssembly
//! components.
//!
//! Layers, each depending only on those below it:
//! - [`cli`]: the command line (argument parsing, signals, what `weir runs`
//!   and `weir explain` print);
//! - [`engine`]: streams rows from the source through the nodes to the sinks
//!   (`setup` builds the parts, `stage` runs a node on a row, `ordered` keeps
//!   source order, `drain` writes and commits, `resume` and `merge`);
//!   [`fixtures`] runs one node's component against scripted cases instead
//!   (`weir test`), and [`authoring`] scaffolds and builds guests;
//! - [`runtime`]: loads guest components and runs their instances: `pool`
//!   (instances per node), `state` (what a store holds), `bindings` (the
//!   imports of each contract version, one module per version), `calls` (what
//!   a component's request becomes), `wasi` (the sealed WASI), `limits`;
//! - [`services`]: what the host grants guests and runs on their behalf:
//!   `executor` (the pooled HTTP executor: limits, pacing, retries, breaker),
//!   `batch` (providers' Batch APIs), `audit` (the SQLite trail, replay and
//!   history), `cost`, `budget`, `cache` and `stop`;
//! - [`config`], [`io`], [`types`], [`hashing`], [`terminal`]: the pipeline
//!   file, row readers and writers, shared data, and text made safe to print,
//!   from the `weir-formats` crate.
//!
//! Errors are typed at each area's boundary, with `thiserror`: one enum per
//! area ([`engine::RunError`] and [`engine::MergeError`],
//! [`services::audit::AuditError`], [`services::batch::BatchError`],
//! [`services::executor::EndpointError`], [`services::cache::CacheError`],
//! [`runtime::LoadError`], [`fixtures::FixturesError`],
//! [`authoring::BuildError`]), whose variants hold the errors of the areas
//! below as their `source`. An operating system, SQLite or JSON error gets
//! what weir was doing through [`context::Context`], so every message says
//! where and its causes still say why. Only [`cli`] turns them into
//! `anyhow` errors, to print them with their causes.

/// `eprint!` that never panics. A run whose stderr is closed (a pipe whose
/// reader quit) must still stop on a signal and upload its outputs; what it
/// would have said is lost, the work is not.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

pub mod authoring;
pub mod cli;
pub mod context;
pub mod engine;
pub mod fixtures;
pub mod runtime;
pub mod services;

pub use weir_formats::{config, hashing, io, terminal, types};
