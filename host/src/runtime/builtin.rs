//! Guest components shipped inside the `weir` binary, so `cargo install` users
//! have them without a wasm toolchain. Built by `cargo xtask build-guests`.

use crate::config::ComponentRef;

pub struct Builtin {
    pub name: &'static str,
    pub bytes: &'static [u8],
}

pub const BUILTINS: &[Builtin] = &[Builtin {
    name: "llm",
    bytes: include_bytes!("../../../guests/dist/llm.wasm"),
}];

pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.name).collect()
}

/// The bytes of a component and how to name it in messages.
pub fn read(component: &ComponentRef) -> Result<(Vec<u8>, String), String> {
    match component {
        ComponentRef::Builtin(name) => match find(name) {
            Some(b) => Ok((b.bytes.to_vec(), format!("built-in component `{name}`"))),
            None => Err(format!(
                "`{name}` is not a built-in component (built-ins: {}); a component file \
                 is given by a path ending in .wasm",
                names().join(", ")
            )),
        },
        ComponentRef::File(path) => std::fs::read(path)
            .map(|bytes| (bytes, path.display().to_string()))
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
    }
}
