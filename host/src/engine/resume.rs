//! Carrying on a killed run: refusing when the pipeline is no longer the one
//! the run started with, and telling the source reader which rows are done.

use super::setup::Prepared;
use crate::config::Pipeline;
use crate::services::audit::{RecordedRun, ResumePoint, SinkPaths};
use anyhow::{Result, bail};
use std::collections::{HashMap, HashSet};

/// The sink files of a pipeline as the audit trail names them.
pub fn sink_paths(pipeline: &Pipeline) -> SinkPaths {
    let names = |files: &[crate::config::DataFile]| {
        files.iter().map(|s| s.path.display().to_string()).collect()
    };
    SinkPaths {
        sinks: names(&pipeline.sinks),
        on_error: names(&pipeline.error_sinks),
    }
}

/// Every difference that would make the resumed rows disagree with the
/// finished ones; an edit that changes none of them (a comment, a pool size)
/// is allowed.
pub fn check_unchanged(run: &RecordedRun, pipeline: &Pipeline, prepared: &Prepared) -> Result<()> {
    let mut changes = Vec::new();
    let source = pipeline.source.path.display().to_string();
    if run.source_path != source {
        changes.push(format!(
            "the source is {source}; it was {}",
            run.source_path
        ));
    }
    let sinks = sink_paths(pipeline);
    if run.sinks != sinks {
        let list = |s: &SinkPaths| s.all().cloned().collect::<Vec<_>>().join(", ");
        changes.push(format!(
            "the sinks are {}; they were {}",
            list(&sinks),
            list(&run.sinks)
        ));
    }
    let count = run.nodes.len().max(prepared.node_records.len());
    for i in 0..count {
        match (run.nodes.get(i), prepared.node_records.get(i)) {
            (Some(old), Some(new)) => {
                if old.name != new.name {
                    changes.push(format!(
                        "transform {i} is `{}`; it was `{}`",
                        new.name, old.name
                    ));
                    continue;
                }
                if old.component_sha256 != new.component_sha256 {
                    changes.push(format!(
                        "transform `{}`: its component {} changed (sha256 {} → {})",
                        new.name,
                        new.component,
                        short(&old.component_sha256),
                        short(&new.component_sha256)
                    ));
                }
                if old.wit_version != new.wit_version {
                    changes.push(format!(
                        "transform `{}`: the component contract is {}; it was {}",
                        new.name, new.wit_version, old.wit_version
                    ));
                }
                if old.options_sha256 != new.options_sha256 {
                    changes.push(format!("transform `{}`: its options changed", new.name));
                }
            }
            (Some(old), None) => changes.push(format!("transform `{}` was removed", old.name)),
            (None, Some(new)) => changes.push(format!("transform `{}` was added", new.name)),
            (None, None) => {}
        }
    }
    let now: HashMap<&str, _> = prepared
        .endpoint_records
        .iter()
        .map(|e| (e.name.as_str(), e))
        .collect();
    for old in &run.endpoints {
        match now.get(old.name.as_str()) {
            None => changes.push(format!("endpoint `{}` was removed", old.name)),
            Some(new) if new.url != old.url || new.kind != old.kind => changes.push(format!(
                "endpoint `{}` is {} {}; it was {} {}",
                old.name, new.kind, new.url, old.kind, old.url
            )),
            Some(_) => {}
        }
    }
    for new in &prepared.endpoint_records {
        if !run.endpoints.iter().any(|e| e.name == new.name) {
            changes.push(format!("endpoint `{}` was added", new.name));
        }
    }
    if !changes.is_empty() {
        bail!(
            "run {} cannot be resumed: the pipeline changed since it started:\n  - {}\n\
             Undo the change to resume, or start a new run with `weir run`",
            run.run_id,
            changes.join("\n  - ")
        );
    }
    Ok(())
}

fn short(sha256: &str) -> &str {
    &sha256[..sha256.len().min(12)]
}

/// What the source reader needs of a resume point: which rows to skip, and
/// what every row read before looked like.
pub struct SourceCheck {
    pub run_id: i64,
    pub row_hashes: HashMap<u64, String>,
    pub done: HashSet<u64>,
}

impl SourceCheck {
    pub fn from(point: &mut ResumePoint) -> Self {
        Self {
            run_id: point.run.run_id,
            row_hashes: std::mem::take(&mut point.row_hashes),
            done: std::mem::take(&mut point.done),
        }
    }

    /// Whether the row at `index` is done already; an error when the source
    /// no longer holds what the run read there.
    pub fn skip(&self, index: u64, line: u64, content_sha256: &str) -> Result<bool> {
        if let Some(recorded) = self.row_hashes.get(&index)
            && recorded != content_sha256
        {
            bail!(
                "the source changed since run {} read it: row {index} (line {line}) is not what it \
                 was; resuming would mix two sources. Start a new run with `weir run`",
                self.run_id
            );
        }
        Ok(self.done.contains(&index))
    }
}
