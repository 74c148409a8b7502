//! weir: run LLM batch pipelines whose transforms are sandboxed WebAssembly
//! components.
//!
//! Layers, each depending only on those below it:
//! - [`cli`]: the command line;
//! - [`engine`]: streams rows from the source through the nodes to the sinks;
//!   [`fixtures`] runs one node's component against scripted cases instead
//!   (`weir test`), and [`authoring`] scaffolds and builds guests;
//! - [`runtime`]: loads guest components and implements their imports on top of
//! - [`services`]: the pooled HTTP executor and the audit trail;
//! - [`config`], [`io`], [`types`], [`hashing`], [`terminal`]: the pipeline
//!   file, row readers and writers, shared data, and text made safe to print,
//!   from the `weir-formats` crate.

pub mod authoring;
pub mod cli;
pub mod engine;
pub mod fixtures;
pub mod runtime;
pub mod services;

pub use weir_formats::{config, hashing, io, terminal, types};
