//! Drains of a limit held by a queue, now and then, to see the round trip
//! without it.

use super::*;

/// The share of the limit a drain holds.
const DRAIN_SHARE: f64 = 0.5;

/// Windows in a row too few to judge a queue by, after which a limit held
/// by a queue whose requests were never sent alone is drained. After four,
/// one five-minute draw against a server serving one at a time held a
/// queue of 1.31 (`sim.rs`).
const UNJUDGED_WINDOWS_DRAINED: u32 = 8;

/// The limit held at `DRAIN_SHARE` of itself (or `DRAIN_AGAIN_SHARE`)
/// until the answers to a limit's worth of requests sent since are back,
/// as BBR's ProbeRTT holds its window down now and then. A window lowers
/// the no-load estimate only when its round trip is quicker, and a queue,
/// once held, keeps every window as slow as the estimate allows: a server
/// that became twice as quick kept a queue of four times its slots.
/// Drained, the queue empties and the answers show the round trip without
/// it.
pub(super) struct Drain {
    /// The limit to go back to.
    pub(super) restore: f64,
    pub(super) started: Instant,
    /// Answers to requests sent since it started.
    pub(super) answered: Tally,
}

impl Controller {
    /// Drains a limit held by a queue, when one is due.
    pub(super) fn drain_if_due(&mut self, now: Instant) {
        let due = self.next_drain.is_some_and(|at| now >= at);
        let quiet = self.pending.is_none() && !self.queue_cut_judging() && !self.slow_start;
        let share = match self.drain_again {
            true => DRAIN_AGAIN_SHARE,
            false => DRAIN_SHARE,
        };
        let drained = (self.limit * share).floor().max(1.0);
        let measured = self.base_rtt.is_some();
        if !(self.queue_bound && due && quiet && measured && self.drain.is_none())
            || drained >= self.limit
        {
            return;
        }
        self.drain = Some(Drain {
            restore: self.limit,
            started: now,
            answered: Tally::default(),
        });
        self.decided(Why::Draining, self.limit);
        self.limit = drained;
        // A queue cut still unjudged is older than the drain's measure, and
        // the drain's answers at half the load would judge it against a
        // round trip many round trips old: one made in slow start, undone
        // so, started slow start over from 152 slots against 32.
        self.queue_cut = None;
        self.changed(now);
    }

    /// Makes a drain due now when the limit is stuck: held by a queue at one
    /// or two slots, its windows hold one or two answers each, too few to
    /// judge a queue by (`unjudged`), and where the no-load estimate is the
    /// quickest of the first few answers of a server whose answers vary,
    /// every answer looks queued, so the limit does not grow either.
    /// Against a server serving 4 at once, answers from 50 to 150 ms and an
    /// estimate of 52 ms, a limit of 2.7 stood for five seconds of a run of
    /// 7.5 (56 % of capacity) until a window of three cut it to one. The
    /// drain sends requests alone, whose round trip is the no-load one
    /// (`learn_from_alone`); once some were, nothing here drains again.
    ///
    /// Below `MIN_QUEUE_JUDGED` slots, a window of that many answers now
    /// and then is judged but changes nothing, and counted as one that
    /// leaves the limit stuck: against a long tail, runs of one to five
    /// unjudged windows between such ones held a limit of 2.65 for eight
    /// seconds of a run of 2,000 rows (3.41 times a fixed 256; 2.27 now).
    /// `answered`: the window's answers; `changed`: it changed the limit.
    pub(super) fn drain_if_stuck(
        &mut self,
        sending_went_on: bool,
        answered: u32,
        changed: bool,
        now: Instant,
    ) {
        let few_slots = self.limit < f64::from(MIN_QUEUE_JUDGED);
        let unjudged = sending_went_on && (answered < MIN_QUEUE_JUDGED || (few_slots && !changed));
        let never_alone = self.by_band[0].ok < MIN_JUDGED_COLLAPSED;
        self.unjudged_windows = match never_alone && self.queue_bound && unjudged {
            true => self.unjudged_windows + 1,
            false => 0,
        };
        if self.unjudged_windows >= UNJUDGED_WINDOWS_DRAINED {
            self.next_drain = self.next_drain.map(|at| at.min(now));
        }
    }

    /// Once a limit's worth of requests sent during the drain are
    /// answered: their round trip lowers the no-load estimate, as far as
    /// two standard errors allow (`Tally::no_load_at_most`), and the limit
    /// goes back. Nothing else moves the estimate while a drain lasts: no
    /// window is judged, and what would raise it ends the drain first.
    pub(super) fn end_drain_once_answered(&mut self, now: Instant) {
        let (Some(drain), Some(before)) = (&self.drain, self.base_rtt) else {
            return;
        };
        // Four at the least, as for a collapsed cut: at a limit of one, each
        // answer of a drain is one round trip at half the throughput.
        let needed = MIN_JUDGED_COLLAPSED.max(self.limit as u32);
        let Some(lower) = drain
            .answered
            .no_load_at_most()
            .filter(|_| drain.answered.ok >= needed)
        else {
            return;
        };
        let from = self.limit;
        self.limit = self.limit.max(drain.restore);
        let lowered = self.lower_no_load(before.min(lower));
        if let Some(no_load) = self.base_rtt {
            self.decided(Why::Drained { no_load }, from);
        }
        self.drain = None;
        self.drain_again = lowered;
        if lowered {
            self.drain_every = DRAIN_EVERY_ROUND_TRIPS;
            self.next_drain = Some(now + self.window_len() * DRAIN_AGAIN_ROUND_TRIPS);
        } else {
            self.schedule_drain(now);
            self.drain_every = (self.drain_every * 2).min(DRAIN_EVERY_MOST_ROUND_TRIPS);
        }
        self.changed(now);
    }

    fn schedule_drain(&mut self, now: Instant) {
        let wait = (self.window_len() * self.drain_every).max(DRAIN_EVERY_AT_LEAST);
        self.next_drain = Some(now + wait);
    }

    /// A queue cut the limit: drains are due from now on.
    pub(super) fn held_by_queue(&mut self, now: Instant) {
        self.queue_bound = true;
        if self.next_drain.is_none() {
            self.schedule_drain(now);
        }
    }

    /// A drain under way ends without its measure: the limit goes back.
    pub(super) fn drop_drain(&mut self) {
        if let Some(drain) = self.drain.take() {
            self.limit = self.limit.max(drain.restore);
        }
    }
}
