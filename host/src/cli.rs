//! The `weir` command line.

use crate::{config, engine};
use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Run LLM batch pipelines whose transforms are sandboxed WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline: stream every source row through the transforms into the sinks.
    Run {
        /// The pipeline file (YAML).
        pipeline: PathBuf,
        /// Write the audit database here instead of the path the pipeline gives.
        #[arg(long)]
        audit: Option<PathBuf>,
        /// Do not draw a progress bar, even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Check a pipeline without calling any endpoint: the file, the source, every
    /// component and its options.
    Validate { pipeline: PathBuf },
}

/// Exit status when the run finished but some rows failed.
const ROWS_FAILED: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // One thread: a row's guest work already runs on the task of its node, so
    // more worker threads add little but cross-thread wake-ups for every HTTP
    // exchange, which cost more CPU than the rest of a row.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(e.into()),
    };
    match runtime.block_on(execute(cli.command)) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

async fn execute(command: Command) -> Result<ExitCode> {
    match command {
        Command::Run {
            pipeline,
            audit,
            no_progress,
        } => {
            let mut pipeline = config::load(&pipeline)?;
            if let Some(path) = audit {
                pipeline.audit_path = path;
            }
            let show_progress = !no_progress && std::io::stderr().is_terminal();
            let report = engine::run(pipeline, engine::RunOptions { show_progress }).await?;
            eprint!("{}", report.summary());
            Ok(if report.rows_failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(ROWS_FAILED)
            })
        }
        Command::Validate { pipeline: path } => {
            let pipeline = config::load(&path)?;
            let nodes = engine::validate(&pipeline).await?;
            println!("{}: ok", path.display());
            println!("  source  {}", pipeline.source.path.display());
            for (name, fields) in nodes {
                println!("  node    {name} adds {}", fields.join(", "));
            }
            for sink in &pipeline.sinks {
                println!("  sink    {}", sink.path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn fail(error: anyhow::Error) -> ExitCode {
    eprintln!("error: {error:#}");
    ExitCode::FAILURE
}

/// `WEIR_LOG` takes tracing filter directives, e.g. `WEIR_LOG=debug`.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
