//! A provider's rate windows (requests and tokens a minute, and Anthropic's
//! input and output tokens a minute apart) as its answers report them,
//! followed between answers, so that requests leave while the window has
//! room for them and wait, at its rate, once it has none.
//!
//! An answer says what was left of a window when the provider took the
//! request; what was sent after that request is not counted in it, and is
//! taken off here. The window's refill while the request was on its way is
//! not added, so the copy runs a little behind the provider's and a request
//! that leaves when it has room finds room there. Providers count refused
//! requests against the window (OpenAI says so), so sending into an empty
//! one costs more than the refusal: it keeps the window empty.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;
use tokio::time::Instant;
use weir_formats::http_headers::{Quota, RateReport, wait_of_seconds};

pub struct ProviderWindows {
    requests: Option<Mirror>,
    /// Windows of all tokens, of input tokens and of output tokens.
    tokens: [TokenWindow; 3],
    /// Requests sent so far, the number of the next one.
    sent: u64,
    /// Of each window's room and refill, what is this endpoint's at the
    /// least: a shard of a run whose shards share the key follows its share
    /// of the window (see `Mirror::follow`).
    share: f64,
    /// How many requests the request window's fall shows for each of this
    /// endpoint's: the shards running, where their rates are alike (see
    /// `ProviderWindows::share`).
    sharers: CostFromReports,
}

/// A request as the windows follow it: its number among those sent, and
/// how many sent before it were on their way when it left. Those may reach
/// the provider after it, so the report of its answer may not count them,
/// even when their own answers came first; one answered before it left
/// reached the provider before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub number: u64,
    unanswered_before: usize,
}

impl Default for ProviderWindows {
    fn default() -> Self {
        Self::shared_by(1)
    }
}

/// What one request asked of the token windows on arrival, and what the
/// endpoint's answers have used on average, as far as each is known.
#[derive(Debug, Default, Clone, Copy)]
pub struct RequestTokens {
    pub asked: Option<Tokens>,
    pub used_on_average: Option<Tokens>,
}

/// Tokens of a request's text and of its answer.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Tokens {
    pub input: f64,
    pub output: f64,
}

impl Tokens {
    pub fn total(self) -> f64 {
        self.input + self.output
    }
}

/// Which of a request's tokens a window counts.
#[derive(Clone, Copy)]
enum Counted {
    All,
    Input,
    Output,
}

impl Counted {
    fn of(self, tokens: Tokens) -> f64 {
        match self {
            Counted::All => tokens.total(),
            Counted::Input => tokens.input,
            Counted::Output => tokens.output,
        }
    }

    fn quota(self, report: &RateReport) -> Option<Quota> {
        match self {
            Counted::All => report.tokens,
            Counted::Input => report.input_tokens,
            Counted::Output => report.output_tokens,
        }
    }
}

/// A token window, what its reports show requests take of it, and what
/// they ask of it.
struct TokenWindow {
    counted: Counted,
    mirror: Option<Mirror>,
    cost: CostFromReports,
    /// What the requests reported on asked of it on arrival, on average.
    asked: Option<f64>,
}

impl TokenWindow {
    fn new(counted: Counted) -> Self {
        Self {
            counted,
            mirror: None,
            cost: CostFromReports::default(),
            asked: None,
        }
    }
}

/// One window, as weir last knew it: this endpoint's share of it, for a
/// shard of a run whose shards share the key.
struct Mirror {
    per_second: f64,
    /// What the window held at `at`, less what was sent since; below zero
    /// when more was sent than it held.
    level: f64,
    /// The most it was ever reported to hold: it refills no further than
    /// its share of that, or one request when that is more.
    most: f64,
    share: f64,
    at: Instant,
    /// What a request takes of it.
    cost: f64,
}

/// What a report leaves uncounted: the requests sent after its own, those
/// sent before it that were on their way when it left (the provider may
/// have taken them after it), and what each request takes of the window.
struct Uncounted {
    after: f64,
    unanswered_before: f64,
    cost: f64,
}

impl ProviderWindows {
    /// Windows whose room and refill `shards` clients share alike (0 or 1:
    /// this one alone).
    pub fn shared_by(shards: u32) -> Self {
        Self {
            requests: None,
            tokens: [Counted::All, Counted::Input, Counted::Output].map(TokenWindow::new),
            sent: 0,
            share: 1.0 / f64::from(shards.max(1)),
            sharers: CostFromReports::default(),
        }
    }

    /// A request leaves at `now`, `unanswered` others on their way; returns
    /// what `follow` needs of it.
    pub fn dispatched(&mut self, now: Instant, unanswered: usize) -> Sent {
        for mirror in self.mirrors_mut() {
            mirror.take(now);
        }
        let sent = Sent {
            number: self.sent,
            unanswered_before: unanswered,
        };
        self.sent += 1;
        sent
    }

    /// When the windows have room for the next request, if not at `now`.
    pub fn ready_at(&self, now: Instant) -> Option<Instant> {
        self.mirrors()
            .filter_map(|mirror| mirror.ready_at(now))
            .max()
    }

    /// Request `sent_as` was refused: it took nothing of the token window,
    /// so the window's fall over the requests about it says less than what
    /// requests take.
    pub fn refused(&mut self, sent_as: u64) {
        for window in &mut self.tokens {
            window.cost.refused(sent_as);
        }
        self.sharers.refused(sent_as);
    }

    /// This endpoint's share of each window: one over the requests the
    /// request window's fall shows for each of its own, between the
    /// configured share and the whole. A run's shards need not all run at
    /// once (a Kubernetes Job of 100 completions run ten at a time, a
    /// throttled Slurm array, the last shards of any run): one shard of
    /// sixteen running alone used 0.87 of the window at the configured
    /// share, 0.99 at the share read (`tests`, `shards_sharing_a_window_…`).
    /// The fall is read as if the window had let none of its refill go
    /// while full: where it had, the requests are overcounted and the share
    /// read low, never high. Read from the fall less that refill, two
    /// shards of a hundred running together, the window full at first,
    /// each saw fewer requests than its own and took more than half: 157
    /// refused in 20 s, none so. Only a shard reads the fall (`follow`).
    fn share(&self) -> f64 {
        self.sharers.learned().map_or(self.share, |sharers| {
            (1.0 / sharers.at_most).clamp(self.share, 1.0)
        })
    }

    /// Takes in the report of the answer to request `sent`, with what
    /// it asked of the token windows and what the endpoint's answers have
    /// used on average, as far as each is known (`tokens`). A request is
    /// counted against a token window at what the window's reports show
    /// requests take, or at what they used when that is more; until the
    /// reports have shown it (and while they show only what requests take
    /// at the least), at what requests ask, when that is more: a provider
    /// that takes each request's `max_tokens` up front would otherwise see
    /// a run's first hundred requests overdraw a window that holds fewer of
    /// them. Returns how long to hold every request for
    /// a spent window whose rate the answer does not give: until it resets.
    ///
    /// Requests sent together, on connections of their own, may reach the
    /// provider out of order, so a report may count some sent after it and
    /// miss some sent before (dozens while new connections open), whose
    /// answers may even have come first: see `Mirror::follow`.
    pub fn follow(
        &mut self,
        now: Instant,
        report: &RateReport,
        sent: Sent,
        tokens: RequestTokens,
    ) -> Option<Duration> {
        let sent_as = sent.number;
        let after = self.sent.saturating_sub(sent_as + 1) as f64;
        let unanswered_before = sent.unanswered_before as f64;
        // Only a shard has peers to read off the fall.
        if self.share < 1.0
            && let Some(quota) = report.requests
            && let Some(per_minute) = quota.per_minute
        {
            self.sharers
                .observe(now, sent_as, quota.remaining as f64, per_minute / 60.0);
        }
        let share = self.share();
        let mut hold = None;
        if let Some(quota) = report.requests {
            let uncounted = Uncounted {
                after,
                unanswered_before,
                cost: 1.0,
            };
            hold = hold.max(follow_quota(
                &mut self.requests,
                now,
                &quota,
                share,
                uncounted,
            ));
        }
        for window in &mut self.tokens {
            let counted = window.counted;
            if let Some(asked) = tokens
                .asked
                .map(|t| counted.of(t))
                .filter(|a| a.is_finite() && *a > 0.0)
            {
                window.asked = Some(match window.asked {
                    Some(mean) => mean + ASKED_WEIGHT * (asked - mean),
                    None => asked,
                });
            }
            let Some(quota) = counted.quota(report) else {
                continue;
            };
            if let Some(per_minute) = quota.per_minute {
                window
                    .cost
                    .observe(now, sent_as, quota.remaining as f64, per_minute / 60.0);
            }
            let learned = window.cost.learned();
            // A fall that may have missed refill the window let go says what
            // requests take at the least.
            let asked = window.asked.filter(|_| learned.is_none_or(|l| l.at_least));
            // The window's fall counts the other shards' requests as well.
            let learned = learned.map(|l| l.per_request * share);
            let used = tokens.used_on_average.map(|t| counted.of(t));
            let cost = [used, learned, asked]
                .into_iter()
                .flatten()
                .reduce(f64::max);
            let uncounted = Uncounted {
                after,
                unanswered_before,
                cost: cost.unwrap_or(0.0),
            };
            hold = hold.max(follow_quota(
                &mut window.mirror,
                now,
                &quota,
                share,
                uncounted,
            ));
        }
        hold
    }

    fn mirrors(&self) -> impl Iterator<Item = &Mirror> {
        std::iter::once(&self.requests)
            .chain(self.tokens.iter().map(|w| &w.mirror))
            .flatten()
    }

    fn mirrors_mut(&mut self) -> impl Iterator<Item = &mut Mirror> {
        std::iter::once(&mut self.requests)
            .chain(self.tokens.iter_mut().map(|w| &mut w.mirror))
            .flatten()
    }
}

/// Follows one window's report with what a request takes of it, or, where
/// that or the window's rate is not known, returns how long a spent window
/// holds every request: until it resets.
fn follow_quota(
    mirror: &mut Option<Mirror>,
    now: Instant,
    quota: &Quota,
    share: f64,
    uncounted: Uncounted,
) -> Option<Duration> {
    match quota.per_minute {
        Some(per_minute) if uncounted.cost.is_finite() && uncounted.cost > 0.0 => {
            Mirror::follow(mirror, now, quota, per_minute, share, uncounted);
            None
        }
        _ if quota.remaining == 0 => quota.reset,
        _ => None,
    }
}

/// What a request takes of a token window, read off the window's fall over
/// the last few hundred requests: a provider may count a request at more
/// than its answer's `usage` (OpenAI and Anthropic count its `max_tokens`
/// up front), and the window is what it counts by.
///
/// Requests sent together reach the provider out of order, by dozens at the
/// start of a run, when new connections open: one report may count many
/// requests sent after it and miss many sent before. A fall read between
/// neighbouring reports is mostly that noise; read over hundreds of requests
/// it is a few per cent.
#[derive(Default)]
struct CostFromReports {
    /// Reports `STEP` requests apart, or less where the window took in
    /// half its room between them; the oldest about `SPAN` requests back.
    checkpoints: VecDeque<Checkpoint>,
    /// Refused requests since the oldest checkpoint: they took nothing.
    refused: BTreeSet<u64>,
    /// The most the window was ever reported to hold.
    most: f64,
    estimate: Option<Learned>,
}

/// What a request takes of a token window, as read off its fall.
#[derive(Clone, Copy)]
struct Learned {
    per_request: f64,
    /// Whether the window may have let go enough of its refill, being
    /// full, over the requests read, for `per_request` to be only what they
    /// took at the least.
    at_least: bool,
    /// What they took at the most: had the window let go none of its
    /// refill.
    at_most: f64,
}

struct Checkpoint {
    sent_as: u64,
    left: f64,
    at: Instant,
    /// What the window took in of its refill from the first checkpoint to
    /// this one, at the least (see `observe`).
    absorbed: f64,
    /// What the window may have let go of its refill, being full, from the
    /// first checkpoint to this one, at the most.
    let_go: f64,
}

/// Weight of the newest request in what requests ask on average.
const ASKED_WEIGHT: f64 = 0.1;
/// Requests between checkpoints, at the least, while the refill between
/// them is small.
const STEP: u64 = 16;
/// Requests a fall is read over once that many have been reported.
const SPAN: u64 = 512;
/// Requests a fall is read over at the least.
const MIN_SPAN: u64 = 128;
/// A fall that may have missed more than this share of what it took, in
/// refill a full window let go, says only what requests take at the least.
const UNSURE: f64 = 0.05;

impl CostFromReports {
    /// Reads the report of request `sent_as`, `remaining` left, the window
    /// refilling `per_second`.
    fn observe(&mut self, now: Instant, sent_as: u64, remaining: f64, per_second: f64) {
        self.most = self.most.max(remaining);
        let (absorbed, let_go) = match self.checkpoints.back() {
            Some(last) if sent_as <= last.sent_as => return,
            // A full window lets its refill go, and a window refilling from
            // `left` lets go all beyond its capacity; what it took in is
            // known exactly while it cannot have been full, and is at least
            // the room it had otherwise. That bound undercounts a window
            // drained as fast as it refills, which may take in many times
            // its room between checkpoints a few seconds apart: a
            // checkpoint is kept before the refill since the last reaches
            // half the room, so that the bound only binds where the window
            // may truly have filled.
            Some(last) => {
                let refilled = now.saturating_duration_since(last.at).as_secs_f64() * per_second;
                let room = (self.most - last.left).max(0.0);
                if sent_as < last.sent_as + STEP && refilled <= room / 2.0 {
                    return;
                }
                (
                    last.absorbed + refilled.min(room),
                    last.let_go + (refilled - room).max(0.0),
                )
            }
            None => (0.0, 0.0),
        };
        self.checkpoints.push_back(Checkpoint {
            sent_as,
            left: remaining,
            at: now,
            absorbed,
            let_go,
        });
        while self
            .checkpoints
            .get(1)
            .is_some_and(|next| next.sent_as + SPAN <= sent_as)
        {
            self.checkpoints.pop_front();
        }
        let first = &self.checkpoints[0];
        self.refused = self.refused.split_off(&(first.sent_as + 1));
        let span = sent_as - first.sent_as;
        if span < MIN_SPAN {
            return;
        }
        let refused = self.refused.range(..=sent_as).count() as u64;
        let taking = span.saturating_sub(refused);
        if taking == 0 {
            return;
        }
        let taken = first.left - remaining + (absorbed - first.absorbed);
        let let_go = let_go - first.let_go;
        self.estimate = Some(Learned {
            per_request: (taken / taking as f64).max(0.0),
            at_least: let_go > taken * UNSURE,
            at_most: ((taken + let_go) / taking as f64).max(0.0),
        });
    }

    fn refused(&mut self, sent_as: u64) {
        if self
            .checkpoints
            .front()
            .is_none_or(|first| sent_as > first.sent_as)
        {
            self.refused.insert(sent_as);
        }
    }

    fn learned(&self) -> Option<Learned> {
        self.estimate
            .filter(|learned| learned.per_request.is_finite() && learned.per_request > 0.0)
    }
}

impl Mirror {
    /// Sets the copy by a report. Requests reach the provider out of order,
    /// so a report is of a moment between two bounds: the provider took
    /// every request sent before its own (the copy can hold no more than
    /// the report less those sent after it), or none of those on their way
    /// when it left (it holds no less than that, less them too). The copy,
    /// which has followed every request and the refill since the reports
    /// before, is kept where it lies between the two: a report that
    /// overtook others, read as the latest word, sent dozens into a window
    /// that had no room for them. Answers come back out of order too, so
    /// the lower bound counts out those answered since the report's own
    /// left: counting out only those still unanswered, three answered
    /// before a report that had overtaken them (on a loaded machine) raised
    /// the copy by three requests the window did not have, and all three
    /// were refused.
    ///
    /// A shard of a run whose shards share the key copies its `share` of
    /// the window (`ProviderWindows::share`): of what each report says is
    /// left, of the most it held and of its refill; its own requests take
    /// from that share whole. Shards that start together thus split the
    /// room rather than each spending all of it, and one whose peers are
    /// done or slower finds its share of the room they left at every
    /// report, so the shards together keep the window as busy as one run
    /// does. Reading each of this shard's requests as one from every shard
    /// did neither: a shard whose copy had refilled to the whole window
    /// sent 256 at once, counted 1,024 taken and held every request for up
    /// to 27 s; four shards of a 3,000-row run against 6,000 requests a
    /// minute took twice as long as one run, eight shards five times.
    fn follow(
        mirror: &mut Option<Mirror>,
        now: Instant,
        quota: &Quota,
        per_minute: f64,
        share: f64,
        uncounted: Uncounted,
    ) {
        let reported = quota.remaining as f64;
        let at_most = reported * share - uncounted.after * uncounted.cost;
        let at_least = at_most - uncounted.unanswered_before * uncounted.cost;
        let (level, most) = match mirror.as_ref() {
            Some(known) => (
                known.level_at(now).clamp(at_least, at_most),
                known.most.max(reported),
            ),
            None => (at_most, reported),
        };
        *mirror = Some(Mirror {
            per_second: per_minute * share / 60.0,
            level,
            most,
            share,
            at: now,
            cost: uncounted.cost,
        });
    }

    fn level_at(&self, now: Instant) -> f64 {
        let refilled = now.saturating_duration_since(self.at).as_secs_f64() * self.per_second;
        // It holds a whole request at least, though never seen to: waiting
        // for more than it holds would wait for ever, with no answer coming
        // to say more.
        (self.level + refilled).min((self.most * self.share).max(self.cost))
    }

    fn ready_at(&self, now: Instant) -> Option<Instant> {
        let short = self.cost - self.level_at(now);
        (short > 0.0).then(|| now + wait_of_seconds(short / self.per_second).unwrap_or_default())
    }

    fn take(&mut self, now: Instant) {
        self.level = self.level_at(now) - self.cost;
        self.at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_formats::http_headers::MAX_WAIT;

    /// Answers have used `tokens` on average; what requests ask is not known.
    fn used(tokens: f64) -> RequestTokens {
        RequestTokens {
            asked: None,
            used_on_average: Some(input(tokens)),
        }
    }

    /// `tokens` of text, no answer: what a window of all tokens counts.
    fn input(tokens: f64) -> Tokens {
        Tokens {
            input: tokens,
            output: 0.0,
        }
    }

    /// Requests ask `asked` tokens each; answers have used `used` on average.
    fn asks(asked: f64, used: f64) -> RequestTokens {
        RequestTokens {
            asked: Some(input(asked)),
            used_on_average: Some(input(used)),
        }
    }

    fn requests(per_minute: f64, remaining: u64) -> RateReport {
        RateReport {
            requests: Some(Quota {
                per_minute: Some(per_minute),
                remaining,
                reset: None,
            }),
            tokens: None,
            ..RateReport::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_leave_while_the_window_has_room_then_at_its_rate() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        assert_eq!(windows.ready_at(now), None, "nothing reported yet");
        let first = windows.dispatched(now, 0);
        for unanswered in 1..5 {
            windows.dispatched(now, unanswered);
        }
        // 600 a minute, 5 left when the first was taken: the four sent
        // after it leave one.
        windows.follow(now, &requests(600.0, 5), first, RequestTokens::default());
        assert_eq!(windows.ready_at(now), None);
        windows.dispatched(now, 5);
        // Empty: the next has room once a tenth of a second refills it.
        assert_eq!(
            windows.ready_at(now),
            Some(now + Duration::from_millis(100))
        );
        let later = now + Duration::from_millis(100);
        assert_eq!(windows.ready_at(later), None);
        windows.dispatched(later, 6);
        assert_eq!(
            windows.ready_at(later),
            Some(later + Duration::from_millis(100))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_that_overtook_others_opens_no_room_they_took() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        // The first is answered before the others leave.
        let first = windows.dispatched(now, 0);
        // 60 a minute: no refill to speak of within the test.
        windows.follow(now, &requests(60.0, 29), first, RequestTokens::default());
        let mut sent: Vec<Sent> = (0..20).map(|n| windows.dispatched(now, n)).collect();
        // The last of the twenty reached the provider before the other
        // nineteen, which are still on their way: its report says 28 left,
        // but those nineteen will take 19 of them.
        windows.follow(now, &requests(60.0, 28), sent[19], RequestTokens::default());
        for unanswered in 19..28 {
            assert_eq!(windows.ready_at(now), None);
            sent.push(windows.dispatched(now, unanswered));
        }
        assert!(
            windows.ready_at(now).is_some(),
            "the nineteen took the rest"
        );
        // Their answers came, all but the last before its own. Its report
        // says 5 left, but the 27 sent before it may have reached the
        // provider after it and be uncounted there: the copy stays.
        let later = now + Duration::from_millis(10);
        let last = *sent.last().unwrap();
        windows.follow(later, &requests(60.0, 5), last, RequestTokens::default());
        assert!(windows.ready_at(later).is_some(), "27 may be uncounted");
        // The report of a request sent with none on its way is the copy's
        // whole word: one that says more than the copy raises it.
        let alone = windows.dispatched(later, 0);
        windows.follow(later, &requests(60.0, 5), alone, RequestTokens::default());
        assert_eq!(windows.ready_at(later), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_refills_no_further_than_it_was_seen_to_hold() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        let sent = windows.dispatched(now, 0);
        windows.follow(now, &requests(60.0, 2), sent, RequestTokens::default());
        let much_later = now + Duration::from_secs(3600);
        windows.dispatched(much_later, 1);
        windows.dispatched(much_later, 2);
        assert_eq!(
            windows.ready_at(much_later),
            Some(much_later + Duration::from_secs(1)),
            "two held, two sent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_window_counts_what_requests_take() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        let report = RateReport {
            requests: None,
            tokens: Some(Quota {
                per_minute: Some(60_000.0),
                remaining: 250,
                reset: None,
            }),
            ..RateReport::default()
        };
        let sent = windows.dispatched(now, 0);
        assert_eq!(
            windows.follow(now, &report, sent, RequestTokens::default()),
            None
        );
        assert_eq!(windows.ready_at(now), None, "no cost known yet");
        windows.follow(now, &report, sent, used(100.0));
        windows.dispatched(now, 1);
        windows.dispatched(now, 2);
        // 50 tokens left, 100 a request, 1,000 a second.
        assert_eq!(windows.ready_at(now), Some(now + Duration::from_millis(50)));
    }

    fn tokens(remaining: u64) -> RateReport {
        RateReport {
            requests: None,
            tokens: Some(Quota {
                per_minute: Some(60_000.0),
                remaining,
                reset: None,
            }),
            ..RateReport::default()
        }
    }

    /// Windows that `requests` requests left at `now`, and those requests.
    fn having_sent(requests: usize, now: Instant) -> (ProviderWindows, Vec<Sent>) {
        let mut windows = ProviderWindows::default();
        let sent = (0..requests).map(|n| windows.dispatched(now, n)).collect();
        (windows, sent)
    }

    fn token_cost(windows: &ProviderWindows) -> f64 {
        windows.tokens[0].mirror.as_ref().unwrap().cost
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_window_counts_requests_at_what_its_reports_show_they_take() {
        let now = Instant::now();
        let (mut windows, sent) = having_sent(257, now);
        // Answers say 15 tokens each, but each request takes 60 of a window
        // refilling 1,000 a second: a full window's fall shows it.
        windows.follow(now, &tokens(39_940), sent[0], used(15.0));
        windows.follow(now, &tokens(39_940 - 64 * 60), sent[64], used(15.0));
        assert_eq!(token_cost(&windows), 15.0, "64 requests say too little");
        windows.follow(now, &tokens(39_940 - 128 * 60), sent[128], used(15.0));
        assert_eq!(token_cost(&windows), 60.0);
        // Below full, the window takes in its refill: a second later it
        // fell by 1,000 less.
        let later = now + Duration::from_secs(1);
        let fell = tokens(39_940 - 256 * 60 + 1_000);
        windows.follow(later, &fell, sent[256], used(15.0));
        assert_eq!(token_cost(&windows), 60.0);
        // A full window lets its refill go: a slow fall from it says
        // nothing, and the usage is all there is.
        let (mut fresh, sent) = having_sent(201, now);
        fresh.follow(now, &tokens(20_000), sent[0], used(15.0));
        fresh.follow(later, &tokens(19_990), sent[200], used(15.0));
        assert_eq!(token_cost(&fresh), 15.0);
        // What requests ask, when known, counts then: such a fall says only
        // what they take at the least.
        let (mut asking, sent) = having_sent(201, now);
        asking.follow(now, &tokens(20_000), sent[0], asks(500.0, 15.0));
        asking.follow(later, &tokens(19_990), sent[200], asks(500.0, 15.0));
        assert_eq!(token_cost(&asking), 500.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_window_counts_requests_at_what_they_ask_until_its_reports_show_more() {
        let now = Instant::now();
        let (mut windows, sent) = having_sent(2, now);
        // Each request asks 1,000 tokens (its `max_tokens` and text), and
        // its answer uses 15: 2,500 left when the first was taken hold two
        // more, not 166.
        windows.follow(now, &tokens(2_500), sent[0], asks(1_000.0, 15.0));
        assert_eq!(token_cost(&windows), 1_000.0);
        assert_eq!(windows.ready_at(now), None);
        windows.dispatched(now, 2);
        assert_eq!(
            windows.ready_at(now),
            Some(now + Duration::from_millis(500))
        );
        // Once the window's fall over 128 requests shows 60 a request, that
        // is what a request takes, whatever it asks.
        let (mut windows, sent) = having_sent(129, now);
        windows.follow(now, &tokens(39_940), sent[0], asks(1_000.0, 15.0));
        let fell = tokens(39_940 - 128 * 60);
        windows.follow(now, &fell, sent[128], asks(1_000.0, 15.0));
        assert_eq!(token_cost(&windows), 60.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_drained_as_fast_as_it_refills_counts_its_whole_refill() {
        let start = Instant::now();
        let (mut windows, sent) = having_sent(141, start);
        // 1,000 tokens a second, 1,000 a request: ten empty a window of
        // 10,000 at once, then one leaves every second as the refill
        // allows, each report saying nothing is left. Sixteen requests
        // take in 16,000 tokens, more than the window's room.
        for (n, sent) in (0..).zip(sent) {
            let (at, left) = match n {
                ..=10 => (start, 10_000 - 1_000 * n),
                _ => (start + Duration::from_secs(n - 10), 0),
            };
            windows.follow(at, &tokens(left), sent, used(15.0));
        }
        let learned = windows.tokens[0].cost.learned().unwrap();
        assert!(
            (990.0..=1_010.0).contains(&learned.per_request),
            "{}",
            learned.per_request
        );
        assert!(
            !learned.at_least,
            "the window was never full after the first report"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_windows_fall_is_read_over_many_requests_not_between_neighbours() {
        let now = Instant::now();
        let (mut windows, sent) = having_sent(129, now);
        // The provider took each report's request four places before or
        // after where it was sent: between neighbours the window fell 30
        // or 90 a request, over 128 requests 60 within a few per cent.
        for (i, n) in (0..=128).step_by(16).enumerate() {
            let place = if i % 2 == 0 { n + 4 } else { n - 4 };
            let report = tokens(40_000 - place as u64 * 60);
            windows.follow(now, &report, sent[n], used(15.0));
        }
        let cost = token_cost(&windows);
        assert!((56.0..=64.0).contains(&cost), "{cost}");
    }

    #[tokio::test(start_paused = true)]
    async fn refused_requests_take_nothing_of_a_token_window() {
        let now = Instant::now();
        let (mut windows, sent) = having_sent(129, now);
        windows.follow(now, &tokens(39_940), sent[0], used(15.0));
        // 28 of the 128 after it were refused: 100 took 60 each.
        for refused in &sent[100..128] {
            windows.refused(refused.number);
        }
        windows.follow(now, &tokens(39_940 - 100 * 60), sent[128], used(15.0));
        assert_eq!(token_cost(&windows), 60.0);
    }

    /// Anthropic reports its windows of input and of output tokens beside
    /// their sum, and enforces each: requests that allow long answers spend
    /// the output window while the sum has plenty of room.
    #[tokio::test(start_paused = true)]
    async fn an_output_window_holds_requests_the_sum_has_room_for() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        let quota = |per_minute: f64, remaining| {
            Some(Quota {
                per_minute: Some(per_minute),
                remaining,
                reset: None,
            })
        };
        let report = RateReport {
            requests: None,
            tokens: quota(96_000.0, 90_000),
            input_tokens: quota(80_000.0, 79_000),
            output_tokens: quota(16_000.0, 1_000),
        };
        let long_answers = RequestTokens {
            asked: Some(Tokens {
                input: 30.0,
                output: 1_000.0,
            }),
            used_on_average: Some(Tokens {
                input: 30.0,
                output: 20.0,
            }),
        };
        let sent = windows.dispatched(now, 0);
        windows.follow(now, &report, sent, long_answers);
        assert_eq!(windows.ready_at(now), None, "room for one more");
        windows.dispatched(now, 1);
        // The output window is spent: 1,000 tokens of its refill at 16,000
        // a minute take 3.75 s.
        let wait = windows.ready_at(now).map(|at| at - now);
        assert_eq!(wait.map(|w| w.as_millis()), Some(3_750));
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_window_of_unknown_rate_holds_until_it_resets() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        let sent = windows.dispatched(now, 0);
        let report = RateReport {
            requests: Some(Quota {
                per_minute: None,
                remaining: 0,
                reset: Some(Duration::from_secs(6)),
            }),
            tokens: None,
            ..RateReport::default()
        };
        assert_eq!(
            windows.follow(now, &report, sent, RequestTokens::default()),
            Some(Duration::from_secs(6))
        );
        assert_eq!(windows.ready_at(now), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_first_seen_empty_does_not_hold_requests_for_ever() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        let sent = windows.dispatched(now, 0);
        // The only request in flight comes back with nothing left: no other
        // answer will come to say the window refilled.
        windows.follow(now, &requests(600.0, 0), sent, RequestTokens::default());
        let ms = Duration::from_millis;
        assert_eq!(windows.ready_at(now), Some(now + ms(100)));
        windows.dispatched(now + ms(100), 1);
        assert_eq!(windows.ready_at(now + ms(100)), Some(now + ms(200)));
        let much_later = now + Duration::from_secs(60);
        assert_eq!(windows.ready_at(much_later), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tiny_rate_waits_at_most_the_longest_wait() {
        let now = Instant::now();
        let mut windows = ProviderWindows::default();
        let sent = windows.dispatched(now, 0);
        windows.follow(now, &requests(1e-300, 0), sent, RequestTokens::default());
        assert_eq!(windows.ready_at(now), Some(now + MAX_WAIT));
    }

    #[tokio::test(start_paused = true)]
    async fn shards_that_start_together_split_the_room_they_see() {
        let now = Instant::now();
        let mut windows = ProviderWindows::shared_by(4);
        let first = windows.dispatched(now, 0);
        windows.follow(now, &requests(600.0, 400), first, RequestTokens::default());
        // A quarter of the 400 left is this shard's.
        for unanswered in 1..=100 {
            assert_eq!(windows.ready_at(now), None);
            windows.dispatched(now, unanswered);
        }
        // Its share refills at its share of the rate: 150 a minute.
        assert_eq!(
            windows.ready_at(now),
            Some(now + Duration::from_millis(400))
        );
    }

    /// Requests answered and refused of `running` shards of a run of
    /// `shards`, started `apart` ms one after another, against one window
    /// of 600 requests refilling at 6,000 a minute, over `seconds`. Each
    /// sends whenever its copy of the window has room, as many at once as a
    /// slow start from four allows (two more for each answer, up to 256),
    /// every answer 100 ms after its send.
    fn shards_against_one_window(
        shards: u32,
        running: usize,
        seconds: u64,
        apart: u64,
    ) -> (u32, u32) {
        struct Shard {
            windows: ProviderWindows,
            /// When each request in flight is answered, with what it
            /// reports and whether it was refused.
            in_flight: VecDeque<(Instant, Sent, u64, bool)>,
            limit: usize,
        }
        let start = Instant::now();
        let mut shard_list: Vec<Shard> = (0..running)
            .map(|_| Shard {
                windows: ProviderWindows::shared_by(shards),
                in_flight: VecDeque::new(),
                limit: 4,
            })
            .collect();
        let (capacity, per_ms) = (600.0, 0.1);
        let mut left: f64 = capacity;
        let (mut answered, mut refused) = (0, 0);
        for ms in 0..seconds * 1000 {
            let now = start + Duration::from_millis(ms);
            left = (left + per_ms).min(capacity);
            for (i, shard) in shard_list.iter_mut().enumerate() {
                if ms < i as u64 * apart {
                    continue;
                }
                while let Some(&(at, sent, remaining, was_refused)) = shard.in_flight.front() {
                    if at > now {
                        break;
                    }
                    shard.in_flight.pop_front();
                    shard.limit = (shard.limit + 2).min(256);
                    if was_refused {
                        shard.windows.refused(sent.number);
                    }
                    let report = requests(6_000.0, remaining);
                    shard
                        .windows
                        .follow(now, &report, sent, RequestTokens::default());
                }
                while shard.in_flight.len() < shard.limit && shard.windows.ready_at(now).is_none() {
                    let sent = shard.windows.dispatched(now, shard.in_flight.len());
                    let taken = left >= 1.0;
                    if taken {
                        left -= 1.0;
                        answered += 1;
                    } else {
                        refused += 1;
                    }
                    let answer_at = now + Duration::from_millis(100);
                    shard
                        .in_flight
                        .push_back((answer_at, sent, left as u64, !taken));
                }
            }
        }
        (answered, refused)
    }

    /// Shards of one run copy their share of the window the provider
    /// reports, so that together they keep it as busy as one run does,
    /// whether their peers are sending or not, and overdraw it little.
    #[tokio::test(start_paused = true)]
    async fn shards_sharing_a_window_keep_it_busy_without_overdrawing_it() {
        // 600 at once, then 100 a second.
        let room = 600.0 + 100.0 * 20.0;
        // (shards of the run, shards running, ms between their starts)
        let cases = [
            (4, 1, 0),
            (4, 2, 0),
            (4, 4, 0),
            (4, 4, 3_000),
            (16, 1, 0),
            (100, 2, 0),
            (100, 10, 1_000),
        ];
        for (shards, running, apart) in cases {
            let (answered, refused) = shards_against_one_window(shards, running, 20, apart);
            let used = f64::from(answered) / room;
            let overdrawn = f64::from(refused) / f64::from(answered + refused);
            assert!(
                used >= 0.9 && overdrawn <= 0.02,
                "{running} of {shards} shards {apart} ms apart: {answered} answered ({used:.2} \
                 of the window), {refused} refused"
            );
        }
    }
}
