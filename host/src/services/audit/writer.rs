//! The writer thread: drains the queue into one transaction per burst.

use super::records::*;
use crate::hashing;
use anyhow::Result;
use rusqlite::{Connection, Transaction, params};
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

/// Records per transaction at most, so a long burst still commits regularly.
/// Every commit writes each page it dirtied to the WAL again: fewer, larger
/// transactions write far fewer pages.
const BATCH: usize = 20_000;
/// How long the writer sleeps once it has drained the queue, so records gather
/// into the next transaction. Waiting on the queue instead would wake this
/// thread for every record: a cross-thread wake-up per record cost more CPU
/// than writing it, and committing each alone would write the WAL hundreds of
/// times a second.
const LINGER: Duration = Duration::from_millis(50);

pub fn insert_run(conn: &Connection, run: &NewRun) -> Result<i64> {
    conn.execute(
        "INSERT INTO runs (pipeline_path, config_sha256, source_path, sinks_json, weir_version,
                           started_at_ms, status, shard)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
        params![
            run.pipeline_path,
            run.config_sha256,
            run.source_path,
            serde_json::to_string(&run.sinks)?,
            run.weir_version,
            super::now_ms(),
            run.shard
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Which run and segment the records belong to.
#[derive(Clone, Copy)]
pub struct Scope {
    pub run: i64,
    pub segment: u32,
    /// Keep the bodies of hashed JSON in `payloads`.
    pub payloads: bool,
}

/// The canonical hash of `json`, keeping its body first when payloads are kept.
fn hash(tx: &Transaction, scope: Scope, json: Json) -> Result<String> {
    let (sha256, body) = match json {
        Json::Hashed(sha256) => return Ok(sha256),
        Json::Text(text) => {
            let sha256 = hashing::json_text_sha256(&text);
            (sha256, text.to_string())
        }
        Json::Array(texts) => {
            let values: Vec<serde_json::Value> = texts
                .iter()
                .map(|t| serde_json::from_str(t).unwrap_or(serde_json::Value::String(t.clone())))
                .collect();
            let body = hashing::canonical_text(&values);
            (hashing::sha256_hex(&body), body)
        }
    };
    if scope.payloads {
        keep_payload(tx, scope.run, &sha256, &body)?;
    }
    Ok(sha256)
}

/// Content-addressed: a body already kept under its hash is kept once.
fn keep_payload(tx: &Transaction, run: i64, sha256: &str, body: &str) -> Result<()> {
    tx.prepare_cached("INSERT OR IGNORE INTO payloads VALUES (?1, ?2, ?3)")?
        .execute(params![run, sha256, body])?;
    Ok(())
}

/// Writes until every sender is gone, then hands the connection back so the
/// run's end can be checked against what was written.
pub fn run(mut conn: Connection, scope: Scope, rx: Receiver<Record>) -> Result<Connection> {
    while let Ok(first) = rx.recv() {
        let tx = conn.transaction()?;
        write(&tx, scope, first)?;
        let mut written = 1;
        let mut open = true;
        while written < BATCH {
            match rx.try_recv() {
                Ok(record) => {
                    write(&tx, scope, record)?;
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
            break;
        }
        if written < BATCH {
            // `AuditLog::close` unparks this thread, so the end of a run
            // does not wait out the linger.
            std::thread::park_timeout(LINGER);
        }
    }
    Ok(conn)
}

fn write(tx: &Transaction, scope: Scope, record: Record) -> Result<()> {
    let Scope { run, segment, .. } = scope;
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
            // A resumed run reads again the rows its killed segment recorded.
            tx.prepare_cached("INSERT OR IGNORE INTO rows VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![run, r.row_index, r.source_line, r.content_sha256])?;
        }
        Record::NodeState(s) => {
            let input_sha256 = hash(tx, scope, s.input)?;
            let output_sha256 = s.output.map(|o| hash(tx, scope, o)).transpose()?;
            tx.prepare_cached(
                "INSERT INTO node_states
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )?
            .execute(params![
                run,
                s.state_id,
                s.row_index,
                s.node_id,
                segment,
                s.attempt,
                s.status,
                input_sha256,
                output_sha256,
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
            let request_sha256 = hash(tx, scope, c.request)?;
            let response_sha256 = c.response.map(|r| hash(tx, scope, r)).transpose()?;
            tx.prepare_cached(
                "INSERT INTO calls
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                         ?18, ?19, ?20, ?21)",
            )?
            .execute(params![
                run,
                c.state_id,
                c.row_index,
                c.node_id,
                c.call_index,
                c.endpoint,
                c.request_index,
                c.attempt,
                request_sha256,
                response_sha256,
                c.status,
                c.error,
                c.retry_cause,
                c.latency_ms,
                c.prompt_tokens,
                c.completion_tokens,
                c.started_at_ms,
                c.replayed,
                c.cost.map(|(usd, _)| usd),
                c.cost.map(|(_, estimated)| estimated),
                c.cached
            ])?;
        }
        Record::Commit(commit) => {
            let mut outcome = tx.prepare_cached(
                "INSERT INTO row_outcomes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for o in commit.outcomes {
                outcome.execute(params![
                    run,
                    o.row_index,
                    o.outcome,
                    o.node_id,
                    o.error_code,
                    o.error_message,
                    o.rows_written,
                    o.batch_id,
                    o.error_sink,
                    segment
                ])?;
            }
            let mut checkpoint =
                tx.prepare_cached("INSERT OR REPLACE INTO sink_checkpoints VALUES (?1, ?2, ?3)")?;
            for (path, offset) in commit.checkpoints {
                checkpoint.execute(params![run, path, offset])?;
            }
        }
        Record::Payload(p) => keep_payload(tx, run, &p.sha256, &p.body)?,
        Record::SegmentStarted { rows_skipped } => {
            tx.prepare_cached(
                "INSERT INTO segments (run_id, segment, started_at_ms, status, rows_skipped)
                 VALUES (?1, ?2, ?3, 'running', ?4)",
            )?
            .execute(params![run, segment, super::now_ms(), rows_skipped])?;
        }
        Record::EndpointEvent(e) => {
            tx.prepare_cached("INSERT INTO endpoint_events VALUES (?1, ?2, ?3, ?4, ?5)")?
                .execute(params![run, e.endpoint, e.at_ms, e.event, e.detail])?;
        }
    }
    Ok(())
}

/// What the database says of a run once its last segment has written
/// everything: the source of truth for the run's counts.
pub struct Totals {
    /// Source rows recorded.
    pub rows: u64,
    /// Rows per terminal outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Rows with no terminal outcome (a bug), the first few of them.
    pub without_outcome: Vec<u64>,
    pub without_outcome_count: u64,
    pub status: &'static str,
    /// What the run's calls cost in all its segments, in USD.
    pub cost_usd: f64,
    /// The same by node name, in pipeline order.
    pub cost_by_node: Vec<(String, f64)>,
}

/// A run whose set-up failed (a component that does not load, a pipeline
/// that changed under a resume) ends as `failed_to_start`, with the error.
pub fn failed_to_start(conn: &Connection, run: i64, error: &str) -> Result<()> {
    conn.execute(
        "UPDATE runs SET finished_at_ms = ?2, status = 'failed_to_start', summary_json = ?3
         WHERE run_id = ?1",
        params![
            run,
            super::now_ms(),
            serde_json::json!({ "error": error }).to_string()
        ],
    )?;
    Ok(())
}

/// Checks that every row has its one terminal outcome, then closes the
/// segment and the run.
pub fn finish(conn: &Connection, scope: Scope, end: &RunEnd) -> Result<Totals> {
    let Scope { run, segment, .. } = scope;
    let rows: u64 = conn.query_row("SELECT count(*) FROM rows WHERE run_id = ?1", [run], |r| {
        r.get(0)
    })?;
    let mut outcomes = BTreeMap::new();
    let mut stmt = conn
        .prepare("SELECT outcome, count(*) FROM row_outcomes WHERE run_id = ?1 GROUP BY outcome")?;
    for pair in stmt.query_map([run], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))? {
        let (outcome, count) = pair?;
        outcomes.insert(outcome, count);
    }
    let missing = "FROM rows r WHERE r.run_id = ?1 AND NOT EXISTS
                   (SELECT 1 FROM row_outcomes o WHERE o.run_id = r.run_id AND o.row_index = r.row_index)";
    let without_outcome_count: u64 =
        conn.query_row(&format!("SELECT count(*) {missing}"), [run], |r| r.get(0))?;
    let without_outcome = conn
        .prepare(&format!(
            "SELECT r.row_index {missing} ORDER BY r.row_index LIMIT 10"
        ))?
        .query_map([run], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<u64>>>()?;
    let failed = outcomes.get("failed").copied().unwrap_or(0);
    let rejected: u64 = ["failed", "quarantined", "discarded"]
        .iter()
        .filter_map(|o| outcomes.get(*o))
        .sum();
    let status = if end.interrupted {
        "interrupted"
    } else if without_outcome_count > 0 {
        "incomplete"
    } else if rejected > 0 {
        "completed_with_failures"
    } else {
        "completed"
    };
    let cost_by_node = conn
        .prepare(
            "SELECT n.name, coalesce(sum(c.cost_usd), 0) FROM nodes n
             LEFT JOIN calls c ON c.run_id = n.run_id AND c.node_id = n.node_id
             WHERE n.run_id = ?1 GROUP BY n.node_id ORDER BY n.node_id",
        )?
        .query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<(String, f64)>>>()?;
    let cost_usd: f64 = cost_by_node.iter().map(|(_, usd)| usd).sum();
    let now = super::now_ms();
    conn.execute(
        "UPDATE segments SET finished_at_ms = ?3, status = 'finished', calls_replayed = ?4
         WHERE run_id = ?1 AND segment = ?2",
        params![run, segment, now, end.calls_replayed],
    )?;
    conn.execute(
        "UPDATE runs SET finished_at_ms = ?2, status = ?3, rows_total = ?4, rows_completed = ?5,
         rows_failed = ?6, outcomes_json = ?7, summary_json = ?8, cost_usd = ?9 WHERE run_id = ?1",
        params![
            run,
            now,
            status,
            rows,
            outcomes.get("completed").copied().unwrap_or(0),
            failed,
            serde_json::to_string(&outcomes)?,
            end.summary_json,
            cost_usd
        ],
    )?;
    Ok(Totals {
        rows,
        outcomes,
        without_outcome,
        without_outcome_count,
        cost_usd,
        cost_by_node,
        status,
    })
}
