//! The pipeline engine: streams source rows through the nodes, many rows in
//! flight per node, and writes results to the sinks in source order.

mod columns;
mod drain;
mod ordered;
mod progress;
mod quarantine;
mod report;
mod resume;
mod setup;
mod stage;

pub use report::{EndpointReport, RunReport};

use crate::config::{Format, Pipeline};
use crate::hashing;
use crate::io::{self, SourceRow};
use crate::services::audit::{AuditLog, NewRun, Record, ResumePoint, RowRecord, RunEnd};
use anyhow::{Context, Result};
use futures::stream::{self, BoxStream, StreamExt};
use ordered::OrderedWindowExt;
use resume::SourceCheck;
use setup::Prepared;
use stage::{Failure, Flow};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Rows read ahead of the first node, so a slow disk never starves it.
const READ_AHEAD: usize = 1024;

pub struct RunOptions {
    pub show_progress: bool,
    /// Carry on an unfinished run instead of starting one.
    pub resume: Option<Resume>,
    /// Keep an audit trail. Without one there is no `weir explain` and no
    /// resume; it exists to measure what auditing costs.
    pub audit: bool,
}

pub struct Resume {
    /// The run to carry on; the latest unfinished run of the pipeline if None.
    pub run_id: Option<i64>,
}

/// Checks everything that can be checked without calling an endpoint: the
/// pipeline file, the source header, every component and its options.
pub async fn validate(pipeline: &Pipeline) -> Result<Vec<(String, Vec<String>)>> {
    let source = io::open_source(&pipeline.source)?;
    let prepared = setup::prepare(pipeline, None).await?;
    columns::through_nodes(&pipeline.file, source.columns.clone(), &prepared.nodes)?;
    Ok(prepared
        .nodes
        .iter()
        .map(|n| (n.config.name.clone(), n.runtime.output_fields().to_vec()))
        .collect())
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
    match (&options.resume, options.audit) {
        (None, false) => Ok((None, None)),
        (Some(_), false) => anyhow::bail!("a run is resumed from its audit trail; drop --no-audit"),
        (None, true) => {
            let run = NewRun {
                pipeline_path: pipeline_key(pipeline),
                config_sha256: pipeline.file.raw_sha256.clone(),
                source_path: pipeline.source.path.display().to_string(),
                sinks: resume::sink_paths(pipeline),
                weir_version: env!("CARGO_PKG_VERSION").to_string(),
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
            .with_context(|| format!("cannot resume from {}", path.display()))?;
            Ok((Some(Arc::new(audit)), Some(point)))
        }
    }
}

pub async fn run(pipeline: Pipeline, options: RunOptions) -> Result<RunReport> {
    let started = Instant::now();
    let (audit, mut point) = open_audit(&pipeline, &options)?;
    let prepared = setup::prepare(&pipeline, audit.as_ref()).await?;
    if let Some(audit) = &audit {
        match &point {
            None => prepared.record_identity(audit),
            Some(point) => resume::check_unchanged(&point.run, &pipeline, &prepared)?,
        }
        audit.start_segment(point.as_ref().map_or(0, |p| p.done.len() as u64));
    }
    let source = io::open_source(&pipeline.source)?;
    let columns = columns::through_nodes(&pipeline.file, source.columns.clone(), &prepared.nodes)?;
    let resume_at = |path: &std::path::Path| {
        point
            .as_ref()
            .and_then(|p| p.checkpoints.get(&path.display().to_string()).copied())
    };
    let mut sinks = Vec::new();
    for sink in &pipeline.sinks {
        let cols = match sink.format {
            Format::Csv => columns.clone(),
            Format::Jsonl => None,
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
            Format::Jsonl => None,
        };
        error_sinks.push(io::open_sink(sink, cols, resume_at(&sink.path))?);
    }
    let mut outputs = drain::Outputs {
        sinks,
        error_sinks,
        sink_paths: resume::sink_paths(&pipeline).all().cloned().collect(),
        source_on_error: pipeline.source_on_error,
    };
    let progress = progress::Progress::start(&pipeline.source, options.show_progress);

    let check = point.as_mut().map(SourceCheck::from);
    let mut report = RunReport {
        run_id: audit.as_ref().map(|a| a.run_id()),
        segment: audit.as_ref().map_or(1, |a| a.segment()),
        rows_skipped: check.as_ref().map_or(0, |c| c.done.len() as u64),
        sinks: pipeline.sinks.iter().map(|s| s.path.clone()).collect(),
        audit_path: audit.as_ref().map(|_| pipeline.audit_path.clone()),
        ..RunReport::default()
    };
    let source_failure = Arc::new(Mutex::new(None));
    let rows = read_source(source, audit.clone(), check, Arc::clone(&source_failure));
    let flows = flow_through_nodes(rows, &prepared, audit.as_ref());
    let written = drain::drain(
        flows,
        &prepared,
        audit.as_deref(),
        &mut outputs,
        &mut report,
        &progress,
    )
    .await;
    progress.finish();
    let stopped = match written {
        Err(e) => Some(e),
        Ok(()) => source_failure.lock().ok().and_then(|mut f| f.take()),
    };
    let all_sinks = outputs.sinks.into_iter().chain(outputs.error_sinks);
    if let Some(e) = stopped {
        match &audit {
            // The partial files stay: they hold the rows the audit trail
            // counts as written, and a resume carries on from them.
            Some(audit) => {
                drop(all_sinks);
                return Err(e.context(format!(
                    "run {} stopped; once the cause is fixed, `weir run {} --resume` carries it on",
                    audit.run_id(),
                    pipeline.file.path.display()
                )));
            }
            None => {
                for sink in all_sinks {
                    sink.abandon();
                }
                return Err(e);
            }
        }
    }
    for sink in all_sinks {
        sink.finish()?;
    }

    report.wall = started.elapsed();
    report.endpoints = prepared
        .executor
        .endpoints()
        .map(|e| EndpointReport {
            name: e.name.clone(),
            pool_size: e.spec.pool_size,
            stats: e.stats(),
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
    drop(prepared);
    if let Some(audit) = audit {
        let audit =
            Arc::try_unwrap(audit).map_err(|_| anyhow::anyhow!("the audit log is still in use"))?;
        report.calls_replayed = audit.replay().map_or(0, |r| r.used());
        let totals = audit.finish(RunEnd {
            summary_json: serde_json::to_string(&report.endpoints)?,
            calls_replayed: report.calls_replayed,
        })?;
        if totals.without_outcome_count > 0 {
            anyhow::bail!(
                "run {}: {} source rows ended without a terminal outcome (rows {:?}…). This is a \
                 bug in weir: please report it. The run is marked incomplete; `weir run {} \
                 --resume` processes those rows again",
                report.run_id.unwrap_or_default(),
                totals.without_outcome_count,
                totals.without_outcome,
                pipeline.file.path.display()
            );
        }
        report.totals = Some(totals);
    }
    Ok(report)
}

/// Reads the source on a blocking thread, which also hashes and records each
/// row, skips the rows a resumed run has done, and stops at the first row
/// that differs from what the run read before (left in `failure`).
fn read_source(
    source: io::SourceReader,
    audit: Option<Arc<AuditLog>>,
    check: Option<SourceCheck>,
    failure: Arc<Mutex<Option<anyhow::Error>>>,
) -> BoxStream<'static, Flow> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Flow>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        let hashed = audit.is_some() || check.is_some();
        for SourceRow { index, line, row } in source {
            let content = match &row {
                Ok(row) if hashed => Some(hashing::canonical_text(row)),
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
                        if let Ok(mut slot) = failure.lock() {
                            *slot = Some(e);
                        }
                        break;
                    }
                }
            }
            if let Some(audit) = &audit {
                if let Some(content) = content {
                    audit.payload(&content_sha256, || content);
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
            if tx.blocking_send(flow).is_err() {
                break;
            }
        }
    });
    stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
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
        flows = match node.config.batch.clone() {
            None => flows
                .map(move |flow| Arc::clone(&node).process(flow, audit.clone()))
                .ordered_window(concurrency, window)
                .boxed(),
            Some(batch) => {
                let batches = match batch.timeout {
                    // Fires after the timeout even while the source is idle.
                    Some(timeout) => {
                        tokio_stream::StreamExt::chunks_timeout(flows, batch.count, timeout).boxed()
                    }
                    None => flows.chunks(batch.count).boxed(),
                };
                batches
                    .map(move |flows| Arc::clone(&node).process_batch(flows, audit.clone()))
                    .ordered_window(concurrency / batch.count, window / batch.count)
                    .flat_map(stream::iter)
                    .boxed()
            }
        };
    }
    flows
}
