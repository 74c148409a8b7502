//! Developer tasks for the weir workspace.
//!
//! `cargo xtask build-guests` builds every built-in guest to a wasm component in
//! `guests/dist/` and records the hash of the sources each was built from.
//! `cargo xtask check-guests` fails when a committed component is stale.

mod guests;

use anyhow::{Result, bail};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("build-guests") => guests::build_all(&root),
        Some("check-guests") => guests::check_all(&root),
        _ => bail!(
            "usage: cargo xtask <build-guests | check-guests>\n  \
             build-guests  build every guest in guests/ into guests/dist/\n  \
             check-guests  fail if guests/dist/ is stale against its sources"
        ),
    }
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    /// The tests of the workspace load `guests/dist/`, so a component built
    /// from other sources than these would be tested in their place.
    #[test]
    fn the_committed_guest_components_are_built_from_these_sources() {
        if let Err(e) = super::guests::check_all(&super::workspace_root()) {
            panic!("{e:#}");
        }
    }
}
