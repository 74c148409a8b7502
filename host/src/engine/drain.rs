//! The end of the line: writes finished rows to the sinks (or the `on_error`
//! sinks) and commits each source row's terminal outcome to the audit trail,
//! together with how far the sink files hold them.

use super::first_rows::FirstRows;
use super::progress;
use super::quarantine;
use super::report::RunReport;
use super::setup::Prepared;
use super::stage::Flow;
use crate::config::OnError;
use crate::io;
use crate::services::audit::{AuditLog, CommitRecord, OutcomeRecord, Record, RowOutcome};
use crate::services::stop::RunStop;
use futures::stream::{BoxStream, StreamExt};
use std::time::Duration;

use super::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

/// Finished rows are committed to the audit trail, together with how far the
/// sinks hold them, in groups of at most this many rows …
const COMMIT_ROWS: usize = 500;
/// … or after this long, whichever comes first: a killed run redoes at most
/// this much, and from recorded answers.
const COMMIT_EVERY: Duration = Duration::from_millis(50);

/// Where finished rows go: the sinks, and the `on_error` sinks.
pub struct Outputs {
    pub sinks: Vec<Box<dyn io::RowSink>>,
    pub error_sinks: Vec<Box<dyn io::RowSink>>,
    /// Of the sinks then the `on_error` sinks, as the audit trail names them.
    pub sink_paths: Vec<String>,
    pub source_on_error: OnError,
}

impl Outputs {
    fn error_sink_path(&self, i: usize) -> String {
        self.sink_paths[self.sinks.len() + i].clone()
    }

    /// Where each file stands once everything written so far is in it.
    fn checkpoints(&mut self) -> Result<Vec<(String, u64)>> {
        let mut offsets = Vec::with_capacity(self.sink_paths.len());
        for (sink, path) in self
            .sinks
            .iter_mut()
            .chain(self.error_sinks.iter_mut())
            .zip(&self.sink_paths)
        {
            offsets.push((path.clone(), sink.checkpoint()?));
        }
        Ok(offsets)
    }
}

/// Outcomes of rows whose output is written but not yet committed.
#[derive(Default)]
struct Uncommitted {
    outcomes: Vec<OutcomeRecord>,
    since: Option<tokio::time::Instant>,
}

impl Uncommitted {
    fn add(&mut self, outcomes: Vec<OutcomeRecord>) {
        self.since.get_or_insert_with(tokio::time::Instant::now);
        self.outcomes.extend(outcomes);
    }

    fn due(&self) -> Option<tokio::time::Instant> {
        self.since.map(|since| since + COMMIT_EVERY)
    }

    /// Hands the sinks' bytes to the operating system first, then records the
    /// outcomes with the offsets: the audit trail never counts a row the
    /// file does not hold.
    fn commit(&mut self, audit: Option<&AuditLog>, outputs: &mut Outputs) -> Result<()> {
        self.since = None;
        if self.outcomes.is_empty() {
            return Ok(());
        }
        let outcomes = std::mem::take(&mut self.outcomes);
        if let Some(audit) = audit {
            let checkpoints = outputs.checkpoints()?;
            audit.record(Record::Commit(CommitRecord {
                outcomes,
                checkpoints,
            }));
            audit.check_writing()?;
        }
        Ok(())
    }
}

/// Writes every finished flow and records one terminal outcome for each of
/// its source rows; stops the run if its first rows fail alike.
#[allow(clippy::too_many_arguments)]
pub async fn drain(
    mut flows: BoxStream<'static, Flow>,
    prepared: &Prepared,
    audit: Option<&AuditLog>,
    outputs: &mut Outputs,
    report: &mut RunReport,
    progress: &progress::Progress,
    stop: &RunStop,
    mut first_rows: FirstRows,
) -> Result<()> {
    let mut uncommitted = Uncommitted::default();
    // Set at the first row the stop made fail: no row after it is written.
    let mut held_back = false;
    loop {
        let next = match uncommitted.due() {
            None => flows.next().await,
            Some(due) => match tokio::time::timeout_at(due, flows.next()).await {
                Ok(next) => next,
                Err(_) => {
                    uncommitted.commit(audit, outputs)?;
                    continue;
                }
            },
        };
        let Some(flow) = next else { break };
        // Once the run is stopping, calls not yet sent are not sent, and once
        // it is aborted, calls on the wire are cut: a row can fail for that
        // alone. Such a row keeps no outcome, nor does any row after it, so
        // that the sinks stay in source order; a resume does them again, from
        // the answers already recorded. The rows behind are still awaited,
        // so that every call on the wire is recorded, unless it is cut.
        if stop.is_aborted() {
            break;
        }
        if stop.is_draining() && flow.state.is_err() {
            held_back = true;
        }
        if held_back {
            continue;
        }
        let node_name = |node: usize| prepared.nodes[node].config.name.clone();
        if let Some(reason) = first_rows.observe(&flow, node_name) {
            stop.drain(reason);
        }
        uncommitted.add(write_flow(flow, prepared, outputs, report)?);
        if uncommitted.outcomes.len() >= COMMIT_ROWS
            || uncommitted
                .due()
                .is_some_and(|d| d <= tokio::time::Instant::now())
        {
            uncommitted.commit(audit, outputs)?;
        }
        progress.row_done(report.rows_failed);
    }
    uncommitted.commit(audit, outputs)
}

/// Writes a finished flow where it belongs and returns the terminal outcome
/// of each of its source rows.
fn write_flow(
    flow: Flow,
    prepared: &Prepared,
    outputs: &mut Outputs,
    report: &mut RunReport,
) -> Result<Vec<OutcomeRecord>> {
    report.rows_total += flow.members.len() as u64;
    let mut outcomes = Vec::with_capacity(flow.members.len());
    match flow.state {
        Ok(rows) => {
            for row in &rows {
                for sink in outputs.sinks.iter_mut() {
                    sink.write(row)?;
                }
            }
            report.rows_written += rows.len() as u64;
            let consumed = flow.batch.is_some();
            for (k, &row_index) in flow.members.iter().enumerate() {
                let outcome = if consumed {
                    report.rows_consumed += 1;
                    RowOutcome::ConsumedInBatch
                } else {
                    report.rows_completed += 1;
                    RowOutcome::Completed
                };
                outcomes.push(OutcomeRecord {
                    row_index,
                    outcome,
                    node_id: None,
                    error_code: None,
                    error_message: None,
                    // A batch's output is counted once, on its first member.
                    rows_written: if k == 0 { rows.len() as u64 } else { 0 },
                    batch_id: flow.batch,
                    error_sink: None,
                });
            }
        }
        Err(failure) => {
            let node = failure.node.map(|i| &prepared.nodes[i]);
            let on_error = node.map_or(outputs.source_on_error, |n| n.config.on_error);
            let node_name = node.map(|n| n.config.name.clone());
            let (outcome, error_sink) = match on_error {
                OnError::Fail => {
                    report.rows_failed += flow.members.len() as u64;
                    (RowOutcome::Failed, None)
                }
                OnError::Discard => {
                    report.rows_discarded += flow.members.len() as u64;
                    (RowOutcome::Discarded, None)
                }
                OnError::Quarantine(i) => {
                    let rows = quarantine::rows(&failure, &flow.members, node_name.as_deref());
                    for row in &rows {
                        outputs.error_sinks[i].write(row)?;
                    }
                    report.rows_quarantined += flow.members.len() as u64;
                    (RowOutcome::Quarantined, Some(outputs.error_sink_path(i)))
                }
            };
            for &row_index in &flow.members {
                report.record_failure(
                    &failure.error.code,
                    row_index,
                    node_name.clone(),
                    &failure.error.message,
                );
                outcomes.push(OutcomeRecord {
                    row_index,
                    outcome,
                    node_id: failure.node,
                    error_code: Some(failure.error.code.clone()),
                    error_message: Some(failure.error.message.clone()),
                    rows_written: 0,
                    batch_id: flow.batch,
                    error_sink: error_sink.clone(),
                });
            }
        }
    }
    Ok(outcomes)
}
