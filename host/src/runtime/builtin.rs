//! Guest components shipped inside the `weir` binary, so `cargo install` users
//! have them without a wasm toolchain. Built by `cargo xtask build-guests`.

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
