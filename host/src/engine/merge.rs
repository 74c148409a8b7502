//! `weir merge`: joins the parts of a sharded run into what one run would
//! have written: each sink in source order, and one audit database in which
//! the shards' runs are one run, so `runs`, `explain`, `record-fixtures` and
//! `purge` work as for any run. Refuses while a part is missing or
//! unfinished, and touches nothing then.

use crate::config::{Format, Pipeline, part_path};
use crate::context::Context;
use crate::services::audit::{self, History, RowOutcome, RunStatus};
use rusqlite::{Connection, params};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use super::MergeError;

type Result<T, E = MergeError> = std::result::Result<T, E>;

pub struct Merged {
    pub run_id: i64,
    pub rows: u64,
    pub sinks: Vec<PathBuf>,
    pub audit: PathBuf,
}

/// Tables a run's records live in, in an order that keeps references whole.
const TABLES: &[&str] = &[
    "segments",
    "rows",
    "node_states",
    "node_state_attributes",
    "calls",
    "batches",
    "batch_members",
    "row_outcomes",
    "payloads",
    "row_payloads",
    "endpoint_events",
];

pub fn merge(pipeline: &Pipeline, shards: u32) -> Result<Merged> {
    if shards == 0 {
        return Err(MergeError::Invalid("--shards must be at least 1".into()));
    }
    let parts = check_parts(pipeline, shards)?;
    let mut sinks = Vec::new();
    for sink in pipeline.sinks.iter().chain(&pipeline.error_sinks) {
        let pieces: Vec<PathBuf> = (0..shards)
            .map(|i| part_path(&sink.path, i, shards))
            .collect();
        join_files(&pieces, &sink.path, sink.format)?;
        sinks.push(sink.path.clone());
    }
    let sinks_json = serde_json::to_string(&super::resume::sink_paths(pipeline))?;
    let (run_id, rows) = merge_audits(&parts, &pipeline.audit_path, shards, &sinks_json)?;
    Ok(Merged {
        run_id,
        rows,
        sinks,
        audit: pipeline.audit_path.clone(),
    })
}

/// Every part's audit database holds a finished run of its shard, and every
/// part file of every sink is there.
fn check_parts(pipeline: &Pipeline, shards: u32) -> Result<Vec<(PathBuf, i64)>> {
    let mut parts = Vec::new();
    for index in 0..shards {
        let shard = format!("{index}/{shards}");
        let db = part_path(&pipeline.audit_path, index, shards);
        if !db.exists() {
            return Err(MergeError::Invalid(format!(
                "shard {shard} has not run: there is no {}; run it with `weir run {} --shard {shard}`",
                pipeline.staging.shown(&db),
                pipeline.file.path.display()
            )));
        }
        let history = History::open(&db)?;
        let run = history
            .runs()?
            .into_iter()
            .rev()
            .find(|r| r.shard.as_deref() == Some(shard.as_str()))
            .ok_or_else(|| {
                MergeError::Invalid(format!(
                    "{} holds no run of shard {shard}",
                    pipeline.staging.shown(&db)
                ))
            })?;
        let finished = [RunStatus::Completed, RunStatus::CompletedWithFailures];
        if !finished.iter().any(|s| s.as_str() == run.state()) {
            return Err(MergeError::Invalid(format!(
                "shard {shard} is not finished (run {} in {} is {}); finish it with `weir run {} \
                 --shard {shard} --resume`",
                run.run_id,
                pipeline.staging.shown(&db),
                run.state(),
                pipeline.file.path.display()
            )));
        }
        for sink in pipeline.sinks.iter().chain(&pipeline.error_sinks) {
            let piece = part_path(&sink.path, index, shards);
            if !piece.exists() {
                return Err(MergeError::Invalid(format!(
                    "shard {shard} finished but its part {} is missing",
                    pipeline.staging.shown(&piece)
                )));
            }
        }
        parts.push((db, run.run_id));
    }
    Ok(parts)
}

/// Concatenates the parts in shard order; a CSV's header is written once.
fn join_files(pieces: &[PathBuf], into: &Path, format: Format) -> Result<()> {
    let partial = into.with_extension(format!(
        "{}.partial",
        into.extension().unwrap_or_default().to_string_lossy()
    ));
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?,
    );
    let mut header_written = false;
    for piece in pieces {
        let file = std::fs::File::open(piece)
            .with_context(|| format!("cannot open {}", piece.display()))?;
        let mut reader = BufReader::new(file);
        if format == Format::Csv {
            let mut header = Vec::new();
            reader.read_until(b'\n', &mut header)?;
            if !header_written && !header.is_empty() {
                out.write_all(&header)?;
                header_written = true;
            }
        }
        std::io::copy(&mut reader, &mut out).with_context(|| {
            format!("cannot copy {} into {}", piece.display(), partial.display())
        })?;
    }
    out.into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, into)
        .with_context(|| format!("cannot move {} into place", partial.display()))?;
    Ok(())
}

/// One run in `into` made of the shards' runs. State and batch ids are
/// shifted past the shards before them; row indices are global already.
/// The merged run is added to `into`, beside the runs it already holds, one
/// transaction per shard; it is `merging` until the last, and a merge that
/// was cut short is cleared by the next.
fn merge_audits(
    parts: &[(PathBuf, i64)],
    into: &Path,
    shards: u32,
    sinks_json: &str,
) -> Result<(i64, u64)> {
    let conn = audit::open_database(into)?;
    clear_cut_merges(&conn)?;
    let (first_db, first_run) = &parts[0];
    conn.execute("ATTACH DATABASE ?1 AS part", [first_db.to_string_lossy()])?;
    conn.execute_batch("BEGIN;")?;
    copy_rows(&conn, "runs", *first_run, None, (0, 0, 0))?;
    let run_id = conn.last_insert_rowid();
    conn.execute(
        "UPDATE runs SET status = ?2 WHERE run_id = ?1",
        params![run_id, RunStatus::Merging],
    )?;
    for table in ["nodes", "endpoints"] {
        copy_rows(&conn, table, *first_run, Some(run_id), (0, 0, 0))?;
    }
    conn.execute_batch("COMMIT; DETACH DATABASE part;")?;
    let (mut state_offset, mut batch_offset, mut segment_offset) = (0i64, 0i64, 0i64);
    for (db, part_run) in parts {
        conn.execute("ATTACH DATABASE ?1 AS part", [db.to_string_lossy()])?;
        conn.execute_batch("BEGIN;")?;
        let offsets = (state_offset, batch_offset, segment_offset);
        for table in TABLES {
            copy_rows(&conn, table, *part_run, Some(run_id), offsets)?;
        }
        conn.execute_batch("COMMIT;")?;
        let max = |sql: &str| -> Result<i64> {
            Ok(conn
                .query_row(sql, [part_run], |r| r.get::<_, Option<i64>>(0))?
                .unwrap_or(-1))
        };
        let states = max("SELECT max(state_id) FROM part.node_states WHERE run_id = ?1")?;
        let called = max("SELECT max(state_id) FROM part.calls WHERE run_id = ?1")?;
        state_offset += states.max(called) + 1;
        batch_offset += max("SELECT max(batch_id) FROM part.batches WHERE run_id = ?1")? + 1;
        segment_offset += max("SELECT max(segment) FROM part.segments WHERE run_id = ?1")?;
        conn.execute_batch("DETACH DATABASE part;")?;
    }
    conn.execute_batch("BEGIN;")?;
    conn.execute(
        "UPDATE runs SET sinks_json = ?2 WHERE run_id = ?1",
        params![run_id, sinks_json],
    )?;
    let rows = summarize(&conn, run_id, parts, shards)?;
    conn.execute_batch("COMMIT;")?;
    Ok((run_id, rows))
}

/// Deletes what a merge cut short left: a run still `merging`.
fn clear_cut_merges(conn: &Connection) -> Result<()> {
    let cut: Vec<i64> = conn
        .prepare("SELECT run_id FROM runs WHERE status = ?1")?
        .query_map([RunStatus::Merging], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for run in cut {
        conn.execute_batch("BEGIN;")?;
        for table in TABLES.iter().chain(&["nodes", "endpoints", "runs"]) {
            conn.execute(&format!("DELETE FROM {table} WHERE run_id = ?1"), [run])?;
        }
        conn.execute_batch("COMMIT;")?;
    }
    Ok(())
}

/// Copies one run's rows of `table` from the attached part, giving them
/// `run_id` (a new one when None) and shifting state, batch and segment ids.
fn copy_rows(
    conn: &Connection,
    table: &str,
    part_run: i64,
    run_id: Option<i64>,
    (states, batches, segments): (i64, i64, i64),
) -> Result<()> {
    // (name, default) of each column; none where the table is not there.
    let columns_of = |schema: &str| -> Result<Vec<(String, Option<String>)>> {
        Ok(conn
            .prepare(&format!("PRAGMA {schema}.table_info({table})"))?
            .query_map([], |r| Ok((r.get(1)?, r.get(4)?)))?
            .collect::<rusqlite::Result<_>>()?)
    };
    // A part written by an earlier weir lacks the columns added since, and
    // one written before schema 7 has no `row_payloads`.
    let part_columns = columns_of("part")?;
    if part_columns.is_empty() {
        return Ok(());
    }
    let (columns, defaults): (Vec<String>, Vec<Option<String>>) =
        columns_of("main")?.into_iter().unzip();
    let values: Vec<String> = columns
        .iter()
        .zip(&defaults)
        .map(|(c, default)| match (c.as_str(), run_id) {
            (column, _) if !part_columns.iter().any(|(p, _)| p == column) => {
                default.clone().unwrap_or_else(|| "NULL".into())
            }
            ("run_id", Some(id)) => id.to_string(),
            ("run_id", None) => "NULL".into(),
            ("state_id", _) => format!("state_id + {states}"),
            ("batch_id", _) => format!("batch_id + {batches}"),
            ("segment", _) => format!("segment + {segments}"),
            // A part written by a weir before schema 7 holds hashes as hex.
            (
                "content_sha256" | "input_sha256" | "output_sha256" | "request_sha256"
                | "response_sha256" | "sha256",
                _,
            ) => audit::hex_to_blob_sql(c),
            ("value", _) if table == "node_state_attributes" => audit::hex_to_blob_sql(c),
            (other, _) => other.to_string(),
        })
        .collect();
    let or_ignore = if table == "payloads" { "OR IGNORE" } else { "" };
    conn.execute(
        &format!(
            "INSERT {or_ignore} INTO main.{table} ({}) SELECT {} FROM part.{table} WHERE run_id = ?1",
            columns.join(", "),
            values.join(", ")
        ),
        params![part_run],
    )
    .with_context(|| format!("cannot merge the `{table}` records"))?;
    Ok(())
}

/// The merged run's totals, from the records merged.
fn summarize(conn: &Connection, run_id: i64, parts: &[(PathBuf, i64)], shards: u32) -> Result<u64> {
    let rows: u64 = conn.query_row(
        "SELECT count(*) FROM rows WHERE run_id = ?1",
        [run_id],
        |r| r.get(0),
    )?;
    let mut outcomes = std::collections::BTreeMap::new();
    let mut stmt = conn
        .prepare("SELECT outcome, count(*) FROM row_outcomes WHERE run_id = ?1 GROUP BY outcome")?;
    for pair in stmt.query_map([run_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?))
    })? {
        let (outcome, n) = pair?;
        outcomes.insert(outcome, n);
    }
    let count = |o: RowOutcome| outcomes.get(o.as_str()).copied().unwrap_or(0);
    let set_aside: u64 = RowOutcome::SET_ASIDE.into_iter().map(count).sum();
    let status = if set_aside > 0 {
        RunStatus::CompletedWithFailures
    } else {
        RunStatus::Completed
    };
    let mut started = i64::MAX;
    let mut finished = 0i64;
    for (db, part_run) in parts {
        let part = Connection::open(db)?;
        let (s, f): (i64, Option<i64>) = part.query_row(
            "SELECT started_at_ms, finished_at_ms FROM runs WHERE run_id = ?1",
            [part_run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        started = started.min(s);
        finished = finished.max(f.unwrap_or(s));
    }
    conn.execute(
        "UPDATE runs SET status = ?2, started_at_ms = ?3, finished_at_ms = ?4, rows_total = ?5,
             rows_completed = ?6, rows_failed = ?7, outcomes_json = ?8,
             summary_json = ?9, shard = ?10, shards_at_once = NULL,
             cost_usd = (SELECT sum(cost_usd) FROM calls WHERE run_id = ?1)
         WHERE run_id = ?1",
        params![
            run_id,
            status,
            started,
            finished,
            rows,
            count(RowOutcome::Completed),
            count(RowOutcome::Failed),
            serde_json::to_string(&outcomes)?,
            serde_json::json!({ "merged_shards": shards }).to_string(),
            format!("merged {shards}")
        ],
    )?;
    Ok(rows)
}
