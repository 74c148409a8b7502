//! How much of a thread a node's guest takes per call: the time spent
//! polling its `process` calls (the guest's own code and the host work it
//! does synchronously), averaged over the recent calls. It decides whether
//! the node's calls are worth moving to the guest threads.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The recent calls' weight in the average: one in eight.
const RECENT_SHIFT: u32 = 3;

/// A node's guest time per call, as a moving average. Calls run at once
/// update it without locking: an update lost to a race only slows the
/// average down.
#[derive(Default)]
pub struct GuestCost {
    nanos_per_call: AtomicU64,
    /// Calls run on the guest threads rather than the main one.
    on_guest_threads: AtomicU64,
}

impl GuestCost {
    /// Records a call that held its thread for `spent`.
    pub fn record(&self, spent: Duration, on_guest_thread: bool) {
        if on_guest_thread {
            self.on_guest_threads.fetch_add(1, Ordering::Relaxed);
        }
        let sample = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        let mean = self.nanos_per_call.load(Ordering::Relaxed);
        let next = if mean == 0 {
            sample
        } else {
            mean - (mean >> RECENT_SHIFT) + (sample >> RECENT_SHIFT)
        };
        self.nanos_per_call.store(next.max(1), Ordering::Relaxed);
    }

    pub fn calls_on_guest_threads(&self) -> u64 {
        self.on_guest_threads.load(Ordering::Relaxed)
    }

    pub fn per_call(&self) -> Duration {
        Duration::from_nanos(self.nanos_per_call.load(Ordering::Relaxed))
    }

    /// Whether the calls take more of a thread than `threshold`; a node
    /// with no call measured yet is taken as cheap.
    pub fn above(&self, threshold: Duration) -> bool {
        self.per_call() > threshold
    }
}

/// A future and the time spent polling it, which is the time it held the
/// thread: waits on endpoints and timers do not count.
pub struct Timed<F> {
    inner: F,
    spent: Duration,
}

impl<F> Timed<F> {
    pub fn new(inner: F) -> Self {
        Self {
            inner,
            spent: Duration::ZERO,
        }
    }
}

impl<F: Future + Unpin> Future for Timed<F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let polled = Pin::new(&mut self.inner).poll(cx);
        self.spent += started.elapsed();
        polled.map(|output| (output, self.spent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_call_sets_the_mean_and_later_ones_move_it_an_eighth_of_the_way() {
        let cost = GuestCost::default();
        assert!(!cost.above(Duration::ZERO), "nothing measured: cheap");
        cost.record(Duration::from_micros(800), false);
        assert_eq!(cost.per_call(), Duration::from_micros(800));
        cost.record(Duration::ZERO, true);
        assert_eq!(cost.per_call(), Duration::from_micros(700));
        assert!(cost.above(Duration::from_micros(699)));
        assert!(!cost.above(Duration::from_micros(700)));
        assert_eq!(cost.calls_on_guest_threads(), 1);
    }

    #[test]
    fn a_node_that_turns_cheap_falls_below_the_threshold() {
        let cost = GuestCost::default();
        cost.record(Duration::from_millis(1), false);
        for _ in 0..40 {
            cost.record(Duration::from_micros(10), false);
        }
        assert!(!cost.above(Duration::from_micros(50)));
    }
}
