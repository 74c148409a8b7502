//! The audit trail: an embedded SQLite database written by one dedicated
//! thread, in batched transactions, so recording never holds up a row.

mod records;
mod writer;

pub use records::*;

use anyhow::{Context, Result};
use rusqlite::Connection;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Records sent but not yet written, at most; senders wait beyond it, which
/// only happens if the disk cannot keep up.
const QUEUE_DEPTH: usize = 100_000;

pub struct AuditLog {
    run_id: i64,
    tx: Option<mpsc::SyncSender<Record>>,
    writer: Option<JoinHandle<Result<()>>>,
    next_state: AtomicU64,
    next_batch: AtomicU64,
}

impl AuditLog {
    /// Opens (or creates) the database and starts a run in it.
    pub fn open(path: &Path, run: NewRun) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the audit folder {}", dir.display()))?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the audit database {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        check_schema_version(&conn, path)?;
        conn.execute_batch(include_str!("schema.sql"))
            .with_context(|| format!("cannot set up the audit database {}", path.display()))?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        let run_id = writer::insert_run(&conn, &run)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE_DEPTH);
        let writer = std::thread::Builder::new()
            .name("weir-audit".into())
            .spawn(move || writer::run(conn, run_id, rx))?;
        Ok(Self {
            run_id,
            tx: Some(tx),
            writer: Some(writer),
            next_state: AtomicU64::new(1),
            next_batch: AtomicU64::new(1),
        })
    }

    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    pub fn new_state_id(&self) -> u64 {
        self.next_state.fetch_add(1, Ordering::Relaxed)
    }

    pub fn new_batch_id(&self) -> u64 {
        self.next_batch.fetch_add(1, Ordering::Relaxed)
    }

    pub fn record(&self, record: Record) {
        if let Some(tx) = &self.tx {
            // A closed channel means the writer failed; `finish` reports why.
            let _ = tx.send(record);
        }
    }

    /// Writes the run's end and waits until every record is on disk.
    pub fn finish(mut self, end: RunEnd) -> Result<()> {
        self.record(Record::RunFinished(end));
        self.close()
    }

    fn close(&mut self) -> Result<()> {
        drop(self.tx.take());
        match self.writer.take() {
            Some(handle) => {
                handle.thread().unpark();
                handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("the audit writer panicked"))?
                    .context("writing the audit database")
            }
            None => Ok(()),
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

/// Bumped whenever `schema.sql` changes shape.
const SCHEMA_VERSION: i64 = 2;

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
