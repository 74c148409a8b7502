//! The folder of compiled components kept across runs, held to a size cap.
//!
//! Every new guest build, and every new weir release, adds files; without a
//! cap the folder only grows (a Python or JavaScript component compiles to
//! tens of MB). Files are dropped least recently used first: a run that loads
//! a cached component marks it used.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Default cap of the folder; `WEIR_CACHE_MAX_MB` sets another.
const DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// A temporary file this old was left by a run that died while writing it.
const STALE_TEMP_SECONDS: u64 = 3600;

/// Where compiled components are kept: `WEIR_CACHE_DIR`, else the user's
/// cache folder; `WEIR_CACHE_DIR=off` keeps none.
pub fn location() -> Option<PathBuf> {
    match std::env::var_os("WEIR_CACHE_DIR") {
        Some(dir) if dir == "off" => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => dirs::cache_dir().map(|d| d.join("weir").join("components")),
    }
}

/// The cap, from `WEIR_CACHE_MAX_MB` (whole MiB) or the default.
pub fn max_bytes() -> u64 {
    std::env::var("WEIR_CACHE_MAX_MB")
        .ok()
        .and_then(|mb| mb.trim().parse::<u64>().ok())
        .map_or(DEFAULT_MAX_BYTES, |mb| mb.saturating_mul(1024 * 1024))
}

/// One compiled component on disk.
pub struct Entry {
    pub path: PathBuf,
    pub bytes: u64,
    pub last_used: SystemTime,
}

/// The compiled components in `dir`, least recently used first.
pub fn entries(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let path = item.path();
        if path.extension().is_none_or(|e| e != "cwasm") {
            continue;
        }
        let meta = item.metadata()?;
        entries.push(Entry {
            path,
            bytes: meta.len(),
            last_used: meta.modified()?,
        });
    }
    entries.sort_by_key(|e| e.last_used);
    Ok(entries)
}

/// Marks a cached component as just used, so the cap drops others first.
pub fn touch(path: &Path) {
    let marked = std::fs::File::options()
        .append(true)
        .open(path)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = marked {
        tracing::debug!("could not mark {} as used: {e}", path.display());
    }
}

/// Deletes the least recently used components until the folder holds at
/// most `max` bytes, never the one just written (`keep`). Returns how many
/// files and bytes went.
pub fn prune(dir: &Path, max: u64, keep: &Path) -> std::io::Result<(usize, u64)> {
    remove_stale_temps(dir);
    let entries = entries(dir)?;
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let (mut files, mut freed) = (0, 0);
    for entry in entries {
        if total <= max {
            break;
        }
        if entry.path == keep {
            continue;
        }
        // Another run may have pruned it first; that is fine.
        match std::fs::remove_file(&entry.path) {
            Ok(()) => {
                files += 1;
                freed += entry.bytes;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        total -= entry.bytes;
    }
    Ok((files, freed))
}

/// Deletes every compiled component in `dir`. Returns how many files and
/// bytes went.
pub fn clear(dir: &Path) -> std::io::Result<(usize, u64)> {
    remove_stale_temps(dir);
    let mut files = 0;
    let mut freed = 0;
    for entry in entries(dir)? {
        std::fs::remove_file(&entry.path)?;
        files += 1;
        freed += entry.bytes;
    }
    Ok((files, freed))
}

fn remove_stale_temps(dir: &Path) {
    let Ok(items) = std::fs::read_dir(dir) else {
        return;
    };
    for item in items.flatten() {
        let path = item.path();
        let is_temp = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.starts_with("tmp"));
        let old = item
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > STALE_TEMP_SECONDS);
        if is_temp && old {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn write(dir: &Path, name: &str, bytes: usize, age_seconds: u64) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        let when = SystemTime::now() - Duration::from_secs(age_seconds);
        std::fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        path
    }

    #[test]
    fn prune_drops_the_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let oldest = write(dir.path(), "a.cwasm", 400, 300);
        let used = write(dir.path(), "b.cwasm", 400, 200);
        let newest = write(dir.path(), "c.cwasm", 400, 100);
        let other = write(dir.path(), "notes.txt", 10_000, 500);
        // Loading `b` makes it the most recently used of the three.
        touch(&used);
        let (files, freed) = prune(dir.path(), 400, &dir.path().join("none")).unwrap();
        assert_eq!((files, freed), (2, 800));
        assert!(!oldest.exists() && !newest.exists());
        assert!(used.exists() && other.exists());
    }

    #[test]
    fn prune_never_drops_the_file_just_written_even_over_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let old = write(dir.path(), "a.cwasm", 400, 300);
        let big = write(dir.path(), "b.cwasm", 2_000, 0);
        prune(dir.path(), 1_000, &big).unwrap();
        assert!(!old.exists());
        assert!(big.exists());
    }

    #[test]
    fn clear_deletes_components_and_stale_temporary_files_only() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.cwasm", 100, 0);
        let stale = write(dir.path(), "b.tmp123", 100, 2 * STALE_TEMP_SECONDS);
        let fresh = write(dir.path(), "c.tmp456", 100, 0);
        let other = write(dir.path(), "keep.txt", 100, 0);
        assert_eq!(clear(dir.path()).unwrap(), (1, 100));
        assert!(!stale.exists());
        assert!(fresh.exists() && other.exists());
        assert!(entries(dir.path()).unwrap().is_empty());
    }
}
