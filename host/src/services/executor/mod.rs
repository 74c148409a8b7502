//! The pooled HTTP executor: one pool per endpoint, shared by every node and
//! row that uses it. Each request passes the endpoint's circuit breaker, its
//! rate limits and its adaptive concurrency limit, then is retried by cause:
//! capacity errors until a deadline, transient ones a bounded number of times,
//! and never the ones retrying cannot fix.
//!
//! Each layer has one job: `admission` (what a request waits for),
//! `limiter` (the slots and their lines), `controller` (the adaptive limit),
//! `pacing` (spacing dispatches), `dispatch` (one attempt over HTTP), `retry`
//! (classifying an attempt and when to try again), `schema` (servers that
//! refuse structured output), `breaker`, `health`,
//! `stats` and `throttle` (the figures), and `send`, which takes a request
//! through them. Time is tokio's (`clock`), so tests run on a paused clock.

mod admission;
pub(crate) mod anthropic;
mod arrivals;
mod attempt_timeout;
mod breaker;
mod clock;
mod connections;
mod controller;
mod dispatch;
mod health;
mod learned;
mod limiter;
mod outage_log;
mod pacing;
mod queue_wait;
mod rate;
mod retry;
mod schema;
mod secrets;
mod send;
#[cfg(test)]
mod sim;
mod stats;
mod streaming;
mod target;
mod throttle;
mod to_come;
mod window;

pub use connections::use_own_connections;
pub use to_come::RowsToCome;

pub use breaker::BreakerState;
pub use learned::LearnedStart;
/// How an answer is judged by its status and body; a provider batch's lines
/// are judged the same way.
pub use retry::{Verdict, classify_status};
pub use stats::{Money, StatsSnapshot};

use crate::config::{EndpointKind, EndpointMode, EndpointSpec};
use crate::context::{Context, Contextual, causes};
use crate::services::audit::{AuditLog, EndpointEventRecord, Record, now_ms};
use crate::services::batch::BatchQueue;
use crate::services::budget::Budget;
use crate::services::cache::{CacheSlot, ResponseCache};
use crate::services::cost::{self, CallCost};
use crate::services::stop::RunStop;
use breaker::{Breaker, Transition};
use connections::Clients;
use dispatch::Dispatch;
use health::Health;
use limiter::Limiter;
use outage_log::OutageLog;
use rate::RateLimits;
use secrets::Secrets;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::Target;
pub use target::TargetError;
use throttle::WaitClock;
use window::ProviderWindows;

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
/// An endpoint the executor cannot set up.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Client(#[from] Contextual<reqwest::Error>),
    #[error(transparent)]
    Batch(#[from] crate::services::batch::BatchError),
}

pub fn request_headers(
    name: &str,
    spec: &EndpointSpec,
) -> Result<reqwest::header::HeaderMap, TargetError> {
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
    ) -> Result<Self, EndpointError> {
        let endpoints = specs
            .iter()
            .map(|(name, spec)| {
                Ok((
                    name.clone(),
                    Arc::new(Endpoint::new(name, spec, audit.clone(), controls)?),
                ))
            })
            .collect::<Result<_, EndpointError>>()?;
        Ok(Self { endpoints })
    }

    pub fn endpoint(&self, name: &str) -> Option<Arc<Endpoint>> {
        self.endpoints.get(name).cloned()
    }

    /// The rows still to enter the run, for the endpoints to tell its last
    /// stretch by.
    pub fn expect_rows(&self, rows: &Arc<RowsToCome>) {
        for endpoint in self.endpoints() {
            endpoint.limiter.expect_rows(Arc::clone(rows));
        }
    }

    pub fn endpoints(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.endpoints.values()
    }
}

pub struct Endpoint {
    pub name: String,
    pub spec: EndpointSpec,
    target: Target,
    clients: Clients,
    limiter: Limiter,
    breaker: Breaker,
    rates: RateLimits,
    stats: stats::Stats,
    throttled: WaitClock,
    health: Health,
    outage_log: OutageLog,
    budget: Arc<Budget>,
    cache: Option<Arc<ResponseCache>>,
    audit: Option<Arc<AuditLog>>,
    /// Taken out of every answer before anyone reads it.
    secrets: Secrets,
    /// `mode: batch`: where requests wait for the provider's batches.
    batch: Option<Arc<BatchQueue>>,
    /// Whether the endpoint has accepted a `json_schema` request yet.
    schema: schema::SchemaSupport,
    attempt_timeout: attempt_timeout::SharedAttemptTimeout,
    /// Whether an attempt that ran out of time waited behind others.
    queue_wait: queue_wait::QueueWait,
    /// The limit learned by earlier runs, and this run's kept for later ones.
    carry: learned::Carry,
}

impl Endpoint {
    fn new(
        name: &str,
        spec: &EndpointSpec,
        audit: Option<Arc<AuditLog>>,
        controls: &RunControls,
    ) -> Result<Self, EndpointError> {
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
        let client = http_client(name, spec)?;
        let initial = if spec.adaptive_concurrency {
            spec.initial_concurrency
        } else {
            spec.pool_size
        };
        let url = target.display_url();
        Ok(Self {
            name: name.to_string(),
            spec: spec.clone(),
            target,
            clients: Clients::new(client),
            limiter: Limiter::sharing_windows(
                name,
                initial,
                spec.pool_size,
                ProviderWindows::shared_by(spec.shards_sharing_windows),
            ),
            breaker: Breaker::new(
                spec.breaker_failures,
                // The first timeout a hung request meets (the first-byte
                // one is validated no longer than the request's).
                Duration::from_secs_f64(
                    spec.first_byte_timeout_seconds
                        .unwrap_or(spec.request_timeout_seconds),
                ),
                Duration::from_secs_f64(spec.breaker_cooldown_seconds),
            ),
            rates: RateLimits::new(spec.requests_per_minute, spec.tokens_per_minute),
            stats: stats::Stats::default(),
            throttled: WaitClock::default(),
            health: Health::new(
                name,
                spec.kind,
                url,
                Duration::from_secs_f64(spec.abort_after_seconds),
                Arc::clone(&controls.stop),
            ),
            outage_log: OutageLog::new(Duration::from_secs_f64(spec.abort_after_seconds)),
            budget: Arc::clone(&controls.budget),
            cache: controls.caches.get(name).cloned(),
            audit,
            secrets: Secrets::of(spec),
            batch,
            schema: schema::SchemaSupport::new(spec.kind),
            attempt_timeout: attempt_timeout::SharedAttemptTimeout::new(
                spec.adaptive_attempt_timeout
                    .then(|| attempt_timeout::Shape {
                        factor: spec.attempt_timeout_factor,
                        floor: Duration::from_secs_f64(spec.min_attempt_timeout_seconds),
                    }),
            ),
            queue_wait: queue_wait::QueueWait::default(),
            carry: learned::Carry::default(),
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
        let (paid, online_usd) = self.batch_answer_cost(request, answer)?;
        self.stats.cost(paid.usd, paid.estimated);
        self.budget.spend(paid.usd);
        if let Some(batch) = &self.batch {
            batch.saved(online_usd - paid.usd);
        }
        Some(paid)
    }

    /// What a provider batch's answer costs at the Batch API's price, and
    /// what it would have cost online; counted nowhere.
    pub fn batch_answer_cost(&self, request: &str, answer: &str) -> Option<(CallCost, f64)> {
        let price = self.spec.price.as_ref()?;
        let online = cost::call_cost(price, request, answer);
        let paid = CallCost {
            usd: online.usd * cost::batch_factor(price),
            ..online
        };
        Some((paid, online.usd))
    }

    /// How long a request sent now should take to be answered, once the
    /// endpoint has answered: its recent attempts' mean latency, known
    /// whether or not its concurrency adapts.
    pub fn expected_wait(&self) -> Option<Duration> {
        self.stats.typical_latency()
    }

    /// Rows worth having under way for this endpoint: see
    /// `Limiter::rows_wanted`.
    pub fn rows_wanted(&self) -> usize {
        self.limiter.rows_wanted()
    }

    /// Rows a node keeps under way for this endpoint once its limit is
    /// where it should settle: at the limit an earlier run learned, or
    /// else at the pool size.
    pub fn rows_expected(&self) -> usize {
        let limit = self
            .carry
            .started()
            .map_or(self.spec.pool_size, |s| s.learned as usize);
        limiter::rows_wanted_at(limit.min(self.spec.pool_size))
    }

    /// Where the endpoint's requests wait for batches, in batch mode.
    /// Why `body` may not be sent to this endpoint at all, said as the row's
    /// error: none, unless it asks for a streamed answer.
    pub fn refusal(&self, body: &str) -> Option<String> {
        streaming::refusal(self.spec.kind, &self.name, body)
    }

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
        StatsSnapshot {
            learned_start: self.carry.started(),
            ..self.stats.snapshot(
                self.limiter.snapshot(),
                self.breaker.state(),
                self.breaker.open_time(),
                self.throttled.total(),
            )
        }
    }

    /// Sends `body`. Capacity errors are retried until
    /// `max_capacity_retry_seconds` after the first attempt, transient ones up
    /// to `max_retries` times, and nothing outlives `row_deadline`. A slot of
    /// the pool is held only while a request is on the wire. Once the run is
    /// aborted, nothing is sent and a call in flight is cut. A successful
    /// answer is kept under `cache_slot`, when there is one.
    pub async fn send(
        &self,
        body: &str,
        cache_slot: Option<&CacheSlot>,
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
            result = self.send_with_retries(
                body,
                row_deadline.map(tokio::time::Instant::from_std),
                on_attempt,
            ) => result,
        };
        let (result, paid) = match result {
            Ok((response, paid)) => (Ok(response), paid),
            Err(e) => (Err(e), None),
        };
        self.health.judge(&result);
        if let (Ok(response), Some(slot)) = (&result, cache_slot) {
            self.keep_in_cache(slot, body, response, paid);
        }
        result
    }

    /// How the cache tells this endpoint from others: its kind and URL.
    fn identity(&self) -> String {
        format!("{} {}", self.kind_name(), self.display_url())
    }

    /// `body`'s place in the endpoint's response cache; None without one.
    pub fn cache_slot(&self, body: &str) -> Option<CacheSlot> {
        self.cache.as_ref()?;
        Some(CacheSlot::of(&self.identity(), body))
    }

    /// The answer an identical request got before, from the cache; counted
    /// with what it saved.
    pub fn cached_answer(&self, slot: &CacheSlot) -> Option<Response> {
        let cache = self.cache.as_ref()?;
        let (answer, paid) = match cache.get(slot.key()) {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(endpoint = %self.name, "the response cache cannot be read: {}", causes(&e));
                return None;
            }
        };
        self.stats.cache_hit(paid.unwrap_or(0.0), slot.sampled());
        Some(Response {
            status: 200,
            body: answer,
            attempts: 0,
            latency: Duration::ZERO,
        })
    }

    /// Keeps a successful online answer in the response cache, with what
    /// its attempt was counted to cost. An answer that is not JSON was
    /// counted nothing, and is kept with the cost estimated from the texts.
    fn keep_in_cache(&self, slot: &CacheSlot, body: &str, response: &Response, paid: Option<f64>) {
        if !(200..300).contains(&response.status) {
            return;
        }
        let paid = paid.or_else(|| {
            let price = self.spec.price.as_ref()?;
            Some(cost::call_cost(price, body, &response.body).usd)
        });
        self.keep_answer(slot, &response.body, paid);
    }

    /// Keeps `answer`, which cost `paid`, in the response cache. Only
    /// successful answers are kept: callers check.
    pub fn keep_answer(&self, slot: &CacheSlot, answer: &str, paid: Option<f64>) {
        let Some(cache) = &self.cache else { return };
        let kept = cache.put(slot.key(), &self.identity(), answer, slot.sampled(), paid);
        if let Err(e) = kept {
            tracing::warn!(endpoint = %self.name, "the response cache cannot be written: {}", causes(&e));
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

    /// Logs and audits a change of the circuit breaker.
    fn report(&self, transition: Transition) {
        self.health.breaker_changed(&transition);
        let (state, name) = (transition.to.name(), &self.name);
        match self.outage_log.warning(&transition) {
            Some(text) => tracing::warn!(endpoint = %name, "circuit breaker {state}: {text}"),
            None => {
                tracing::info!(endpoint = %name, "circuit breaker {state}: {}", transition.reason)
            }
        }
        if let Some(audit) = &self.audit {
            audit.record(Record::EndpointEvent(EndpointEventRecord {
                endpoint: self.name.clone(),
                at_ms: now_ms(),
                event: format!("breaker_{}", transition.to.name().replace('-', "_")),
                detail: transition.reason,
            }));
        }
    }

    fn dispatch(&self) -> Dispatch<'_> {
        let client = self.clients.current(|| http_client(&self.name, &self.spec));
        Dispatch {
            client,
            target: &self.target,
            kind: self.spec.kind,
            secrets: &self.secrets,
            max_answer_bytes: self.spec.max_answer_mb << 20,
        }
    }
}

/// An endpoint's HTTP client: its pool of connections, with the endpoint's
/// connect timeout, HTTP/1.1 unless the endpoint allows HTTP/2 (see
/// `EndpointSpec::http2`), following only the redirects that keep the key
/// where base_url points (`services::redirects`).
fn http_client(name: &str, spec: &EndpointSpec) -> Result<reqwest::Client, EndpointError> {
    let builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs_f64(spec.connect_timeout_seconds))
        .pool_max_idle_per_host(spec.pool_size)
        .redirect(crate::services::redirects::policy())
        .user_agent(concat!("weir/", env!("CARGO_PKG_VERSION")));
    let builder = match spec.http2 {
        true => builder,
        false => builder.http1_only(),
    };
    Ok(builder
        .build()
        .with_context(|| format!("endpoint `{name}`: cannot build the HTTP client"))?)
}
