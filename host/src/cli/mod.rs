//! The `weir` command line.

/// `println!` for a command's output, which may be piped into `head`: once
/// the reader has quit, the rest is dropped rather than panicking, so what
/// the command does after printing (publishing a merge, an audit) still
/// happens.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod objects;
mod signals;
mod story;

use crate::services::audit::History;
use crate::services::stop::RunStop;
use crate::services::storage;
use crate::{config, engine};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Run LLM batch pipelines whose transforms are sandboxed WebAssembly components"
)]
struct Cli {
    /// Threads that run guest code, the main one among them, for the nodes
    /// whose guests do heavy work of their own (e.g. Python or JavaScript);
    /// 1 runs everything on the main thread. Default: the cores weir may use.
    #[arg(long, global = true, env = "WEIR_THREADS", value_name = "N")]
    threads: Option<std::num::NonZeroUsize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline: stream every source row through the transforms into the sinks.
    Run {
        /// The pipeline file (YAML).
        pipeline: PathBuf,
        /// Write the audit database here instead of the path the pipeline
        /// gives; an `s3://`, `gs://` or `az://` URL is written locally while
        /// the run goes on and uploaded when it ends.
        #[arg(long)]
        audit: Option<PathBuf>,
        /// Carry on an unfinished (killed or stopped) run of this pipeline
        /// instead of starting one: the latest, or the run given.
        #[arg(long, value_name = "RUN", num_args = 0..=1, default_missing_value = "latest")]
        resume: Option<RunChoice>,
        /// With --resume: carry on even though the source file changed since
        /// the run read it. The rows already done are kept; the others are
        /// read from the file as it is now.
        #[arg(long, requires = "resume")]
        allow_changed_source: bool,
        /// Keep no audit trail (no `weir explain`, no resume); for measuring
        /// what auditing costs.
        #[arg(long, conflicts_with = "resume")]
        no_audit: bool,
        /// Show no progress: no bar on a terminal, and elsewhere no line
        /// every 30 s.
        #[arg(long)]
        no_progress: bool,
        #[command(flatten)]
        stopping: Stopping,
        /// Run shard I of N (I from 0): a contiguous part of the source rows,
        /// into part files and an audit database of its own; `weir merge`
        /// joins the parts.
        #[arg(long, value_name = "I/N")]
        shard: Option<config::Shard>,
        /// With --shard: how many of the N shards the scheduler runs at once,
        /// when fewer than all (a Kubernetes Job's parallelism, a Slurm
        /// array's %K). A shared requests_per_minute and tokens_per_minute
        /// are divided by K rather than N, so more than K must never run at
        /// once.
        #[arg(long, value_name = "K", requires = "shard")]
        shards_at_once: Option<u32>,
    },
    /// Carry on run RUN where it stopped: finished rows are not processed
    /// again, recorded answers are not paid for again.
    Resume {
        run: i64,
        /// `--pipeline` also gives the pipeline file to resume with; by
        /// default it is the one the run was started from.
        #[command(flatten)]
        database: Database,
        /// Carry on even though the source file changed since the run read
        /// it. The rows already done are kept; the others are read from the
        /// file as it is now.
        #[arg(long)]
        allow_changed_source: bool,
        #[arg(long)]
        no_progress: bool,
        #[command(flatten)]
        stopping: Stopping,
    },
    /// Check a pipeline without calling any endpoint: the file, the source, every
    /// component and its options.
    Validate { pipeline: PathBuf },
    /// List the runs in an audit database with their status and row counts;
    /// with RUN, tell that run's summary again: its rows, each endpoint's
    /// requests, latency and concurrency limit, and the decisions that moved
    /// the limit.
    Runs {
        run: Option<i64>,
        /// With RUN, list every decision of the limit, not only the last.
        #[arg(long, requires = "run")]
        full: bool,
        /// With RUN, print what the run stored of its summary as JSON, for
        /// scripts: each endpoint's counters, the limit's changes and
        /// decisions.
        #[arg(long, requires = "run", conflicts_with = "full")]
        json: bool,
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
    /// Join the parts of a sharded run: each sink in source order, and the
    /// shards' audit databases as one run in the pipeline's audit database.
    Merge {
        pipeline: PathBuf,
        /// How many shards the run was split into.
        #[arg(long)]
        shards: u32,
    },
    /// Look into or empty the response cache of a pipeline's endpoints.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Cancel the provider batches of a run in batch mode: the provider
    /// stops working on them; `weir resume RUN` sends what they left
    /// unanswered again.
    Cancel {
        run: i64,
        /// `--pipeline` also gives the pipeline whose endpoints and keys are
        /// used; by default it is the one the run was started from.
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

#[derive(Subcommand)]
enum CacheCommand {
    /// How many answers the cache keeps, by endpoint, and what they cost.
    Stats {
        #[command(flatten)]
        cache: CacheFile,
    },
    /// Delete every kept answer.
    Clear {
        #[command(flatten)]
        cache: CacheFile,
    },
    /// The compiled components kept across runs: where, how many, how
    /// large, and the cap (`WEIR_CACHE_MAX_MB`, default 1024), beyond which
    /// the least recently used go.
    Components {
        /// Delete them all; runs compile what they need again.
        #[arg(long)]
        clear: bool,
    },
}

/// Which response cache: `--cache`, else the ones a pipeline file's
/// endpoints use, else `weir-cache.sqlite` in the current directory.
#[derive(clap::Args)]
struct CacheFile {
    /// The cache file.
    #[arg(long)]
    cache: Option<PathBuf>,
    /// A pipeline file: the caches of its endpoints.
    #[arg(long, short)]
    pipeline: Option<PathBuf>,
}

impl CacheFile {
    fn paths(&self) -> Result<Vec<PathBuf>> {
        if let Some(path) = &self.cache {
            return Ok(vec![path.clone()]);
        }
        if let Some(pipeline) = &self.pipeline {
            let paths = config::cache_paths_of(pipeline)?;
            if paths.is_empty() {
                anyhow::bail!("no endpoint of {} has `cache:` on", pipeline.display());
            }
            return Ok(paths);
        }
        Ok(vec![PathBuf::from(config::CACHE_FILE_NAME)])
    }
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
            return objects::placed(&self.staging(), path);
        }
        if let Some(pipeline) = &self.pipeline {
            return Ok(config::audit_path_of(pipeline)?);
        }
        Ok(PathBuf::from(config::AUDIT_FILE_NAME))
    }

    fn staging(&self) -> config::Staging {
        let dir = self.pipeline.as_deref().and_then(|p| p.parent());
        config::Staging::for_dir(dir.unwrap_or(std::path::Path::new("")))
    }

    /// The audit database, downloaded first when it is an object this
    /// machine has no copy of.
    async fn fetched(&self) -> Result<PathBuf> {
        let path = self.path()?;
        objects::fetch_audit(&self.staging(), &path, false).await?;
        Ok(path)
    }
}

/// When a run stops before its source is done.
#[derive(clap::Args, Clone, Copy)]
struct Stopping {
    /// After the first SIGINT/SIGTERM, how long calls in flight may take to
    /// finish before they are cut. A second signal stops at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0,
          value_parser = grace_seconds)]
    grace_seconds: f64,
    /// The most the whole run may spend, in USD, in place of the pipeline's
    /// `budget_usd`; a resume can raise it.
    #[arg(long, value_name = "USD", value_parser = budget_usd)]
    budget_usd: Option<f64>,
    /// Take at most this many rows not done before, then stop as an
    /// interrupted run does: look at what they gave, and a resume goes on
    /// with the rest without asking for them again.
    #[arg(long, value_name = "ROWS", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
}

fn budget_usd(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd > 0.0 => Ok(usd),
        _ => Err(format!("`{text}` is not a positive number of USD")),
    }
}

fn grace_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds from 0 to 86400"
        )),
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

/// Exit status when the run finished but some rows failed, were quarantined
/// or were discarded.
const ROWS_FAILED: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // One thread for the I/O and the cheap guests: worker threads would add
    // cross-thread wake-ups for every HTTP exchange, which cost more CPU than
    // the rest of a row. Heavy guests' calls are shared with the guest threads.
    if let Err(e) = start_guest_threads(cli.threads) {
        return fail(e);
    }
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

/// Starts the guest threads unless there is one core (or `--threads 1`),
/// where handing calls over would only cost.
fn start_guest_threads(threads: Option<std::num::NonZeroUsize>) -> Result<()> {
    let threads = match threads {
        Some(threads) => threads.get(),
        None => std::thread::available_parallelism().map_or(1, |cores| cores.get()),
    };
    if threads < 2 {
        return Ok(());
    }
    // The guest time per call above which a node's calls leave the main
    // thread; zero sends every call to the guest threads.
    let threshold = match std::env::var("WEIR_GUEST_THREADS_ABOVE_US") {
        Ok(micros) => Some(Duration::from_micros(micros.parse().map_err(|_| {
            anyhow::anyhow!("WEIR_GUEST_THREADS_ABOVE_US: `{micros}` is not a number of µs")
        })?)),
        Err(_) => None,
    };
    engine::guest_threads::start(threads, threshold)?;
    Ok(())
}

async fn execute(command: Command) -> Result<ExitCode> {
    match command {
        Command::Run {
            pipeline,
            audit,
            resume,
            allow_changed_source,
            no_audit,
            no_progress,
            stopping,
            shard,
            shards_at_once,
        } => {
            if let (Some(shard), Some(k)) = (shard, shards_at_once)
                && !(1..=shard.count).contains(&k)
            {
                anyhow::bail!(
                    "--shards-at-once {k} with --shard {shard}: give 1 to {}",
                    shard.count
                );
            }
            let mut pipeline = config::load(&pipeline)?;
            storage::fetch(&pipeline.staging, &pipeline.source.path).await?;
            if let Some(shard) = shard {
                pipeline = pipeline.into_shard(shard, shards_at_once)?;
            }
            if let Some(path) = audit {
                let path = objects::placed(&pipeline.staging, &path)?;
                pipeline.set_audit_path(path)?;
            }
            let mut resume = resume.map(|choice| engine::Resume {
                run_id: match choice {
                    RunChoice::Latest => None,
                    RunChoice::Run(id) => Some(id),
                },
                allow_changed_source,
            });
            // A scheduler runs a shard's command again after a failure: a
            // shard that never began has nothing to resume, so it starts.
            if resume.is_some() && pipeline.shard.is_some() && !began(&pipeline)? {
                say!("weir: this shard has not begun yet; starting it\n");
                resume = None;
            }
            run(pipeline, resume, !no_audit, no_progress, stopping).await
        }
        Command::Resume {
            run: run_id,
            database,
            allow_changed_source,
            no_progress,
            stopping,
        } => {
            let audit_path = database.fetched().await?;
            let recorded = History::open(&audit_path)?.run(run_id)?;
            let pipeline_path = database
                .pipeline
                .unwrap_or_else(|| PathBuf::from(&recorded.pipeline_path));
            let mut pipeline = config::load(&pipeline_path)?;
            storage::fetch(&pipeline.staging, &pipeline.source.path).await?;
            // A shard's run carries on as that shard: its part of the rows,
            // its part files and its share of the rate limits, as its
            // `--shards-at-once` set it. A merged run is recorded as
            // `merged N`, no shard.
            let shard = recorded.shard.and_then(|s| s.parse::<config::Shard>().ok());
            if let Some(shard) = shard {
                pipeline = pipeline.into_shard(shard, recorded.shards_at_once)?;
            }
            pipeline.set_audit_path(audit_path)?;
            let resume = engine::Resume {
                run_id: Some(run_id),
                allow_changed_source,
            };
            run(pipeline, Some(resume), true, no_progress, stopping).await
        }
        Command::Guest {
            command: GuestCommand::New { lang, path },
        } => {
            let dir = crate::authoring::new_guest(lang, &path)?;
            tell!("made a {} guest in {}", lang.name(), dir.display());
            tell!(
                "next: read {}/README.md, or install, test and build it:",
                dir.display()
            );
            tell!("  cd {}", dir.display());
            if let Some(setup) = lang.setup_and_native_tests() {
                tell!("  {setup}");
            }
            tell!("  weir guest build . && weir test .");
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
                audit: database.fetched().await?,
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
                    say!("wrote {}\n", path.display());
                }
                None => show(&text),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate { pipeline: path } => {
            let (pipeline, unset) = config::load_without_secrets(&path)?;
            // The source's header is checked, so an object is fetched.
            storage::fetch(&pipeline.staging, &pipeline.source.path).await?;
            let validated = engine::validate(&pipeline).await?;
            tell!("{}: ok", path.display());
            for name in unset {
                tell!("  note    {name} is not set; `weir run` will need it");
            }
            let shown = |path| pipeline.staging.shown(path);
            match &validated.columns {
                Some(columns) => tell!(
                    "  source  {} (columns {})",
                    shown(&pipeline.source.path),
                    columns.join(", ")
                ),
                None => tell!("  source  {}", shown(&pipeline.source.path)),
            }
            for (name, fields) in validated.nodes {
                tell!("  node    {name} adds {}", fields.join(", "));
            }
            for sink in &pipeline.sinks {
                tell!("  sink    {}", shown(&sink.path));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs {
            run,
            full,
            json: as_json,
            database,
        } => {
            let history = History::open(&database.fetched().await?)?;
            match run {
                None => show(&story::runs(&history.runs()?)),
                Some(run) if as_json => {
                    let json: serde_json::Value = serde_json::from_str(&history.summary_json(run)?)
                        .with_context(|| format!("run {run}: its stored summary is not JSON"))?;
                    show(&format!("{json:#}\n"));
                }
                Some(run) => {
                    let json = history.summary_json(run)?;
                    let summary = engine::StoredSummary::parse(&json).with_context(|| {
                        format!("run {run}: its stored summary is not one weir can read")
                    })?;
                    show(&story::run(&history.run(run)?, &summary, full));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain {
            run,
            row,
            full,
            database,
        } => {
            let history = History::open(&database.fetched().await?)?;
            show(&story::row(&history.row(run, row)?, full));
            Ok(ExitCode::SUCCESS)
        }
        Command::Cache { command } => cache(command),
        Command::Merge { pipeline, shards } => {
            let (pipeline, _) = config::load_without_secrets(&pipeline)?;
            objects::fetch_parts(&pipeline, shards).await?;
            let merged = engine::merge(&pipeline, shards)?;
            let staging = &pipeline.staging;
            tell!(
                "merged {shards} shards: {} rows, run {} in {}",
                merged.rows,
                merged.run_id,
                staging.shown(&merged.audit)
            );
            for sink in &merged.sinks {
                tell!("  output   {}", staging.shown(sink));
            }
            for path in &merged.sinks {
                storage::publish(staging, path).await?;
            }
            objects::publish_audit(staging, &merged.audit).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel { run, database } => {
            let audit_path = database.fetched().await?;
            let history = History::open(&audit_path)?;
            let pipeline_path = match database.pipeline {
                Some(path) => path,
                None => PathBuf::from(history.run(run)?.pipeline_path),
            };
            let batches = history.open_batches(run)?;
            if batches.is_empty() {
                tell!("run {run} has no provider batch to cancel");
                return Ok(ExitCode::SUCCESS);
            }
            let pipeline = config::load(&pipeline_path)?;
            engine::cancel_batches(&pipeline, &audit_path, run, &batches).await?;
            for (endpoint, id) in &batches {
                tell!("cancelled batch {id} of endpoint `{endpoint}`");
            }
            tell!("`weir resume {run}` sends their unanswered requests again");
            Ok(ExitCode::SUCCESS)
        }
        Command::Purge { run, database } => {
            let path = database.fetched().await?;
            let deleted = History::purge(&path, run)?;
            let staging = database.staging();
            tell!(
                "run {run}: {deleted} payloads deleted from {}; hashes kept",
                staging.shown(&path)
            );
            objects::publish_audit(&staging, &path).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Whether a run of this pipeline (shard) began on any row in its audit
/// database.
fn began(pipeline: &config::Pipeline) -> Result<bool> {
    if !pipeline.audit_path.exists() {
        return Ok(false);
    }
    let history = History::open(&pipeline.audit_path)?;
    Ok(history.runs()?.iter().any(|run| run.segments > 0))
}

/// How often a run whose stderr is no terminal writes a progress line:
/// `WEIR_PROGRESS_SECONDS`, 30 by default.
fn progress_every() -> Result<Duration> {
    match std::env::var("WEIR_PROGRESS_SECONDS") {
        Err(_) => Ok(Duration::from_secs(30)),
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(seconds) if seconds.is_finite() && seconds >= 1.0 => {
                Ok(Duration::from_secs_f64(seconds))
            }
            _ => anyhow::bail!(
                "WEIR_PROGRESS_SECONDS: `{text}` is not a number of seconds of 1 or more"
            ),
        },
    }
}

async fn run(
    pipeline: config::Pipeline,
    resume: Option<engine::Resume>,
    audit: bool,
    no_progress: bool,
    stopping: Stopping,
) -> Result<ExitCode> {
    let progress = match (no_progress, std::io::stderr().is_terminal()) {
        (true, _) => engine::ProgressKind::Hidden,
        (false, true) => engine::ProgressKind::Bar,
        (false, false) => engine::ProgressKind::Lines(progress_every()?),
    };
    let stop = Arc::new(RunStop::new());
    signals::watch(
        Arc::clone(&stop),
        Duration::from_secs_f64(stopping.grace_seconds),
    )?;
    let options = engine::RunOptions {
        progress,
        resume,
        audit,
        stop,
        budget_usd: stopping.budget_usd,
        limit: stopping.limit,
    };
    let outputs = objects::Outputs::of(&pipeline, audit);
    let report = match engine::run(pipeline, options).await {
        Ok(report) => report,
        Err(error) => {
            // The audit database tells why the run failed; the run's own
            // error is the one to report.
            if let Err(upload) = outputs.publish(false).await {
                say!("weir: {upload:#}\n");
            }
            return Err(error.into());
        }
    };
    say!("{}", report.summary());
    outputs.publish(report.stopped.is_none()).await?;
    let stopped_with = report
        .stopped
        .as_ref()
        .map_or(0, |reason| reason.exit_code());
    Ok(match stopped_with {
        0 if report.rejected_in_run() > 0 => ExitCode::from(ROWS_FAILED),
        code => ExitCode::from(code),
    })
}

async fn test(files: &[PathBuf], component: Option<&std::path::Path>) -> Result<ExitCode> {
    let runtime = crate::runtime::Runtime::new()?;
    let mut total = crate::fixtures::Tally::default();
    for given in files {
        let path = crate::fixtures::fixtures_path(given);
        let tally = crate::fixtures::run_file(&runtime, &path, component, &mut QuietStdout).await?;
        total.passed += tally.passed;
        total.failed += tally.failed;
    }
    if files.len() > 1 {
        tell!("in all: {} passed, {} failed", total.passed, total.failed);
    }
    Ok(if total.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn cache(command: CacheCommand) -> Result<ExitCode> {
    use crate::services::cache::ResponseCache;
    let (files, clear) = match &command {
        CacheCommand::Stats { cache } => (cache.paths()?, false),
        CacheCommand::Clear { cache } => (cache.paths()?, true),
        CacheCommand::Components { clear } => return compiled_components(*clear),
    };
    for path in files {
        if !path.exists() {
            tell!("{}: no cache yet", path.display());
            continue;
        }
        let cache = ResponseCache::open(&path)?;
        if clear {
            tell!("{}: {} answers deleted", path.display(), cache.clear()?);
            continue;
        }
        let stats = cache.stats()?;
        tell!(
            "{}: {} answers ({} of requests with temperature above 0), {:.1} MB, ${:.4} when first paid for",
            path.display(),
            stats.entries,
            stats.sampled,
            stats.bytes as f64 / 1e6,
            stats.cost_usd
        );
        for (endpoint, count) in stats.by_endpoint {
            tell!("  {count:>8}  {endpoint}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn compiled_components(clear: bool) -> Result<ExitCode> {
    use crate::runtime::cache_dir;
    let Some(dir) = cache_dir::location() else {
        tell!("no compiled components are kept (WEIR_CACHE_DIR=off)");
        return Ok(ExitCode::SUCCESS);
    };
    if !dir.exists() {
        tell!("{}: no compiled components yet", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    if clear {
        let (files, bytes) = cache_dir::clear(&dir)
            .map_err(|e| anyhow::anyhow!("cannot empty {}: {e}", dir.display()))?;
        tell!(
            "{}: {files} compiled components deleted, {:.1} MiB",
            dir.display(),
            mb(bytes)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let entries = cache_dir::entries(&dir)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?;
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    tell!(
        "{}: {} compiled components, {:.1} MiB of a {:.0} MiB cap",
        dir.display(),
        entries.len(),
        mb(total),
        mb(cache_dir::max_bytes())
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes a command's text output as `tell!` does, without adding a line end.
fn show(text: &str) {
    use std::io::Write as _;
    let _ = QuietStdout.write_all(text.as_bytes());
}

/// Stdout that drops what its reader, having quit, would not read. `weir
/// test` piped into `head` still runs every case, and its exit code still
/// says whether they passed.
struct QuietStdout;

impl std::io::Write for QuietStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stdout().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stdout().flush();
        Ok(())
    }
}

fn fail(error: anyhow::Error) -> ExitCode {
    say!("error: {error:#}\n");
    ExitCode::FAILURE
}

/// `WEIR_LOG` takes tracing filter directives, e.g. `WEIR_LOG=debug`.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
        // A provider batch takes minutes to hours: its status is worth
        // seeing while the run waits.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,weir::services::batch=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .with_target(false)
        // On a closed stderr (a pipe whose reader quit) the default is to
        // report the failed write with `eprintln!`, which panics there and
        // takes the task that logged with it: a batch's follower would die
        // and leave its rows waiting forever.
        .log_internal_errors(false)
        .init();
}

/// Colour only for a person at a terminal, and never when `NO_COLOR` is set
/// (no-color.org): escape codes in a log file or a CI log are noise.
fn colour_on_stderr() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    std::io::stderr().is_terminal() && !no_color
}
