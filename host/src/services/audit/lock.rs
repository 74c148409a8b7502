//! One process at a time per run: a lock file beside the database, held for
//! as long as the process works on the run. The operating system lets go of
//! it when the process dies, however it dies, so a killed run can be resumed
//! at once and a running one cannot be resumed twice.

use crate::context::Context;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::AuditError;

type Result<T, E = AuditError> = std::result::Result<T, E>;

pub struct RunLock {
    path: PathBuf,
    // Holding the open file holds the lock.
    _file: File,
}

impl RunLock {
    pub fn acquire(database: &Path, run_id: i64) -> Result<Self> {
        let path = lock_path(database, run_id);
        let left_behind = path.exists();
        let file = open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                if left_behind {
                    tracing::warn!(
                        "run {run_id}: taking over {}, left by a weir process that ended without \
                         releasing it",
                        path.display()
                    );
                }
                Ok(Self { path, _file: file })
            }
            Err(TryLockError::WouldBlock) => Err(AuditError::InProgress { run_id, lock: path }),
            Err(TryLockError::Error(e)) => Err(e)
                .with_context(|| format!("cannot lock {}", path.display()))
                .map_err(AuditError::from),
        }
    }

    /// Whether some process works on the run right now.
    pub fn is_held(database: &Path, run_id: i64) -> bool {
        let path = lock_path(database, run_id);
        if !path.exists() {
            return false;
        }
        match open(&path) {
            Ok(file) => matches!(file.try_lock(), Err(TryLockError::WouldBlock)),
            Err(_) => false,
        }
    }

    /// The run is over: nobody needs the file any more.
    pub fn release(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn open(path: &Path) -> Result<File> {
    Ok(OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?)
}

fn lock_path(database: &Path, run_id: i64) -> PathBuf {
    let name = database.file_name().unwrap_or_default().to_string_lossy();
    database.with_file_name(format!(".{name}.run-{run_id}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_refuses_a_second_holder_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.sqlite");
        let first = RunLock::acquire(&db, 7).unwrap();
        assert!(RunLock::is_held(&db, 7));
        let second = RunLock::acquire(&db, 7).err().unwrap().to_string();
        assert!(second.contains("run 7 is in progress"), "{second}");
        assert!(
            RunLock::acquire(&db, 8).is_ok(),
            "other runs are not affected"
        );
        first.release();
        assert!(!RunLock::is_held(&db, 7));
        assert!(RunLock::acquire(&db, 7).is_ok());
    }
}
