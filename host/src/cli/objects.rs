//! What the command line does around a run whose files are objects: the
//! source is fetched before, the audit database and finished sinks are
//! uploaded after.

use crate::config::{Pipeline, Staging};
use crate::services::audit;
use crate::services::storage::{self, Fetched};
use std::path::{Path, PathBuf};

/// A path given on the command line: a URL's stand-in, or the path itself.
pub fn placed(staging: &Staging, given: &Path) -> anyhow::Result<PathBuf> {
    let text = given.to_string_lossy();
    staging
        .place(Path::new(""), &text)
        .map_err(|m| anyhow::anyhow!("{m}"))
}

/// The outputs of a run to upload once it ends.
pub struct Outputs {
    staging: Staging,
    sinks: Vec<PathBuf>,
    audit: Option<PathBuf>,
}

impl Outputs {
    pub fn of(pipeline: &Pipeline, audit: bool) -> Self {
        Self {
            staging: pipeline.staging.clone(),
            sinks: pipeline
                .sinks
                .iter()
                .chain(&pipeline.error_sinks)
                .map(|s| s.path.clone())
                .collect(),
            audit: audit.then(|| pipeline.audit_path.clone()),
        }
    }

    /// Uploads the audit database, and the sinks when the run finished them:
    /// an unfinished run's rows wait in local partial files for its resume.
    pub async fn publish(&self, finished: bool) -> anyhow::Result<()> {
        for path in self.sinks.iter().filter(|_| finished) {
            if path.is_file() {
                storage::publish(&self.staging, path).await?;
            }
        }
        if let Some(path) = &self.audit {
            publish_audit(&self.staging, path).await?;
        }
        Ok(())
    }
}

/// Uploads an audit database that is an object's stand-in, whole.
pub async fn publish_audit(staging: &Staging, path: &Path) -> anyhow::Result<()> {
    if staging.url_of(path).is_some() && path.is_file() {
        audit::settle(path)?;
        storage::publish(staging, path).await?;
    }
    Ok(())
}

/// Downloads the audit database `path` stands in for. A downloaded copy
/// replaces the local file, so the local journal goes with it.
pub async fn fetch_audit(staging: &Staging, path: &Path, replace: bool) -> anyhow::Result<()> {
    let fetched = if replace {
        storage::fetch_if_present(staging, path).await?
    } else {
        storage::fetch_if_missing(staging, path).await?
    };
    if fetched == Fetched::Downloaded {
        audit::forget_journal(path);
    }
    Ok(())
}

/// Brings the parts of a sharded run that are objects, and the merged audit
/// database the merge adds to, into their stand-ins. A part that is not
/// there is left for the merge to refuse by name.
pub async fn fetch_parts(pipeline: &Pipeline, shards: u32) -> anyhow::Result<()> {
    let staging = &pipeline.staging;
    for index in 0..shards {
        for sink in pipeline.sinks.iter().chain(&pipeline.error_sinks) {
            let part = crate::config::part_path(&sink.path, index, shards);
            storage::fetch_if_present(staging, &part).await?;
        }
        let part = crate::config::part_path(&pipeline.audit_path, index, shards);
        fetch_audit(staging, &part, true).await?;
    }
    fetch_audit(staging, &pipeline.audit_path, false).await
}
