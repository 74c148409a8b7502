//! Growth between decisions: slow start, the climb back towards what the
//! endpoint served before a cut, and probing beyond it.

use super::*;

/// Slots an answer adds in slow start while the limit is reached.
const SLOW_START_GAIN: f64 = 2.0;
/// Smallest growth per round trip (slots) after slow start. It is what every
/// client sharing an endpoint adds alike, while cuts take a share: the larger
/// it is, the sooner clients that started apart (shards of one run, the
/// first of which found the server to itself) come to equal limits. In
/// `sim.rs`, four shards of 500 rows started 40 ms apart on a server capped
/// at 32 stood at 12 and 4 slots each for seconds at 0.1 and took 1 / 0.90
/// the time of one run; at 0.3, 1 / 0.97, for about 1 % more refusals.
pub(super) const MIN_GROWTH: f64 = 0.3;
/// Against an endpoint that refuses some requests whatever the load, the
/// least growth is `MIN_GROWTH` per this many seconds of round trip rather
/// than per round trip (up to `TIMED_GROWTH_SHARE` of the limit), as CUBIC
/// grows by time: its cuts are many and mostly needless, and against
/// answers in 3 s each climb back took tens of seconds (ChaosLLM's
/// `stress_aimd` 3.54 and `realistic` 3.30 times the best fixed concurrency
/// in `sim.rs`; 2.36 and 2.15 so). An endpoint that refuses only for want
/// of room, or a queue, is probed as before: faster probing of its edge
/// cost capped servers with answers in 2 s up to an eighth more calls.
const GROWTH_ROUND_TRIP: f64 = 0.5;
const TIMED_GROWTH_SHARE: f64 = 1.0 / 8.0;

impl Controller {
    /// Grows the limit for one answer, every slot having been taken since
    /// its request was sent.
    pub(super) fn grow(&mut self, now: Instant) {
        // Far below what the endpoint was found to serve, the limit grows
        // back as in slow start, as TCP does below its threshold after a
        // timeout: the endpoint took that many at once before, and a burst
        // of refusals that cut the limit to a few slots against answers in
        // 3 s otherwise took the ten seconds between bursts to climb back.
        let recovering = self.limit < self.ceiling * (1.0 - MAX_CUT)
            && self
                .last_loss
                .is_some_and(|loss| loss <= self.usual_share().max(SLOW_START_NOISE));
        self.grew_back |= recovering;
        let per_round_trip = if self.slow_start || recovering {
            SLOW_START_GAIN * self.limit.floor()
        } else {
            let by_time = !self.queue_bound && self.usual_share() >= SLOW_START_NOISE;
            let round_trips = match by_time {
                true => self.srtt.unwrap_or(0.0) / GROWTH_ROUND_TRIP,
                false => 1.0,
            };
            growth_per_round_trip(self.limit, self.ceiling, round_trips)
        };
        // One answer of the `limit` a round trip brings back.
        let grown = self.limit + per_round_trip / self.limit.floor();
        self.limit = grown
            .min(self.max)
            .min(self.edge_bound(now).max(self.limit));
        self.note_edge_reached(now);
    }
}

/// Binary search towards the ceiling, then probing beyond it with a step that
/// doubles each round trip (the distance covered so far), never more than half
/// the limit at once, nor less than `MIN_GROWTH` for each of `round_trips`
/// (see `GROWTH_ROUND_TRIP`).
pub(super) fn growth_per_round_trip(limit: f64, ceiling: f64, round_trips: f64) -> f64 {
    let step = if limit < ceiling {
        (ceiling - limit) / 2.0
    } else {
        limit - ceiling
    };
    let least = (MIN_GROWTH * round_trips)
        .min(limit * TIMED_GROWTH_SHARE)
        .max(MIN_GROWTH);
    step.clamp(least, (limit / 2.0).max(least))
}
