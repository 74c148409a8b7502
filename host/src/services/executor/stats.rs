//! Per-endpoint counters, shown in the run summary and stored with the run.

use super::breaker::BreakerState;
use super::limiter::LimiterSnapshot;
use serde::Serialize;
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
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    capacity_errors: AtomicU64,
    throttled_us: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
    latencies_ms: Mutex<Vec<u32>>,
    money: Mutex<Money>,
}

/// What the endpoint's calls cost, and what its cache saved.
#[derive(Debug, Clone, Default, Serialize)]
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

#[derive(Debug, Clone, Serialize, Default)]
pub struct StatsSnapshot {
    pub requests: u64,
    pub attempts: u64,
    pub successes: u64,
    pub failures: u64,
    pub capacity_retries: u64,
    pub transient_retries: u64,
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
    /// Total time requests waited for the breaker, rate limits or a slot.
    pub throttled_seconds: f64,
    pub breaker: &'static str,
    pub latency_p50_ms: Option<u32>,
    pub latency_p99_ms: Option<u32>,
    #[serde(flatten)]
    pub money: Money,
}

impl Stats {
    pub fn request_started(&self) {
        self.requests.fetch_add(1, Relaxed);
    }

    pub fn attempt_started(&self) {
        self.attempts.fetch_add(1, Relaxed);
        let now = self.in_flight.fetch_add(1, Relaxed) + 1;
        self.peak_in_flight.fetch_max(now, Relaxed);
    }

    pub fn attempt_ended(&self, latency: Duration) {
        self.in_flight.fetch_sub(1, Relaxed);
        let ms = latency.as_millis().min(u32::MAX as u128) as u32;
        self.latencies_ms.lock().expect("stats lock").push(ms);
    }

    pub fn retried(&self, cause: &str) {
        match cause {
            "capacity" => self.capacity_retries.fetch_add(1, Relaxed),
            _ => self.transient_retries.fetch_add(1, Relaxed),
        };
    }

    pub fn finished(&self, ok: bool) {
        if ok {
            self.successes.fetch_add(1, Relaxed);
        } else {
            self.failures.fetch_add(1, Relaxed);
        }
    }

    pub fn capacity_error(&self) {
        self.capacity_errors.fetch_add(1, Relaxed);
    }

    pub fn throttled(&self, waited: Duration) {
        self.throttled_us
            .fetch_add(waited.as_micros() as u64, Relaxed);
    }

    pub fn tokens(&self, prompt: u64, completion: u64) {
        self.prompt_tokens.fetch_add(prompt, Relaxed);
        self.completion_tokens.fetch_add(completion, Relaxed);
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

    pub fn snapshot(&self, limiter: LimiterSnapshot, breaker: BreakerState) -> StatsSnapshot {
        let mut latencies = self.latencies_ms.lock().expect("stats lock").clone();
        latencies.sort_unstable();
        let pick = |q: f64| -> Option<u32> {
            let last = latencies.len().checked_sub(1)?;
            latencies.get(((last as f64) * q).round() as usize).copied()
        };
        StatsSnapshot {
            requests: self.requests.load(Relaxed),
            attempts: self.attempts.load(Relaxed),
            successes: self.successes.load(Relaxed),
            failures: self.failures.load(Relaxed),
            capacity_retries: self.capacity_retries.load(Relaxed),
            transient_retries: self.transient_retries.load(Relaxed),
            prompt_tokens: self.prompt_tokens.load(Relaxed),
            completion_tokens: self.completion_tokens.load(Relaxed),
            capacity_errors: self.capacity_errors.load(Relaxed),
            peak_in_flight: self.peak_in_flight.load(Relaxed),
            concurrency_limit: limiter.limit,
            peak_concurrency_limit: limiter.peak_limit,
            concurrency_limit_changes: limiter
                .samples
                .iter()
                .map(|(at, limit)| ((at.as_secs_f64() * 1000.0).round() / 1000.0, *limit))
                .collect(),
            throttled_seconds: self.throttled_us.load(Relaxed) as f64 / 1e6,
            breaker: breaker.name(),
            latency_p50_ms: pick(0.5),
            latency_p99_ms: pick(0.99),
            money: self.money.lock().expect("stats lock").clone(),
        }
    }
}
