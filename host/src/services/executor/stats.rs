//! Per-endpoint counters, shown in the run summary and stored with the run.

use super::breaker::BreakerState;
use super::limiter::LimiterSnapshot;
use super::retry::RetryCause;
use super::window::Tokens;
use crate::services::running_mean::RunningMean;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[derive(Default)]
pub struct Stats {
    requests: AtomicU64,
    attempts: AtomicU64,
    successes: AtomicU64,
    failures: AtomicU64,
    capacity_retries: AtomicU64,
    transient_retries: AtomicU64,
    hung_retries: AtomicU64,
    timeouts: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    capacity_errors: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
    latencies: Mutex<Latencies>,
    /// Attempts' latency as a running mean: read on the path of every row,
    /// where the histogram's lock and quantile would cost too much.
    smoothed_latency: RunningMean,
    money: Mutex<Money>,
}

/// Attempt latencies in a histogram of fixed size (under 200 KB), however
/// many calls a run makes: a list of every one grew by 4 bytes a call.
struct Latencies(Histogram<u64>);

impl Latencies {
    /// Microseconds from 1 µs to an hour, to 3 significant figures: a
    /// percentile is off by at most 0.1 %, well under the millisecond shown.
    const HIGHEST_US: u64 = 3_600_000_000;

    fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        // An attempt longer than an hour counts as an hour.
        self.0.saturating_record(us.max(1));
    }

    /// The latency at quantile `q`, in whole milliseconds.
    fn ms_at(&self, q: f64) -> Option<u32> {
        if self.0.is_empty() {
            return None;
        }
        // The middle of the value's bucket, not its top: no bias upwards.
        let us = self.0.median_equivalent(self.0.value_at_quantile(q));
        Some((us as f64 / 1000.0).round() as u32)
    }
}

impl Default for Latencies {
    fn default() -> Self {
        Self(
            Histogram::new_with_bounds(1, Self::HIGHEST_US, 3)
                .expect("1 µs to an hour at 3 significant figures is a valid histogram"),
        )
    }
}

/// What the endpoint's calls cost, and what its cache saved.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Money {
    /// USD, by the endpoint's `price`; 0 without one.
    pub cost_usd: f64,
    /// Calls with a cost.
    pub costed_calls: u64,
    /// Calls whose cost was estimated because the answer carried no usage.
    pub cost_estimated_calls: u64,
    pub cache_hits: u64,
    /// Hits on requests with temperature above 0, which a fresh call could
    /// have answered differently.
    pub cache_sampled_hits: u64,
    /// What the cached answers cost when they were paid for.
    pub cache_saved_usd: f64,
}

/// A decision of the adaptive limit, as the summary stores it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LimitDecision {
    /// Seconds since the endpoint was set up.
    pub at: f64,
    pub from: u32,
    pub to: u32,
    pub why: String,
}

/// Read back from `runs.summary_json` by `weir runs RUN`: fields a run
/// recorded before they existed read as their default.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct StatsSnapshot {
    pub requests: u64,
    pub attempts: u64,
    pub successes: u64,
    pub failures: u64,
    pub capacity_retries: u64,
    pub transient_retries: u64,
    /// Attempts given up for hung (past the learned attempt timeout) and sent again.
    pub hung_retries: u64,
    /// Attempts with no answer within `request_timeout_seconds`.
    pub timeouts: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// 429/503/529 answers received.
    pub capacity_errors: u64,
    pub peak_in_flight: u64,
    /// The adaptive concurrency limit now, at its highest, and at each change
    /// as (seconds since start, limit).
    pub concurrency_limit: u32,
    pub peak_concurrency_limit: u32,
    pub concurrency_limit_changes: Vec<(f64, u32)>,
    /// The cuts, undos and drains that moved the limit, with their reasons.
    pub concurrency_limit_decisions: Vec<LimitDecision>,
    /// Where the limit started, when an earlier run against the same
    /// endpoint had learned one.
    pub learned_start: Option<super::LearnedStart>,
    /// Wall time during which requests waited for the breaker, rate limits
    /// or a slot (not a sum over requests).
    pub throttled_seconds: f64,
    pub breaker: String,
    /// Wall time during which the breaker was open or half-open.
    pub breaker_open_seconds: f64,
    pub latency_p50_ms: Option<u32>,
    pub latency_p99_ms: Option<u32>,
    #[serde(flatten)]
    pub money: Money,
}

impl Stats {
    pub fn request_started(&self) {
        self.requests.fetch_add(1, Relaxed);
    }

    /// A request that ends without sending again, after `attempts` went
    /// out (a kept refusal answers it, or the run is stopping). With none
    /// sent it never reached the endpoint, so it is not one of its requests;
    /// otherwise it failed.
    pub fn ended_unsent(&self, attempts: u32) {
        match attempts {
            0 => {
                self.requests.fetch_sub(1, Relaxed);
            }
            _ => self.finished(false),
        }
    }

    pub fn attempt_started(&self) {
        self.attempts.fetch_add(1, Relaxed);
        let now = self.in_flight.fetch_add(1, Relaxed) + 1;
        self.peak_in_flight.fetch_max(now, Relaxed);
    }

    pub fn attempt_ended(&self, latency: Duration) {
        self.in_flight.fetch_sub(1, Relaxed);
        self.latencies.lock().expect("stats lock").record(latency);
        self.smoothed_latency.record(latency);
    }

    /// How long recent attempts took, once one has ended.
    pub fn typical_latency(&self) -> Option<Duration> {
        self.smoothed_latency.get()
    }

    pub fn retried(&self, cause: RetryCause) {
        match cause {
            RetryCause::Capacity => self.capacity_retries.fetch_add(1, Relaxed),
            RetryCause::Transient => self.transient_retries.fetch_add(1, Relaxed),
            RetryCause::Hung => self.hung_retries.fetch_add(1, Relaxed),
        };
    }

    pub fn finished(&self, ok: bool) {
        if ok {
            self.successes.fetch_add(1, Relaxed);
        } else {
            self.failures.fetch_add(1, Relaxed);
        }
    }

    /// An attempt had no answer within `request_timeout_seconds`.
    pub fn timed_out(&self) {
        self.timeouts.fetch_add(1, Relaxed);
    }

    pub fn capacity_error(&self) {
        self.capacity_errors.fetch_add(1, Relaxed);
    }

    pub fn tokens(&self, prompt: u64, completion: u64) {
        self.prompt_tokens.fetch_add(prompt, Relaxed);
        self.completion_tokens.fetch_add(completion, Relaxed);
    }

    /// The tokens an answered request has taken on average, once one has.
    pub fn tokens_per_answer(&self) -> Option<Tokens> {
        let answered = self.successes.load(Relaxed) as f64;
        let prompt = self.prompt_tokens.load(Relaxed) as f64;
        let completion = self.completion_tokens.load(Relaxed) as f64;
        (answered > 0.0 && prompt + completion > 0.0).then(|| Tokens {
            input: prompt / answered,
            output: completion / answered,
        })
    }

    pub fn cost(&self, usd: f64, estimated: bool) {
        let mut money = self.money.lock().expect("stats lock");
        money.cost_usd += usd;
        money.costed_calls += 1;
        money.cost_estimated_calls += u64::from(estimated);
    }

    /// What a call has cost on average so far.
    pub fn mean_cost(&self) -> Option<f64> {
        let money = self.money.lock().expect("stats lock");
        (money.costed_calls > 0).then(|| money.cost_usd / money.costed_calls as f64)
    }

    pub fn cache_hit(&self, saved_usd: f64, sampled: bool) {
        let mut money = self.money.lock().expect("stats lock");
        money.cache_hits += 1;
        money.cache_sampled_hits += u64::from(sampled);
        money.cache_saved_usd += saved_usd;
    }

    pub fn snapshot(
        &self,
        limiter: LimiterSnapshot,
        breaker: BreakerState,
        breaker_open: Duration,
        throttled: Duration,
    ) -> StatsSnapshot {
        let (latency_p50_ms, latency_p99_ms) = {
            let latencies = self.latencies.lock().expect("stats lock");
            (latencies.ms_at(0.5), latencies.ms_at(0.99))
        };
        StatsSnapshot {
            requests: self.requests.load(Relaxed),
            attempts: self.attempts.load(Relaxed),
            successes: self.successes.load(Relaxed),
            failures: self.failures.load(Relaxed),
            capacity_retries: self.capacity_retries.load(Relaxed),
            transient_retries: self.transient_retries.load(Relaxed),
            hung_retries: self.hung_retries.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            prompt_tokens: self.prompt_tokens.load(Relaxed),
            completion_tokens: self.completion_tokens.load(Relaxed),
            capacity_errors: self.capacity_errors.load(Relaxed),
            peak_in_flight: self.peak_in_flight.load(Relaxed),
            concurrency_limit: limiter.limit,
            peak_concurrency_limit: limiter.peak_limit,
            concurrency_limit_changes: limiter
                .samples
                .iter()
                .map(|(at, limit)| (to_the_millisecond(*at), *limit))
                .collect(),
            concurrency_limit_decisions: limiter
                .decisions
                .iter()
                .map(|d| LimitDecision {
                    at: to_the_millisecond(d.at),
                    from: d.from,
                    to: d.to,
                    why: d.why.to_string(),
                })
                .collect(),
            learned_start: None,
            throttled_seconds: throttled.as_secs_f64(),
            breaker: breaker.name().to_string(),
            breaker_open_seconds: breaker_open.as_secs_f64(),
            latency_p50_ms,
            latency_p99_ms,
            money: self.money.lock().expect("stats lock").clone(),
        }
    }
}

/// Seconds, rounded to the millisecond as the summary stores them.
fn to_the_millisecond(at: Duration) -> f64 {
    (at.as_secs_f64() * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typical_latency_is_unknown_until_an_attempt_ends_then_follows_recent_ones() {
        let stats = Stats::default();
        assert_eq!(stats.typical_latency(), None);
        stats.attempt_started();
        stats.attempt_ended(Duration::from_millis(80));
        assert_eq!(stats.typical_latency(), Some(Duration::from_millis(80)));
        stats.attempt_started();
        stats.attempt_ended(Duration::ZERO);
        assert_eq!(stats.typical_latency(), Some(Duration::from_millis(70)));
    }

    fn percentiles(latencies: impl IntoIterator<Item = Duration>) -> (Option<u32>, Option<u32>) {
        let stats = Stats::default();
        for latency in latencies {
            stats.attempt_started();
            stats.attempt_ended(latency);
        }
        let snapshot = stats.snapshot(
            LimiterSnapshot::default(),
            BreakerState::Closed,
            Duration::ZERO,
            Duration::ZERO,
        );
        (snapshot.latency_p50_ms, snapshot.latency_p99_ms)
    }

    #[test]
    fn no_attempt_has_no_latency() {
        assert_eq!(percentiles([]), (None, None));
    }

    #[test]
    fn percentiles_are_whole_milliseconds_of_the_attempts() {
        assert_eq!(
            percentiles([Duration::from_millis(20)]),
            (Some(20), Some(20))
        );
        let spread = (1..=1000).map(Duration::from_millis);
        assert_eq!(percentiles(spread), (Some(500), Some(990)));
        let slow_tail = (0..990)
            .map(|_| Duration::from_millis(12))
            .chain((0..10).map(|_| Duration::from_secs(30)));
        assert_eq!(percentiles(slow_tail), (Some(12), Some(12)));
        let slower_tail = (0..980)
            .map(|_| Duration::from_millis(12))
            .chain((0..20).map(|_| Duration::from_secs(30)));
        let (p50, p99) = percentiles(slower_tail);
        assert_eq!(p50, Some(12));
        assert!(within_a_thousandth(p99, 30_000), "{p99:?}");
    }

    fn within_a_thousandth(ms: Option<u32>, expected: u32) -> bool {
        ms.is_some_and(|ms| ms.abs_diff(expected) as f64 <= f64::from(expected) / 1000.0)
    }

    #[test]
    fn sub_millisecond_and_hour_long_attempts_stay_in_range() {
        assert_eq!(percentiles([Duration::ZERO]), (Some(0), Some(0)));
        let (p50, _) = percentiles([Duration::from_secs(7200)]);
        assert!(within_a_thousandth(p50, 3_600_000), "{p50:?}");
    }
}
