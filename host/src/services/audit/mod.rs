//! The audit trail: an embedded SQLite database written by one dedicated
//! thread, in batched transactions, so recording never holds up a row.

mod history;
mod lock;
mod records;
mod replay;
mod resume;
mod writer;

pub use history::{
    BatchStory, CallStory, FinishedState, History, OutcomeStory, RowStory, RunInfo, StateStory,
};
pub use lock::RunLock;
pub use records::*;
pub use replay::Replay;
pub use resume::{RecordedRun, ResumePoint};
pub use writer::Totals;

use anyhow::{Context, Result};
use rusqlite::Connection;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use writer::Scope;

/// Records sent but not yet written, at most; senders wait beyond it, which
/// only happens if the disk cannot keep up.
const QUEUE_DEPTH: usize = 100_000;

pub struct AuditLog {
    scope: Scope,
    tx: Option<mpsc::SyncSender<Record>>,
    writer: Option<JoinHandle<Result<Connection>>>,
    next_state: AtomicU64,
    next_batch: AtomicU64,
    /// Set once a record could not be handed to the writer: it has stopped.
    broken: std::sync::atomic::AtomicBool,
    replay: Option<Replay>,
    lock: Option<RunLock>,
}

impl AuditLog {
    /// Opens (or creates) the database and starts a new run in it.
    /// `payloads`: keep bodies as well as their hashes.
    pub fn create(path: &Path, run: NewRun, payloads: bool) -> Result<Self> {
        let conn = open_database(path)?;
        let run_id = writer::insert_run(&conn, &run)?;
        let lock = RunLock::acquire(path, run_id)?;
        let scope = Scope {
            run: run_id,
            segment: 1,
            payloads,
        };
        Self::start(conn, scope, (1, 1), None, lock)
    }

    /// Opens the database to carry on run `run_id` (or the latest unfinished
    /// run of `pipeline_path`) in a new segment.
    pub fn resume(
        path: &Path,
        run_id: Option<i64>,
        pipeline_path: &str,
        payloads: bool,
    ) -> Result<(Self, ResumePoint)> {
        if !path.exists() {
            anyhow::bail!("there is no audit database at {}", path.display());
        }
        let conn = open_database(path)?;
        let run_id = resume::pick_run(&conn, run_id, pipeline_path)?;
        let lock = RunLock::acquire(path, run_id)?;
        let point = resume::load(&conn, run_id)?;
        let replay = Replay::load(path, run_id)?;
        let scope = Scope {
            run: run_id,
            segment: point.segment,
            payloads,
        };
        let next = (point.next_state_id, point.next_batch_id);
        let log = Self::start(conn, scope, next, Some(replay), lock)?;
        Ok((log, point))
    }

    fn start(
        conn: Connection,
        scope: Scope,
        (next_state, next_batch): (u64, u64),
        replay: Option<Replay>,
        lock: RunLock,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE_DEPTH);
        let writer = std::thread::Builder::new()
            .name("weir-audit".into())
            .spawn(move || writer::run(conn, scope, rx))?;
        Ok(Self {
            scope,
            tx: Some(tx),
            writer: Some(writer),
            next_state: AtomicU64::new(next_state),
            next_batch: AtomicU64::new(next_batch),
            broken: Default::default(),
            replay,
            lock: Some(lock),
        })
    }

    pub fn run_id(&self) -> i64 {
        self.scope.run
    }

    pub fn segment(&self) -> u32 {
        self.scope.segment
    }

    /// Marks the start of this process's work on the run, once the run is
    /// known to be safe to carry on.
    pub fn start_segment(&self, rows_skipped: u64) {
        self.record(Record::SegmentStarted { rows_skipped });
    }

    pub fn new_state_id(&self) -> u64 {
        self.next_state.fetch_add(1, Ordering::Relaxed)
    }

    pub fn new_batch_id(&self) -> u64 {
        self.next_batch.fetch_add(1, Ordering::Relaxed)
    }

    pub fn record(&self, record: Record) {
        if let Some(tx) = &self.tx
            && tx.send(record).is_err()
        {
            self.broken.store(true, Ordering::Relaxed);
        }
    }

    /// Fails once the writer has stopped, so a run never goes on writing
    /// rows its audit trail cannot record. Why it stopped is logged when the
    /// log is dropped.
    pub fn check_writing(&self) -> Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            anyhow::bail!(
                "the audit database can no longer be written; the run stops so that no row goes \
                 unrecorded"
            );
        }
        Ok(())
    }

    /// Keeps `body` under `sha256` when the run keeps payloads; `body` is
    /// only built then.
    pub fn payload(&self, sha256: &str, body: impl FnOnce() -> String) {
        if self.scope.payloads {
            self.record(Record::Payload(PayloadRecord {
                sha256: sha256.to_string(),
                body: body(),
            }));
        }
    }

    /// Recorded answers of earlier segments, when this one resumes a run.
    pub fn replay(&self) -> Option<&Replay> {
        self.replay.as_ref()
    }

    /// Waits until every record is on disk, checks that every row has its
    /// terminal outcome, and closes the segment and the run.
    pub fn finish(mut self, end: RunEnd) -> Result<Totals> {
        let conn = self
            .close()?
            .context("the audit writer had already stopped")?;
        let totals = writer::finish(&conn, self.scope, &end)?;
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
        Ok(totals)
    }

    /// What the run's calls cost so far, earlier segments included.
    pub fn spent_usd(&self, path: &Path) -> Result<f64> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(conn.query_row(
            "SELECT coalesce(sum(cost_usd), 0) FROM calls WHERE run_id = ?1",
            [self.scope.run],
            |r| r.get(0),
        )?)
    }

    /// Ends a run that never began on any row, recording why.
    pub fn failed_to_start(mut self, error: &str) -> Result<()> {
        let conn = self
            .close()?
            .context("the audit writer had already stopped")?;
        writer::failed_to_start(&conn, self.scope.run, error)?;
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Option<Connection>> {
        drop(self.tx.take());
        match self.writer.take() {
            Some(handle) => {
                handle.thread().unpark();
                let conn = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("the audit writer panicked"))?
                    .context("writing the audit database")?;
                Ok(Some(conn))
            }
            None => Ok(None),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("{e:#}");
        }
    }
}

/// Opens (or creates) an audit database, brought to this schema.
pub fn open_database(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the audit folder {}", dir.display()))?;
    }
    let conn = Connection::open(path)
        .with_context(|| format!("cannot open the audit database {}", path.display()))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Payload keys are hashes, so their inserts land all over the B-tree: a
    // larger page cache keeps them from rereading pages.
    conn.pragma_update(None, "cache_size", -32_000)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    migrate(&conn, path)?;
    check_schema_version(&conn, path)?;
    conn.execute_batch(include_str!("schema.sql"))
        .with_context(|| format!("cannot set up the audit database {}", path.display()))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    Ok(conn)
}

/// Bumped whenever `schema.sql` changes shape.
pub const SCHEMA_VERSION: i64 = 4;

/// Brings a database of an earlier schema up to this one, so its runs stay
/// readable and resumable.
fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version == 3 {
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE calls ADD COLUMN cost_usd REAL;
             ALTER TABLE calls ADD COLUMN cost_estimated INTEGER;
             ALTER TABLE calls ADD COLUMN cached INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE runs ADD COLUMN cost_usd REAL;
             ALTER TABLE runs ADD COLUMN shard TEXT;
             PRAGMA user_version = 4;
             COMMIT;",
        )
        .with_context(|| format!("cannot bring {} to schema version 4", path.display()))?;
    }
    Ok(())
}

/// A database made by another version of the schema is refused rather than
/// half-written.
fn check_schema_version(conn: &Connection, path: &Path) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
        [],
        |r| r.get(0),
    )?;
    if tables > 0 && version != SCHEMA_VERSION {
        anyhow::bail!(
            "the audit database {} has schema version {version}, this weir writes version \
             {SCHEMA_VERSION}; move it aside or set `audit.path` to a new file",
            path.display()
        );
    }
    Ok(())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_run() -> NewRun {
        NewRun {
            pipeline_path: "/p.yaml".into(),
            config_sha256: "c".into(),
            source_path: "in.csv".into(),
            sinks: SinkPaths {
                sinks: vec!["out.csv".into()],
                on_error: Vec::new(),
            },
            weir_version: "test".into(),
            shard: None,
        }
    }

    fn outcome(row_index: u64) -> OutcomeRecord {
        OutcomeRecord {
            row_index,
            outcome: "completed",
            node_id: None,
            error_code: None,
            error_message: None,
            rows_written: 1,
            batch_id: None,
            error_sink: None,
        }
    }

    fn end() -> RunEnd {
        RunEnd {
            summary_json: "[]".into(),
            calls_replayed: 0,
            interrupted: false,
        }
    }

    #[test]
    fn a_row_without_a_terminal_outcome_makes_the_run_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        let log = AuditLog::create(&path, new_run(), false).unwrap();
        log.start_segment(0);
        for row_index in 0..3 {
            log.record(Record::Row(RowRecord {
                row_index,
                source_line: row_index + 2,
                content_sha256: format!("h{row_index}"),
            }));
        }
        log.payload("h0", || "kept only with payloads on".into());
        log.record(Record::Commit(CommitRecord {
            outcomes: vec![outcome(0), outcome(2)],
            checkpoints: vec![("out.csv".into(), 42)],
        }));
        let totals = log.finish(end()).unwrap();
        assert_eq!(totals.rows, 3);
        assert_eq!(totals.without_outcome, vec![1]);
        assert_eq!(totals.status, "incomplete");

        let conn = Connection::open(&path).unwrap();
        let (status, payloads): (String, i64) = conn
            .query_row(
                "SELECT status, (SELECT count(*) FROM payloads) FROM runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((status.as_str(), payloads), ("incomplete", 0));

        // The row left without an outcome is what a resume picks up.
        let (log, point) = AuditLog::resume(&path, None, "/p.yaml", true).unwrap();
        assert_eq!(point.segment, 2);
        assert_eq!(point.done.len(), 2);
        assert!(!point.done.contains(&1));
        assert_eq!(point.checkpoints["out.csv"], 42);
        log.start_segment(2);
        log.record(Record::Commit(CommitRecord {
            outcomes: vec![outcome(1)],
            checkpoints: vec![("out.csv".into(), 50)],
        }));
        let totals = log.finish(end()).unwrap();
        assert_eq!(totals.status, "completed");
        assert_eq!(totals.outcomes["completed"], 3);
    }
}
