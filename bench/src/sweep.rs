//! Endpoints that refuse or fail requests, or answer slowly by nature,
//! whatever the load: weir with its adaptive limit against weir held at
//! fixed concurrencies (adaptive off), over the same rows and a fresh test
//! LLM server (a test tool, not a model) with the same script each time.

use crate::Args;
use crate::runs::{Run, print_header, print_line, run};
use std::path::Path;
use std::time::Duration;
use weir_test_llm_server::{Bursts, Script, presets};

struct Sweep {
    name: &'static str,
    rows: usize,
    script: Script,
    /// Each run is killed after this long.
    limit: Duration,
    /// The burst schedules run (see `Bursts::schedule`): where the bursts
    /// fall decides much of a short run's time, so one schedule says as
    /// much of luck as of the limit.
    schedules: &'static [u64],
}

/// The fixed concurrencies tried; the adaptive run's `pool_size` (its
/// ceiling) is the largest.
const FIXED: [usize; 4] = [16, 32, 64, 128];

/// The sweeps with answers in `latency`; slower answers take their runs'
/// time limits up in proportion.
fn sweeps(latency: Duration) -> Vec<Sweep> {
    let slower = (latency.as_secs_f64() / 0.1).max(1.0);
    vec![
        Sweep {
            name: "random error bursts (3 % 429/529/503 at any time, 80 % in bursts a quarter \
                   of the time), capacity 64",
            rows: 2000,
            script: Script {
                capacity: Some(64),
                ..presets::error_bursts(latency)
            },
            limit: Duration::from_secs(120).mul_f64(slower),
            schedules: &[0, 1, 2],
        },
        Sweep {
            name: "ChaosLLM stress_extreme (31 % 429/529/503 at any time, 97 % in the first 5 s \
                   of every 15), no cap",
            rows: 2000,
            script: presets::stress_extreme(latency),
            limit: Duration::from_secs(120).mul_f64(slower),
            schedules: &[0],
        },
        Sweep {
            name: "chaos preset (25 % faults: 429/529/503/502/504/500, resets, 1.25 % hangs of \
                   30-60 s, HTML and truncated bodies; 3 % slow)",
            rows: 1000,
            script: presets::chaos(latency),
            limit: Duration::from_secs(180).mul_f64(slower),
            schedules: &[0],
        },
        Sweep {
            name: "long tail (answers log-normal, sigma 0.8, whatever the load), no cap",
            rows: 2000,
            script: Script {
                latency,
                latency_tail: 0.8,
                ..Script::default()
            },
            limit: Duration::from_secs(120).mul_f64(slower),
            schedules: &[0],
        },
        Sweep {
            name: "long tail capped (answers log-normal, sigma 0.8; 429 + Retry-After 1 s \
                   beyond 32 in flight)",
            rows: 3000,
            script: Script {
                latency,
                latency_tail: 0.8,
                capacity: Some(32),
                retry_after_seconds: Some(1.0),
                ..Script::default()
            },
            limit: Duration::from_secs(120).mul_f64(slower),
            schedules: &[0],
        },
    ]
}

pub async fn report(args: &Args, weir: &Path) -> anyhow::Result<()> {
    let latency = Duration::from_millis(args.sweep_latency_ms);
    for sweep in sweeps(latency) {
        if args.skips(sweep.name) {
            continue;
        }
        let mut ratios = Vec::new();
        for &schedule in sweep.schedules {
            ratios.extend(run_sweep(weir, &sweep, latency, schedule).await?);
        }
        if sweep.schedules.len() > 1 && !ratios.is_empty() {
            let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
            let each: Vec<_> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "    adaptive / best fixed over {} schedules: {} (mean {mean:.2}×)",
                ratios.len(),
                each.join(", ")
            );
        }
    }
    Ok(())
}

/// Returns the adaptive run's time over the best fixed run's, when both
/// finished.
async fn run_sweep(
    weir: &Path,
    sweep: &Sweep,
    latency: Duration,
    schedule: u64,
) -> anyhow::Result<Option<f64>> {
    let script = Script {
        bursts: sweep
            .script
            .bursts
            .clone()
            .map(|bursts| Bursts { schedule, ..bursts }),
        ..sweep.script.clone()
    };
    let sweep = &Sweep { script, ..*sweep };
    let ms = latency.as_millis();
    match sweep.schedules.len() {
        1 => println!("  {}, {ms} ms latency, {} rows", sweep.name, sweep.rows),
        _ => println!(
            "  {}, {ms} ms latency, {} rows, burst schedule {schedule}",
            sweep.name, sweep.rows
        ),
    }
    println!(
        "    adaptive (pool_size {} as its ceiling) and fixed (adaptive_concurrency: false), \
         each killed after {:.0} s:",
        FIXED[FIXED.len() - 1],
        sweep.limit.as_secs_f64()
    );
    print_header();
    let adaptive = run(
        weir,
        "weir adaptive".into(),
        sweep.rows,
        &sweep.script,
        &format!("pool_size: {}", FIXED[FIXED.len() - 1]),
        sweep.limit,
    )
    .await?;
    print_line(&adaptive);
    let mut fixed = Vec::new();
    for concurrency in FIXED {
        let run = run(
            weir,
            format!("weir fixed {concurrency}"),
            sweep.rows,
            &sweep.script,
            &format!("pool_size: {concurrency}\nadaptive_concurrency: false"),
            sweep.limit,
        )
        .await?;
        print_line(&run);
        fixed.push(run);
    }
    Ok(compare(&adaptive, &fixed))
}

/// The adaptive run's wall time over the best fixed run's, the fixed runs
/// that did not finish left out; `None` unless both finished.
fn compare(adaptive: &Run, fixed: &[Run]) -> Option<f64> {
    let Some(best) = fixed
        .iter()
        .filter(|r| !r.usage.timed_out)
        .min_by(|a, b| a.wall.total_cmp(&b.wall))
    else {
        println!("    no fixed run finished");
        return None;
    };
    let ratio = adaptive.wall / best.wall;
    let bound = match adaptive.usage.timed_out {
        true => "> ",
        false => "",
    };
    println!(
        "    adaptive / best fixed ({}, {:.2} s) = {bound}{ratio:.2}×; adaptive rows ok {:.1} %",
        best.label,
        best.wall,
        adaptive.ok_share() * 100.0
    );
    (!adaptive.usage.timed_out).then_some(ratio)
}
