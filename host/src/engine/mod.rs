//! The pipeline engine: streams source rows through the nodes, many rows in
//! flight per node, and writes results to the sinks in source order.

mod columns;
mod drain;
mod error;
mod first_rows;
mod guest_cost;
mod guest_load;
pub mod guest_threads;
mod merge;
mod ordered;
mod packed;
mod progress;
mod quarantine;
mod report;
mod resumable;
mod resume;
mod rows_left;
mod setup;
mod source_check;
mod stage;

pub use merge::{Merged, merge};
pub use progress::ProgressKind;
pub use report::{EndpointReport, RunReport, StoredSummary, WindowHeldReport};
// `weir test` runs a node's rows through exactly the code `weir run` uses.
pub(crate) use setup::Node;
pub(crate) use stage::Flow;

use crate::config::{Format, Pipeline};
use crate::context::causes;
use crate::hashing;
use crate::io::{self, SourceRow};
use crate::services::audit::{AuditLog, NewRun, Record, ResumePoint, RowRecord, RunEnd};
use crate::services::executor::RunControls;
use crate::services::stop::{RunStop, StopReason};
use futures::FutureExt;
use futures::stream::{self, BoxStream, StreamExt};
use ordered::OrderedWindowExt;
use resume::SourceCheck;
use setup::Prepared;
use stage::Failure;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use error::{MergeError, RunError};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// Rows read ahead of the first node, so a slow disk never starves it.
const READ_AHEAD: usize = 1024;

/// Rows of a file handed from the reader's thread to the nodes at once:
/// one row at a time, the reader and the main thread would wake each other
/// for every row.
const READ_CHUNK: usize = 64;

/// Longest a run's end waits for the audit log's other holders to let go.
const AUDIT_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub struct RunOptions {
    /// A bar, lines now and then, or nothing.
    pub progress: ProgressKind,
    /// Carry on an unfinished run instead of starting one.
    pub resume: Option<Resume>,
    /// Keep an audit trail. Without one there is no `weir explain` and no
    /// resume; it exists to measure what auditing costs.
    pub audit: bool,
    /// Stops the run early: signals, and endpoints that cannot serve it.
    pub stop: Arc<RunStop>,
    /// `--budget-usd`: in place of the pipeline's `budget_usd`.
    pub budget_usd: Option<f64>,
    /// `--limit`: take at most this many rows not done before, then stop as
    /// an interrupted run does, resumable through the rest.
    pub limit: Option<u64>,
}

/// `--limit` as the source reader follows it: how many rows it takes, and
/// whether the source had more when it stopped at them.
#[derive(Clone)]
struct Limit {
    rows: u64,
    reached: Arc<std::sync::atomic::AtomicBool>,
}

pub struct Resume {
    /// The run to carry on; the latest unfinished run of the pipeline if None.
    pub run_id: Option<i64>,
    /// Carry on even though the source changed since the run read it: the
    /// rows already done are kept, the others are read as the file is now.
    pub allow_changed_source: bool,
}

/// What `weir validate` found: the source's columns (a CSV's header) and
/// the fields each node adds.
pub struct Validated {
    pub columns: Option<Vec<String>>,
    pub nodes: Vec<(String, Vec<String>)>,
}

/// Checks everything that can be checked without calling an endpoint: the
/// pipeline file, the source header, every component and its options.
pub async fn validate(pipeline: &Pipeline) -> Result<Validated> {
    let source = io::open_source(&pipeline.source)?;
    source_check::refuse_unreadable_rows(pipeline)?;
    let prepared = setup::prepare(pipeline, None, &RunControls::unlimited()).await?;
    columns::through_nodes(&pipeline.file, source.columns.clone(), &prepared.nodes)?;
    Ok(Validated {
        columns: source.columns,
        nodes: prepared
            .nodes
            .iter()
            .map(|n| (n.config.name.clone(), n.runtime.output_fields().to_vec()))
            .collect(),
    })
}

/// `weir cancel`: asks the providers to cancel a run's open batches.
pub async fn cancel_batches(
    pipeline: &Pipeline,
    audit_path: &std::path::Path,
    run_id: i64,
    batches: &[(String, String)],
) -> Result<()> {
    crate::services::batch::cancel(&pipeline.endpoints, audit_path, run_id, batches).await?;
    Ok(())
}

/// The pipeline file's absolute path: how the audit trail knows a run's
/// pipeline whatever the directory `weir` is started from.
pub fn pipeline_key(pipeline: &Pipeline) -> String {
    std::fs::canonicalize(&pipeline.file.path)
        .unwrap_or_else(|_| pipeline.file.path.clone())
        .display()
        .to_string()
}

fn open_audit(
    pipeline: &Pipeline,
    options: &RunOptions,
) -> Result<(Option<Arc<AuditLog>>, Option<ResumePoint>)> {
    let path = &pipeline.audit_path;
    if !options.audit
        && let Some((name, _)) = pipeline
            .endpoints
            .iter()
            .find(|(_, e)| e.mode == crate::config::EndpointMode::Batch)
    {
        return Err(RunError::Invalid(format!(
            "endpoint `{name}` is in batch mode, which keeps its requests and the provider's \
             batches in the audit trail; drop --no-audit"
        )));
    }
    match (&options.resume, options.audit) {
        (None, false) => Ok((None, None)),
        (Some(_), false) => Err(RunError::Invalid(
            "a run is resumed from its audit trail; drop --no-audit".into(),
        )),
        (None, true) => {
            let run = NewRun {
                pipeline_path: pipeline_key(pipeline),
                config_sha256: pipeline.file.raw_sha256.clone(),
                source_path: resume::recorded_path(&pipeline.source.path),
                sinks: resume::sink_paths(pipeline),
                weir_version: env!("CARGO_PKG_VERSION").to_string(),
                shard: pipeline.shard.map(|s| s.to_string()),
                shards_at_once: pipeline.shards_at_once,
            };
            let audit = AuditLog::create(path, run, pipeline.audit_payloads)?;
            Ok((Some(Arc::new(audit)), None))
        }
        (Some(resume), true) => {
            let (audit, point) = AuditLog::resume(
                path,
                resume.run_id,
                &pipeline_key(pipeline),
                pipeline.audit_payloads,
            )
            .map_err(|source| RunError::Resume {
                path: path.clone(),
                source,
            })?;
            Ok((Some(Arc::new(audit)), Some(point)))
        }
    }
}

/// Checks that a resumed run can carry on with the pipeline and the source
/// as they are now, and records what a resume must know of the names its
/// files go by and of a changed source.
fn check_resume(
    audit: &AuditLog,
    point: &mut ResumePoint,
    pipeline: &Pipeline,
    prepared: &Prepared,
    allow_changed_source: bool,
) -> Result<()> {
    let renames = resume::check_unchanged(&point.run, pipeline, prepared)?;
    let change = resume::check_source(&point.run, &pipeline.source.path, allow_changed_source)?;
    resume::rename_checkpoints(point, &renames);
    if !renames.is_empty() {
        audit.record(Record::PathsRenamed(renames));
    }
    if let Some(change) = change {
        tracing::warn!(
            "{change}; as --allow-changed-source asks, the rows already done are kept and the \
             others are read from the file as it is now"
        );
    }
    if allow_changed_source {
        audit.record(Record::SourceReplaced);
    }
    Ok(())
}

pub async fn run(pipeline: Pipeline, options: RunOptions) -> Result<RunReport> {
    let started = Instant::now();
    let scan = source_check::refuse_unreadable_rows(&pipeline)?;
    // The scan read every row already: no need to count them again.
    let scanned_rows = scan.as_ref().map(|scan| scan.rows);
    let rows = shard_rows(&pipeline, scan)?;
    let (audit, mut point) = open_audit(&pipeline, &options)?;
    let stop = Arc::clone(&options.stop);
    let allow_changed_source = options
        .resume
        .as_ref()
        .is_some_and(|r| r.allow_changed_source);
    let set_up = async {
        let spent_before = match (&audit, &point) {
            (Some(audit), Some(_)) => audit.spent_usd(&pipeline.audit_path)?,
            _ => 0.0,
        };
        let controls = setup::controls(&pipeline, stop.clone(), options.budget_usd, spent_before)?;
        let prepared = setup::prepare(&pipeline, audit.as_ref(), &controls).await?;
        if let Some(audit) = &audit {
            match &mut point {
                None => prepared.record_identity(audit),
                Some(point) => {
                    check_resume(audit, point, &pipeline, &prepared, allow_changed_source)?
                }
            }
        }
        let (rows, stamp, content_hash) = io::open_source_hashed(&pipeline.source)?;
        let columns =
            columns::through_nodes(&pipeline.file, rows.columns.clone(), &prepared.nodes)?;
        let source = Source {
            rows,
            stamp,
            content_hash,
            file: pipeline.source.is_regular_file(),
        };
        Ok::<_, RunError>((prepared, source, columns, Arc::clone(&controls.budget)))
    }
    .await;
    let (prepared, source, columns, budget) = match set_up {
        Ok(parts) => parts,
        Err(e) => {
            if let (Some(audit), None) = (audit, &point) {
                mark_failed_to_start(audit, &e);
            }
            return Err(e);
        }
    };
    if let Some(audit) = &audit {
        audit.start_segment(
            point.as_ref().map_or(0, |p| p.done.len() as u64),
            source.stamp,
        );
    }
    let resume_at = |path: &std::path::Path| {
        point
            .as_ref()
            .and_then(|p| p.checkpoints.get(&resume::recorded_path(path)).copied())
    };
    let mut sinks = Vec::new();
    for sink in &pipeline.sinks {
        let cols = match sink.format {
            Format::Csv => columns.clone(),
            Format::Jsonl | Format::Json => None,
        };
        sinks.push(io::open_sink(sink, cols, resume_at(&sink.path))?);
    }
    let mut error_sinks = Vec::new();
    for sink in &pipeline.error_sinks {
        let cols = match sink.format {
            Format::Csv => columns.clone().map(|mut columns| {
                columns.extend(quarantine::FIELDS.iter().map(|f| f.to_string()));
                columns
            }),
            Format::Jsonl | Format::Json => None,
        };
        error_sinks.push(io::open_sink(sink, cols, resume_at(&sink.path))?);
    }
    let mut outputs = drain::Outputs {
        sinks,
        error_sinks,
        sink_paths: resume::sink_paths(&pipeline).all().cloned().collect(),
        source_on_error: pipeline.source_on_error,
    };
    // What the run has spent, where an endpoint has a price to count it by.
    let priced = pipeline.endpoints.values().any(|e| e.price.is_some());
    let progress = progress::Progress::start(options.progress, priced.then_some(budget));

    let check = point
        .as_mut()
        .map(|p| SourceCheck::from(p, allow_changed_source));
    let mut report = RunReport {
        run_id: audit.as_ref().map(|a| a.run_id()),
        segment: audit.as_ref().map_or(1, |a| a.segment()),
        rows_skipped: check.as_ref().map_or(0, |c| c.done.len() as u64),
        sinks: pipeline.sinks.iter().map(|s| s.path.clone()).collect(),
        audit_path: audit.as_ref().map(|_| pipeline.audit_path.clone()),
        objects: pipeline
            .sinks
            .iter()
            .map(|s| &s.path)
            .chain([&pipeline.audit_path])
            .filter_map(|p| Some((p.clone(), pipeline.staging.url_of(p)?)))
            .collect(),
        resume_command: resume_command(&pipeline),
        ..RunReport::default()
    };
    let source_failure = Arc::new(Mutex::new(None));
    let limit = options.limit.map(|rows| Limit {
        rows,
        reached: Arc::default(),
    });
    let source_rows = scanned_rows.or_else(|| rows_left::rows_in_small_source(&pipeline.source));
    let rows_ahead = match (source_rows, options.limit) {
        (Some(rows), Some(limit)) => Some(rows.min(limit)),
        (rows, limit) => rows.or(limit),
    };
    prepared.start_ahead(rows_ahead).await;
    let to_come = rows_left::count(
        &pipeline.source,
        source_rows,
        rows.clone(),
        check.as_ref().map_or(0, |c| c.done.len() as u64),
        options.limit,
        &progress,
    );
    prepared.executor.expect_rows(&to_come);
    let rows = read_source(
        source,
        rows,
        limit.clone(),
        audit.clone(),
        check,
        Arc::clone(&source_failure),
        stop.clone(),
    )
    .inspect(move |_| to_come.entered())
    .boxed();
    let flows = flow_through_nodes(rows, &prepared, audit.as_ref());
    let written = drain::drain(
        flows,
        &prepared,
        audit.as_deref(),
        &mut outputs,
        &mut report,
        &progress,
        &stop,
        first_rows::FirstRows::new(pipeline.stop_when_first_rows_fail),
    )
    .await;
    progress.finish();
    let failed = match written {
        Err(e) => Some(e),
        Ok(()) => source_failure.lock().ok().and_then(|mut f| f.take()),
    };
    let all_sinks = outputs.sinks.into_iter().chain(outputs.error_sinks);
    // The rows asked for are done and the source has more: the run stops
    // as an interrupted one, its sinks partial, for a resume to go on.
    if let Some(limit) = limit.filter(|l| l.reached.load(Ordering::SeqCst)) {
        stop.drain(StopReason::Limit { rows: limit.rows });
    }
    report.stopped = stop.reason().cloned();
    if failed.is_none() && report.stopped.is_some() {
        match &audit {
            // The partial files hold the rows the audit trail counts as
            // written; a resume carries on from them.
            Some(_) => drop(all_sinks),
            None => all_sinks.for_each(|sink| sink.abandon()),
        }
    } else if let Some(e) = failed {
        match &audit {
            // The partial files stay: they hold the rows the audit trail
            // counts as written, and a resume carries on from them.
            Some(audit) => {
                drop(all_sinks);
                return Err(stopped_run(e, audit, &pipeline));
            }
            None => {
                for sink in all_sinks {
                    sink.abandon();
                }
                return Err(e);
            }
        }
    } else {
        for sink in all_sinks {
            if let Err(e) = sink.finish() {
                return Err(match &audit {
                    Some(audit) => stopped_run(e.into(), audit, &pipeline),
                    None => e.into(),
                });
            }
        }
    }

    report.wall = started.elapsed();
    for endpoint in prepared.executor.endpoints() {
        endpoint.record_learned_limit();
    }
    report.endpoints = prepared
        .executor
        .endpoints()
        .map(|e| EndpointReport {
            name: e.name.clone(),
            pool_size: e.spec.pool_size,
            request_timeout_seconds: e.spec.request_timeout_seconds,
            priced: e.spec.price.is_some(),
            stats: e.stats(),
            batches: e.batch().map(|b| b.stats()),
        })
        .collect();
    for node in &prepared.nodes {
        // What a user sizing `limits.node_memory_mb` needs to know.
        tracing::info!(
            "node `{}`: its instances held at most {} MiB of linear memory at once \
             (limits.node_memory_mb: {})",
            node.config.name,
            node.runtime.memory_peak().div_ceil(1 << 20),
            node.config.limits.node_memory_bytes >> 20
        );
        // Whether the node's guest was heavy enough to spread over the cores.
        tracing::info!(
            "node `{}`: its guest held a thread {} µs per call (recent mean); {} calls ran on \
             the guest threads",
            node.config.name,
            node.guest_cost.per_call().as_micros(),
            node.guest_cost.calls_on_guest_threads()
        );
        // Whether rows ran again to spare instances waiting on the network.
        let (started, parked) = node.runtime.starts_and_parks();
        tracing::info!(
            "node `{}`: {started} instances started (each {} µs of CPU to start, {} µs for its \
             first call); {parked} rows waited for their answers without their instance and ran \
             again",
            node.config.name,
            node.runtime.start_cost().as_micros(),
            node.runtime.first_call_cost().as_micros(),
        );
    }
    report.rows_truncated = prepared
        .nodes
        .iter()
        .map(|n| {
            (
                n.config.name.clone(),
                n.rows_truncated.load(Ordering::Relaxed),
            )
        })
        .filter(|&(_, rows)| rows > 0)
        .collect();
    report.windows_held = prepared
        .nodes
        .iter()
        .map(|n| WindowHeldReport {
            node: n.config.name.clone(),
            window: n.config.reorder_window,
            held: n.window_held.total(),
        })
        .filter(|w| w.held >= report::WINDOW_HELD_TOLD)
        .collect();
    drop(prepared);
    if let Some(audit) = audit {
        let audit = sole_owner(audit).await.ok_or_else(|| {
            RunError::Invalid("the audit log is still in use at the end of the run".into())
        })?;
        report.calls_replayed = audit.replay().map_or(0, |r| r.used());
        let (run_id, audit_path) = (audit.run_id(), audit.path().to_path_buf());
        let totals = audit
            .finish(RunEnd {
                summary_json: serde_json::to_string(&StoredSummary {
                    endpoints: report.endpoints.clone(),
                    stopped: report.stopped.as_ref().map(ToString::to_string),
                    ..StoredSummary::default()
                })
                .map_err(|e| RunError::Invalid(format!("the run's summary as JSON: {e}")))?,
                calls_replayed: report.calls_replayed,
                interrupted: report.stopped.is_some(),
            })
            .map_err(|e| {
                // Every row is written and committed; only the run's end is
                // not recorded, and a resume records it.
                RunError::Stopped(format!(
                    "run {run_id} wrote its rows but could not record its end: {}\n\
                     kept: the rows, with their outcome in the audit trail {}\n\
                     once the cause is fixed, `{}` ends the run",
                    causes(&e),
                    audit_path.display(),
                    resume_command(&pipeline)
                ))
            })?;
        if totals.without_outcome_count > 0 && report.stopped.is_none() {
            return Err(RunError::Invalid(format!(
                "run {}: {} source rows ended without a terminal outcome (rows {:?}…). This is a \
                 bug in weir: please report it. The run is marked incomplete; `weir run {} \
                 --resume` processes those rows again",
                report.run_id.unwrap_or_default(),
                totals.without_outcome_count,
                totals.without_outcome,
                pipeline.file.path.display()
            )));
        }
        report.totals = Some(totals);
    }
    Ok(report)
}

/// The source rows this run takes: all, or its shard's part, counted by
/// the scan already made or by reading the source once.
fn shard_rows(pipeline: &Pipeline, scan: Option<io::SourceScan>) -> Result<std::ops::Range<u64>> {
    let Some(shard) = pipeline.shard else {
        return Ok(0..u64::MAX);
    };
    let scan = match scan {
        Some(scan) => Some(scan),
        None => io::scan_source(&pipeline.source)?,
    };
    let total = scan.map_or(0, |scan| scan.rows);
    Ok(shard.rows(total))
}

/// The command that carries a stopped run on, as the user can paste it.
fn resume_command(pipeline: &Pipeline) -> String {
    let mut command = format!("weir run {} --resume", pipeline.file.path.display());
    if let Some(shard) = pipeline.shard {
        command.push_str(&format!(" --shard {shard}"));
    }
    if let Some(k) = pipeline.shards_at_once {
        command.push_str(&format!(" --shards-at-once {k}"));
    }
    if pipeline.audit_path != pipeline.configured_audit_path {
        command.push_str(&format!(" --audit {}", pipeline.audit_path.display()));
    }
    command
}

/// What a run stopped by an error says: the cause (naming the file and the
/// operating system's error when a write failed), what was kept, and how to
/// carry the run on.
fn stopped_run(error: RunError, audit: &AuditLog, pipeline: &Pipeline) -> RunError {
    let rows = match audit.committed_outcomes() {
        Some(1) => "1 row".to_string(),
        Some(n) => format!("{n} rows"),
        None => "the rows".to_string(),
    };
    let mut error = causes(&error);
    // The disk that took a sink can take the audit database with it.
    if let Some(audit_failure) = audit.failure()
        && !error.contains(&audit_failure)
    {
        error = format!("{error}\nand the audit trail stopped too: {audit_failure}");
    }
    // The operating system's words for ENOSPC, whichever file met it.
    let when = if error.contains("No space left on device") {
        "once there is space again"
    } else {
        "once the cause is fixed"
    };
    RunError::Stopped(format!(
        "run {} stopped: {error}\n\
         kept: {rows}, with their outcome in the audit trail {} and their output in the sink \
         files up to their last checkpoint\n\
         {when}, `{}` cuts the sink files back to that checkpoint and carries the run on",
        audit.run_id(),
        audit.path().display(),
        resume_command(pipeline)
    ))
}

/// The source a run reads, with what the audit trail records of the file.
struct Source {
    rows: io::SourceReader,
    stamp: io::FileStamp,
    /// Complete once `rows` is read to the end.
    content_hash: hashing::ContentHash,
    /// A regular file rather than a pipe, whose next row may be long in
    /// coming: its rows can go to the nodes in chunks.
    file: bool,
}

/// The audit log (or any value), once every other holder has let it go;
/// `None` if one still holds it after `AUDIT_RELEASE_WAIT`. When a run stops
/// with work under way, two holders let go a moment after the run is done
/// with its rows: the source's reader thread, once it sees that the rows it
/// read ahead are no longer taken, and a guest call on a guest thread whose
/// row was dropped, cancelled there at its guest's next yield along with
/// the node's services it holds. Taken at once, the log was sometimes still
/// shared, and a stopped run ended in an error instead of its summary.
async fn sole_owner<T>(mut shared: Arc<T>) -> Option<T> {
    let started = tokio::time::Instant::now();
    loop {
        match Arc::try_unwrap(shared) {
            Ok(value) => return Some(value),
            Err(_) if started.elapsed() >= AUDIT_RELEASE_WAIT => return None,
            Err(still) => shared = still,
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// Records a run that could not start as such, so it never shows as running.
fn mark_failed_to_start(audit: Arc<AuditLog>, error: &RunError) {
    match Arc::try_unwrap(audit) {
        Ok(audit) => {
            if let Err(e) = audit.failed_to_start(&causes(error)) {
                tracing::warn!("cannot record that the run failed to start: {}", causes(&e));
            }
        }
        Err(_) => tracing::warn!("cannot record that the run failed to start: still in use"),
    }
}

/// Reads the source on a blocking thread, which also hashes and records each
/// row, skips the rows a resumed run has done, and stops at the first row
/// that differs from what the run read before (left in `failure`), or once
/// the run is told to stop. Once it has read the whole file, it records the
/// file's hash.
fn read_source(
    source: Source,
    range: std::ops::Range<u64>,
    limit: Option<Limit>,
    audit: Option<Arc<AuditLog>>,
    check: Option<SourceCheck>,
    failure: Arc<Mutex<Option<RunError>>>,
    stop: Arc<RunStop>,
) -> BoxStream<'static, Flow> {
    let chunk = if source.file { READ_CHUNK } else { 1 };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Flow>>(READ_AHEAD / chunk);
    let stop_reading = Arc::clone(&stop);
    tokio::task::spawn_blocking(move || {
        let hashed = audit.is_some() || check.is_some();
        let mut ready = Vec::with_capacity(chunk);
        let mut taken = 0u64;
        for SourceRow { index, line, row } in source.rows {
            if index < range.start {
                continue;
            }
            if index >= range.end || stop.is_draining() {
                break;
            }
            let content = match &row {
                Ok(row) if hashed => Some(hashing::canonical_row_text(row)),
                _ => None,
            };
            let content_sha256 = content
                .as_ref()
                .map(hashing::sha256_hex)
                .unwrap_or_default();
            if let Some(check) = &check {
                match check.skip(index, line, &content_sha256) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => {
                        if let Some(audit) = &audit {
                            audit.record(Record::SourceRefused);
                        }
                        if let Ok(mut slot) = failure.lock() {
                            *slot = Some(e);
                        }
                        // The rows before it run as they would have.
                        if !ready.is_empty() {
                            let _ = tx.blocking_send(ready);
                        }
                        return;
                    }
                }
            }
            if let Some(limit) = &limit {
                if taken == limit.rows {
                    limit.reached.store(true, Ordering::SeqCst);
                    break;
                }
                taken += 1;
            }
            if let Some(audit) = &audit {
                if let Some(content) = content {
                    audit.payload(index, &content_sha256, || content);
                }
                audit.record(Record::Row(RowRecord {
                    row_index: index,
                    source_line: line,
                    content_sha256,
                }));
            }
            let flow = Flow::single(
                index,
                row.map(|row| vec![row]).map_err(|error| Failure {
                    node: None,
                    error,
                    input: Vec::new(),
                }),
            );
            ready.push(flow);
            // A chunk goes once full, or at once while the nodes have
            // nothing left to take, so that they never wait on a chunk.
            if ready.len() >= chunk || tx.capacity() == tx.max_capacity() {
                let full = std::mem::replace(&mut ready, Vec::with_capacity(chunk));
                if tx.blocking_send(full).is_err() {
                    break;
                }
            }
        }
        if !ready.is_empty() {
            // The nodes may have stopped taking rows: nothing to do then.
            let _ = tx.blocking_send(ready);
        }
        // The reader buffers ahead: the file can be read whole even when the
        // loop left rows (a shard's end, a stop), and the hash is the file's.
        if let (Some(audit), Some((bytes, sha256))) = (&audit, source.content_hash.finished())
            // Bytes that differ from the size it had when opened: the file
            // changed while it was read, and the hash stands for neither.
            && bytes == source.stamp.size
        {
            audit.record(Record::SourceRead { sha256 });
        }
    });
    // Rows read ahead but not yet begun are left, without an outcome, to a
    // resume once the run is told to stop.
    let reading = Arc::clone(&stop_reading);
    stream::poll_fn(move |cx| rx.poll_recv(cx))
        .flat_map(stream::iter)
        .take_while(move |_| std::future::ready(!reading.is_draining()))
        .boxed()
}

/// Each node keeps up to its concurrency of rows in flight and hands them on
/// in source order, holding finished rows back behind a slow one within its
/// reorder window.
fn flow_through_nodes(
    mut flows: BoxStream<'static, Flow>,
    prepared: &Prepared,
    audit: Option<&Arc<AuditLog>>,
) -> BoxStream<'static, Flow> {
    for node in &prepared.nodes {
        let node = Arc::clone(node);
        let audit = audit.cloned();
        let (concurrency, window) = (node.config.concurrency, node.config.reorder_window);
        // A node granted a Batch API endpoint keeps up to its window of rows
        // waiting on batches: as data (`resumable`), where the others run
        // each row as one future.
        let waits_on_batches = node.guest_slots.is_some();
        flows = match node.config.batch.clone() {
            None if waits_on_batches => flows
                .map(move |flow| {
                    Arc::clone(&node)
                        .resumable(vec![flow], audit.clone())
                        .map(|mut out| out.pop().expect("one flow in, one out"))
                })
                .ordered_window(concurrency, window)
                .boxed(),
            None => {
                let wanted = Arc::clone(&node);
                let held = Arc::clone(&node.window_held);
                flows
                    .map(move |flow| Arc::clone(&node).process(flow, audit.clone()))
                    .ordered_window_following(
                        concurrency,
                        window,
                        Arc::new(move || wanted.rows_wanted()),
                        held,
                    )
                    .boxed()
            }
            Some(batch) => {
                let batches = match batch.timeout {
                    // Fires after the timeout even while the source is idle.
                    Some(timeout) => {
                        tokio_stream::StreamExt::chunks_timeout(flows, batch.count, timeout).boxed()
                    }
                    None => flows.chunks(batch.count).boxed(),
                };
                let (running, window) = (concurrency / batch.count, window / batch.count);
                if waits_on_batches {
                    batches
                        .map(move |flows| Arc::clone(&node).resumable(flows, audit.clone()))
                        .ordered_window(running, window)
                        .flat_map(stream::iter)
                        .boxed()
                } else {
                    batches
                        .map(move |flows| Arc::clone(&node).process_batch(flows, audit.clone()))
                        .ordered_window(running, window)
                        .flat_map(stream::iter)
                        .boxed()
                }
            }
        };
    }
    flows
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_audit_log_is_taken_once_a_thread_still_holding_it_lets_go() {
        let shared = Arc::new(String::from("audit"));
        let held = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        assert_eq!(sole_owner(shared).await.as_deref(), Some("audit"));
        thread.join().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_never_lets_go_is_waited_for_a_bounded_time() {
        let shared = Arc::new(1);
        let _held = Arc::clone(&shared);
        assert_eq!(sole_owner(shared).await, None);
    }
}
