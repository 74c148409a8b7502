//! A server that queues rather than refuses: cuts for its queue, and the
//! answers after them that say whether the queue was one.

use super::*;

/// A queue cut made in slow start that its answers cannot judge (see
/// `Controller::judge_since_queue_cut`) is cut again once this many times
/// the answers a judgement needs are back, where their round trip is at
/// least `UNDECIDED_RATIO` times the no-load one: a queue as long as what
/// the server serves at once, surely one. (On half again, the least a
/// window cuts for, `sim.rs` gave the same figures; after slow start too,
/// a cut of a few in a hundred came every few round trips in a queue's
/// steady state, each starting the windows' judgement over, and a server
/// of 8 slots that became twice as quick held a queue of 45 for a moment.)
const UNDECIDED_JUDGED: u32 = 2;
const UNDECIDED_RATIO: f64 = 2.0;

/// After a request ran out of time in the endpoint's queue, the limit is
/// what the endpoint answered in this share of the request's wait, so that
/// a request joining the queue is answered within about half its timeout:
/// at the whole of it, a server a little slower than in that wait times
/// the last in line out again.
const TIMED_OUT_SHARE: f64 = 0.5;

/// Queue cuts in a row, to be judged again by a no-load estimate learned
/// after them (`Controller::learn_from_alone`).
pub(super) struct QueueCuts {
    /// The longest round trip that set one off.
    pub(super) rtt: f64,
    /// The limit before the first.
    pub(super) before: f64,
    pub(super) in_slow_start: bool,
}

/// A cut for queueing, kept until the answers after it say whether the
/// round trip fell with the limit. Against a queue it falls in proportion;
/// answers that vary in length by nature (a model's completions) make the
/// mean round trip of a window half again its shortest whatever the load,
/// and taken for a queue, such a spread cut the limit window after window
/// down to one.
pub(super) struct QueueCut {
    pub(super) before: f64,
    /// The mean round trip and requests in flight of the answers that set
    /// it off.
    pub(super) point_before: (f64, f64),
    /// The limit it went to (cuts in a row: the last).
    pub(super) after: f64,
    /// Slow start was under way: it goes on if the cut proves useless.
    pub(super) in_slow_start: bool,
    /// Answers a second as it was made (`Controller::answer_rate`).
    pub(super) rate_before: Option<f64>,
}

impl QueueCut {
    /// A round trip's answers at the limit cut to: the round trips of a
    /// model's answers spread so that the mean of eight strays by a tenth.
    /// Four after a cut of more than half, which at one or two slots would
    /// otherwise take many round trips.
    fn answers_needed(&self) -> u32 {
        if self.after < self.before * (1.0 - MAX_CUT) {
            MIN_JUDGED_COLLAPSED
        } else {
            MIN_JUDGED.max(self.after as u32)
        }
    }

    /// Whether the answers since the cut, their mean round trip and requests
    /// in flight (`point_after`), say the round trip is not the load's.
    /// Against a queue it falls as the requests in flight fall (in
    /// proportion, on a log scale); where it fell by less than
    /// `QUEUE_ELASTICITY` of that, the answers' spread or a server that
    /// serves more at once, each a little slower, made it. `None` when the
    /// requests in flight fell too little to tell from noise.
    pub(super) fn useless(&self, point_after: (f64, f64)) -> Option<bool> {
        let (rtt_after, n_after) = point_after;
        if n_after > QUEUE_JUDGED_BELOW * self.point_before.1 || rtt_after <= 0.0 {
            return None;
        }
        Some(elasticity(point_after, self.point_before) < QUEUE_ELASTICITY)
    }

    /// Whether the answers since the cut, `rate_after` a second at
    /// `load_after` in flight, come nearer to what no queue gives (fewer,
    /// in proportion to the load) than to what a queue gives (as many as
    /// before); taken so where either rate is unknown.
    pub(super) fn cost_answers(&self, rate_after: Option<f64>, load_after: f64) -> bool {
        let (Some(before), Some(after)) = (self.rate_before, rate_after) else {
            return true;
        };
        let if_no_queue = (load_after / self.point_before.1).min(1.0);
        after < before * (1.0 + if_no_queue) / 2.0
    }
}

impl Controller {
    /// The quickest round trip of the latest `SLOW_START_DELAY_SAMPLE`
    /// answers, once there are as many, the earliest send among them (where
    /// a queue delays them all, the limit then is where it began), and the
    /// mean of the requests in flight at their sends.
    pub(super) fn quickest_latest(&self) -> Option<(f64, Instant, f64)> {
        if self.answers_seen < SLOW_START_DELAY_SAMPLE {
            return None;
        }
        let quickest = self
            .latest
            .iter()
            .map(|a| a.rtt)
            .fold(f64::INFINITY, f64::min);
        let first_sent = self.latest.iter().map(|a| a.sent_at).min()?;
        let load =
            self.latest.iter().map(|a| a.in_flight).sum::<f64>() / SLOW_START_DELAY_SAMPLE as f64;
        Some((quickest, first_sent, load))
    }

    /// Once enough answers to requests sent since the pending queue cut are
    /// back: if their round trip did not fall with the limit, they come
    /// fewer a second than before it, and requests sent alone were not far
    /// quicker (`queued_by_alone`), the limit goes back to where it
    /// was, their round trip is the no-load one, and slow start goes on if
    /// the cut ended it.
    pub(super) fn judge_queue_cut(&mut self, now: Instant) {
        let Some(cut) = &self.queue_cut else {
            return;
        };
        let after = self.since_queue_cut;
        let Some(point_after) = after.point().filter(|_| after.ok >= cut.answers_needed()) else {
            return;
        };
        let undecided_for_long =
            cut.in_slow_start && after.ok >= UNDECIDED_JUDGED * cut.answers_needed();
        match cut.useless(point_after) {
            // Too small to tell yet: cuts that follow add to it.
            None if undecided_for_long => self.judge_since_queue_cut(after, now),
            None => {}
            Some(false) => self.queue_cut = None,
            // A queue serves as many a second after a cut that leaves it
            // busy; answers slow by nature come fewer a second with fewer
            // in flight. Where they did not, the round trip's fall was
            // lost in the answers' noise: against llama.cpp serving one
            // at a time (and not in the order sent), slow start's cut from
            // 14 to 2 was found useless by four answers, and a queue of 12
            // stood for eleven seconds.
            Some(true) if !cut.cost_answers(self.rate_since_queue_cut(), point_after.1) => {}
            // Requests sent alone met no queue of the client's making, and
            // were far quicker: a server serving one at a time whose
            // answers vary in length had such a cut undone now and then,
            // its queue's round trip taken for the no-load one, and held a
            // queue of three or four for minutes. Answers within half again
            // theirs, or theirs grown old, undid cuts too, and raised the
            // estimate step by step to three times theirs over five minutes.
            Some(true) if self.queued_by_alone(&after, now) => self.queue_cut = None,
            Some(true) => {
                let (before, in_slow_start) = (cut.before, cut.in_slow_start);
                self.raise_no_load(point_after.0);
                self.undo_queue_cuts(before, in_slow_start, now);
            }
        }
    }

    /// Answers a second over the latest `SLOW_START_DELAY_SAMPLE`.
    fn answer_rate(&self) -> Option<f64> {
        if self.answers_seen < SLOW_START_DELAY_SAMPLE {
            return None;
        }
        let at = |a: &Answered| a.sent_at + Duration::from_secs_f64(a.rtt);
        let first = self.latest.iter().map(at).min()?;
        let last = self.latest.iter().map(at).max()?;
        let span = last.saturating_duration_since(first).as_secs_f64();
        (span > 0.0).then(|| (SLOW_START_DELAY_SAMPLE - 1) as f64 / span)
    }

    /// Answers a second to requests sent since the pending queue cut.
    fn rate_since_queue_cut(&self) -> Option<f64> {
        let (first, last) = self.since_queue_cut_span?;
        let span = last.saturating_duration_since(first).as_secs_f64();
        (span > 0.0).then(|| f64::from(self.since_queue_cut.ok - 1) / span)
    }

    /// A queue cut stays undecided while the requests in flight since it
    /// are too close to those of the answers that set it off. In slow
    /// start those answers were sent early, at a few in flight, and the
    /// smoothed load they are measured by lags: cut back from 16 to 3.3
    /// against answers at 3.8 in flight, the cut was never judged, and
    /// with the no-load estimate the quickest of the first answers of a
    /// long tail, every round trip after it looked queued, so the limit
    /// never grew: it held for ten seconds, until a drain sent requests
    /// alone. Where the answers since the cut (`after`), many of them,
    /// still show a queue, they cut again as a window would, and the
    /// requests in flight then fall far enough for the answers after to
    /// say whether the round trip followed. Only cuts made in slow start,
    /// whose load lags so: a window's cut after it is measured against the
    /// window's own answers, sent at what the limit held.
    fn judge_since_queue_cut(&mut self, after: Tally, now: Instant) {
        let Some(ratio) = self.queueing(&after).filter(|&r| r >= UNDECIDED_RATIO) else {
            return;
        };
        if self.cut_for_queue_shown_by(after, ratio, false, now) {
            self.changed(now);
        }
    }

    /// Cuts the limit for the queue the answers `t` show, `ratio` times the
    /// no-load round trip, and keeps the cut to be judged; unless their
    /// round trip rose far less than the load since a lower one
    /// (`not_a_queue`), which then becomes the no-load estimate. Returns
    /// whether it cut.
    pub(super) fn cut_for_queue_shown_by(
        &mut self,
        t: Tally,
        ratio: f64,
        in_slow_start: bool,
        now: Instant,
    ) -> bool {
        if let Some(lower) = self.not_a_queue(t, now) {
            self.raise_no_load(lower);
            return false;
        }
        let before = self.limit;
        self.cut_for_queue(ratio, now);
        let point = t.point();
        let rtt = point.map_or(0.0, |(rtt, _)| rtt);
        self.queue_cut_made(before, point, rtt, in_slow_start);
        true
    }

    /// Queue cuts from `before` were no queue's: the limit goes back, and
    /// slow start goes on if they ended it (`in_slow_start`), unless a cut
    /// for losses waits to be judged.
    pub(super) fn undo_queue_cuts(&mut self, before: f64, in_slow_start: bool, now: Instant) {
        let from = self.limit;
        self.queue_cut = None;
        self.queue_cuts = None;
        // The round trip is not the load's, so not drained either: a
        // drain's answers at a lower load would lower the estimate again.
        self.queue_bound = false;
        self.drop_drain();
        self.limit = self.limit.max(before);
        self.ceiling = self.ceiling.max(before);
        self.slow_start |= in_slow_start && self.pending.is_none();
        if let Some(no_load) = self.base_rtt {
            self.decided(Why::NotAQueue { no_load }, from);
        }
        self.changed(now);
    }

    /// Keeps a queue cut from `before` to the limit now, to be judged; cuts
    /// in a row are judged together, against the first.
    /// `point_before`: the mean round trip and requests in flight of the
    /// answers that set it off, if there were enough to judge it by; `rtt`:
    /// the round trip that set it off, which a no-load estimate learned
    /// later judges again (`note_queue_cuts`).
    fn queue_cut_made(
        &mut self,
        before: f64,
        point_before: Option<(f64, f64)>,
        rtt: f64,
        in_slow_start: bool,
    ) {
        self.note_queue_cuts(rtt, before, in_slow_start);
        match (&mut self.queue_cut, point_before) {
            (Some(cut), _) if before <= cut.before => cut.after = self.limit,
            // None pending, or the limit grew past it since, which is then
            // no longer what is judged.
            (_, Some(point_before)) => {
                self.queue_cut = Some(QueueCut {
                    before,
                    point_before,
                    after: self.limit,
                    in_slow_start,
                    rate_before: self.answer_rate(),
                });
            }
            (_, None) => self.queue_cut = None,
        }
        self.since_queue_cut = Tally::default();
        self.since_queue_cut_span = None;
    }

    /// Whether the pending queue cut still waits for the answers that judge
    /// it. No window cuts for a queue meanwhile: a cut each window started
    /// its judgement over each time, and a limit of one or two that the
    /// answers' spread had set off held for seconds.
    pub(super) fn queue_cut_judging(&self) -> bool {
        self.queue_cut
            .as_ref()
            .is_some_and(|cut| self.since_queue_cut.ok < cut.answers_needed())
    }

    /// Slow start grew the limit for a round trip after the queue began:
    /// the first answers to meet the queue were sent at a smaller limit,
    /// and slow start has tripled it since. Judged by window, that
    /// overshoot (28 requests against a server serving 8 at once) stood for
    /// seconds before the first window after it closed. So once the
    /// smoothed round trip confirms the queue, the limit goes back to what
    /// it was when the first delayed request was sent, shrunk as a queue
    /// cut shrinks it (`target`).
    pub(super) fn back_to_queue_start(&mut self, now: Instant, target: f64, delayed: f64) {
        if target < self.limit {
            // The answers of the window under way, or where it holds too
            // few to say anything, those the smoothed round trip weighs
            // most: a cut left unjudged held a limit of two for seconds.
            let window = self.window.tally;
            let point = match window.ok >= MIN_JUDGED_COLLAPSED {
                true => window.point(),
                false => self.recent_point,
            };
            // Too few answers in the window say nothing of their spread,
            // and the cut is made.
            if let Some(lower) = self.not_a_queue(window, now) {
                self.raise_no_load(lower);
                self.slow_start = self.pending.is_none();
                return;
            }
            let before = self.limit;
            self.limit = target;
            self.ceiling = target;
            if let Some(no_load) = self.base_rtt {
                let why = Why::Queued {
                    rtt: delayed,
                    no_load,
                };
                self.decided(why, before);
            }
            self.held_by_queue(now);
            self.queue_cut_made(before, point, delayed, true);
            self.changed(now);
        }
    }

    /// Keeps what a queue cut from `before`, set off by answers of round
    /// trip `rtt`, needs to be judged again (`learn_from_alone`).
    pub(super) fn note_queue_cuts(&mut self, rtt: f64, before: f64, in_slow_start: bool) {
        let cuts = self.queue_cuts.get_or_insert(QueueCuts {
            rtt,
            before,
            in_slow_start,
        });
        cuts.rtt = cuts.rtt.max(rtt);
        cuts.before = cuts.before.max(before);
    }

    /// Shrinks the limit so the round trip comes back to `TOLERANCE` times
    /// the no-load one: with the server's own concurrency `c`, a limit `l`
    /// beyond it gives a ratio of `l / c`, so the new limit is `1.5 c`.
    fn cut_for_queue(&mut self, ratio: f64, now: Instant) {
        let from = self.limit;
        self.slow_start = false;
        self.held_by_queue(now);
        self.limit = (self.limit * (TOLERANCE / ratio).max(MAX_QUEUE_CUT)).max(1.0);
        self.floor = self.floor.min((self.limit * FLOOR_SHARE).floor().max(1.0));
        if let Some(no_load) = self.base_rtt {
            let why = Why::Queued {
                rtt: ratio * no_load,
                no_load,
            };
            self.decided(why, from);
        }
        // Growth probes slowly from here rather than heading back.
        self.ceiling = self.limit;
    }

    /// Whether the timeouts since the last change are no more than the share
    /// the endpoint loses at any load explains (`lost_whatever_the_load`): then
    /// the one at hand is not the queue's, however it looked. Answers that take
    /// 0.75 to 2.25 s whatever the load, against a 2 s timeout, time a sixth of
    /// the requests out at any limit, and with a few in flight a timed-out
    /// request is often the last of those sent about then to be answered, as a
    /// queue's would be: each such timeout set the limit to the one or two
    /// answers that came during its wait, and 200 rows at `pool_size: 16` took
    /// 26 to 115 s against 29 at a fixed 16.
    fn times_out_whatever_the_load(&self) -> bool {
        let usual = self.lost_whatever_the_load();
        usual > 0.0 && !self.more_lost_than(self.since_change.lost.max(1), usual)
    }

    /// A request sent at `sent_at` ran out of time in the endpoint's queue,
    /// which answered `served` requests meanwhile (`QueueWait`). More in
    /// flight than the endpoint answers in a timeout wait past it, and
    /// each such wait costs a request sent again, whatever the round trip
    /// says. The round trip says it late: against a server serving one at
    /// a time with answers in 4 s and a 10 s timeout, the no-load estimate
    /// waited for answers that came one every 4 s, and the limit fell from
    /// 8 to 2 over 30 s, most requests of the first minute timing out in
    /// the queue. So the limit goes to what the endpoint answered in
    /// `TIMED_OUT_SHARE` of the wait, at once, as a queue cut does: held by
    /// the queue and probed slowly from there. Returns the decision, if
    /// the limit was above it.
    ///
    /// Only a request sent since the last such cut: the others of the
    /// queue that set it off time out in turn, each having seen fewer
    /// answers (a server that gives up a request only when its client hangs
    /// up spent part of the wait on those that timed out before), and
    /// against a server serving two at once each cut the limit again, to
    /// one. Other changes since its send do not hold it back: a queue cut
    /// of a slot, made as slow start met the queue, kept the requests in
    /// it from cutting until more had timed out.
    pub fn timed_out_in_queue(
        &mut self,
        now: Instant,
        sent_at: Instant,
        served: u32,
    ) -> Option<Decision> {
        let before = self.limit;
        let target = (f64::from(served) * TIMED_OUT_SHARE).floor().max(1.0);
        // The queue is real, whatever the answers since a cut still being
        // judged say, and the cut stands: a server that goes on serving
        // requests whose clients hung up answers fewer a second after a cut
        // than before it, as if there were no queue. Against
        // llama-cpp-python's server with a 1 s timeout, slow start's cut
        // from 14 to 2 was undone so two runs in six, and the limit grew to
        // 26-28.
        self.pending = None;
        self.queue_cut = None;
        self.queue_cuts = None;
        let cut_since_sent = self.timed_out_cut.is_some_and(|at| sent_at < at);
        if cut_since_sent || target >= before.floor() || self.times_out_whatever_the_load() {
            return None;
        }
        if let Some(drain) = self.drain.as_mut() {
            drain.restore = drain.restore.min(target);
        }
        self.limit = target;
        self.ceiling = target;
        self.floor = self.floor.min(target);
        self.slow_start = false;
        self.queue_met = None;
        self.timed_out_cut = Some(now);
        self.held_by_queue(now);
        let why = Why::TimedOutInQueue {
            served,
            waited: now.saturating_duration_since(sent_at).as_secs_f64(),
        };
        self.decided(why, before);
        self.changed(now);
        self.note_change(before, now)
    }
}
