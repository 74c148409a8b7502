//! Guest execution across cores: the example `topic` transforms in Python
//! and JavaScript (interpreters inside the component), with the Rust one and
//! the built-in `llm` guest for reference, each run by the release `weir`
//! pinned to one core and then to two (`taskset`), rounds interleaved so a
//! change in the machine's load falls on both alike.

use crate::Args;
use crate::throughput::{Usage, measure_child};
use std::path::Path;
use std::time::Instant;

const NAME: &str = "cores: python and js guests, 1 and 2 cores";
/// Long enough that starting the node's instances is not a large part of the
/// run: each of the 40 Python interpreters a pool of 32 starts costs about
/// 9 ms of CPU on two cores against 3 ms on one (its first writes to its
/// memory image fault, and on two cores each fault interrupts the other), a
/// tenth of an 8,000-row run's CPU.
const ROWS: usize = 32_000;
const ROUNDS: usize = 3;
const POOL_SIZE: usize = 32;
/// What the test LLM server waits before each answer.
const LATENCY_MS: u64 = 0;
/// The cores weir runs on, one and then two.
const CORE_COUNTS: [usize; 2] = [1, 2];

struct Guest {
    name: &'static str,
    /// The pipeline's `component:`: a built example's file, or a built-in name.
    component: String,
    /// Whether the endpoint answers from the response cache, which the
    /// unmeasured first run fills: the guest's work without the server's.
    cached: bool,
}

/// The guests whose components are there; says which are not and how to
/// build them.
fn guests() -> Vec<Guest> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/guests");
    let mut found = Vec::new();
    for (name, dir) in [
        ("python", "topic-python"),
        ("js", "topic-js"),
        ("rust", "topic-rust"),
    ] {
        let dir = examples.join(dir);
        let wasm = dir.join(format!(
            "{}.wasm",
            dir.file_name().unwrap().to_string_lossy()
        ));
        if wasm.is_file() {
            let component = wasm.canonicalize().unwrap_or(wasm).display().to_string();
            if let Some(cached) = cached_name(name) {
                found.push(Guest {
                    name: cached,
                    component: component.clone(),
                    cached: true,
                });
            }
            found.push(Guest {
                name,
                component,
                cached: false,
            });
        } else {
            println!(
                "    {name} skipped: {} not found; build it with `weir guest build {}` \
                 (see examples/guests/README.md for its toolchain)",
                wasm.display(),
                dir.display()
            );
        }
    }
    found.push(Guest {
        name: "llm (built in)",
        component: "llm".into(),
        cached: false,
    });
    found
}

/// The interpreted guests are measured a second time answered from the
/// response cache: with no server sharing the two cores, what is left is
/// the guest's own work and weir's.
fn cached_name(name: &str) -> Option<&'static str> {
    match name {
        "python" => Some("python, cached"),
        "js" => Some("js, cached"),
        _ => None,
    }
}

pub async fn report(args: &Args) -> anyhow::Result<()> {
    if args.skips(NAME) {
        return Ok(());
    }
    println!("\n  {NAME}");
    let allowed = allowed_cpus();
    if allowed.len() < 2 || !Path::new("/usr/bin/taskset").is_file() {
        println!(
            "    skipped: needs 2 cores and taskset (this process may use {})",
            allowed.len()
        );
        return Ok(());
    }
    // weir's cores are the first this process may use (a container's cpuset
    // need not hold core 0); with a third, the server gets the rest, so that
    // weir's two cores are its own.
    let core_sets: Vec<(usize, String)> = CORE_COUNTS
        .iter()
        .map(|&n| (n, cpu_list(&allowed[..n])))
        .collect();
    let server_cpus = (allowed.len() > 2).then(|| cpu_list(&allowed[2..]));
    let weir = args.weir_binary();
    let server = LabelServer::start(
        &weir.with_file_name("weir-test-llm-server"),
        server_cpus.as_deref(),
    )?;
    let dir = std::env::temp_dir().join(format!("weir-bench-cores-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("tickets.csv"), tickets(ROWS))?;
    let guests = guests();
    let server_pinned = match &server_cpus {
        Some(list) => format!("pinned to cores {list}"),
        None => "sharing weir's cores".to_string(),
    };
    println!(
        "    {ROWS} tickets, pool_size {POOL_SIZE}, audit on; weir under `taskset -c {}`, then \
         `taskset -c {}`, {ROUNDS} rounds interleaved; the test LLM server (a test tool, not a \
         model) is a separate process on one thread, {server_pinned}, answering a label after \
         {LATENCY_MS} ms; `cached`: answered from the response cache, which the first, \
         unmeasured run fills",
        core_sets[0].1, core_sets[1].1
    );
    println!("    load average before: {}", load_average());
    for guest in &guests {
        // A first run compiles the component into weir's cache, and fills
        // the response cache of the guests run from it; unmeasured.
        run_once(&weir, &dir, guest, &core_sets[1].1, &server).await?;
    }
    let mut runs: Vec<Vec<Vec<Run>>> = guests
        .iter()
        .map(|_| core_sets.iter().map(|_| Vec::new()).collect())
        .collect();
    for _ in 0..ROUNDS {
        for (g, guest) in guests.iter().enumerate() {
            for (c, (_, list)) in core_sets.iter().enumerate() {
                runs[g][c].push(run_once(&weir, &dir, guest, list, &server).await?);
            }
        }
    }
    println!("    load average after: {}", load_average());
    println!(
        "    {:<16} {:>5} {:>24} {:>8} {:>10} {:>12}",
        "guest", "cores", "rows/s, each round", "median", "CPU ms/row", "server ms/row"
    );
    for (guest, by_cores) in guests.iter().zip(&runs) {
        let mut medians = Vec::new();
        for ((cores, _), runs) in core_sets.iter().zip(by_cores) {
            let rates: Vec<f64> = runs.iter().map(|r| ROWS as f64 / r.wall).collect();
            let median = median(&rates);
            medians.push(median);
            let cpu = median_by(runs, |r| {
                (r.usage.user + r.usage.system) * 1e3 / ROWS as f64
            });
            let server = median_by(runs, |r| r.server_cpu * 1e3 / ROWS as f64);
            let each: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
            println!(
                "    {:<16} {:>5} {:>24} {:>8.0} {:>10.3} {:>12.3}",
                guest.name,
                cores,
                each.join(" "),
                median,
                cpu,
                server
            );
        }
        println!(
            "    {:<16} 2 cores / 1 core: {:.2}×",
            guest.name,
            medians[1] / medians[0]
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

struct Run {
    wall: f64,
    usage: Usage,
    /// CPU seconds the server used during the run.
    server_cpu: f64,
}

async fn run_once(
    weir: &Path,
    dir: &Path,
    guest: &Guest,
    cores: &str,
    server: &LabelServer,
) -> anyhow::Result<Run> {
    for file in [
        "out.csv",
        "weir-audit.sqlite",
        "weir-audit.sqlite-wal",
        "weir-audit.sqlite-shm",
    ] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let pipeline = dir.join("pipeline.yaml");
    std::fs::write(&pipeline, pipeline_yaml(guest, &server.base_url))?;
    let mut command = std::process::Command::new("taskset");
    command
        .args(["-c", cores])
        .arg(weir)
        .args(["run", "--no-progress"])
        .arg(&pipeline)
        .stderr(std::fs::File::create(dir.join("weir-stderr.log"))?);
    let server_before = server.cpu_seconds();
    let started = Instant::now();
    let usage = measure_child(command, dir.join("weir-stderr.log"), &[0], None).await?;
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = server.cpu_seconds() - server_before;
    let written = csv::Reader::from_path(dir.join("out.csv"))?
        .records()
        .count();
    anyhow::ensure!(
        written == ROWS,
        "{} on cores {cores} wrote {written} rows of {ROWS}",
        guest.name
    );
    Ok(Run {
        wall,
        usage,
        server_cpu,
    })
}

fn pipeline_yaml(guest: &Guest, base_url: &str) -> String {
    let options = if guest.component == "llm" {
        "      template: \"Label as billing, shipping or other: {{ row.text }}\"\n      model: m\n"
    } else {
        "      labels: [billing, shipping, other]\n      model: m\n"
    };
    let cache = if guest.cached {
        "    cache: true\n"
    } else {
        ""
    };
    format!(
        "source:\n  path: tickets.csv\nendpoints:\n  llm:\n    base_url: {base_url}\n    \
         api_key: bench\n    pool_size: {POOL_SIZE}\n{cache}transforms:\n  - name: topic\n    \
         component: {}\n    endpoints: [llm]\n    options:\n{options}sinks:\n  - path: out.csv\n",
        guest.component
    )
}

/// Support tickets, varied enough that the answers differ.
fn tickets(rows: usize) -> String {
    let texts = [
        "Where is my parcel? It was due on Monday.",
        "I was charged twice for my subscription this month.",
        "The app crashes when I open the settings page.",
        "Can I change the delivery address of order {i}?",
        "Please refund invoice {i}, the amount is wrong.",
        "How do I reset my password?",
    ];
    let mut csv = String::from("id,text\n");
    for i in 0..rows {
        let text = texts[i % texts.len()].replace("{i}", &i.to_string());
        csv.push_str(&format!("{i},\"{text} (ticket {i})\"\n"));
    }
    csv
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn median_by(runs: &[Run], value: impl Fn(&Run) -> f64) -> f64 {
    median(&runs.iter().map(value).collect::<Vec<_>>())
}

/// The cores this process may run on (`Cpus_allowed_list` in
/// `/proc/self/status`, e.g. `0-3,8`), or as many from 0 as it may use.
fn allowed_cpus() -> Vec<usize> {
    let listed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
                .map(|list| parse_cpu_list(list.trim()))
        })
        .filter(|cpus| !cpus.is_empty());
    listed.unwrap_or_else(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        (0..n).collect()
    })
}

/// `0-3,8` → [0, 1, 2, 3, 8]; an unreadable part is left out.
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let bounds: Option<(usize, usize)> = match part.split_once('-') {
            Some((from, to)) => from.trim().parse().ok().zip(to.trim().parse().ok()),
            None => part.trim().parse().ok().map(|cpu| (cpu, cpu)),
        };
        if let Some((from, to)) = bounds {
            cpus.extend(from..=to);
        }
    }
    cpus
}

/// [0, 1] → `0,1`, as `taskset -c` takes it.
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `weir-test-llm-server --reply label` (a test tool, not a model) as a
/// separate process, so its CPU is its own and can be read.
struct LabelServer {
    child: std::process::Child,
    base_url: String,
}

impl LabelServer {
    /// `cpus`: a `taskset -c` list the server is pinned to.
    fn start(binary: &Path, cpus: Option<&str>) -> anyhow::Result<Self> {
        anyhow::ensure!(
            binary.is_file(),
            "{} not found: build it with `cargo build --release -p weir-test-llm-server`",
            binary.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        // `taskset` sets the affinity and then execs the server in place, so
        // the child's id, whose CPU is read, is the server's.
        let mut command = match cpus {
            Some(list) => {
                let mut taskset = std::process::Command::new("taskset");
                taskset.args(["-c", list]).arg(binary);
                taskset
            }
            None => std::process::Command::new(binary),
        };
        let child = command
            // One thread: the server stands in for a provider on other
            // machines, and a runtime of its own on each core would take
            // more of the cores weir is measured on.
            .env("TOKIO_WORKER_THREADS", "1")
            .args(["--reply", "label", "--port", &port.to_string()])
            .args(["--latency-ms", &LATENCY_MS.to_string()])
            .stdout(std::process::Stdio::null())
            .spawn()?;
        let address = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(&address).is_err() {
            anyhow::ensure!(
                started.elapsed().as_secs() < 10,
                "the test LLM server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(Self {
            child,
            base_url: format!("http://{address}/v1"),
        })
    }

    /// The CPU seconds (user and system) the server has used so far.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The fields after the command name, which is in parentheses.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
            .sum();
        // SAFETY: sysconf only reads a configuration value.
        ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }
}

impl Drop for LabelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-3,8"), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("4"), vec![4]);
        assert_eq!(parse_cpu_list("2-3,x,6-5"), vec![2, 3]);
        assert_eq!(cpu_list(&[4, 5]), "4,5");
    }
}
