//! The simulated clients: rows whose requests go through an endpoint's
//! slots to a simulated server, retried as the executor retries them.

use super::super::attempt_timeout::{Shape, SharedAttemptTimeout};
use super::super::controller::Signal;
use super::super::limiter::Limiter;
use super::super::to_come::RowsToCome;
use super::server::Sim;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// `workers` rows send requests for `run` of simulated time, retrying
/// capacity answers after a growing back-off, through one endpoint's slots.
pub(super) async fn drive(
    sim: &Rc<Sim>,
    pool: usize,
    workers: usize,
    run: Duration,
) -> Rc<Limiter> {
    drive_through(sim, Limiter::new(4, pool), workers, run).await
}

/// As `drive`, through `limiter` (one started from a learned limit).
pub(super) async fn drive_through(
    sim: &Rc<Sim>,
    limiter: Limiter,
    workers: usize,
    run: Duration,
) -> Rc<Limiter> {
    let limiter = Rc::new(limiter);
    let end = sim.started + run;
    let local = tokio::task::LocalSet::new();
    for _ in 0..workers {
        let (sim, limiter) = (Rc::clone(sim), Rc::clone(&limiter));
        local.spawn_local(async move {
            while Instant::now() < end {
                let mut retries = 0u32;
                loop {
                    let permit = limiter.acquire(None, retries > 0).await.unwrap();
                    let signal = sim.call().await;
                    permit.release(signal);
                    if signal == Signal::Success || Instant::now() >= end {
                        break;
                    }
                    sim.wait_out(&limiter, signal, retries).await;
                    retries += 1;
                }
            }
        });
    }
    local.await;
    trace("", &limiter);
    limiter
}

/// With `WEIR_SIM_TRACE` set, prints the limit's changes and the decisions
/// that made them, each line after `label`.
fn trace(label: &str, limiter: &Limiter) {
    if std::env::var_os("WEIR_SIM_TRACE").is_none() {
        return;
    }
    let snapshot = limiter.snapshot();
    eprintln!("{label}{:?}", snapshot.samples);
    for decision in &snapshot.decisions {
        eprintln!("{label}{decision}");
    }
}

/// `shards` endpoints (shards of one run, each with its own limiter and
/// `rows` rows) against one server; returns when each finished its rows, in
/// seconds from the start.
pub(super) async fn drive_shards(
    sim: &Rc<Sim>,
    shards: usize,
    rows: usize,
    stagger: Duration,
) -> Vec<f64> {
    let local = tokio::task::LocalSet::new();
    let finished = Rc::new(RefCell::new(vec![0.0; shards]));
    let mut limiters = Vec::new();
    for shard in 0..shards {
        let limiter = Rc::new(Limiter::new(4, 256));
        limiters.push(Rc::clone(&limiter));
        let start = sim.started + stagger * shard as u32;
        let left = Rc::new(RefCell::new(rows));
        let done = Rc::new(RefCell::new(0usize));
        for _ in 0..256 {
            let (sim, limiter, left, done, finished) = (
                Rc::clone(sim),
                Rc::clone(&limiter),
                Rc::clone(&left),
                Rc::clone(&done),
                Rc::clone(&finished),
            );
            local.spawn_local(async move {
                tokio::time::sleep_until(start).await;
                loop {
                    {
                        let mut left = left.borrow_mut();
                        if *left == 0 {
                            break;
                        }
                        *left -= 1;
                    }
                    let mut retries = 0u32;
                    loop {
                        let permit = limiter.acquire(None, retries > 0).await.unwrap();
                        let signal = sim.call().await;
                        permit.release(signal);
                        if signal == Signal::Success {
                            break;
                        }
                        sim.wait_out(&limiter, signal, retries).await;
                        retries += 1;
                    }
                    *done.borrow_mut() += 1;
                    if *done.borrow() == rows {
                        finished.borrow_mut()[shard] = (Instant::now() - sim.started).as_secs_f64();
                    }
                }
            });
        }
    }
    local.await;
    for (shard, limiter) in limiters.iter().enumerate() {
        trace(&format!("shard {shard}: "), limiter);
    }
    finished.borrow().clone()
}

/// How a simulated client sets its requests in flight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Concurrency {
    Adaptive,
    Fixed(usize),
}

/// How a run of rows went.
#[derive(Debug, Clone, Copy)]
pub(super) struct Finished {
    pub(super) seconds: f64,
    pub(super) ok: usize,
    pub(super) failed: usize,
}

/// Retries of failures other than capacity answers, as `max_retries`.
const MAX_RETRIES: u32 = 3;
/// The whole attempt's timeout, as `request_timeout_seconds`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// `rows` rows, up to 256 at once, through one client's slots. Each request
/// is retried as the executor retries it: capacity answers until answered,
/// after a growing back-off; other failures `MAX_RETRIES` times; an attempt
/// given up for hung (past the timeout learned from the answers) at once,
/// with twice the time.
pub(super) async fn run_rows(sim: &Rc<Sim>, concurrency: Concurrency, rows: usize) -> Finished {
    let limiter = match concurrency {
        Concurrency::Adaptive => Limiter::new(4, 256),
        Concurrency::Fixed(n) => Limiter::new(n, n),
    };
    run_rows_through(sim, limiter, concurrency, rows).await.0
}

/// As `run_rows`, through `limiter` (one started from a learned limit);
/// returns the limiter too, for what it learned.
pub(super) async fn run_rows_through(
    sim: &Rc<Sim>,
    limiter: Limiter,
    concurrency: Concurrency,
    rows: usize,
) -> (Finished, Rc<Limiter>) {
    run_rows_in_window(sim, limiter, concurrency, rows, rows).await
}

/// As `run_rows_through`, where, as in the engine's ordered output, a row
/// starts only within `window` rows of the oldest one not yet finished.
pub(super) async fn run_rows_in_window(
    sim: &Rc<Sim>,
    limiter: Limiter,
    concurrency: Concurrency,
    rows: usize,
    window: usize,
) -> (Finished, Rc<Limiter>) {
    // As the engine does: the limiter knows how many rows are still to
    // come, so it can tell the run's last stretch before the line empties.
    let to_come = Arc::new(RowsToCome::default());
    to_come.set_total(rows as u64);
    limiter.expect_rows(Arc::clone(&to_come));
    let limiter = Rc::new(limiter);
    let timeout = Rc::new(SharedAttemptTimeout::new(Some(Shape {
        factor: crate::config::model::defaults::attempt_timeout_factor(),
        floor: Duration::from_secs_f64(
            crate::config::model::defaults::min_attempt_timeout_seconds(),
        ),
    })));
    let order = Rc::new(OrderWindow::new(rows, window));
    let next = Rc::new(RefCell::new(0usize));
    let outcome = Rc::new(RefCell::new(Finished {
        seconds: 0.0,
        ok: 0,
        failed: 0,
    }));
    let local = tokio::task::LocalSet::new();
    for _ in 0..256.min(rows) {
        let (sim, limiter, timeout, order, next, outcome, to_come) = (
            Rc::clone(sim),
            Rc::clone(&limiter),
            Rc::clone(&timeout),
            Rc::clone(&order),
            Rc::clone(&next),
            Rc::clone(&outcome),
            Arc::clone(&to_come),
        );
        local.spawn_local(async move {
            loop {
                let row = {
                    let mut next = next.borrow_mut();
                    if *next == rows {
                        break;
                    }
                    *next += 1;
                    *next - 1
                };
                order.enter(row).await;
                to_come.entered();
                let ok = request(&sim, &limiter, &timeout, concurrency).await;
                order.finish(row);
                let mut outcome = outcome.borrow_mut();
                if ok {
                    outcome.ok += 1;
                } else {
                    outcome.failed += 1;
                }
                outcome.seconds = (Instant::now() - sim.started).as_secs_f64();
            }
        });
    }
    local.await;
    trace(&format!("{concurrency:?}: "), &limiter);
    let finished = *outcome.borrow();
    (finished, limiter)
}

/// The engine's reorder window: rows finish in any order, but one starts
/// only within `size` rows of the oldest not yet finished.
struct OrderWindow {
    size: usize,
    finished: RefCell<Vec<bool>>,
    oldest: std::cell::Cell<usize>,
    advanced: tokio::sync::Notify,
}

impl OrderWindow {
    fn new(rows: usize, size: usize) -> Self {
        Self {
            size,
            finished: RefCell::new(vec![false; rows]),
            oldest: std::cell::Cell::new(0),
            advanced: tokio::sync::Notify::new(),
        }
    }

    async fn enter(&self, row: usize) {
        loop {
            let advanced = self.advanced.notified();
            if row < self.oldest.get() + self.size {
                return;
            }
            advanced.await;
        }
    }

    fn finish(&self, row: usize) {
        let mut finished = self.finished.borrow_mut();
        finished[row] = true;
        let mut oldest = self.oldest.get();
        while finished.get(oldest) == Some(&true) {
            oldest += 1;
        }
        if oldest != self.oldest.get() {
            self.oldest.set(oldest);
            self.advanced.notify_waiters();
        }
    }
}

/// One row's request until it is answered or its retries are spent.
async fn request(
    sim: &Sim,
    limiter: &Limiter,
    timeout: &SharedAttemptTimeout,
    concurrency: Concurrency,
) -> bool {
    let (mut capacity_retries, mut retries, mut hung) = (0u32, 0u32, 0u32);
    loop {
        let permit = limiter
            .acquire(None, capacity_retries + retries + hung > 0)
            .await
            .unwrap();
        let learned = timeout.limit(REQUEST_TIMEOUT, hung);
        let sent = Instant::now();
        // As the executor does: a timeout learned while the attempt is out
        // applies to it too.
        let limit_passes = async {
            let limit = match learned {
                Some(limit) => limit,
                None => timeout.learned(REQUEST_TIMEOUT, hung).await,
            };
            tokio::time::sleep_until(sent + limit).await;
            limit
        };
        // `None`: given up at `limit`.
        let (answer, limit) = tokio::select! {
            // In this order, so that a run is the same every time.
            biased;
            signal = sim.call() => (Some(signal), REQUEST_TIMEOUT),
            limit = limit_passes => (None, limit),
            () = tokio::time::sleep(REQUEST_TIMEOUT) => (None, REQUEST_TIMEOUT),
        };
        // Given up: neither a success nor a refusal.
        let signal = answer.unwrap_or(Signal::Neutral);
        permit.release(match concurrency {
            Concurrency::Adaptive => signal,
            Concurrency::Fixed(_) => Signal::Neutral,
        });
        let backoff = match answer {
            Some(Signal::Success) => {
                timeout.answered(sent.elapsed());
                return true;
            }
            Some(Signal::Overload) => {
                sim.wait_out(limiter, Signal::Overload, capacity_retries)
                    .await;
                capacity_retries += 1;
                continue;
            }
            Some(Signal::Neutral) if retries < MAX_RETRIES => {
                retries += 1;
                Duration::from_millis(125) * (1 << retries)
            }
            Some(Signal::Neutral) => return false,
            None if limit < REQUEST_TIMEOUT => {
                hung += 1;
                Duration::ZERO
            }
            None if retries < MAX_RETRIES => {
                retries += 1;
                Duration::from_millis(125) * (1 << retries)
            }
            None => return false,
        };
        tokio::time::sleep(backoff).await;
    }
}
