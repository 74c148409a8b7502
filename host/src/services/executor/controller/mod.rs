//! The adaptive concurrency limit of one endpoint: how many requests may be
//! on the wire at once. It reads two signals, as TCP Vegas and Netflix's
//! Gradient2 do: losses (429/503/529, a request that found no room in the
//! server's queue) and the round trip measured against a no-load estimate
//! (a server that queues instead of refusing answers later and later).
//!
//! Answers are judged by window: the requests sent during one smoothed round
//! trip, looked at once they are back. A decision changes the limit at most
//! once per window, and the requests sent before a change are not judged
//! again, so a burst of rejections from one window cuts only once.
//!
//! - Slow start: while the limit is reached, every answer adds two slots (the
//!   limit triples per round trip: 4 → 12 → 36 in two round trips), until
//!   losses beyond a few in a hundred, or queueing. The first losses cut
//!   the limit back to the requests in flight where they began.
//! - Losses beyond the endpoint's usual share (see below) cut the limit by the
//!   share of requests that were refused (between 10 % and half), never below
//!   a learned floor unless the floor itself was already reached or has
//!   held cuts back for `FLOOR_HELD_ROUND_TRIPS` round trips. Cuts in a
//!   row head back to what the endpoint answered before the first, and far
//!   below that the limit grows back as in slow start once the refusals are
//!   back to their usual share.
//! - Losses that do not come from load: after a cut, a window whose loss rate
//!   did not fall proves the cut useless, so it is undone and the loss rate is
//!   learned as the endpoint's usual share, which later windows are measured
//!   against. Random 429s therefore do not ratchet the limit down. The
//!   usual share is also read off the answers by the requests in flight at
//!   their send: refusals as frequent at a few in flight as at many do not
//!   come from the load, and that is known before any cut is judged; and
//!   a level in flight where they are rare bounds the usual share from above.
//!   Past a half only where one to three in flight are refused nearly as
//!   often, by an endpoint that had answered many more at once.
//! - Queueing: a window whose mean round trip is more than `TOLERANCE` times the
//!   no-load estimate shrinks the limit in proportion, which holds the
//!   server's queue at about half of what it serves at once. The answers
//!   after such a cut say whether the round trip fell with the requests in
//!   flight: where it did not, the round trip was not a queue's (answers
//!   that vary in length, a server that batches), the cut is undone and
//!   their round trip becomes the no-load estimate. Before a cut, the
//!   answers at a lower load, kept by band of requests in flight, say the
//!   same: a round trip that rose far less than the load since is no queue,
//!   and neither is, in slow start, an answer within their spread. Answers
//!   to requests sent alone met no queue of the client's making, and raise
//!   the estimate to their mean (`learn_from_alone`).
//! - Growth after slow start follows TCP BIC: half the distance back to what
//!   the limit of the last cut served per round trip, then slow probing
//!   beyond it that doubles every round trip, its least step following time
//!   rather than round trips against an endpoint that refuses whatever the
//!   load (`GROWTH_ROUND_TRIP`). Cuts made again and again from the same
//!   limit hold growth below it for twice as long each time (`edge.rs`).
//! - A run's last stretch does not probe beyond the edge (`tail_limit`).
//!
//! Nothing here reads a clock: every event carries its instant, so the
//! controller is tested on simulated time.

mod decision;
mod drain;
mod edge;
mod growth;
mod losses;
mod no_load;
mod queue;
mod record;
mod tally;
#[cfg(test)]
mod tests;
mod windows;

pub use decision::{Decision, Why};
use drain::Drain;
use edge::EdgeHold;
use losses::Cut;
use queue::{QueueCut, QueueCuts};
use std::time::Duration;
use tally::{Tally, elasticity, upper_bound};
use tokio::time::Instant;

/// A cut for losses takes at least this share off, and at most `MAX_CUT`.
const MIN_CUT: f64 = 0.1;
const MAX_CUT: f64 = 0.5;
/// A cut for queueing keeps at least this share of the limit.
const MAX_QUEUE_CUT: f64 = 0.25;
/// A round trip up to this many times the no-load one is not queueing.
const TOLERANCE: f64 = 1.5;
/// Nor is one less than this (seconds) above it: against a server that
/// answers in a millisecond, the host's own scheduling is all the variation.
const RTT_NOISE: f64 = 0.02;
/// Refusing more than this share is not taken for the endpoint's usual
/// noise (an endpoint that refuses everything is over capacity), unless
/// the refusals come at one to three in flight (`Controller::refused_at_few`).
const MAX_USUAL_LOSS: f64 = 0.5;
/// Weight of the newest stretch of answers in the usual loss rate.
const LOSS_WEIGHT: f64 = 0.2;
/// Answers pooled before the usual loss rate may fall.
const LOSS_SAMPLE: u32 = 32;
/// Refusals of this share of the limit within a round trip cut again before
/// the last cut is judged: random errors are rarely that dense.
const MASSIVE_LOSS: f64 = 0.25;
/// Answers after a cut needed to judge it: fewer say nothing of a share.
const MIN_JUDGED: u32 = 8;
/// The same, for cuts in a row that took more than half the limit off. At
/// a limit of one or two, paced over the round trip, eight answers take
/// eight round trips, and a burst of random refusals that collapsed the
/// limit held it there for a second after the burst ended. Such a cut is
/// judged by the answers a window brings (see `Cut::cost_answers`), which a
/// few say as well as many.
const MIN_JUDGED_COLLAPSED: u32 = 4;
/// Requests sent at a low load show an endpoint's room there once at
/// least this many were answered with at most one refused for every this
/// many answered (or two answered and none refused).
const ROOM_SHOWN_BY: u32 = 4;
/// Losses whose latencies say how long a loss takes to be told (see
/// `Controller::told_since_cut`).
const LOSS_LATENCY_SAMPLE: usize = 8;
/// The most outcomes kept to judge a cut by, a judgement needing eight:
/// beyond them, those sent first judge it.
const MAX_SINCE_CUT: usize = 4096;
/// The fewest answers a window judges a queue by.
const MIN_QUEUE_JUDGED: u32 = 3;
/// In slow start, refusals up to this share of the limit (and two standard
/// deviations over it) do not end it: a shared endpoint refuses a few in a
/// hundred whatever the load, and one such refusal at a limit of 12 left a
/// run far below an endpoint's 64 slots for seconds, while slow start's
/// overshoot of a real edge is refused by the dozen.
const SLOW_START_NOISE: f64 = 0.03;
/// Slow start ends on delay only when the quickest of this many latest
/// answers is delayed, as HyStart++ reads the least round trip of eight a
/// round. A queue delays every answer once it forms; a model's answers with
/// a long tail (log-normal, a few several times the median) pass half again
/// the quickest of the first four one time in two or more, and slow start
/// ending at the first of them cut a run to one slot at ten, where the
/// endpoint took every request. Six rather than eight: a server that serves
/// one at a time answers a service time apart, and eight ended slow start
/// two answers later: 1.5 s in, the limit was still 14 rather than 3 (`sim.rs`).
const SLOW_START_DELAY_SAMPLE: usize = 6;
/// Bands of requests in flight (powers of two) whose answers are counted
/// apart (see `Controller::usual_share`).
const BANDS: usize = 16;
/// Weight of the newest round trip in the smoothed one.
const RTT_WEIGHT: f64 = 0.1;
/// A round trip counts in the smoothed one for at most this many times it.
const OUTLIER: f64 = 2.0;
/// A clean window at a limit teaches a floor at this share of it.
const FLOOR_SHARE: f64 = 0.5;
/// A run that starts from the limit an earlier run learned starts at this
/// share of it: the endpoint may have less room today, and growth takes it
/// back to the learned limit within a few round trips.
const LEARNED_SHARE: f64 = 0.75;
/// The most limit changes kept for the summary (see `thin`): a limit
/// probing at a capped server's edge changes several times a second.
const MAX_CHANGES: usize = 2048;
/// The most decisions kept for the summary, thinned as the changes are: a
/// capped server's edge is cut a slot several times a second.
const MAX_DECISIONS: usize = 256;
/// Round trips after slow start met a queue within which the smoothed
/// round trip must confirm it.
const QUEUE_CONFIRMED_WITHIN: u32 = 4;
/// How lately a refusal must have come for the edge it found to hold in a
/// run's last stretch.
const EDGE_FRESH: Duration = Duration::from_secs(2);
/// Round trips for which cuts held back by the floor, one after another,
/// leave it in place: a burst of refusals is over within them.
const FLOOR_HELD_ROUND_TRIPS: u32 = 4;
/// The window before any round trip has been measured.
const WINDOW_WITHOUT_RTT: Duration = Duration::from_secs(1);
/// A queue cut is judged only where the requests in flight fell below this
/// share of those that set it off: a smaller fall of the round trip is lost
/// in the spread of a few answers, and a cut wrongly found useless would
/// teach a queue's round trip as the no-load one.
const QUEUE_JUDGED_BELOW: f64 = 0.75;
/// A queue cut whose round trip fell by less than this share of the fall
/// of the requests in flight (on a log scale) is undone: below a half,
/// halving the requests in flight loses more than 29 % of the answers a
/// second (against a queue it loses none).
const QUEUE_ELASTICITY: f64 = 0.5;
/// A limit held by a queue is first drained (see `Drain`) this many round
/// trips after the queue cut it, and at most once in `DRAIN_EVERY_AT_LEAST`.
/// A drain holds the limit at half for about two round trips, which costs
/// a server taking two at once about 2 % of a 150-answer run's answers
/// (`sim.rs`), so each drain that finds the no-load round trip as it was
/// doubles the wait for the next, up to `DRAIN_EVERY_MOST_ROUND_TRIPS`.
const DRAIN_EVERY_ROUND_TRIPS: u32 = 50;
const DRAIN_EVERY_MOST_ROUND_TRIPS: u32 = 400;
const DRAIN_EVERY_AT_LEAST: Duration = Duration::from_secs(10);
/// A drain that lowered the no-load estimate by more than this share is
/// followed by another within `DRAIN_AGAIN_ROUND_TRIPS`, at
/// `DRAIN_AGAIN_SHARE` of the limit: where a queue remains at half the
/// limit, a drain lowers the estimate by a quarter at most, and a server
/// that became twice as quick took eight drains to be measured. A window
/// or drain that lowers it by more forgets the answers kept by band
/// (`Controller::lower_no_load`).
const DRAIN_LOWERED: f64 = 0.1;
const DRAIN_AGAIN_ROUND_TRIPS: u32 = 8;
const DRAIN_AGAIN_SHARE: f64 = 0.25;

/// What one finished attempt tells the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Success,
    /// 429/503/529, or no answer in time: the endpoint may be over capacity.
    Overload,
    /// Anything else (a 400, a reset): says nothing about capacity.
    Neutral,
}

/// One successful answer, as slow start's delay exit reads it.
#[derive(Clone, Copy)]
struct Answered {
    rtt: f64,
    sent_at: Instant,
    /// Requests on the wire once it was sent, itself included.
    in_flight: f64,
}

struct Window {
    start: Instant,
    tally: Tally,
}

pub struct Controller {
    limit: f64,
    initial: f64,
    max: f64,
    floor: f64,
    slow_start: bool,
    /// The limit before the last cut: where BIC growth heads.
    ceiling: f64,
    srtt: Option<f64>,
    /// The round trip of the latest answers and the requests in flight at
    /// their sends, smoothed as `srtt` is but without its bound on each
    /// answer, which would hold the round trip back while the requests in
    /// flight rise unbounded.
    recent_point: Option<(f64, f64)>,
    base_rtt: Option<f64>,
    /// The round trips of the first answers, until they seed the no-load
    /// estimate (`Controller::seed_base`).
    seed: Vec<f64>,
    /// Which quickest of the first `seed_rank` × `initial` answers is the
    /// first no-load estimate.
    seed_rank: usize,
    /// The share of attempts lost when load is not the cause.
    usual_loss: f64,
    /// Answers since the usual share was last weighed.
    recent: Tally,
    window: Window,
    /// Answers to requests sent after the window, while it is being answered.
    next: Tally,
    /// When the limit last changed, and the answers since to requests sent
    /// after it and in the current window: losses are judged only on those.
    last_change: Instant,
    since_change: Tally,
    /// Requests sent since `since_change` was last started over.
    sent_since_change: u32,
    /// The fewest requests in flight at the send of a refusal counted in
    /// `since_change`: the endpoint had no room at that load.
    refused_from: Option<usize>,
    /// The limit has been cut for losses before.
    cut_before: bool,
    /// Outcomes of requests sent since the pending cut, until enough judge
    /// it: when each was sent, and what it told (never `Neutral`).
    since_cut: Vec<(Instant, Signal)>,
    /// How long the latest losses took to be told, from their sends, the
    /// oldest overwritten first; and how many there were in all.
    loss_latencies: [f64; LOSS_LATENCY_SAMPLE],
    losses_seen: usize,
    last_saturated: Instant,
    /// When the last request was sent.
    last_sent: Instant,
    pending: Option<Cut>,
    queue_cut: Option<QueueCut>,
    /// Answers to requests sent since the pending queue cut.
    since_queue_cut: Tally,
    /// When the first and the latest of them came.
    since_queue_cut_span: Option<(Instant, Instant)>,
    /// The last cut was for a queue and was not undone: the limit is the
    /// queue's, and is drained now and then.
    queue_bound: bool,
    drain: Option<Drain>,
    next_drain: Option<Instant>,
    /// Round trips from a drain that found nothing new to the next.
    drain_every: u32,
    /// The last drain lowered the no-load estimate.
    drain_again: bool,
    /// The share refused in the last whole window.
    last_loss: Option<f64>,
    /// The answers in the last whole window.
    last_ok: Option<u32>,
    last_refusal: Option<Instant>,
    /// The latest successful answers, for slow start's delay exit, the
    /// oldest overwritten first; and how many there were in all.
    latest: [Answered; SLOW_START_DELAY_SAMPLE],
    answers_seen: usize,
    /// Slow start ended on a delayed answer, and the smoothed round trip
    /// has not yet confirmed the queue: where the limit goes if it does,
    /// until when, and the quickest of the delayed answers.
    queue_met: Option<(f64, Instant, f64)>,
    /// The queue cuts since the last cut for losses, for as long as none
    /// was proved useless: the longest round trip that set one off, the
    /// limit before the first, and whether slow start was under way.
    queue_cuts: Option<QueueCuts>,
    /// A window at a full limit came back without a refusal: the endpoint
    /// took that many at once.
    served_full_window: bool,
    /// Since when cuts have stopped at the floor, each one in turn, with no
    /// window at a full limit back without a refusal since.
    floor_held: Option<Instant>,
    /// The most answers a window has brought.
    most_answered: u32,
    /// The limit grew back towards the ceiling as in slow start since the
    /// last cut.
    grew_back: bool,
    /// The whole-number limit the last cuts for losses were made from,
    /// which growth waits below for a while (see `edge.rs`).
    edge_hold: Option<EdgeHold>,
    /// Successful answers by the requests in flight when theirs was sent,
    /// in bands of powers of two (1, 2–3, 4–7, …), the older halved as they
    /// fill: the round trip at lower loads (`not_a_queue`), forgotten when
    /// the server becomes quicker.
    by_band: [Tally; BANDS],
    /// Answers and losses in the same bands: what the endpoint refuses
    /// whatever the load (`usual_share`), and whether slow start's
    /// refusals came from above a cut (`nearly_all_answered_up_to`). Kept
    /// when the round trips are forgotten: the share lost at any load is no
    /// measure of the server's speed. Against answers that take 0.75 to
    /// 2.25 s whatever the load and a 2 s timeout, quicker windows came
    /// every few seconds, and the sixth of requests timing out at any load
    /// was learned anew after each.
    outcomes_by_band: [Tally; BANDS],
    /// When each band was last answered.
    band_answered: [Option<Instant>; BANDS],
    /// Whether the bands said none are refused whatever the load as each of
    /// the last two windows closed (see `usual_share`).
    none_refused_at_closes: [bool; 2],
    /// How low the last window judged put the no-load round trip, where
    /// surely below the estimate (see `quicker_in_a_row`).
    quicker_window: Option<f64>,
    /// When a request that timed out in the endpoint's queue last cut the
    /// limit (see `timed_out_in_queue`).
    timed_out_cut: Option<Instant>,
    /// Windows in a row of a limit held by a queue, none of whose requests
    /// was ever sent alone, each with too few answers to judge a queue by
    /// (see `drain_if_stuck`).
    unjudged_windows: u32,
    peak: f64,
    changes: Vec<(Duration, u32)>,
    /// The decision under way and the limit before it, until `note_change`
    /// records it.
    why: Option<(Why, f64)>,
    decisions: Vec<Decision>,
    started: Instant,
}

impl Controller {
    pub fn new(initial: usize, max: usize, now: Instant) -> Self {
        let max = max.max(1) as f64;
        let limit = (initial.max(1) as f64).min(max);
        Self {
            limit,
            initial: limit,
            max,
            floor: 1.0,
            slow_start: true,
            ceiling: max,
            srtt: None,
            recent_point: None,
            base_rtt: None,
            seed: Vec::new(),
            seed_rank: 1,
            usual_loss: 0.0,
            recent: Tally::default(),
            window: Window {
                start: now,
                tally: Tally::default(),
            },
            next: Tally::default(),
            last_change: now,
            since_change: Tally::default(),
            sent_since_change: 0,
            refused_from: None,
            cut_before: false,
            since_cut: Vec::new(),
            loss_latencies: [0.0; LOSS_LATENCY_SAMPLE],
            losses_seen: 0,
            last_saturated: now,
            last_sent: now,
            pending: None,
            queue_cut: None,
            since_queue_cut: Tally::default(),
            since_queue_cut_span: None,
            queue_bound: false,
            drain: None,
            next_drain: None,
            drain_every: DRAIN_EVERY_ROUND_TRIPS,
            drain_again: false,
            last_loss: None,
            last_ok: None,
            last_refusal: None,
            queue_met: None,
            queue_cuts: None,
            latest: [Answered {
                rtt: 0.0,
                sent_at: now,
                in_flight: 0.0,
            }; SLOW_START_DELAY_SAMPLE],
            answers_seen: 0,
            served_full_window: false,
            floor_held: None,
            most_answered: 0,
            grew_back: false,
            edge_hold: None,
            by_band: [Tally::default(); BANDS],
            outcomes_by_band: [Tally::default(); BANDS],
            band_answered: [None; BANDS],
            none_refused_at_closes: [false; 2],
            quicker_window: None,
            timed_out_cut: None,
            unjudged_windows: 0,
            peak: limit,
            changes: vec![(Duration::ZERO, limit as u32)],
            why: None,
            decisions: Vec::new(),
            started: now,
        }
    }

    /// Starts from the limit an earlier run learned for the endpoint, and
    /// its floor, rather than from the initial limit: at `LEARNED_SHARE` of
    /// it, past slow start, growing back towards it and probing beyond.
    /// Returns where it starts. Only before any request was sent.
    ///
    /// Never below the initial limit, unless a queue held the learned one
    /// (`held_by_queue`): a limit that refusals cut low may be an outage's,
    /// and slow start from the initial limit costs a few refusals at most,
    /// but a server that serves one or two at once queues what slow start
    /// overshoots to, and every answer of the run's first seconds waits in
    /// that queue. There the run starts at the learned limit, or the
    /// initial one if lower, past slow start: a server grown since is
    /// found by probing, in a few more round trips than slow start takes.
    pub fn start_from(&mut self, learned: u32, floor: u32, held_by_queue: bool) -> u32 {
        let learned = f64::from(learned).clamp(1.0, self.max);
        let share = (learned * LEARNED_SHARE).floor();
        let start = match held_by_queue {
            true => share.max(learned.min(self.limit)),
            false => share.max(self.limit),
        };
        if start > self.limit || held_by_queue {
            self.limit = start;
            self.slow_start = false;
            self.ceiling = learned;
            self.floor = f64::from(floor).clamp(1.0, start);
            self.peak = start;
            self.changes = vec![(Duration::ZERO, start as u32)];
            self.seed_rank = (start / self.initial).floor().max(1.0) as usize;
        }
        if held_by_queue {
            self.held_by_queue(self.started);
        }
        self.limit().try_into().unwrap_or(u32::MAX)
    }

    /// Whether the limit says something of the endpoint worth starting the
    /// next run from: slow start found an edge (a refusal, a queue), or
    /// the limit reached its maximum.
    pub fn has_learned(&self) -> bool {
        !self.slow_start || self.limit >= self.max
    }

    /// The last cut was a queue's and stands: the limit is what the
    /// endpoint serves at once.
    pub fn is_held_by_queue(&self) -> bool {
        self.queue_bound
    }

    /// The limit is not cut below this.
    pub fn floor(&self) -> u32 {
        self.floor as u32
    }

    /// The round trip with no queue at the endpoint, once measured.
    pub fn no_load_rtt(&self) -> Option<Duration> {
        self.base_rtt.map(Duration::from_secs_f64)
    }

    /// Requests allowed in flight.
    pub fn limit(&self) -> usize {
        self.limit.floor() as usize
    }

    /// The limit, or the one a drain under way goes back to: what the
    /// endpoint was found to take.
    pub fn settled_limit(&self) -> usize {
        let restore = self.drain.as_ref().map_or(0.0, |d| d.restore);
        self.limit.max(restore).floor() as usize
    }

    /// Requests allowed in flight in a run's last stretch (no new request
    /// comes, and those in line go out before a refused one would be sent
    /// again, `refusal_wait` later): one slot below the edge, if a refusal
    /// found it lately. A refusal there would park its request for the
    /// server's Retry-After with nothing else left to send, holding the
    /// whole run open: probing beyond the edge only pays while a backlog
    /// keeps every slot in use. Where that wait is longer than `EDGE_FRESH`,
    /// an edge found as the stretch began (`tail_began`) holds to its end:
    /// the limit held below it brings no refusal to find it again, and the
    /// stretch lasts the wait or longer. Where it is shorter, the hold ends
    /// `EDGE_FRESH` after the last refusal, for a refusal there costs the
    /// run no more: an edge set by refusals whatever the load would
    /// otherwise hold the limit low to the end (`stress_extreme`, 2 s).
    pub fn tail_limit(&self, now: Instant, tail_began: Instant, refusal_wait: Duration) -> usize {
        let fresh = self.last_refusal.is_some_and(|at| {
            now.saturating_duration_since(at) < EDGE_FRESH
                || (refusal_wait > EDGE_FRESH
                    && tail_began.saturating_duration_since(at) < EDGE_FRESH)
        });
        if self.slow_start || !fresh || !self.at_edge() {
            return self.limit();
        }
        (self.limit.min(self.ceiling.floor() - 1.0).max(1.0)) as usize
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_secs_f64)
    }

    pub fn peak(&self) -> u32 {
        self.peak.floor() as u32
    }

    /// (time since start, limit) at changes of the whole-number limit: every
    /// one, until a long run has more than `MAX_CHANGES`.
    pub fn changes(&self) -> &[(Duration, u32)] {
        &self.changes
    }

    /// The cuts, undos and drains that changed the whole-number limit, with
    /// their reasons: every one, until a long run has more than
    /// `MAX_DECISIONS`.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// A request was sent at `now`. `saturated`: it took the last slot, so
    /// answers to requests out at that moment may grow the limit, since a
    /// bigger one would have been used.
    pub fn on_send(&mut self, now: Instant, saturated: bool) {
        self.sent_since_change = self.sent_since_change.saturating_add(1);
        self.last_sent = now;
        if saturated {
            self.last_saturated = now;
        }
    }

    /// `in_flight`: requests on the wire once this one was sent, itself
    /// included. Returns the decision the answer led to, if one moved the
    /// limit.
    pub fn on_answer(
        &mut self,
        now: Instant,
        sent_at: Instant,
        in_flight: usize,
        signal: Signal,
    ) -> Option<Decision> {
        let before = self.limit;
        if signal == Signal::Success {
            self.on_success(now, sent_at, in_flight);
        }
        if let Some(cut) = self.pending.as_mut()
            && sent_at < cut.at
        {
            match signal {
                Signal::Overload => {
                    cut.refused_before += 1;
                    cut.loss_before = cut.loss_before.max(cut.refused_share());
                }
                Signal::Success => cut.answered_before += 1,
                Signal::Neutral => {}
            }
            self.ceiling = cut.served().max(self.limit);
        }
        if signal == Signal::Overload {
            self.last_refusal = Some(now);
            let took = now.saturating_duration_since(sent_at).as_secs_f64();
            self.loss_latencies[self.losses_seen % LOSS_LATENCY_SAMPLE] = took;
            self.losses_seen += 1;
        }
        self.count_in_band(now, sent_at, in_flight, signal);
        self.tally(sent_at, in_flight, signal, now);
        // Losses are acted on at once, as the first answers that show them
        // come back (a refusal is quick): waiting for the window would let
        // the overshoot run a whole round trip longer.
        if self.pending.is_some()
            && sent_at >= self.last_change
            && signal != Signal::Neutral
            && self.since_cut.len() < MAX_SINCE_CUT
        {
            self.since_cut.push((sent_at, signal));
        }
        // A loss that comes back after its window closed still counts
        // against the limit it was sent at: a request timed out in a
        // server's queue is told of only `request_timeout_seconds` after its
        // send, and against a server serving one at a time with answers in
        // 4 s, timeouts of a 10 s timeout, each two windows late, were never
        // counted; their rows were sent again into the same queue for 45 s.
        let late_loss = signal == Signal::Overload && sent_at >= self.last_change;
        if late_loss || sent_at >= self.last_change.max(self.window.start) {
            self.since_change.count(signal);
            if signal == Signal::Overload {
                self.refused_from = Some(self.refused_from.map_or(in_flight, |n| n.min(in_flight)));
            }
            let lost = self.since_change.lost;
            // A cut not yet judged is not cut again, since whether it helped
            // decides what the refusals were, unless they are massive.
            //
            // An endpoint known to refuse whatever the load is cut at most
            // once a round trip all the same: a burst of its refusals, each
            // back in a millisecond, is as massive as slow start's overshoot,
            // and against answers in a second cut after cut took the limit
            // from 64 to one or two within one burst, to grow back for
            // longer than the gap to the next (`sim.rs`: 3.34 times the best
            // fixed concurrency; 1.80 so). Slow start's overshoot, and a
            // server that refuses only for want of room, are cut as often as
            // they refuse that densely: a cut a round trip left a server
            // whose room fell from 64 to 16 refusing a fifth of the requests.
            let massive = f64::from(lost) > MASSIVE_LOSS * self.at_risk()
                && (self.slow_start
                    || self.usual_share() < MIN_CUT
                    || now >= self.last_change + self.window_len());
            if signal == Signal::Overload
                && (self.pending.is_none() || massive || self.back_at_pending_edge())
                && self.overloaded(lost)
                && self.cut_for_losses(lost, now)
            {
                self.changed(now);
            }
        }
        if now >= self.window.start + 2 * self.window_len() {
            self.close_window(now);
        }
        self.note_change(before, now)
    }

    fn on_success(&mut self, now: Instant, sent_at: Instant, in_flight: usize) {
        let rtt = now.saturating_duration_since(sent_at).as_secs_f64();
        // One answer counts for at most twice the average: a few answers
        // slow by nature would otherwise stretch every window after them,
        // while a queue, which delays them all, still shows within a few.
        let srtt = match self.srtt {
            Some(avg) => avg + RTT_WEIGHT * (rtt.min(OUTLIER * avg) - avg),
            None => rtt,
        };
        let n = in_flight as f64;
        self.recent_point = Some(match self.recent_point {
            Some((r, m)) => (r + RTT_WEIGHT * (rtt - r), m + RTT_WEIGHT * (n - m)),
            None => (rtt, n),
        });
        self.srtt = Some(srtt);
        self.seed_base(rtt);
        // A round trip growing past the no-load one means a queue is
        // building: slow start ends once the latest answers all show it
        // (HyStart's delay signal), and the limit holds while the smoothed
        // one stays up.
        self.latest[self.answers_seen % SLOW_START_DELAY_SAMPLE] = Answered {
            rtt,
            sent_at,
            in_flight: n,
        };
        self.answers_seen += 1;
        let beyond = |rtt: f64| self.base_rtt.is_some_and(|base| queued(rtt, base));
        let queue_building = beyond(srtt);
        // Nor does an answer that was itself delayed grow the limit, as
        // TCP Vegas grows only while the round trip stays near its least:
        // at a few slots the smoothed round trip takes many round trips to
        // rise, and growth beyond the edge doubles every round trip.
        let delayed = !self.slow_start && beyond(rtt);
        // At the pool's size slow start grows no further, and a run's last
        // answers, the slowest still to come, are no measure of a queue;
        // windows judge a queue there.
        if self.slow_start
            && self.limit < self.max
            && let Some((quickest, first_sent, load)) = self.quickest_latest()
            && beyond(quickest)
            && !self.within_lower_spread(quickest, load, now)
        {
            self.slow_start = false;
            self.ceiling = self.limit;
            self.queue_met = self.base_rtt.map(|base| {
                let then = self.limit_at(first_sent);
                let target = (then * (TOLERANCE * base / quickest).max(MAX_QUEUE_CUT)).max(1.0);
                (
                    target,
                    now + QUEUE_CONFIRMED_WITHIN * self.window_len(),
                    quickest,
                )
            });
        }
        if queue_building && let Some((target, until, delayed)) = self.queue_met.take() {
            // A queue confirmed long after slow start is not the one it met.
            if now < until {
                self.back_to_queue_start(now, target, delayed);
            }
        }
        if self.queue_cut.is_some() && sent_at >= self.last_change {
            self.since_queue_cut.answered(rtt, in_flight, srtt);
            let first = self.since_queue_cut_span.map_or(now, |(first, _)| first);
            self.since_queue_cut_span = Some((first, now));
            self.judge_queue_cut(now);
        }
        if let Some(drain) = self.drain.as_mut()
            && sent_at >= drain.started
        {
            drain.answered.answered(rtt, in_flight, srtt);
            self.end_drain_once_answered(now);
        }
        if self.last_saturated >= sent_at && !queue_building && !delayed && self.drain.is_none() {
            self.grow(now);
        }
    }

    /// The whole-number limit in force at `at`.
    fn limit_at(&self, at: Instant) -> f64 {
        let since = at.saturating_duration_since(self.started);
        let i = self.changes.partition_point(|(t, _)| *t <= since);
        self.changes
            .get(i.saturating_sub(1))
            .map_or(self.initial, |(_, limit)| f64::from(*limit))
    }

    fn changed(&mut self, now: Instant) {
        self.last_change = now;
        self.restart_since_change();
        self.since_cut.clear();
    }

    /// Starts over what is counted since the last change: the answers,
    /// the requests sent and where refusals began.
    fn restart_since_change(&mut self) {
        self.since_change = Tally::default();
        self.sent_since_change = 0;
        self.refused_from = None;
    }

    fn window_len(&self) -> Duration {
        self.srtt().unwrap_or(WINDOW_WITHOUT_RTT)
    }
}

/// The band of a load of `in_flight` requests: powers of two.
fn band_of(in_flight: f64) -> usize {
    ((in_flight.max(1.0) as usize).ilog2() as usize).min(BANDS - 1)
}

/// Whether a round trip of `rtt` says requests wait in the server's queue.
fn queued(rtt: f64, base: f64) -> bool {
    rtt > (TOLERANCE * base).max(base + RTT_NOISE)
}
