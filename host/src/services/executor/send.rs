//! A request's way through the endpoint: admission, one attempt, what the
//! attempt tells the limit, the breaker and the figures, what it cost, and
//! whether to try again.

use super::admission::Admitted;
use super::breaker::BreakerState;
use super::controller::Signal;
use super::dispatch::{Answer, AttemptFailure, FailureKind, Timeouts, not_json};
use super::queue_wait::Behind;
use super::retry::{self, RetryCause, RetryPolicy, Verdict};
use super::window::{RequestTokens, Sent, Tokens};
use super::{Attempt, CallError, Endpoint, Response, clock, cost, rate};
use crate::config::EndpointKind;
use crate::services::audit::now_ms;
use crate::services::budget::Hold;
use crate::services::redirects;
use std::time::Duration;
use tokio::time::Instant;

const ROW_DEADLINE_PASSED: &str = "the row's deadline (row_deadline_seconds) passed";

/// One attempt, as it went.
struct Tried {
    result: Result<Answer, AttemptFailure>,
    verdict: Verdict,
    started: Instant,
    started_at_ms: i64,
    latency: Duration,
    /// It ran out of time in the endpoint's queue, which answered this
    /// many requests while it waited.
    served_while_queued: Option<u32>,
    /// What shows that a timeout waited behind others in the endpoint's
    /// queue, if anything does.
    behind: Option<Behind>,
}

impl Endpoint {
    pub(super) async fn send_with_retries(
        &self,
        body: &str,
        row_deadline: Option<Instant>,
        mut on_attempt: impl FnMut(Attempt<'_>),
    ) -> Result<(Response, Option<f64>), CallError> {
        self.stats.request_started();
        // What the request asks of a rate limit: weir's own, or a token
        // window the provider reports.
        let tokens = if self.rates.is_limited() || self.spec.kind != EndpointKind::Http {
            rate::estimate_tokens(body)
        } else {
            Tokens::default()
        };
        let mut policy = RetryPolicy::new(self.retry_budget(), self.spec.max_retries);
        let mut first: Option<Instant> = None;
        // What went wrong first: the root cause a later failure may hide.
        let mut first_failure: Option<String> = None;
        let mut attempt = 0u32;
        // Attempts given up for hung so far: each gives the next twice the time.
        let mut hung = 0u32;
        loop {
            let budget_end = first.map(|f| f + self.retry_budget());
            let wait_deadline = clock::earliest(row_deadline, budget_end);
            let admitted = match self.schema.known_refusal(body) {
                // Refused before, or while waiting: not sent again.
                None => {
                    self.admit(body, tokens.total() as u32, wait_deadline, attempt > 0)
                        .await
                }
                Some(_) => None,
            };
            let Some(admitted) = admitted else {
                if let Some(refusal) = self.schema.known_refusal(body) {
                    self.stats.ended_unsent(attempt);
                    return Err(CallError::Status(refusal));
                }
                let refused = self.not_admitted(row_deadline == wait_deadline, attempt, first);
                return Err(with_first(refused, first_failure.as_deref()));
            };
            attempt += 1;
            let Admitted {
                ticket,
                permit,
                hold,
            } = admitted;
            let tried = self.try_once(body, row_deadline, hung).await;
            hung += u32::from(tried.verdict == Verdict::Hung);
            let sent = permit.sent();
            let signal = self.signal(tried.verdict);
            match tried.served_while_queued {
                Some(served) if signal == Signal::Overload => {
                    permit.release_after_queue_wait(served)
                }
                _ => permit.release(signal),
            }
            let first_attempt = *first.get_or_insert(tried.started);
            if tried.verdict != Verdict::Success && first_failure.is_none() {
                first_failure = Some(describe(&tried));
            }
            self.observe(&tried, ticket, sent, tokens);
            let ended_ms = tried.started_at_ms + tried.latency.as_millis() as i64;
            self.record_learned_limit_now_and_then(ended_ms);
            let elapsed = first_attempt.elapsed();
            let wait = policy.wait(tried.verdict, elapsed, row_deadline);
            let cause = wait.and(tried.verdict.retry_cause());
            let (tokens_used, cost) = self.settle(body, &tried, hold);
            on_attempt(Attempt {
                attempt,
                status: tried.result.as_ref().ok().map(|a| a.status),
                body: tried.result.as_ref().ok().map(|a| a.body.as_str()),
                error: failure_text(&tried),
                retry_cause: cause.map(RetryCause::name),
                latency: tried.latency,
                started_at_ms: tried.started_at_ms,
                tokens: tokens_used,
                cost,
            });
            if let (Some(wait), Some(cause)) = (wait, cause) {
                policy.retried(cause, self.breaker.state() == BreakerState::Closed);
                self.stats.retried(cause);
                if cause == RetryCause::Capacity {
                    let asked = match tried.verdict {
                        Verdict::Capacity { retry_after } => retry_after,
                        // Sat in the server's queue: the back-off eases the
                        // queue, which no answer's room says is gone.
                        _ => Some(wait),
                    };
                    self.limiter.wait_out_refusal(wait, asked).await;
                } else {
                    tokio::time::sleep(wait).await;
                }
                continue;
            }
            let elapsed = first_attempt.elapsed();
            let ok = tried.verdict == Verdict::Success;
            let last = describe(&tried);
            let root = first_failure
                .as_deref()
                .filter(|f| attempt > 1 && *f != last);
            let outcome = self
                .conclude(tried, attempt, elapsed, row_deadline)
                .map_err(|e| with_first(e, root));
            self.stats.finished(outcome.is_ok() && ok);
            return outcome.map(|response| (response, cost.map(|c| c.usd)));
        }
    }

    /// Returns once an attempt started at `started` has outlasted the
    /// attempt timeout learned since (never, if none is learned), with it.
    async fn learned_limit_passes(
        &self,
        started: Instant,
        configured: Duration,
        hung_before: u32,
    ) -> Duration {
        let limit = self.attempt_timeout.learned(configured, hung_before).await;
        tokio::time::sleep_until(started + limit).await;
        limit
    }

    async fn try_once(&self, body: &str, row_deadline: Option<Instant>, hung_before: u32) -> Tried {
        let started = Instant::now();
        let started_at_ms = now_ms();
        let answers_at_send = self.queue_wait.mark();
        self.stats.attempt_started();
        let configured = match row_deadline {
            Some(d) => self
                .request_timeout()
                .min(d.saturating_duration_since(started)),
            None => self.request_timeout(),
        };
        let learned = self.attempt_timeout.limit(configured, hung_before);
        let total = learned.unwrap_or(configured);
        let first_byte = self
            .spec
            .first_byte_timeout_seconds
            .map(Duration::from_secs_f64);
        let dispatch = self.dispatch();
        let attempt = dispatch.attempt(body, Timeouts { total, first_byte });
        let (result, total) = match learned {
            Some(_) => (attempt.await, total),
            // Sent before the endpoint's answers taught a timeout: one
            // learned meanwhile applies to it too, or a hang among a run's
            // first requests would hold its row for the whole of it.
            None => tokio::select! {
                result = attempt => (result, total),
                limit = self.learned_limit_passes(started, configured, hung_before) => (
                    Err(AttemptFailure {
                        message: String::new(),
                        kind: FailureKind::Timeout,
                    }),
                    limit,
                ),
            },
        };
        let learned = learned.or((total < configured).then_some(total));
        let latency = started.elapsed();
        self.stats.attempt_ended(latency);
        let timed_out = matches!(&result, Err(f) if f.kind == FailureKind::Timeout);
        if timed_out && learned.is_none() && total == self.request_timeout() {
            self.stats.timed_out();
        }
        let mut verdict = match &result {
            Ok(answer) => self.schema.judge(
                body,
                Some((answer.status, &answer.body)),
                retry::classify_answer(
                    self.spec.kind,
                    answer.status,
                    &answer.headers,
                    &answer.body,
                ),
            ),
            Err(failure) => match failure.kind {
                FailureKind::Timeout => Verdict::Timeout,
                FailureKind::NoFirstByte => Verdict::Queued,
                // The same request would be answered at such length again.
                FailureKind::TooLarge => Verdict::Fatal,
                FailureKind::Transport | FailureKind::Tls(_) | FailureKind::Unresolved => {
                    Verdict::Transient
                }
            },
        };
        match &result {
            Err(failure) => self.health.attempt_failed(failure),
            Ok(answer) if redirects::is_redirect(answer.status) => {
                self.health.redirected(answer.status, &answer.headers)
            }
            Ok(answer) if verdict == Verdict::NotJson => self.health.not_json(&answer.body),
            Ok(_) => {}
        }
        let mut behind = None;
        match verdict {
            Verdict::Success => {
                self.health.succeeded();
                self.attempt_timeout.answered(latency);
                self.queue_wait.answered(started);
            }
            Verdict::Timeout if learned.is_some() => verdict = Verdict::Hung,
            // A timeout behind others waited in the endpoint's queue. A
            // first-byte timeout is retried as a queue's either way; with
            // nothing behind it, it tells the breaker (below) that nothing
            // came back.
            Verdict::Timeout | Verdict::Queued => {
                behind = self.queue_wait.waited_behind_others(started, latency);
                if behind.is_some() {
                    verdict = Verdict::Queued;
                }
            }
            _ => {}
        }
        let result = match (result, behind) {
            (Err(failure), _) if verdict == Verdict::Hung => Err(AttemptFailure {
                message: format!(
                    "no answer within {:.1} s, while the endpoint's other answers came in time \
                     (adaptive_attempt_timeout): given up for hung",
                    total.as_secs_f64()
                ),
                ..failure
            }),
            (Err(failure), Some(behind)) => Err(AttemptFailure {
                message: format!("{}, {}", failure.message, behind.says()),
                ..failure
            }),
            (Err(failure), None) if failure.kind == FailureKind::NoFirstByte => {
                Err(AttemptFailure {
                    message: format!(
                        "{}, while nothing came back from the endpoint",
                        failure.message
                    ),
                    ..failure
                })
            }
            (other, _) => other,
        };
        let served_while_queued = (verdict == Verdict::Queued)
            .then(|| self.queue_wait.answered_since(answers_at_send))
            .filter(|&served| served > 0);
        if behind == Some(Behind::Answers) {
            self.queue_wait.timed_out_in_line(started);
        }
        Tried {
            result,
            verdict,
            started,
            started_at_ms,
            latency,
            served_while_queued,
            behind,
        }
    }

    /// What an attempt tells the adaptive limit.
    fn signal(&self, verdict: Verdict) -> Signal {
        match verdict {
            _ if !self.spec.adaptive_concurrency => Signal::Neutral,
            Verdict::Success => Signal::Success,
            Verdict::Capacity { .. } | Verdict::Timeout | Verdict::Queued => Signal::Overload,
            Verdict::Transient | Verdict::NotJson | Verdict::Fatal | Verdict::Hung => {
                Signal::Neutral
            }
        }
    }

    /// Tells the breaker and the figures how the attempt went, and follows
    /// the rate windows the answer reports (it was request `sent`, asking
    /// `asked_tokens` of the token windows).
    fn observe(
        &self,
        tried: &Tried,
        ticket: super::breaker::Ticket,
        sent: Sent,
        asked_tokens: Tokens,
    ) {
        // Capacity answers and a server's queue say the endpoint is busy,
        // not broken: they never open the breaker. A first-byte timeout
        // that no answer and no timeout ahead of it in line explain may be
        // a server that hung: counted, or a hung server would be retried
        // as a queue for all of `max_capacity_retry_seconds`.
        let failure = match (&tried.result, tried.verdict) {
            (Err(_), Verdict::Queued) if tried.behind.is_some() => None,
            (Err(f), _) => Some(f.message.clone()),
            (Ok(a), Verdict::Transient) if (200..=299).contains(&a.status) => {
                Some(error_in_success(a))
            }
            (Ok(a), Verdict::Transient) => Some(format!("HTTP {}", a.status)),
            (Ok(a), Verdict::NotJson) => Some(not_json(a)),
            _ => None,
        };
        if let Some(transition) = self
            .breaker
            .record(ticket, tried.started, failure.as_deref())
        {
            self.report(transition);
        }
        let Ok(answer) = &tried.result else { return };
        let refused = matches!(tried.verdict, Verdict::Capacity { .. });
        if refused {
            self.stats.capacity_error();
        }
        if let Some(report) = rate::report(&answer.headers) {
            self.limiter.follow_rate_report(
                &report,
                sent,
                refused,
                RequestTokens {
                    asked: (asked_tokens.total() > 0.0).then_some(asked_tokens),
                    used_on_average: self.stats.tokens_per_answer(),
                },
                self.retry_budget(),
            );
        }
    }

    /// The attempt's tokens and cost, counted and settled against the
    /// budget's hold.
    fn settle(
        &self,
        body: &str,
        tried: &Tried,
        hold: Option<Hold>,
    ) -> (Option<(u64, u64)>, Option<cost::CallCost>) {
        let answer = match (&tried.result, tried.verdict) {
            (Ok(answer), Verdict::Success) => Some(answer),
            _ => None,
        };
        let counted = self.spec.kind != EndpointKind::Http;
        // One read of the answer's `usage` serves its tokens and its cost.
        let usage = answer
            .filter(|_| counted || self.spec.price.is_some())
            .and_then(|a| cost::usage_in(&a.body));
        let tokens = usage.filter(|_| counted).map(|u| (u.prompt, u.completion));
        let cost = answer
            .zip(self.spec.price.as_ref())
            .map(|(a, price)| cost::call_cost_of(price, body, &a.body, usage));
        if let Some(hold) = hold {
            self.budget.settle(hold, cost.map_or(0.0, |c| c.usd));
        }
        if let Some(cost) = cost {
            self.stats.cost(cost.usd, cost.estimated);
        }
        if let Some((prompt, completion)) = tokens {
            self.stats.tokens(prompt, completion);
        }
        (tokens, cost)
    }

    fn not_admitted(
        &self,
        row_deadline_first: bool,
        attempts: u32,
        first: Option<Instant>,
    ) -> CallError {
        if self.health.stop().is_draining() {
            // Counted as failed, requests never sent made a run stopped while
            // rows waited for a slot report failures the endpoint never had.
            self.stats.ended_unsent(attempts);
            return CallError::Transport("not sent: the run is stopping".to_string());
        }
        self.stats.finished(false);
        let spent = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        let why = if row_deadline_first {
            ROW_DEADLINE_PASSED.to_string()
        } else {
            format!(
                "max_capacity_retry_seconds ({} s) ran out",
                self.spec.max_capacity_retry_seconds
            )
        };
        CallError::DeadlineExceeded(format!(
            "endpoint `{}`: {why} while waiting for the endpoint (circuit breaker open or \
             limits reached), after {attempts} attempts in {spent:.1} s",
            self.name
        ))
    }

    fn conclude(
        &self,
        tried: Tried,
        attempts: u32,
        elapsed: Duration,
        row_deadline: Option<Instant>,
    ) -> Result<Response, CallError> {
        let name = &self.name;
        let deadline_passed = row_deadline.is_some_and(|d| Instant::now() >= d);
        let answer = match tried.result {
            Ok(answer) => answer,
            Err(failure) if deadline_passed => {
                return Err(CallError::DeadlineExceeded(format!(
                    "endpoint `{name}`: {ROW_DEADLINE_PASSED}; last attempt: {} \
                     (after {attempts} attempts)",
                    failure.message
                )));
            }
            Err(failure) => {
                return Err(CallError::Transport(format!(
                    "endpoint `{name}`: {} (after {attempts} attempts)",
                    failure.message
                )));
            }
        };
        let status = answer.status;
        let response = Response {
            status,
            body: answer.body,
            attempts,
            latency: elapsed,
        };
        match tried.verdict {
            // An answer that is still not JSON after the retries is handed on
            // as it came: the guest reads it and fails the row
            // (`invalid_response` in the built-in `llm`).
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
}

/// An attempt's failure, as a row error would name it.
fn describe(tried: &Tried) -> String {
    match &tried.result {
        Err(failure) => failure.message.clone(),
        Ok(answer) => format!(
            "HTTP {}: {}",
            answer.status,
            retry::body_start(&answer.body)
        ),
    }
}

/// A failure that ends a request, with its first attempt's when that was
/// another (a timeout, then 500s). A status answer is handed on as the
/// endpoint gave it.
fn with_first(error: CallError, first: Option<&str>) -> CallError {
    let Some(first) = first else { return error };
    match error {
        CallError::Transport(m) => CallError::Transport(format!("{m}; first: {first}")),
        CallError::DeadlineExceeded(m) => {
            CallError::DeadlineExceeded(format!("{m}; first: {first}"))
        }
        other => other,
    }
}

/// What the audit trail says went wrong with an attempt.
fn failure_text(tried: &Tried) -> Option<String> {
    match (&tried.result, tried.verdict) {
        (Err(f), _) => Some(f.message.clone()),
        (Ok(a), Verdict::NotJson) => Some(not_json(a)),
        (Ok(_), Verdict::Success) => None,
        (Ok(a), _) if (200..=299).contains(&a.status) => Some(error_in_success(a)),
        _ => None,
    }
}

/// A 2xx that carried the provider's error object instead of an answer.
fn error_in_success(answer: &Answer) -> String {
    format!(
        "HTTP {} with an error instead of an answer: {}",
        answer.status,
        retry::body_start(&answer.body)
    )
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
