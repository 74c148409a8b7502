//! Reads runs back out of the audit database: the list of runs, and one
//! row's whole story.

use super::records::SinkPaths;
use super::stored::{self, HashText};
use super::{OLDEST_READABLE_VERSION, SCHEMA_VERSION, lock::RunLock};
use crate::context::Context;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{AuditError, RunStatus};

type Result<T, E = AuditError> = std::result::Result<T, E>;

pub struct History {
    conn: Connection,
    path: PathBuf,
    /// Schema 7 and later keep bodies by row, and hashes as their bytes; a
    /// database read as it is from before has neither.
    schema_7: bool,
    /// Whether runs record `shards_at_once`.
    schema_10: bool,
}

pub struct RunInfo {
    pub run_id: i64,
    pub status: String,
    /// Whether a process works on it right now.
    pub in_progress: bool,
    pub pipeline_path: String,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub segments: u32,
    pub rows: u64,
    /// Rows per terminal outcome so far.
    pub outcomes: BTreeMap<String, u64>,
    pub calls: u64,
    /// What its calls cost so far; None when no endpoint has a price.
    pub cost_usd: Option<f64>,
    /// `I/N` for a shard's run, `merged N` for a merge of N shards.
    pub shard: Option<String>,
    /// With `shard`: how many shards its scheduler runs at once, when told.
    pub shards_at_once: Option<u32>,
    /// (endpoint, provider batch id) of the run's Batch API batches that
    /// the provider may still be working on.
    pub open_batches: Vec<(String, String)>,
}

impl RunInfo {
    /// `running` is only true while a process holds the run; a run left
    /// `running` by a killed process is `interrupted`.
    pub fn state(&self) -> &str {
        if self.status == RunStatus::Running.as_str() && !self.in_progress {
            return RunStatus::Interrupted.as_str();
        }
        &self.status
    }
}

pub struct RowStory {
    pub run: RunInfo,
    pub row_index: u64,
    pub source_line: u64,
    pub content_sha256: String,
    pub content: Option<String>,
    /// In the order they began; includes the work of killed segments.
    pub states: Vec<StateStory>,
    pub outcome: Option<OutcomeStory>,
}

pub struct StateStory {
    pub state_id: u64,
    pub node_id: usize,
    pub node_name: String,
    /// None when the segment was killed before the node finished the row.
    pub finished: Option<FinishedState>,
    pub segment: Option<u32>,
    pub batch: Option<BatchStory>,
    pub attributes: Vec<(String, String)>,
    pub calls: Vec<CallStory>,
}

pub struct FinishedState {
    pub status: String,
    pub input_sha256: String,
    pub output_sha256: Option<String>,
    pub output: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub duration_ms: u64,
}

pub struct BatchStory {
    pub batch_id: u64,
    pub mode: String,
    pub members: Vec<u64>,
}

pub struct CallStory {
    pub call_index: u32,
    pub endpoint: String,
    pub request_index: u32,
    pub attempt: u32,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub retry_cause: Option<String>,
    pub latency_ms: u64,
    pub tokens: Option<(u64, u64)>,
    pub replayed: bool,
    pub request_sha256: String,
    pub request: Option<String>,
    pub response_sha256: Option<String>,
    pub response: Option<String>,
    /// The provider batch that answered it, in Batch API mode.
    pub provider_batch: Option<String>,
}

pub struct OutcomeStory {
    pub outcome: String,
    pub node_name: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub rows_written: u64,
    pub batch_id: Option<u64>,
    pub error_sink: Option<String>,
    pub segment: u32,
    /// Where the run writes rows that complete.
    pub sinks: Vec<String>,
}

impl History {
    pub fn open(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(AuditError::NoDatabase {
                path: path.to_path_buf(),
            });
        }
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("cannot open the audit database {}", path.display()))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if !(OLDEST_READABLE_VERSION..=SCHEMA_VERSION).contains(&version) {
            return Err(AuditError::Unreadable {
                path: path.to_path_buf(),
                version,
            });
        }
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            schema_7: version >= 7,
            schema_10: version >= 10,
        })
    }

    pub fn runs(&self) -> Result<Vec<RunInfo>> {
        let ids = self
            .conn
            .prepare("SELECT run_id FROM runs ORDER BY run_id")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        ids.into_iter().map(|id| self.run(id)).collect()
    }

    /// What the segment that ended the run kept of its summary, as JSON:
    /// its endpoints' figures, or why it failed to start.
    pub fn summary_json(&self, run_id: i64) -> Result<String> {
        self.conn
            .query_row(
                "SELECT summary_json FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| AuditError::NoRun {
                run_id,
                path: self.path.clone(),
            })
    }

    pub fn run(&self, run_id: i64) -> Result<RunInfo> {
        // A database before schema 10 records no `shards_at_once`.
        let at_once = if self.schema_10 {
            "shards_at_once"
        } else {
            "NULL"
        };
        let found = self
            .conn
            .query_row(
                &format!(
                    "SELECT status, pipeline_path, started_at_ms, finished_at_ms, shard, {at_once}
                     FROM runs WHERE run_id = ?1"
                ),
                [run_id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .optional()?;
        let Some((status, pipeline_path, started_at_ms, finished_at_ms, shard, shards_at_once)) =
            found
        else {
            return Err(AuditError::NoRun {
                run_id,
                path: self.path.clone(),
            });
        };
        let count =
            |sql: &str| -> Result<u64> { Ok(self.conn.query_row(sql, [run_id], |r| r.get(0))?) };
        let mut outcomes = BTreeMap::new();
        let mut stmt = self.conn.prepare(
            "SELECT outcome, count(*) FROM row_outcomes WHERE run_id = ?1 GROUP BY outcome",
        )?;
        for pair in stmt.query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?)))? {
            let (outcome, n): (String, u64) = pair?;
            outcomes.insert(outcome, n);
        }
        Ok(RunInfo {
            run_id,
            status,
            in_progress: RunLock::is_held(&self.path, run_id),
            pipeline_path,
            started_at_ms,
            finished_at_ms,
            segments: count("SELECT count(*) FROM segments WHERE run_id = ?1")? as u32,
            rows: count("SELECT count(*) FROM rows WHERE run_id = ?1")?,
            outcomes,
            calls: count("SELECT count(*) FROM calls WHERE run_id = ?1")?,
            shard,
            shards_at_once,
            cost_usd: self.conn.query_row(
                "SELECT sum(cost_usd) FROM calls WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )?,
            open_batches: self.open_batches(run_id)?,
        })
    }

    /// The run's provider batches submitted and not seen to end, oldest
    /// first; none in a database older than Batch API mode.
    pub fn open_batches(&self, run_id: i64) -> Result<Vec<(String, String)>> {
        let has_table: bool = self.conn.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'provider_batches'",
            [],
            |r| r.get(0),
        )?;
        if !has_table {
            return Ok(Vec::new());
        }
        let mut query = self.conn.prepare(
            "SELECT endpoint, batch_id FROM provider_batches
             WHERE run_id = ?1 AND state = 'submitted' AND batch_id IS NOT NULL ORDER BY job_id",
        )?;
        let batches = query
            .query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(batches)
    }

    pub fn row(&self, run_id: i64, row_index: u64) -> Result<RowStory> {
        let run = self.run(run_id)?;
        let found: Option<(u64, String)> = self
            .conn
            .query_row(
                "SELECT source_line, content_sha256 FROM rows WHERE run_id = ?1 AND row_index = ?2",
                params![run_id, row_index],
                |r| Ok((r.get(0)?, r.get::<_, HashText>(1)?.0)),
            )
            .optional()?;
        let Some((source_line, content_sha256)) = found else {
            return Err(AuditError::Invalid(format!(
                "run {run_id} has no row {row_index} (it read {} rows; rows count from 0)",
                run.rows
            )));
        };
        Ok(RowStory {
            content: self.payload(run_id, row_index, &content_sha256)?,
            states: self.states(run_id, row_index)?,
            outcome: self.outcome(run_id, row_index)?,
            run,
            row_index,
            source_line,
            content_sha256,
        })
    }

    /// The node's position in the run's pipeline, and the rows that finished
    /// a state there, first `limit` in source order.
    pub fn rows_through_node(
        &self,
        run_id: i64,
        node_name: &str,
        limit: usize,
    ) -> Result<(usize, Vec<u64>)> {
        let node_id: Option<usize> = self
            .conn
            .query_row(
                "SELECT node_id FROM nodes WHERE run_id = ?1 AND name = ?2",
                params![run_id, node_name],
                |r| r.get(0),
            )
            .optional()?;
        let Some(node_id) = node_id else {
            let names: Vec<String> = self
                .conn
                .prepare("SELECT name FROM nodes WHERE run_id = ?1 ORDER BY node_id")?
                .query_map(params![run_id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            return Err(AuditError::Invalid(format!(
                "run {run_id} has no node `{node_name}` (its nodes: {})",
                names.join(", ")
            )));
        };
        let rows = self
            .conn
            .prepare(
                "SELECT DISTINCT row_index FROM node_states WHERE run_id = ?1 AND node_id = ?2
                 ORDER BY row_index LIMIT ?3",
            )?
            .query_map(params![run_id, node_id, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok((node_id, rows))
    }

    /// The SHA-256 of the pipeline file a run was started from, as written.
    pub fn config_sha256(&self, run_id: i64) -> Result<String> {
        Ok(self.conn.query_row(
            "SELECT config_sha256 FROM runs WHERE run_id = ?1",
            params![run_id],
            |r| r.get(0),
        )?)
    }

    /// A body row `row_index` kept, by its hash; None when payloads were off
    /// or purged.
    pub fn payload(&self, run_id: i64, row_index: u64, sha256: &str) -> Result<Option<String>> {
        Ok(stored::body(
            &self.conn,
            run_id,
            row_index,
            sha256,
            self.schema_7,
        )?)
    }

    fn node_name(&self, run_id: i64, node_id: usize) -> Result<String> {
        Ok(self
            .conn
            .prepare_cached("SELECT name FROM nodes WHERE run_id = ?1 AND node_id = ?2")?
            .query_row(params![run_id, node_id], |r| r.get(0))
            .optional()?
            .unwrap_or_else(|| format!("#{node_id}")))
    }

    /// Finished node states of the row, and the states only its calls tell of
    /// (a killed segment's).
    fn states(&self, run_id: i64, row_index: u64) -> Result<Vec<StateStory>> {
        let ids = self
            .conn
            .prepare(
                "SELECT state_id, node_id FROM node_states WHERE run_id = ?1 AND row_index = ?2
                 UNION SELECT state_id, node_id FROM calls WHERE run_id = ?1 AND row_index = ?2
                 ORDER BY state_id",
            )?
            .query_map(params![run_id, row_index], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<(u64, usize)>>>()?;
        let mut states = Vec::with_capacity(ids.len());
        for (state_id, node_id) in ids {
            states.push(self.state(run_id, row_index, state_id, node_id)?);
        }
        Ok(states)
    }

    fn state(
        &self,
        run_id: i64,
        row_index: u64,
        state_id: u64,
        node_id: usize,
    ) -> Result<StateStory> {
        let found = self
            .conn
            .query_row(
                "SELECT status, input_sha256, output_sha256, error_code, error_message,
                        duration_ms, segment, batch_id
                 FROM node_states WHERE run_id = ?1 AND state_id = ?2",
                params![run_id, state_id],
                |r| {
                    let finished = FinishedState {
                        status: r.get(0)?,
                        input_sha256: r.get::<_, HashText>(1)?.0,
                        output_sha256: r.get::<_, Option<HashText>>(2)?.map(|h| h.0),
                        output: None,
                        error_code: r.get(3)?,
                        error_message: r.get(4)?,
                        duration_ms: r.get(5)?,
                    };
                    Ok((finished, r.get::<_, u32>(6)?, r.get::<_, Option<u64>>(7)?))
                },
            )
            .optional()?;
        let (finished, segment, batch) = match found {
            Some((mut finished, segment, batch_id)) => {
                if let Some(sha) = &finished.output_sha256 {
                    finished.output = self.payload(run_id, row_index, sha)?;
                }
                let batch = match batch_id {
                    Some(id) => Some(self.batch(run_id, id)?),
                    None => None,
                };
                (Some(finished), Some(segment), batch)
            }
            None => (None, None, None),
        };
        let attributes = self
            .conn
            .prepare(
                "SELECT key, value FROM node_state_attributes WHERE run_id = ?1 AND state_id = ?2
                 ORDER BY key",
            )?
            .query_map(params![run_id, state_id], |r| {
                Ok((r.get(0)?, r.get::<_, HashText>(1)?.0))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(StateStory {
            state_id,
            node_id,
            node_name: self.node_name(run_id, node_id)?,
            finished,
            segment,
            batch,
            attributes,
            calls: self.calls(run_id, row_index, state_id)?,
        })
    }

    fn batch(&self, run_id: i64, batch_id: u64) -> Result<BatchStory> {
        let mode = self.conn.query_row(
            "SELECT mode FROM batches WHERE run_id = ?1 AND batch_id = ?2",
            params![run_id, batch_id],
            |r| r.get(0),
        )?;
        let members = self
            .conn
            .prepare(
                "SELECT row_index FROM batch_members WHERE run_id = ?1 AND batch_id = ?2
                 ORDER BY row_index",
            )?
            .query_map(params![run_id, batch_id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(BatchStory {
            batch_id,
            mode,
            members,
        })
    }

    fn calls(&self, run_id: i64, row_index: u64, state_id: u64) -> Result<Vec<CallStory>> {
        // Read as it is, a database older than schema 6 has no such column.
        let provider_batch: bool = self.conn.query_row(
            "SELECT count(*) > 0 FROM pragma_table_info('calls') WHERE name = 'provider_batch'",
            [],
            |r| r.get(0),
        )?;
        let mut stmt = self.conn.prepare(&format!(
            "SELECT call_index, endpoint, request_index, attempt, status, error, retry_cause,
                    latency_ms, prompt_tokens, completion_tokens, replayed, request_sha256,
                    response_sha256, {}
             FROM calls WHERE run_id = ?1 AND row_index = ?2 AND state_id = ?3
             ORDER BY call_index",
            if provider_batch {
                "provider_batch"
            } else {
                "NULL"
            }
        ))?;
        let calls = stmt
            .query_map(params![run_id, row_index, state_id], |r| {
                let prompt: Option<u64> = r.get(8)?;
                let completion: Option<u64> = r.get(9)?;
                Ok(CallStory {
                    call_index: r.get(0)?,
                    endpoint: r.get(1)?,
                    request_index: r.get(2)?,
                    attempt: r.get(3)?,
                    status: r.get(4)?,
                    error: r.get(5)?,
                    retry_cause: r.get(6)?,
                    latency_ms: r.get(7)?,
                    tokens: prompt.zip(completion),
                    replayed: r.get(10)?,
                    request_sha256: r.get::<_, HashText>(11)?.0,
                    request: None,
                    response_sha256: r.get::<_, Option<HashText>>(12)?.map(|h| h.0),
                    response: None,
                    provider_batch: r.get(13)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        calls
            .into_iter()
            .map(|mut call| {
                call.request = self.payload(run_id, row_index, &call.request_sha256)?;
                if let Some(sha) = &call.response_sha256 {
                    call.response = self.payload(run_id, row_index, sha)?;
                }
                Ok(call)
            })
            .collect()
    }

    fn outcome(&self, run_id: i64, row_index: u64) -> Result<Option<OutcomeStory>> {
        let found = self
            .conn
            .query_row(
                "SELECT outcome, error_code, error_message, rows_written, batch_id, error_sink,
                        segment, node_id
                 FROM row_outcomes WHERE run_id = ?1 AND row_index = ?2",
                params![run_id, row_index],
                |r| {
                    let story = OutcomeStory {
                        outcome: r.get(0)?,
                        node_name: None,
                        error_code: r.get(1)?,
                        error_message: r.get(2)?,
                        rows_written: r.get(3)?,
                        batch_id: r.get(4)?,
                        error_sink: r.get(5)?,
                        segment: r.get(6)?,
                        sinks: Vec::new(),
                    };
                    Ok((story, r.get::<_, Option<usize>>(7)?))
                },
            )
            .optional()?;
        let Some((mut story, node_id)) = found else {
            return Ok(None);
        };
        if let Some(id) = node_id {
            story.node_name = Some(self.node_name(run_id, id)?);
        }
        let sinks_json: String = self.conn.query_row(
            "SELECT sinks_json FROM runs WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )?;
        story.sinks = serde_json::from_str::<SinkPaths>(&sinks_json)
            .map(|s| s.sinks)
            .unwrap_or_default();
        Ok(Some(story))
    }

    /// Deletes the run's payloads; every hash stays. Returns how many went.
    pub fn purge(path: &Path, run_id: i64) -> Result<usize> {
        let history = Self::open(path)?;
        history.run(run_id)?;
        drop(history);
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let tx = conn.unchecked_transaction()?;
        let by_row: bool = tx.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'row_payloads'",
            [],
            |r| r.get(0),
        )?;
        let deleted = if by_row {
            // A part holds several bodies: they are counted, not its rows.
            let count = stored::bodies(&tx, run_id)?.len();
            tx.execute("DELETE FROM row_payloads WHERE run_id = ?1", [run_id])?;
            tx.execute("DELETE FROM payloads WHERE run_id = ?1", [run_id])?;
            count
        } else {
            tx.execute("DELETE FROM payloads WHERE run_id = ?1", [run_id])?
        };
        tx.commit()?;
        Ok(deleted)
    }
}
