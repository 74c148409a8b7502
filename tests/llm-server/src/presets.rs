//! Scripts that stand in for kinds of misbehaving endpoints, shared by the
//! command line (`--preset`) and the benchmark.

use crate::{Bursts, Fault, Script};
use std::time::Duration;

/// Like ChaosLLM's `chaos` preset: a quarter of requests fail, in twenty
/// equal parts of 1.25 % each: 429 (six parts), 529, 503 and 500 (two
/// each), 502, 504, a reset connection, a hang of 30 to 60 s answered 504,
/// a 502 HTML page, a 200 HTML page, a truncated body and a 200 whose JSON
/// stops half-way (one each). 3 % of the answers that succeed come five
/// times as slowly. Capacity refusals carry `Retry-After: 1`.
pub fn chaos(latency: Duration) -> Script {
    let mut fault_kinds = vec![Fault::Status(429); 6];
    fault_kinds.extend([Fault::Status(529), Fault::Status(529)]);
    fault_kinds.extend([Fault::Status(503), Fault::Status(503)]);
    fault_kinds.extend([Fault::Status(500), Fault::Status(500)]);
    fault_kinds.extend([
        Fault::Status(502),
        Fault::Status(504),
        Fault::Reset,
        Fault::Hang,
        Fault::HtmlPage,
        Fault::OkHtmlPage,
        Fault::Truncated,
        Fault::OkCutShort,
    ]);
    Script {
        latency,
        fault_rate: 0.25,
        fault_kinds,
        hang: Duration::from_secs(30),
        hang_up_to: Some(Duration::from_secs(60)),
        slow: Some((0.03, latency * 5)),
        retry_after_seconds: Some(1.0),
        ..Script::default()
    }
}

/// A shared endpoint's refusals, thrown whatever the load: 3 % of requests
/// at any time, and bursts (a quarter of 1 s windows, fixed by a hash of the
/// window's index) in which 80 % are refused; 429, 529 and 503 alike, with
/// `Retry-After: 1`.
pub fn error_bursts(latency: Duration) -> Script {
    refused_whatever_the_load(latency, 0.03, Duration::from_secs(1), 0.25, 0.8, None, 1.0)
}

/// Like ChaosLLM's `stress_extreme` preset: 31 % of requests refused at any
/// time and 97 % in the first 5 s of every 15 s, from the start, whatever
/// the load; 429, 529 and 503 alike, with `Retry-After: 2` (the middle of
/// ChaosLLM's 1 to 3 s).
pub fn stress_extreme(latency: Duration) -> Script {
    refused_whatever_the_load(
        latency,
        0.31,
        Duration::from_secs(5),
        1.0,
        0.97,
        Some(Duration::from_secs(15)),
        2.0,
    )
}

/// `outside` of the requests refused at any time and `share` within bursts
/// (see `Bursts` for `window`, `chance` and `every`), with 429, 529 and 503
/// alike, each asking for `retry_after_seconds`.
fn refused_whatever_the_load(
    latency: Duration,
    outside: f64,
    window: Duration,
    chance: f64,
    share: f64,
    every: Option<Duration>,
    retry_after_seconds: f64,
) -> Script {
    let statuses = vec![429, 529, 503];
    Script {
        latency,
        fault_rate: outside,
        fault_kinds: statuses.iter().map(|&s| Fault::Status(s)).collect(),
        bursts: Some(Bursts {
            window,
            chance,
            share,
            statuses,
            schedule: 0,
            every,
        }),
        retry_after_seconds: Some(retry_after_seconds),
        ..Script::default()
    }
}
