//! A server that never refuses but serves a few requests at once and queues
//! the rest (llama.cpp, vLLM, Ollama), played by the test LLM server (a test
//! tool, not a model): what weir's limit does to the queue, measured by the
//! server.

use crate::Args;
use crate::runs::{Run, percentile, print_header, print_line, run};
use std::path::Path;
use std::time::Duration;
use weir_test_llm_server::{Script, time_weighted_mean};

const NAME: &str = "queueing server (serves 8 at once, 200 ms each, queues the rest, never 429)";
/// The same server over five minutes: a limit that holds the queue short
/// over 25 s may let it grow over a long run.
const NAME_LONG: &str =
    "queueing server over five minutes (serves 8 at once, 200 ms each, never 429)";
/// The same server twice as quick from 20 s on: a limit the old round trip
/// set must find the new one, or keep a queue as long as the old.
const NAME_QUICKER: &str =
    "queueing server that gets twice as quick (serves 8 at once, 200 ms, 100 ms from 20 s on)";
const AT_ONCE: usize = 8;
const LATENCY: Duration = Duration::from_millis(200);
const QUICKER_AT: Duration = Duration::from_secs(20);
const ROWS: usize = 1000;
const ROWS_LONG: usize = 12_000;
const ROWS_QUICKER: usize = 5000;

pub async fn report(args: &Args, weir: &Path) -> anyhow::Result<()> {
    let adaptive = ("weir adaptive (pool_size 128)", "pool_size: 128");
    let told = (
        "weir fixed 8 (told)",
        "pool_size: 8\nadaptive_concurrency: false",
    );
    let fixed = (
        "weir fixed 128",
        "pool_size: 128\nadaptive_concurrency: false",
    );
    let steady = Server {
        latency_steps: vec![],
    };
    if !args.skips(NAME) {
        scenario(weir, NAME, ROWS, &steady, &[adaptive, told, fixed]).await?;
    }
    if !args.skips(NAME_LONG) {
        scenario(weir, NAME_LONG, ROWS_LONG, &steady, &[adaptive]).await?;
    }
    if !args.skips(NAME_QUICKER) {
        let quicker = Server {
            latency_steps: vec![(QUICKER_AT, LATENCY / 2)],
        };
        scenario(
            weir,
            NAME_QUICKER,
            ROWS_QUICKER,
            &quicker,
            &[adaptive, told],
        )
        .await?;
    }
    Ok(())
}

/// A server serving `AT_ONCE` requests at once, each taking `LATENCY` until
/// the first of `latency_steps` (time since its start, latency).
struct Server {
    latency_steps: Vec<(Duration, Duration)>,
}

impl Server {
    fn script(&self) -> Script {
        Script {
            latency: LATENCY,
            latency_steps: self.latency_steps.clone(),
            serve_at_once: Some(AT_ONCE),
            ..Script::default()
        }
    }

    /// The least time `rows` take there, every slot busy from the start.
    fn ideal_seconds(&self, rows: f64) -> f64 {
        let (mut at, mut latency, mut left) = (0.0, LATENCY.as_secs_f64(), rows);
        for (step, next) in &self.latency_steps {
            let step = step.as_secs_f64();
            let before_step = (step - at) * AT_ONCE as f64 / latency;
            if left <= before_step {
                break;
            }
            (at, latency, left) = (step, next.as_secs_f64(), left - before_step);
        }
        at + left * latency / AT_ONCE as f64
    }
}

/// Runs `rows` through each (label, endpoint options) against `server` and
/// prints what the server saw.
async fn scenario(
    weir: &Path,
    name: &str,
    rows: usize,
    server: &Server,
    runs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let script = server.script();
    let seconds = server.ideal_seconds(rows as f64);
    let ideal = rows as f64 / seconds;
    // Twice the ideal time, and at least two minutes.
    let kill_after = Duration::from_secs_f64((2.0 * seconds).max(120.0));
    println!("  {name}, {rows} rows");
    println!(
        "    ideal {ideal:.0} rows/s ({seconds:.0} s); weir adaptive is not told the 8, weir fixed \
         runs have adaptive_concurrency: false; each killed after {:.0} s:",
        kill_after.as_secs_f64()
    );
    let mut done = Vec::new();
    print_header();
    for (label, endpoint) in runs {
        let run = run(weir, (*label).into(), rows, &script, endpoint, kill_after).await?;
        print_line(&run);
        done.push(run);
    }
    println!(
        "      {:<34} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "client", "% of ideal", "mean queue", "last fifth", "p50 ms", "p99 ms", "p50 wait"
    );
    for run in &done {
        let seen = QueueFigures::of(run);
        println!(
            "      {:<34} {:>10.1}% {:>10.1} {:>10.1} {:>10.0} {:>10.0} {:>10.0}",
            run.label,
            server.ideal_seconds(run.completed as f64) / run.wall * 100.0,
            seen.mean_queue,
            seen.last_fifth_queue,
            seen.p50_ms,
            seen.p99_ms,
            seen.p50_wait_ms
        );
    }
    println!(
        "      (server-side: p50/p99 from a request's arrival to its answer, queue included; \
         wait: time in the queue; mean queue: time-weighted, from the first arrival to the \
         last answer; last fifth: the same over the last fifth of that time)"
    );
    Ok(())
}

struct QueueFigures {
    mean_queue: f64,
    last_fifth_queue: f64,
    p50_ms: f64,
    p99_ms: f64,
    p50_wait_ms: f64,
}

impl QueueFigures {
    fn of(run: &Run) -> Self {
        let first = run.served.iter().map(|s| s.at).min().unwrap_or_default();
        let last = run
            .served
            .iter()
            .map(|s| s.at + s.held)
            .max()
            .unwrap_or_default();
        let mut held: Vec<f64> = run
            .served
            .iter()
            .map(|s| s.held.as_secs_f64() * 1e3)
            .collect();
        let mut waits: Vec<f64> = run
            .served
            .iter()
            .map(|s| s.queued.as_secs_f64() * 1e3)
            .collect();
        Self {
            mean_queue: time_weighted_mean(&run.queue_changes, first, last),
            last_fifth_queue: time_weighted_mean(
                &run.queue_changes,
                last - (last - first) / 5,
                last,
            ),
            p50_ms: percentile(&mut held, 50.0),
            p99_ms: percentile(&mut held, 99.0),
            p50_wait_ms: percentile(&mut waits, 50.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ideal_time_counts_each_stretch_at_its_own_pace() {
        let steady = Server {
            latency_steps: vec![],
        };
        assert_eq!(steady.ideal_seconds(1000.0), 25.0);
        let quicker = Server {
            latency_steps: vec![(QUICKER_AT, LATENCY / 2)],
        };
        // 40 a second for 20 s, then 80 a second.
        assert_eq!(quicker.ideal_seconds(400.0), 10.0);
        assert_eq!(quicker.ideal_seconds(5000.0), 20.0 + 4200.0 / 80.0);
    }
}
