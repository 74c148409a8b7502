//! Adaptive concurrency (AIMD) for one endpoint.
//!
//! The limit on requests in flight starts low and, like TCP, doubles every
//! round trip (slow start) until the first capacity signal, which halves it
//! back to the last window that passed. From then on a capacity signal
//! (429/503/529 or a timeout) cuts it by `DECREASE` — once per round trip, so a
//! burst of rejections from one window cuts it only once — and remembers the
//! limit it was cut from as the ceiling. Growth, while the limit is actually
//! reached, follows TCP BIC: below the ceiling it closes half the distance per
//! round trip (quickly back near the ceiling, then ever slower, so most time is
//! spent just under it rather than saw-toothing a whole cut below); above the
//! ceiling it probes slowly first and then doubles its step every round trip,
//! so a provider that gained capacity is found in a few round trips.
//! It never exceeds `pool_size`. In steady state answers clock the dispatches
//! (a freed slot is refilled at once). When a pause ends, the waiters it held
//! would leave together, so for one round trip after it dispatches are paced
//! at one per `rtt / limit`; while a provider reports its rate window spent,
//! they stay at least one slot of that rate apart. A `Retry-After`
//! or an exhausted rate-limit header pauses every dispatch to the endpoint.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Multiplicative decrease on a capacity signal.
const DECREASE: f64 = 0.9;
/// Smallest growth per round trip (slots): how slowly the ceiling is approached
/// and first probed beyond.
const MIN_GROWTH: f64 = 0.1;
/// Below this spacing, pacing would cost more in timer wake-ups than it saves.
const MIN_PACING: Duration = Duration::from_millis(1);
/// Weight of the newest round trip in the moving average.
const RTT_ALPHA: f64 = 0.1;
/// Pacing after a pause when no round trip has been measured yet.
const PACING_WITHOUT_RTT: Duration = Duration::from_secs(1);

pub struct Limiter {
    state: Mutex<State>,
    max: f64,
}

/// A waiting request: its place in line and how to wake it.
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

struct State {
    limit: f64,
    in_flight: usize,
    /// Requests waiting for a slot, first come first served. Retries have a
    /// line of their own that goes first: a retried request already waited
    /// its turn once, and while it waits again its row holds back every row
    /// behind it in the ordered output.
    waiting: VecDeque<Waiter>,
    retries_waiting: VecDeque<Waiter>,
    next_waiter: u64,
    /// Slow start lasts until the first capacity signal.
    slow_start: bool,
    /// The limit at the last capacity signal, before the cut.
    ceiling: f64,
    /// Requests sent before this instant belong to a window already cut for.
    last_decrease: Instant,
    /// When every slot was last taken. A success grows the limit only if the
    /// limit was reached while it was out: otherwise a bigger one is unused.
    last_saturated: Instant,
    paused_until: Option<Instant>,
    /// Dispatches are paced until then (one round trip after a pause ends).
    paced_until: Option<Instant>,
    next_dispatch: Instant,
    /// Set while the provider reports its rate window spent: dispatches are
    /// kept at least this far apart, one request per freed slot.
    min_spacing: Option<Duration>,
    rtt_ewma: Option<f64>,
    peak_limit: f64,
    samples: Vec<(Duration, u32)>,
    started: Instant,
}

/// What an attempt told the limiter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    Success,
    /// 429/503/529 or a timeout: the endpoint is at capacity.
    Capacity,
    /// Anything else (a 400, a reset): says nothing about capacity.
    Neutral,
}

pub struct Permit<'a> {
    limiter: &'a Limiter,
    sent_at: Instant,
    released: bool,
}

impl Limiter {
    pub fn new(initial: usize, max: usize) -> Self {
        let now = Instant::now();
        let max = max.max(1) as f64;
        let limit = (initial.max(1) as f64).min(max);
        Self {
            state: Mutex::new(State {
                limit,
                in_flight: 0,
                waiting: VecDeque::new(),
                retries_waiting: VecDeque::new(),
                next_waiter: 0,
                slow_start: true,
                ceiling: max,
                last_decrease: now,
                last_saturated: now,
                paused_until: None,
                paced_until: None,
                next_dispatch: now,
                min_spacing: None,
                rtt_ewma: None,
                peak_limit: limit,
                samples: vec![(Duration::ZERO, limit as u32)],
                started: now,
            }),
            max,
        }
    }

    /// Waits for a slot, for any pause to end, and for the pacing gap; gives
    /// up when `deadline` passes. Slots go first come first served, retries
    /// before new requests.
    pub async fn acquire(&self, deadline: Option<Instant>, retry: bool) -> Option<Permit<'_>> {
        let lane = if retry { Lane::Retry } else { Lane::New };
        let mut place: Option<Place<'_>> = None;
        loop {
            let wait_until = {
                let mut s = self.state.lock().expect("limiter lock");
                let now = Instant::now();
                let my_turn = s.is_next(lane, place.as_ref().map(|p| p.id));
                match s.paused_until {
                    Some(until) if until > now => Some(until),
                    _ if !my_turn || s.in_flight >= s.limit.floor() as usize => None,
                    _ if s.next_dispatch > now => Some(s.next_dispatch),
                    _ => {
                        s.in_flight += 1;
                        if s.in_flight >= s.limit.floor() as usize {
                            s.last_saturated = now;
                        }
                        let spacing = s.spacing(now);
                        if spacing >= MIN_PACING {
                            s.next_dispatch = now + spacing;
                        }
                        if let Some(mut place) = place.take() {
                            s.leave(place.lane, place.id);
                            place.left = true;
                        }
                        // Slots left over go on to whoever is next in line.
                        s.wake_next();
                        return Some(Permit {
                            limiter: self,
                            sent_at: now,
                            released: false,
                        });
                    }
                }
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            let place = place.get_or_insert_with(|| Place::join(self, lane));
            let notified = place.wake.notified();
            super::wait(
                std::pin::pin!(notified),
                super::earliest(wait_until, deadline),
            )
            .await;
        }
    }

    /// Stops every dispatch until `until` (a `Retry-After`, an exhausted
    /// rate-limit window).
    pub fn pause_until(&self, until: Instant) {
        let mut s = self.state.lock().expect("limiter lock");
        if s.paused_until.is_none_or(|p| p < until) {
            s.paused_until = Some(until);
            let round_trip = s
                .rtt_ewma
                .map_or(PACING_WITHOUT_RTT, Duration::from_secs_f64);
            s.paced_until = Some(until + round_trip);
        }
    }

    /// While `Some`, dispatches are at least this far apart (a provider's
    /// rate window is spent); `None` when it reports room again.
    pub fn set_min_spacing(&self, spacing: Option<Duration>) {
        self.state.lock().expect("limiter lock").min_spacing = spacing;
    }

    pub fn snapshot(&self) -> LimiterSnapshot {
        let s = self.state.lock().expect("limiter lock");
        LimiterSnapshot {
            limit: s.limit.floor() as u32,
            peak_limit: s.peak_limit.floor() as u32,
            samples: s.samples.clone(),
        }
    }

    fn release(&self, sent_at: Instant, signal: Signal) {
        let mut s = self.state.lock().expect("limiter lock");
        {
            s.in_flight -= 1;
            let now = Instant::now();
            let before = s.limit;
            match signal {
                Signal::Success => {
                    let rtt = (now - sent_at).as_secs_f64();
                    s.rtt_ewma = Some(match s.rtt_ewma {
                        Some(avg) => avg + RTT_ALPHA * (rtt - avg),
                        None => rtt,
                    });
                    if s.last_saturated >= sent_at {
                        let per_round_trip = if s.slow_start {
                            s.limit.floor()
                        } else {
                            growth_per_round_trip(s.limit, s.ceiling)
                        };
                        // One answer of the `limit` a round trip brings back.
                        s.limit = (s.limit + per_round_trip / s.limit.floor()).min(self.max);
                    }
                }
                Signal::Capacity if sent_at >= s.last_decrease => {
                    let factor = if s.slow_start { 0.5 } else { DECREASE };
                    s.slow_start = false;
                    s.ceiling = s.limit;
                    s.limit = (s.limit * factor).max(1.0);
                    s.last_decrease = now;
                }
                Signal::Capacity | Signal::Neutral => {}
            }
            if s.limit.floor() != before.floor() {
                s.peak_limit = s.peak_limit.max(s.limit);
                let at = now - s.started;
                let limit = s.limit.floor() as u32;
                s.samples.push((at, limit));
            }
        }
        // Wake the one next in line; whoever takes a slot wakes the next
        // while slots remain. Waking every waiter on every answer would cost
        // more CPU than the requests themselves.
        if s.in_flight < s.limit.floor() as usize {
            s.wake_next();
        }
    }
}

/// Binary search towards the ceiling, then probing beyond it with a step that
/// doubles each round trip (the distance covered so far), never more than half
/// the limit at once.
fn growth_per_round_trip(limit: f64, ceiling: f64) -> f64 {
    let step = if limit < ceiling {
        (ceiling - limit) / 2.0
    } else {
        limit - ceiling
    };
    step.clamp(MIN_GROWTH, (limit / 2.0).max(MIN_GROWTH))
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
        let mut s = limiter.state.lock().expect("limiter lock");
        let id = s.next_waiter;
        s.next_waiter += 1;
        let wake = Arc::new(Notify::new());
        let waiter = Waiter {
            id,
            wake: Arc::clone(&wake),
        };
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
        let mut s = self.limiter.state.lock().expect("limiter lock");
        s.leave(self.lane, self.id);
        if s.in_flight < s.limit.floor() as usize {
            s.wake_next();
        }
    }
}

impl State {
    /// Whether a request may take a free slot now: the first retry in line,
    /// or, with no retry waiting, the first new request in line (or a new
    /// request that has not queued, when nobody is in line).
    fn is_next(&self, lane: Lane, id: Option<u64>) -> bool {
        let first = |line: &VecDeque<Waiter>| line.front().map(|w| w.id);
        match lane {
            Lane::Retry => first(&self.retries_waiting) == id,
            Lane::New => self.retries_waiting.is_empty() && first(&self.waiting) == id,
        }
    }

    fn leave(&mut self, lane: Lane, id: u64) {
        let line = match lane {
            Lane::New => &mut self.waiting,
            Lane::Retry => &mut self.retries_waiting,
        };
        if let Some(at) = line.iter().position(|w| w.id == id) {
            line.remove(at);
        }
    }

    fn wake_next(&self) {
        if let Some(next) = self.retries_waiting.front().or(self.waiting.front()) {
            next.wake.notify_one();
        }
    }

    fn spacing(&self, now: Instant) -> Duration {
        let after_pause = match (self.paced_until, self.rtt_ewma) {
            (Some(until), Some(rtt)) if now < until => {
                Duration::from_secs_f64(rtt / self.limit.max(1.0))
            }
            (Some(until), None) if now < until => PACING_WITHOUT_RTT / self.limit.max(1.0) as u32,
            _ => Duration::ZERO,
        };
        self.min_spacing
            .map_or(after_pause, |floor| floor.max(after_pause))
    }
}

impl Permit<'_> {
    pub fn release(mut self, signal: Signal) {
        self.released = true;
        self.limiter.release(self.sent_at, signal);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        // A request abandoned mid-way (its row's deadline passed) still frees its slot.
        if !self.released {
            self.limiter.release(self.sent_at, Signal::Neutral);
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct LimiterSnapshot {
    pub limit: u32,
    pub peak_limit: u32,
    /// (time since start, limit) at every change of the whole-number limit.
    pub samples: Vec<(Duration, u32)>,
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

    #[tokio::test]
    async fn slow_start_doubles_per_saturated_window() {
        let limiter = Limiter::new(2, 64);
        for expected in [2, 4, 8, 16] {
            let permits = fill(&limiter).await;
            assert_eq!(permits.len(), expected);
            for p in permits {
                p.release(Signal::Success);
            }
        }
        assert_eq!(limiter.snapshot().limit, 32);
    }

    #[tokio::test]
    async fn a_capacity_burst_cuts_once_then_growth_closes_on_the_ceiling() {
        let limiter = Limiter::new(32, 64);
        for p in fill(&limiter).await {
            p.release(Signal::Capacity);
        }
        assert_eq!(
            limiter.snapshot().limit,
            16,
            "the first signal ends slow start by halving"
        );
        let permits = fill(&limiter).await;
        assert_eq!(permits.len(), 16);
        for p in permits {
            p.release(Signal::Capacity);
        }
        assert_eq!(
            limiter.snapshot().limit,
            14,
            "16 × 0.9, cut once for the window"
        );
        // Cut from 16 to 14.4: the ceiling is 16.
        let mut limits = Vec::new();
        for _ in 0..16 {
            for p in fill(&limiter).await {
                p.release(Signal::Success);
            }
            limits.push(limiter.snapshot().limit);
        }
        assert!(
            limits[..4].iter().all(|&l| (14..=16).contains(&l)) && limits[1] == 15,
            "back near the ceiling in a round trip or two, then just under it: {limits:?}"
        );
        assert!(
            limits[15] >= 24,
            "beyond the ceiling, growth speeds up: {limits:?}"
        );
    }

    #[tokio::test]
    async fn the_limit_never_exceeds_the_pool_size_nor_drops_below_one() {
        let limiter = Limiter::new(4, 6);
        for _ in 0..5 {
            for p in fill(&limiter).await {
                p.release(Signal::Success);
            }
        }
        assert_eq!(limiter.snapshot().limit, 6);
        for _ in 0..50 {
            for p in fill(&limiter).await {
                // Each window's requests start after the previous cut.
                p.release(Signal::Capacity);
            }
        }
        assert_eq!(limiter.snapshot().limit, 1);
    }

    #[tokio::test]
    async fn a_pause_holds_every_dispatch() {
        let limiter = Limiter::new(4, 4);
        limiter.pause_until(Instant::now() + Duration::from_millis(60));
        let started = Instant::now();
        let permit = limiter.acquire(None, false).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(55));
        drop(permit);
        let soon = Some(Instant::now() + Duration::from_millis(10));
        limiter.pause_until(Instant::now() + Duration::from_secs(5));
        assert!(
            limiter.acquire(soon, false).await.is_none(),
            "the deadline ends the wait"
        );
    }

    #[tokio::test]
    async fn a_retry_takes_the_next_free_slot_before_new_requests() {
        let limiter = std::sync::Arc::new(Limiter::new(1, 1));
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
        let first = order_rx.recv().await.unwrap();
        assert_eq!(first, "retry");
    }

    #[tokio::test]
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
        assert!(
            started.elapsed() >= Duration::from_millis(45),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn slots_go_to_waiting_requests_in_arrival_order() {
        let limiter = std::sync::Arc::new(Limiter::new(1, 1));
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

    #[tokio::test]
    async fn a_waiter_leaving_at_its_deadline_does_not_strand_a_free_slot() {
        let limiter = std::sync::Arc::new(Limiter::new(1, 1));
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

    #[tokio::test]
    async fn a_dropped_permit_frees_its_slot() {
        let limiter = Limiter::new(1, 1);
        let permit = limiter.acquire(None, false).await.unwrap();
        let soon = Some(Instant::now() + Duration::from_millis(5));
        assert!(limiter.acquire(soon, false).await.is_none());
        drop(permit);
        assert!(
            limiter
                .acquire(
                    soon.map(|_| Instant::now() + Duration::from_millis(5)),
                    false
                )
                .await
                .is_some()
        );
    }
}
