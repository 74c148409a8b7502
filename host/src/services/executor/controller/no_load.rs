//! The round trip without a queue (the no-load estimate), and the round
//! trips at lower loads, kept by band of requests in flight, that tell a
//! queue from answers slow by nature.

use super::*;

/// A band holding this many answers halves them, so that it follows the
/// endpoint as it changes.
const BAND_MEMORY: u32 = 256;

/// A band of requests in flight answered within this many round trips
/// still says what a lower load's round trip is.
const BAND_FRESH_ROUND_TRIPS: u32 = 16;

/// Nor is a lower load compared against below this share of the load now:
/// between a load below a queue's start and one above it, the round trip
/// rises less than in proportion.
const LOWER_LOAD_AT_LEAST: f64 = 1.0 / 3.0;

impl Controller {
    /// A round trip found not to be a queue's is the no-load one from now
    /// on, where it is longer than the estimate so far.
    pub(super) fn raise_no_load(&mut self, rtt: f64) {
        self.base_rtt = Some(self.base_rtt.map_or(rtt, |base| base.max(rtt)));
    }

    /// The shortest round trip of the first answers, sent before any load
    /// was built (as many as the initial limit), is the first no-load
    /// estimate. A run started from a learned limit sends that many at
    /// once, and the first of them back are the quickest of many: against
    /// a long tail, the quickest of the first 24 answers was 7 ms where
    /// the quickest of four was 32 ms and their median 73, and every
    /// window after looked queued (a second run 3.5 times a fixed 32 where
    /// the first had taken 1.2). There the estimate is the same share of
    /// the first answers, the `seed_rank`-th quickest of `seed_rank` times
    /// as many.
    pub(super) fn seed_base(&mut self, rtt: f64) {
        if self.base_rtt.is_some() {
            return;
        }
        self.seed.push(rtt);
        if (self.seed.len() as f64) < self.initial * self.seed_rank as f64 {
            return;
        }
        self.seed.sort_by(f64::total_cmp);
        self.base_rtt = Some(self.seed[self.seed_rank - 1]);
        self.seed = Vec::new();
    }

    /// Counts an answer in the band of the requests in flight at its send.
    pub(super) fn count_in_band(
        &mut self,
        now: Instant,
        sent_at: Instant,
        in_flight: usize,
        signal: Signal,
    ) {
        let band = band_of(in_flight as f64);
        let outcomes = &mut self.outcomes_by_band[band];
        outcomes.count(signal);
        if outcomes.ok + outcomes.lost >= BAND_MEMORY {
            outcomes.halve();
        }
        if signal != Signal::Success {
            return;
        }
        let srtt = self.srtt.unwrap_or(f64::INFINITY);
        let tally = &mut self.by_band[band];
        let rtt = now.saturating_duration_since(sent_at).as_secs_f64();
        tally.answered(rtt, in_flight, srtt);
        self.band_answered[band] = Some(now);
        if tally.ok >= BAND_MEMORY {
            tally.halve();
        }
        if band == 0 {
            self.learn_from_alone(now);
        }
    }

    /// Requests sent with no other of this client's on the wire met no
    /// queue of its making: once `MIN_JUDGED_COLLAPSED` of them are back,
    /// their mean round trip is the no-load one where it is longer than the
    /// estimate. The estimate starts as the quickest of the first answers,
    /// which for a model's answers with a long tail is a fraction of their
    /// mean (0.1 s against 0.5 s in `sim.rs`), and a limit cut to one or two
    /// saw every window as a queue's for seconds.
    ///
    /// Where the round trips that set off the queue cuts since the last cut
    /// for losses are no queue's by that estimate, the cuts are undone, and
    /// slow start goes on if the first ended it.
    fn learn_from_alone(&mut self, now: Instant) {
        let alone = self.by_band[0];
        let Some((rtt, _)) = alone.point().filter(|_| alone.ok >= MIN_JUDGED_COLLAPSED) else {
            return;
        };
        if !self.base_rtt.is_some_and(|base| rtt > base) {
            return;
        }
        self.raise_no_load(rtt);
        if self.pending.is_none()
            && let Some(cuts) = self.queue_cuts.take_if(|cuts| !queued(cuts.rtt, rtt))
        {
            self.queue_met = None;
            self.undo_queue_cuts(cuts.before, cuts.in_slow_start, now);
        }
    }

    /// Whether the requests sent alone (at least `MIN_JUDGED_COLLAPSED` of
    /// them), which met no queue of the client's making, say the answers
    /// `t` were a queue's: surely slower, the mean of `t` counted low and
    /// theirs high, each by its standard errors (`Tally::rtt_at_least`,
    /// `Tally::no_load_at_most`), however old their answers are; or, where
    /// they were answered within `BAND_FRESH_ROUND_TRIPS`, slower by a
    /// queue's `TOLERANCE` whatever the spread of `t`. Old answers count
    /// only when sure: a server become slower since shows it where the
    /// limit falls to one again.
    pub(super) fn queued_by_alone(&self, t: &Tally, now: Instant) -> bool {
        let alone = self.by_band[0];
        let (Some(alone_at_most), Some((rtt, _))) = (alone.no_load_at_most(), t.point()) else {
            return false;
        };
        let surely_slower = t.rtt_at_least().is_some_and(|least| least > alone_at_most);
        let queued_lately = self.answered_lately(0, now) && queued(rtt, alone_at_most);
        alone.ok >= MIN_JUDGED_COLLAPSED && (surely_slower || queued_lately)
    }

    /// Whether the band of requests in flight `band` was answered within
    /// `BAND_FRESH_ROUND_TRIPS`: older answers say nothing of the server now.
    fn answered_lately(&self, band: usize, now: Instant) -> bool {
        let fresh_for = BAND_FRESH_ROUND_TRIPS * self.window_len();
        self.band_answered[band]
            .is_some_and(|answered| now.saturating_duration_since(answered) < fresh_for)
    }

    /// The answers at the nearest lower load lately answered, at least
    /// `answers` of them: the band of requests in flight below `in_flight`
    /// whose mean is at most `QUEUE_JUDGED_BELOW` of it and at least
    /// `LOWER_LOAD_AT_LEAST`, answered within `BAND_FRESH_ROUND_TRIPS`.
    fn lower_load(&self, in_flight: f64, answers: u32, now: Instant) -> Option<Tally> {
        let lower = (0..band_of(in_flight))
            .rev()
            .filter(|&band| self.answered_lately(band, now))
            .map(|band| self.by_band[band])
            .filter(|tally| tally.ok >= answers)
            .find(|tally| {
                tally
                    .point()
                    .is_some_and(|p| p.1 <= QUEUE_JUDGED_BELOW * in_flight)
            })?;
        let (rtt, n) = lower.point()?;
        (n >= LOWER_LOAD_AT_LEAST * in_flight && rtt > 0.0).then_some(lower)
    }

    /// Whether a round trip of `rtt`, sent with `in_flight` requests on the
    /// wire, lies within the spread of the answers at a lower load (their
    /// mean and two standard deviations): slow by nature, as a long
    /// completion is, rather than delayed by a queue. Slow start ended at
    /// the first answer past half again the shortest of the first four,
    /// which answers that vary in length pass at any load.
    pub(super) fn within_lower_spread(&self, rtt: f64, in_flight: f64, now: Instant) -> bool {
        self.lower_load(in_flight, MIN_JUDGED_COLLAPSED, now)
            .and_then(|lower| lower.rtt_spread())
            .is_some_and(|(mean, sd)| rtt <= mean + 2.0 * sd)
    }

    /// Whether the answers `at`, whose round trip looks queued, rose with
    /// the load less than a queue's would (`QUEUE_ELASTICITY`) since a lower
    /// load lately answered (`lower_load`); if so, the mean round trip of
    /// both, the no-load estimate from then on (the lesser of the two, from
    /// a few answers of a long tail each, sat well below the mean of either,
    /// and windows at the same load looked queued after). A server that
    /// batches slows every answer a little as it takes more, and answers
    /// that vary in length spread the round trip whatever the load: cut as
    /// for a queue, a batching server was held near half its batch, each
    /// cut too small for its answers to judge. The rise is counted
    /// generously, two standard errors of either mean above what they show:
    /// a queue whose answers vary in length, its rise taken at face value,
    /// was often found no queue, and held twice the queue it otherwise did.
    pub(super) fn not_a_queue(&self, at: Tally, now: Instant) -> Option<f64> {
        let point = at.point()?;
        let lower = self.lower_load(point.1, MIN_JUDGED_COLLAPSED, now)?;
        let low = lower.point()?;
        let spread = 2.0 * at.log_rtt_error().hypot(lower.log_rtt_error());
        let generous = elasticity(low, point) + spread / (point.1 / low.1).ln();
        let pooled = (low.0 * f64::from(lower.ok) + point.0 * f64::from(at.ok))
            / f64::from(lower.ok + at.ok);
        (generous < QUEUE_ELASTICITY).then_some(pooled)
    }

    /// The round trip's ratio to the no-load one, when the window's answers
    /// `t` say the server queues. Two windows in a row well below the
    /// estimate lower it (`quicker_in_a_row`).
    ///
    /// A window above it never raises it: the limit holds a queueing
    /// server's round trip at up to `TOLERANCE` times the estimate, and
    /// such windows, each moving it a little towards their mean, raised it
    /// without end: against a server taking 8 at once, the queue held was 6
    /// over 30 s and 20 over ten minutes. A longer round trip that is the
    /// answers' own is learned where it shows as such: a queue cut the
    /// round trip did not follow (`judge_queue_cut`), or a rise far less
    /// than the load's since a lower load (`not_a_queue`).
    pub(super) fn queueing(&mut self, t: &Tally) -> Option<f64> {
        let (rtt, _) = t.point()?;
        // A window can close before the first answers are all back: a
        // server that serves one at a time answers the first four at one,
        // two, three and four times its service time. Their mean, taken for
        // the no-load round trip, let a queue of ten stand for seconds
        // against llama.cpp; until the seed is taken, a window has nothing
        // to be measured against.
        let before = self.base_rtt?;
        let base = self.quicker_in_a_row(t, before);
        self.lower_no_load(base);
        // And only where the answers are surely past the no-load round trip
        // at all, below their mean by Student's t: one or two answers of a
        // model's long tail pass half again it by nature, and against
        // answers of 0.5 s on average such windows cut the limit to one or
        // two for seconds. Two answers, each held to twice the smoothed
        // round trip, can be alike whatever their spread: a window needs
        // three.
        let surely_slower =
            t.ok >= MIN_QUEUE_JUDGED && t.rtt_at_least().is_some_and(|least| least > base);
        (queued(rtt, base) && surely_slower).then(|| rtt / base.max(f64::MIN_POSITIVE))
    }

    /// How low the no-load estimate `before` goes for the window `t`: to
    /// where two windows in a row put it, each surely quicker
    /// (`Tally::no_load_at_most`), the higher of the two. One window is not
    /// enough: of the many a run judges, some are that quick by chance, and
    /// each lowered the estimate a little further. Against a server that
    /// takes 32 at once and answers in 0.1 s on average with a long tail,
    /// the estimate sank from 0.09 s to 0.045 s window by window, windows of
    /// ordinary answers then looked queued, and the limit was cut from 32 to
    /// four: 3,000 rows took up to 1.5 times as long as at a fixed 32, 1.19
    /// times on average over twenty draws.
    ///
    /// Where the later window is quicker by more than `DRAIN_LOWERED`, the
    /// server became quicker, and the answers kept by band are forgotten
    /// though the estimate, the higher of the two, falls by less: against
    /// a server serving 8 at once that became twice as quick, those answers
    /// made a queue's round trip look to have risen less than the load, and
    /// the queue reached 46.
    fn quicker_in_a_row(&mut self, t: &Tally, before: f64) -> f64 {
        let quicker = t.no_load_at_most().filter(|&lower| lower < before);
        let last = std::mem::replace(&mut self.quicker_window, quicker);
        let (Some(now), Some(last)) = (quicker, last) else {
            return before;
        };
        if now < before * (1.0 - DRAIN_LOWERED) {
            self.forget_bands();
        }
        now.max(last)
    }

    /// The no-load estimate becomes `base`, at most what it was; returns
    /// whether it fell by more than `DRAIN_LOWERED`, a server become
    /// quicker. The
    /// answers the bands hold from before it would then make a queue's
    /// round trip look to have risen less than the load since a lower
    /// load, and so not a queue's: against a server serving 8 at once that
    /// became twice as quick, they let the limit grow from 12 to 54 in two
    /// seconds, each window's round trip taken for the no-load one.
    pub(super) fn lower_no_load(&mut self, base: f64) -> bool {
        let lowered = self
            .base_rtt
            .is_some_and(|before| base < before * (1.0 - DRAIN_LOWERED));
        if lowered {
            self.forget_bands();
        }
        self.base_rtt = Some(base);
        lowered
    }

    /// Forgets the answers kept by band, which a quicker server makes a
    /// measure of the server it was.
    fn forget_bands(&mut self) {
        self.by_band = [Tally::default(); BANDS];
        self.band_answered = [None; BANDS];
    }
}
