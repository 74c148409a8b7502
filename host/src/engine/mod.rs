//! The pipeline engine: streams source rows through the nodes, many rows in
//! flight per node, and writes results to the sinks in source order.

mod columns;
mod progress;
mod quarantine;
mod report;
mod setup;
mod stage;

pub use report::{EndpointReport, RunReport};

use crate::config::{Format, OnError, Pipeline};
use crate::hashing;
use crate::io::{self, SourceRow};
use crate::services::audit::{AuditLog, NewRun, OutcomeRecord, Record, RowRecord, RunEnd};
use anyhow::{Context, Result};
use futures::stream::{self, BoxStream, StreamExt};
use setup::Prepared;
use stage::{Failure, Flow};
use std::sync::Arc;
use std::time::Instant;

/// Rows read ahead of the first node, so a slow disk never starves it.
const READ_AHEAD: usize = 1024;

pub struct RunOptions {
    pub show_progress: bool,
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
        .map(|n| (n.name.clone(), n.runtime.output_fields().to_vec()))
        .collect())
}

pub async fn run(pipeline: Pipeline, options: RunOptions) -> Result<RunReport> {
    let started = Instant::now();
    let audit = Arc::new(AuditLog::open(
        &pipeline.audit_path,
        NewRun {
            pipeline_path: pipeline.file.path.display().to_string(),
            config_sha256: hashing::sha256_hex(&pipeline.file.text),
            weir_version: env!("CARGO_PKG_VERSION").to_string(),
        },
    )?);
    let prepared = setup::prepare(&pipeline, Some(&audit)).await?;
    let source = io::open_source(&pipeline.source)?;
    let columns = columns::through_nodes(&pipeline.file, source.columns.clone(), &prepared.nodes)?;
    let mut sinks = Vec::new();
    for sink in &pipeline.sinks {
        let cols = match sink.format {
            Format::Csv => columns.clone(),
            Format::Jsonl => None,
        };
        sinks.push(io::open_sink(sink, cols)?);
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
        error_sinks.push(io::open_sink(sink, cols)?);
    }
    let mut outputs = Outputs {
        sinks,
        error_sinks,
        error_sink_paths: pipeline
            .error_sinks
            .iter()
            .map(|s| s.path.display().to_string())
            .collect(),
        source_on_error: pipeline.source_on_error,
    };
    let progress = progress::Progress::start(&pipeline.source, options.show_progress);

    let mut report = RunReport {
        run_id: audit.run_id(),
        sinks: pipeline.sinks.iter().map(|s| s.path.clone()).collect(),
        audit_path: pipeline.audit_path.clone(),
        ..RunReport::default()
    };
    let flows = flow_through_nodes(read_source(source, Arc::clone(&audit)), &prepared, &audit);
    let written = drain(
        flows,
        &prepared,
        &audit,
        &mut outputs,
        &mut report,
        &progress,
    )
    .await;
    progress.finish();
    let all_sinks = outputs.sinks.into_iter().chain(outputs.error_sinks);
    if let Err(e) = written {
        for sink in all_sinks {
            sink.abandon();
        }
        return Err(e);
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
    drop(prepared);
    let audit =
        Arc::try_unwrap(audit).map_err(|_| anyhow::anyhow!("the audit log is still in use"))?;
    audit.finish(RunEnd {
        status: if report.rows_failed == 0 {
            "completed"
        } else {
            "completed_with_failures"
        },
        rows_total: report.rows_total,
        rows_completed: report.rows_completed,
        rows_failed: report.rows_failed,
        outcomes_json: serde_json::to_string(&report.outcome_counts())?,
        summary_json: serde_json::to_string(&report.endpoints)?,
    })?;
    Ok(report)
}

/// Reads the source on a blocking thread; the channel bounds read-ahead.
fn read_source(source: io::SourceReader, audit: Arc<AuditLog>) -> BoxStream<'static, Flow> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SourceRow>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        for row in source {
            if tx.blocking_send(row).is_err() {
                break;
            }
        }
    });
    stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(move |source_row| {
            let content_sha256 = match &source_row.row {
                Ok(row) => hashing::canonical_sha256(row),
                Err(_) => String::new(),
            };
            audit.record(Record::Row(RowRecord {
                row_index: source_row.index,
                source_line: source_row.line,
                content_sha256,
            }));
            Flow::single(
                source_row.index,
                source_row
                    .row
                    .map(|row| vec![row])
                    .map_err(|error| Failure {
                        node: None,
                        error,
                        input: Vec::new(),
                    }),
            )
        })
        .boxed()
}

/// Each node keeps up to its concurrency of rows in flight and hands them on
/// in source order.
fn flow_through_nodes(
    mut flows: BoxStream<'static, Flow>,
    prepared: &Prepared,
    audit: &Arc<AuditLog>,
) -> BoxStream<'static, Flow> {
    for node in &prepared.nodes {
        let node = Arc::clone(node);
        let audit = Arc::clone(audit);
        let concurrency = node.concurrency;
        flows = match node.batch.clone() {
            None => flows
                .map(move |flow| Arc::clone(&node).process(flow, Some(Arc::clone(&audit))))
                .buffered(concurrency)
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
                    .map(move |flows| {
                        Arc::clone(&node).process_batch(flows, Some(Arc::clone(&audit)))
                    })
                    .buffered((concurrency / batch.count).max(1))
                    .flat_map(stream::iter)
                    .boxed()
            }
        };
    }
    flows
}

/// Where finished rows go: the sinks, and the `on_error` sinks.
struct Outputs {
    sinks: Vec<Box<dyn io::RowSink>>,
    error_sinks: Vec<Box<dyn io::RowSink>>,
    error_sink_paths: Vec<String>,
    source_on_error: OnError,
}

/// Writes every finished flow and records one terminal outcome for each of
/// its source rows.
async fn drain(
    mut flows: BoxStream<'static, Flow>,
    prepared: &Prepared,
    audit: &AuditLog,
    outputs: &mut Outputs,
    report: &mut RunReport,
    progress: &progress::Progress,
) -> Result<()> {
    while let Some(flow) = flows.next().await {
        report.rows_total += flow.members.len() as u64;
        match flow.state {
            Ok(rows) => {
                for row in &rows {
                    for sink in outputs.sinks.iter_mut() {
                        sink.write(row).context("writing a sink")?;
                    }
                }
                report.rows_written += rows.len() as u64;
                let consumed = flow.batch.is_some();
                for (k, &row_index) in flow.members.iter().enumerate() {
                    let outcome = if consumed {
                        report.rows_consumed += 1;
                        "consumed_in_batch"
                    } else {
                        report.rows_completed += 1;
                        "completed"
                    };
                    audit.record(Record::Outcome(OutcomeRecord {
                        row_index,
                        outcome,
                        node_id: None,
                        error_code: None,
                        error_message: None,
                        // A batch's output is counted once, on its first member.
                        rows_written: if k == 0 { rows.len() as u64 } else { 0 },
                        batch_id: flow.batch,
                        error_sink: None,
                    }));
                }
            }
            Err(failure) => {
                let node = failure.node.map(|i| &prepared.nodes[i]);
                let on_error = node.map_or(outputs.source_on_error, |n| n.on_error);
                let node_name = node.map(|n| n.name.clone());
                let (outcome, error_sink) = match on_error {
                    OnError::Fail => {
                        report.rows_failed += flow.members.len() as u64;
                        ("failed", None)
                    }
                    OnError::Discard => {
                        report.rows_discarded += flow.members.len() as u64;
                        ("discarded", None)
                    }
                    OnError::Quarantine(i) => {
                        let rows = quarantine::rows(&failure, &flow.members, node_name.as_deref());
                        for row in &rows {
                            outputs.error_sinks[i]
                                .write(row)
                                .context("writing an on_error sink")?;
                        }
                        report.rows_quarantined += flow.members.len() as u64;
                        ("quarantined", Some(outputs.error_sink_paths[i].clone()))
                    }
                };
                for &row_index in &flow.members {
                    report.record_failure(
                        &failure.error.code,
                        row_index,
                        node_name.clone(),
                        &failure.error.message,
                    );
                    audit.record(Record::Outcome(OutcomeRecord {
                        row_index,
                        outcome,
                        node_id: failure.node,
                        error_code: Some(failure.error.code.clone()),
                        error_message: Some(failure.error.message.clone()),
                        rows_written: 0,
                        batch_id: flow.batch,
                        error_sink: error_sink.clone(),
                    }));
                }
            }
        }
        progress.row_done(report.rows_failed);
    }
    Ok(())
}
