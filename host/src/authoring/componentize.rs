//! Turning a core wasm module that carries its WIT world (as wit-bindgen
//! embeds it) into a component, in-process: no `wasm-tools` needed.

use anyhow::Result;

pub fn componentize(core: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = wit_component::ComponentEncoder::default();
    encoder.module(core)?;
    encoder.validate(true);
    encoder.encode()
}
