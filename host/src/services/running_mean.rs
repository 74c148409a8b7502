//! A duration's running mean, updated and read without a lock from any
//! thread: what recent attempts took, or what a new instance costs.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The newest sample's weight in the mean: one in eight.
const RECENT_SHIFT: u32 = 3;

/// Nanoseconds, 0 before the first sample (every sample counts as at least
/// one). A race that loses an update only slows the mean down.
#[derive(Default)]
pub struct RunningMean(AtomicU64);

impl RunningMean {
    /// Moves the mean towards `sample`; the first sample is taken whole.
    pub fn record(&self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).max(1);
        let mean = self.0.load(Relaxed);
        let next = if mean == 0 {
            sample
        } else {
            (mean - (mean >> RECENT_SHIFT) + (sample >> RECENT_SHIFT)).max(1)
        };
        self.0.store(next, Relaxed);
    }

    /// The mean, once a sample was recorded.
    pub fn get(&self) -> Option<Duration> {
        match self.0.load(Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sample_is_taken_whole_and_later_ones_move_it_an_eighth() {
        let mean = RunningMean::default();
        assert_eq!(mean.get(), None);
        mean.record(Duration::from_millis(8));
        assert_eq!(mean.get(), Some(Duration::from_millis(8)));
        mean.record(Duration::ZERO);
        assert_eq!(mean.get(), Some(Duration::from_millis(7)));
    }
}
