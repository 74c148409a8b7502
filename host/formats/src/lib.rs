//! What weir reads and writes, kept apart from the runtime so that tools (and
//! fuzz targets) can parse weir's files without building a WebAssembly engine:
//! - [`config`]: the pipeline file;
//! - [`io`]: CSV and JSON Lines row sources and sinks;
//! - [`fixtures`]: the `weir test` fixtures file;
//! - [`types`]: rows and row errors;
//! - [`hashing`]: the hashes the audit trail records, over [`canonical`] JSON;
//! - [`http_headers`]: the waits an endpoint's response headers ask for.
//! - [`terminal`]: text from guests and endpoints made safe to print.
//! - [`yaml`]: YAML read within bounds, its errors located.
//!
//! Errors are typed, one enum per kind of file: [`config::ConfigError`],
//! [`io::SourceError`], [`io::SinkError`] and [`yaml::YamlError`]. Their
//! messages start with the file, and the line (and column) when known; an
//! operating system's error is kept as the `source` of the one that names
//! the file.

pub mod canonical;
pub mod config;
pub mod fixtures;
pub mod hashing;
pub mod http_headers;
pub mod io;
pub mod terminal;
pub mod types;
pub mod yaml;
