//! What a run's earlier segments left in the database, read back so a new
//! process can carry the run on where they stopped.

use super::records::{EndpointRecord, NodeRecord, SinkPaths};
use super::stored::HashText;
use crate::context::Context;
use crate::io::FileStamp;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::{HashMap, HashSet};

use super::{AuditError, RunStatus};

type Result<T, E = AuditError> = std::result::Result<T, E>;

/// How the run was set up when it started, to compare with the pipeline now.
pub struct RecordedRun {
    pub run_id: i64,
    pub pipeline_path: String,
    pub source_path: String,
    pub sinks: SinkPaths,
    pub nodes: Vec<NodeRecord>,
    pub endpoints: Vec<EndpointRecord>,
    /// The source as the latest segment that recorded it found it; none for
    /// a run recorded before weir kept it.
    pub source: Option<RecordedSource>,
}

pub struct RecordedSource {
    pub segment: u32,
    pub stamp: FileStamp,
    /// Of the whole file, when that segment read it to the end.
    pub sha256: Option<String>,
}

pub struct ResumePoint {
    pub run: RecordedRun,
    /// The segment this process writes.
    pub segment: u32,
    /// Content hash of every source row the run has read so far, by index.
    pub row_hashes: HashMap<u64, String>,
    /// Rows that already have their terminal outcome.
    pub done: HashSet<u64>,
    /// Bytes of each sink file that belong to the finished rows.
    pub checkpoints: HashMap<String, u64>,
    pub next_state_id: u64,
    pub next_batch_id: u64,
}

/// The run to resume: `run_id`, or the latest unfinished run of `pipeline_path`.
pub fn pick_run(conn: &Connection, run_id: Option<i64>, pipeline_path: &str) -> Result<i64> {
    let found: Option<(i64, String, String)> = match run_id {
        Some(id) => conn
            .query_row(
                "SELECT run_id, status, pipeline_path FROM runs WHERE run_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?,
        None => conn
            .query_row(
                "SELECT run_id, status, pipeline_path FROM runs
                 WHERE pipeline_path = ?1 AND status IN ('running', 'incomplete', 'interrupted')
                   AND EXISTS (SELECT 1 FROM segments s WHERE s.run_id = runs.run_id)
                 ORDER BY run_id DESC LIMIT 1",
                [pipeline_path],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?,
    };
    let Some((id, status, recorded_path)) = found else {
        match run_id {
            Some(id) => {
                return Err(AuditError::Invalid(format!(
                    "there is no run {id} in this audit database"
                )));
            }
            None => {
                return Err(AuditError::Invalid(format!(
                    "no unfinished run of {pipeline_path} in this audit database"
                )));
            }
        }
    };
    if !RunStatus::parse(&status).is_some_and(RunStatus::is_resumable) {
        return Err(AuditError::Invalid(format!(
            "run {id} already finished ({status}); there is nothing to resume"
        )));
    }
    let segments: u32 = conn.query_row(
        "SELECT count(*) FROM segments WHERE run_id = ?1",
        [id],
        |r| r.get(0),
    )?;
    if segments == 0 {
        return Err(AuditError::Invalid(format!(
            "run {id} stopped before it began on any row; there is nothing to resume: start a \
             new run with `weir run`"
        )));
    }
    if recorded_path != pipeline_path {
        return Err(AuditError::Invalid(format!(
            "run {id} was started from {recorded_path}, not {pipeline_path}; resume it with that \
             pipeline file"
        )));
    }
    Ok(id)
}

pub fn load(conn: &Connection, run_id: i64) -> Result<ResumePoint> {
    let (pipeline_path, source_path, sinks_json): (String, String, String) = conn.query_row(
        "SELECT pipeline_path, source_path, sinks_json FROM runs WHERE run_id = ?1",
        [run_id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let run = RecordedRun {
        run_id,
        pipeline_path,
        source_path,
        sinks: serde_json::from_str(&sinks_json).context("runs.sinks_json")?,
        nodes: nodes(conn, run_id)?,
        endpoints: endpoints(conn, run_id)?,
        source: recorded_source(conn, run_id)?,
    };
    let segment: u32 = conn.query_row(
        "SELECT coalesce(max(segment), 0) + 1 FROM segments WHERE run_id = ?1",
        [run_id],
        |r| r.get(0),
    )?;
    let row_hashes = conn
        .prepare("SELECT row_index, content_sha256 FROM rows WHERE run_id = ?1")?
        .query_map([run_id], |r| Ok((r.get(0)?, r.get::<_, HashText>(1)?.0)))?
        .collect::<rusqlite::Result<_>>()?;
    let done = conn
        .prepare("SELECT row_index FROM row_outcomes WHERE run_id = ?1")?
        .query_map([run_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let checkpoints = conn
        .prepare("SELECT path, byte_offset FROM sink_checkpoints WHERE run_id = ?1")?
        .query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let next_id = |table: &str, column: &str| -> Result<u64> {
        Ok(conn.query_row(
            &format!("SELECT coalesce(max({column}), 0) + 1 FROM {table} WHERE run_id = ?1"),
            params![run_id],
            |r| r.get(0),
        )?)
    };
    Ok(ResumePoint {
        segment,
        row_hashes,
        done,
        checkpoints,
        // A killed segment's calls can name states it never got to record.
        next_state_id: next_id("node_states", "state_id")?.max(next_id("calls", "state_id")?),
        next_batch_id: next_id("batches", "batch_id")?,
        run,
    })
}

fn recorded_source(conn: &Connection, run_id: i64) -> Result<Option<RecordedSource>> {
    Ok(conn
        .query_row(
            "SELECT segment, source_size, source_mtime_ns, source_sha256 FROM segments
             WHERE run_id = ?1 AND source_size IS NOT NULL ORDER BY segment DESC LIMIT 1",
            [run_id],
            |r| {
                Ok(RecordedSource {
                    segment: r.get(0)?,
                    stamp: FileStamp {
                        size: r.get(1)?,
                        modified_ns: r.get(2)?,
                    },
                    sha256: r.get(3)?,
                })
            },
        )
        .optional()?)
}

fn nodes(conn: &Connection, run_id: i64) -> Result<Vec<NodeRecord>> {
    let mut stmt = conn.prepare(
        "SELECT node_id, name, component, component_sha256, wit_version, options_sha256,
                output_fields
         FROM nodes WHERE run_id = ?1 ORDER BY node_id",
    )?;
    let rows = stmt.query_map([run_id], |r| {
        Ok(NodeRecord {
            node_id: r.get(0)?,
            name: r.get(1)?,
            component: r.get(2)?,
            component_sha256: r.get(3)?,
            wit_version: r.get(4)?,
            options_sha256: r.get(5)?,
            output_fields: serde_json::from_str(&r.get::<_, String>(6)?).unwrap_or_default(),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn endpoints(conn: &Connection, run_id: i64) -> Result<Vec<EndpointRecord>> {
    let mut stmt = conn.prepare(
        "SELECT name, kind, url, secret_fingerprint, settings_json
         FROM endpoints WHERE run_id = ?1 ORDER BY name",
    )?;
    let rows = stmt.query_map([run_id], |r| {
        Ok(EndpointRecord {
            name: r.get(0)?,
            kind: r.get(1)?,
            url: r.get(2)?,
            secret_fingerprint: r.get(3)?,
            settings_json: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
