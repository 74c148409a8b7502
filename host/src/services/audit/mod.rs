//! The audit trail: an embedded SQLite database written by one dedicated
//! thread, in batched transactions, so recording never holds up a row.

mod budget;
mod error;
mod history;
mod lock;
mod outcome;
mod records;
mod replay;
mod resume;
mod settle;
mod stored;
mod writer;

pub use error::AuditError;
pub use history::{
    BatchStory, CallStory, FinishedState, History, OutcomeStory, RowStory, RunInfo, StateStory,
};
pub use lock::RunLock;
pub use outcome::{NodeStatus, RowOutcome, RunStatus};
pub use records::*;
pub use replay::Replay;
pub use resume::{RecordedRun, RecordedSource, ResumePoint};
pub use settle::{forget_journal, settle};
pub use stored::{bodies as payload_bodies, hex_to_blob_sql};
pub use writer::Totals;

use crate::context::{Context, causes};
use crate::io::FileStamp;
use budget::ByteBudget;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;
use writer::{Queued, Scope};

type Result<T, E = AuditError> = std::result::Result<T, E>;

/// Bytes of records sent but not yet written, at most; senders wait beyond
/// it. A burst of rows finishing at once (a provider batch's answers) meets
/// it; steady work, whose records the writer takes as they come, does not.
const QUEUE_BYTES: usize = 32 << 20;

/// How long a stopping run waits for the writer to commit what it was
/// handed, before it counts what the database holds.
const FLUSH_WAIT: Duration = Duration::from_secs(30);

pub struct AuditLog {
    path: PathBuf,
    scope: Scope,
    tx: Option<mpsc::Sender<Queued>>,
    budget: Arc<ByteBudget>,
    writer: Option<JoinHandle<Result<Connection>>>,
    next_state: AtomicU64,
    next_batch: AtomicU64,
    /// Set once a record could not be handed to the writer: it has stopped.
    broken: std::sync::atomic::AtomicBool,
    /// Why the writer stopped, which it leaves here before it stops taking
    /// records: the file and the operating system's error.
    failure: Arc<Mutex<Option<String>>>,
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
        Self::start(path, conn, scope, (1, 1), None, lock)
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
            return Err(AuditError::NoDatabase {
                path: path.to_path_buf(),
            });
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
        let log = Self::start(path, conn, scope, next, Some(replay), lock)?;
        Ok((log, point))
    }

    fn start(
        path: &Path,
        conn: Connection,
        scope: Scope,
        (next_state, next_batch): (u64, u64),
        replay: Option<Replay>,
        lock: RunLock,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let budget = Arc::new(ByteBudget::new(QUEUE_BYTES));
        let failure = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&failure);
        let db = path.to_path_buf();
        let released = Arc::clone(&budget);
        let writer = std::thread::Builder::new()
            .name("weir-audit".into())
            .spawn(move || {
                let written =
                    writer::run(conn, scope, &rx, &released).map_err(|e| AuditError::write(&db, e));
                if let (Err(e), Ok(mut slot)) = (&written, slot.lock()) {
                    *slot = Some(causes(e));
                }
                // Only now do senders learn that the writer is gone: the
                // cause is in place for them.
                drop(rx);
                released.close();
                written
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            scope,
            tx: Some(tx),
            budget,
            writer: Some(writer),
            next_state: AtomicU64::new(next_state),
            next_batch: AtomicU64::new(next_batch),
            broken: Default::default(),
            failure,
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

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the start of this process's work on the run, once the run is
    /// known to be safe to carry on, with the source as it found it. It is
    /// committed at once: a process killed in its first moments has begun,
    /// and is resumed rather than started again.
    pub fn start_segment(&self, rows_skipped: u64, source: FileStamp) {
        self.record(Record::SegmentStarted {
            rows_skipped,
            source,
        });
        self.wake_writer();
    }

    pub fn new_state_id(&self) -> u64 {
        self.next_state.fetch_add(1, Ordering::Relaxed)
    }

    pub fn new_batch_id(&self) -> u64 {
        self.next_batch.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands `record` to the writer, first waiting while the records not
    /// yet written hold more than their byte budget: a wait as long as the
    /// disk takes to write them, since the writer never waits on a sender.
    pub fn record(&self, record: Record) {
        let Some(tx) = &self.tx else {
            return;
        };
        let bytes = record.approx_bytes();
        let queued = self.budget.take(bytes);
        if tx.send(Queued { record, bytes }).is_err() {
            self.budget.release(bytes);
            self.broken.store(true, Ordering::Relaxed);
            return;
        }
        if queued >= writer::WAKE_BYTES && queued - bytes < writer::WAKE_BYTES {
            self.wake_writer();
        }
    }

    /// Ends the writer's sleep, so what is queued is committed now.
    fn wake_writer(&self) {
        if let Some(handle) = &self.writer {
            handle.thread().unpark();
        }
    }

    /// Fails once the writer has stopped, naming the file and the
    /// operating system's error, so a run never goes on writing rows its
    /// audit trail cannot record.
    pub fn check_writing(&self) -> Result<()> {
        if let Some(cause) = self.failure() {
            return Err(AuditError::WriterFailed(cause));
        }
        if self.broken.load(Ordering::Relaxed) {
            return Err(AuditError::WriterGone {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Why the writer stopped, if it did: the file and the operating system's
    /// error.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Source rows whose terminal outcome the database holds, once the writer
    /// has committed what it was handed: what a stopped run keeps. None when
    /// the database cannot be read.
    pub fn committed_outcomes(&self) -> Option<u64> {
        let (ack, done) = mpsc::sync_channel(1);
        if let Some(tx) = &self.tx
            && tx
                .send(Queued {
                    record: Record::Flush(ack),
                    bytes: 0,
                })
                .is_ok()
        {
            self.wake_writer();
            // A writer that failed drops the acknowledgement unsent.
            let _ = done.recv_timeout(FLUSH_WAIT);
        }
        let conn =
            Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
        conn.query_row(
            "SELECT count(*) FROM row_outcomes WHERE run_id = ?1",
            [self.scope.run],
            |r| r.get(0),
        )
        .ok()
    }

    /// Keeps `body` under `sha256` with row `row_index` when the run keeps
    /// payloads; `body` is only built then.
    pub fn payload(&self, row_index: u64, sha256: &str, body: impl FnOnce() -> String) {
        if self.scope.payloads {
            self.record(Record::Payload(PayloadRecord {
                row_index,
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
        let conn = self.close()?.ok_or(AuditError::WriterStopped)?;
        let totals = writer::finish(&conn, self.scope, &end)
            .map_err(|e| AuditError::write(&self.path, writer::with_os_error(&conn, e)))?;
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
        Ok(totals)
    }

    /// The newest limit a run learned for the endpoint known by `url` and
    /// `model`: (run, what it learned). This run's own earlier segments
    /// count: a resume starts where the process it carries on left the
    /// limit, rather than slow-starting again against the server it had
    /// already measured.
    pub fn learned_limit(
        &self,
        url: &str,
        model: &str,
    ) -> Result<Option<(i64, LearnedLimitRecord)>> {
        let conn = Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let found = conn.query_row(
            "SELECT run_id, endpoint, concurrency_limit, floor, no_load_rtt_ms, recorded_at_ms,
                    held_by_queue
             FROM learned_limits WHERE url = ?1 AND model = ?2
             ORDER BY recorded_at_ms DESC LIMIT 1",
            rusqlite::params![url, model],
            |r| {
                Ok((
                    r.get(0)?,
                    LearnedLimitRecord {
                        url: url.to_string(),
                        model: model.to_string(),
                        endpoint: r.get(1)?,
                        concurrency_limit: r.get(2)?,
                        floor: r.get(3)?,
                        no_load_rtt_ms: r.get(4)?,
                        at_ms: r.get(5)?,
                        held_by_queue: r.get(6)?,
                    },
                ))
            },
        );
        match found {
            Ok(found) => Ok(Some(found)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e.into()),
        }
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
        let conn = self.close()?.ok_or(AuditError::WriterStopped)?;
        writer::failed_to_start(&conn, self.scope.run, error)?;
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
        Ok(())
    }

    /// Stops the writer and hands back its connection, the last one open on
    /// the file: SQLite moves the write-ahead log into the database file
    /// when its last connection closes, and deletes it. Were the replay's
    /// read-only one still open, the log would stay beside the file, and a
    /// copy of the file alone would lack the segment.
    fn close(&mut self) -> Result<Option<Connection>> {
        drop(self.replay.take());
        drop(self.tx.take());
        match self.writer.take() {
            Some(handle) => {
                handle.thread().unpark();
                let conn = handle.join().map_err(|_| AuditError::WriterPanicked)??;
                Ok(Some(conn))
            }
            None => Ok(None),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // A writer that failed left its cause for the run to report.
        if let Err(e) = self.close()
            && self.failure().is_none()
        {
            tracing::error!("{}", causes(&e));
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
    // Rows and their bodies are appended in key order, so a few MB of page
    // cache hold every page a write touches. A 32 MB cache filled up as the
    // database grew: a run's memory grew with its rows (139 against 110 MiB
    // at 100,000 rows), for no gain in speed (`weir-bench --only audit`).
    conn.pragma_update(None, "cache_size", -4_000)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    upgrade_schema(&conn, path)?;
    conn.execute_batch(include_str!("schema.sql"))
        .with_context(|| format!("cannot set up the audit database {}", path.display()))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    Ok(conn)
}

/// Bumped whenever `schema.sql` changes shape; `MIGRATIONS` takes a database
/// of an earlier version to it.
pub const SCHEMA_VERSION: i64 = 10;

/// The oldest schema a run can upgrade (`MIGRATIONS` starts there).
pub const OLDEST_UPGRADABLE_VERSION: i64 = 3;

/// The oldest schema `weir runs` and `weir explain` read as it is, without
/// upgrading it: every column they read was there by then.
pub const OLDEST_READABLE_VERSION: i64 = 4;

/// `column` as a SHA-256's 32 bytes when it holds one as lowercase hex, else
/// as it is: the form `stored::Hash` writes.
macro_rules! sha256_bytes {
    ($column:literal) => {
        concat!(
            $column,
            " = CASE WHEN typeof(",
            $column,
            ") = 'text' AND length(",
            $column,
            ") = 64 AND NOT ",
            $column,
            " GLOB '*[^0-9a-f]*' THEN unhex(",
            $column,
            ") ELSE ",
            $column,
            " END"
        )
    };
}

/// What takes a database from version N to N + 1, by N. Up to 6 each only
/// adds: what an older weir wrote stays as it was.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        3,
        "ALTER TABLE calls ADD COLUMN cost_usd REAL;
         ALTER TABLE calls ADD COLUMN cost_estimated INTEGER;
         ALTER TABLE calls ADD COLUMN cached INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE runs ADD COLUMN cost_usd REAL;
         ALTER TABLE runs ADD COLUMN shard TEXT;",
    ),
    (
        4,
        "ALTER TABLE segments ADD COLUMN source_size INTEGER;
         ALTER TABLE segments ADD COLUMN source_mtime_ns INTEGER;
         ALTER TABLE segments ADD COLUMN source_sha256 TEXT;",
    ),
    // The Batch API tables are new; schema.sql creates them.
    (5, "ALTER TABLE calls ADD COLUMN provider_batch TEXT;"),
    // Hashes the tables hold per row become their 32 bytes, so that one
    // run's rows, written before and after, join and look up alike. Bodies
    // kept before stay in `payloads` as they were, under the hash's bytes;
    // `row_payloads` (new; schema.sql creates it) keeps those written since.
    (
        6,
        concat!(
            "UPDATE rows SET ",
            sha256_bytes!("content_sha256"),
            ";",
            "UPDATE node_states SET ",
            sha256_bytes!("input_sha256"),
            ", ",
            sha256_bytes!("output_sha256"),
            ";",
            "UPDATE node_state_attributes SET ",
            sha256_bytes!("value"),
            ";",
            "UPDATE calls SET ",
            sha256_bytes!("request_sha256"),
            ", ",
            sha256_bytes!("response_sha256"),
            ";",
            "UPDATE payloads SET ",
            sha256_bytes!("sha256"),
            ";"
        ),
    ),
    // `learned_limits` is new, created here in the shape version 8 gave it
    // so that the step after can add to it.
    (
        7,
        "CREATE TABLE learned_limits (
             url TEXT NOT NULL, model TEXT NOT NULL, run_id INTEGER NOT NULL,
             endpoint TEXT NOT NULL, concurrency_limit INTEGER NOT NULL,
             floor INTEGER NOT NULL, no_load_rtt_ms INTEGER,
             recorded_at_ms INTEGER NOT NULL, PRIMARY KEY (url, model, run_id));",
    ),
    (
        8,
        "ALTER TABLE learned_limits ADD COLUMN held_by_queue INTEGER NOT NULL DEFAULT 0;",
    ),
    (9, "ALTER TABLE runs ADD COLUMN shards_at_once INTEGER;"),
];

/// Brings a database made by an earlier weir up to this schema, one version
/// at a time. A database of a version it does not know (a newer weir's, or
/// one too old) is refused rather than half-written.
fn upgrade_schema(conn: &Connection, path: &Path) -> Result<()> {
    loop {
        // Another process may be upgrading the same file: the version is
        // read again inside the transaction that changes it.
        let tx =
            rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let tables: i64 = tx.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )?;
        if tables == 0 || version == SCHEMA_VERSION {
            return Ok(());
        }
        let Some((_, sql)) = MIGRATIONS.iter().find(|(from, _)| *from == version) else {
            return Err(AuditError::NotUpgradable {
                path: path.to_path_buf(),
                version,
            });
        };
        tx.execute_batch(sql).with_context(|| {
            format!(
                "cannot upgrade the audit database {} from schema version {version}",
                path.display()
            )
        })?;
        tx.pragma_update(None, "user_version", version + 1)?;
        tx.commit()?;
    }
}

/// `YYYY-MM-DD HH:MM:SS` in UTC, of milliseconds since the Unix epoch.
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_795_255_445_000), "2026-11-21 10:04:05");
    }

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
            shards_at_once: None,
        }
    }

    fn outcome(row_index: u64) -> OutcomeRecord {
        OutcomeRecord {
            row_index,
            outcome: RowOutcome::Completed,
            node_id: None,
            error_code: None,
            error_message: None,
            rows_written: 1,
            batch_id: None,
            error_sink: None,
        }
    }

    fn stamp() -> FileStamp {
        FileStamp {
            size: 10,
            modified_ns: Some(1),
        }
    }

    /// What weir wrote before schema 5: the segments had no source columns.
    fn make_version_4(path: &Path) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "ALTER TABLE segments DROP COLUMN source_size;
             ALTER TABLE segments DROP COLUMN source_mtime_ns;
             ALTER TABLE segments DROP COLUMN source_sha256;
             ALTER TABLE calls DROP COLUMN provider_batch;
             DROP TABLE provider_batches;
             DROP TABLE batch_requests;
             DROP TABLE learned_limits;
             ALTER TABLE runs DROP COLUMN shards_at_once;
             PRAGMA user_version = 4;",
        )
        .unwrap();
    }

    /// A database as weir wrote it at schema 3 (its DDL kept as it was),
    /// holding one run that a killed process left after one segment.
    fn make_version_3(path: &Path) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(include_str!("testdata/schema-v3.sql"))
            .unwrap();
        conn.execute_batch(
            "INSERT INTO runs (pipeline_path, config_sha256, source_path, sinks_json,
                               weir_version, started_at_ms, status)
             VALUES ('/p.yaml', 'c', 'in.csv', '{\"sinks\":[\"out.csv\"],\"on_error\":[]}',
                     '0.1.0', 1, 'running');
             INSERT INTO segments (run_id, segment, started_at_ms, status, rows_skipped)
             VALUES (1, 1, 1, 'running', 0);
             PRAGMA user_version = 3;",
        )
        .unwrap();
    }

    #[test]
    fn a_version_3_database_is_upgraded_one_version_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        make_version_3(&path);
        let (log, point) = AuditLog::resume(&path, None, "/p.yaml", true).unwrap();
        assert_eq!(point.segment, 2);
        drop(log);
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.query_row(
            "SELECT r.shard, c.cost_usd, s.source_sha256 FROM runs r, segments s
             LEFT JOIN calls c ON 0",
            [],
            |_| Ok(()),
        )
        .unwrap();
    }

    #[test]
    fn a_version_4_database_is_upgraded_and_its_runs_resume() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        let log = AuditLog::create(&path, new_run(), false).unwrap();
        log.start_segment(0, stamp());
        drop(log);
        make_version_4(&path);

        let (log, point) = AuditLog::resume(&path, None, "/p.yaml", true).unwrap();
        assert_eq!(point.segment, 2);
        // Segment 1 was written by a weir that kept no stamp of the source.
        assert!(point.run.source.is_none());
        log.start_segment(0, stamp());
        log.record(Record::SourceRead {
            sha256: "abc".into(),
        });
        drop(log);
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let kept: (i64, i64, String) = conn
            .query_row(
                "SELECT source_size, source_mtime_ns, source_sha256 FROM segments WHERE segment = 2",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(kept, (10, 1, "abc".to_string()));
    }

    #[test]
    fn a_database_of_an_unknown_version_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        drop(AuditLog::create(&path, new_run(), false).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 2)
            .unwrap();
        let error = AuditLog::create(&path, new_run(), false).err().unwrap();
        assert!(
            format!("{error:#}").contains("has schema version 2"),
            "{error:#}"
        );
        let version: i64 = Connection::open(&path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, 2);
    }

    const ROW: &str = r#"{"id":"0","text":"fine"}"#;
    const REQUEST: &str = r#"{"model":"m","messages":[{"role":"user","content":"fine"}]}"#;
    const RESPONSE: &str = r#"{"choices":[{"message":{"content":"positive"}}]}"#;

    /// A run killed after its row 0 went through node 0 with one call.
    fn killed_run(path: &Path) {
        let log = AuditLog::create(path, new_run(), true).unwrap();
        log.start_segment(0, stamp());
        let row_sha = crate::hashing::json_text_sha256(ROW);
        log.payload(0, &row_sha, || ROW.into());
        log.record(Record::Row(RowRecord {
            row_index: 0,
            source_line: 2,
            content_sha256: row_sha,
        }));
        log.record(Record::Call(CallRecord {
            state_id: 1,
            row_index: 0,
            node_id: 0,
            call_index: 0,
            endpoint: "llm".into(),
            request_index: 0,
            attempt: 1,
            request: Json::Text(REQUEST.into()),
            response: Some(Json::Text(RESPONSE.into())),
            status: Some(200),
            error: None,
            retry_cause: None,
            latency_ms: 5,
            prompt_tokens: Some(1),
            completion_tokens: Some(1),
            started_at_ms: 1,
            replayed: false,
            cost: None,
            cached: false,
            provider_batch: None,
        }));
        log.record(Record::NodeState(NodeStateRecord {
            state_id: 1,
            row_index: 0,
            node_id: 0,
            attempt: 1,
            status: NodeStatus::Completed,
            input: Json::Array(vec![ROW.into()]),
            output: Some(Json::Array(vec![ROW.into()])),
            error_code: None,
            error_message: None,
            batch_id: None,
            started_at_ms: 1,
            duration_ms: 5,
        }));
        let template = "50c9720e0a3763e1b350aaec6a51ad00d13bdaa04ad019b3033a14260a492ce9";
        log.record(Record::Attribute(AttributeRecord {
            state_id: 1,
            key: "template_hash".into(),
            value: template.into(),
        }));
        drop(log);
    }

    #[test]
    fn bodies_kept_by_row_read_back_in_explain_and_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        killed_run(&path);
        let conn = Connection::open(&path).unwrap();
        let (parts, kinds): (i64, String) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM row_payloads),
                        typeof(content_sha256) || (SELECT typeof(value) FROM node_state_attributes)
                 FROM rows",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        // Written in one transaction, the row's bodies are one part.
        assert_eq!((parts, kinds.as_str()), (1, "blobblob"));
        drop(conn);

        let story = History::open(&path).unwrap().row(1, 0).unwrap();
        assert_eq!(story.content_sha256, crate::hashing::json_text_sha256(ROW));
        assert_eq!(story.content.as_deref(), Some(ROW));
        let state = &story.states[0];
        assert_eq!(
            state.finished.as_ref().unwrap().output.as_deref(),
            Some(&*format!("[{ROW}]"))
        );
        assert_eq!(state.attributes[0].1.len(), 64);
        assert_eq!(state.calls[0].request.as_deref(), Some(REQUEST));
        assert_eq!(state.calls[0].response.as_deref(), Some(RESPONSE));

        let (log, point) = AuditLog::resume(&path, None, "/p.yaml", true).unwrap();
        assert_eq!(point.row_hashes[&0], story.content_sha256);
        let request_sha = crate::hashing::json_text_sha256(REQUEST);
        let answer = log.replay().unwrap().answer(0, 0, "llm", &request_sha);
        assert_eq!(answer.map(|(_, body)| body).as_deref(), Some(RESPONSE));
        drop(log);
        assert_eq!(History::purge(&path, 1).unwrap(), 4);
        let story = History::open(&path).unwrap().row(1, 0).unwrap();
        assert!(story.content.is_none());
    }

    #[test]
    fn a_version_6_database_is_read_as_it_is_then_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        killed_run(&path);
        // As weir 6 wrote it: hashes as hex, each body under its hash.
        let conn = Connection::open(&path).unwrap();
        let hex = |c: &str| format!("{c} = lower(hex({c}))");
        conn.execute_batch(&format!(
            "UPDATE rows SET {};
             UPDATE node_states SET {}, {};
             UPDATE node_state_attributes SET {};
             UPDATE calls SET {}, {};
             DROP TABLE row_payloads;
             DROP TABLE learned_limits;
             INSERT INTO payloads VALUES
                 (1, '{}', '{ROW}'), (1, '{}', '{RESPONSE}');
             ALTER TABLE runs DROP COLUMN shards_at_once;
             PRAGMA user_version = 6;",
            hex("content_sha256"),
            hex("input_sha256"),
            hex("output_sha256"),
            hex("value"),
            hex("request_sha256"),
            hex("response_sha256"),
            crate::hashing::json_text_sha256(ROW),
            crate::hashing::json_text_sha256(RESPONSE),
        ))
        .unwrap();
        drop(conn);

        let read = || {
            let story = History::open(&path).unwrap().row(1, 0).unwrap();
            assert_eq!(story.content.as_deref(), Some(ROW));
            assert_eq!(story.states[0].calls[0].response.as_deref(), Some(RESPONSE));
            assert_eq!(story.states[0].attributes[0].1.len(), 64);
            story.content_sha256
        };
        let before = read();
        let (log, _) = AuditLog::resume(&path, None, "/p.yaml", true).unwrap();
        let request_sha = crate::hashing::json_text_sha256(REQUEST);
        let answer = log.replay().unwrap().answer(0, 0, "llm", &request_sha);
        assert_eq!(answer.map(|(_, body)| body).as_deref(), Some(RESPONSE));
        drop(log);
        assert_eq!(read(), before);
        let conn = Connection::open(&path).unwrap();
        let (version, kinds): (i64, String) = conn
            .query_row(
                "SELECT (SELECT user_version FROM pragma_user_version),
                        (SELECT typeof(content_sha256) FROM rows)
                        || (SELECT typeof(request_sha256) || typeof(response_sha256) FROM calls)
                        || (SELECT typeof(sha256) FROM payloads LIMIT 1)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (version, kinds.as_str()),
            (SCHEMA_VERSION, "blobblobblobblob")
        );
    }

    #[test]
    fn a_limit_learned_by_a_version_8_weir_is_read_as_one_refusals_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        killed_run(&path);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE learned_limits DROP COLUMN held_by_queue;
             INSERT INTO learned_limits VALUES ('openai u', 'm', 1, 'llm', 2, 1, 100, 5);
             ALTER TABLE runs DROP COLUMN shards_at_once;
             PRAGMA user_version = 8;",
        )
        .unwrap();
        drop(conn);
        let (log, _) = AuditLog::resume(&path, None, "/p.yaml", true).unwrap();
        let (run, learned) = log.learned_limit("openai u", "m").unwrap().unwrap();
        assert_eq!((run, learned.concurrency_limit), (1, 2));
        // An older weir did not say: slow start, as it would have.
        assert!(!learned.held_by_queue);
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
        log.start_segment(0, stamp());
        for row_index in 0..3 {
            log.record(Record::Row(RowRecord {
                row_index,
                source_line: row_index + 2,
                content_sha256: format!("h{row_index}"),
            }));
        }
        log.payload(0, "h0", || "kept only with payloads on".into());
        log.record(Record::Commit(CommitRecord {
            outcomes: vec![outcome(0), outcome(2)],
            checkpoints: vec![("out.csv".into(), 42)],
        }));
        let totals = log.finish(end()).unwrap();
        assert_eq!(totals.rows, 3);
        assert_eq!(totals.without_outcome, vec![1]);
        assert_eq!(totals.status, RunStatus::Incomplete);

        let conn = Connection::open(&path).unwrap();
        let (status, payloads): (String, i64) = conn
            .query_row(
                "SELECT status, (SELECT count(*) FROM row_payloads) FROM runs",
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
        log.start_segment(2, stamp());
        log.record(Record::Commit(CommitRecord {
            outcomes: vec![outcome(1)],
            checkpoints: vec![("out.csv".into(), 50)],
        }));
        let totals = log.finish(end()).unwrap();
        assert_eq!(totals.status, RunStatus::Completed);
        assert_eq!(totals.outcomes["completed"], 3);
    }
}
