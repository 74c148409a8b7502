//! Runs the real binary on generated rows and reads its CPU time and peak
//! memory from the kernel's accounting of the child process.

use crate::Args;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_test_llm_server::{Script, TestLlmServer};

struct Scenario {
    name: &'static str,
    latency: Duration,
    pool_size: usize,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "zero latency, pool 32 (pure overhead)",
        latency: Duration::ZERO,
        pool_size: 32,
    },
    Scenario {
        name: "100 ms latency, pool 64",
        latency: Duration::from_millis(100),
        pool_size: 64,
    },
];

pub async fn report(args: &Args) -> anyhow::Result<()> {
    let weir = args.weir.clone().unwrap_or_else(default_weir);
    anyhow::ensure!(
        weir.is_file(),
        "{} not found: build it with `cargo build --release -p weir`",
        weir.display()
    );
    let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut csv = String::from("id,text\n");
    for i in 0..args.rows {
        csv.push_str(&format!(
            "{i},\"review number {i}: the product was fine, shipping was quick\"\n"
        ));
    }
    std::fs::write(dir.join("rows.csv"), csv)?;
    println!("\nthroughput ({})", weir.display());
    for scenario in SCENARIOS {
        let server = TestLlmServer::start(Script {
            latency: scenario.latency,
            ..Script::default()
        })
        .await?;
        let pipeline = dir.join("pipeline.yaml");
        std::fs::write(
            &pipeline,
            format!(
                "source:\n  path: rows.csv\nendpoints:\n  llm:\n    base_url: {}\n    api_key: bench\n    \
                 pool_size: {}\ntransforms:\n  - name: ask\n    component: llm\n    endpoints: [llm]\n    \
                 options:\n      template: \"{{{{ row.text }}}}\"\nsinks:\n  - path: out.csv\n",
                server.base_url(),
                scenario.pool_size
            ),
        )?;
        let _ = std::fs::remove_file(dir.join("weir-audit.sqlite"));
        let started = Instant::now();
        let usage = run_child(&weir, &pipeline).await?;
        let wall = started.elapsed().as_secs_f64();
        let served = server.served().len();
        let rows = args.rows as f64;
        let ideal = rows * scenario.latency.as_secs_f64() / scenario.pool_size as f64;
        println!("  {}", scenario.name);
        println!(
            "    wall {wall:.2} s (ideal {ideal:.2} s), {:.0} rows/s, {served} calls",
            rows / wall
        );
        println!(
            "    CPU {:.3} ms per row (user {:.2} s + sys {:.2} s), peak RSS {} MiB",
            (usage.user + usage.system) * 1e3 / rows,
            usage.user,
            usage.system,
            usage.max_rss_kib / 1024
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn default_weir() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.with_file_name("weir")
}

struct Usage {
    user: f64,
    system: f64,
    max_rss_kib: i64,
}

/// Runs `weir run` and reads that child's own rusage (CPU time, peak RSS).
async fn run_child(weir: &Path, pipeline: &Path) -> anyhow::Result<Usage> {
    let weir = weir.to_path_buf();
    let pipeline = pipeline.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let child = std::process::Command::new(&weir)
            .args(["run", "--no-progress"])
            .arg(&pipeline)
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut status = 0;
        // SAFETY: wait4 fills the zeroed rusage of the child we spawned and
        // have not waited for; std's Child is not used to wait afterwards.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
        anyhow::ensure!(pid > 0, "wait4 failed: {}", std::io::Error::last_os_error());
        anyhow::ensure!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "weir failed (status {status})"
        );
        Ok(Usage {
            user: usage.ru_utime.tv_sec as f64 + usage.ru_utime.tv_usec as f64 / 1e6,
            system: usage.ru_stime.tv_sec as f64 + usage.ru_stime.tv_usec as f64 / 1e6,
            max_rss_kib: usage.ru_maxrss,
        })
    })
    .await?
}
