//! Batch API mode: the same rows through a provider batch (the test LLM
//! server's, a test tool) and online, side by side. A batch-mode row waits
//! holding only its data, so peak memory should stay flat in the rows
//! waiting; the CPU per row is what running a row twice (park, then replay
//! from the answer) costs against running it once online.

use crate::Args;
use crate::throughput::{run_child, write_pipeline};
use std::time::{Duration, Instant};
use weir_test_llm_server::{Script, TestLlmServer};

pub async fn report(args: &Args) -> anyhow::Result<()> {
    if args.skips("batch api") {
        return Ok(());
    }
    let weir = args.weir_binary();
    println!(
        "\nbatch api: rows through one provider batch (completes 5 s after creation) vs online (no latency)"
    );
    for rows in [10_000, 30_000, 100_000] {
        for batch in [true, false] {
            let server = TestLlmServer::start(Script {
                batch_seconds: Duration::from_secs(5),
                ..Script::default()
            })
            .await?;
            let dir = std::env::temp_dir().join(format!("weir-bench-batch-{}", std::process::id()));
            let endpoint = if batch {
                "mode: batch\nbatch_poll_seconds: 1\n"
            } else {
                "pool_size: 16\n"
            };
            let pipeline = write_pipeline(&dir, rows, &server.base_url(), endpoint)?;
            let started = Instant::now();
            let usage = run_child(&weir, &pipeline, &[]).await?;
            let wall = started.elapsed().as_secs_f64();
            let written = csv::Reader::from_path(dir.join("out.csv"))?
                .records()
                .count();
            let batches = server.batches().len();
            println!(
                "  {rows:>6} rows {}: wall {wall:.1} s, {written} rows written, {batches} batches; \
                 CPU {:.3} ms per row (user {:.2} s + sys {:.2} s), peak RSS {} MiB",
                if batch { "batch " } else { "online" },
                (usage.user + usage.system) * 1e3 / rows as f64,
                usage.user,
                usage.system,
                usage.max_rss_kib / 1024
            );
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok(())
}
