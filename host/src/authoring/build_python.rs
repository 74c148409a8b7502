//! Python guests: `app.py` made a component by componentize-py, which embeds
//! a Python interpreter. The guest's WASI imports are satisfied by weir's
//! sealed WASI (no files, clocks stopped, fixed randomness).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::BuildError;

type Result<T, E = BuildError> = std::result::Result<T, E>;

pub fn build(dir: &Path, wit_dir: &Path, work: &Path) -> Result<Vec<u8>> {
    let Some(tool) = componentize_py(dir) else {
        return Err(BuildError::Invalid(format!(
            "componentize-py was not found on PATH or in {}/.venv. Install it with:\n  \
             python3 -m venv .venv && .venv/bin/pip install -r requirements.txt",
            dir.display()
        )));
    };
    let out = work.join("component.wasm");
    let mut command = Command::new(tool);
    command
        .arg("-d")
        .arg(wit_dir)
        .args(["-w", "node", "componentize", "app", "-o"])
        .arg(&out)
        .current_dir(dir);
    // componentize-py finds the packages of a venv (weir_sdk, say) only
    // through VIRTUAL_ENV; the guest's own .venv is the one it builds with.
    let venv = dir.join(".venv");
    if venv.is_dir() {
        command.env("VIRTUAL_ENV", &venv);
    }
    super::run(command, "componentize-py")?;
    Ok(std::fs::read(out)?)
}

fn componentize_py(dir: &Path) -> Option<PathBuf> {
    let local = dir.join(".venv/bin/componentize-py");
    if local.is_file() {
        return Some(local);
    }
    super::toolchain::which("componentize-py").then(|| PathBuf::from("componentize-py"))
}
