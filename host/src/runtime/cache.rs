//! Compiled components, by content hash: in memory for the run, so nodes that
//! share a component compile it once, and on disk across runs, because large
//! guests (Python, JavaScript) take seconds to compile. The folder on disk
//! is held to a size cap (`cache_dir`).

use super::LoadedComponent;
use super::cache_dir;
use crate::hashing::sha256_hex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Mutex;
use wasmtime::Engine;
use wasmtime::component::Component;

pub struct ComponentCache {
    memory: Mutex<HashMap<String, Component>>,
    /// None when no cache folder can be used; compiling still works.
    dir: Option<PathBuf>,
    /// Precompiled code is only valid for the same wasmtime and settings.
    engine_key: String,
}

impl ComponentCache {
    pub fn new(engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            memory: Mutex::new(HashMap::new()),
            dir: cache_dir::location(),
            engine_key: format!("{:016x}", hasher.finish()),
        }
    }

    pub fn get_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
    ) -> wasmtime::Result<LoadedComponent> {
        let sha256 = sha256_hex(bytes);
        if let Some(component) = self.memory.lock().expect("cache lock").get(&sha256) {
            return Ok(LoadedComponent {
                component: component.clone(),
                sha256,
            });
        }
        let component = match self.read_cached(engine, &sha256) {
            Some(component) => component,
            None => {
                let component = Component::new(engine, bytes)?;
                self.write_cached(&sha256, &component);
                component
            }
        };
        self.memory
            .lock()
            .expect("cache lock")
            .insert(sha256.clone(), component.clone());
        Ok(LoadedComponent { component, sha256 })
    }

    fn path(&self, sha256: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(dir.join(format!("{sha256}-{}.cwasm", self.engine_key)))
    }

    fn read_cached(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path(sha256)?;
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `write_cached` from a component this
        // program compiled; its name carries the source hash and the engine's
        // compatibility key, and wasmtime checks the header before use.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                cache_dir::touch(&path);
                Some(component)
            }
            Err(e) => {
                tracing::debug!("ignoring unusable cached component {}: {e}", path.display());
                None
            }
        }
    }

    fn write_cached(&self, sha256: &str, component: &Component) {
        let Some(path) = self.path(sha256) else {
            return;
        };
        let write = || -> Result<(), super::WasmError> {
            std::fs::create_dir_all(path.parent().expect("cache path has a folder"))?;
            let bytes = component
                .serialize()
                .map_err(wasmtime::Error::into_boxed_dyn_error)?;
            // Write then rename, so a concurrent run never reads half a file.
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)?;
            Ok(())
        };
        if let Err(e) = write() {
            tracing::debug!("could not cache the compiled component: {e}");
            return;
        }
        let dir = path.parent().expect("cache path has a folder");
        match cache_dir::prune(dir, cache_dir::max_bytes(), &path) {
            Ok((0, _)) => {}
            Ok((files, bytes)) => tracing::debug!(
                "dropped {files} least recently used compiled components ({} MB) from {}",
                bytes / 1_000_000,
                dir.display()
            ),
            Err(e) => tracing::debug!("could not keep {} under its cap: {e}", dir.display()),
        }
    }
}
