//! Runs against fixed concurrencies and the figures printed of them.

use super::clients::{Concurrency, Finished, run_rows};
use super::server::Sim;
use std::rc::Rc;

/// Runs `rows` with the adaptive limit and with each fixed concurrency in
/// `fixed`, each against a fresh server from `server`; returns the adaptive
/// run and the fastest fixed one with its concurrency.
pub(super) async fn against_fixed(
    server: impl Fn() -> Rc<Sim>,
    rows: usize,
    fixed: &[usize],
) -> (Finished, (usize, Finished)) {
    let adaptive = run_rows(&server(), Concurrency::Adaptive, rows).await;
    let mut best: Option<(usize, Finished)> = None;
    for &n in fixed {
        let run = run_rows(&server(), Concurrency::Fixed(n), rows).await;
        eprintln!("  fixed {n}: {:.1} s, {} ok", run.seconds, run.ok);
        if best.is_none_or(|(_, b)| run.seconds < b.seconds) {
            best = Some((n, run));
        }
    }
    (adaptive, best.unwrap())
}

/// Adaptive against the best of `fixed`, `rows` each, every row answered,
/// over `count` draws of the server `at` makes: the ratios, draw by draw.
pub(super) async fn ratios_over_draws(
    count: u64,
    rows: usize,
    fixed: &[usize],
    at: impl Fn(u64) -> Rc<Sim>,
) -> Vec<f64> {
    let mut ratios = Vec::new();
    for draw in draws(count) {
        let (adaptive, (_, best)) = against_fixed(|| at(draw), rows, fixed).await;
        assert_eq!(adaptive.ok, rows);
        ratios.push(adaptive.seconds / best.seconds);
    }
    ratios
}

/// `ratios_over_draws`, printed under `name` with their mean and the
/// worst; returns their mean.
pub(super) async fn mean_ratio_over_draws(
    name: &str,
    count: u64,
    rows: usize,
    fixed: &[usize],
    at: impl Fn(u64) -> Rc<Sim>,
) -> f64 {
    let ratios = ratios_over_draws(count, rows, fixed, at).await;
    let mean = mean(&ratios);
    let worst = largest(&ratios);
    eprintln!(
        "{name}, {rows} rows, by draw: adaptive / best fixed {ratios:.2?}, mean {mean:.2}, worst {worst:.2}"
    );
    mean
}

/// Draws `0..count` of a server's hashes, or only `WEIR_SIM_SEED`'s, to
/// look at one alone.
pub(super) fn draws(count: u64) -> impl Iterator<Item = u64> {
    let only = env_number("WEIR_SIM_SEED");
    (0..count).filter(move |draw| only.is_none_or(|o| o == *draw))
}

pub(super) fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

pub(super) fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// The largest of `values` (none below zero here), 0 for none.
pub(super) fn largest(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

/// The least of `values`, infinity for none.
pub(super) fn least(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

/// `values` to one decimal, comma-separated.
pub(super) fn listed(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The adaptive run's time against the best fixed one's, printed under
/// `name`.
pub(super) fn ratio_to_best_fixed(
    name: &str,
    adaptive: Finished,
    (n, best): (usize, Finished),
) -> f64 {
    let ratio = adaptive.seconds / best.seconds;
    eprintln!(
        "{name}: adaptive {:.1} s ({} ok, {} failed), best fixed ({n}) {:.1} s, ratio {ratio:.2}",
        adaptive.seconds, adaptive.ok, adaptive.failed, best.seconds
    );
    ratio
}

/// `ratio_to_best_fixed`, failing beyond 1.5 times.
pub(super) fn assert_near_best_fixed(name: &str, adaptive: Finished, best: (usize, Finished)) {
    let ratio = ratio_to_best_fixed(name, adaptive, best);
    assert!(
        ratio <= 1.5,
        "adaptive took {ratio:.2} times the best fixed"
    );
}
