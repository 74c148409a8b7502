//! Peak memory against the rows of a run and against the pool size, online,
//! with the test LLM server (a test tool, not a model) slow enough that the
//! pool stays full: every slot of the pool holds a row waiting on its answer.
//! What a run holds should not grow with its rows, and should grow little
//! with the rows in flight.

use crate::Args;
use crate::throughput::{Usage, run_child, write_pipeline};
use std::time::{Duration, Instant};
use weir_test_llm_server::{Script, TestLlmServer};

const NAME: &str = "memory: rows and pool size";

struct Run {
    rows: usize,
    pool: usize,
    /// The server answers 429 beyond this many at once, as a provider's
    /// endpoint does; `None`: it takes all.
    capacity: Option<usize>,
    /// Long enough that the pool is full: rows/s stay under the CPU's reach.
    latency: Duration,
}

pub async fn report(args: &Args) -> anyhow::Result<()> {
    if args.skips(NAME) {
        return Ok(());
    }
    let weir = args.weir_binary();
    println!("\n{NAME}: online, no cap, peak RSS is weir's VmHWM");
    let ms = Duration::from_millis;
    let by_rows = [
        Run {
            rows: 10_000,
            pool: 64,
            capacity: None,
            latency: ms(20),
        },
        Run {
            rows: 100_000,
            pool: 64,
            capacity: None,
            latency: ms(20),
        },
    ];
    let by_pool = [
        Run {
            rows: 20_000,
            pool: 16,
            capacity: None,
            latency: ms(20),
        },
        Run {
            rows: 20_000,
            pool: 128,
            capacity: None,
            latency: ms(100),
        },
        Run {
            rows: 20_000,
            pool: 1024,
            capacity: None,
            latency: ms(200),
        },
    ];
    // The same server, taking 16 at once, with a pool of 16 and one far
    // above it: the rows a run keeps under way follow the limit it learns,
    // not the pool.
    let by_pool_capped = [
        Run {
            rows: 20_000,
            pool: 16,
            capacity: Some(16),
            latency: ms(20),
        },
        Run {
            rows: 20_000,
            pool: 1024,
            capacity: Some(16),
            latency: ms(20),
        },
    ];
    let mut rows_rss = Vec::new();
    for run in &by_rows {
        rows_rss.push(measure(&weir, run).await?);
    }
    let mut pool_rss = Vec::new();
    for run in &by_pool {
        pool_rss.push(measure(&weir, run).await?);
    }
    let mut capped_rss = Vec::new();
    for run in &by_pool_capped {
        capped_rss.push(measure(&weir, run).await?);
    }
    println!(
        "  ratios: 100k/10k rows {:.2}; pool 1024/16 {:.2} with every request in flight, \
         {:.2} against a server that takes 16 at once",
        rows_rss[1] / rows_rss[0],
        pool_rss[2] / pool_rss[0],
        capped_rss[1] / capped_rss[0]
    );
    Ok(())
}

/// Runs `run` and prints its line; returns its peak RSS in MiB.
async fn measure(weir: &std::path::Path, run: &Run) -> anyhow::Result<f64> {
    let server = TestLlmServer::start(Script {
        latency: run.latency,
        capacity: run.capacity,
        retry_after_seconds: run.capacity.map(|_| 1.0),
        ..Script::default()
    })
    .await?;
    let dir = std::env::temp_dir().join(format!("weir-bench-memory-{}", std::process::id()));
    let endpoint = format!("pool_size: {}", run.pool);
    let pipeline = write_pipeline(&dir, run.rows, &server.base_url(), &endpoint)?;
    let started = Instant::now();
    let usage: Usage = run_child(weir, &pipeline, &[]).await?;
    let wall = started.elapsed().as_secs_f64();
    let written = csv::Reader::from_path(dir.join("out.csv"))?
        .records()
        .count();
    let rss = usage.max_rss_kib as f64 / 1024.0;
    println!(
        "  {:>6} rows, pool {:>4}, {:>3} ms latency{}: wall {wall:.1} s, {written} rows written, \
         {} requests, peak {} in flight at the server; CPU {:.3} ms per row, peak RSS {rss:.0} MiB",
        run.rows,
        run.pool,
        run.latency.as_millis(),
        run.capacity
            .map_or(String::new(), |c| format!(", capped at {c}")),
        server.served().len(),
        server.peak_in_flight(),
        (usage.user + usage.system) * 1e3 / run.rows as f64,
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(rss)
}
