//! How much of a thread a node's guest takes per call: the CPU time spent
//! polling its `process` calls (the guest's own code and the host work it
//! does synchronously), averaged over recent calls. It decides whether the
//! node's calls are worth moving to the guest threads. CPU time rather than
//! wall time, so a thread the system preempts does not make a cheap guest
//! look heavy.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The recent calls' weight in the average: one in eight.
const RECENT_SHIFT: u32 = 3;

/// Calls measured before a node's guest may count as heavy: the first calls
/// of any guest are slow (cold caches, new connections, retries while the
/// executor finds an endpoint's capacity), and a cheap guest's calls handed
/// over would cost more than they gain.
const MEASURED_BEFORE_HEAVY: u64 = 8;

/// One call in this many is measured: reading a thread's CPU time is a
/// system call, which a cheap guest's calls should not pay each time.
const MEASURE_EVERY: u64 = 16;

/// A node's guest time per call, as a moving average. Calls run at once
/// update it without locking: an update lost to a race only slows the
/// average down.
#[derive(Default)]
pub struct GuestCost {
    nanos_per_call: AtomicU64,
    /// Calls run on the guest threads rather than the main one.
    on_guest_threads: AtomicU64,
    calls: AtomicU64,
    measured: AtomicU64,
    /// Whether the calls were last found heavy (`heavy`).
    heavy: AtomicBool,
}

impl GuestCost {
    /// Whether to measure the next call: the first, then one in `MEASURE_EVERY`.
    pub fn measure_next(&self) -> bool {
        self.calls
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(MEASURE_EVERY)
    }

    /// Counts a call not measured.
    pub fn count(&self, on_guest_thread: bool) {
        if on_guest_thread {
            self.on_guest_threads.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a call that held its thread for `spent`.
    pub fn record(&self, spent: Duration, on_guest_thread: bool) {
        self.count(on_guest_thread);
        let sample = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        // Rising from zero rather than from the first call, which is slow
        // for any guest (cold caches, the first connection): a node's calls
        // move only after several measured calls agree that they are heavy.
        let mean = self.nanos_per_call.load(Ordering::Relaxed);
        let next = mean - (mean >> RECENT_SHIFT) + (sample >> RECENT_SHIFT);
        self.nanos_per_call.store(next, Ordering::Relaxed);
        self.measured.fetch_add(1, Ordering::Relaxed);
    }

    pub fn calls_on_guest_threads(&self) -> u64 {
        self.on_guest_threads.load(Ordering::Relaxed)
    }

    pub fn per_call(&self) -> Duration {
        Duration::from_nanos(self.nanos_per_call.load(Ordering::Relaxed))
    }

    /// Whether the calls take more of a thread than `threshold`; a node
    /// with too few calls measured yet is taken as cheap.
    pub fn above(&self, threshold: Duration) -> bool {
        self.measured.load(Ordering::Relaxed) >= MEASURED_BEFORE_HEAVY
            && self.per_call() > threshold
    }

    /// Whether the calls are heavy: once above `threshold`, until they take
    /// less than half of it. The same call takes longer on a guest thread
    /// than on the main one (colder caches, a core it shares with the
    /// run's other threads): with one threshold, a guest near it would
    /// move back and forth and stay wherever it last crossed, for the
    /// Python example the main thread, on which it then ran alone.
    pub fn heavy(&self, threshold: Duration) -> bool {
        let was = self.heavy.load(Ordering::Relaxed);
        let now = if was {
            self.per_call() >= threshold / 2
        } else {
            self.above(threshold)
        };
        if now != was {
            self.heavy.store(now, Ordering::Relaxed);
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_moves_the_mean_an_eighth_of_the_way_from_zero() {
        let cost = GuestCost::default();
        cost.record(Duration::from_micros(800), false);
        assert_eq!(cost.per_call(), Duration::from_micros(100));
        cost.record(Duration::from_micros(800), true);
        assert_eq!(cost.per_call(), Duration::from_nanos(187_500));
        assert_eq!(cost.calls_on_guest_threads(), 1);
    }

    #[test]
    fn a_guest_is_heavy_only_once_enough_calls_are_measured_above_the_threshold() {
        let cost = GuestCost::default();
        assert!(!cost.above(Duration::ZERO), "nothing measured: cheap");
        for _ in 1..MEASURED_BEFORE_HEAVY {
            cost.record(Duration::from_millis(5), false);
            assert!(!cost.above(Duration::from_micros(250)));
        }
        cost.record(Duration::from_millis(5), false);
        assert!(cost.above(Duration::from_micros(250)));
        assert!(!cost.above(Duration::from_millis(5)));
    }

    #[test]
    fn one_slow_first_call_does_not_make_a_cheap_guest_heavy() {
        let cost = GuestCost::default();
        cost.record(Duration::from_millis(1), false);
        for _ in 0..20 {
            cost.record(Duration::from_micros(100), false);
            assert!(!cost.above(Duration::from_micros(250)));
        }
    }

    #[test]
    fn the_first_call_and_one_in_sixteen_after_it_are_measured() {
        let cost = GuestCost::default();
        let at: Vec<usize> = (0..33).filter(|_| cost.measure_next()).collect();
        assert_eq!(at, vec![0, 16, 32]);
    }

    #[test]
    fn a_heavy_guest_stays_heavy_until_below_half_the_threshold() {
        let threshold = Duration::from_micros(250);
        let cost = GuestCost::default();
        for _ in 0..40 {
            cost.record(Duration::from_micros(400), true);
        }
        assert!(cost.heavy(threshold));
        // Cheaper than the threshold, as the same calls are on the main
        // thread: still heavy.
        for _ in 0..40 {
            cost.record(Duration::from_micros(190), false);
        }
        assert!(!cost.above(threshold));
        assert!(cost.heavy(threshold), "within the band: stays");
        for _ in 0..40 {
            cost.record(Duration::from_micros(50), false);
        }
        assert!(!cost.heavy(threshold), "below half: cheap again");
        for _ in 0..40 {
            cost.record(Duration::from_micros(190), false);
        }
        assert!(
            !cost.heavy(threshold),
            "within the band from below: stays cheap"
        );
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
