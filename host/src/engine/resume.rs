//! Carrying on a killed run: refusing when the pipeline is no longer the one
//! the run started with, and telling the source reader which rows are done.

use super::setup::Prepared;
use crate::config::Pipeline;
use crate::context::Context;
use crate::hashing;
use crate::io::FileStamp;
use crate::services::audit::{RecordedRun, RecordedSource, ResumePoint, SinkPaths, utc};
use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use super::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

/// A file as the audit trail names it: absolute, with every directory that
/// exists resolved, so a run is known by the same names whatever directory
/// `weir` is started from and whether the pipeline was named relative or
/// absolute.
pub fn recorded_path(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<Component> = absolute.components().collect();
    // A sink's file, even its folder, may not exist yet: the longest prefix
    // that does is resolved, and the rest appended as written.
    for exists in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..exists].iter().collect();
        if let Ok(mut resolved) = std::fs::canonicalize(&head) {
            for part in &parts[exists..] {
                match part {
                    Component::ParentDir => {
                        resolved.pop();
                    }
                    Component::Normal(name) => resolved.push(name),
                    _ => {}
                }
            }
            return resolved.display().to_string();
        }
    }
    absolute.display().to_string()
}

/// A path the run recorded, as it names a file now. Weir before audit schema
/// 5 recorded paths relative to the directory it was started from: such a
/// run resumes from that same directory.
fn recorded_now(recorded: &str) -> String {
    recorded_path(Path::new(recorded))
}

/// The sink files of a pipeline as the audit trail names them.
pub fn sink_paths(pipeline: &Pipeline) -> SinkPaths {
    let names =
        |files: &[crate::config::DataFile]| files.iter().map(|s| recorded_path(&s.path)).collect();
    SinkPaths {
        sinks: names(&pipeline.sinks),
        on_error: names(&pipeline.error_sinks),
    }
}

/// A recorded path that names the same file under another name now: the
/// old name, the new one.
pub type Rename = (String, String);

/// Every difference that would make the resumed rows disagree with the
/// finished ones; an edit that changes none of them (a comment, a pool size)
/// is allowed. Returns the recorded paths that go by another name now.
pub fn check_unchanged(
    run: &RecordedRun,
    pipeline: &Pipeline,
    prepared: &Prepared,
) -> Result<Vec<Rename>> {
    let mut changes = Vec::new();
    let mut renames = Vec::new();
    let source = recorded_path(&pipeline.source.path);
    if !same_file(&run.source_path, &source, &mut renames) {
        changes.push(format!(
            "the source is {source}; it was {}{}",
            run.source_path,
            relative_hint(&run.source_path)
        ));
    }
    let sinks = sink_paths(pipeline);
    let same_sinks = run.sinks.sinks.len() == sinks.sinks.len()
        && run.sinks.on_error.len() == sinks.on_error.len()
        && run
            .sinks
            .all()
            .zip(sinks.all())
            .all(|(old, new)| same_file(old, new, &mut renames));
    if !same_sinks {
        let list = |s: &SinkPaths| s.all().cloned().collect::<Vec<_>>().join(", ");
        let hint = run
            .sinks
            .all()
            .map(|p| relative_hint(p))
            .find(|h| !h.is_empty());
        changes.push(format!(
            "the sinks are {}; they were {}{}",
            list(&sinks),
            list(&run.sinks),
            hint.unwrap_or_default()
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
        return Err(RunError::Invalid(format!(
            "run {} cannot be resumed: the pipeline changed since it started:\n  - {}\n\
             Undo the change to resume, or start a new run with `weir run`",
            run.run_id,
            changes.join("\n  - ")
        )));
    }
    Ok(renames)
}

/// Whether a recorded path names the file `now` names; if under another
/// name, the rename is noted.
fn same_file(recorded: &str, now: &str, renames: &mut Vec<Rename>) -> bool {
    if recorded == now {
        return true;
    }
    let same = recorded_now(recorded) == now;
    if same {
        renames.push((recorded.to_string(), now.to_string()));
    }
    same
}

fn relative_hint(recorded: &str) -> &'static str {
    if Path::new(recorded).is_relative() {
        " (relative to the directory the run was started from: resume it from there)"
    } else {
        ""
    }
}

/// Gives the checkpoints the names the sinks go by now.
pub fn rename_checkpoints(point: &mut ResumePoint, renames: &[Rename]) {
    for (old, new) in renames {
        if let Some(offset) = point.checkpoints.remove(old) {
            point.checkpoints.insert(new.clone(), offset);
        }
    }
}

/// Whether the source is still the file the run has been reading: its size,
/// and its content hash when a segment read it whole, else its modification
/// time. A change refuses the resume unless `allow_changed` is given; then
/// it is returned, described, for the run to say so.
pub fn check_source(run: &RecordedRun, path: &Path, allow_changed: bool) -> Result<Option<String>> {
    let Some(recorded) = &run.source else {
        // Recorded by a weir that kept no stamp: the rows read again are
        // still compared one by one.
        return Ok(None);
    };
    let now = FileStamp::of(path)?;
    let Some(change) = source_change(recorded, &now, path)? else {
        return Ok(None);
    };
    let described = format!(
        "the source {} changed since segment {} of run {} began reading it: {change}",
        path.display(),
        recorded.segment,
        run.run_id
    );
    if allow_changed {
        return Ok(Some(described));
    }
    Err(RunError::Invalid(format!(
        "run {} cannot be resumed: {described}.\n\
         The rows it has not read yet would come from the new file and the rows it has done from \
         the old one. Put the file back as it was to resume, start a new run with `weir run`, or \
         resume with `--allow-changed-source`: the rows already done are kept and the others are \
         read from the file as it is now",
        run.run_id
    )))
}

/// What differs between the source as recorded and as it is now; none when
/// nothing that can be checked does.
fn source_change(
    recorded: &RecordedSource,
    now: &FileStamp,
    path: &Path,
) -> Result<Option<String>> {
    let was = &recorded.stamp;
    if was.size != now.size {
        return Ok(Some(format!(
            "its size was {} bytes and is {} now{}",
            was.size,
            now.size,
            modified_change(was, now)
        )));
    }
    match &recorded.sha256 {
        // Read whole before: the content decides, so a file that was only
        // touched (or copied back) resumes, and a same-size edit that kept
        // the modification time does not.
        Some(sha256) => {
            let current = hashing::file_sha256(path)
                .with_context(|| format!("cannot read source {}", path.display()))?;
            Ok((current != *sha256).then(|| {
                format!(
                    "its content is not what it was (sha256 {} → {}){}",
                    &sha256[..12.min(sha256.len())],
                    &current[..12.min(current.len())],
                    modified_change(was, now)
                )
            }))
        }
        None if was.modified_ns != now.modified_ns => Ok(Some(format!(
            "its size is the same, but it was modified since{}",
            modified_change(was, now)
        ))),
        None => Ok(None),
    }
}

/// "; modified at A, now at B", when the modification time changed.
fn modified_change(was: &FileStamp, now: &FileStamp) -> String {
    if was.modified_ns == now.modified_ns {
        return String::new();
    }
    let at = |ns: Option<i64>| {
        ns.map_or("an unknown time".to_string(), |ns| {
            let ms = ns.div_euclid(1_000_000);
            format!("{}.{:03} UTC", utc(ms), ms.rem_euclid(1000))
        })
    };
    format!(
        " (it was last modified at {}, and is now at {})",
        at(was.modified_ns),
        at(now.modified_ns)
    )
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
    /// The run carries on from a changed source: only the rows already done
    /// must be as they were; the others are taken as they are now.
    pub only_done: bool,
}

impl SourceCheck {
    pub fn from(point: &mut ResumePoint, only_done: bool) -> Self {
        Self {
            run_id: point.run.run_id,
            row_hashes: std::mem::take(&mut point.row_hashes),
            done: std::mem::take(&mut point.done),
            only_done,
        }
    }

    /// Whether the row at `index` is done already; an error when the source
    /// no longer holds what the run read there.
    pub fn skip(&self, index: u64, line: u64, content_sha256: &str) -> Result<bool> {
        let done = self.done.contains(&index);
        if (done || !self.only_done)
            && let Some(recorded) = self.row_hashes.get(&index)
            && recorded != content_sha256
        {
            return Err(RunError::Invalid(format!(
                "the source changed since run {} read it: row {index} (line {line}) is not what it \
                 was; resuming would mix two sources. Start a new run with `weir run`",
                self.run_id
            )));
        }
        Ok(done)
    }
}
