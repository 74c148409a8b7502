//! Benchmarks the real `weir` binary against the test LLM server (a test
//! tool, not a model) over loopback and prints figures; nothing is asserted.
//!
//!   cargo run --release -p weir-bench

mod audit;
mod batch;
mod guest;
mod memory;
mod peers;
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!("weir benchmark — test LLM server on loopback (a test tool, not a model)");
    guest::report().await?;
    throughput::report(&args).await?;
    audit::report(&args).await?;
    batch::report(&args).await?;
    memory::report(&args).await?;
    Ok(())
}
