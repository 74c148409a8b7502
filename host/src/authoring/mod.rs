//! Writing guests: scaffolding new ones (`weir guest new`) and building
//! them into components (`weir guest build`) in Rust, Python, JavaScript or
//! C, each with its language's own tools.

mod build_c;
mod build_js;
mod build_python;
mod build_rust;
mod componentize;
mod error;
mod scaffold;
pub mod toolchain;

pub use componentize::componentize;
pub use error::{BuildError, ToolError};
pub use scaffold::{Language, new_guest};

use crate::context::Context;
use std::path::{Path, PathBuf};
use std::process::Command;

type Result<T, E = BuildError> = std::result::Result<T, E>;

/// The contract new guests build against: the newest this host runs.
pub const CONTRACT_VERSION: &str = "0.3.0";
pub const CONTRACT_WIT: &str = include_str!("../../../wit/0.3.0/transform.wit");

/// Builds the guest in `dir` into `<dir>/<folder name>.wasm` (or `out`) and
/// returns the component's path.
pub fn build(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let dir = std::path::absolute(dir)?;
    if !dir.is_dir() {
        return Err(BuildError::Invalid(format!(
            "{} is not a folder",
            dir.display()
        )));
    }
    let language = Language::of(&dir)?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "guest".into());
    let out = match out {
        Some(path) => std::path::absolute(path)?,
        None => dir.join(format!("{name}.wasm")),
    };
    // Generated inputs (the WIT, C bindings) go under build/, never beside
    // the author's sources.
    let work = dir.join("build");
    std::fs::create_dir_all(&work)?;
    let wit_dir = work.join("wit");
    std::fs::create_dir_all(&wit_dir)?;
    std::fs::write(wit_dir.join("transform.wit"), CONTRACT_WIT)?;
    say!(
        "building the {} guest in {}\n",
        language.name(),
        dir.display()
    );
    let component = match language {
        Language::Rust => build_rust::build(&dir)?,
        Language::Python => build_python::build(&dir, &wit_dir, &work)?,
        Language::Js => build_js::build(&dir, &wit_dir, &work)?,
        Language::C => build_c::build(&dir, &work)?,
    };
    std::fs::write(&out, &component).with_context(|| format!("writing {}", out.display()))?;
    say!("wrote {} ({} KB)\n", out.display(), component.len() / 1024);
    Ok(out)
}

/// Runs `command`, failing with its name and output when it fails.
fn run(mut command: Command, what: &str) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("could not start {what} ({:?})", command.get_program()))?;
    if !status.success() {
        return Err(BuildError::Invalid(format!("{what} failed ({status})")));
    }
    Ok(())
}
