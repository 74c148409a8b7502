//! Runs the real binary on generated rows against scripted servers, and reads
//! its CPU time and peak memory from the kernel's accounting of the child.

use crate::Args;
use anyhow::Context;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_test_llm_server::{Fault, Script, TestLlmServer};

struct Scenario {
    name: &'static str,
    rows: usize,
    script: Script,
    /// Extra endpoint settings for weir (never the server's capacity).
    endpoint: &'static str,
    /// Requests the server serves at once (429 beyond), when it is limited.
    capacity_slots: Option<usize>,
    /// Capacity steps to time the recovery after: (at, per second).
    steps: Vec<(Duration, f64)>,
    /// When set, the Python peers run after weir, each against a fresh
    /// server with the same script.
    peers: Option<Peers>,
}

struct Peers {
    /// The requests a peer is told it may have in flight.
    concurrency: usize,
    /// What weir was given instead, for its line's label.
    weir: &'static str,
    /// What the peers were given, for their lines' labels.
    told: &'static str,
}

/// Peers beside weir against a server with no limit: each given the same 32
/// requests in flight.
const PEERS_AT_32: Peers = Peers {
    concurrency: 32,
    weir: "pool_size 32",
    told: "semaphore 32",
};

fn scenarios(rows: usize) -> Vec<Scenario> {
    let latency = Duration::from_millis(100);
    vec![
        Scenario {
            name: "no limit, zero latency (pure overhead)",
            rows,
            script: Script::default(),
            endpoint: "pool_size: 32",
            capacity_slots: None,
            steps: vec![],
            peers: Some(PEERS_AT_32),
        },
        Scenario {
            // The capped scenario's pace (32 answers in flight, one every 3
            // ms) without its refusals or its limit to find: what a row costs
            // when the work of each answer comes alone, after an idle stretch
            // that leaves the caches cold, against the same rows at zero
            // latency above.
            name: "no limit, 100 ms latency (the capped pace, nothing refused)",
            rows: 10_000,
            script: Script {
                latency,
                ..Script::default()
            },
            endpoint: "pool_size: 32\nadaptive_concurrency: false",
            capacity_slots: None,
            steps: vec![],
            peers: Some(PEERS_AT_32),
        },
        Scenario {
            name: "capacity 32 (not told), 100 ms latency, 429 + Retry-After 1 s beyond",
            rows: 10_000,
            script: Script {
                latency,
                capacity: Some(32),
                retry_after_seconds: Some(1.0),
                ..Script::default()
            },
            endpoint: "pool_size: 128",
            capacity_slots: Some(32),
            steps: vec![],
            // The peers have no way to find the capacity, so they are given
            // it: the best case for them.
            peers: Some(Peers {
                concurrency: 32,
                weir: "not told, pool_size 128",
                told: "told the cap, 32",
            }),
        },
        Scenario {
            name: "capacity steps 64 -> 16 -> 64 at 8 s and 16 s, 100 ms latency",
            rows: 11_000,
            script: Script {
                latency,
                capacity_steps: vec![
                    (Duration::ZERO, 64),
                    (Duration::from_secs(8), 16),
                    (Duration::from_secs(16), 64),
                ],
                ..Script::default()
            },
            endpoint: "pool_size: 128",
            capacity_slots: None,
            steps: vec![
                (Duration::from_secs(8), 160.0),
                (Duration::from_secs(16), 640.0),
            ],
            peers: None,
        },
        Scenario {
            name: "6000 requests/minute limit (told), 50 ms latency",
            rows: 2000,
            script: Script {
                latency: Duration::from_millis(50),
                requests_per_minute: Some(6000),
                ..Script::default()
            },
            endpoint: "pool_size: 64\nrequests_per_minute: 6000",
            capacity_slots: None,
            steps: vec![],
            peers: None,
        },
        Scenario {
            name: "5 % faults (500, 503, resets, HTML pages), 50 ms latency",
            rows: 3000,
            script: mixed_faults(Duration::from_millis(50)),
            endpoint: "pool_size: 32",
            capacity_slots: None,
            steps: vec![],
            peers: None,
        },
        Scenario {
            name: "soak: 100000 rows, 5 % faults (500, 503, resets, HTML pages), 5 ms latency",
            rows: 100_000,
            script: mixed_faults(Duration::from_millis(5)),
            endpoint: "pool_size: 64\nmax_retries: 8",
            capacity_slots: None,
            steps: vec![],
            peers: None,
        },
    ]
}

pub async fn report(args: &Args) -> anyhow::Result<()> {
    let weir = args.weir_binary();
    anyhow::ensure!(
        weir.is_file(),
        "{} not found: build it with `cargo build --release -p weir`",
        weir.display()
    );
    println!("\nscenarios ({})", weir.display());
    for scenario in scenarios(args.rows) {
        if args.skips(scenario.name) {
            continue;
        }
        run_scenario(&weir, scenario).await?;
    }
    crate::sweep::report(args, &weir).await?;
    crate::queueing::report(args, &weir).await?;
    Ok(())
}

async fn run_scenario(weir: &Path, scenario: Scenario) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    let server = TestLlmServer::start(scenario.script.clone()).await?;
    let server_started = Instant::now();
    let pipeline = write_pipeline(&dir, scenario.rows, &server.base_url(), scenario.endpoint)?;
    let started = Instant::now();
    let usage = run_child(weir, &pipeline, &[]).await?;
    let wall = started.elapsed().as_secs_f64();
    let served = server.served();
    let rows = scenario.rows as f64;
    let ok = served
        .iter()
        .filter(|s| s.status == 200 && s.fault.is_none())
        .count();
    let rejected = served.iter().filter(|s| s.status == 429).count();
    let (outcomes, written) = audit_counts(&dir)?;
    let lost = scenario.rows as i64 - outcomes;
    let duplicated = duplicated_rows(&dir)?;

    println!("  {}", scenario.name);
    println!(
        "    wall {wall:.2} s, {:.0} rows/s; {} rows written, {lost} rows lost, {duplicated} \
         written twice",
        rows / wall,
        written
    );
    if let Some(slots) = scenario.capacity_slots {
        // The server holds each answer for its latency plus the timer's slack,
        // so what it can serve is measured, not assumed.
        let held = mean_held(&served);
        let capacity = slots as f64 / held;
        println!(
            "    capacity {capacity:.1} answers/s ({slots} slots, each answer held {:.2} ms); \
             ideal {:.2} s",
            held * 1e3,
            rows / capacity
        );
        println!(
            "    goodput {:.1} % of capacity",
            ok as f64 / wall / capacity * 100.0
        );
        if let Some(split) = time_split(&served, server_started, started, wall) {
            println!(
                "    {:.2} s before the first request, {:.2} s after the last one; \
                 steady state (from 1 s after the first request): {:.1} % of capacity",
                split.before_first,
                split.after_last,
                split.steady_goodput / capacity * 100.0
            );
        }
    }
    for (at, per_second) in &scenario.steps {
        match recovery(&served, *at, *per_second) {
            Some(t) => println!(
                "    after the step at {:.0} s to {per_second:.0}/s: ≥ 90 % of it within {:.2} s \
                 ({} 5 s)",
                at.as_secs_f64(),
                t.as_secs_f64(),
                if t <= Duration::from_secs(5) {
                    "within"
                } else {
                    "NOT within"
                }
            ),
            None => println!(
                "    after the step at {:.0} s: never back to 90 %",
                at.as_secs_f64()
            ),
        }
    }
    println!(
        "    {:.3} calls per row, {rejected} answered 429, peak {} in flight at the server",
        served.len() as f64 / rows,
        server.peak_in_flight()
    );
    println!(
        "    CPU {:.3} ms per row (user {:.2} s + sys {:.2} s), peak RSS {} MiB",
        (usage.user + usage.system) * 1e3 / rows,
        usage.user,
        usage.system,
        usage.max_rss_kib / 1024
    );
    if let Some(peers) = &scenario.peers {
        let weir_line = Line {
            label: format!("weir ({})", peers.weir),
            wall,
            answered: written as usize,
            usage,
            ..Line::from_server(&served, server.peak_in_flight(), scenario.capacity_slots)
        };
        drop(server);
        side_by_side(&dir, &scenario, peers, weir_line).await?;
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// One client's figures in the side-by-side table.
struct Line {
    label: String,
    wall: f64,
    answered: usize,
    usage: Usage,
    ok: usize,
    calls: usize,
    rejected: usize,
    peak: usize,
    /// Answers per second the server could give in this run, when capped.
    capacity: Option<f64>,
}

impl Line {
    fn from_server(
        served: &[weir_test_llm_server::Served],
        peak: usize,
        slots: Option<usize>,
    ) -> Self {
        Line {
            label: String::new(),
            wall: 0.0,
            answered: 0,
            usage: Usage {
                user: 0.0,
                system: 0.0,
                max_rss_kib: 0,
                timed_out: false,
            },
            ok: served
                .iter()
                .filter(|s| s.status == 200 && s.fault.is_none())
                .count(),
            calls: served.len(),
            rejected: served.iter().filter(|s| s.status == 429).count(),
            peak,
            // Each run's own hold time, so a slower timer in one run does
            // not count against the client.
            capacity: slots.map(|slots| slots as f64 / mean_held(served)),
        }
    }
}

/// Runs each Python peer alone against a fresh server with the scenario's
/// script, over the rows weir read, and prints their figures under weir's.
async fn side_by_side(
    dir: &Path,
    scenario: &Scenario,
    peers: &Peers,
    weir_line: Line,
) -> anyhow::Result<()> {
    println!(
        "    side by side, each client alone against a fresh server with the same script \
         (peers told {} in flight):",
        peers.concurrency
    );
    let mut lines = vec![weir_line];
    match crate::peers::python() {
        Ok(python) => {
            for peer in &crate::peers::PEERS {
                if let Some(reason) = crate::peers::unavailable(&python, peer) {
                    println!("      {} skipped: {reason}", peer.name);
                    continue;
                }
                let server = TestLlmServer::start(scenario.script.clone()).await?;
                let run =
                    crate::peers::run(&python, peer, dir, &server.base_url(), peers.concurrency)
                        .await?;
                lines.push(Line {
                    label: format!("{} ({})", peer.name, peers.told),
                    wall: run.wall,
                    answered: run.answered,
                    usage: run.usage,
                    ..Line::from_server(
                        &server.served(),
                        server.peak_in_flight(),
                        scenario.capacity_slots,
                    )
                });
            }
        }
        Err(reason) => println!("      peers skipped: {reason}"),
    }
    let rows = scenario.rows as f64;
    println!(
        "      {:<32} {:>7} {:>7} {:>8} {:>9} {:>5} {:>5} {:>8} {:>10} {:>8}",
        "client",
        "wall s",
        "rows/s",
        "goodput",
        "calls/row",
        "429s",
        "peak",
        "answered",
        "CPU ms/row",
        "RSS MiB"
    );
    for line in &lines {
        let goodput = line.capacity.map_or("—".to_string(), |capacity| {
            format!("{:.1} %", line.ok as f64 / line.wall / capacity * 100.0)
        });
        println!(
            "      {:<32} {:>7.2} {:>7.0} {:>8} {:>9.3} {:>5} {:>5} {:>8} {:>10.3} {:>8}",
            line.label,
            line.wall,
            rows / line.wall,
            goodput,
            line.calls as f64 / rows,
            line.rejected,
            line.peak,
            line.answered,
            (line.usage.user + line.usage.system) * 1e3 / rows,
            line.usage.max_rss_kib / 1024
        );
    }
    Ok(())
}

/// A fresh folder with `rows` generated CSV rows and a one-node pipeline
/// against `base_url`; returns the pipeline's path.
pub fn write_pipeline(
    dir: &Path,
    rows: usize,
    base_url: &str,
    endpoint: &str,
) -> anyhow::Result<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut csv = String::from("id,text\n");
    for i in 0..rows {
        csv.push_str(&format!(
            "{i},\"review number {i}: the product was fine, shipping was quick\"\n"
        ));
    }
    std::fs::write(dir.join("rows.csv"), csv)?;
    let endpoint: String = endpoint.lines().map(|l| format!("    {l}\n")).collect();
    let pipeline = dir.join("pipeline.yaml");
    std::fs::write(
        &pipeline,
        format!(
            "source:\n  path: rows.csv\nendpoints:\n  llm:\n    base_url: {base_url}\n    api_key: bench\n{endpoint}\
             transforms:\n  - name: ask\n    component: llm\n    endpoints: [llm]\n    \
             options:\n      template: \"{{{{ row.text }}}}\"\nsinks:\n  - path: out.csv\n"
        ),
    )?;
    Ok(pipeline)
}

/// Where the wall time of a run went: before the first request reached the
/// server and after the last one; and the successful answers per second once
/// the start-up (slow start) is over, until the last request arrived.
struct TimeSplit {
    before_first: f64,
    after_last: f64,
    steady_goodput: f64,
}

fn time_split(
    served: &[weir_test_llm_server::Served],
    server_started: Instant,
    child_started: Instant,
    wall: f64,
) -> Option<TimeSplit> {
    let offset = child_started.duration_since(server_started).as_secs_f64();
    let first = served.iter().map(|s| s.at).min()?.as_secs_f64() - offset;
    let last = served.iter().map(|s| s.at).max()?.as_secs_f64() - offset;
    let from = first + 1.0;
    let answered = served
        .iter()
        .filter(|s| s.status == 200 && s.fault.is_none())
        .filter(|s| (from..last).contains(&(s.at.as_secs_f64() - offset)))
        .count();
    Some(TimeSplit {
        before_first: first,
        after_last: wall - last,
        steady_goodput: answered as f64 / (last - from),
    })
}

/// Seconds from arrival to answer, on average over the successful answers.
fn mean_held(served: &[weir_test_llm_server::Served]) -> f64 {
    let held: Vec<f64> = served
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| s.held.as_secs_f64())
        .collect();
    held.iter().sum::<f64>() / held.len().max(1) as f64
}

/// Rows of the sink whose id another row of the sink already had.
fn duplicated_rows(dir: &Path) -> anyhow::Result<usize> {
    let mut reader = csv::Reader::from_path(dir.join("out.csv"))?;
    let mut seen = std::collections::HashSet::new();
    let mut duplicated = 0;
    for record in reader.records() {
        if !seen.insert(record?.get(0).unwrap_or_default().to_string()) {
            duplicated += 1;
        }
    }
    Ok(duplicated)
}

/// Rows with a terminal outcome, and rows written, from the audit database.
fn audit_counts(dir: &Path) -> anyhow::Result<(i64, i64)> {
    let db = Connection::open(dir.join("weir-audit.sqlite"))?;
    Ok(db.query_row(
        "SELECT count(*), coalesce(sum(rows_written), 0) FROM row_outcomes",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// How long after `at` the rate of successful answers, over a sliding 1 s
/// window, first reaches 90 % of `per_second`.
fn recovery(
    served: &[weir_test_llm_server::Served],
    at: Duration,
    per_second: f64,
) -> Option<Duration> {
    let mut times: Vec<Duration> = served
        .iter()
        .filter(|s| s.status == 200 && s.at >= at)
        .map(|s| s.at)
        .collect();
    times.sort();
    let window = Duration::from_secs(1);
    let need = (per_second * 0.9).ceil() as usize;
    (0..times.len())
        .find(|&i| {
            let end = times[i] + window;
            times[i..].iter().take_while(|t| **t < end).count() >= need
        })
        .map(|i| times[i] - at)
}

/// Compiles the built-in guest into weir's component cache with `weir
/// validate`, so that no measured run pays for it: a first compile takes one
/// to three seconds and peaks near 115 MiB, against 40 for a whole run at
/// `pool_size: 16` that loads the cached component.
pub fn fill_component_cache(weir: &Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-bench-cache-{}", std::process::id()));
    let pipeline = write_pipeline(&dir, 1, "http://127.0.0.1:9/v1", "pool_size: 1")?;
    let output = std::process::Command::new(weir)
        .arg("validate")
        .arg(&pipeline)
        .output()
        .with_context(|| format!("running {}", weir.display()))?;
    std::fs::remove_dir_all(&dir)?;
    anyhow::ensure!(
        output.status.success(),
        "`weir validate` of the benchmark's pipeline failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

pub struct Usage {
    pub user: f64,
    pub system: f64,
    pub max_rss_kib: i64,
    /// Killed at its time limit instead of exiting by itself.
    pub timed_out: bool,
}

/// Runs `weir run` (with `extra` arguments) and reads that child's own
/// CPU time (rusage) and peak RSS (its high-water mark while it ran).
pub async fn run_child(weir: &Path, pipeline: &Path, extra: &[&str]) -> anyhow::Result<Usage> {
    run_child_within(weir, pipeline, extra, None).await
}

/// `run_child`, the child killed once it has run for `limit`.
pub async fn run_child_within(
    weir: &Path,
    pipeline: &Path,
    extra: &[&str],
    limit: Option<Duration>,
) -> anyhow::Result<Usage> {
    let log = pipeline.with_file_name("weir-stderr.log");
    let mut command = std::process::Command::new(weir);
    command
        .args(["run", "--no-progress"])
        .args(extra)
        .arg(pipeline)
        .stderr(std::fs::File::create(&log)?);
    measure_child(command, log, &[0, 2], limit).await
}

/// Runs `command` to its end and reads that child's own CPU time (rusage)
/// and peak RSS (its high-water mark while it ran), so every client the
/// benchmark compares is measured the same way. `log` holds its stderr,
/// shown when it exits with a status outside `ok`. A child still running
/// after `limit` is killed, so that one that never ends cannot hang the
/// benchmark.
pub async fn measure_child(
    mut command: std::process::Command,
    log: PathBuf,
    ok: &'static [i32],
    limit: Option<Duration>,
) -> anyhow::Result<Usage> {
    tokio::task::spawn_blocking(move || {
        let program = command.get_program().to_string_lossy().into_owned();
        let started = Instant::now();
        let child = command.spawn()?;
        let mut timed_out = false;
        let mut status = 0;
        // SAFETY: wait4 fills the zeroed rusage of the child we spawned and
        // have not waited for; std's Child is not used to wait afterwards.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // The child's own high-water mark, read while it runs: its rusage
        // peak also counts this process's memory, which Linux carries over
        // from the fork into the child's exec.
        let mut peak_kib = None;
        let pid = loop {
            if let Some(hwm) = high_water_kib(child.id()) {
                peak_kib = Some(peak_kib.map_or(hwm, |peak: i64| peak.max(hwm)));
            }
            let pid = unsafe {
                libc::wait4(
                    child.id() as libc::pid_t,
                    &mut status,
                    libc::WNOHANG,
                    &mut usage,
                )
            };
            if pid != 0 {
                break pid;
            }
            if !timed_out && limit.is_some_and(|limit| started.elapsed() >= limit) {
                // SAFETY: the child has not been reaped yet, so its pid is
                // still its own.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
                timed_out = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        anyhow::ensure!(pid > 0, "wait4 failed: {}", std::io::Error::last_os_error());
        anyhow::ensure!(
            timed_out || (libc::WIFEXITED(status) && ok.contains(&libc::WEXITSTATUS(status))),
            "{program} failed (status {status}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Ok(Usage {
            user: usage.ru_utime.tv_sec as f64 + usage.ru_utime.tv_usec as f64 / 1e6,
            system: usage.ru_stime.tv_sec as f64 + usage.ru_stime.tv_usec as f64 / 1e6,
            max_rss_kib: peak_kib.unwrap_or(usage.ru_maxrss),
            timed_out,
        })
    })
    .await?
}

/// `VmHWM` of a running process: the most memory it has held resident.
fn high_water_kib(pid: u32) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One request in twenty answered with a 500, a 503, a reset connection or
/// an HTML error page.
fn mixed_faults(latency: Duration) -> Script {
    Script {
        latency,
        fault_rate: 0.05,
        fault_kinds: vec![
            Fault::Status(500),
            Fault::Status(503),
            Fault::Reset,
            Fault::HtmlPage,
        ],
        ..Script::default()
    }
}
