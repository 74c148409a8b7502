//! Benchmarks the real `weir` binary against the test LLM server (a test
//! tool, not a model) over loopback and prints figures; nothing is asserted.
//!
//!   cargo run --release -p weir-bench

mod audit;
mod batch;
mod cores;
mod guest;
mod memory;
mod peers;
mod queueing;
mod runs;
mod sweep;
mod throughput;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Benchmark weir against the test LLM server over loopback")]
pub struct Args {
    /// Rows in the pure-overhead scenario (the others have fixed sizes).
    #[arg(long, default_value_t = 20_000)]
    rows: usize,
    /// Run only the scenarios whose name contains this text.
    #[arg(long)]
    only: Option<String>,
    /// The weir binary to measure (default: the release build beside this one).
    #[arg(long)]
    weir: Option<std::path::PathBuf>,
    /// Answer latency (the mean) of the random error, chaos and long-tail
    /// sweeps: answers as slow as a model's make the limit matter more than
    /// the waits refusals ask.
    #[arg(long, default_value_t = 100)]
    sweep_latency_ms: u64,
}

impl Args {
    /// The weir binary to measure: `--weir`, else the release build beside
    /// this one.
    pub fn weir_binary(&self) -> std::path::PathBuf {
        self.weir.clone().unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("own path");
            exe.with_file_name("weir")
        })
    }

    /// Whether `--only` leaves out the scenario called `name`.
    pub fn skips(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!("weir benchmark — test LLM server on loopback (a test tool, not a model)");
    guest::report().await?;
    throughput::fill_component_cache(&args.weir_binary())?;
    throughput::report(&args).await?;
    audit::report(&args).await?;
    batch::report(&args).await?;
    cores::report(&args).await?;
    memory::report(&args).await?;
    Ok(())
}
