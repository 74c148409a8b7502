//! What can go wrong with an audit database.

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
