//! C guests: bindings generated in-process by wit-bindgen's C generator,
//! every `.c` file compiled by clang for `wasm32-wasi` as a reactor, then
//! made a component.

use crate::context::Context;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::BuildError;
use super::error::tool;

type Result<T, E = BuildError> = std::result::Result<T, E>;

pub fn build(dir: &Path, work: &Path) -> Result<Vec<u8>> {
    let gen_dir = work.join("gen");
    generate_bindings(&gen_dir)?;
    let (clang, sysroot) = find_clang()?;
    let mut sources = Vec::new();
    let mut include_dirs = vec![gen_dir.clone()];
    collect(dir, &mut sources, &mut include_dirs)?;
    for entry in std::fs::read_dir(&gen_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "c" || e == "o") {
            sources.push(path);
        }
    }
    let core = work.join("core.wasm");
    let mut command = Command::new(&clang);
    command.args([
        "--target=wasm32-wasi",
        "-Oz",
        "-mexec-model=reactor",
        "-Wl,--strip-all,--gc-sections",
    ]);
    if let Some(sysroot) = sysroot {
        command.arg(format!("--sysroot={}", sysroot.display()));
    }
    for include in &include_dirs {
        command.arg("-I").arg(include);
    }
    command.args(&sources).arg("-o").arg(&core);
    super::run(command, "clang")?;
    super::componentize(&std::fs::read(&core)?)
}

fn generate_bindings(gen_dir: &Path) -> Result<()> {
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve
        .push_str("transform.wit", super::CONTRACT_WIT)
        .map_err(tool)?;
    let world = resolve
        .select_world(&[package], Some("node"))
        .map_err(tool)?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(tool)?;
    std::fs::create_dir_all(gen_dir)?;
    for (name, bytes) in files.iter() {
        std::fs::write(gen_dir.join(name), bytes)?;
    }
    Ok(())
}

/// `$WASI_SDK_PATH`'s clang with its sysroot, else a clang whose WASI
/// sysroot is installed where it looks (Debian's clang-16 with wasi-libc).
fn find_clang() -> Result<(PathBuf, Option<PathBuf>)> {
    if let Some(sdk) = std::env::var_os("WASI_SDK_PATH") {
        let sdk = PathBuf::from(sdk);
        return Ok((sdk.join("bin/clang"), Some(sdk.join("share/wasi-sysroot"))));
    }
    for clang in ["clang-16", "clang-17", "clang-18", "clang-19", "clang"] {
        if super::toolchain::which(clang) {
            return Ok((PathBuf::from(clang), None));
        }
    }
    Err(BuildError::Invalid(
        "no clang was found. Install wasi-sdk and set WASI_SDK_PATH, or on Debian 12:\n  \
         apt-get install clang-16 lld-16 wasi-libc libclang-rt-16-dev-wasm32"
            .into(),
    ))
}

/// The guest's `.c` files and the folders of its headers, leaving out what
/// builds generate.
fn collect(dir: &Path, sources: &mut Vec<PathBuf>, include_dirs: &mut Vec<PathBuf>) -> Result<()> {
    let mut has_header = false;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .ok_or_else(|| BuildError::Invalid(format!("{} has no file name", path.display())))?;
        if path.is_dir() {
            if !matches!(
                name.to_str(),
                Some("build" | "target" | "node_modules" | ".git")
            ) {
                collect(&path, sources, include_dirs)?;
            }
        } else if path.extension().is_some_and(|e| e == "c") {
            sources.push(path);
        } else if path.extension().is_some_and(|e| e == "h") {
            has_header = true;
        }
    }
    if has_header {
        include_dirs.push(dir.to_path_buf());
    }
    Ok(())
}
