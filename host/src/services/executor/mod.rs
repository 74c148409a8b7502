//! The pooled HTTP executor: one pool per endpoint, shared by every node and
//! row that uses it. Each request passes the endpoint's circuit breaker, its
//! rate limits and its adaptive concurrency limit, then is retried by cause:
//! capacity errors until a deadline, transient ones a bounded number of times,
//! and never the ones retrying cannot fix.

pub(crate) mod anthropic;
mod breaker;
mod health;
mod limiter;
mod rate;
mod retry;
mod secrets;
mod stats;
mod target;

pub use breaker::BreakerState;
pub use stats::{Money, StatsSnapshot};

use crate::config::{EndpointKind, EndpointMode, EndpointSpec};
use crate::services::audit::{AuditLog, EndpointEventRecord, Record, now_ms};
use crate::services::batch::BatchQueue;
use crate::services::budget::{Budget, Hold};
use crate::services::cache::{self, ResponseCache};
use crate::services::cost::{self, CallCost};
use crate::services::stop::RunStop;
use anyhow::{Context, Result};
use breaker::{Breaker, Transition};
use health::Health;
use limiter::{Limiter, Signal};
use rate::RateLimits;
use retry::Verdict;
use secrets::Secrets;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::Target;

const CAPACITY_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(10));
const TRANSIENT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(250), Duration::from_secs(10));

const ROW_DEADLINE_PASSED: &str = "the row's deadline (row_deadline_seconds) passed";

/// The final answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: String,
    pub attempts: u32,
    pub latency: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    Denied(String),
    Status(Response),
    DeadlineExceeded(String),
    Transport(String),
}

/// One attempt, as the audit trail records it.
pub struct Attempt<'a> {
    pub attempt: u32,
    pub status: Option<u16>,
    pub body: Option<&'a str>,
    pub error: Option<String>,
    pub retry_cause: Option<&'static str>,
    pub latency: Duration,
    pub started_at_ms: i64,
    pub tokens: Option<(u64, u64)>,
    /// What a successful attempt cost, by the endpoint's price.
    pub cost: Option<CallCost>,
}

/// The headers an endpoint's requests carry, its key among them: for the
/// Batch API calls made outside a run (`weir cancel`).
pub fn request_headers(name: &str, spec: &EndpointSpec) -> Result<reqwest::header::HeaderMap> {
    Ok(Target::new(name, spec)?.headers)
}

/// What every endpoint of a run shares besides the audit trail.
pub struct RunControls {
    pub stop: Arc<RunStop>,
    pub budget: Arc<Budget>,
    /// The response cache of each endpoint that has one.
    pub caches: BTreeMap<String, Arc<ResponseCache>>,
}

impl RunControls {
    /// No budget and no cache: for checking a pipeline.
    pub fn unlimited() -> Self {
        let stop = Arc::new(RunStop::new());
        Self {
            budget: Arc::new(Budget::new(None, 0.0, stop.clone())),
            stop,
            caches: BTreeMap::new(),
        }
    }
}

pub struct Executor {
    endpoints: BTreeMap<String, Arc<Endpoint>>,
}

impl Executor {
    /// `stop`: where an endpoint that cannot serve the run stops it, and
    /// what cuts the calls in flight when the run stops.
    pub fn new(
        specs: &BTreeMap<String, EndpointSpec>,
        audit: Option<Arc<AuditLog>>,
        controls: &RunControls,
    ) -> Result<Self> {
        let endpoints = specs
            .iter()
            .map(|(name, spec)| {
                Ok((
                    name.clone(),
                    Arc::new(Endpoint::new(name, spec, audit.clone(), controls)?),
                ))
            })
            .collect::<Result<_>>()?;
        Ok(Self { endpoints })
    }

    pub fn endpoint(&self, name: &str) -> Option<Arc<Endpoint>> {
        self.endpoints.get(name).cloned()
    }

    pub fn endpoints(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.endpoints.values()
    }
}

pub struct Endpoint {
    pub name: String,
    pub spec: EndpointSpec,
    target: Target,
    client: reqwest::Client,
    limiter: Limiter,
    breaker: Breaker,
    rates: RateLimits,
    stats: stats::Stats,
    health: Health,
    budget: Arc<Budget>,
    cache: Option<Arc<ResponseCache>>,
    audit: Option<Arc<AuditLog>>,
    /// Taken out of every answer before anyone reads it.
    secrets: Secrets,
    /// `mode: batch`: where requests wait for the provider's batches.
    batch: Option<Arc<BatchQueue>>,
}

/// Why a request stopped waiting or retrying.
enum Stop {
    RowDeadline,
    RetryBudget,
}

impl Endpoint {
    fn new(
        name: &str,
        spec: &EndpointSpec,
        audit: Option<Arc<AuditLog>>,
        controls: &RunControls,
    ) -> Result<Self> {
        let target = Target::new(name, spec)?;
        // Without an audit trail (`weir validate`) nothing is sent.
        let batch = match (&audit, spec.mode) {
            (Some(audit), EndpointMode::Batch) => Some(Arc::new(BatchQueue::open(
                name,
                spec,
                target.headers.clone(),
                audit.path(),
                audit.run_id(),
                Arc::clone(&controls.stop),
                Arc::clone(&controls.budget),
            )?)),
            _ => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(spec.connect_timeout_seconds))
            .pool_max_idle_per_host(spec.pool_size)
            .user_agent(concat!("weir/", env!("CARGO_PKG_VERSION")))
            .build()
            .with_context(|| format!("endpoint `{name}`: cannot build the HTTP client"))?;
        let initial = if spec.adaptive_concurrency {
            spec.initial_concurrency
        } else {
            spec.pool_size
        };
        Ok(Self {
            name: name.to_string(),
            spec: spec.clone(),
            target,
            client,
            limiter: Limiter::new(initial, spec.pool_size),
            breaker: Breaker::new(
                spec.breaker_failures,
                Duration::from_secs_f64(spec.breaker_cooldown_seconds),
            ),
            rates: RateLimits::new(spec.requests_per_minute, spec.tokens_per_minute),
            stats: stats::Stats::default(),
            health: Health::new(
                name,
                spec.kind,
                Duration::from_secs_f64(spec.abort_after_seconds),
                Arc::clone(&controls.stop),
            ),
            budget: Arc::clone(&controls.budget),
            cache: controls.caches.get(name).cloned(),
            audit,
            secrets: Secrets::of(spec),
            batch,
        })
    }

    /// A row took a provider batch's answer for the first time: counts its
    /// tokens, and its cost at the Batch API's price in the endpoint's
    /// figures and against the budget, with the saving over the online price.
    pub fn batch_answer_taken(
        &self,
        request: &str,
        answer: &str,
        tokens: Option<(u64, u64)>,
    ) -> Option<CallCost> {
        if let Some((prompt, completion)) = tokens {
            self.stats.tokens(prompt, completion);
        }
        let price = self.spec.price.as_ref()?;
        let online = cost::call_cost(price, request, answer);
        let paid = CallCost {
            usd: online.usd * cost::batch_factor(price),
            ..online
        };
        self.stats.cost(paid.usd, paid.estimated);
        self.budget.spend(paid.usd);
        if let Some(batch) = &self.batch {
            batch.saved(online.usd - paid.usd);
        }
        Some(paid)
    }

    /// Where the endpoint's requests wait for batches, in batch mode.
    pub fn batch(&self) -> Option<&Arc<BatchQueue>> {
        self.batch.as_ref()
    }

    pub fn display_url(&self) -> String {
        self.target.display_url()
    }

    pub fn kind_name(&self) -> &'static str {
        match self.spec.kind {
            EndpointKind::Openai => "openai",
            EndpointKind::AzureOpenai => "azure-openai",
            EndpointKind::Http => "http",
            EndpointKind::Anthropic => "anthropic",
        }
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats
            .snapshot(self.limiter.snapshot(), self.breaker.state())
    }

    /// Sends `body`. Capacity errors are retried until
    /// `max_capacity_retry_seconds` after the first attempt, transient ones up
    /// to `max_retries` times, and nothing outlives `row_deadline`. A slot of
    /// the pool is held only while a request is on the wire. Once the run is
    /// aborted, nothing is sent and a call in flight is cut.
    pub async fn send(
        &self,
        body: &str,
        row_deadline: Option<Instant>,
        on_attempt: impl FnMut(Attempt<'_>),
    ) -> Result<Response, CallError> {
        let stop = self.health.stop();
        let result = tokio::select! {
            biased;
            _ = stop.aborted() => {
                let reason = stop.reason().map(ToString::to_string).unwrap_or_default();
                return Err(CallError::Transport(format!("not sent: the run is stopping ({reason})")));
            }
            result = self.send_with_retries(body, row_deadline, on_attempt) => result,
        };
        self.health.judge(&result);
        if let Ok(response) = &result {
            self.keep_in_cache(body, response);
        }
        result
    }

    /// How the cache tells this endpoint from others: its kind and URL.
    fn identity(&self) -> String {
        format!("{} {}", self.kind_name(), self.display_url())
    }

    /// The answer an identical request got before, from the cache; counted
    /// with what it saved.
    pub fn cached_answer(&self, body: &str) -> Option<Response> {
        let cache = self.cache.as_ref()?;
        let found = cache.get(&cache::key(&self.identity(), body));
        let (answer, paid) = match found {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(endpoint = %self.name, "the response cache cannot be read: {e:#}");
                return None;
            }
        };
        self.stats
            .cache_hit(paid.unwrap_or(0.0), cost::is_sampled(body));
        Some(Response {
            status: 200,
            body: answer,
            attempts: 0,
            latency: Duration::ZERO,
        })
    }

    /// Only successful answers are kept.
    fn keep_in_cache(&self, body: &str, response: &Response) {
        let Some(cache) = &self.cache else { return };
        if !(200..300).contains(&response.status) {
            return;
        }
        let paid = self
            .spec
            .price
            .as_ref()
            .map(|p| cost::call_cost(p, body, &response.body).usd);
        let identity = self.identity();
        let kept = cache.put(
            &cache::key(&identity, body),
            &identity,
            &response.body,
            cost::is_sampled(body),
            paid,
        );
        if let Err(e) = kept {
            tracing::warn!(endpoint = %self.name, "the response cache cannot be written: {e:#}");
        }
    }

    async fn send_with_retries(
        &self,
        body: &str,
        row_deadline: Option<Instant>,
        mut on_attempt: impl FnMut(Attempt<'_>),
    ) -> Result<Response, CallError> {
        self.stats.request_started();
        let tokens = if self.rates.is_limited() {
            rate::estimate_tokens(body)
        } else {
            0
        };
        let mut first: Option<Instant> = None;
        let (mut attempt, mut capacity_retries, mut transient_retries) = (0u32, 0u32, 0u32);
        loop {
            let budget_end = first.map(|f| f + self.retry_budget());
            let wait_deadline = earliest(row_deadline, budget_end);
            let expected = self
                .spec
                .price
                .as_ref()
                .map(|p| cost::estimate(p, body, self.stats.mean_cost()));
            let admitted = self
                .admit(tokens, expected, wait_deadline, attempt > 0)
                .await;
            let (ticket, permit, hold) = match admitted {
                Some(admitted) => admitted,
                None if self.health.stop().is_draining() => {
                    self.stats.finished(false);
                    return Err(CallError::Transport(
                        "not sent: the run is stopping".to_string(),
                    ));
                }
                None => {
                    let stop = if row_deadline == wait_deadline {
                        Stop::RowDeadline
                    } else {
                        Stop::RetryBudget
                    };
                    return self.give_up(
                        stop,
                        attempt,
                        first,
                        "waiting for the endpoint (circuit breaker open or limits reached)",
                    );
                }
            };
            let started = Instant::now();
            let first_attempt = *first.get_or_insert(started);
            let started_at_ms = now_ms();
            attempt += 1;
            self.stats.attempt_started();
            let timeout = match row_deadline {
                Some(d) => self
                    .request_timeout()
                    .min(d.saturating_duration_since(started)),
                None => self.request_timeout(),
            };
            let result = self.without_secrets(self.attempt_once(body, timeout).await);
            let latency = started.elapsed();
            self.stats.attempt_ended(latency);

            let verdict = match &result {
                Ok(answer) => retry::classify_status(
                    answer.status,
                    &answer.headers,
                    &answer.body,
                    retry::promises_json(self.spec.kind, &answer.headers),
                ),
                Err(failure) if failure.timed_out => Verdict::Timeout,
                Err(_) => Verdict::Transient,
            };
            permit.release(match verdict {
                Verdict::Success => Signal::Success,
                Verdict::Capacity { .. } | Verdict::Timeout if self.spec.adaptive_concurrency => {
                    Signal::Capacity
                }
                _ => Signal::Neutral,
            });
            let failure = match (&result, verdict) {
                (Err(f), _) => Some(f.message.clone()),
                (Ok(a), Verdict::Transient) => Some(format!("HTTP {}", a.status)),
                (Ok(a), Verdict::NotJson) => Some(not_json(a)),
                _ => None,
            };
            if let Some(transition) = self.breaker.record(ticket, failure.as_deref()) {
                self.report(transition);
            }
            if let Ok(answer) = &result {
                if matches!(verdict, Verdict::Capacity { .. }) {
                    self.stats.capacity_error();
                }
                match rate::window(&answer.headers) {
                    Some(rate::Window::Spent(hold)) => {
                        let hold = hold.min(self.retry_budget());
                        self.limiter.pause_until(Instant::now() + hold);
                        self.limiter.set_min_spacing(Some(hold));
                    }
                    Some(rate::Window::Open) => self.limiter.set_min_spacing(None),
                    None => {}
                }
            }

            let elapsed = first_attempt.elapsed();
            let budget = self.retry_budget();
            let wait = match verdict {
                Verdict::Capacity { retry_after } => {
                    let backoff =
                        retry::backoff(capacity_retries, CAPACITY_BACKOFF.0, CAPACITY_BACKOFF.1);
                    // The server's word is capped at the budget: a wait
                    // beyond it is not waited, and the request gives up.
                    Some(retry_after.map_or(backoff, |r| r.min(budget).max(backoff)))
                }
                Verdict::Transient | Verdict::Timeout | Verdict::NotJson
                    if transient_retries < self.spec.max_retries =>
                {
                    Some(retry::backoff(
                        transient_retries,
                        TRANSIENT_BACKOFF.0,
                        TRANSIENT_BACKOFF.1,
                    ))
                }
                _ => None,
            };
            let in_time = |wait: &Duration| {
                elapsed + *wait < budget && row_deadline.is_none_or(|d| Instant::now() + *wait < d)
            };
            let wait = wait.filter(in_time);

            let tokens_used = match (&result, verdict) {
                (Ok(answer), Verdict::Success) => self.usage(&answer.body),
                _ => None,
            };
            let cost = match (&result, verdict, &self.spec.price) {
                (Ok(answer), Verdict::Success, Some(price)) => {
                    Some(cost::call_cost(price, body, &answer.body))
                }
                _ => None,
            };
            if let Some(hold) = hold {
                self.budget.settle(hold, cost.map_or(0.0, |c| c.usd));
            }
            if let Some(cost) = cost {
                self.stats.cost(cost.usd, cost.estimated);
            }
            if let Some((prompt, completion)) = tokens_used {
                self.stats.tokens(prompt, completion);
            }
            let retry_cause = wait.and(verdict.retry_cause());
            on_attempt(Attempt {
                attempt,
                status: result.as_ref().ok().map(|a| a.status),
                body: result.as_ref().ok().map(|a| a.body.as_str()),
                error: match (&result, verdict) {
                    (Err(f), _) => Some(f.message.clone()),
                    (Ok(a), Verdict::NotJson) => Some(not_json(a)),
                    _ => None,
                },
                retry_cause,
                latency,
                started_at_ms,
                tokens: tokens_used,
                cost,
            });

            if let Some(wait) = wait {
                match retry_cause {
                    Some("capacity") => capacity_retries += 1,
                    // While the breaker is open the endpoint is down, not this
                    // request: waiting out an outage spends none of its
                    // retries, and the outage's length is `abort_after_seconds`'s.
                    _ if self.breaker.state() != BreakerState::Closed => {}
                    _ => transient_retries += 1,
                }
                self.stats.retried(retry_cause.unwrap_or("transient"));
                tokio::time::sleep(wait).await;
                continue;
            }
            let outcome = self.conclude(
                result,
                verdict,
                attempt,
                first_attempt.elapsed(),
                row_deadline,
            );
            self.stats
                .finished(outcome.is_ok() && verdict == Verdict::Success);
            return outcome;
        }
    }

    /// Waits for the breaker, the rate limits and a slot in the pool.
    /// Also holds the request's `expected` cost against the run's budget.
    async fn admit(
        &self,
        tokens: u32,
        expected: Option<f64>,
        deadline: Option<Instant>,
        retry: bool,
    ) -> Option<(breaker::Ticket, limiter::Permit<'_>, Option<Hold>)> {
        let waited = Instant::now();
        if self.rates.is_limited() {
            let admitted = match deadline {
                Some(d) => tokio::time::timeout_at(d.into(), self.rates.admit(tokens))
                    .await
                    .is_ok(),
                None => {
                    self.rates.admit(tokens).await;
                    true
                }
            };
            if !admitted {
                return None;
            }
        }
        let permit = self.limiter.acquire(deadline, retry).await;
        // A run that is stopping lets the calls on the wire finish but sends
        // no new one.
        if self.health.stop().is_draining() {
            return None;
        }
        let hold = match expected {
            Some(expected) => Some(self.budget.hold(expected)?),
            None => None,
        };
        // The breaker is asked last, right before sending: a request that
        // waited for a slot while the endpoint went down must not go out
        // once the breaker has opened.
        let (ticket, transition) = match permit {
            Some(_) => self.breaker.admit(deadline).await,
            None => (None, None),
        };
        if let Some(transition) = transition {
            self.report(transition);
        }
        self.stats.throttled(waited.elapsed());
        match (ticket, permit) {
            (Some(ticket), Some(permit)) => Some((ticket, permit, hold)),
            _ => {
                if let Some(hold) = hold {
                    self.budget.settle(hold, 0.0);
                }
                None
            }
        }
    }

    /// How long capacity errors are retried (`max_capacity_retry_seconds`),
    /// and the longest any wait the endpoint asks for is taken.
    fn retry_budget(&self) -> Duration {
        Duration::from_secs_f64(self.spec.max_capacity_retry_seconds)
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.spec.request_timeout_seconds)
    }

    fn give_up(
        &self,
        stop: Stop,
        attempts: u32,
        first: Option<Instant>,
        doing: &str,
    ) -> Result<Response, CallError> {
        self.stats.finished(false);
        let spent = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        let why = match stop {
            Stop::RowDeadline => ROW_DEADLINE_PASSED.to_string(),
            Stop::RetryBudget => format!(
                "max_capacity_retry_seconds ({} s) ran out",
                self.spec.max_capacity_retry_seconds
            ),
        };
        Err(CallError::DeadlineExceeded(format!(
            "endpoint `{}`: {why} while {doing}, after {attempts} attempts in {spent:.1} s",
            self.name
        )))
    }

    /// Logs and audits a change of the circuit breaker.
    fn report(&self, transition: Transition) {
        self.health.breaker_changed(&transition);
        tracing::warn!(
            endpoint = %self.name,
            "circuit breaker {}: {}",
            transition.to.name(),
            transition.reason
        );
        if let Some(audit) = &self.audit {
            audit.record(Record::EndpointEvent(EndpointEventRecord {
                endpoint: self.name.clone(),
                at_ms: now_ms(),
                event: format!("breaker_{}", transition.to.name().replace('-', "_")),
                detail: transition.reason,
            }));
        }
    }

    async fn attempt_once(&self, body: &str, timeout: Duration) -> Result<Answer, AttemptFailure> {
        let body = match self.spec.kind {
            EndpointKind::Anthropic => anthropic::request(body),
            _ => body.to_string(),
        };
        let response = self
            .client
            .post(self.target.url.clone())
            .headers(self.target.headers.clone())
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| AttemptFailure::from_reqwest(&e, timeout))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.map_err(|e| {
            let mut failure = AttemptFailure::from_reqwest(&e, timeout);
            failure.message = format!("the answer broke off: {}", failure.message);
            failure
        })?;
        let body = match self.spec.kind {
            EndpointKind::Anthropic if (200..300).contains(&status) => anthropic::answer(&body),
            _ => body,
        };
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// An attempt's answer, or what went wrong, with the endpoint's secrets
    /// taken out: an endpoint or a proxy may echo them back.
    fn without_secrets(
        &self,
        result: Result<Answer, AttemptFailure>,
    ) -> Result<Answer, AttemptFailure> {
        match result {
            Ok(mut answer) => {
                self.secrets.redact_headers(&mut answer.headers);
                answer.body = self.secrets.redact(std::mem::take(&mut answer.body));
                Ok(answer)
            }
            Err(mut failure) => {
                failure.message = self.secrets.redact(std::mem::take(&mut failure.message));
                Err(failure)
            }
        }
    }

    fn conclude(
        &self,
        result: Result<Answer, AttemptFailure>,
        verdict: Verdict,
        attempts: u32,
        elapsed: Duration,
        row_deadline: Option<Instant>,
    ) -> Result<Response, CallError> {
        let name = &self.name;
        let deadline_passed = row_deadline.is_some_and(|d| Instant::now() >= d);
        match result {
            Ok(answer) => {
                let status = answer.status;
                let response = Response {
                    status,
                    body: answer.body,
                    attempts,
                    latency: elapsed,
                };
                match verdict {
                    // An answer that is still not JSON after the retries is
                    // handed on as it came: the guest reads it and fails the
                    // row (`invalid_response` in the built-in `llm`).
                    Verdict::Success | Verdict::NotJson => Ok(response),
                    Verdict::Capacity { retry_after } => Err(CallError::DeadlineExceeded(format!(
                        "endpoint `{name}` was still over capacity (HTTP {status}) after {attempts} \
                         attempts in {:.1} s; {}{}",
                        elapsed.as_secs_f64(),
                        if deadline_passed {
                            ROW_DEADLINE_PASSED.to_string()
                        } else {
                            format!(
                                "max_capacity_retry_seconds is {} s",
                                self.spec.max_capacity_retry_seconds
                            )
                        },
                        asked_to_wait(retry_after)
                    ))),
                    _ => Err(CallError::Status(response)),
                }
            }
            Err(failure) if deadline_passed => Err(CallError::DeadlineExceeded(format!(
                "endpoint `{name}`: {ROW_DEADLINE_PASSED}; last attempt: {} \
                 (after {attempts} attempts)",
                failure.message
            ))),
            Err(failure) => Err(CallError::Transport(format!(
                "endpoint `{name}`: {} (after {attempts} attempts)",
                failure.message
            ))),
        }
    }

    /// Token counts from an OpenAI-style `usage` object.
    fn usage(&self, body: &str) -> Option<(u64, u64)> {
        if self.spec.kind == EndpointKind::Http {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(body).ok()?;
        let usage = value.get("usage")?;
        let count = |key: &str| usage.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
        Some((count("prompt_tokens"), count("completion_tokens")))
    }
}

/// Waits for `notified`, or until `until` when given, whichever comes first.
async fn wait(
    notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    until: Option<Instant>,
) {
    match until {
        Some(at) => {
            tokio::select! {
                _ = tokio::time::sleep_until(at.into()) => {}
                _ = notified => {}
            }
        }
        None => notified.await,
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

struct AttemptFailure {
    message: String,
    timed_out: bool,
}

impl AttemptFailure {
    fn from_reqwest(err: &reqwest::Error, timeout: Duration) -> Self {
        Self {
            message: describe_transport(err, timeout),
            timed_out: err.is_timeout(),
        }
    }
}

/// The wait a last capacity answer asked for, when it was one worth naming:
/// the reason the request stopped rather than waiting.
fn asked_to_wait(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(wait) if wait >= weir_formats::http_headers::MAX_WAIT => {
            "; the endpoint asked to wait a year or more".to_string()
        }
        Some(wait) if wait >= Duration::from_secs(1) => {
            format!("; the endpoint asked to wait {:.0} s", wait.as_secs_f64())
        }
        _ => String::new(),
    }
}

/// What the audit trail and the breaker say of a 2xx that is not JSON.
fn not_json(answer: &Answer) -> String {
    format!(
        "HTTP {} with a body that is not JSON: {}",
        answer.status,
        retry::body_start(&answer.body)
    )
}

/// reqwest's Display hides the cause that tells users what to fix.
fn describe_transport(err: &reqwest::Error, timeout: Duration) -> String {
    if err.is_timeout() {
        return format!(
            "no answer within {} s (request_timeout_seconds)",
            timeout.as_secs_f64()
        );
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
