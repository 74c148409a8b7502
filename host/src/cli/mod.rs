//! The `weir` command line.

mod story;

use crate::services::audit::History;
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
        /// Carry on an unfinished (killed or stopped) run of this pipeline
        /// instead of starting one: the latest, or the run given.
        #[arg(long, value_name = "RUN", num_args = 0..=1, default_missing_value = "latest")]
        resume: Option<RunChoice>,
        /// Keep no audit trail (no `weir explain`, no resume); for measuring
        /// what auditing costs.
        #[arg(long, conflicts_with = "resume")]
        no_audit: bool,
        /// Do not draw a progress bar, even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Carry on run RUN where it stopped: finished rows are not processed
    /// again, recorded answers are not paid for again.
    Resume {
        run: i64,
        /// `--pipeline` also gives the pipeline file to resume with; by
        /// default it is the one the run was started from.
        #[command(flatten)]
        database: Database,
        #[arg(long)]
        no_progress: bool,
    },
    /// Check a pipeline without calling any endpoint: the file, the source, every
    /// component and its options.
    Validate { pipeline: PathBuf },
    /// List the runs in an audit database with their status and row counts.
    Runs {
        #[command(flatten)]
        database: Database,
    },
    /// Tell what happened to one source row of a run: its input, every node
    /// state and call, its output or error, and where it ended.
    Explain {
        run: i64,
        /// The row's 0-based position in the source.
        row: u64,
        /// Print bodies whole instead of cut short.
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        database: Database,
    },
    /// Write and build transform components in Rust, Python, JavaScript or C.
    Guest {
        #[command(subcommand)]
        command: GuestCommand,
    },
    /// Test transform components against fixtures files: each case's rows go
    /// through the real component in the real host, endpoint answers come
    /// from the file, and nothing is sent anywhere.
    Test {
        /// Fixtures files, or guest folders holding a `fixtures.yaml`.
        #[arg(required = true)]
        fixtures: Vec<PathBuf>,
        /// The component to test, in place of each file's `component:`.
        #[arg(long)]
        component: Option<PathBuf>,
    },
    /// Write a fixtures file from a run in the audit database: the rows one
    /// node saw, the answers its endpoints gave and what it made of them.
    RecordFixtures {
        run: i64,
        /// The node (its `name` in the pipeline file).
        node: String,
        /// At most this many cases.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Where to write the fixtures; by default standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        database: Database,
    },
    /// Delete the bodies a run kept (rows, requests, responses, outputs);
    /// their hashes stay.
    Purge {
        run: i64,
        #[command(flatten)]
        database: Database,
    },
}

#[derive(Subcommand)]
enum GuestCommand {
    /// Make a new guest folder: a working transform with its fixtures, a
    /// pipeline to run it in, and a README on building and testing it.
    New {
        #[arg(long, value_enum)]
        lang: crate::authoring::Language,
        /// The new folder; its name is the guest's name.
        path: PathBuf,
    },
    /// Build the guest in a folder into a component, `<folder>/<folder name>.wasm`.
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Write the component here instead.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

/// Which audit database: `--audit`, else the one a pipeline file names, else
/// `weir-audit.sqlite` in the current directory.
#[derive(clap::Args)]
struct Database {
    /// The audit database.
    #[arg(long)]
    audit: Option<PathBuf>,
    /// A pipeline file: its audit database is used.
    #[arg(long, short)]
    pipeline: Option<PathBuf>,
}

impl Database {
    fn path(&self) -> Result<PathBuf> {
        if let Some(path) = &self.audit {
            return Ok(path.clone());
        }
        if let Some(pipeline) = &self.pipeline {
            return config::audit_path_of(pipeline);
        }
        Ok(PathBuf::from(config::AUDIT_FILE_NAME))
    }
}

#[derive(Clone, Copy)]
enum RunChoice {
    Latest,
    Run(i64),
}

impl std::str::FromStr for RunChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latest" => Ok(Self::Latest),
            n => n
                .parse()
                .map(Self::Run)
                .map_err(|_| format!("`{n}` is not a run number")),
        }
    }
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
            resume,
            no_audit,
            no_progress,
        } => {
            let mut pipeline = config::load(&pipeline)?;
            if let Some(path) = audit {
                pipeline.audit_path = path;
            }
            let resume = resume.map(|choice| engine::Resume {
                run_id: match choice {
                    RunChoice::Latest => None,
                    RunChoice::Run(id) => Some(id),
                },
            });
            run(pipeline, resume, !no_audit, no_progress).await
        }
        Command::Resume {
            run: run_id,
            database,
            no_progress,
        } => {
            let audit_path = database.path()?;
            let pipeline_path = match database.pipeline {
                Some(path) => path,
                None => PathBuf::from(History::open(&audit_path)?.run(run_id)?.pipeline_path),
            };
            let mut pipeline = config::load(&pipeline_path)?;
            pipeline.audit_path = audit_path;
            let resume = engine::Resume {
                run_id: Some(run_id),
            };
            run(pipeline, Some(resume), true, no_progress).await
        }
        Command::Guest {
            command: GuestCommand::New { lang, path },
        } => {
            let dir = crate::authoring::new_guest(lang, &path)?;
            println!("made a {} guest in {}", lang.name(), dir.display());
            println!(
                "next: read {}/README.md, or build and test it:",
                dir.display()
            );
            println!("  weir guest build {0} && weir test {0}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Guest {
            command: GuestCommand::Build { dir, out },
        } => {
            crate::authoring::build(&dir, out.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Test {
            fixtures,
            component,
        } => test(&fixtures, component.as_deref()).await,
        Command::RecordFixtures {
            run,
            node,
            limit,
            output,
            database,
        } => {
            let text = crate::fixtures::record(&crate::fixtures::RecordRequest {
                audit: database.path()?,
                run,
                node,
                limit,
                pipeline: database.pipeline.clone(),
                fixtures_dir: output
                    .as_deref()
                    .and_then(|o| o.parent())
                    .filter(|dir| !dir.as_os_str().is_empty())
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(".")),
            })?;
            match output {
                Some(path) => {
                    std::fs::write(&path, text)
                        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
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
        Command::Runs { database } => {
            let history = History::open(&database.path()?)?;
            print!("{}", story::runs(&history.runs()?));
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain {
            run,
            row,
            full,
            database,
        } => {
            let history = History::open(&database.path()?)?;
            print!("{}", story::row(&history.row(run, row)?, full));
            Ok(ExitCode::SUCCESS)
        }
        Command::Purge { run, database } => {
            let path = database.path()?;
            let deleted = History::purge(&path, run)?;
            println!(
                "run {run}: {deleted} payloads deleted from {}; hashes kept",
                path.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run(
    pipeline: config::Pipeline,
    resume: Option<engine::Resume>,
    audit: bool,
    no_progress: bool,
) -> Result<ExitCode> {
    let show_progress = !no_progress && std::io::stderr().is_terminal();
    let options = engine::RunOptions {
        show_progress,
        resume,
        audit,
    };
    let report = engine::run(pipeline, options).await?;
    eprint!("{}", report.summary());
    Ok(if report.failed_in_run() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(ROWS_FAILED)
    })
}

async fn test(files: &[PathBuf], component: Option<&std::path::Path>) -> Result<ExitCode> {
    let runtime = crate::runtime::Runtime::new()?;
    let mut total = crate::fixtures::Tally::default();
    let mut stdout = std::io::stdout();
    for given in files {
        let path = crate::fixtures::fixtures_path(given);
        let tally = crate::fixtures::run_file(&runtime, &path, component, &mut stdout).await?;
        total.passed += tally.passed;
        total.failed += tally.failed;
    }
    if files.len() > 1 {
        println!("in all: {} passed, {} failed", total.passed, total.failed);
    }
    Ok(if total.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
        .with_ansi(colour_on_stderr())
        .with_target(false)
        .init();
}

/// Colour only for a person at a terminal, and never when `NO_COLOR` is set
/// (no-color.org): escape codes in a log file or a CI log are noise.
fn colour_on_stderr() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    std::io::stderr().is_terminal() && !no_color
}
