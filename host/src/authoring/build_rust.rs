//! Rust guests: a `cdylib` crate built for `wasm32-unknown-unknown` with
//! whichever toolchain this machine has, then made a component.

use super::toolchain::Toolchain;
use crate::context::Context;
use std::path::Path;
use std::process::Stdio;

use super::BuildError;

type Result<T, E = BuildError> = std::result::Result<T, E>;

pub fn build(dir: &Path) -> Result<Vec<u8>> {
    let toolchain = Toolchain::detect()?;
    say!("  with the {}\n", toolchain.describe());
    let mut cargo = toolchain.cargo_build();
    cargo
        .args(["--release", "--message-format=json-render-diagnostics"])
        .current_dir(dir)
        .stdout(Stdio::piped());
    let output = cargo
        .spawn()
        .context("could not start cargo")?
        .wait_with_output()?;
    if !output.status.success() {
        return Err(BuildError::Invalid(format!(
            "cargo build failed ({})",
            output.status
        )));
    }
    let core_path = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .filter_map(|m| {
            m["filenames"].as_array().and_then(|files| {
                files
                    .iter()
                    .filter_map(|f| f.as_str())
                    .find(|f| f.ends_with(".wasm"))
                    .map(str::to_string)
            })
        })
        .next_back();
    let Some(core_path) = core_path else {
        return Err(BuildError::Invalid(
            "cargo built no .wasm library: the crate needs `crate-type = [\"cdylib\"]` under [lib]"
                .to_string(),
        ));
    };
    let core = std::fs::read(&core_path).with_context(|| format!("reading {core_path}"))?;
    super::componentize(&core)
}
