//! The pipeline engine: streams source rows through the nodes, many rows in
//! flight per node, and writes results to the sinks in source order.

mod progress;
mod report;
mod setup;
mod stage;

pub use report::{EndpointReport, RunReport};

use crate::config::{Format, Pipeline};
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
    io::open_source(&pipeline.source)?;
    let prepared = setup::prepare(pipeline, None).await?;
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
    let columns = source.columns.clone().map(|mut columns| {
        for node in &prepared.nodes {
            for field in node.runtime.output_fields() {
                if !columns.contains(field) {
                    columns.push(field.clone());
                }
            }
        }
        columns
    });
    let mut sinks = Vec::new();
    for sink in &pipeline.sinks {
        let cols = match sink.format {
            Format::Csv => columns.clone(),
            Format::Jsonl => None,
        };
        sinks.push(io::open_sink(sink, cols)?);
    }
    let progress = progress::Progress::start(&pipeline.source, options.show_progress);

    let mut report = RunReport {
        run_id: audit.run_id(),
        sinks: pipeline.sinks.iter().map(|s| s.path.clone()).collect(),
        audit_path: pipeline.audit_path.clone(),
        ..RunReport::default()
    };
    let flows = flow_through_nodes(read_source(source, Arc::clone(&audit)), &prepared, &audit);
    let written = drain(flows, &prepared, &audit, &mut sinks, &mut report, &progress).await;
    progress.finish();
    if let Err(e) = written {
        for sink in sinks {
            sink.abandon();
        }
        return Err(e);
    }
    for sink in sinks {
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
            Flow {
                index: source_row.index,
                state: source_row
                    .row
                    .map(|row| vec![row])
                    .map_err(|error| Failure { node: None, error }),
            }
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
        flows = flows
            .map(move |flow| Arc::clone(&node).process(flow, Some(Arc::clone(&audit))))
            .buffered(concurrency)
            .boxed();
    }
    flows
}

/// Writes every finished row and records its one terminal outcome.
async fn drain(
    mut flows: BoxStream<'static, Flow>,
    prepared: &Prepared,
    audit: &AuditLog,
    sinks: &mut [Box<dyn io::RowSink>],
    report: &mut RunReport,
    progress: &progress::Progress,
) -> Result<()> {
    while let Some(flow) = flows.next().await {
        report.rows_total += 1;
        let outcome = match flow.state {
            Ok(rows) => {
                for row in &rows {
                    for sink in sinks.iter_mut() {
                        sink.write(row).context("writing a sink")?;
                    }
                }
                report.rows_completed += 1;
                report.rows_written += rows.len() as u64;
                OutcomeRecord {
                    row_index: flow.index,
                    outcome: "completed",
                    node_id: None,
                    error_code: None,
                    error_message: None,
                    rows_written: rows.len() as u64,
                }
            }
            Err(failure) => {
                report.rows_failed += 1;
                let node_name = failure.node.map(|i| prepared.nodes[i].name.clone());
                report.record_failure(
                    &failure.error.code,
                    flow.index,
                    node_name,
                    &failure.error.message,
                );
                OutcomeRecord {
                    row_index: flow.index,
                    outcome: "failed",
                    node_id: failure.node,
                    error_code: Some(failure.error.code),
                    error_message: Some(failure.error.message),
                    rows_written: 0,
                }
            }
        };
        audit.record(Record::Outcome(outcome));
        progress.row_done(report.rows_failed);
    }
    Ok(())
}
