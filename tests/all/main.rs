//! weir's end-to-end tests, as one binary: each drives the real `weir`
//! binary or the real host over loopback against the test LLM server (a test
//! tool, not a model), with real wasm components and a real SQLite audit
//! database. One binary links wasmtime once instead of once per file.

mod common;

mod bad_input;
mod batch;
mod contract_0_3;
mod disk_full;
mod executor;
mod guest_threads;
mod guests;
mod llm_output;
mod llm_requests;
mod money;
mod object_storage;
mod parking;
mod pipeline;
mod ray;
mod resume;
mod rows;
mod sandbox;
mod shards;
mod stopping;
mod tls;
