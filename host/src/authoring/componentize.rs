//! Turning a core wasm module that carries its WIT world (as wit-bindgen
//! embeds it) into a component, in-process: no `wasm-tools` needed.

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};

use super::BuildError;
use super::error::tool;

type Result<T, E = BuildError> = std::result::Result<T, E>;

pub fn componentize(core: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = wit_component::ComponentEncoder::default();
    encoder.module(core).map_err(tool)?;
    // A module built against WASI preview 1 (C with stdio, say) gets the
    // adapter to WASI 0.2, which weir links with a context that grants nothing.
    if imports_module(core, WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME)? {
        encoder
            .adapter(
                WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
            .map_err(tool)?;
    }
    encoder.validate(true);
    encoder.encode().map_err(tool)
}

fn imports_module(core: &[u8], module: &str) -> Result<bool> {
    for payload in wasmparser::Parser::new(0).parse_all(core) {
        if let wasmparser::Payload::ImportSection(imports) = payload? {
            for import in imports.into_imports() {
                if import?.module == module {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}
