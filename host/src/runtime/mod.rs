//! Loading guest components and running their instances.

pub mod bindings;
pub mod builtin;
mod cache;
pub mod cache_dir;
mod calls;
mod chat;
pub mod contract;
pub mod cpu_time;
mod error;
mod limits;
mod output;
mod parking;
mod pool;
mod refused;
mod state;
mod stderr;
mod ticker;
mod wasi;

pub use error::{LoadError, Trap, WasmError};
pub use limits::LimitHit;

pub use pool::{GuestInstance, Interrupted, NodeRuntime, NodeSetupError, Unavailable};
pub use refused::RefusedOptions;
pub use state::{NodeServices, Outbound, RowScope, Script};

use state::GuestState;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

fn engine_error(e: wasmtime::Error) -> LoadError {
    LoadError::Engine(e.into_boxed_dyn_error())
}

/// One engine and linker for the whole run; components compiled once each.
pub struct Runtime {
    engine: Engine,
    linker: Linker<GuestState>,
    cache: cache::ComponentCache,
    ticker: ticker::EpochTicker,
}

/// A compiled component and the hash of the bytes it came from.
#[derive(Clone)]
pub struct LoadedComponent {
    pub component: Component,
    pub sha256: String,
}

impl Runtime {
    pub fn new() -> Result<Self, LoadError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(engine_error)?;
        let ticker = ticker::EpochTicker::start(&engine);
        let mut linker = Linker::new(&engine);
        // Every supported contract is linked: each component picks its own.
        bindings::v0_1::Node::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(engine_error)?;
        bindings::v0_2::Node::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(engine_error)?;
        bindings::v0_3::Node::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(engine_error)?;
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        wasi::stop_sleeps(&mut linker).map_err(engine_error)?;
        let cache = cache::ComponentCache::new(&engine);
        Ok(Self {
            engine,
            linker,
            cache,
            ticker,
        })
    }

    /// Compiles `bytes` (or takes them from the cache); `origin` names them in errors.
    pub fn load(&self, bytes: &[u8], origin: &str) -> Result<LoadedComponent, LoadError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError::NotWasm {
                origin: origin.to_string(),
                begins: first_bytes(bytes),
            });
        }
        self.cache
            .get_or_compile(&self.engine, bytes)
            .map_err(|e| LoadError::NotAComponent {
                origin: origin.to_string(),
                source: e.into_boxed_dyn_error(),
            })
    }

    /// Compiles without consulting or filling the cache (for measurements).
    pub fn compile_uncached(&self, bytes: &[u8]) -> Result<(), LoadError> {
        Component::new(&self.engine, bytes)
            .map_err(|e| LoadError::Compile(e.into_boxed_dyn_error()))?;
        Ok(())
    }

    pub(crate) fn linker(&self) -> &Linker<GuestState> {
        &self.linker
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn ticker(&self) -> &ticker::EpochTicker {
        &self.ticker
    }
}

/// How a file that is not wasm begins, as a user would recognise it: its
/// first characters when they are text, else its first bytes in hex.
fn first_bytes(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(16)];
    match std::str::from_utf8(head) {
        _ if head.is_empty() => "nothing (the file is empty)".to_string(),
        Ok(text) if text.chars().all(|c| !c.is_control() || c.is_whitespace()) => {
            format!("{text:?}")
        }
        _ => head
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}
