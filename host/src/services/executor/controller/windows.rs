//! Windows: the answers to the requests sent during one round trip, counted
//! as they come and judged once they are back.

use super::*;

impl Controller {
    /// Counts the answer in the window its request was sent in, or the one
    /// after.
    pub(super) fn tally(
        &mut self,
        sent_at: Instant,
        in_flight: usize,
        signal: Signal,
        now: Instant,
    ) {
        if sent_at < self.window.start {
            return;
        }
        let srtt = self.srtt.unwrap_or(f64::INFINITY);
        let tally = if sent_at < self.window.start + self.window_len() {
            &mut self.window.tally
        } else {
            &mut self.next
        };
        match signal {
            Signal::Success => tally.answered(
                now.saturating_duration_since(sent_at).as_secs_f64(),
                in_flight,
                srtt,
            ),
            Signal::Overload => tally.lost += 1,
            Signal::Neutral => {}
        }
    }

    pub(super) fn close_window(&mut self, now: Instant) {
        let len = self.window_len();
        let saturated = self.last_saturated >= self.window.start;
        // The answers a window waits for once no request follows its own
        // are a run's last, the slowest of those sent: the quick ones are
        // back, and the smoothed round trip, fed only the slow, stretches
        // the window to take in its whole tail. Against answers of 0.5 s on
        // average with one in a hundred past 2.3 s, the last window of a
        // run at the pool's 128 slots came to twice the no-load estimate:
        // three runs in four ended with the limit cut to 97-100, which the
        // next run started from.
        let sending_went_on = self.last_sent >= self.window.start + len;
        let tally = std::mem::take(&mut self.window.tally);
        let next = std::mem::take(&mut self.next);
        let served_clean = saturated && tally.lost == 0 && tally.ok > 0;
        self.served_full_window |= served_clean;
        if served_clean {
            self.floor_held = None;
            self.edge_served(self.window.start);
        }
        self.most_answered = self.most_answered.max(tally.ok);
        // A window sent (in part) before the last change says nothing of it,
        // nor one sent while a drain holds the limit down.
        let changed = self.window.start >= self.last_change
            && self.drain.is_none()
            && self.judge(tally, saturated, sending_went_on, now);
        if changed {
            self.changed(now);
        }
        self.drain_if_stuck(sending_went_on, tally.ok, changed, now);
        self.drain_if_due(now);
        // The usual share rises only on proof (an undone cut), since load
        // makes refusals too; it falls with every quieter stretch of at
        // least `LOSS_SAMPLE` answers. Judged window by window, a limit of a
        // few slots saw mostly windows without a refusal and forgot a usual
        // share of a tenth within seconds.
        let n = tally.ok + tally.lost;
        if n > 0 {
            self.last_loss = Some(f64::from(tally.lost) / f64::from(n));
            self.last_ok = Some(tally.ok);
            self.recent.ok += tally.ok;
            self.recent.lost += tally.lost;
        }
        let pooled = self.recent.ok + self.recent.lost;
        if pooled >= LOSS_SAMPLE {
            let loss = f64::from(self.recent.lost) / f64::from(pooled);
            if loss < self.usual_loss {
                self.usual_loss += LOSS_WEIGHT * (loss - self.usual_loss);
            }
            self.recent = Tally::default();
        }
        self.none_refused_at_closes = [
            self.banded_share() == Some(0.0),
            self.none_refused_at_closes[0],
        ];
        // Losses are weighed per round trip, not summed over many.
        self.restart_since_change();
        if now < self.window.start + 3 * len {
            self.window.start += len;
            self.window.tally = next;
        } else {
            self.window.start = now;
        }
    }

    /// Whether the window changed the limit. `sending_went_on`: requests
    /// were sent after the window's own, so its round trip can say whether
    /// the server queues.
    pub(super) fn judge(
        &mut self,
        t: Tally,
        saturated: bool,
        sending_went_on: bool,
        now: Instant,
    ) -> bool {
        let n = t.ok + t.lost;
        if n == 0 {
            return false;
        }
        let queueing = sending_went_on.then(|| self.queueing(&t)).flatten();
        let collapsed = self
            .pending
            .as_ref()
            .is_some_and(|cut| self.limit < cut.before * (1.0 - MAX_CUT));
        let needed = if collapsed {
            MIN_JUDGED_COLLAPSED
        } else {
            MIN_JUDGED
        };
        let after = self
            .pending
            .is_some()
            .then(|| self.told_since_cut(now))
            .filter(|after| after.ok + after.lost >= needed);
        if let Some(after) = after {
            self.since_cut.clear();
            let loss = f64::from(after.lost) / f64::from(after.ok + after.lost);
            if let Some(cut) = self.pending.take()
                && (self.limit < cut.before * (1.0 - MAX_CUT))
                    .then(|| cut.cost_answers(t.ok, self.limit))
                    .flatten()
                    .unwrap_or_else(|| cut.useless(loss, self.limit))
            {
                self.undo(cut, loss);
                return true;
            }
        }
        if let Some(ratio) = queueing {
            if self.queue_cut_judging() {
                return false;
            }
            return self.cut_for_queue_shown_by(t, ratio, self.slow_start, now);
        }
        // The floor follows what the window held, not what the limit has
        // grown to by its close: in slow start the limit triples in a round
        // trip, and a window of 7 answers at a limit of 26 (a busy machine
        // answers in clumps) set a floor of 13 against a server taking 8,
        // which held the limit above its room for the rest of the run.
        if saturated {
            let held = self.limit.min(f64::from(n));
            self.floor = self.floor.max((held * FLOOR_SHARE).floor());
        }
        false
    }

    /// The outcomes since the pending cut of the requests sent long enough
    /// ago for a loss to have been told: as long as the median of the
    /// latest losses took. A timeout is told a whole timeout after its
    /// send, an answer often sooner, and judged on every outcome so far a
    /// cut looked to have ended losses that were still on their way:
    /// against answers taking 0.75 to 2.25 s whatever the load and a 2 s
    /// timeout, cuts for the timeouts stood that a sixth of the requests
    /// timing out after them would have undone. Refusals come back at
    /// once, and with them every outcome counts, as before.
    pub(super) fn told_since_cut(&self, now: Instant) -> Tally {
        let seen = self.losses_seen.min(LOSS_LATENCY_SAMPLE);
        let mut latest = self.loss_latencies;
        latest[..seen].sort_by(f64::total_cmp);
        let takes = Duration::from_secs_f64(if seen > 0 { latest[seen / 2] } else { 0.0 });
        let mut told = Tally::default();
        for &(_, signal) in self
            .since_cut
            .iter()
            .filter(|(sent_at, _)| *sent_at + takes <= now)
        {
            told.count(signal);
        }
        told
    }
}
