//! Finds a way to compile Rust to `wasm32-unknown-unknown` on this machine.
//!
//! A rustup toolchain with the target installed is the normal path. Where
//! rustup cannot download targets, Debian's `rustc-web` with `rust-web-src`
//! builds the standard library from source instead (`-Zbuild-std`).

use std::path::Path;
use std::process::Command;

use super::BuildError;

type Result<T, E = BuildError> = std::result::Result<T, E>;

pub const TARGET: &str = "wasm32-unknown-unknown";

pub enum Toolchain {
    Rustup,
    DebianBuildStd,
}

impl Toolchain {
    pub fn detect() -> Result<Self> {
        if rustup_has_target() {
            return Ok(Toolchain::Rustup);
        }
        if Path::new("/usr/bin/rustc").exists()
            && Path::new("/usr/lib/rustlib/src/rust/library").exists()
            && which("wasm-ld-16")
        {
            return Ok(Toolchain::DebianBuildStd);
        }
        Err(BuildError::Invalid(format!(
            "no Rust toolchain for {TARGET} was found. Install one of:\n  \
             rustup target add {TARGET}\n  \
             apt-get install rustc-web cargo-web rust-web-src lld-16   (Debian 12)"
        )))
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Toolchain::Rustup => "rustup toolchain with the wasm32-unknown-unknown target",
            Toolchain::DebianBuildStd => "Debian rustc-web, standard library built from source",
        }
    }

    /// A `cargo build` for the wasm target; the caller adds what to build
    /// (`--package`, `--manifest-path`) and the profile.
    pub fn cargo_build(&self) -> Command {
        let mut cmd = match self {
            Toolchain::Rustup => Command::new(std::env::var("CARGO").unwrap_or("cargo".into())),
            Toolchain::DebianBuildStd => {
                // Debian's cargo would otherwise pick up rustup's rustc from PATH.
                let mut c = Command::new("/usr/bin/cargo");
                c.env("RUSTC", "/usr/bin/rustc")
                    .env("RUSTDOC", "/usr/bin/rustdoc")
                    .env("RUSTC_BOOTSTRAP", "1")
                    .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", "wasm-ld-16")
                    .env_remove("RUSTUP_TOOLCHAIN");
                c
            }
        };
        cmd.args(["build", "--target", TARGET]);
        if let Toolchain::DebianBuildStd = self {
            cmd.arg("-Zbuild-std=std,panic_abort");
        }
        cmd
    }
}

fn rustup_has_target() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
        })
        .unwrap_or(false)
}

pub fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}
