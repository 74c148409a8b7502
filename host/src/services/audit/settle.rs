//! An audit database as one self-contained file, for copying elsewhere: in
//! WAL mode the latest writes may live in the `-wal` file beside it until a
//! checkpoint moves them in, and a copy of the main file alone would miss
//! them.

use super::AuditError;
use crate::context::Context;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// Moves everything the `-wal` file holds into the database file and empties
/// the `-wal` file. Refuses while another connection's reads keep a part of
/// it in use, rather than hand out a copy that lacks it.
pub fn settle(path: &Path) -> Result<(), AuditError> {
    let conn = Connection::open(path)
        .with_context(|| format!("cannot open the audit database {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let (busy, _, _): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .with_context(|| format!("cannot checkpoint the audit database {}", path.display()))?;
    if busy != 0 {
        return Err(AuditError::Busy {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Removes the `-wal` and `-shm` files of a database whose file was just
/// replaced by a copy: what they hold belongs to the file that was there.
pub fn forget_journal(path: &Path) {
    for suffix in ["-wal", "-shm"] {
        let mut name = path.as_os_str().to_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}
