//! Threads that run guest calls beside the main thread, so guests whose
//! own work is heavy (interpreters inside the component) use every core.
//!
//! The main thread keeps the run's I/O and the cheap guests' calls: a call
//! handed to another thread costs wake-ups across threads for the hand-over
//! and for each of its HTTP exchanges, which is more CPU than a cheap
//! guest's whole call (the built-in `llm` guest's takes about 100 µs). So a
//! node's calls move only while its guest time per call (`GuestCost`) is
//! above a threshold.

use super::guest_cost::GuestCost;
use crate::runtime::bindings::Outcome;
use crate::runtime::cpu_time::Timed;
use crate::runtime::{GuestInstance, Interrupted, RowScope};
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::task::JoinHandle;

/// A node whose calls take more CPU than this runs them on the guest
/// threads: above the `llm` guest's (about 100 µs), below the Python and
/// JavaScript examples' (about 450 µs).
const DEFAULT_THRESHOLD: Duration = Duration::from_micros(250);

struct GuestThreads {
    runtime: tokio::runtime::Runtime,
    threshold: Duration,
}

/// Set once by `start`, for the life of the process; never dropped, since a
/// runtime cannot be dropped from within another one's tasks.
static GUEST_THREADS: OnceLock<GuestThreads> = OnceLock::new();

/// Starts `threads` guest threads. `threshold` overrides the guest time per
/// call above which a node's calls move to them (zero moves every call).
pub fn start(threads: usize, threshold: Option<Duration>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("weir-guest")
        .enable_all()
        .build()?;
    let threads = GuestThreads {
        runtime,
        threshold: threshold.unwrap_or(DEFAULT_THRESHOLD),
    };
    if GUEST_THREADS.set(threads).is_err() {
        tracing::warn!("the guest threads were already started");
    }
    Ok(())
}

/// Runs `process` on `instance` over `input`, on a guest thread when the
/// node's guest is heavy enough, else on this task; records the time the
/// call held its thread in `cost`. Hands the instance back with the result.
pub async fn process(
    mut instance: GuestInstance,
    input: &[String],
    scopes: Vec<RowScope>,
    cost: &GuestCost,
) -> (GuestInstance, Result<Vec<Outcome>, Interrupted>) {
    let guest_threads = GUEST_THREADS
        .get()
        .filter(|threads| threads.threshold.is_zero() || cost.above(threads.threshold));
    let measured = cost.measure_next();
    let Some(guest_threads) = guest_threads else {
        // Boxed: a future is as large as its largest state, and wasmtime's
        // call would make the future of every row in flight cost kilobytes.
        let call = Box::pin(instance.process(input, scopes));
        let (processed, spent) = Timed::new(call, measured).await;
        record(cost, spent, false);
        return (instance, processed);
    };
    let input = input.to_vec();
    let task = guest_threads.runtime.spawn(async move {
        let call = Box::pin(instance.process(&input, scopes));
        let (processed, spent) = Timed::new(call, measured).await;
        (instance, processed, spent)
    });
    let (instance, processed, spent) = AbortOnDrop(task).await;
    record(cost, spent, true);
    (instance, processed)
}

fn record(cost: &GuestCost, spent: Option<Duration>, on_guest_thread: bool) {
    match spent {
        Some(spent) => cost.record(spent, on_guest_thread),
        None => cost.count(on_guest_thread),
    }
}

/// A call handed to a guest thread, cancelled if the row that waits on it
/// is dropped, as a call run on the row's own task would be.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(output) => output,
            // The guest threads are never shut down and the task only
            // aborted on drop: a join error is the call's panic.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        })
    }
}
