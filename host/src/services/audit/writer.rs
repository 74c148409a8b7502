//! The writer thread: drains the queue into one transaction per burst.

use super::budget::ByteBudget;
use super::outcome::{RowOutcome, RunStatus};
use super::records::*;
use super::stored::{Bundler, Hash};
use crate::hashing;
use rusqlite::{Connection, Transaction, params};
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use super::AuditError;

type Result<T, E = AuditError> = std::result::Result<T, E>;

/// Records per transaction at most, so a long burst still commits regularly.
/// Every commit writes each page it dirtied to the WAL again: fewer, larger
/// transactions write far fewer pages.
const BATCH: usize = 20_000;
/// How long the writer sleeps once it has drained the queue, so records gather
/// into the next transaction. Waiting on the queue instead would wake this
/// thread for every record: a cross-thread wake-up per record cost more CPU
/// than writing it. Each commit writes every page it dirtied to the WAL
/// again (a leaf of each table, about 0.8 ms in all), so against a slow
/// endpoint, a few hundred rows a second, a 50 ms sleep spent nearly half the
/// writer's time committing. It is also how long an answer can wait to be
/// committed, and a process killed meanwhile pays for it again on resume:
/// senders wake the writer sooner once `WAKE_BYTES` are queued, and a flush,
/// a segment's start or the run's end wakes it at once.
const LINGER: Duration = Duration::from_millis(250);

/// Queued bytes at which the writer stops sleeping: a fast run commits in
/// steps of about this much (a hundred rows or so with their payloads),
/// which bounds the answers a kill can lose. At some thousands of rows a
/// second it keeps peak memory where a 50 ms sleep kept it; a 1 MiB step
/// held 2-3 MiB more.
pub const WAKE_BYTES: usize = 256 << 10;

/// The writer hands bytes back to the queue's budget in steps of this many.
const RELEASE_BYTES: usize = 256 << 10;

/// A record on its way to the writer, with what the queue's budget counted
/// for it.
pub struct Queued {
    pub record: Record,
    pub bytes: usize,
}

pub fn insert_run(conn: &Connection, run: &NewRun) -> Result<i64> {
    conn.execute(
        "INSERT INTO runs (pipeline_path, config_sha256, source_path, sinks_json, weir_version,
                           started_at_ms, status, shard, shards_at_once)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?8, ?7, ?9)",
        params![
            run.pipeline_path,
            run.config_sha256,
            run.source_path,
            serde_json::to_string(&run.sinks)?,
            run.weir_version,
            super::now_ms(),
            run.shard,
            RunStatus::Running,
            run.shards_at_once
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

/// The canonical hash of `json`, keeping its body with row `row_index` when
/// payloads are kept.
fn hash(scope: Scope, bundler: &mut Bundler, row_index: u64, json: Json) -> Result<String> {
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
            let body = hashing::canonical_value_text(&serde_json::Value::Array(values));
            (hashing::sha256_hex(&body), body)
        }
    };
    if scope.payloads {
        bundler.add(row_index, &sha256, &body);
    }
    Ok(sha256)
}

/// Writes until every sender is gone, then hands the connection back so the
/// run's end can be checked against what was written. An error names the
/// operating system's cause where SQLite knows it (a full disk).
pub fn run(
    mut conn: Connection,
    scope: Scope,
    rx: &Receiver<Queued>,
    budget: &ByteBudget,
) -> Result<Connection> {
    match write_all(&mut conn, scope, rx, budget) {
        Ok(()) => Ok(conn),
        Err(e) => Err(with_os_error(&conn, e)),
    }
}

fn write_all(
    conn: &mut Connection,
    scope: Scope,
    rx: &Receiver<Queued>,
    budget: &ByteBudget,
) -> Result<()> {
    let mut bundler = Bundler::new()?;
    while let Ok(first) = rx.recv() {
        let tx = conn.transaction()?;
        let mut acks = Vec::new();
        let mut written_bytes = 0;
        let mut take = |Queued { record, bytes }| {
            let taken = match record {
                Record::Flush(ack) => {
                    // Whoever waits reads the database next: all of it is there.
                    bundler.release();
                    acks.push(ack);
                    Ok(())
                }
                record => write(&tx, scope, &mut bundler, record),
            };
            // The record is gone from memory: senders waiting on the budget
            // go on, a few at a time rather than one wake-up per record.
            written_bytes += bytes;
            if written_bytes >= RELEASE_BYTES {
                budget.release(std::mem::take(&mut written_bytes));
            }
            taken
        };
        take(first)?;
        let mut written = 1;
        let mut open = true;
        while written < BATCH {
            match rx.try_recv() {
                Ok(record) => {
                    take(record)?;
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
        budget.release(written_bytes);
        if !open {
            bundler.release();
        }
        bundler.write(&tx, scope.run)?;
        tx.commit()?;
        for ack in acks {
            let _ = ack.try_send(());
        }
        if !open {
            return Ok(());
        }
        if written < BATCH && budget.queued() < WAKE_BYTES {
            // Senders unpark this thread at `WAKE_BYTES`; a flush, a
            // segment's start and `AuditLog::close` at once, so none of
            // them waits out the linger.
            std::thread::park_timeout(LINGER);
        }
    }
    // The last senders left between two transactions: what is held still
    // belongs on disk.
    if !bundler.is_idle() {
        let tx = conn.transaction()?;
        bundler.release();
        bundler.write(&tx, scope.run)?;
        tx.commit()?;
    }
    Ok(())
}

/// SQLite says "database or disk is full"; the operating system's error
/// behind it says which file system, in the words the other errors use.
pub fn with_os_error(conn: &Connection, error: AuditError) -> AuditError {
    match error {
        AuditError::Sqlite(sqlite) => match os_error_behind(conn, &sqlite) {
            Some(os) => AuditError::Os { os, sqlite },
            None => AuditError::Sqlite(sqlite),
        },
        other => other,
    }
}

fn os_error_behind(conn: &Connection, sqlite: &rusqlite::Error) -> Option<std::io::Error> {
    let rusqlite::Error::SqliteFailure(failure, _) = sqlite else {
        return None;
    };
    Some(match failure.code {
        // SQLite's Unix file layer answers a failed write with SQLITE_FULL
        // only when the system said ENOSPC (or wrote short, which is how a
        // full disk shows), and keeps no errno for it.
        #[cfg(unix)]
        rusqlite::ErrorCode::DiskFull => std::io::Error::from_raw_os_error(ENOSPC),
        _ => {
            // SAFETY: the handle is this open connection's, used on the
            // thread that owns it; sqlite3_system_errno only reads the error
            // number its last failed call left.
            let errno = unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) };
            if errno == 0 {
                return None;
            }
            std::io::Error::from_raw_os_error(errno)
        }
    })
}

/// "No space left on device" on Linux, macOS and the BSDs.
#[cfg(unix)]
const ENOSPC: i32 = 28;

fn write(tx: &Transaction, scope: Scope, bundler: &mut Bundler, record: Record) -> Result<()> {
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
                .execute(params![
                    run,
                    r.row_index,
                    r.source_line,
                    Hash(&r.content_sha256)
                ])?;
        }
        Record::NodeState(s) => {
            let input_sha256 = hash(scope, bundler, s.row_index, s.input)?;
            let output_sha256 = s
                .output
                .map(|o| hash(scope, bundler, s.row_index, o))
                .transpose()?;
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
                Hash(&input_sha256),
                output_sha256.as_deref().map(Hash),
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
            .execute(params![run, a.state_id, a.key, Hash(&a.value)])?;
        }
        Record::Call(c) => {
            let request_sha256 = hash(scope, bundler, c.row_index, c.request)?;
            let response_sha256 = c
                .response
                .map(|r| hash(scope, bundler, c.row_index, r))
                .transpose()?;
            tx.prepare_cached(
                "INSERT INTO calls
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                         ?18, ?19, ?20, ?21, ?22)",
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
                Hash(&request_sha256),
                response_sha256.as_deref().map(Hash),
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
                c.cached,
                c.provider_batch
            ])?;
        }
        Record::Commit(commit) => {
            let mut outcome = tx.prepare_cached(
                "INSERT INTO row_outcomes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for o in commit.outcomes {
                bundler.forget(o.row_index);
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
        Record::Payload(p) => bundler.add_source(p.row_index, &p.sha256, &p.body),
        Record::SegmentStarted {
            rows_skipped,
            source,
        } => {
            tx.prepare_cached(
                "INSERT INTO segments (run_id, segment, started_at_ms, status, rows_skipped,
                                       source_size, source_mtime_ns)
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6)",
            )?
            .execute(params![
                run,
                segment,
                super::now_ms(),
                rows_skipped,
                source.size,
                source.modified_ns
            ])?;
        }
        Record::SourceRead { sha256 } => {
            tx.prepare_cached(
                "UPDATE segments SET source_sha256 = ?3 WHERE run_id = ?1 AND segment = ?2",
            )?
            .execute(params![run, segment, sha256])?;
        }
        Record::SourceRefused => {
            tx.prepare_cached(
                "UPDATE segments SET source_size = NULL, source_mtime_ns = NULL,
                 source_sha256 = NULL WHERE run_id = ?1 AND segment = ?2",
            )?
            .execute(params![run, segment])?;
        }
        Record::SourceReplaced => {
            tx.prepare_cached(
                "DELETE FROM rows WHERE run_id = ?1 AND NOT EXISTS
                 (SELECT 1 FROM row_outcomes o WHERE o.run_id = rows.run_id
                  AND o.row_index = rows.row_index)",
            )?
            .execute(params![run])?;
        }
        Record::PathsRenamed(renames) => rename_paths(tx, run, &renames)?,
        // Acknowledged by `run` once its transaction is committed.
        Record::Flush(_) => {}
        Record::EndpointEvent(e) => {
            tx.prepare_cached("INSERT INTO endpoint_events VALUES (?1, ?2, ?3, ?4, ?5)")?
                .execute(params![run, e.endpoint, e.at_ms, e.event, e.detail])?;
        }
        Record::LearnedLimit(l) => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO learned_limits VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                l.url,
                l.model,
                run,
                l.endpoint,
                l.concurrency_limit,
                l.floor,
                l.no_load_rtt_ms,
                l.at_ms,
                l.held_by_queue
            ])?;
        }
    }
    Ok(())
}

/// Gives the run's recorded files their new names everywhere they appear.
fn rename_paths(tx: &Transaction, run: i64, renames: &[(String, String)]) -> Result<()> {
    let (source, sinks_json): (String, String) = tx.query_row(
        "SELECT source_path, sinks_json FROM runs WHERE run_id = ?1",
        [run],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let renamed = |path: &String| {
        renames
            .iter()
            .find(|(old, _)| old == path)
            .map_or_else(|| path.clone(), |(_, new)| new.clone())
    };
    let mut sinks: SinkPaths = serde_json::from_str(&sinks_json)?;
    sinks.sinks = sinks.sinks.iter().map(renamed).collect();
    sinks.on_error = sinks.on_error.iter().map(renamed).collect();
    tx.execute(
        "UPDATE runs SET source_path = ?2, sinks_json = ?3 WHERE run_id = ?1",
        params![run, renamed(&source), serde_json::to_string(&sinks)?],
    )?;
    for (old, new) in renames {
        tx.execute(
            "UPDATE sink_checkpoints SET path = ?3 WHERE run_id = ?1 AND path = ?2",
            params![run, old, new],
        )?;
        tx.execute(
            "UPDATE row_outcomes SET error_sink = ?3 WHERE run_id = ?1 AND error_sink = ?2",
            params![run, old, new],
        )?;
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
    pub status: RunStatus,
    /// What the run's calls cost in all its segments, in USD.
    pub cost_usd: f64,
    /// The same by node name, in pipeline order.
    pub cost_by_node: Vec<(String, f64)>,
    /// What components counted (attachments named `count.NAME` holding a
    /// whole number, the last per row and name), summed: (node, NAME,
    /// total), in pipeline order.
    pub counted: Vec<(String, String, u64)>,
}

/// A run whose set-up failed (a component that does not load, a pipeline
/// that changed under a resume) ends as `failed_to_start`, with the error.
pub fn failed_to_start(conn: &Connection, run: i64, error: &str) -> Result<()> {
    conn.execute(
        "UPDATE runs SET finished_at_ms = ?2, status = ?4, summary_json = ?3
         WHERE run_id = ?1",
        params![
            run,
            super::now_ms(),
            serde_json::json!({ "error": error }).to_string(),
            RunStatus::FailedToStart
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
    let count = |outcome: RowOutcome| outcomes.get(outcome.as_str()).copied().unwrap_or(0);
    let failed = count(RowOutcome::Failed);
    let rejected: u64 = RowOutcome::SET_ASIDE.into_iter().map(count).sum();
    let status = if end.interrupted {
        RunStatus::Interrupted
    } else if without_outcome_count > 0 {
        RunStatus::Incomplete
    } else if rejected > 0 {
        RunStatus::CompletedWithFailures
    } else {
        RunStatus::Completed
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
    let counted = conn
        .prepare(
            "SELECT n.name, substr(a.key, 7), sum(CAST(a.value AS INTEGER))
             FROM node_state_attributes a
             JOIN node_states s ON s.run_id = a.run_id AND s.state_id = a.state_id
             JOIN nodes n ON n.run_id = s.run_id AND n.node_id = s.node_id
             WHERE a.run_id = ?1 AND a.key LIKE 'count.%' AND typeof(a.value) = 'text'
             GROUP BY n.node_id, a.key ORDER BY n.node_id, a.key",
        )?
        .query_map([run], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<(String, String, u64)>>>()?;
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
            count(RowOutcome::Completed),
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
        counted,
        status,
    })
}
