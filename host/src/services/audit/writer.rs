//! The writer thread: drains the queue into one transaction per burst.

use super::records::*;
use anyhow::Result;
use rusqlite::{Connection, Transaction, params};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

/// Records per transaction at most, so a long burst still commits regularly.
const BATCH: usize = 2_000;
/// How long the writer sleeps once it has drained the queue, so records gather
/// into the next transaction. Waiting on the queue instead would wake this
/// thread for every record: a cross-thread wake-up per record cost more CPU
/// than writing it, and committing each alone would write the WAL hundreds of
/// times a second.
const LINGER: Duration = Duration::from_millis(50);

pub fn insert_run(conn: &Connection, run: &NewRun) -> Result<i64> {
    conn.execute(
        "INSERT INTO runs (pipeline_path, config_sha256, weir_version, started_at_ms, status)
         VALUES (?1, ?2, ?3, ?4, 'running')",
        params![
            run.pipeline_path,
            run.config_sha256,
            run.weir_version,
            super::now_ms()
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

pub fn run(mut conn: Connection, run_id: i64, rx: Receiver<Record>) -> Result<()> {
    while let Ok(first) = rx.recv() {
        let tx = conn.transaction()?;
        write(&tx, run_id, first)?;
        let mut written = 1;
        let mut open = true;
        while written < BATCH {
            match rx.try_recv() {
                Ok(record) => {
                    write(&tx, run_id, record)?;
                    written += 1;
                }
                Err(TryRecvError::Empty) => break,
                // The run is over: commit what there is and stop.
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        tx.commit()?;
        if !open {
            return Ok(());
        }
        if written < BATCH {
            // `AuditLog::close` unparks this thread, so the end of a run
            // does not wait out the linger.
            std::thread::park_timeout(LINGER);
        }
    }
    Ok(())
}

fn write(tx: &Transaction, run: i64, record: Record) -> Result<()> {
    match record {
        Record::Node(n) => {
            tx.prepare_cached("INSERT INTO nodes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")?
                .execute(params![
                    run,
                    n.node_id,
                    n.name,
                    n.component,
                    n.component_sha256,
                    n.wit_version,
                    n.options_sha256,
                    serde_json::to_string(&n.output_fields)?
                ])?;
        }
        Record::Endpoint(e) => {
            tx.prepare_cached("INSERT INTO endpoints VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
                .execute(params![
                    run,
                    e.name,
                    e.kind,
                    e.url,
                    e.secret_fingerprint,
                    e.settings_json
                ])?;
        }
        Record::Row(r) => {
            tx.prepare_cached("INSERT INTO rows VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![run, r.row_index, r.source_line, r.content_sha256])?;
        }
        Record::NodeState(s) => {
            tx.prepare_cached(
                "INSERT INTO node_states VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?
            .execute(params![
                run,
                s.state_id,
                s.row_index,
                s.node_id,
                s.attempt,
                s.status,
                s.input_sha256,
                s.output_sha256,
                s.error_code,
                s.error_message,
                s.batch_id,
                s.started_at_ms,
                s.duration_ms
            ])?;
        }
        Record::Batch(b) => {
            tx.prepare_cached("INSERT INTO batches VALUES (?1, ?2, ?3, ?4, ?5)")?
                .execute(params![run, b.batch_id, b.node_id, b.mode, b.members.len()])?;
            let mut member = tx.prepare_cached("INSERT INTO batch_members VALUES (?1, ?2, ?3)")?;
            for row in b.members {
                member.execute(params![run, b.batch_id, row])?;
            }
        }
        Record::Attribute(a) => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO node_state_attributes VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![run, a.state_id, a.key, a.value])?;
        }
        Record::Call(c) => {
            tx.prepare_cached(
                "INSERT INTO calls VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            )?
            .execute(params![
                run,
                c.state_id,
                c.call_index,
                c.endpoint,
                c.request_index,
                c.attempt,
                c.request_sha256,
                c.response_sha256,
                c.status,
                c.error,
                c.retry_cause,
                c.latency_ms,
                c.prompt_tokens,
                c.completion_tokens,
                c.started_at_ms
            ])?;
        }
        Record::Outcome(o) => {
            tx.prepare_cached(
                "INSERT INTO row_outcomes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                run,
                o.row_index,
                o.outcome,
                o.node_id,
                o.error_code,
                o.error_message,
                o.rows_written,
                o.batch_id,
                o.error_sink
            ])?;
        }
        Record::EndpointEvent(e) => {
            tx.prepare_cached("INSERT INTO endpoint_events VALUES (?1, ?2, ?3, ?4, ?5)")?
                .execute(params![run, e.endpoint, e.at_ms, e.event, e.detail])?;
        }
        Record::RunFinished(end) => {
            tx.prepare_cached(
                "UPDATE runs SET finished_at_ms = ?2, status = ?3, rows_total = ?4,
                 rows_completed = ?5, rows_failed = ?6, summary_json = ?7, outcomes_json = ?8
                 WHERE run_id = ?1",
            )?
            .execute(params![
                run,
                super::now_ms(),
                end.status,
                end.rows_total,
                end.rows_completed,
                end.rows_failed,
                end.summary_json,
                end.outcomes_json
            ])?;
        }
    }
    Ok(())
}
