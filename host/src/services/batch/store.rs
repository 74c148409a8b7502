//! What a Batch API run keeps in the audit database, written before each
//! step it stands for: a request and the batch it goes in are committed
//! before the batch is uploaded, the file before the batch is created, the
//! batch id as soon as the provider gives it. A run killed at any moment
//! finds on resume everything the provider may hold.

use super::lines::{LineOutcome, LineResult};
use crate::context::Context;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;

use super::BatchError;

type Result<T, E = BatchError> = std::result::Result<T, E>;

/// One request of a row, waiting for or holding its answer.
#[derive(Debug, Clone)]
pub struct Request {
    pub custom_id: String,
    pub row_index: u64,
    pub node_id: usize,
    pub request_index: u32,
    pub request_sha256: String,
    pub body: String,
}

/// Where a recorded batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Its requests are recorded; the upload or submission may or may not
    /// have reached the provider.
    Preparing,
    /// Its file is at the provider; the batch may or may not have been created.
    Uploaded,
    Submitted,
    Ended,
    Cancelled,
}

impl JobState {
    fn parse(name: &str) -> Self {
        match name {
            "preparing" => JobState::Preparing,
            "uploaded" => JobState::Uploaded,
            "submitted" => JobState::Submitted,
            "cancelled" => JobState::Cancelled,
            _ => JobState::Ended,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Job {
    pub job_id: i64,
    pub state: JobState,
    pub input_file_id: Option<String>,
    pub batch_id: Option<String>,
    pub prepared_at_ms: i64,
    /// Recorded by an earlier segment: the provider may hold it already.
    pub recovered: bool,
}

/// What a request recorded in an earlier segment came to.
#[derive(Debug, Clone)]
pub enum Recorded {
    /// In a batch that has not ended.
    InJob,
    /// Answered; `used` once a row took the answer (its call is recorded).
    Answered {
        used: bool,
    },
    Failed,
    /// Its line failed in a way another batch may not: it waits for one.
    Retry,
}

/// The audit database's Batch API tables, for one run and endpoint.
pub struct Store {
    conn: Mutex<Connection>,
    run_id: i64,
    endpoint: String,
}

impl Store {
    pub fn open(path: &Path, run_id: i64, endpoint: &str) -> Result<Self> {
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the audit database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        Ok(Self {
            conn: Mutex::new(conn),
            run_id,
            endpoint: endpoint.to_string(),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new batch of `requests`, and each request in it, in one
    /// transaction; returns the batch's number and when it was prepared.
    pub fn prepare(&self, requests: &[Request]) -> Result<(i64, i64)> {
        let mut conn = self.conn();
        // Immediate: a read that turns into a write would fail at once, without
        // waiting, while the audit writer holds the database.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let job_id: i64 = tx.query_row(
            "SELECT coalesce(max(job_id), 0) + 1 FROM provider_batches WHERE run_id = ?1",
            [self.run_id],
            |r| r.get(0),
        )?;
        let now = crate::services::audit::now_ms();
        tx.execute(
            "INSERT INTO provider_batches (run_id, job_id, endpoint, state, requests, prepared_at_ms)
             VALUES (?1, ?2, ?3, 'preparing', ?4, ?5)",
            params![self.run_id, job_id, self.endpoint, requests.len() as i64, now],
        )?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO batch_requests (run_id, custom_id, endpoint, row_index, node_id,
                     request_index, request_sha256, body, job_id, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'submitted')
                 ON CONFLICT (run_id, custom_id) DO UPDATE SET job_id = ?9, state = 'submitted'",
            )?;
            for r in requests {
                insert.execute(params![
                    self.run_id,
                    r.custom_id,
                    self.endpoint,
                    r.row_index as i64,
                    r.node_id as i64,
                    r.request_index,
                    r.request_sha256,
                    r.body,
                    job_id
                ])?;
            }
        }
        tx.commit()?;
        Ok((job_id, now))
    }

    pub fn uploaded(&self, job_id: i64, file_id: &str) -> Result<()> {
        self.set_job(
            "state = 'uploaded', input_file_id = ?3",
            params![self.run_id, job_id, file_id],
        )
    }

    pub fn submitted(&self, job_id: i64, batch_id: &str) -> Result<()> {
        self.set_job(
            "state = 'submitted', batch_id = ?3, submitted_at_ms = ?4",
            params![
                self.run_id,
                job_id,
                batch_id,
                crate::services::audit::now_ms()
            ],
        )
    }

    pub fn status(&self, job_id: i64, status: &str) -> Result<()> {
        self.set_job("status = ?3", params![self.run_id, job_id, status])
    }

    /// `weir cancel` asked the provider to cancel the batch: a resume sends
    /// its unanswered requests again.
    pub fn cancelled(&self, batch_id: &str) -> Result<()> {
        self.conn().execute(
            "UPDATE provider_batches SET state = 'cancelled'
             WHERE run_id = ?1 AND endpoint = ?2 AND batch_id = ?3",
            params![self.run_id, self.endpoint, batch_id],
        )?;
        Ok(())
    }

    /// `set` names the batch as ?1 (run) and ?2 (job) in `values`.
    fn set_job(&self, set: &str, values: impl rusqlite::Params) -> Result<()> {
        self.conn().execute(
            &format!("UPDATE provider_batches SET {set} WHERE run_id = ?1 AND job_id = ?2"),
            values,
        )?;
        Ok(())
    }

    /// Keeps every line's result and ends the batch, in one transaction: a
    /// run killed before it commits downloads the results again.
    /// Records what came back for some of a batch's requests; returns how
    /// many succeeded and how many failed. Recording a line again writes
    /// the same.
    pub fn record_results(&self, job_id: i64, results: &[LineResult]) -> Result<(u64, u64)> {
        let mut conn = self.conn();
        // Immediate: a read that turns into a write would fail at once, without
        // waiting, while the audit writer holds the database.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let (mut succeeded, mut failed) = (0u64, 0u64);
        {
            let mut update = tx.prepare_cached(
                "UPDATE batch_requests
                 SET state = ?3, status = ?4, response = ?5, error = ?6,
                     prompt_tokens = ?7, completion_tokens = ?8
                 WHERE run_id = ?1 AND custom_id = ?2 AND job_id = ?9",
            )?;
            for line in results {
                let (state, status, response, error) = match &line.outcome {
                    LineOutcome::Answer { status, body } => {
                        succeeded += 1;
                        ("answered", Some(*status), Some(body.as_str()), None)
                    }
                    LineOutcome::Failed { status, body } => {
                        failed += 1;
                        ("failed", Some(*status), Some(body.as_str()), None)
                    }
                    LineOutcome::Retry { reason } => {
                        failed += 1;
                        ("retry", None, None, Some(reason.as_str()))
                    }
                };
                let tokens = line.tokens();
                update.execute(params![
                    self.run_id,
                    line.custom_id,
                    state,
                    status,
                    response,
                    error,
                    tokens.map(|t| t.0 as i64),
                    tokens.map(|t| t.1 as i64),
                    job_id
                ])?;
            }
        }
        tx.commit()?;
        Ok((succeeded, failed))
    }

    /// The batch is over, every request of it recorded (`record_results`).
    pub fn ended(&self, job_id: i64, status: &str, succeeded: u64, failed: u64) -> Result<()> {
        self.conn().execute(
            "UPDATE provider_batches
             SET state = 'ended', status = ?3, succeeded = ?4, failed = ?5, ended_at_ms = ?6
             WHERE run_id = ?1 AND job_id = ?2",
            params![
                self.run_id,
                job_id,
                status,
                succeeded as i64,
                failed as i64,
                crate::services::audit::now_ms()
            ],
        )?;
        Ok(())
    }

    /// Hands `each` the requests of a batch, one at a time, to upload or
    /// submit it again.
    pub fn each_request_of(
        &self,
        job_id: i64,
        mut each: impl FnMut(&Request) -> Result<()>,
    ) -> Result<()> {
        let conn = self.conn();
        let mut query = conn.prepare(
            "SELECT custom_id, row_index, node_id, request_index, request_sha256, body
             FROM batch_requests WHERE run_id = ?1 AND job_id = ?2 ORDER BY custom_id",
        )?;
        let mut rows = query.query(params![self.run_id, job_id])?;
        while let Some(row) = rows.next()? {
            each(&request_of_row(row)?)?;
        }
        Ok(())
    }

    /// The ids of a batch's requests.
    pub fn custom_ids_of(&self, job_id: i64) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut query =
            conn.prepare("SELECT custom_id FROM batch_requests WHERE run_id = ?1 AND job_id = ?2")?;
        let ids = query
            .query_map(params![self.run_id, job_id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(ids)
    }

    /// The requests of `custom_ids`, to send them again.
    pub fn requests(&self, custom_ids: &[String]) -> Result<Vec<Request>> {
        let conn = self.conn();
        let mut query = conn.prepare_cached(
            "SELECT custom_id, row_index, node_id, request_index, request_sha256, body
             FROM batch_requests WHERE run_id = ?1 AND custom_id = ?2",
        )?;
        let mut requests = Vec::with_capacity(custom_ids.len());
        for custom_id in custom_ids {
            if let Some(request) = query
                .query_row(params![self.run_id, custom_id], request_of_row)
                .optional()?
            {
                requests.push(request);
            }
        }
        Ok(requests)
    }

    /// The provider ids of every batch the run recorded.
    pub fn batch_ids(&self) -> Result<std::collections::HashSet<String>> {
        let conn = self.conn();
        let mut query = conn.prepare(
            "SELECT batch_id FROM provider_batches WHERE run_id = ?1 AND batch_id IS NOT NULL",
        )?;
        let ids = query
            .query_map([self.run_id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(ids)
    }

    /// The endpoint's batches that have not ended, oldest first.
    pub fn open_jobs(&self) -> Result<Vec<Job>> {
        let conn = self.conn();
        let mut query = conn.prepare(
            "SELECT job_id, state, input_file_id, batch_id, prepared_at_ms
             FROM provider_batches
             WHERE run_id = ?1 AND endpoint = ?2 AND state IN ('preparing', 'uploaded', 'submitted')
             ORDER BY job_id",
        )?;
        let jobs = query
            .query_map(params![self.run_id, self.endpoint], |r| {
                Ok(Job {
                    job_id: r.get(0)?,
                    state: JobState::parse(&r.get::<_, String>(1)?),
                    input_file_id: r.get(2)?,
                    batch_id: r.get(3)?,
                    prepared_at_ms: r.get(4)?,
                    recovered: true,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(jobs)
    }

    /// Every request this endpoint recorded for the run, with what it came to.
    pub fn recorded(&self) -> Result<Vec<(String, Recorded)>> {
        let conn = self.conn();
        let mut query = conn.prepare(
            "SELECT b.custom_id,
                    -- A request of a batch that was cancelled, or never
                    -- reached the provider, is sent again.
                    CASE WHEN b.state = 'submitted' AND NOT EXISTS (
                            SELECT 1 FROM provider_batches p
                            WHERE p.run_id = b.run_id AND p.job_id = b.job_id
                              AND p.state IN ('preparing', 'uploaded', 'submitted'))
                         THEN 'retry' ELSE b.state END,
                    EXISTS (SELECT 1 FROM calls c
                            WHERE c.run_id = b.run_id AND c.row_index = b.row_index
                              AND c.node_id = b.node_id AND c.provider_batch IS NOT NULL
                              -- Since audit schema 7, calls keep a SHA-256 as
                              -- its bytes; batch_requests keep the hex.
                              AND c.request_sha256 IN (b.request_sha256, unhex(b.request_sha256))
                              AND c.replayed = 0)
             FROM batch_requests b WHERE b.run_id = ?1 AND b.endpoint = ?2",
        )?;
        let rows = query
            .query_map(params![self.run_id, self.endpoint], |r| {
                let state: String = r.get(1)?;
                let used: bool = r.get(2)?;
                let recorded = match state.as_str() {
                    "answered" => Recorded::Answered { used },
                    "failed" => Recorded::Failed,
                    "retry" => Recorded::Retry,
                    _ => Recorded::InJob,
                };
                Ok((r.get(0)?, recorded))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The answer a request got: its body, tokens and the provider's batch id.
    pub fn answer(&self, custom_id: &str) -> Result<Option<StoredAnswer>> {
        let conn = self.conn();
        let answer = conn
            .prepare_cached(
                "SELECT b.status, b.response, b.prompt_tokens, b.completion_tokens, p.batch_id
                 FROM batch_requests b
                 LEFT JOIN provider_batches p ON p.run_id = b.run_id AND p.job_id = b.job_id
                 WHERE b.run_id = ?1 AND b.custom_id = ?2",
            )?
            .query_row(params![self.run_id, custom_id], |r| {
                Ok(StoredAnswer {
                    status: r.get::<_, Option<u16>>(0)?.unwrap_or(200),
                    body: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    tokens: match (r.get::<_, Option<i64>>(2)?, r.get::<_, Option<i64>>(3)?) {
                        (Some(p), Some(c)) => Some((p as u64, c as u64)),
                        _ => None,
                    },
                    batch_id: r.get(4)?,
                })
            })
            .optional()?;
        Ok(answer)
    }
}

/// A request as `each_request_of` and `requests` select it.
fn request_of_row(r: &rusqlite::Row) -> rusqlite::Result<Request> {
    Ok(Request {
        custom_id: r.get(0)?,
        row_index: r.get::<_, i64>(1)? as u64,
        node_id: r.get::<_, i64>(2)? as usize,
        request_index: r.get(3)?,
        request_sha256: r.get(4)?,
        body: r.get(5)?,
    })
}

pub struct StoredAnswer {
    pub status: u16,
    pub body: String,
    pub tokens: Option<(u64, u64)>,
    pub batch_id: Option<String>,
}
