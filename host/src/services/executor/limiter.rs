//! The slots of one endpoint: requests wait in line for one of the
//! controller's `limit` slots and for pacing to let them go. Slots go first
//! come first served, and retries have a line of their own that goes first: a
//! retried request already waited its turn once, and while it waits again its
//! row holds back every row behind it in the ordered output.
//!
//! With `n` slots free, the first `n` in line may each take one, and all of
//! them are woken. Were only the first allowed, each slot would wait for the
//! one before it to be taken: a request in line waits on a thread that may be
//! running a guest's call, so slots freed together would be refilled one
//! thread turn after another while the endpoint sat idle.
//!
//! A refused request waits out its back-off outside the line. When the
//! server gave no word on how long, the back-off is a guess, and it ends
//! early once an answer shows the endpoint has room that nothing in line
//! will take (see `Limiter::wait_out_refusal`).

use super::arrivals::Arrivals;
use super::clock;
use super::controller::{Controller, Decision, Signal};
use super::pacing::Pacing;
use super::rate::RateReport;
use super::to_come::RowsToCome;
use super::window::{ProviderWindows, RequestTokens, Sent};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The fewest requests worth having in line (`rows_wanted`). Each row in
/// line holds an instance of its node's component, and an interpreter's
/// costs milliseconds to start: a line of 8 rather than 16 made the Python
/// and JavaScript examples' 32,000-row runs 5–10 % faster, and found a capped
/// server's capacity as well.
const LINE: usize = 8;

pub struct Limiter {
    /// The endpoint's name, for the log of the controller's decisions.
    endpoint: String,
    state: Mutex<State>,
}

/// A waiting request: its place in line and how to wake it.
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

struct State {
    controller: Controller,
    pacing: Pacing,
    windows: ProviderWindows,
    /// Requests in line wait behind the first for pacing or a rate window.
    held_line: bool,
    in_flight: usize,
    waiting: VecDeque<Waiter>,
    retries_waiting: VecDeque<Waiter>,
    next_waiter: u64,
    /// New requests, not retries: once they stop, the run is draining.
    arrivals: Arrivals,
    /// How long the last refused request waits before it is sent again.
    refusal_wait: Duration,
    /// Refused requests waiting to be sent again.
    waiting_out_refusals: usize,
    /// Those of them whose back-off may end early, first refused first.
    backing_off: VecDeque<Waiter>,
    /// Woken from `backing_off` and not yet back in line.
    woken_early: usize,
    /// The rows still to enter the run, once told.
    rows_to_come: Option<Arc<RowsToCome>>,
    /// When the run's last stretch began, while it lasts (see `in_tail`).
    tail_began: Option<Instant>,
}

pub struct Permit<'a> {
    limiter: &'a Limiter,
    sent_at: Instant,
    /// Requests in flight once this one was sent, itself included.
    in_flight: usize,
    /// What the rate windows know of it.
    sent: Sent,
    released: bool,
}

#[derive(Debug, Clone, Default)]
pub struct LimiterSnapshot {
    pub limit: u32,
    pub peak_limit: u32,
    pub floor: u32,
    pub no_load_rtt: Option<Duration>,
    /// See `Controller::has_learned`.
    pub has_learned: bool,
    /// See `Controller::is_held_by_queue`.
    pub held_by_queue: bool,
    /// (time since start, limit) at every change of the whole-number limit.
    pub samples: Vec<(Duration, u32)>,
    /// The controller's cuts, undos and drains, with their reasons.
    pub decisions: Vec<Decision>,
}

/// What a request in line waits for next.
enum Turn {
    Go,
    Until(Instant),
    Woken,
}

/// Rows worth having under way at `limit` requests in flight, with none
/// waiting out a refusal (see `Limiter::rows_wanted`).
pub fn rows_wanted_at(limit: usize) -> usize {
    limit + (limit / 4).max(LINE)
}

impl Limiter {
    #[cfg(test)]
    pub fn new(initial: usize, max: usize) -> Self {
        Self::sharing_windows("test", initial, max, ProviderWindows::default())
    }

    /// The limiter of the endpoint `endpoint`, which follows the provider's
    /// rate windows as `windows` does.
    pub fn sharing_windows(
        endpoint: &str,
        initial: usize,
        max: usize,
        windows: ProviderWindows,
    ) -> Self {
        let now = Instant::now();
        Self {
            endpoint: endpoint.to_string(),
            state: Mutex::new(State {
                controller: Controller::new(initial, max, now),
                pacing: Pacing::new(now),
                windows,
                held_line: false,
                in_flight: 0,
                waiting: VecDeque::new(),
                retries_waiting: VecDeque::new(),
                next_waiter: 0,
                arrivals: Arrivals::default(),
                refusal_wait: Duration::ZERO,
                waiting_out_refusals: 0,
                backing_off: VecDeque::new(),
                woken_early: 0,
                rows_to_come: None,
                tail_began: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("limiter lock")
    }

    /// Waits for a slot, for any pause to end, and for the pacing gap; gives
    /// up when `deadline` passes.
    pub async fn acquire(&self, deadline: Option<Instant>, retry: bool) -> Option<Permit<'_>> {
        let lane = if retry { Lane::Retry } else { Lane::New };
        if lane == Lane::New {
            self.lock().arrivals.arrived(Instant::now());
        }
        let mut place: Option<Place<'_>> = None;
        loop {
            let turn = self.lock().turn(lane, place.as_ref().map(|p| p.id));
            let wait_until = match turn {
                Turn::Go => return Some(self.take(place.take())),
                Turn::Until(at) => Some(at),
                Turn::Woken => None,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            let place = place.get_or_insert_with(|| Place::join(self, lane));
            let notified = place.wake.notified();
            clock::wait(
                std::pin::pin!(notified),
                clock::earliest(wait_until, deadline),
            )
            .await;
        }
    }

    fn take<'a>(&'a self, place: Option<Place<'a>>) -> Permit<'a> {
        let mut s = self.lock();
        let now = Instant::now();
        s.in_flight += 1;
        let saturated = s.in_flight >= s.controller.limit();
        s.controller.on_send(now, saturated);
        let (limit, rtt) = (s.controller.limit(), s.controller.srtt());
        s.pacing.dispatched(now, limit, rtt);
        let others_in_flight = s.in_flight - 1;
        let sent = s.windows.dispatched(now, others_in_flight);
        if let Some(mut place) = place {
            s.leave(place.lane, place.id);
            place.left = true;
        }
        if s.held_line {
            if s.held_until(now).is_some() {
                if let Some(next) = s.retries_waiting.front().or(s.waiting.front()) {
                    next.wake.notify_one();
                }
            } else {
                s.held_line = false;
                s.wake_those_with_room(now);
            }
        }
        Permit {
            limiter: self,
            sent_at: now,
            in_flight: s.in_flight,
            sent,
            released: false,
        }
    }

    /// See `Controller::start_from`.
    pub fn start_from(&self, learned: u32, floor: u32, held_by_queue: bool) -> u32 {
        self.lock()
            .controller
            .start_from(learned, floor, held_by_queue)
    }

    /// A refused request waits `wait` (the server's Retry-After, or the
    /// back-off) before it is sent again, until the guard returned is
    /// dropped: what a refusal costs a run in its last stretch, and a
    /// request still to come although it is not in line.
    fn refusal_wait(&self, wait: Duration) -> RefusalWait<'_> {
        let mut s = self.lock();
        s.refusal_wait = wait;
        s.waiting_out_refusals += 1;
        RefusalWait { limiter: self }
    }

    /// Waits out a refusal: `wait`, the server's word (`asked`) or a
    /// back-off. What the server asked is waited in full; the rest of a
    /// back-off weir chose ends as soon as an answer comes back while a slot
    /// is free that no request in line takes. The back-off spreads retries
    /// out so that a full endpoint is not sent them as fast as it refuses
    /// them; once it answers with a slot to spare, waiting on leaves the
    /// slot idle. (Answers reach the limiter with adaptive concurrency on.)
    /// Shards of one run started 70 ms apart against a server capped at 32
    /// and saying nothing of when to come back left their last rows waiting
    /// back-offs of seconds after the others had finished.
    pub async fn wait_out_refusal(&self, wait: Duration, asked: Option<Duration>) {
        let _waiting_out = self.refusal_wait(wait);
        let start = Instant::now();
        let until = start + wait;
        if let Some(asked) = asked {
            tokio::time::sleep_until(start + asked.min(wait)).await;
        }
        if Instant::now() >= until {
            return;
        }
        let place = BackingOff::join(self);
        clock::wait(std::pin::pin!(place.wake.notified()), Some(until)).await;
    }

    /// See `Executor::expect_rows`.
    pub fn expect_rows(&self, rows: Arc<RowsToCome>) {
        self.lock().rows_to_come = Some(rows);
    }

    /// Rows worth having under way for this endpoint: its limit, a line of
    /// a quarter of it (at least `LINE`) so that a request is ready
    /// whenever a slot frees, and those waiting out a refusal. A row holds
    /// its component's instance and its state while its request waits in
    /// line, so rows beyond these would hold memory for nothing.
    pub fn rows_wanted(&self) -> usize {
        let s = self.lock();
        rows_wanted_at(s.controller.limit()) + s.waiting_out_refusals
    }

    /// Stops every dispatch until `until` (an exhausted rate-limit window).
    fn pause_until(&self, until: Instant) {
        let mut s = self.lock();
        let rtt = s.controller.srtt();
        s.pacing.pause_until(until, rtt);
    }

    /// Follows what the answer to request `sent` reports of the
    /// provider's rate windows (see `ProviderWindows::follow`), `refused`
    /// when the answer was a refusal; a hold it asks for lasts at most
    /// `longest_hold`.
    pub fn follow_rate_report(
        &self,
        report: &RateReport,
        sent: Sent,
        refused: bool,
        tokens: RequestTokens,
        longest_hold: Duration,
    ) {
        let hold = {
            let mut s = self.lock();
            let now = Instant::now();
            if refused {
                s.windows.refused(sent.number);
            }
            let held = s.windows.ready_at(now).is_some();
            let hold = s.windows.follow(now, report, sent, tokens);
            if hold.is_none() && held && s.windows.ready_at(now).is_none() {
                // Those in line wait on a time the last report set; this one
                // found room sooner.
                s.wake_those_with_room(now);
            }
            hold
        };
        if let Some(hold) = hold {
            self.pause_until(Instant::now() + hold.min(longest_hold));
        }
    }

    pub fn snapshot(&self) -> LimiterSnapshot {
        let s = self.lock();
        LimiterSnapshot {
            limit: s.controller.settled_limit() as u32,
            peak_limit: s.controller.peak(),
            floor: s.controller.floor(),
            no_load_rtt: s.controller.no_load_rtt(),
            has_learned: s.controller.has_learned(),
            held_by_queue: s.controller.is_held_by_queue(),
            samples: s.controller.changes().to_vec(),
            decisions: s.controller.decisions().to_vec(),
        }
    }

    /// `served_while_queued`: the request ran out of time in the endpoint's
    /// queue, which answered that many requests meanwhile.
    fn release(
        &self,
        sent_at: Instant,
        in_flight: usize,
        signal: Signal,
        served_while_queued: Option<u32>,
    ) {
        let mut s = self.lock();
        s.in_flight -= 1;
        let now = Instant::now();
        let answered = s.controller.on_answer(now, sent_at, in_flight, signal);
        let queued = served_while_queued
            .and_then(|served| s.controller.timed_out_in_queue(now, sent_at, served));
        for decision in [answered, queued].into_iter().flatten() {
            tracing::debug!(target: "weir::limit", "endpoint `{}`: {decision}", self.endpoint);
        }
        // Only those a slot is free for: waking every waiter on every answer
        // would cost more CPU than the requests themselves.
        s.wake_those_with_room(now);
        if signal == Signal::Success {
            s.end_back_offs_with_room(now);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Lane {
    New,
    Retry,
}

/// A request's place in line, held while it waits; leaving the line (at its
/// deadline, or when its row is dropped) passes any free slot on.
struct Place<'a> {
    limiter: &'a Limiter,
    lane: Lane,
    id: u64,
    wake: Arc<Notify>,
    /// Already out of line (it took a slot under the lock).
    left: bool,
}

impl<'a> Place<'a> {
    fn join(limiter: &'a Limiter, lane: Lane) -> Self {
        let mut s = limiter.lock();
        let waiter = s.new_waiter();
        let (id, wake) = (waiter.id, Arc::clone(&waiter.wake));
        match lane {
            Lane::New => s.waiting.push_back(waiter),
            Lane::Retry => s.retries_waiting.push_back(waiter),
        }
        Self {
            limiter,
            lane,
            id,
            wake,
            left: false,
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        let mut s = self.limiter.lock();
        s.leave(self.lane, self.id);
        // A slot this request was woken for passes to the next in line.
        s.wake_those_with_room(Instant::now());
    }
}

impl State {
    fn turn(&mut self, lane: Lane, id: Option<u64>) -> Turn {
        let now = Instant::now();
        if let Some(until) = self.pacing.paused(now) {
            return Turn::Until(until);
        }
        let ahead = self.ahead_of(lane, id);
        if ahead >= self.room(now) {
            return Turn::Woken;
        }
        match self.held_until(now) {
            // Only the first in line waits on the clock; it wakes the next
            // when it goes, and the whole line once nothing holds it
            // (`Limiter::take`). A line of hundreds woken at every dispatch
            // to let one go cost more CPU than the requests.
            Some(_) if ahead > 0 => {
                self.held_line = true;
                Turn::Woken
            }
            Some(at) => Turn::Until(at),
            None => Turn::Go,
        }
    }

    /// When pacing or the provider's rate windows let the next request go,
    /// if not at `now`.
    fn held_until(&self, now: Instant) -> Option<Instant> {
        self.pacing.spaced(now).max(self.windows.ready_at(now))
    }

    /// Slots free at `now`.
    fn room(&mut self, now: Instant) -> usize {
        let limit = if self.in_tail(now) {
            let began = *self.tail_began.get_or_insert(now);
            self.controller.tail_limit(now, began, self.refusal_wait)
        } else {
            self.tail_began = None;
            self.controller.limit()
        };
        limit.saturating_sub(self.in_flight)
    }

    /// Whether the run is in its last stretch at this endpoint: what is
    /// still to send (in line, waiting out a refusal, and the rows yet to
    /// enter the run) all goes out before a request refused now would be
    /// sent again. Rows yet to enter are counted when the run knows them;
    /// otherwise the stretch begins once new requests stop coming. Rows
    /// whose requests wait out refusals hold back new rows, so new requests
    /// stop then too; counting them keeps a spell of refusals from passing
    /// for the end of the run.
    fn in_tail(&self, now: Instant) -> bool {
        let rtt = self.controller.srtt();
        let to_come = match self.rows_to_come.as_ref().and_then(|rows| rows.left()) {
            Some(left) => usize::try_from(left).unwrap_or(usize::MAX),
            None if self.arrivals.stopped(now, rtt) => 0,
            None => return false,
        };
        let line = (self.waiting.len() + self.retries_waiting.len() + self.waiting_out_refusals)
            .saturating_add(to_come);
        let rounds = line as f64 / self.controller.limit().max(1) as f64;
        rtt.is_some_and(|rtt| rtt.mul_f64(rounds) < self.refusal_wait)
    }

    /// Requests in line before this one: retries go before new requests,
    /// and a new request that has not queued comes after everyone in line.
    fn ahead_of(&self, lane: Lane, id: Option<u64>) -> usize {
        let place = |line: &VecDeque<Waiter>| match id {
            // Ids rise in the order requests joined, and leaving keeps it.
            Some(id) => line
                .binary_search_by_key(&id, |w| w.id)
                .unwrap_or_else(|at| at),
            None => line.len(),
        };
        match lane {
            Lane::Retry => place(&self.retries_waiting),
            Lane::New => self.retries_waiting.len() + place(&self.waiting),
        }
    }

    fn leave(&mut self, lane: Lane, id: u64) {
        let line = match lane {
            Lane::New => &mut self.waiting,
            Lane::Retry => &mut self.retries_waiting,
        };
        remove_waiter(line, id);
    }

    /// A waiter with the next id, its ids rising in the order they joined.
    fn new_waiter(&mut self) -> Waiter {
        let id = self.next_waiter;
        self.next_waiter += 1;
        Waiter {
            id,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Wakes the first in line, as many as there are free slots. One woken
    /// earlier and not yet on its way is woken again, which costs a flag and,
    /// when it runs, one more look at the line.
    fn wake_those_with_room(&mut self, now: Instant) {
        let room = self.room(now);
        for waiter in self.retries_waiting.iter().chain(&self.waiting).take(room) {
            waiter.wake.notify_one();
        }
    }

    /// Ends the back-offs of as many refused requests as there are slots
    /// free beyond those the line and the requests already woken will take.
    fn end_back_offs_with_room(&mut self, now: Instant) {
        if self.backing_off.is_empty() {
            return;
        }
        let taken = self.retries_waiting.len() + self.waiting.len() + self.woken_early;
        let spare = self.room(now).saturating_sub(taken);
        for _ in 0..spare {
            let Some(waiter) = self.backing_off.pop_front() else {
                break;
            };
            waiter.wake.notify_one();
            self.woken_early += 1;
        }
    }
}

/// Takes the waiter `id` out of `line`; whether it was there.
fn remove_waiter(line: &mut VecDeque<Waiter>, id: u64) -> bool {
    let at = line.iter().position(|w| w.id == id);
    at.and_then(|at| line.remove(at)).is_some()
}

/// A refused request whose back-off may end early, while it waits.
struct BackingOff<'a> {
    limiter: &'a Limiter,
    id: u64,
    wake: Arc<Notify>,
}

impl<'a> BackingOff<'a> {
    fn join(limiter: &'a Limiter) -> Self {
        let mut s = limiter.lock();
        let waiter = s.new_waiter();
        let (id, wake) = (waiter.id, Arc::clone(&waiter.wake));
        s.backing_off.push_back(waiter);
        Self { limiter, id, wake }
    }
}

impl Drop for BackingOff<'_> {
    fn drop(&mut self) {
        let mut s = self.limiter.lock();
        // Not there: woken, it leaves for the line now.
        if !remove_waiter(&mut s.backing_off, self.id) {
            s.woken_early -= 1;
        }
    }
}

/// A refused request waiting to be sent again; see `Limiter::refusal_wait`.
pub struct RefusalWait<'a> {
    limiter: &'a Limiter,
}

impl Drop for RefusalWait<'_> {
    fn drop(&mut self) {
        self.limiter.lock().waiting_out_refusals -= 1;
    }
}

impl Permit<'_> {
    /// What the rate windows know of it, for `Limiter::follow_rate_report`.
    pub fn sent(&self) -> Sent {
        self.sent
    }

    pub fn release(mut self, signal: Signal) {
        self.released = true;
        self.limiter
            .release(self.sent_at, self.in_flight, signal, None);
    }

    /// The request ran out of time in the endpoint's queue, which answered
    /// `served` requests while it waited.
    pub fn release_after_queue_wait(mut self, served: u32) {
        self.released = true;
        self.limiter
            .release(self.sent_at, self.in_flight, Signal::Overload, Some(served));
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        // A request abandoned mid-way (its row's deadline passed) still frees its slot.
        if !self.released {
            self.limiter
                .release(self.sent_at, self.in_flight, Signal::Neutral, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fill(limiter: &Limiter) -> Vec<Permit<'_>> {
        let mut permits = Vec::new();
        loop {
            let deadline = Some(Instant::now() + Duration::from_millis(5));
            match limiter.acquire(deadline, false).await {
                Some(p) => permits.push(p),
                None => return permits,
            }
        }
    }

    /// `round_trips` round trips of 100 ms, each filling the limit and
    /// answering every request: the requests each sent.
    async fn answered_round_trips(limiter: &Limiter, round_trips: usize) -> Vec<usize> {
        let mut sent = Vec::new();
        for _ in 0..round_trips {
            let permits = fill(limiter).await;
            sent.push(permits.len());
            tokio::time::sleep(Duration::from_millis(100)).await;
            for p in permits {
                p.release(Signal::Success);
            }
        }
        sent
    }

    #[tokio::test(start_paused = true)]
    async fn slow_start_triples_per_saturated_window() {
        let limiter = Limiter::new(2, 64);
        assert_eq!(answered_round_trips(&limiter, 3).await, [2, 6, 18]);
        assert_eq!(limiter.snapshot().limit, 54);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_learned_before_starts_at_three_quarters_and_heads_back_to_it() {
        let limiter = Limiter::new(4, 128);
        assert_eq!(limiter.start_from(32, 12, false), 24);
        // About half the way back each round trip, not slow start's tripling.
        assert_eq!(
            answered_round_trips(&limiter, 6).await,
            [24, 27, 28, 30, 30, 31]
        );
        assert!(limiter.snapshot().has_learned);
        // Never below the initial limit, nor beyond the pool.
        assert_eq!(Limiter::new(4, 128).start_from(4, 1, false), 4);
        assert_eq!(Limiter::new(4, 16).start_from(64, 8, false), 12);
    }

    #[tokio::test(start_paused = true)]
    async fn a_low_limit_a_queue_held_is_started_from_past_slow_start() {
        let limiter = Limiter::new(4, 64);
        assert_eq!(limiter.start_from(2, 1, true), 2);
        // Probing beyond it, not slow start's tripling from 4.
        assert_eq!(answered_round_trips(&limiter, 5).await, [2, 2, 2, 3, 4]);
        // The same limit cut by refusals may be an outage's: slow start
        // from the initial limit as ever.
        assert_eq!(Limiter::new(4, 64).start_from(2, 1, false), 4);
        assert_eq!(Limiter::new(4, 64).start_from(5, 1, true), 4);
        assert_eq!(Limiter::new(4, 64).start_from(32, 12, true), 24);
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_never_exceeds_the_pool_size_and_falls_when_all_is_refused() {
        let limiter = Limiter::new(4, 6);
        answered_round_trips(&limiter, 5).await;
        assert_eq!(limiter.snapshot().limit, 6);
        for _ in 0..100 {
            for p in fill(&limiter).await {
                p.release(Signal::Overload);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let limit = limiter.snapshot().limit;
        assert!((1..=4).contains(&limit), "{limit}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_back_off_the_server_did_not_ask_for_ends_when_an_answer_leaves_a_slot_idle() {
        let limiter = Arc::new(Limiter::new(1, 1));
        let start = Instant::now();
        let refused = limiter.acquire(None, false).await.unwrap();
        refused.release(Signal::Overload);
        let back_off = |asked| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                limiter
                    .wait_out_refusal(Duration::from_secs(10), asked)
                    .await;
                Instant::now() - start
            })
        };
        let (guessed, asked) = (back_off(None), back_off(Some(Duration::from_secs(10))));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // One request on the wire and one in line for the only slot.
        let first = limiter.acquire(None, false).await.unwrap();
        let in_line = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let permit = limiter.acquire(None, false).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                permit.release(Signal::Success);
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Answered, but the request in line takes the slot.
        first.release(Signal::Success);
        in_line.await.unwrap();
        let guessed = guessed.await.unwrap();
        assert!(
            guessed >= Duration::from_millis(210) && guessed < Duration::from_millis(250),
            "ends with the answer that leaves the slot idle: {guessed:?}"
        );
        assert_eq!(
            asked.await.unwrap(),
            Duration::from_secs(10),
            "the server's word is waited out"
        );
        assert_eq!(
            limiter.rows_wanted(),
            rows_wanted_at(1),
            "none left waiting"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rows_wanted_follow_the_limit_and_the_refused_waiting() {
        let limiter = Limiter::new(4, 256);
        assert_eq!(limiter.rows_wanted(), 4 + LINE, "a short line at least");
        let waiting = limiter.refusal_wait(Duration::from_secs(1));
        assert_eq!(limiter.rows_wanted(), 4 + LINE + 1);
        drop(waiting);
        let wide = Limiter::new(128, 256);
        assert_eq!(
            wide.rows_wanted(),
            128 + 32,
            "a quarter of the limit in line"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_holds_every_dispatch() {
        let limiter = Limiter::new(4, 4);
        limiter.pause_until(Instant::now() + Duration::from_millis(60));
        let started = Instant::now();
        let permit = limiter.acquire(None, false).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_millis(60));
        drop(permit);
        let soon = Some(Instant::now() + Duration::from_millis(10));
        limiter.pause_until(Instant::now() + Duration::from_secs(5));
        assert!(
            limiter.acquire(soon, false).await.is_none(),
            "the deadline ends the wait"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_takes_the_next_free_slot_before_new_requests() {
        let limiter = Arc::new(Limiter::new(1, 1));
        let held = limiter.acquire(None, false).await.unwrap();
        let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (name, retry) in [("new-1", false), ("new-2", false), ("retry", true)] {
            let limiter = limiter.clone();
            let order = order_tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = limiter.acquire(None, retry).await.unwrap();
                order.send(name).unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                permit.release(Signal::Neutral);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        held.release(Signal::Neutral);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(order_rx.recv().await.unwrap(), "retry");
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_held_by_a_rate_window_leaves_at_its_rate_then_all_at_once() {
        use weir_formats::http_headers::Quota;
        let window = |remaining| RateReport {
            requests: Some(Quota {
                per_minute: Some(600.0),
                remaining,
                reset: None,
            }),
            tokens: None,
            ..RateReport::default()
        };
        let limiter = Arc::new(Limiter::new(8, 8));
        let first = limiter.acquire(None, false).await.unwrap();
        let sent = first.sent();
        first.release(Signal::Neutral);
        // Two left when the first was taken: 600 a minute is one a 100 ms.
        let tokens = RequestTokens::default();
        limiter.follow_rate_report(&window(2), sent, false, tokens, Duration::from_secs(60));
        let started = Instant::now();
        let (went_tx, mut went) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..6 {
            let limiter = Arc::clone(&limiter);
            let went = went_tx.clone();
            tokio::spawn(async move {
                let deadline = Some(Instant::now() + Duration::from_secs(5));
                let permit = limiter.acquire(deadline, false).await;
                went.send((permit.as_ref().map(|p| p.sent()), Instant::now()))
                    .unwrap();
                std::future::pending::<()>().await;
            });
        }
        let mut times = Vec::new();
        for _ in 0..4 {
            let (sent_as, at) = went.recv().await.unwrap();
            assert!(sent_as.is_some(), "a request waited out its deadline");
            times.push(at - started);
        }
        let ms = Duration::from_millis;
        assert_eq!(times, [ms(0), ms(0), ms(100), ms(200)]);
        // The provider reports room again: the two still in line go now,
        // though nothing was answered since.
        let tokens = RequestTokens::default();
        limiter.follow_rate_report(&window(1000), sent, false, tokens, Duration::from_secs(60));
        for _ in 0..2 {
            let (sent_as, at) = went.recv().await.unwrap();
            assert!(sent_as.is_some(), "a request waited out its deadline");
            assert_eq!(at - started, ms(200));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_released_by_a_pause_leave_paced_not_in_a_burst() {
        let limiter = Limiter::new(4, 4);
        // Teach it a round trip of 40 ms.
        let p = limiter.acquire(None, false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        p.release(Signal::Success);
        limiter.pause_until(Instant::now() + Duration::from_millis(20));
        let started = Instant::now();
        let mut permits = Vec::new();
        for _ in 0..4 {
            permits.push(limiter.acquire(None, false).await.unwrap());
        }
        // 20 ms of pause, then one dispatch per 40 ms / 4 = 10 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn slots_go_to_waiting_requests_in_arrival_order() {
        let limiter = Arc::new(Limiter::new(1, 1));
        let held = limiter.acquire(None, false).await.unwrap();
        let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for i in 0..3 {
            let limiter = limiter.clone();
            let order = order_tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = limiter.acquire(None, false).await.unwrap();
                order.send(i).unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                permit.release(Signal::Neutral);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The slot frees and, before the woken waiter runs, a new request asks.
        held.release(Signal::Neutral);
        let late = limiter.acquire(None, false).await.unwrap();
        order_tx.send(99).unwrap();
        late.release(Signal::Neutral);
        for task in tasks {
            task.await.unwrap();
        }
        let mut order = Vec::new();
        while let Ok(i) = order_rx.try_recv() {
            order.push(i);
        }
        assert_eq!(order, vec![0, 1, 2, 99], "the newcomer waits its turn");
    }

    #[tokio::test(start_paused = true)]
    async fn slots_freed_together_do_not_wait_for_the_first_in_line_to_run() {
        let limiter = Limiter::new(3, 3);
        let held = fill(&limiter).await;
        assert_eq!(held.len(), 3);
        // The first in line stands for a request whose thread is busy with a
        // guest's call: it joined the line and is not polled again.
        let mut stalled = std::pin::pin!(limiter.acquire(None, false));
        assert!(futures::poll!(stalled.as_mut()).is_pending());
        let mut second = std::pin::pin!(limiter.acquire(None, false));
        let mut third = std::pin::pin!(limiter.acquire(None, false));
        assert!(futures::poll!(second.as_mut()).is_pending());
        assert!(futures::poll!(third.as_mut()).is_pending());
        for permit in held {
            permit.release(Signal::Success);
        }
        let std::task::Poll::Ready(Some(second)) = futures::poll!(second) else {
            panic!("the second in line waited for the first to take its slot");
        };
        let std::task::Poll::Ready(Some(third)) = futures::poll!(third) else {
            panic!("the third in line waited for the first to take its slot");
        };
        let std::task::Poll::Ready(Some(first)) = futures::poll!(stalled) else {
            panic!("the first in line lost the slot kept for it");
        };
        // Nobody is left in line and every slot is taken.
        let soon = Some(Instant::now() + Duration::from_millis(5));
        assert!(limiter.acquire(soon, false).await.is_none());
        drop((first, second, third));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_leaving_at_its_deadline_does_not_strand_a_free_slot() {
        let limiter = Arc::new(Limiter::new(1, 1));
        let held = limiter.acquire(None, false).await.unwrap();
        let early = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_millis(20);
                limiter.acquire(Some(deadline), false).await.is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let patient = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                limiter
                    .acquire(None, false)
                    .await
                    .map(|p| p.release(Signal::Neutral))
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !early.await.unwrap(),
            "the first waiter gave up at its deadline"
        );
        drop(held);
        let got = tokio::time::timeout(Duration::from_secs(1), patient).await;
        assert!(got.is_ok(), "the patient waiter got the freed slot");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_permit_frees_its_slot() {
        let limiter = Limiter::new(1, 1);
        let permit = limiter.acquire(None, false).await.unwrap();
        let soon = || Some(Instant::now() + Duration::from_millis(5));
        assert!(limiter.acquire(soon(), false).await.is_none());
        drop(permit);
        assert!(limiter.acquire(soon(), false).await.is_some());
    }
}
