//! One run of the real binary against a fresh test LLM server (a test tool,
//! not a model), cut off at a time limit, and the figures every scenario
//! prints for it.

use crate::throughput::{Usage, run_child_within, write_pipeline};
use rusqlite::Connection;
use std::path::Path;
use std::time::{Duration, Instant};
use weir_test_llm_server::{Script, Served, TestLlmServer};

pub struct Run {
    pub label: String,
    pub rows: usize,
    /// Seconds from starting weir to its exit (or to its kill).
    pub wall: f64,
    pub usage: Usage,
    pub limit: Duration,
    /// Rows by terminal outcome in the audit database.
    pub completed: i64,
    pub failed: i64,
    pub served: Vec<Served>,
    pub peak_in_flight: usize,
    /// The server's queue over time, when it queues.
    pub queue_changes: Vec<(Duration, usize)>,
}

impl Run {
    pub fn calls_per_row(&self) -> f64 {
        self.served.len() as f64 / self.rows as f64
    }

    pub fn answered(&self, status: u16) -> usize {
        self.served.iter().filter(|s| s.status == status).count()
    }

    pub fn cpu_ms_per_row(&self) -> f64 {
        (self.usage.user + self.usage.system) * 1e3 / self.rows as f64
    }

    pub fn ok_share(&self) -> f64 {
        self.completed as f64 / self.rows as f64
    }
}

/// Runs weir over `rows` generated rows with `endpoint` settings against a
/// fresh server with `script`, killing it after `limit`.
pub async fn run(
    weir: &Path,
    label: String,
    rows: usize,
    script: &Script,
    endpoint: &str,
    limit: Duration,
) -> anyhow::Result<Run> {
    let dir = std::env::temp_dir().join(format!("weir-bench-{}-run", std::process::id()));
    let server = TestLlmServer::start(script.clone()).await?;
    let pipeline = write_pipeline(&dir, rows, &server.base_url(), endpoint)?;
    let started = Instant::now();
    let usage = run_child_within(weir, &pipeline, &[], Some(limit)).await?;
    let wall = started.elapsed().as_secs_f64();
    let (completed, failed) = outcomes(&dir).unwrap_or((0, 0));
    let run = Run {
        label,
        rows,
        wall,
        usage,
        limit,
        completed,
        failed,
        served: server.served(),
        peak_in_flight: server.peak_in_flight(),
        queue_changes: server.queue_changes(),
    };
    drop(server);
    std::fs::remove_dir_all(&dir)?;
    Ok(run)
}

/// Rows completed and rows failed, from the audit database; a run killed
/// before it wrote any has none.
fn outcomes(dir: &Path) -> anyhow::Result<(i64, i64)> {
    let db = Connection::open(dir.join("weir-audit.sqlite"))?;
    Ok(db.query_row(
        "SELECT coalesce(sum(outcome = 'completed'), 0), coalesce(sum(outcome = 'failed'), 0) \
         FROM row_outcomes",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// The header of `print_line`'s table.
pub fn print_header() {
    println!(
        "      {:<34} {:>8} {:>7} {:>6} {:>6} {:>9} {:>5} {:>5} {:>5} {:>5} {:>10} {:>7}",
        "client",
        "wall s",
        "rows/s",
        "ok",
        "failed",
        "calls/row",
        "429s",
        "529s",
        "503s",
        "peak",
        "CPU ms/row",
        "RSS MiB"
    );
}

/// One run as a line of the table; a run cut off at its limit says so.
pub fn print_line(run: &Run) {
    let wall = match run.usage.timed_out {
        true => format!(">{:.0}", run.limit.as_secs_f64()),
        false => format!("{:.2}", run.wall),
    };
    println!(
        "      {:<34} {:>8} {:>7.0} {:>6} {:>6} {:>9.3} {:>5} {:>5} {:>5} {:>5} {:>10.3} {:>7}",
        run.label,
        wall,
        run.completed as f64 / run.wall,
        run.completed,
        run.failed,
        run.calls_per_row(),
        run.answered(429),
        run.answered(529),
        run.answered(503),
        run.peak_in_flight,
        run.cpu_ms_per_row(),
        run.usage.max_rss_kib / 1024
    );
    if run.usage.timed_out {
        println!(
            "      {:<34} did not finish in {:.0} s: {} of {} rows had an outcome",
            "",
            run.limit.as_secs_f64(),
            run.completed + run.failed,
            run.rows
        );
    }
}

/// The `p`-th percentile (0 to 100) of `values`, by nearest rank.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}
