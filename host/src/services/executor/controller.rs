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
//!   load (`GROWTH_ROUND_TRIP`).
//! - A run's last stretch does not probe beyond the edge (`tail_limit`).
//!
//! Nothing here reads a clock: every event carries its instant, so the
//! controller is tested on simulated time.

use std::time::Duration;
use tokio::time::Instant;

/// Slots an answer adds in slow start while the limit is reached.
const SLOW_START_GAIN: f64 = 2.0;
/// Smallest growth per round trip (slots) after slow start. It is what every
/// client sharing an endpoint adds alike, while cuts take a share: the larger
/// it is, the sooner clients that started apart (shards of one run, the
/// first of which found the server to itself) come to equal limits. In
/// `sim.rs`, four shards of 500 rows started 40 ms apart on a server capped
/// at 32 stood at 12 and 4 slots each for seconds at 0.1 and took 1 / 0.90
/// the time of one run; at 0.3, 1 / 0.97, for about 1 % more refusals.
const MIN_GROWTH: f64 = 0.3;
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
/// See `Controller::refused_at_few`.
const FEW_REFUSED: f64 = 0.75;
const SERVED_MANY: u32 = 16;
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
/// Answers a band needs before its share refused counts.
const BAND_SAMPLE: u32 = 64;
/// A band holding this many answers halves them, so that it follows the
/// endpoint as it changes.
const BAND_MEMORY: u32 = 256;
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
/// A queue cut whose round trip fell by less than this share of the fall
/// of the requests in flight (on a log scale) is undone: below a half,
/// halving the requests in flight loses more than 29 % of the answers a
/// second (against a queue it loses none).
const QUEUE_ELASTICITY: f64 = 0.5;
/// A band of requests in flight answered within this many round trips
/// still says what a lower load's round trip is.
const BAND_FRESH_ROUND_TRIPS: u32 = 16;
/// Nor is a lower load compared against below this share of the load now:
/// between a load below a queue's start and one above it, the round trip
/// rises less than in proportion.
const LOWER_LOAD_AT_LEAST: f64 = 1.0 / 3.0;
/// A limit held by a queue is first drained (see `Drain`) this many round
/// trips after the queue cut it, and at most once in `DRAIN_EVERY_AT_LEAST`.
/// A drain holds the limit at half for about two round trips, which costs
/// a server taking two at once about 2 % of a 150-answer run's answers
/// (`sim.rs`), so each drain that finds the no-load round trip as it was
/// doubles the wait for the next, up to `DRAIN_EVERY_MOST_ROUND_TRIPS`.
const DRAIN_EVERY_ROUND_TRIPS: u32 = 50;
const DRAIN_EVERY_MOST_ROUND_TRIPS: u32 = 400;
const DRAIN_EVERY_AT_LEAST: Duration = Duration::from_secs(10);
/// The share of the limit a drain holds.
const DRAIN_SHARE: f64 = 0.5;
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

#[derive(Default, Clone, Copy)]
struct Tally {
    ok: u32,
    lost: u32,
    /// Round trips, each at most `OUTLIER` times the smoothed one: a queue
    /// delays every request, while a few answers slow by nature (a long
    /// completion, a server's hiccup) would otherwise raise the mean of a
    /// small window past `TOLERANCE` on their own.
    rtt_sum: f64,
    /// Their squares, for their spread.
    rtt_sq_sum: f64,
    /// The requests in flight at the sends of those answers.
    in_flight_sum: f64,
}

impl Tally {
    /// Counts a successful answer: its round trip, at most `OUTLIER` times
    /// the smoothed one `srtt`, and the requests in flight at its send.
    fn answered(&mut self, rtt: f64, in_flight: usize, srtt: f64) {
        self.ok += 1;
        let rtt = rtt.min(OUTLIER * srtt);
        self.rtt_sum += rtt;
        self.rtt_sq_sum += rtt * rtt;
        self.in_flight_sum += in_flight as f64;
    }

    /// The mean round trip of the answers, and the mean requests in flight
    /// at their sends.
    fn point(&self) -> Option<(f64, f64)> {
        let n = f64::from(self.ok);
        (self.ok > 0).then(|| (self.rtt_sum / n, self.in_flight_sum / n))
    }

    /// The mean round trip of the answers and their standard deviation.
    fn rtt_spread(&self) -> Option<(f64, f64)> {
        let n = f64::from(self.ok);
        if n < 2.0 || self.rtt_sum <= 0.0 {
            return None;
        }
        let mean = self.rtt_sum / n;
        let variance = (self.rtt_sq_sum / n - mean * mean).max(0.0) * n / (n - 1.0);
        Some((mean, variance.sqrt()))
    }

    /// The standard error of the log of the mean round trip: how far the
    /// mean of these few answers may stray from that of many.
    fn log_rtt_error(&self) -> f64 {
        self.rtt_spread().map_or(f64::INFINITY, |(mean, sd)| {
            sd / (mean * f64::from(self.ok).sqrt())
        })
    }

    /// How low the no-load round trip may be taken from these answers: their
    /// mean, two standard errors higher. The quickest of many windows of one
    /// or two answers is the quickest answer, and taken for the no-load round
    /// trip it made answers of ordinary length look queued: against a server
    /// taking two at once whose answers took half to one and a half times
    /// their mean, the limit stayed at one for a minute, at half its capacity.
    fn no_load_at_most(&self) -> Option<f64> {
        let (rtt, _) = self.point()?;
        Some(rtt * (1.0 + self.two_sided_95() * self.log_rtt_error()))
    }

    /// How many standard errors bound the mean of these answers: Student's
    /// t at 95 %, two-sided, for their count. Two standard errors took the
    /// spread of a few answers as known, and the spread of two or three is
    /// a guess: two answers of a long tail, each held to twice the smoothed
    /// round trip, were alike and three times the median, and cut the limit
    /// from 10 to 2.5 in slow start.
    fn two_sided_95(&self) -> f64 {
        const T: [f64; 9] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26];
        match self.ok.saturating_sub(1) as usize {
            0 => f64::INFINITY,
            df @ 1..=9 => T[df - 1],
            df => 2.0 + 2.3 / df as f64,
        }
    }

    /// Keeps half the answers, their means as they were.
    fn halve(&mut self) {
        let kept = f64::from(self.ok / 2) / f64::from(self.ok.max(1));
        self.rtt_sum *= kept;
        self.rtt_sq_sum *= kept;
        self.in_flight_sum *= kept;
        self.ok /= 2;
        self.lost /= 2;
    }
}

/// How the round trip rose from a lower load `low` to a higher one `high`
/// (each a mean round trip and the requests in flight), against the load,
/// both on a log scale: 1 for a queue, whose round trip follows the load in
/// proportion; near 0 where the round trip is the answers' own.
fn elasticity(low: (f64, f64), high: (f64, f64)) -> f64 {
    (high.0 / low.0).ln() / (high.1 / low.1).ln()
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

/// Queue cuts in a row, to be judged again by a no-load estimate learned
/// after them (`Controller::learn_from_alone`).
struct QueueCuts {
    /// The longest round trip that set one off.
    rtt: f64,
    /// The limit before the first.
    before: f64,
    in_slow_start: bool,
}

/// A cut for queueing, kept until the answers after it say whether the
/// round trip fell with the limit. Against a queue it falls in proportion;
/// answers that vary in length by nature (a model's completions) make the
/// mean round trip of a window half again its shortest whatever the load,
/// and taken for a queue, such a spread cut the limit window after window
/// down to one.
struct QueueCut {
    before: f64,
    /// The mean round trip and requests in flight of the answers that set
    /// it off.
    point_before: (f64, f64),
    /// The limit it went to (cuts in a row: the last).
    after: f64,
    /// Slow start was under way: it goes on if the cut proves useless.
    in_slow_start: bool,
    /// Answers a second as it was made (`Controller::answer_rate`).
    rate_before: Option<f64>,
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
    fn useless(&self, point_after: (f64, f64)) -> Option<bool> {
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
    fn cost_answers(&self, rate_after: Option<f64>, load_after: f64) -> bool {
        let (Some(before), Some(after)) = (self.rate_before, rate_after) else {
            return true;
        };
        let if_no_queue = (load_after / self.point_before.1).min(1.0);
        after < before * (1.0 + if_no_queue) / 2.0
    }
}

/// The limit held at `DRAIN_SHARE` of itself (or `DRAIN_AGAIN_SHARE`)
/// until the answers to a limit's worth of requests sent since are back,
/// as BBR's ProbeRTT holds its window down now and then. A window lowers
/// the no-load estimate only when its round trip is quicker, and a queue,
/// once held, keeps every window as slow as the estimate allows: a server
/// that became twice as quick kept a queue of four times its slots.
/// Drained, the queue empties and the answers show the round trip without
/// it.
struct Drain {
    /// The limit to go back to.
    restore: f64,
    started: Instant,
    /// Answers to requests sent since it started.
    answered: Tally,
}

/// A cut for losses, kept until the next window says whether it helped.
struct Cut {
    before: f64,
    /// The share refused in the last whole window before the cut.
    loss_before: f64,
    /// The answers in the last whole window before the cut.
    ok_before: Option<u32>,
    /// When it was made, and the refusals so far of requests sent before
    /// it. A cut is made at the first refusals, and those that come back
    /// after it show the share refused at `before`: judged against the
    /// first refusal alone (one of 108 after slow start's overshoot of a
    /// server taking 64), the cut looked useless and was undone again and
    /// again, back to 108.
    at: Instant,
    refused_before: u32,
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
    answered_before: u32,
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
    fn served(&self) -> f64 {
        (self.before * (1.0 - self.refused_share()))
            .max(f64::from(self.answered_before))
            .min(self.before)
    }

    /// The share of `before` refused of the requests sent before it.
    fn refused_share(&self) -> f64 {
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
    fn cost_answers(&self, ok_after: u32, after: f64) -> Option<bool> {
        let before = self.ok_before.filter(|&ok| ok >= MIN_JUDGED)?;
        let if_random = f64::from(before) * after / self.before.max(1.0);
        Some(f64::from(ok_after) < (f64::from(before) + if_random) / 2.0)
    }

    /// Whether the refusals after the cut look load-independent. Against a
    /// server with a fixed capacity a cut trims the excess: the share refused
    /// falls to `1 - (1 - before's share) * before / after`. One that refuses
    /// at random keeps its share. Closer to the latter, the cut did not help.
    fn useless(&self, loss_after: f64, after: f64) -> bool {
        let if_load = (1.0 - (1.0 - self.loss_before) * self.before / after.max(1.0)).max(0.0);
        self.loss_before > 0.0 && loss_after > (self.loss_before + if_load) / 2.0
    }
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
    /// The first answers: how many, and their shortest round trip, until
    /// they seed the no-load estimate.
    seed: (u32, f64),
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
    /// Answers to requests sent since the pending cut, until enough judge it.
    since_cut: Tally,
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
    /// Answers by the requests in flight when theirs was sent, in bands of
    /// powers of two (1, 2–3, 4–7, …), the older halved as they fill: what
    /// the endpoint refuses whatever the load (`usual_share`), and whether
    /// slow start's refusals came from above a cut (`mostly_answered_up_to`),
    /// and the round trip at lower loads (`not_a_queue`).
    by_band: [Tally; BANDS],
    /// When each band was last answered.
    band_answered: [Option<Instant>; BANDS],
    /// Whether the bands said none are refused whatever the load as each of
    /// the last two windows closed (see `usual_share`).
    none_refused_at_closes: [bool; 2],
    /// How low the last window judged put the no-load round trip, where
    /// surely below the estimate (see `quicker_in_a_row`).
    quicker_window: Option<f64>,
    peak: f64,
    changes: Vec<(Duration, u32)>,
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
            seed: (0, 0.0),
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
            since_cut: Tally::default(),
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
            by_band: [Tally::default(); BANDS],
            band_answered: [None; BANDS],
            none_refused_at_closes: [false; 2],
            quicker_window: None,
            peak: limit,
            changes: vec![(Duration::ZERO, limit as u32)],
            started: now,
        }
    }

    /// Starts from the limit an earlier run learned for the endpoint, and
    /// its floor, rather than from the initial limit: at `LEARNED_SHARE` of
    /// it, past slow start, growing back towards it and probing beyond.
    /// Returns where it starts. Only before any request was sent.
    pub fn start_from(&mut self, learned: u32, floor: u32) -> u32 {
        let learned = f64::from(learned).min(self.max);
        let start = (learned * LEARNED_SHARE).floor().max(self.limit);
        if start > self.limit {
            self.limit = start;
            self.slow_start = false;
            self.ceiling = learned;
            self.floor = f64::from(floor).clamp(1.0, start);
            self.peak = start;
            self.changes = vec![(Duration::ZERO, start as u32)];
        }
        self.limit().try_into().unwrap_or(u32::MAX)
    }

    /// Whether the limit says something of the endpoint worth starting the
    /// next run from: slow start found an edge (a refusal, a queue), or
    /// the limit reached its maximum.
    pub fn has_learned(&self) -> bool {
        !self.slow_start || self.limit >= self.max
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
    /// again): one slot below the edge, if a refusal found it lately. A
    /// refusal there would park its request for the server's Retry-After
    /// with nothing else left to send, holding the whole run open: probing
    /// beyond the edge only pays while a backlog keeps every slot in use.
    pub fn tail_limit(&self, now: Instant) -> usize {
        let fresh = self
            .last_refusal
            .is_some_and(|at| now.saturating_duration_since(at) < EDGE_FRESH);
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
    /// included.
    pub fn on_answer(&mut self, now: Instant, sent_at: Instant, in_flight: usize, signal: Signal) {
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
        }
        self.count_in_band(now, sent_at, in_flight, signal);
        self.tally(sent_at, in_flight, signal, now);
        // Losses are acted on at once, as the first answers that show them
        // come back (a refusal is quick): waiting for the window would let
        // the overshoot run a whole round trip longer.
        if self.pending.is_some() && sent_at >= self.last_change {
            count(&mut self.since_cut, signal);
        }
        if sent_at >= self.last_change.max(self.window.start) {
            count(&mut self.since_change, signal);
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
                && (self.pending.is_none() || massive)
                && self.overloaded(lost)
                && self.cut_for_losses(lost, now)
            {
                self.changed(now);
            }
        }
        if now >= self.window.start + 2 * self.window_len() {
            self.close_window(now);
        }
        self.note_change(before, now);
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
            self.grow();
        }
    }

    /// Drains a limit held by a queue, when one is due.
    fn drain_if_due(&mut self, now: Instant) {
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
        self.limit = drained;
        // A queue cut still unjudged is older than the drain's measure, and
        // the drain's answers at half the load would judge it against a
        // round trip many round trips old: one made in slow start, undone
        // so, started slow start over from 152 slots against 32.
        self.queue_cut = None;
        self.changed(now);
    }

    /// Once a limit's worth of requests sent during the drain are
    /// answered: their round trip lowers the no-load estimate, as far as
    /// two standard errors allow (`Tally::no_load_at_most`), and the limit
    /// goes back. Nothing else moves the estimate while a drain lasts: no
    /// window is judged, and what would raise it ends the drain first.
    fn end_drain_once_answered(&mut self, now: Instant) {
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
        self.limit = self.limit.max(drain.restore);
        let lowered = self.lower_no_load(before.min(lower));
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
    fn held_by_queue(&mut self, now: Instant) {
        self.queue_bound = true;
        if self.next_drain.is_none() {
            self.schedule_drain(now);
        }
    }

    /// A drain under way ends without its measure: the limit goes back.
    fn drop_drain(&mut self) {
        if let Some(drain) = self.drain.take() {
            self.limit = self.limit.max(drain.restore);
        }
    }

    /// The quickest round trip of the latest `SLOW_START_DELAY_SAMPLE`
    /// answers, once there are as many, the earliest send among them (where
    /// a queue delays them all, the limit then is where it began), and the
    /// mean of the requests in flight at their sends.
    fn quickest_latest(&self) -> Option<(f64, Instant, f64)> {
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
    /// back: if their round trip did not fall with the limit, and they come
    /// fewer a second than before it, the limit goes back to where it was,
    /// their round trip is the no-load one, and slow start goes on if the
    /// cut ended it.
    fn judge_queue_cut(&mut self, now: Instant) {
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
    fn cut_for_queue_shown_by(
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
    fn undo_queue_cuts(&mut self, before: f64, in_slow_start: bool, now: Instant) {
        self.queue_cut = None;
        self.queue_cuts = None;
        // The round trip is not the load's, so not drained either: a
        // drain's answers at a lower load would lower the estimate again.
        self.queue_bound = false;
        self.drop_drain();
        self.limit = self.limit.max(before);
        self.ceiling = self.ceiling.max(before);
        self.slow_start |= in_slow_start && self.pending.is_none();
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
    fn queue_cut_judging(&self) -> bool {
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
    fn back_to_queue_start(&mut self, now: Instant, target: f64, delayed: f64) {
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
            self.held_by_queue(now);
            self.queue_cut_made(before, point, delayed, true);
            self.changed(now);
        }
    }

    /// A round trip found not to be a queue's is the no-load one from now
    /// on, where it is longer than the estimate so far.
    fn raise_no_load(&mut self, rtt: f64) {
        self.base_rtt = Some(self.base_rtt.map_or(rtt, |base| base.max(rtt)));
    }

    /// The whole-number limit in force at `at`.
    fn limit_at(&self, at: Instant) -> f64 {
        let since = at.saturating_duration_since(self.started);
        let i = self.changes.partition_point(|(t, _)| *t <= since);
        self.changes
            .get(i.saturating_sub(1))
            .map_or(self.initial, |(_, limit)| f64::from(*limit))
    }

    /// The shortest round trip of the first answers, sent before any load
    /// was built (as many as the initial limit), is the first no-load
    /// estimate.
    fn seed_base(&mut self, rtt: f64) {
        if self.base_rtt.is_some() {
            return;
        }
        self.seed.0 += 1;
        self.seed.1 = if self.seed.0 == 1 {
            rtt
        } else {
            self.seed.1.min(rtt)
        };
        if f64::from(self.seed.0) >= self.initial {
            self.base_rtt = Some(self.seed.1);
        }
    }

    fn changed(&mut self, now: Instant) {
        self.last_change = now;
        self.restart_since_change();
        self.since_cut = Tally::default();
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

    fn grow(&mut self) {
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
        self.limit = (self.limit + per_round_trip / self.limit.floor()).min(self.max);
    }

    /// Counts the answer in the window its request was sent in, or the one
    /// after.
    fn tally(&mut self, sent_at: Instant, in_flight: usize, signal: Signal, now: Instant) {
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

    fn close_window(&mut self, now: Instant) {
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
        }
        self.most_answered = self.most_answered.max(tally.ok);
        // A window sent (in part) before the last change says nothing of it,
        // nor one sent while a drain holds the limit down.
        if self.window.start >= self.last_change
            && self.drain.is_none()
            && self.judge(tally, saturated, sending_went_on, now)
        {
            self.changed(now);
        }
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
    fn judge(&mut self, t: Tally, saturated: bool, sending_went_on: bool, now: Instant) -> bool {
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
        if self.pending.is_some() && self.since_cut.ok + self.since_cut.lost >= needed {
            let after = std::mem::take(&mut self.since_cut);
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

    /// More losses than the usual share explains: beyond two standard
    /// deviations of it over the requests they came from (any loss at all
    /// while the usual share is nil). Refusals come back before the answers
    /// sent with them, so the answers so far are no measure.
    fn overloaded(&self, lost: u32) -> bool {
        let n = self.at_risk();
        // Where one to three in flight are refused whatever the load, the
        // refusals come in bursts, and a round trip within one is refused
        // as densely as those few in flight were, far beyond the share over
        // all time: against answers in 3 s, each burst of ChaosLLM's
        // `stress_extreme` still cut the limit to one or two.
        let usual = self.usual_share().max(self.refused_at_few().unwrap_or(0.0));
        let p = if self.slow_start {
            usual.max(SLOW_START_NOISE)
        } else {
            usual
        };
        lost > 0 && f64::from(lost) > p * n + 2.0 * (n * p * (1.0 - p)).sqrt()
    }

    /// The requests that refusals since the last change came from: a round
    /// trip's worth (the limit), or those sent since, when more. A refusal
    /// comes back at once and its slot goes to the next request, so a round
    /// trip sends more than the limit where many are refused. Counted
    /// against the limit alone, a fifth refused whatever the load looked
    /// like overload at every other window against answers as slow as a
    /// model's, and cut after cut held the limit at a sixth of what the
    /// endpoint took.
    fn at_risk(&self) -> f64 {
        self.limit.max(f64::from(self.sent_since_change))
    }

    /// Counts an answer in the band of the requests in flight at its send.
    fn count_in_band(&mut self, now: Instant, sent_at: Instant, in_flight: usize, signal: Signal) {
        let band = band_of(in_flight as f64);
        let srtt = self.srtt.unwrap_or(f64::INFINITY);
        let tally = &mut self.by_band[band];
        match signal {
            Signal::Success => {
                let rtt = now.saturating_duration_since(sent_at).as_secs_f64();
                tally.answered(rtt, in_flight, srtt);
                self.band_answered[band] = Some(now);
            }
            _ => count(tally, signal),
        }
        if tally.ok + tally.lost >= BAND_MEMORY {
            tally.halve();
        }
        if band == 0 && signal == Signal::Success {
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

    /// Keeps what a queue cut from `before`, set off by answers of round
    /// trip `rtt`, needs to be judged again (`learn_from_alone`).
    fn note_queue_cuts(&mut self, rtt: f64, before: f64, in_slow_start: bool) {
        let cuts = self.queue_cuts.get_or_insert(QueueCuts {
            rtt,
            before,
            in_slow_start,
        });
        cuts.rtt = cuts.rtt.max(rtt);
        cuts.before = cuts.before.max(before);
    }

    /// The answers at the nearest lower load lately answered, at least
    /// `answers` of them: the band of requests in flight below `in_flight`
    /// whose mean is at most `QUEUE_JUDGED_BELOW` of it and at least
    /// `LOWER_LOAD_AT_LEAST`, answered within `BAND_FRESH_ROUND_TRIPS`.
    fn lower_load(&self, in_flight: f64, answers: u32, now: Instant) -> Option<Tally> {
        let fresh_for = BAND_FRESH_ROUND_TRIPS * self.window_len();
        let lower = (0..band_of(in_flight))
            .rev()
            .filter(|&band| {
                self.band_answered[band]
                    .is_some_and(|answered| now.saturating_duration_since(answered) < fresh_for)
            })
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
    fn within_lower_spread(&self, rtt: f64, in_flight: f64, now: Instant) -> bool {
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
    fn not_a_queue(&self, at: Tally, now: Instant) -> Option<f64> {
        let point = at.point()?;
        let lower = self.lower_load(point.1, MIN_JUDGED_COLLAPSED, now)?;
        let low = lower.point()?;
        let spread = 2.0 * at.log_rtt_error().hypot(lower.log_rtt_error());
        let generous = elasticity(low, point) + spread / (point.1 / low.1).ln();
        let pooled = (low.0 * f64::from(lower.ok) + point.0 * f64::from(at.ok))
            / f64::from(lower.ok + at.ok);
        (generous < QUEUE_ELASTICITY).then_some(pooled)
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
    fn usual_share(&self) -> f64 {
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
            .by_band
            .iter()
            .map(|t| upper_bound(t.lost, t.ok + t.lost))
            .fold(1.0, f64::min);
        usual.min(bound)
    }

    /// The least share refused in any band of requests in flight with
    /// enough answers, at most what is refused at one to three in flight
    /// where that says the endpoint refuses whatever the load; `None`
    /// while no band has enough.
    fn banded_share(&self) -> Option<f64> {
        let least = self
            .by_band
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
        let [one, two_or_three, ..] = &self.by_band;
        let lost = one.lost + two_or_three.lost;
        let n = one.ok + two_or_three.ok + lost;
        let share = f64::from(lost) / f64::from(n.max(1));
        (n >= BAND_SAMPLE && self.most_answered >= SERVED_MANY && share >= FEW_REFUSED)
            .then_some(share)
    }

    /// Whether the limit is within a slot of where the last cut found the
    /// edge.
    fn at_edge(&self) -> bool {
        (self.ceiling - 1.0..=self.ceiling + 1.0).contains(&self.limit)
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
    fn queueing(&mut self, t: &Tally) -> Option<f64> {
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
            t.ok >= MIN_QUEUE_JUDGED && rtt * (-t.two_sided_95() * t.log_rtt_error()).exp() > base;
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
    fn lower_no_load(&mut self, base: f64) -> bool {
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
        self.none_refused_at_closes = [false; 2];
        self.band_answered = [None; BANDS];
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
    fn cut_for_losses(&mut self, lost: u32, now: Instant) -> bool {
        if self.limit <= 1.0 && self.pending.is_some() {
            return false;
        }
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
        // Refusals before the endpoint has shown any room say nothing of
        // it: a burst of random refusals in a run's first second left the
        // limit at one or two slots, growing a slot a round trip, for
        // seconds after the burst. Slow start goes on from the cut limit
        // until a window at a full limit comes back clean, or until the
        // requests sent with no more in flight than the cut limit were
        // mostly answered: then the refusals came from the load above it.
        // (Against an endpoint with room for one or two, slow start's
        // overshoot puts refusals in every window, and without the second
        // test slow start went on for the whole run at three calls a row.)
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
        self.slow_start = self.slow_start
            && !self.served_full_window
            && !self.mostly_answered_up_to(self.limit());
        true
    }

    /// Whether the requests sent with at most `in_flight` on the wire were
    /// mostly answered rather than refused: those of the bands that lie
    /// wholly at or below it. While slow start lasts, the bands hold only
    /// its answers.
    fn mostly_answered_up_to(&self, in_flight: usize) -> bool {
        let whole = (in_flight + 1).ilog2() as usize;
        let (ok, lost) = self.by_band[..whole.min(BANDS)]
            .iter()
            .fold((0, 0), |(ok, lost), t| (ok + t.ok, lost + t.lost));
        ok + lost >= 2 && ok > lost
    }

    /// Shrinks the limit so the round trip comes back to `TOLERANCE` times
    /// the no-load one: with the server's own concurrency `c`, a limit `l`
    /// beyond it gives a ratio of `l / c`, so the new limit is `1.5 c`.
    fn cut_for_queue(&mut self, ratio: f64, now: Instant) {
        self.slow_start = false;
        self.held_by_queue(now);
        self.limit = (self.limit * (TOLERANCE / ratio).max(MAX_QUEUE_CUT)).max(1.0);
        self.floor = self.floor.min((self.limit * FLOOR_SHARE).floor().max(1.0));
        // Growth probes slowly from here rather than heading back.
        self.ceiling = self.limit;
    }

    /// The cut did not lower the losses: they are not the load's. Slow
    /// start, if the cut ended it, stays ended: growth probes beyond the
    /// limit restored rather than tripling it each round trip. A cut
    /// wrongly undone (a busy machine answers in clumps, and the share
    /// refused after a cut is noisy) would otherwise start the overshoot
    /// over, once from 12 to 28 slots against a server taking 8.
    fn undo(&mut self, cut: Cut, loss: f64) {
        self.limit = self.limit.max(cut.before);
        self.ceiling = self.ceiling.max(cut.ceiling_before);
        self.usual_loss = self.usual_loss.max(loss.min(MAX_USUAL_LOSS));
    }

    fn note_change(&mut self, before: f64, now: Instant) {
        if self.limit.floor() != before.floor() {
            self.peak = self.peak.max(self.limit);
            let at = now.saturating_duration_since(self.started);
            self.changes.push((at, self.limit.floor() as u32));
            if self.changes.len() > MAX_CHANGES {
                thin(&mut self.changes);
            }
        }
    }
}

/// Halves the changes after the first `MAX_CHANGES / 4`, keeping every
/// other one: a long run's record stays bounded, its start whole and the
/// rest at a resolution that halves each time it fills.
fn thin(changes: &mut Vec<(Duration, u32)>) {
    let keep = MAX_CHANGES / 4;
    let mut i = 0;
    changes.retain(|_| {
        i += 1;
        i <= keep || (i - keep).is_multiple_of(2)
    });
}

/// The share of `n` attempts that `lost` of them shows, at its highest
/// likely value: Wilson's score interval at two standard deviations. Few
/// attempts say little (none refused of ten allows up to 29 %).
fn upper_bound(lost: u32, n: u32) -> f64 {
    if n == 0 {
        return 1.0;
    }
    const Z2: f64 = 4.0;
    let n = f64::from(n);
    let p = f64::from(lost) / n;
    let spread = (p * (1.0 - p) / n + Z2 / (4.0 * n * n)).sqrt();
    ((p + Z2 / (2.0 * n) + 2.0 * spread) / (1.0 + Z2 / n)).min(1.0)
}

/// The band of a load of `in_flight` requests: powers of two.
fn band_of(in_flight: f64) -> usize {
    ((in_flight.max(1.0) as usize).ilog2() as usize).min(BANDS - 1)
}

/// Whether a round trip of `rtt` says requests wait in the server's queue.
fn queued(rtt: f64, base: f64) -> bool {
    rtt > (TOLERANCE * base).max(base + RTT_NOISE)
}

fn count(tally: &mut Tally, signal: Signal) {
    match signal {
        Signal::Success => tally.ok += 1,
        Signal::Overload => tally.lost += 1,
        Signal::Neutral => {}
    }
}

/// Binary search towards the ceiling, then probing beyond it with a step that
/// doubles each round trip (the distance covered so far), never more than half
/// the limit at once, nor less than `MIN_GROWTH` for each of `round_trips`
/// (see `GROWTH_ROUND_TRIP`).
fn growth_per_round_trip(limit: f64, ceiling: f64, round_trips: f64) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `ok` answered and `lost` refused.
    fn tally(ok: u32, lost: u32) -> Tally {
        Tally {
            ok,
            lost,
            ..Tally::default()
        }
    }

    /// A controller that has had answers to 4,000 requests sent with 1 to
    /// `levels` in flight, in turn, each refused when `refused(i, in_flight)`.
    fn answered(levels: usize, refused: impl Fn(usize, usize) -> bool) -> Controller {
        let start = Instant::now();
        let mut controller = Controller::new(4, 128, start);
        for i in 0..4000 {
            let in_flight = i % levels + 1;
            let sent_at = start + Duration::from_millis(i as u64);
            let signal = if refused(i, in_flight) {
                Signal::Overload
            } else {
                Signal::Success
            };
            controller.on_answer(
                sent_at + Duration::from_millis(100),
                sent_at,
                in_flight,
                signal,
            );
        }
        controller
    }

    #[test]
    fn slow_starts_first_overshoot_is_cut_to_where_its_refusals_began() {
        let start = Instant::now();
        let cut_at = |refused_in_flight: [usize; 4], cut_before: bool| {
            let mut controller = Controller::new(36, 128, start);
            controller.cut_before = cut_before;
            for (i, in_flight) in refused_in_flight.into_iter().enumerate() {
                let sent_at = start + Duration::from_millis(1 + i as u64);
                let now = sent_at + Duration::from_millis(1);
                controller.on_answer(now, sent_at, in_flight, Signal::Overload);
            }
            controller.limit()
        };
        // A server taking 32 refuses what was sent beyond it.
        assert_eq!(cut_at([33, 34, 35, 36], false), 32);
        // Refusals far below the limit show no edge; nor do they once the
        // endpoint has refused before: halved.
        assert_eq!(cut_at([3, 20, 30, 35], false), 18);
        assert_eq!(cut_at([33, 34, 35, 36], true), 18);
    }

    #[test]
    fn refusals_at_every_level_in_flight_are_the_endpoints_usual_share() {
        let random = answered(64, |i, _| i % 10 < 3);
        let usual = random.usual_share();
        assert!((0.25..0.35).contains(&usual), "{usual}");
        // A server taking 32 refuses only above it: no usual share.
        let capped = answered(40, |_, in_flight| in_flight > 32);
        assert_eq!(capped.usual_share(), 0.0);
    }

    #[test]
    fn a_share_refused_that_climbs_from_none_counts_a_round_trip_later() {
        let start = Instant::now();
        let mut controller = Controller::new(4, 128, start);
        let at = |ms: f64| start + Duration::from_secs_f64(ms / 1000.0);
        // Two seconds served at 48 in flight, answers in 100 ms.
        for ms in 0..2000 {
            let sent_at = at(f64::from(ms));
            controller.on_answer(
                sent_at + Duration::from_millis(100),
                sent_at,
                48,
                Signal::Success,
            );
        }
        controller.close_window(at(2099.0));
        assert_eq!(controller.usual_share(), 0.0);
        // The room falls: requests at the same load come back refused, 40
        // of them within 4 ms.
        for i in 0..40 {
            let sent_at = at(2100.0 + f64::from(i) * 0.1);
            controller.on_answer(
                sent_at + Duration::from_millis(1),
                sent_at,
                48,
                Signal::Overload,
            );
        }
        let banded = controller
            .banded_share()
            .expect("a band with enough answers");
        assert!(banded >= MIN_CUT, "{banded}");
        let usual = controller.usual_share();
        assert!(usual < MIN_CUT / 10.0, "{usual}");
        // A window that closes just after the first refusals still reads
        // them as the load's; one more, and the rise counts.
        controller.close_window(at(2110.0));
        assert!(controller.usual_share() < MIN_CUT / 10.0);
        controller.close_window(at(2210.0));
        let usual = controller.usual_share();
        assert!(usual >= MIN_CUT, "{usual}");
        // A share known before rises with the bands at once.
        let mut random = answered(64, |i, _| i % 10 < 3);
        let before = random.usual_share();
        let sent_at = start + Duration::from_millis(4100);
        for in_flight in [1, 2, 4, 8, 16, 32, 64] {
            for _ in 0..30 {
                random.on_answer(sent_at, sent_at, in_flight, Signal::Overload);
            }
        }
        let usual = random.usual_share();
        assert!(usual > before + 0.05, "{before} → {usual}");
    }

    #[test]
    fn refusals_are_weighed_against_the_requests_sent_not_the_limit() {
        // An endpoint known to refuse a fifth whatever the load; then a
        // round trip in which refusals come back at once and their slots
        // are used again, so that twice the limit is sent and a fifth of
        // that refused.
        let start = Instant::now();
        let mut controller = Controller::new(4, 128, start);
        let limit = controller.start_from(64, 32) as usize;
        controller.by_band[3] = tally(80, 20);
        let at = start + Duration::from_millis(10);
        for i in 0..2 * limit {
            controller.on_send(at, false);
            if i % 5 == 0 {
                controller.on_answer(at, at, limit, Signal::Overload);
            }
        }
        assert_eq!(controller.limit(), limit, "cut for the usual share");
        // Refusals of a third of what was sent are more than that share.
        for _ in 0..2 * limit / 3 {
            controller.on_answer(at, at, limit, Signal::Overload);
        }
        assert!(
            controller.limit() < limit,
            "not cut at {}",
            controller.limit()
        );
    }

    #[test]
    fn most_refused_at_one_in_flight_is_the_usual_share_once_many_were_served() {
        // A provider's burst refusing nearly everything, at any load.
        let start = Instant::now();
        let mut controller = Controller::new(4, 128, start);
        controller.by_band[0] = tally(8, 92);
        controller.by_band[1] = tally(10, 90);
        controller.by_band[5] = tally(30, 200);
        // A client that never had more answered at once (a shard started
        // into a server its siblings fill) takes them for load.
        controller.most_answered = SERVED_MANY - 1;
        assert_eq!(controller.usual_share(), MAX_USUAL_LOSS);
        controller.most_answered = SERVED_MANY;
        let usual = controller.usual_share();
        assert!((0.86..0.88).contains(&usual), "{usual}");
        // Refused less often at one to three in flight: no more than half
        // counts, however many were served.
        for few in 0..2 {
            controller.by_band[few] = tally(40, 60);
        }
        assert_eq!(controller.usual_share(), MAX_USUAL_LOSS);
    }

    #[test]
    fn a_burst_that_cuts_again_and_again_heads_back_to_what_was_answered() {
        // 80 in flight, then a provider's burst refusing every request sent
        // during it, each refusal back at once: cut after cut.
        let start = Instant::now();
        let mut controller = Controller::new(4, 256, start);
        controller.start_from(107, 8);
        let limit = controller.limit();
        assert_eq!(limit, 80);
        for _ in 0..limit {
            controller.on_send(start, true);
        }
        let burst = start + Duration::from_millis(10);
        for _ in 0..200 {
            controller.on_send(burst, true);
            controller.on_answer(burst, burst, limit, Signal::Overload);
        }
        // Cut at least twice (at most half the limit each time).
        assert!(controller.limit() <= 20, "cut to {}", controller.limit());
        // The requests sent before the burst were taken, and come back.
        let answered = start + Duration::from_secs(3);
        for _ in 0..limit {
            controller.on_answer(answered, start, limit, Signal::Success);
        }
        assert!(controller.ceiling >= 72.0, "{}", controller.ceiling);

        // Growth by round trips of answers at the limit: while refusals
        // stay beyond the usual share, slowly; once back to it, as in slow
        // start, up to half the ceiling within two round trips.
        let grown = |last_loss: f64| {
            let mut c = Controller::new(4, 256, start);
            (c.slow_start, c.limit, c.ceiling) = (false, 5.0, 80.0);
            c.last_loss = Some(last_loss);
            for _ in 0..2 {
                for _ in 0..c.limit() {
                    c.grow();
                }
            }
            c.limit
        };
        assert!(grown(0.95) < 15.0, "{}", grown(0.95));
        assert!(grown(0.0) >= 40.0, "{}", grown(0.0));
    }

    #[test]
    fn the_least_growth_follows_the_round_trip_up_to_an_eighth_of_the_limit() {
        assert_eq!(growth_per_round_trip(64.0, 64.0, 1.0), MIN_GROWTH);
        // Answers in 3 s: six times the least growth a round trip.
        let slow = growth_per_round_trip(64.0, 64.0, 6.0);
        assert!((slow - 6.0 * MIN_GROWTH).abs() < 1e-9, "{slow}");
        assert_eq!(growth_per_round_trip(8.0, 8.0, 6.0), 1.0);
        // Never less than a round trip's, however quick the answers.
        assert_eq!(growth_per_round_trip(64.0, 64.0, 0.2), MIN_GROWTH);
        // Heading back to the ceiling, half the distance as before.
        assert_eq!(growth_per_round_trip(40.0, 64.0, 6.0), 12.0);
    }

    #[test]
    fn a_band_with_few_refusals_bounds_the_usual_share() {
        // Slow start overshot a server taking 8: the band of 8 to 15 in
        // flight holds enough answers, half of them refused; the band
        // below, fewer answers and hardly a refusal.
        let start = Instant::now();
        let mut controller = Controller::new(4, 64, start);
        controller.by_band[2] = tally(36, 2);
        controller.by_band[3] = tally(64, 63);
        let usual = controller.usual_share();
        assert!(usual < 0.2, "{usual}");
        assert!((0.15..0.2).contains(&upper_bound(2, 38)));
        assert!((0.25..0.3).contains(&upper_bound(0, 10)), "few say little");
    }

    #[test]
    fn the_floor_follows_what_a_window_held() {
        // A busy machine answers in clumps: a window of 7 answers, none
        // refused, closes after slow start has grown the limit to 26.
        let start = Instant::now();
        let mut controller = Controller::new(4, 64, start);
        controller.limit = 26.0;
        let clean = tally(7, 0);
        controller.judge(clean, true, true, start);
        assert_eq!(controller.floor(), 3);
    }

    #[test]
    fn cuts_the_floor_holds_back_round_trip_after_round_trip_lower_it() {
        // Past slow start at a floor of 32 from a window at 64, answers in
        // 100 ms; the endpoint's room has fallen to 16, and between two
        // cuts growth heads back towards 65, so that each cut comes at 35.
        let held_back = |every: Duration| {
            let start = Instant::now();
            let mut controller = Controller::new(4, 128, start);
            (controller.slow_start, controller.floor, controller.ceiling) = (false, 32.0, 65.0);
            controller.srtt = Some(0.1);
            for i in 0..6 {
                controller.limit = 35.0;
                controller.cut_for_losses(17, start + every * i);
            }
            controller.limit()
        };
        // Within a burst's few round trips the floor holds.
        assert_eq!(held_back(Duration::from_millis(20)), 32);
        // Refused round trip after round trip, the floor gives way.
        assert!(held_back(Duration::from_millis(100)) < 20);
    }

    #[test]
    fn a_queue_cut_is_useless_where_the_round_trip_did_not_follow_the_load() {
        let cut = QueueCut {
            before: 40.0,
            point_before: (2.0, 40.0),
            after: 20.0,
            in_slow_start: false,
            rate_before: None,
        };
        // A queue: half the requests in flight, half the round trip.
        assert_eq!(cut.useless((1.0, 20.0)), Some(false));
        // Answers that vary by nature: the same mean at half the load.
        assert_eq!(cut.useless((1.9, 20.0)), Some(true));
        // A batching server: each request in the batch slows the step by a
        // share, so half the load answers a little sooner but far fewer a
        // second.
        assert_eq!(cut.useless((1.7, 20.0)), Some(true));
        // Too small a fall of the load to tell.
        assert_eq!(cut.useless((1.5, 36.0)), None);
    }

    /// A controller whose answers at 8 to 15 in flight (at 10) took
    /// `rtts`, just now.
    fn answered_at_ten(rtts: &[f64], now: Instant) -> Controller {
        let mut controller = Controller::new(4, 256, now);
        for &rtt in rtts {
            controller.by_band[3].answered(rtt, 10, f64::INFINITY);
        }
        controller.band_answered[3] = Some(now);
        controller
    }

    fn at_twenty(rtts: &[f64]) -> Tally {
        let mut tally = Tally::default();
        for &rtt in rtts {
            tally.answered(rtt, 20, f64::INFINITY);
        }
        tally
    }

    /// Answers to requests sent with nothing else in flight, a second
    /// apart from `start`, each after its round trip in `rtts`.
    fn answer_alone(controller: &mut Controller, start: Instant, rtts: &[f64]) {
        for (i, &rtt) in rtts.iter().enumerate() {
            let sent_at = start + Duration::from_secs(i as u64);
            let answered = sent_at + Duration::from_secs_f64(rtt);
            controller.on_answer(answered, sent_at, 1, Signal::Success);
        }
    }

    #[test]
    fn answers_to_requests_sent_alone_undo_queue_cuts_they_find_no_queue() {
        let start = Instant::now();
        // Cut from 14 slots to 2 in slow start for round trips of `rtt`,
        // against an estimate of 0.1 s; then requests sent alone answer in
        // 0.4 s on average.
        let cut_then_alone = |rtt: f64| {
            let mut controller = Controller::new(4, 256, start);
            controller.slow_start = false;
            controller.base_rtt = Some(0.1);
            controller.note_queue_cuts(rtt, 14.0, true);
            controller.limit = 2.0;
            controller.queue_bound = true;
            answer_alone(&mut controller, start, &[0.3, 0.5, 0.4, 0.4]);
            controller
        };
        // The estimate was the quickest of a long tail, and 0.3 s is no
        // queue's.
        let controller = cut_then_alone(0.3);
        let base = controller.base_rtt.unwrap();
        assert!((base - 0.4).abs() < 1e-9, "{base}");
        assert_eq!(controller.limit(), 14);
        assert!(controller.slow_start && !controller.queue_bound);
        // Against a server that serves one at a time, a cut for round trips
        // of 0.9 s stays.
        let controller = cut_then_alone(0.9);
        assert_eq!(controller.limit(), 2);
        assert!(!controller.slow_start && controller.queue_bound);
    }

    #[test]
    fn a_window_of_a_few_answers_is_judged_by_students_t() {
        let mut controller = Controller::new(4, 128, Instant::now());
        controller.base_rtt = Some(0.1);
        // Whatever the requests in flight: only the round trips count here.
        let window = at_twenty;
        // Four answers 1.65 times the no-load round trip on average, spread
        // so that two standard errors would call them surely slower and t at
        // three degrees of freedom does not.
        let spread = window(&[0.10, 0.12, 0.19, 0.25]);
        assert!(spread.point().unwrap().0 * (-2.0 * spread.log_rtt_error()).exp() > 0.1);
        assert_eq!(controller.queueing(&spread), None);
        // Alike, they are a queue's.
        assert!(controller.queueing(&window(&[0.165; 4])).is_some());
        // Two alike are too few; three are not.
        assert_eq!(controller.queueing(&window(&[0.3; 2])), None);
        assert!(controller.queueing(&window(&[0.3; 3])).is_some());
    }

    #[test]
    fn the_no_load_estimate_falls_only_for_two_quicker_windows_in_a_row() {
        let now = Instant::now();
        let mut controller = answered_at_ten(&[0.1; 8], now);
        controller.base_rtt = Some(0.1);
        // Alike answers, so that each window's mean is as low as it says.
        let window = |rtt: f64| at_twenty(&[rtt; 8]);
        controller.queueing(&window(0.07));
        assert_eq!(controller.base_rtt, Some(0.1));
        // An ordinary window between two quick ones.
        controller.queueing(&window(0.1));
        controller.queueing(&window(0.07));
        assert_eq!(controller.base_rtt, Some(0.1));
        assert_eq!(controller.by_band[3].ok, 8);
        // Two in a row: the higher of the two, and the later far enough below
        // the estimate that the answers kept by band are of another server.
        controller.queueing(&window(0.08));
        let base = controller.base_rtt.unwrap();
        assert!((base - 0.08).abs() < 1e-6, "{base}");
        assert_eq!(controller.by_band[3].ok, 0);
    }

    #[test]
    fn a_runs_last_answers_are_no_measure_of_a_queue() {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        // 64 requests in the first 50 ms against a no-load round trip of
        // 0.1 s, 63 answered in 0.16 s and the last, sent at 50 ms, back
        // at 0.4 s; a request sent after the window's own, or none.
        let limit_after = |sent_after: bool| {
            let mut controller = Controller::new(64, 128, start);
            controller.slow_start = false;
            controller.base_rtt = Some(0.1);
            controller.srtt = Some(0.1);
            for i in 0..64 {
                controller.on_send(ms(i * 50 / 64), false);
            }
            if sent_after {
                controller.on_send(ms(300), false);
            }
            for i in 0..63 {
                let sent_at = ms(i * 50 / 64);
                controller.on_answer(
                    sent_at + Duration::from_millis(160),
                    sent_at,
                    64,
                    Signal::Success,
                );
            }
            controller.on_answer(ms(400), ms(50), 64, Signal::Success);
            controller.limit()
        };
        // Requests went on: the round trip is a queue's.
        assert!(limit_after(true) < 64);
        // None followed: the answers still to come were the slowest.
        assert_eq!(limit_after(false), 64);
    }

    /// A controller after slow start whose queue cut `cut` waits to be
    /// judged, with a no-load and a smoothed round trip of `rtts`.
    fn cut_pending(start: Instant, rtts: (f64, f64), cut: QueueCut) -> Controller {
        let mut controller = Controller::new(4, 128, start);
        controller.slow_start = false;
        (controller.base_rtt, controller.srtt) = (Some(rtts.0), Some(rtts.1));
        controller.limit = cut.after;
        controller.queue_cut = Some(cut);
        controller
    }

    #[test]
    fn a_queue_cut_its_answers_cannot_judge_is_cut_until_they_can() {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        // A cut from 16 to 3.3 by answers whose load is taken as 3.8 in
        // flight: the 3 since are too close to it to judge.
        let undecided = |in_slow_start: bool| {
            let cut = QueueCut {
                before: 16.0,
                point_before: (0.24, 3.8),
                after: 3.3,
                in_slow_start,
                rate_before: None,
            };
            let mut controller = cut_pending(start, (0.1, 0.3), cut);
            controller.queue_cuts = Some(QueueCuts {
                rtt: 0.24,
                before: 16.0,
                in_slow_start,
            });
            controller
        };
        // Answers in three times the no-load round trip, one at a time, so
        // that no window holds enough of them to be judged.
        let answer = |controller: &mut Controller, at: &mut u64, in_flight: usize, count: u64| {
            for _ in 0..count {
                controller.on_answer(ms(*at), ms(*at - 300), in_flight, Signal::Success);
                *at += 200;
            }
        };
        let mut at = 1000;
        let mut controller = undecided(true);
        answer(&mut controller, &mut at, 3, 7);
        assert_eq!(controller.limit(), 3, "seven answers are not yet many");
        answer(&mut controller, &mut at, 3, 1);
        assert!(
            controller.limit < QUEUE_JUDGED_BELOW * 3.8,
            "{}",
            controller.limit
        );
        // Sent since that cut, at two in flight, the round trip is the same:
        // no queue's, so the cuts are undone and slow start goes on.
        at += 300;
        answer(&mut controller, &mut at, 2, 4);
        assert_eq!(controller.limit(), 16);
        assert!(controller.slow_start);
        assert_eq!(controller.base_rtt, Some(0.3));
        // A cut made after slow start is left to the windows.
        let (mut controller, mut at) = (undecided(false), 1000);
        answer(&mut controller, &mut at, 3, 16);
        assert_eq!(controller.limit(), 3);
    }

    #[test]
    fn a_queue_cut_whose_answers_come_as_many_a_second_stands() {
        let start = Instant::now();
        // Slow start's cut from 14 to 2.4, set off by answers taken as 0.8 s
        // at 3.4 in flight, coming 3.3 a second.
        let cut = |rate_before: Option<f64>| {
            let cut = QueueCut {
                before: 14.0,
                point_before: (0.8, 3.4),
                after: 2.4,
                in_slow_start: true,
                rate_before,
            };
            cut_pending(start, (0.35, 0.8), cut)
        };
        // Four answers at two in flight, 0.7 s each: a round trip that fell
        // by an eighth for a load that fell by two fifths.
        let answer_every = |controller: &mut Controller, gap_ms: u64| {
            for i in 0..4 {
                let at = start + Duration::from_millis(1000 + i * gap_ms);
                controller.on_answer(at, at - Duration::from_millis(700), 2, Signal::Success);
            }
        };
        // As many a second as before: a server serving one at a time.
        let mut controller = cut(Some(3.3));
        answer_every(&mut controller, 300);
        assert_eq!(controller.limit(), 2);
        assert_eq!(controller.base_rtt, Some(0.35));
        // Fewer a second, in proportion to the load: no queue's.
        let mut controller = cut(Some(3.3));
        answer_every(&mut controller, 520);
        assert_eq!(controller.limit(), 14);
        // Without a rate before, the round trip alone decides, as it did.
        let mut controller = cut(None);
        answer_every(&mut controller, 300);
        assert_eq!(controller.limit(), 14);
    }

    #[test]
    fn a_round_trip_that_rose_far_less_than_the_load_is_not_a_queue() {
        let now = Instant::now();
        let controller = answered_at_ten(&[1.0; 16], now);
        // A server that batches: twice the load, each answer 15 % slower;
        // the no-load estimate is the mean of both loads' answers.
        let batching = controller.not_a_queue(at_twenty(&[1.15; 16]), now);
        assert!(
            batching.is_some_and(|rtt| (rtt - 1.075).abs() < 1e-9),
            "{batching:?}"
        );
        // A queue: twice the load, twice the round trip.
        assert_eq!(controller.not_a_queue(at_twenty(&[2.0; 16]), now), None);
        // Four answers from half to twice the mean rise as little, but their
        // spread could hide a queue's rise.
        let spread = at_twenty(&[0.5, 0.8, 1.3, 2.0]);
        assert_eq!(controller.not_a_queue(spread, now), None);
        // A lower load answered long ago says nothing of the server now.
        let later = now + 20 * WINDOW_WITHOUT_RTT;
        assert_eq!(controller.not_a_queue(at_twenty(&[1.15; 16]), later), None);
    }

    #[test]
    fn an_answer_within_the_spread_at_a_lower_load_is_slow_by_nature() {
        let now = Instant::now();
        let varied = answered_at_ten(&[0.5, 0.75, 1.0, 1.25, 1.5, 0.6, 1.4, 1.0], now);
        assert!(varied.within_lower_spread(1.5, 20.0, now));
        assert!(!varied.within_lower_spread(2.5, 20.0, now));
        let even = answered_at_ten(&[1.0; 8], now);
        assert!(!even.within_lower_spread(1.5, 20.0, now), "a queue's");
    }

    #[test]
    fn a_long_record_of_changes_is_thinned_past_its_start() {
        let mut changes: Vec<_> = (0..MAX_CHANGES as u32 + 1)
            .map(|i| (Duration::from_millis(u64::from(i)), i))
            .collect();
        thin(&mut changes);
        let keep = MAX_CHANGES / 4;
        assert_eq!(changes.len(), keep + (MAX_CHANGES + 1 - keep) / 2);
        assert_eq!(changes[keep - 1].1 as usize, keep - 1, "the start whole");
        assert_eq!(changes[keep].1 as usize, keep + 1, "every other one after");
    }
}
