//! What is wrong with a pipeline file, said with the file and, where it can
//! be found, the line.

use super::interpolate::InterpolationError;
use crate::yaml::YamlError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read pipeline file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `${VAR}` reference the environment cannot fill.
    #[error("{}:{}: {error}", path.display(), error.line())]
    Interpolation {
        path: PathBuf,
        error: InterpolationError,
    },
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// A value weir cannot use, at the line that gives it when it is known.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{} has no transform named `{name}`", path.display())]
    NoSuchTransform { path: PathBuf, name: String },
    #[error(
        "--audit {} is the same file as {what} of {}; the audit database needs a file of its own",
        audit.display(),
        pipeline.display()
    )]
    AuditSharesFile {
        audit: PathBuf,
        what: &'static str,
        pipeline: PathBuf,
    },
}

impl ConfigError {
    pub(crate) fn read(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Read {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn interpolation(path: &std::path::Path, error: InterpolationError) -> Self {
        Self::Interpolation {
            path: path.to_path_buf(),
            error,
        }
    }

    /// An error about the whole file, at no line.
    pub(crate) fn in_file(path: &std::path::Path, message: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.to_path_buf(),
            line: None,
            message: message.into(),
        }
    }
}
