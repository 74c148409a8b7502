//! What can go wrong setting up the engine or loading a component, and what
//! a trap says. A wasmtime error is not a `std::error::Error` itself; it is
//! kept as one (`into_boxed_dyn_error`), so its causes still print.

pub type WasmError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The engine or its linker cannot be set up.
    #[error(transparent)]
    Engine(WasmError),
    /// The bytes lack wasm's magic number: another file was named (a
    /// source file, a text file, an HTML error page saved as `.wasm`).
    #[error(
        "{origin} is not a WebAssembly file: it begins with {begins}, not wasm's `\\0asm`; \
         name the `.wasm` a component's build wrote (`weir guest build DIR`)"
    )]
    NotWasm { origin: String, begins: String },
    /// `origin` names the bytes: a file, or a built-in component.
    #[error("{origin} is not a loadable WebAssembly component")]
    NotAComponent {
        origin: String,
        #[source]
        source: WasmError,
    },
    #[error(transparent)]
    Compile(WasmError),
}

/// A trap as users read it: its cause, and what the guest last wrote to
/// stderr.
#[derive(Debug, thiserror::Error)]
#[error("{cause}{}", stderr_part(stderr))]
pub struct Trap {
    pub cause: String,
    pub stderr: String,
}

fn stderr_part(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; the component wrote to stderr:\n{stderr}")
    }
}
