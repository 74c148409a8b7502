//! How much of a thread a node's guest takes per call: the CPU time spent
//! polling its `process` calls (the guest's own code and the host work it
//! does synchronously), averaged over recent calls. It decides whether the
//! node's calls are worth moving to the guest threads. CPU time rather than
//! wall time, so a thread the system preempts does not make a cheap guest
//! look heavy. Moving them pays only when, besides, the guests take a good
//! share of a thread in all (`GuestLoad`).

use super::guest_load::{ALL_GUESTS, GuestLoad};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// What the run's guests must take of a thread in all before a heavy
/// node's calls are moved: below it, the main thread has room for them,
/// and each call moved costs two wake-ups across threads. A guest just
/// above the per-call threshold (the `llm` guest measures 150 µs per call
/// with cold caches) against a capped endpoint, 320 calls a second, takes
/// 5 % of a thread; moved, each of its calls took twice the CPU.
const BUSY_SHARE: f64 = 0.25;

/// Calls this long are moved whatever their rate: on the main thread, each
/// would hold up the answers of every request in flight for that long,
/// and with them the latency the adaptive limit reads.
const LONG_CALL: Duration = Duration::from_millis(2);

/// What the run's guests take of a thread in all when the main thread has
/// little room left for its own work: calls a quarter as heavy as the
/// threshold are moved too, since the hand-overs' cost then buys a core
/// that would otherwise stand idle. A Python guest answered from the
/// response cache takes about 100 µs per call and, run back to back, most
/// of a thread.
const SATURATED_SHARE: f64 = 0.5;

/// A node's guest time per call, as a moving average. Calls run at once
/// update it without locking: an update lost to a race only slows the
/// average down.
pub struct GuestCost {
    nanos_per_call: AtomicU64,
    /// Calls run on the guest threads rather than the main one.
    on_guest_threads: AtomicU64,
    calls: AtomicU64,
    measured: AtomicU64,
    /// Whether the calls were last found heavy (`heavy`).
    heavy: AtomicBool,
    /// The guest time of the whole run, which the node's calls add to.
    load: &'static GuestLoad,
}

impl Default for GuestCost {
    fn default() -> Self {
        Self::adding_to(&ALL_GUESTS)
    }
}

impl GuestCost {
    /// A node's cost whose calls count in `load`.
    pub fn adding_to(load: &'static GuestLoad) -> Self {
        Self {
            nanos_per_call: AtomicU64::new(0),
            on_guest_threads: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            measured: AtomicU64::new(0),
            heavy: AtomicBool::new(false),
            load,
        }
    }

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
        self.record_at(spent, on_guest_thread, Instant::now());
    }

    fn record_at(&self, spent: Duration, on_guest_thread: bool, now: Instant) {
        self.count(on_guest_thread);
        // One call in `MEASURE_EVERY` is measured: it stands for them all.
        let every = u32::try_from(MEASURE_EVERY).unwrap_or(u32::MAX);
        self.load.add(spent.saturating_mul(every), now);
        let sample = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        // Rising from zero rather than from the first call, which is slow
        // for any guest (cold caches, the first connection): a node's calls
        // move only after several measured calls agree that they are heavy.
        let mean = self.nanos_per_call.load(Ordering::Relaxed);
        let next = mean - (mean >> RECENT_SHIFT) + (sample >> RECENT_SHIFT);
        self.nanos_per_call.store(next, Ordering::Relaxed);
        self.measured.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the calls are worth moving to the guest threads: heavy, and
    /// either long enough to hold up the main thread's I/O or made while
    /// the run's guests take a good share of a thread; or, while the guests
    /// take half a thread or more, not cheap.
    pub fn worth_moving(&self, threshold: Duration) -> bool {
        self.worth_moving_at(threshold, Instant::now())
    }

    fn worth_moving_at(&self, threshold: Duration, now: Instant) -> bool {
        // Read only when it decides: a cheap guest's calls never need it.
        let share = || self.load.share_of_a_thread(now);
        (self.heavy(threshold) && (self.per_call() >= LONG_CALL || share() >= BUSY_SHARE))
            || (self.above(threshold / 4) && share() >= SATURATED_SHARE)
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

    /// `calls` calls at `per_call` each, spread evenly over `over`, the
    /// measured ones recorded at their time; returns when the last ran.
    fn calls_over(
        cost: &GuestCost,
        from: Instant,
        calls: u32,
        over: Duration,
        per_call: Duration,
    ) -> Instant {
        let mut at = from;
        for i in 0..calls {
            at = from + over * i / calls;
            call_at(cost, at, per_call);
        }
        at
    }

    /// One call of `per_call` at `at`, recorded if it is one to measure.
    fn call_at(cost: &GuestCost, at: Instant, per_call: Duration) {
        if cost.measure_next() {
            cost.record_at(per_call, false, at);
        } else {
            cost.count(false);
        }
    }

    /// A node's cost counted in a load of its own, apart from other tests'.
    fn alone() -> GuestCost {
        GuestCost::adding_to(Box::leak(Box::new(GuestLoad::new())))
    }

    #[test]
    fn heavy_calls_at_a_low_rate_stay_on_the_main_thread() {
        let threshold = Duration::from_micros(250);
        let cost = alone();
        // 320 calls a second at 400 µs: 13 % of a thread.
        let start = Instant::now();
        let now = calls_over(
            &cost,
            start,
            640,
            Duration::from_secs(2),
            Duration::from_micros(400),
        );
        assert!(cost.heavy(threshold));
        let share = cost.load.share_of_a_thread(now);
        assert!((0.1..0.16).contains(&share), "{share}");
        assert!(!cost.worth_moving_at(threshold, now));
        // The same calls at 2,000 a second take most of a thread.
        let now = calls_over(
            &cost,
            now,
            2_000,
            Duration::from_secs(1),
            Duration::from_micros(400),
        );
        assert!(cost.load.share_of_a_thread(now) > 0.6);
        assert!(cost.worth_moving_at(threshold, now));
    }

    #[test]
    fn long_calls_are_moved_whatever_their_rate() {
        let threshold = Duration::from_micros(250);
        let cost = alone();
        let now = calls_over(
            &cost,
            Instant::now(),
            320,
            Duration::from_secs(32),
            Duration::from_millis(5),
        );
        assert!(cost.load.share_of_a_thread(now) < BUSY_SHARE);
        assert!(cost.worth_moving_at(threshold, now));
    }

    #[test]
    fn a_burst_of_first_calls_counts_as_busy_before_a_window_ends() {
        let threshold = Duration::from_micros(250);
        let cost = alone();
        let now = calls_over(
            &cost,
            Instant::now(),
            200,
            Duration::from_millis(50),
            Duration::from_micros(400),
        );
        assert!(cost.worth_moving_at(threshold, now));
    }

    #[test]
    fn heavy_nodes_that_share_a_busy_thread_move_though_each_takes_little() {
        let threshold = Duration::from_micros(400);
        let load: &'static GuestLoad = Box::leak(Box::new(GuestLoad::new()));
        let nodes: Vec<GuestCost> = (0..5).map(|_| GuestCost::adding_to(load)).collect();
        // Each row goes through the five nodes, 500 µs each: 400 rows a
        // second take each node a fifth of a thread, and all of them the
        // whole thread.
        let start = Instant::now();
        let mut now = start;
        for row in 0..800u32 {
            now = start + Duration::from_secs(2) * row / 800;
            for node in &nodes {
                call_at(node, now, Duration::from_micros(500));
            }
        }
        let share = load.share_of_a_thread(now);
        assert!((0.9..1.1).contains(&share), "{share}");
        assert!(nodes.iter().all(|n| n.worth_moving_at(threshold, now)));
    }

    #[test]
    fn calls_below_the_threshold_move_once_the_guests_take_half_a_thread_or_more() {
        let threshold = Duration::from_micros(250);
        // `calls` calls of `micros` each within one second, on a node alone.
        let in_a_second = |calls: u32, micros: u64| {
            let cost = alone();
            let now = calls_over(
                &cost,
                Instant::now(),
                calls,
                Duration::from_secs(1),
                Duration::from_micros(micros),
            );
            let share = cost.load.share_of_a_thread(now);
            (
                share,
                cost.heavy(threshold),
                cost.worth_moving_at(threshold, now),
            )
        };
        // 100 µs calls, 9,000 a second: most of a thread, and moved.
        let (share, heavy, moved) = in_a_second(9_000, 100);
        assert!(share > 0.8 && !heavy && moved, "{share}");
        // The same calls at 3,000 a second leave the main thread room.
        let (share, _, moved) = in_a_second(3_000, 100);
        assert!(share < SATURATED_SHARE && !moved, "{share}");
        // Calls cheaper than a hand-over stay however many there are.
        let (share, _, moved) = in_a_second(30_000, 40);
        assert!(share > 1.0 && !moved, "{share}");
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
