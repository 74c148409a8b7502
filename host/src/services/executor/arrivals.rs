//! Whether new requests still come to an endpoint. Rows enter as others
//! finish, so in a run new requests arrive steadily; once they stop, the
//! last rows are out and what is in line is all that is left to send.

use std::time::Duration;
use tokio::time::Instant;

/// Weight of the newest gap in the mean gap between arrivals.
const GAP_WEIGHT: f64 = 0.05;
/// Arrivals have stopped after this many mean gaps without one. A false
/// alarm (a lull in a bursty stream) costs one slot until the next arrival.
const QUIET_GAPS: f64 = 8.0;
/// Nor after fewer round trips than this.
const QUIET_RTTS: f64 = 1.5;
/// Nor before this long: the host's own scheduling is all the variation.
const MIN_QUIET: Duration = Duration::from_millis(5);

#[derive(Default)]
pub struct Arrivals {
    last: Option<Instant>,
    mean_gap: f64,
}

impl Arrivals {
    pub fn arrived(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last).as_secs_f64();
            self.mean_gap += GAP_WEIGHT * (gap - self.mean_gap);
        }
        self.last = Some(now);
    }

    /// Whether arrivals have stopped at `now`. Rows whose requests are
    /// answered together come back together, so arrivals may come in bursts
    /// a round trip (`rtt`) apart: a quiet stretch must outlast one.
    pub fn stopped(&self, now: Instant, rtt: Option<Duration>) -> bool {
        self.last.is_some_and(|last| {
            let quiet = Duration::from_secs_f64(QUIET_GAPS * self.mean_gap)
                .max(rtt.map_or(Duration::ZERO, |rtt| rtt.mul_f64(QUIET_RTTS)))
                .max(MIN_QUIET);
            now.saturating_duration_since(last) > quiet
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_stream_has_not_stopped_until_it_goes_quiet() {
        let start = Instant::now();
        let mut arrivals = Arrivals::default();
        assert!(!arrivals.stopped(start, None), "nothing arrived yet");
        for i in 0..100 {
            arrivals.arrived(start + Duration::from_millis(3 * i));
        }
        let last = start + Duration::from_millis(297);
        let after = |ms| last + Duration::from_millis(ms);
        assert!(!arrivals.stopped(after(10), None));
        assert!(arrivals.stopped(after(30), None));
        let rtt = Some(Duration::from_millis(100));
        assert!(
            !arrivals.stopped(after(30), rtt),
            "bursts a round trip apart"
        );
        assert!(arrivals.stopped(after(160), rtt));
        arrivals.arrived(after(160));
        assert!(!arrivals.stopped(after(161), None));
    }
}
