//! A server that serves a fixed number of requests at once and queues the
//! rest first come, first served, as llama.cpp, vLLM and Ollama do, and keeps
//! the queue's length over time so that a caller can average it.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};

pub(crate) struct ServingQueue {
    slots: Semaphore,
    at_once: usize,
    started: Instant,
    log: Mutex<QueueLog>,
    /// Keep every change (see `Script::record`).
    record: bool,
}

#[derive(Default)]
struct QueueLog {
    waiting: usize,
    /// (time since start, requests waiting from then on), at every change.
    changes: Vec<(Duration, usize)>,
}

impl ServingQueue {
    pub(crate) fn new(at_once: usize, started: Instant, record: bool) -> Self {
        Self {
            slots: Semaphore::new(at_once),
            at_once,
            started,
            log: Mutex::new(QueueLog::default()),
            record,
        }
    }

    /// Waits for a slot (tokio's semaphore hands them out in arrival order)
    /// and returns it with the time spent waiting.
    pub(crate) async fn enter(&self) -> (SemaphorePermit<'_>, Duration) {
        if let Ok(slot) = self.slots.try_acquire() {
            return (slot, Duration::ZERO);
        }
        let waiting = Waiting::begin(self);
        let slot = self
            .slots
            .acquire()
            .await
            .expect("the queue is never closed");
        (slot, waiting.end())
    }

    /// Requests being served now.
    pub(crate) fn serving(&self) -> usize {
        self.at_once - self.slots.available_permits()
    }

    pub(crate) fn changes(&self) -> Vec<(Duration, usize)> {
        self.log.lock().unwrap().changes.clone()
    }

    /// Records one more or one fewer waiting at `at`; the same instant
    /// bounds the request's own wait, so the log's area is the sum of waits.
    fn change(&self, at: Instant, joined: bool) {
        let mut log = self.log.lock().unwrap();
        log.waiting = match joined {
            true => log.waiting + 1,
            false => log.waiting - 1,
        };
        let waiting = log.waiting;
        if self.record {
            log.changes.push((at - self.started, waiting));
        }
    }
}

/// A request in the queue; leaves it when dropped, so a client that hangs
/// up while waiting does not stay counted.
struct Waiting<'a> {
    queue: &'a ServingQueue,
    since: Instant,
    left: bool,
}

impl<'a> Waiting<'a> {
    fn begin(queue: &'a ServingQueue) -> Self {
        let since = Instant::now();
        queue.change(since, true);
        Self {
            queue,
            since,
            left: false,
        }
    }

    fn end(mut self) -> Duration {
        let now = Instant::now();
        self.queue.change(now, false);
        self.left = true;
        now - self.since
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.left {
            self.queue.change(Instant::now(), false);
        }
    }
}

/// The time-weighted mean of a step function given by its changes (each
/// value holds until the next change; zero before the first), over `from..to`.
pub fn time_weighted_mean(changes: &[(Duration, usize)], from: Duration, to: Duration) -> f64 {
    if to <= from {
        return 0.0;
    }
    let mut area = 0.0;
    let mut value = 0usize;
    let mut at = from;
    for &(when, next) in changes {
        if when > at {
            let until = when.min(to);
            area += value as f64 * (until - at).as_secs_f64();
            at = until;
        }
        if when >= to {
            break;
        }
        value = next;
    }
    if to > at {
        area += value as f64 * (to - at).as_secs_f64();
    }
    area / (to - from).as_secs_f64()
}
