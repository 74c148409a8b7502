//! Refusals: when they show the endpoint over its room, how far the limit
//! is cut for them, and what the endpoint refuses whatever the load.

use super::*;

/// See `Controller::refused_at_few`.
const FEW_REFUSED: f64 = 0.75;
pub(super) const SERVED_MANY: u32 = 16;

/// Answers a band needs before its share refused counts.
const BAND_SAMPLE: u32 = 64;

/// A cut for losses, kept until the next window says whether it helped.
pub(super) struct Cut {
    pub(super) before: f64,
    /// The share refused in the last whole window before the cut.
    pub(super) loss_before: f64,
    /// The answers in the last whole window before the cut.
    ok_before: Option<u32>,
    /// When it was made, and the refusals so far of requests sent before
    /// it. A cut is made at the first refusals, and those that come back
    /// after it show the share refused at `before`: judged against the
    /// first refusal alone (one of 108 after slow start's overshoot of a
    /// server taking 64), the cut looked useless and was undone again and
    /// again, back to 108.
    pub(super) at: Instant,
    pub(super) refused_before: u32,
    /// Where growth headed before the cut: a cut found useless gives it
    /// back, where the refusals of requests sent before the cut lowered
    /// it to what they said was served. Left there, growth probed from a
    /// step of `MIN_GROWTH` again after each burst of refusals, and
    /// against answers in 3 s and a burst every 15 s the limit gained
    /// about a slot between bursts. (Set back exactly, below the limit
    /// restored, it sent the limit down against servers with mixed
    /// faults: `sim.rs`, 1.01 → 1.18 times the best fixed.)
    ceiling_before: f64,
    /// Requests sent before it that were answered after it.
    pub(super) answered_before: u32,
}

impl Cut {
    /// What the endpoint was found to serve at `before`, where growth heads
    /// back to rather than `before` itself, which slow start may have
    /// overshot threefold: the share not refused of `before`, or the
    /// requests sent before the cut that were answered, whichever is more.
    /// A burst of refusals thrown whatever the load refuses nearly every
    /// request sent during it, and the share alone put the ceiling at a
    /// few slots, while the requests the endpoint took before the burst
    /// came back answered: 83 of them, against answers in 3 s.
    pub(super) fn served(&self) -> f64 {
        (self.before * (1.0 - self.refused_share()))
            .max(f64::from(self.answered_before))
            .min(self.before)
    }

    /// The share of `before` refused of the requests sent before it.
    pub(super) fn refused_share(&self) -> f64 {
        (f64::from(self.refused_before) / self.before.max(1.0)).min(1.0)
    }

    /// Whether the answers a window after the cut brought say it cost
    /// throughput: against a server at capacity a cut trims refusals and
    /// the answers per round trip hold; against refusals that have nothing
    /// to do with the load, they fall with the limit. Used for cuts that
    /// more than halved the limit while pending: dense refusals come back
    /// in a millisecond, many to each answer, and set off cut after cut (a
    /// provider's burst refusing four requests in five took the limit from
    /// 64 to 2 within 20 ms), and by the time the cut is judged the burst
    /// may be over, so the share refused after it says nothing. `None` when
    /// the window before had too few answers to tell.
    pub(super) fn cost_answers(&self, ok_after: u32, after: f64) -> Option<bool> {
        let before = self.ok_before.filter(|&ok| ok >= MIN_JUDGED)?;
        let if_random = f64::from(before) * after / self.before.max(1.0);
        Some(f64::from(ok_after) < (f64::from(before) + if_random) / 2.0)
    }

    /// Whether the refusals after the cut look load-independent. Against a
    /// server with a fixed capacity a cut trims the excess: the share refused
    /// falls to `1 - (1 - before's share) * before / after`. One that refuses
    /// at random keeps its share. Closer to the latter, the cut did not help.
    pub(super) fn useless(&self, loss_after: f64, after: f64) -> bool {
        let if_load = (1.0 - (1.0 - self.loss_before) * self.before / after.max(1.0)).max(0.0);
        self.loss_before > 0.0 && loss_after > (self.loss_before + if_load) / 2.0
    }
}

impl Controller {
    /// More losses than the usual share explains: beyond two standard
    /// deviations of it over the requests they came from (any loss at all
    /// while the usual share is nil). Refusals come back before the answers
    /// sent with them, so the answers so far are no measure.
    pub(super) fn overloaded(&self, lost: u32) -> bool {
        let usual = self.lost_whatever_the_load();
        let p = if self.slow_start {
            usual.max(SLOW_START_NOISE)
        } else {
            usual
        };
        self.more_lost_than(lost, p)
    }

    /// Whether `lost` of the requests at risk is more than a share `p` of
    /// them explains: beyond two standard deviations of it.
    pub(super) fn more_lost_than(&self, lost: u32, p: f64) -> bool {
        let n = self.at_risk();
        lost > 0 && f64::from(lost) > p * n + 2.0 * (n * p * (1.0 - p)).sqrt()
    }

    /// The share of attempts the endpoint loses whatever the load, as a
    /// round trip's losses are measured against it.
    pub(super) fn lost_whatever_the_load(&self) -> f64 {
        // Where one to three in flight are refused whatever the load, the
        // refusals come in bursts, and a round trip within one is refused
        // as densely as those few in flight were, far beyond the share over
        // all time: against answers in 3 s, each burst of ChaosLLM's
        // `stress_extreme` still cut the limit to one or two.
        self.usual_share().max(self.refused_at_few().unwrap_or(0.0))
    }

    /// The requests that refusals since the last change came from: a round
    /// trip's worth (the limit), or those sent since, when more. A refusal
    /// comes back at once and its slot goes to the next request, so a round
    /// trip sends more than the limit where many are refused. Counted
    /// against the limit alone, a fifth refused whatever the load looked
    /// like overload at every other window against answers as slow as a
    /// model's, and cut after cut held the limit at a sixth of what the
    /// endpoint took.
    pub(super) fn at_risk(&self) -> f64 {
        self.limit.max(f64::from(self.sent_since_change))
    }

    /// The share of attempts refused whatever the load: what an undone cut
    /// proved, or the least share refused in any band of requests in
    /// flight with enough answers, whichever is more. A server refuses for
    /// want of room only above what it takes, so the bands below show no
    /// refusal; refusals thrown whatever the load show in every band, and
    /// are known so without waiting for a cut to be judged, which at a few
    /// slots and a third of the requests refused could take many seconds.
    ///
    /// Where the least refused band with enough answers had none refused
    /// when either of the last two windows closed, a rise counts only once
    /// two have closed since: a round trip or more after the refusals
    /// began, wherever in a window they came. A share refused whatever the
    /// load is the endpoint's nature and does not climb from none to a
    /// tenth within a round trip; refusals for want of room do where the
    /// room falls, since every band that holds enough answers then lies
    /// above the new room. Read at once, the least of them put the share at
    /// 13 % within 107 ms of a server's room falling from 64 to 16, and cut
    /// at most once a round trip from then, grown back between cuts, the
    /// limit churned refusals for seconds: 1.8 to 1.9 calls per row in one
    /// run of eight to ten on real sockets. A band that had any refused,
    /// even a few in a hundred, rises at once: lagged where under 3 % were
    /// refused, the first round trip of each of a provider's bursts was cut
    /// after cut, and bursts refusing 80 % took 1.11 and 1.24 times the
    /// best fixed concurrency (means over three schedules) against 1.06.
    pub(super) fn usual_share(&self) -> f64 {
        let banded = self
            .banded_share()
            .filter(|_| !self.none_refused_at_closes.contains(&true));
        let usual = banded.map_or(self.usual_loss, |banded| self.usual_loss.max(banded));
        // A band with fewer refusals than that, counted generously, proves
        // the share smaller. Without this, once only the bands above a
        // server's room held enough answers, their refusals (two in three
        // against a server taking 8 after slow start's overshoot to 26)
        // were taken for the usual share, and the limit stayed above the
        // server's room for the rest of the run, at 2.4 calls per row.
        let bound = self
            .outcomes_by_band
            .iter()
            .map(|t| upper_bound(t.lost, t.ok + t.lost))
            .fold(1.0, f64::min);
        usual.min(bound)
    }

    /// The least share refused in any band of requests in flight with
    /// enough answers, at most what is refused at one to three in flight
    /// where that says the endpoint refuses whatever the load; `None`
    /// while no band has enough.
    pub(super) fn banded_share(&self) -> Option<f64> {
        let least = self
            .outcomes_by_band
            .iter()
            .filter(|t| t.ok + t.lost >= BAND_SAMPLE)
            .map(|t| f64::from(t.lost) / f64::from(t.ok + t.lost))
            .reduce(f64::min)?;
        Some(least.min(self.refused_at_few().unwrap_or(MAX_USUAL_LOSS)))
    }

    /// The share refused at one to three in flight, where it says the
    /// endpoint refuses whatever the load: `FEW_REFUSED` of the time or
    /// more, by an endpoint that had answered `SERVED_MANY` in one window.
    /// Load so small is not what a server with that room refuses, so the
    /// refusals are a provider's burst, and cuts below one to three slots
    /// only starve the run: against answers in 3 s, a burst refusing 97 %
    /// for 5 s of every 15 held the limit at one or two for the rest of the
    /// run, 46 times as long as a fixed concurrency. The usual share may
    /// then pass `MAX_USUAL_LOSS`, up to this share. A client that never had
    /// that room (a shard that began after its siblings filled the server)
    /// is refused at one in flight by the load of others, and cutting is
    /// what shares the server.
    fn refused_at_few(&self) -> Option<f64> {
        let [one, two_or_three, ..] = &self.outcomes_by_band;
        let lost = one.lost + two_or_three.lost;
        let n = one.ok + two_or_three.ok + lost;
        let share = f64::from(lost) / f64::from(n.max(1));
        (n >= BAND_SAMPLE && self.most_answered >= SERVED_MANY && share >= FEW_REFUSED)
            .then_some(share)
    }

    /// Whether the limit is within a slot of where the last cut found the
    /// edge.
    pub(super) fn at_edge(&self) -> bool {
        (self.ceiling - 1.0..=self.ceiling + 1.0).contains(&self.limit)
    }

    /// `lost`: requests refused since the last change. Refusals come back
    /// first, before the answers sent with them, so their share of the
    /// limit (or of the last whole window), not of the answers so far,
    /// measures the excess.
    ///
    /// Returns whether it changed anything: at a limit of one, with a cut
    /// pending, further refusals change nothing, and counting them as a
    /// change would start the pending cut's judgement over at each one, so
    /// that a burst of random refusals could never show the cut useless.
    pub(super) fn cut_for_losses(&mut self, lost: u32, now: Instant) -> bool {
        if self.limit <= 1.0 && self.pending.is_some() {
            return false;
        }
        let why = Why::Refused {
            refused: lost,
            slow_start: self.slow_start,
        };
        self.note_edge(self.limit, now);
        if lost <= 1 && self.back_at_pending_edge() {
            self.pending = None;
        }
        self.decided(why, self.limit);
        // Refusals are the endpoint's word on its room, whatever the queue.
        self.drop_drain();
        self.queue_bound = false;
        self.queue_cuts = None;
        // Slow start overshoots by up to its growth of a round trip. Its
        // first refusals say by how much: the endpoint, which had taken
        // every request until then, had no room at the fewest requests in
        // flight one of them was sent with. Halved whatever they said, a
        // run against a server capped at 32 went from 36 to 18 slots and
        // took most of a second to climb back. Refusals after a cut may be
        // the endpoint's random share, which shows at any load; halving
        // stays for them, as for a first burst of random refusals, whose
        // fewest in flight is far below the limit.
        let edge = self
            .refused_from
            .filter(|_| self.slow_start && !self.cut_before)
            .map(|n| n as f64 - 1.0);
        self.cut_before = true;
        let share = if self.slow_start {
            MAX_CUT
        } else {
            let share = (f64::from(lost) / self.limit).max(self.last_loss.unwrap_or(0.0));
            (share - self.usual_share()).clamp(MIN_CUT, MAX_CUT)
        };
        // Cuts in a row are judged together, against the window before the
        // first. The share refused before is at least the share that set the cut
        // off: a window of a few requests often holds no refusal even where
        // a tenth are refused at random, and a cut measured against none
        // could never be found useless.
        // A cut the limit has since grown past (slow start goes on after a
        // cut until the endpoint shows room) is no longer what is judged:
        // one made in a run's first burst of refusals at 4 slots was still
        // pending at 46, and the cuts merged into it were measured against
        // that burst and kept.
        //
        // Nor is a cut after growing back from the last (see `grow`): it is
        // the endpoint's word on its room now. Merged, it headed back to
        // what the first cut found served: against a server whose room fell
        // from 64 to 16, to 64 again and again, refused each time.
        let grew_back = std::mem::take(&mut self.grew_back);
        let first = self
            .pending
            .take()
            .filter(|cut| self.limit <= cut.before && !grew_back);
        // One refusal where the last cut was made, no other cut pending:
        // the probe found the same edge again, so one slot below it is
        // enough. A share (at least `MIN_CUT`) each time cost a run against
        // a capped server 3 % of its capacity, the limit climbing back for
        // several round trips.
        let at_edge = !self.slow_start && lost <= 1 && first.is_none() && self.at_edge();
        let trigger = f64::from(lost) / self.limit;
        // Cuts in a row head back to what the first found served, not to
        // the limit each was made at: cut after cut by a dense burst of
        // refusals, growth otherwise headed back to a few slots, and took
        // the rest of the run to find the endpoint's room again.
        let ceiling = first
            .as_ref()
            .map_or(self.limit, |first| first.served().max(self.limit));
        self.pending = Some(match first {
            Some(first) => first,
            None => Cut {
                before: self.limit,
                loss_before: self.last_loss.unwrap_or(0.0).max(trigger),
                ok_before: self.last_ok,
                at: now,
                refused_before: lost,
                ceiling_before: self.ceiling,
                answered_before: 0,
            },
        });
        let cut = if at_edge {
            (self.limit.floor() - 1.0).max(self.limit * (1.0 - MAX_CUT))
        } else if let Some(edge) = edge {
            edge.clamp(self.limit * (1.0 - MAX_CUT), self.limit * (1.0 - MIN_CUT))
        } else {
            self.limit * (1.0 - share)
        };
        self.ceiling = ceiling;
        // Losses at the floor, or cuts the floor has held back for
        // `FLOOR_HELD_ROUND_TRIPS` with no window served clean in between:
        // the endpoint has less room than it had. Between two cuts the limit
        // grows from the floor towards the first cut's ceiling, so it was
        // seldom at the floor when the refusals came: against a server whose
        // room fell from 64 to 16, cut after cut stopped at a floor of 32,
        // and half the requests were refused for the rest of the run (4.4
        // calls per row on real sockets). A burst is over within those
        // round trips, and the floor still holds through it.
        let held_long = self
            .floor_held
            .is_some_and(|since| now >= since + FLOOR_HELD_ROUND_TRIPS * self.window_len());
        if self.limit <= self.floor || (held_long && cut < self.floor) {
            self.floor = cut.floor().max(1.0);
        }
        self.floor_held = (cut < self.floor).then(|| self.floor_held.unwrap_or(now));
        self.limit = cut.max(self.floor).max(1.0);
        // Refusals before the endpoint has shown any room say nothing of
        // it: a burst of random refusals in a run's first second left the
        // limit at one or two slots, growing a slot a round trip, for
        // seconds after the burst. Slow start goes on from the cut limit
        // until a window at a full limit comes back clean, or until the
        // requests sent with no more in flight than the cut limit were
        // nearly all answered: then the refusals came from the load above
        // it. (Against an endpoint with room for one or two, slow start's
        // overshoot puts refusals in every window, and without the second
        // test slow start went on for the whole run at three calls a row.)
        self.slow_start = self.slow_start
            && !self.served_full_window
            && !self.nearly_all_answered_up_to(self.limit());
        true
    }

    /// Whether the requests sent with at most `in_flight` on the wire were
    /// nearly all answered: those of the bands that lie wholly at or below
    /// it. While slow start lasts, the bands hold only its answers.
    ///
    /// A burst of random refusals shows at every load, yet against answers
    /// of 100 ms with four in five refused, the requests sent alone were
    /// answered about half the time: a refused request frees its slot at
    /// once, so one sent alone often follows the refusals of those sent
    /// with it. Half was a majority often enough to end slow start inside a
    /// run's first burst, at one or two slots, which then grew a slot a
    /// round trip for seconds after it. An endpoint with room for one or
    /// two answers all of those; two answers and no refusal are enough
    /// there, since it sends few alone once the limit is two.
    fn nearly_all_answered_up_to(&self, in_flight: usize) -> bool {
        let whole = (in_flight + 1).ilog2() as usize;
        let (ok, lost) = self.outcomes_by_band[..whole.min(BANDS)]
            .iter()
            .fold((0, 0), |(ok, lost), t| (ok + t.ok, lost + t.lost));
        (lost == 0 && ok >= 2) || (ok >= ROOM_SHOWN_BY && lost * ROOM_SHOWN_BY <= ok)
    }

    /// The cut did not lower the losses: they are not the load's. Slow
    /// start, if the cut ended it, stays ended: growth probes beyond the
    /// limit restored rather than tripling it each round trip. A cut
    /// wrongly undone (a busy machine answers in clumps, and the share
    /// refused after a cut is noisy) would otherwise start the overshoot
    /// over, once from 12 to 28 slots against a server taking 8.
    pub(super) fn undo(&mut self, cut: Cut, loss: f64) {
        let from = self.limit;
        self.edge_hold = None;
        self.limit = self.limit.max(cut.before);
        self.ceiling = self.ceiling.max(cut.ceiling_before);
        self.usual_loss = self.usual_loss.max(loss.min(MAX_USUAL_LOSS));
        let share = self.usual_loss;
        self.decided(Why::RefusedWhateverTheLoad { share }, from);
    }
}
