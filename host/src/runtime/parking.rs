//! How many of a node's instances may wait suspended on the network, and
//! what a row beyond that keeps instead.
//!
//! A row's instance waits inside its `send` until the answers come: with a
//! pool of a thousand requests in flight and a slow server, a thousand
//! instances would be held (their linear memory, stack and store) for rows
//! doing nothing but waiting. Up to the node's budget, an instance waits
//! suspended, which costs no extra CPU; it keeps its place in the budget
//! from its first request to the end of its call. Beyond it, the row parks:
//! its requests are sent from a future that owns them, the instance is
//! dropped, and the answers are kept here; once they are in, the row runs
//! again from the start and its requests, numbered the same way, take them
//! instead of being sent again.
//!
//! Running a row again costs a new instance and its first call: about
//! 0.2 ms of CPU for the built-in `llm` guest, several milliseconds for an
//! interpreter inside the component (a Python guest's new instance writes
//! megabytes of its memory image, each page a copy-on-write fault). A row
//! parks only while that is small against the wait it saves; otherwise its
//! instance waits suspended beyond the budget, within the node's memory
//! budget, which still bounds them all.

use super::bindings::{CallError, Response};
use crate::services::running_mean::RunningMean;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Instances allowed to wait suspended, per core: enough that a row rarely
/// has to run twice when the pool is a few times the cores.
pub const SUSPENDED_PER_CORE: usize = 64;

/// Of a node's memory budget, what this many instances per core take is
/// left to the calls that run; suspended instances may hold the rest. Half
/// the budget would park a Python guest's rows against a pool of 32: 29 of
/// its 13 MiB instances fit in half of 768 MiB, and a quarter of the rows
/// would run twice, doubling the CPU per row, with a third of the budget
/// unused.
const RUNNING_PER_CORE: usize = 2;

/// A row parks only if the wait it would spend suspended is at least this
/// many times the CPU its run again takes: restarting parked rows then costs
/// at most a tenth of the time they wait, and a guest that is slow to start
/// keeps its instances when answers come quickly.
const WAIT_PER_RESTART: u32 = 10;

/// The node's instances waiting suspended on the network, within a budget.
pub struct SuspendBudget {
    limit: AtomicUsize,
    suspended: AtomicUsize,
    /// The CPU a new instance takes to start and configure.
    instance: RunningMean,
    /// The latest start's CPU, in nanoseconds (0 before the first).
    latest_start: AtomicU64,
    /// The CPU a new instance's first call takes.
    first_call: RunningMean,
    /// Rows that parked, for the run's log.
    parked: AtomicU64,
}

impl SuspendBudget {
    /// `limit` suspended at once; `usize::MAX` never parks a row.
    pub fn new(limit: usize) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            suspended: AtomicUsize::new(0),
            instance: RunningMean::default(),
            latest_start: AtomicU64::new(0),
            first_call: RunningMean::default(),
            parked: AtomicU64::new(0),
        }
    }

    /// The budget of a node whose instances each hold `instance_bytes` of
    /// linear memory, within `node_memory_bytes`: a few per core, fewer when
    /// the node's memory budget would not hold them beside the instances
    /// that run.
    pub fn limit_for_node(instance_bytes: usize, node_memory_bytes: usize) -> usize {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let fit = node_memory_bytes / instance_bytes.max(64 << 10);
        let by_memory = fit.saturating_sub(cores * RUNNING_PER_CORE);
        (cores * SUSPENDED_PER_CORE).min(by_memory).max(1)
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// A new instance took `spent` of CPU to start and configure.
    pub fn instance_started(&self, spent: Duration) {
        self.instance.record(spent);
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.latest_start.store(nanos, Ordering::Relaxed);
    }

    /// A new instance's first call took `spent` of CPU: more than later
    /// calls, by the pages of its memory image it wrote for the first time.
    pub fn first_call_took(&self, spent: Duration) {
        self.first_call.record(spent);
    }

    /// The CPU a new instance takes to start and configure.
    pub fn start_cost(&self) -> Duration {
        self.instance.get().unwrap_or_default()
    }

    /// What starting an instance usually takes: the lesser of the mean and
    /// the latest start. A start that finds the machine's caches cold can
    /// take a hundred times the usual (7.6 ms for the `llm` guest's 70 µs),
    /// and the mean then stays high for dozens of starts; a guest slow to
    /// start is slow every time.
    pub fn typical_start_cost(&self) -> Duration {
        let latest = Duration::from_nanos(self.latest_start.load(Ordering::Relaxed));
        self.start_cost().min(latest)
    }

    /// The CPU a new instance's first call takes (a running mean).
    pub fn first_call_cost(&self) -> Duration {
        self.first_call.get().unwrap_or_default()
    }

    /// The CPU a parked row takes to run again: a new instance and its
    /// first call.
    pub fn restart_cost(&self) -> Duration {
        self.start_cost() + self.first_call_cost()
    }

    /// Whether a row beyond the budget should park rather than wait with
    /// its instance, its requests expected to take `wait`; unknown before
    /// an endpoint has answered, when parking keeps memory bounded.
    pub fn parking_pays(&self, wait: Option<Duration>) -> bool {
        wait.is_none_or(|wait| wait >= self.restart_cost() * WAIT_PER_RESTART)
    }

    /// Counts a row that parked.
    pub fn parked(&self) {
        self.parked.fetch_add(1, Ordering::Relaxed);
    }

    pub fn rows_parked(&self) -> u64 {
        self.parked.load(Ordering::Relaxed)
    }

    /// A place for one more suspended instance, held until dropped (at the
    /// end of its call); None when the budget is spent.
    pub fn try_suspend(self: &Arc<Self>) -> Option<Suspended> {
        let limit = self.limit();
        self.suspended
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Suspended(Arc::clone(self)))
    }
}

/// One instance waiting suspended, in its node's budget until dropped.
pub struct Suspended(Arc<SuspendBudget>);

impl Drop for Suspended {
    fn drop(&mut self) {
        self.0.suspended.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The answers a parked row's requests got while it had no instance, by
/// request index, until its replay takes them. Each answer is kept with a
/// hash of the request it answers, so a replay that asks something else
/// sends that instead of taking an answer to another question.
#[derive(Default)]
pub struct RecordedAnswers(Mutex<Vec<Recorded>>);

struct Recorded {
    request_index: u32,
    body_hash: u64,
    answer: Result<Response, CallError>,
}

impl RecordedAnswers {
    /// Keeps the answer to request `request_index`, whose body hashed to
    /// `body_hash` (see `body_hash`).
    pub fn put(&self, request_index: u32, body_hash: u64, answer: Result<Response, CallError>) {
        self.0.lock().expect("answers lock").push(Recorded {
            request_index,
            body_hash,
            answer,
        });
    }

    /// The answer recorded for request `request_index` with this body,
    /// taken: each answer serves one replay.
    pub fn take(&self, request_index: u32, body: &str) -> Option<Result<Response, CallError>> {
        let mut recorded = self.0.lock().expect("answers lock");
        if recorded.is_empty() {
            return None;
        }
        let hash = body_hash(body);
        let at = recorded
            .iter()
            .position(|r| r.request_index == request_index && r.body_hash == hash)?;
        Some(recorded.swap_remove(at).answer)
    }
}

pub fn body_hash(body: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_lets_its_limit_suspend_and_takes_each_back_when_dropped() {
        let budget = Arc::new(SuspendBudget::new(2));
        let first = budget.try_suspend();
        let second = budget.try_suspend();
        assert!(first.is_some() && second.is_some());
        assert!(budget.try_suspend().is_none(), "the third parks");
        drop(first);
        assert!(budget.try_suspend().is_some());
    }

    #[test]
    fn a_recorded_answer_serves_the_same_request_once() {
        let answers = RecordedAnswers::default();
        let ok = |body: &str| {
            Ok(Response {
                status: 200,
                body: body.into(),
                attempts: 1,
                latency_ms: 3,
            })
        };
        answers.put(0, body_hash("{\"q\":1}"), ok("one"));
        answers.put(1, body_hash("{\"q\":2}"), ok("two"));
        assert!(
            answers.take(1, "{\"q\":3}").is_none(),
            "another question is not answered"
        );
        let Some(Ok(second)) = answers.take(1, "{\"q\":2}") else {
            panic!("the answer to request 1")
        };
        assert_eq!(second.body, "two");
        assert!(answers.take(1, "{\"q\":2}").is_none(), "taken once");
        assert!(matches!(answers.take(0, "{\"q\":1}"), Some(Ok(r)) if r.body == "one"));
    }

    #[test]
    fn a_row_parks_only_when_its_wait_is_long_against_running_it_again() {
        let budget = SuspendBudget::new(1);
        assert!(budget.parking_pays(None), "no answer yet: park");
        budget.instance_started(Duration::from_millis(4));
        budget.first_call_took(Duration::from_millis(1));
        assert_eq!(budget.restart_cost(), Duration::from_millis(5));
        assert!(!budget.parking_pays(Some(Duration::from_millis(20))));
        assert!(budget.parking_pays(Some(Duration::from_millis(50))));
        // A cheap guest parks for a short wait.
        let cheap = SuspendBudget::new(1);
        cheap.instance_started(Duration::from_micros(100));
        cheap.first_call_took(Duration::from_micros(100));
        assert!(cheap.parking_pays(Some(Duration::from_millis(2))));
    }

    #[test]
    fn the_start_cost_follows_recent_instances() {
        let budget = SuspendBudget::new(1);
        budget.instance_started(Duration::from_millis(8));
        assert_eq!(budget.restart_cost(), Duration::from_millis(8));
        budget.instance_started(Duration::ZERO);
        assert_eq!(budget.restart_cost(), Duration::from_millis(7));
    }

    #[test]
    fn one_cold_start_does_not_make_a_quick_guest_slow_to_start() {
        let budget = SuspendBudget::new(1);
        budget.instance_started(Duration::from_micros(70));
        budget.instance_started(Duration::from_micros(7_600));
        // The mean moved an eighth of the way, the latest start is above it.
        assert_eq!(budget.typical_start_cost(), Duration::from_nanos(1_011_250));
        budget.instance_started(Duration::from_micros(70));
        assert_eq!(budget.typical_start_cost(), Duration::from_micros(70));
        assert!(
            budget.start_cost() > Duration::from_micros(800),
            "the mean remembers it"
        );
        // A guest slow to start stays slow.
        let slow = SuspendBudget::new(1);
        slow.instance_started(Duration::from_millis(9));
        slow.instance_started(Duration::from_millis(3));
        assert_eq!(slow.typical_start_cost(), Duration::from_millis(3));
    }

    #[test]
    fn a_node_budget_is_smaller_when_its_memory_would_not_hold_it() {
        let mib = 1 << 20;
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let running = cores * RUNNING_PER_CORE;
        // Room for ten beside the instances that run.
        assert_eq!(
            SuspendBudget::limit_for_node(2 * mib, (running + 10) * 2 * mib),
            10
        );
        assert_eq!(SuspendBudget::limit_for_node(2 * mib, 2 * mib), 1);
        assert_eq!(
            SuspendBudget::limit_for_node(mib, 768 * mib),
            (cores * SUSPENDED_PER_CORE).min(768 - running)
        );
    }
}
