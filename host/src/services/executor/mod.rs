//! The pooled HTTP executor: one pool per endpoint, shared by every node and
//! row that uses it, with bounded concurrency and retries to a deadline.

mod retry;
mod stats;
mod target;

pub use stats::StatsSnapshot;

use crate::config::{EndpointKind, EndpointSpec};
use anyhow::{Context, Result};
use retry::Verdict;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::Target;
use tokio::sync::Semaphore;

const CAPACITY_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(10));
const TRANSIENT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(250), Duration::from_secs(10));

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
}

pub struct Executor {
    endpoints: BTreeMap<String, Arc<Endpoint>>,
}

impl Executor {
    pub fn new(specs: &BTreeMap<String, EndpointSpec>) -> Result<Self> {
        let endpoints = specs
            .iter()
            .map(|(name, spec)| Ok((name.clone(), Arc::new(Endpoint::new(name, spec)?))))
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
    permits: Semaphore,
    stats: stats::Stats,
}

impl Endpoint {
    fn new(name: &str, spec: &EndpointSpec) -> Result<Self> {
        let target = Target::new(name, spec)?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(spec.connect_timeout_seconds))
            .pool_max_idle_per_host(spec.pool_size)
            .user_agent(concat!("weir/", env!("CARGO_PKG_VERSION")))
            .build()
            .with_context(|| format!("endpoint `{name}`: cannot build the HTTP client"))?;
        Ok(Self {
            name: name.to_string(),
            spec: spec.clone(),
            target,
            client,
            permits: Semaphore::new(spec.pool_size),
            stats: stats::Stats::default(),
        })
    }

    pub fn display_url(&self) -> String {
        self.target.display_url()
    }

    pub fn kind_name(&self) -> &'static str {
        match self.spec.kind {
            EndpointKind::Openai => "openai",
            EndpointKind::AzureOpenai => "azure-openai",
            EndpointKind::Http => "http",
        }
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Sends `body`, retrying capacity errors until `max_capacity_retry_seconds`
    /// after the first attempt and transient ones up to `max_retries` times.
    /// A pool slot is held only while a request is on the wire, never while
    /// waiting to retry.
    pub async fn send(
        &self,
        body: &str,
        mut on_attempt: impl FnMut(Attempt<'_>),
    ) -> Result<Response, CallError> {
        self.stats.request_started();
        let budget = Duration::from_secs_f64(self.spec.max_capacity_retry_seconds);
        let mut first: Option<Instant> = None;
        let (mut attempt, mut capacity_retries, mut transient_retries) = (0u32, 0u32, 0u32);
        loop {
            let permit = self
                .permits
                .acquire()
                .await
                .expect("the pool semaphore is never closed");
            let started = Instant::now();
            let first = *first.get_or_insert(started);
            let started_at_ms = crate::services::audit::now_ms();
            attempt += 1;
            self.stats.attempt_started();
            let result = self.attempt_once(body).await;
            let latency = started.elapsed();
            self.stats.attempt_ended(latency);
            drop(permit);

            let verdict = match &result {
                Ok((status, headers, text)) => retry::classify_status(*status, headers, text),
                Err(_) => Verdict::Transient,
            };
            let elapsed = first.elapsed();
            let wait = match verdict {
                Verdict::Capacity { retry_after } => {
                    let backoff =
                        retry::backoff(capacity_retries, CAPACITY_BACKOFF.0, CAPACITY_BACKOFF.1);
                    Some(retry_after.map_or(backoff, |r| r.max(backoff)))
                }
                Verdict::Transient if transient_retries < self.spec.max_retries => Some(
                    retry::backoff(transient_retries, TRANSIENT_BACKOFF.0, TRANSIENT_BACKOFF.1),
                ),
                _ => None,
            }
            .filter(|wait| elapsed + *wait < budget);

            let tokens = match (&result, verdict) {
                (Ok((_, _, text)), Verdict::Success) => self.usage(text),
                _ => None,
            };
            if let Some((prompt, completion)) = tokens {
                self.stats.tokens(prompt, completion);
            }
            let retry_cause = wait.and(verdict.retry_cause());
            on_attempt(Attempt {
                attempt,
                status: result.as_ref().ok().map(|(s, _, _)| *s),
                body: result.as_ref().ok().map(|(_, _, b)| b.as_str()),
                error: result.as_ref().err().cloned(),
                retry_cause,
                latency,
                started_at_ms,
                tokens,
            });

            if let Some(wait) = wait {
                match retry_cause {
                    Some("capacity") => capacity_retries += 1,
                    _ => transient_retries += 1,
                }
                self.stats.retried(retry_cause.unwrap_or("transient"));
                tokio::time::sleep(wait).await;
                continue;
            }
            let outcome = self.conclude(result, verdict, attempt, first.elapsed());
            self.stats.finished(outcome.is_ok());
            return outcome;
        }
    }

    async fn attempt_once(
        &self,
        body: &str,
    ) -> Result<(u16, reqwest::header::HeaderMap, String), String> {
        let timeout = Duration::from_secs_f64(self.spec.request_timeout_seconds);
        let response = self
            .client
            .post(self.target.url.clone())
            .headers(self.target.headers.clone())
            .timeout(timeout)
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| describe_transport(&e, timeout))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .map_err(|e| format!("the answer broke off: {}", describe_transport(&e, timeout)))?;
        Ok((status, headers, text))
    }

    fn conclude(
        &self,
        result: Result<(u16, reqwest::header::HeaderMap, String), String>,
        verdict: Verdict,
        attempts: u32,
        elapsed: Duration,
    ) -> Result<Response, CallError> {
        let name = &self.name;
        match result {
            Ok((status, _, body)) => {
                let response = Response {
                    status,
                    body,
                    attempts,
                    latency: elapsed,
                };
                match verdict {
                    Verdict::Success => Ok(response),
                    Verdict::Capacity { .. } => Err(CallError::DeadlineExceeded(format!(
                        "endpoint `{name}` was still over capacity (HTTP {status}) after {attempts} \
                         attempts in {:.1} s; max_capacity_retry_seconds is {} s",
                        elapsed.as_secs_f64(),
                        self.spec.max_capacity_retry_seconds
                    ))),
                    _ => Err(CallError::Status(response)),
                }
            }
            Err(message) => Err(CallError::Transport(format!(
                "endpoint `{name}`: {message} (after {attempts} attempts)"
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
