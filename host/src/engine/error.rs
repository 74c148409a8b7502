//! Why a run, a resume, a validation or a merge of shards could not go on.

use crate::config::ConfigError;
use crate::context::Contextual;
use crate::io::{SinkError, SourceError};
use crate::runtime::LoadError;
use crate::services::audit::AuditError;
use crate::services::batch::BatchError;
use crate::services::executor::TargetError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("cannot start the WebAssembly runtime")]
    Runtime(#[source] LoadError),
    #[error("cannot resume from {}", path.display())]
    Resume {
        path: std::path::PathBuf,
        #[source]
        source: AuditError,
    },
    #[error(transparent)]
    IoAt(#[from] Contextual<std::io::Error>),
    /// What a stopped run says: the cause, what was kept and how to carry on;
    /// the cause's own causes are part of the text.
    #[error("{0}")]
    Stopped(String),
    /// What weir refuses to do as asked, or found wrong with the source or
    /// the pipeline against the run it resumes.
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Audit(#[from] AuditError),
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
    /// Parts that are missing, or that do not belong together.
    #[error("{0}")]
    Invalid(String),
}
