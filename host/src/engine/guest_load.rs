//! How much of a thread the run's guests take in all: the CPU time their
//! calls spend, per second of the run, over every node. A node's calls are
//! worth moving to the guest threads only when this is large; judged node
//! by node, five heavy nodes that share a saturated main thread would each
//! take a fifth of it, and none would ever move.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The guest time is turned into a rate over windows this long.
const WINDOW: Duration = Duration::from_millis(250);

/// The guest time of every node in the process.
pub static ALL_GUESTS: GuestLoad = GuestLoad::new();

/// Guest CPU time spent, and its rate over the last whole window. Updated
/// without locking: an update lost to a race only blurs one window.
pub struct GuestLoad {
    /// Guest CPU time spent so far, in nanoseconds.
    spent: AtomicU64,
    /// When the current window began (nanoseconds after `base()`, 0 before
    /// the first call), and the time spent then.
    window_start: AtomicU64,
    spent_at_start: AtomicU64,
    /// Share of a thread over the last whole window, as `f64` bits; 0
    /// before the first window ends.
    share: AtomicU64,
}

/// The instant the windows' times are counted from.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn nanos_since_base(now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(base()).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

impl GuestLoad {
    pub const fn new() -> Self {
        Self {
            spent: AtomicU64::new(0),
            window_start: AtomicU64::new(0),
            spent_at_start: AtomicU64::new(0),
            share: AtomicU64::new(0),
        }
    }

    /// Adds `spent` of guest CPU time, ending the window when it is
    /// `WINDOW` old.
    pub fn add(&self, spent: Duration, now: Instant) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        let total = self.spent.fetch_add(nanos, Ordering::Relaxed) + nanos;
        let now = nanos_since_base(now);
        let start = self.window_start.load(Ordering::Relaxed);
        let elapsed = now.saturating_sub(start);
        if start != 0 && elapsed < WINDOW.as_nanos() as u64 {
            return;
        }
        if start != 0 {
            let spent_in = total.saturating_sub(self.spent_at_start.load(Ordering::Relaxed));
            let share = spent_in as f64 / elapsed as f64;
            self.share.store(share.to_bits(), Ordering::Relaxed);
        }
        self.window_start.store(now, Ordering::Relaxed);
        self.spent_at_start.store(total, Ordering::Relaxed);
    }

    /// How much of a thread the guests take (1.0: a whole thread): over the
    /// last whole window, or before one has ended, since the first call.
    pub fn share_of_a_thread(&self, now: Instant) -> f64 {
        let share = f64::from_bits(self.share.load(Ordering::Relaxed));
        if share > 0.0 {
            return share;
        }
        let start = self.window_start.load(Ordering::Relaxed);
        if start == 0 {
            return 0.0;
        }
        let elapsed = nanos_since_base(now)
            .saturating_sub(start)
            .max(Duration::from_millis(1).as_nanos() as u64);
        let spent_in = self
            .spent
            .load(Ordering::Relaxed)
            .saturating_sub(self.spent_at_start.load(Ordering::Relaxed));
        spent_in as f64 / elapsed as f64
    }
}

impl Default for GuestLoad {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_the_time_spent_over_the_last_whole_window() {
        let load = GuestLoad::new();
        let start = Instant::now();
        // 10 ms of guest time every 20 ms: half a thread.
        for i in 0..=30u32 {
            load.add(
                Duration::from_millis(10),
                start + Duration::from_millis(20) * i,
            );
        }
        let share = load.share_of_a_thread(start + Duration::from_millis(600));
        assert!((0.45..0.55).contains(&share), "{share}");
    }

    #[test]
    fn before_a_window_ends_the_share_counts_from_the_first_call() {
        let load = GuestLoad::new();
        assert_eq!(load.share_of_a_thread(Instant::now()), 0.0);
        let start = Instant::now();
        load.add(Duration::from_millis(1), start);
        load.add(Duration::from_millis(30), start + Duration::from_millis(40));
        let share = load.share_of_a_thread(start + Duration::from_millis(50));
        assert!((0.5..0.7).contains(&share), "{share}");
    }
}
