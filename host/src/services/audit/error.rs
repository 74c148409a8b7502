//! What can go wrong with an audit database.

use super::{OLDEST_READABLE_VERSION, OLDEST_UPGRADABLE_VERSION, SCHEMA_VERSION};
use crate::context::Contextual;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    SqliteAt(#[from] Contextual<rusqlite::Error>),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    IoAt(#[from] Contextual<std::io::Error>),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    JsonAt(#[from] Contextual<serde_json::Error>),
    /// SQLite's error with the operating system's behind it, which says
    /// which file system in the words the other errors use.
    #[error("{os} (SQLite: {sqlite})")]
    Os {
        os: std::io::Error,
        sqlite: rusqlite::Error,
    },
    #[error("cannot write the audit database {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: Box<AuditError>,
    },
    #[error("there is no audit database at {}", path.display())]
    NoDatabase { path: PathBuf },
    #[error("there is no run {run_id} in {}", path.display())]
    NoRun { run_id: i64, path: PathBuf },
    /// Another process holds the run's lock file.
    #[error("run {run_id} is in progress in another weir process (it holds {})", lock.display())]
    InProgress { run_id: i64, lock: PathBuf },
    #[error(
        "the audit database {} has schema version {version}; this weir reads versions \
         {OLDEST_READABLE_VERSION} to {SCHEMA_VERSION}",
        path.display()
    )]
    Unreadable { path: PathBuf, version: i64 },
    #[error(
        "the audit database {} has schema version {version}, this weir writes version \
         {SCHEMA_VERSION} and can upgrade versions {OLDEST_UPGRADABLE_VERSION} and later; \
         move it aside or set `audit.path` to a new file",
        path.display()
    )]
    NotUpgradable { path: PathBuf, version: i64 },
    #[error("the audit database {} can no longer be written: its writer stopped", path.display())]
    WriterGone { path: PathBuf },
    #[error(
        "cannot copy the audit database {}: another connection is reading it",
        path.display()
    )]
    Busy { path: PathBuf },
    #[error("the audit writer had already stopped")]
    WriterStopped,
    /// Why the writer stopped, as it left it: the file and the operating
    /// system's error.
    #[error("{0}")]
    WriterFailed(String),
    #[error("the audit writer panicked")]
    WriterPanicked,
    /// What weir found wrong in the database or in what was asked of it: no
    /// such run, a run that cannot be resumed, a schema it cannot read.
    #[error("{0}")]
    Invalid(String),
}

impl AuditError {
    pub(crate) fn write(path: &std::path::Path, source: AuditError) -> Self {
        Self::Write {
            path: path.to_path_buf(),
            source: Box::new(source),
        }
    }
}
