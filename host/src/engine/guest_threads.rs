//! Threads that run guest calls beside the main thread, so guests whose
//! own work is heavy (interpreters inside the component) use every core.
//!
//! The main thread keeps the run's I/O, the cheap guests' calls and its
//! share of the heavy ones: a call handed to another thread costs wake-ups
//! across threads for the hand-over and its return, which is more CPU than
//! a cheap guest's whole call (the built-in `llm` guest's takes about
//! 100 µs). So a node's calls move only while its guest time per call
//! (`GuestCost`) is heavy and, in all, they take a good share of a thread.

use super::guest_cost::GuestCost;
use crate::runtime::bindings::Outcome;
use crate::runtime::cpu_time::Timed;
use crate::runtime::{GuestInstance, Interrupted, NodeRuntime, RowScope, Unavailable};
use crate::services::executor;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::task::JoinHandle;

/// A node whose calls take more CPU than this runs them on the guest
/// threads: above the `llm` guest's (about 100 µs), below the Python and
/// JavaScript examples' (about 450 µs).
const DEFAULT_THRESHOLD: Duration = Duration::from_micros(250);

struct GuestThreads {
    workers: Vec<Worker>,
    /// Heavy calls under way on the main thread. It takes its share of
    /// them: every call handed over costs a wake-up of the thread it goes
    /// to and another of the main thread when it ends, and on a machine
    /// with few cores those wake-ups cost more than the call.
    local: AtomicUsize,
    threshold: Duration,
}

/// One guest thread: a runtime of its own, so that a call, the
/// connections its requests use and the instance it runs on stay on one
/// core from start to end. A runtime shared by the threads moves a call to
/// whichever thread its answer wakes, and with it the instance's memory
/// from one core's cache to the other's.
struct Worker {
    handle: tokio::runtime::Handle,
    /// Calls handed to it and not ended: the next call goes to the
    /// thread with the fewest.
    calls: AtomicUsize,
}

/// The main thread's number among the threads that run guests (guest
/// threads are numbered from 1).
const MAIN_THREAD: usize = 0;

/// Set once by `start`, for the life of the process; never dropped, since a
/// runtime cannot be dropped from within another one's tasks.
static GUEST_THREADS: OnceLock<GuestThreads> = OnceLock::new();

/// Runs heavy guests' calls on `threads` threads, the main one among them.
/// `threshold` overrides the guest time per call above which a node's calls
/// count as heavy (zero hands every call to the guest threads).
pub fn start(threads: usize, threshold: Option<Duration>) -> std::io::Result<()> {
    let mut workers = Vec::with_capacity(threads);
    for index in 0..threads.saturating_sub(1) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        workers.push(Worker {
            handle: runtime.handle().clone(),
            calls: AtomicUsize::new(0),
        });
        std::thread::Builder::new()
            .name("weir-guest".into())
            .spawn(move || {
                executor::use_own_connections(index + 1);
                runtime.block_on(std::future::pending::<()>());
            })?;
    }
    let threads = GuestThreads {
        workers,
        local: AtomicUsize::new(0),
        threshold: threshold.unwrap_or(DEFAULT_THRESHOLD),
    };
    if GUEST_THREADS.set(threads).is_err() {
        tracing::warn!("the guest threads were already started");
    }
    Ok(())
}

impl GuestThreads {
    /// Where the next heavy call runs: the guest thread (and its number)
    /// with the fewest calls under way unless this (the main) thread has
    /// fewer still, the call then counted against it until its `Busy` is
    /// dropped. Every call goes to a guest thread when every call is to be
    /// handed over. A tie goes to the guest thread: calls that never wait
    /// (a node without endpoints, answers from the response cache) end
    /// within one poll, so the main thread has none under way whenever it
    /// places one, and an idle guest thread would otherwise never get any.
    fn place(&'static self) -> Result<(usize, &'static Worker), Busy> {
        let here = self.local.load(Ordering::Relaxed);
        let least_busy = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (i + 1, w, w.calls.load(Ordering::Relaxed)))
            .min_by_key(|&(_, _, calls)| calls);
        match least_busy {
            Some((thread, worker, calls)) if self.threshold.is_zero() || calls <= here => {
                Ok((thread, worker))
            }
            _ => Err(Busy::new(&self.local)),
        }
    }
}

/// A call counted against its thread until it ends.
struct Busy(&'static AtomicUsize);

impl Busy {
    fn new(calls: &'static AtomicUsize) -> Self {
        calls.fetch_add(1, Ordering::AcqRel);
        Self(calls)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A call on a guest thread, counted until what it holds is dropped: a
/// struct's fields drop in order, the future's before the count.
struct Counted<F> {
    future: Pin<Box<F>>,
    _busy: Busy,
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.future.as_mut().poll(cx)
    }
}

/// Runs `process` over `input` on one of the node's instances: when the
/// node's guest is heavy, on the least busy of the guest threads and this
/// one, else on this task. Records the time the call held its thread in
/// `cost`, and hands the instance back with the result. A new instance that
/// is slow to start (an interpreter loading its image) is placed the same
/// way, with its first call: started here, the first rows of a run would
/// start theirs one after another on this thread while the guest threads
/// waited.
pub async fn process(
    runtime: &Arc<NodeRuntime>,
    input: &[String],
    scopes: Vec<RowScope>,
    cost: &GuestCost,
) -> Result<(GuestInstance, Result<Vec<Outcome>, Interrupted>), Unavailable> {
    let guest_threads = GUEST_THREADS.get().filter(|threads| {
        threads.threshold.is_zero()
            || cost.worth_moving(threads.threshold)
            || (runtime.typical_start_cost() > threads.threshold && runtime.instances_idle() == 0)
    });
    let measured = cost.measure_next();
    let (thread, worker) = match guest_threads.map(GuestThreads::place) {
        Some(Ok(placed)) => placed,
        here => {
            // A heavy call run here stays counted against this thread
            // until it ends.
            let _busy = here.and_then(Result::err);
            let idle = runtime.idle_instance_for(MAIN_THREAD);
            let (instance, processed, spent) =
                run(runtime, idle, MAIN_THREAD, input, scopes, measured).await?;
            record(cost, spent, false);
            return Ok((instance, processed));
        }
    };
    let idle = runtime.idle_instance_for(thread);
    let runtime = Arc::clone(runtime);
    let input = input.to_vec();
    let task = worker.handle.spawn(Counted {
        future: Box::pin(
            async move { run(&runtime, idle, thread, &input, scopes, measured).await },
        ),
        _busy: Busy::new(&worker.calls),
    });
    let (instance, processed, spent) = AbortOnDrop(task).await?;
    record(cost, spent, true);
    Ok((instance, processed))
}

type Ran = (
    GuestInstance,
    Result<Vec<Outcome>, Interrupted>,
    Option<Duration>,
);

/// The call on `idle`, or on an instance checked out now; with the CPU it
/// took when `measured`.
async fn run(
    runtime: &NodeRuntime,
    idle: Option<GuestInstance>,
    thread: usize,
    input: &[String],
    scopes: Vec<RowScope>,
    measured: bool,
) -> Result<Ran, Unavailable> {
    let mut instance = match idle {
        Some(instance) => instance,
        // Boxed: a future is as large as its largest state, and wasmtime's
        // calls would make the future of every row in flight cost kilobytes.
        None => Box::pin(runtime.checkout()).await?,
    };
    instance.ran_on(thread);
    let call = Box::pin(instance.process(input, scopes));
    let (processed, spent) = Timed::new(call, measured).await;
    Ok((instance, processed, spent))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn one_guest_thread(runtime: &tokio::runtime::Runtime) -> &'static GuestThreads {
        Box::leak(Box::new(GuestThreads {
            workers: vec![Worker {
                handle: runtime.handle().clone(),
                calls: AtomicUsize::new(0),
            }],
            local: AtomicUsize::new(0),
            threshold: DEFAULT_THRESHOLD,
        }))
    }

    #[test]
    fn an_idle_guest_thread_takes_a_call_and_a_busy_one_leaves_the_next_here() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let threads = one_guest_thread(&runtime);
        let (thread, worker) = threads.place().ok().expect("an idle guest thread");
        assert_eq!(thread, 1);
        let handed = Busy::new(&worker.calls);
        let here = threads.place().err().expect("the guest thread is busy");
        assert_eq!(threads.local.load(Ordering::Relaxed), 1);
        // With one call under way on each, the guest thread takes the next.
        assert!(threads.place().is_ok());
        drop((here, handed));
        assert_eq!(threads.local.load(Ordering::Relaxed), 0);
        assert_eq!(threads.workers[0].calls.load(Ordering::Relaxed), 0);
    }
}
