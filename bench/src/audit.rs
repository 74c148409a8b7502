//! What the audit trail costs: the same run against a zero-latency server
//! without an audit trail, with hashes only, and with payloads (the default),
//! interleaved so that drift in the machine's load hits every mode alike.

use crate::Args;
use crate::throughput::{run_child, write_pipeline};
use std::time::Instant;
use weir_test_llm_server::{Script, TestLlmServer};

const NAME: &str = "audit cost, zero latency";
const ROUNDS: usize = 5;

struct Mode {
    name: &'static str,
    args: &'static [&'static str],
    payloads: bool,
}

const MODES: [Mode; 3] = [
    Mode {
        name: "no audit trail (--no-audit)",
        args: &["--no-audit"],
        payloads: false,
    },
    Mode {
        name: "audit, hashes only (payloads: false)",
        args: &[],
        payloads: false,
    },
    Mode {
        name: "audit with payloads (default)",
        args: &[],
        payloads: true,
    },
];

pub async fn report(args: &Args) -> anyhow::Result<()> {
    if args.skips(NAME) {
        return Ok(());
    }
    let weir = args.weir_binary();
    let server = TestLlmServer::start(Script::default()).await?;
    let rows = args.rows;
    let dir = std::env::temp_dir().join(format!("weir-bench-audit-{}", std::process::id()));
    println!("\n{NAME}: {rows} rows, pool 32, median of {ROUNDS} interleaved rounds");
    let mut samples: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); MODES.len()];
    for _ in 0..ROUNDS {
        for (mode, samples) in MODES.iter().zip(samples.iter_mut()) {
            let pipeline = write_pipeline(&dir, rows, &server.base_url(), "pool_size: 32")?;
            if !mode.payloads {
                let text = std::fs::read_to_string(&pipeline)?;
                std::fs::write(&pipeline, format!("{text}audit:\n  payloads: false\n"))?;
            }
            let started = Instant::now();
            let usage = run_child(&weir, &pipeline, mode.args).await?;
            let wall = started.elapsed().as_secs_f64();
            // The database with what its WAL still holds: weir checkpoints
            // when it closes, but a size taken mid-checkpoint must not shrink.
            let audit = dir.join("weir-audit.sqlite");
            let bytes: u64 = [audit.clone(), audit.with_extension("sqlite-wal")]
                .iter()
                .filter_map(|p| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum();
            samples.push((
                rows as f64 / wall,
                (usage.user + usage.system) * 1e3 / rows as f64,
                bytes as f64 / rows as f64,
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(samples[0].iter().map(|s| s.0).collect());
    for (mode, samples) in MODES.iter().zip(samples) {
        let throughput = median(samples.iter().map(|s| s.0).collect());
        let cpu = median(samples.iter().map(|s| s.1).collect());
        let bytes = median(samples.iter().map(|s| s.2).collect());
        let size = if bytes > 0.0 {
            format!(", database {bytes:.0} bytes per row")
        } else {
            String::new()
        };
        println!(
            "    {:<38} {throughput:>7.0} rows/s ({:>+5.1} % vs no audit), CPU {cpu:.3} ms per row{size}",
            mode.name,
            (throughput / base - 1.0) * 100.0
        );
    }
    Ok(())
}
