//! When the next request may leave, apart from the free slot it needs.
//!
//! In steady state answers clock the dispatches (a freed slot is refilled at
//! once) and nothing here holds a request. A pause (an exhausted rate-limit
//! window) stops every dispatch; the waiters it held would then leave
//! together, so for one round trip after it dispatches are spaced at
//! `rtt / limit`. A provider's rate windows hold requests on their own
//! (`window.rs`).

use std::time::Duration;
use tokio::time::Instant;

/// Below this spacing, pacing would cost more in timer wake-ups than it saves.
const MIN_PACING: Duration = Duration::from_millis(1);
/// The round trip assumed after a pause before one has been measured.
const RTT_UNKNOWN: Duration = Duration::from_secs(1);

pub struct Pacing {
    paused_until: Option<Instant>,
    /// Dispatches are spaced until then (one round trip after a pause).
    paced_until: Option<Instant>,
    next_dispatch: Instant,
}

impl Pacing {
    pub fn new(now: Instant) -> Self {
        Self {
            paused_until: None,
            paced_until: None,
            next_dispatch: now,
        }
    }

    /// Until when a pause holds every dispatch, if one does at `now`.
    pub fn paused(&self, now: Instant) -> Option<Instant> {
        self.paused_until.filter(|until| *until > now)
    }

    /// Until when spacing holds the next dispatch, if it does at `now`.
    pub fn spaced(&self, now: Instant) -> Option<Instant> {
        (self.next_dispatch > now).then_some(self.next_dispatch)
    }

    /// A request left at `now`: the next one keeps its distance.
    pub fn dispatched(&mut self, now: Instant, limit: usize, rtt: Option<Duration>) {
        let spacing = self.spacing(now, limit, rtt);
        if spacing >= MIN_PACING {
            self.next_dispatch = now + spacing;
        }
    }

    pub fn pause_until(&mut self, until: Instant, rtt: Option<Duration>) {
        if self.paused_until.is_none_or(|p| p < until) {
            self.paused_until = Some(until);
            self.paced_until = Some(until + rtt.unwrap_or(RTT_UNKNOWN));
        }
    }

    fn spacing(&self, now: Instant, limit: usize, rtt: Option<Duration>) -> Duration {
        match self.paced_until {
            Some(until) if now < until => rtt.unwrap_or(RTT_UNKNOWN) / limit.max(1) as u32,
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn after_a_pause_dispatches_are_spaced_for_one_round_trip() {
        let now = Instant::now();
        let rtt = Some(Duration::from_millis(40));
        let mut pacing = Pacing::new(now);
        pacing.pause_until(now + Duration::from_millis(20), rtt);
        assert_eq!(pacing.paused(now), Some(now + Duration::from_millis(20)));
        let after = now + Duration::from_millis(20);
        assert_eq!(pacing.paused(after), None);
        pacing.dispatched(after, 4, rtt);
        assert_eq!(
            pacing.spaced(after),
            Some(after + Duration::from_millis(10))
        );
        let later = after + Duration::from_millis(41);
        pacing.dispatched(later, 4, rtt);
        assert_eq!(
            pacing.spaced(later),
            None,
            "one round trip later, no pacing"
        );
    }
}
