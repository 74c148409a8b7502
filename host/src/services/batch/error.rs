//! What can go wrong with a provider's Batch API.

use super::client::Refused;
use crate::context::Contextual;
use crate::services::audit::AuditError;
use crate::services::executor::TargetError;

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    HttpAt(#[from] Contextual<reqwest::Error>),
    #[error(transparent)]
    JsonAt(#[from] Contextual<serde_json::Error>),
    /// The provider answered with an error status.
    #[error("cannot {what}")]
    Refused {
        what: String,
        #[source]
        source: Refused,
    },
    /// An answer without what weir needs from it.
    #[error("{0}")]
    Answer(&'static str),
    #[error(transparent)]
    IoAt(#[from] Contextual<std::io::Error>),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    SqliteAt(#[from] Contextual<rusqlite::Error>),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A batch weir cannot send or follow as the pipeline stands.
    #[error("{0}")]
    Invalid(String),
}

impl BatchError {
    /// The provider's status, when it refused.
    pub fn refused_status(&self) -> Option<u16> {
        match self {
            Self::Refused { source, .. } => Some(source.status),
            _ => None,
        }
    }
}
