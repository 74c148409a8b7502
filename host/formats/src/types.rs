//! Data shared by every layer.

use serde_json::{Map, Value};

/// A row: a JSON object whose keys keep their order (CSV columns, then the
/// fields each node adds).
pub type Row = Map<String, Value>;

/// Why a row failed, as guests and the host report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// Stable and machine-readable, e.g. `template_rendering_failed`.
    pub code: String,
    pub message: String,
}

impl RowError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}
