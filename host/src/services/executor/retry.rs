//! What to do after an attempt: classify by HTTP status and the provider's
//! error code (never by message text), and how long to wait before the next.

use crate::config::EndpointKind;
use rand::Rng;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use std::time::Duration;
use tokio::time::Instant;
use weir_formats::http_headers;

const CAPACITY_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(10));
const TRANSIENT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(250), Duration::from_secs(10));

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Success,
    /// The endpoint is over capacity (429, 503, 529): retry until the deadline.
    Capacity {
        retry_after: Option<Duration>,
    },
    /// Likely to pass (other 5xx, 408, broken connections): a few retries.
    Transient,
    /// A 2xx whose body is not the JSON the endpoint promised (an HTML page
    /// from a proxy, a cut-off or empty body): retried like a transient
    /// failure; once the retries are spent, handed on as it came.
    NotJson,
    /// No answer in time: retried like a transient failure, and taken as a
    /// sign of overload by the adaptive limit.
    Timeout,
    /// No answer within the attempt timeout learned from the endpoint's
    /// answers, while its peers answered on time: given up for hung and
    /// sent again at once, with twice the time, spending no `max_retries`.
    /// Says nothing of the endpoint's capacity.
    Hung,
    /// The answer did not begin within `first_byte_timeout_seconds`: the
    /// request sat in the server's queue. Retried like a capacity answer, so
    /// a queueing server's slowness spends no request's `max_retries`.
    Queued,
    /// Retrying cannot help (400, 401, 403, 404, 413, quota exhausted, …).
    Fatal,
}

/// Why an attempt is retried, stored in the audit trail by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCause {
    /// Until `max_capacity_retry_seconds` after the first attempt.
    Capacity,
    /// Up to `max_retries` times.
    Transient,
    /// Given up for hung: until its attempt timeout reaches the configured one.
    Hung,
}

impl RetryCause {
    /// The stable name the audit trail keeps (`calls.retry_cause`).
    pub fn name(self) -> &'static str {
        match self {
            RetryCause::Capacity => "capacity",
            RetryCause::Transient => "transient",
            RetryCause::Hung => "hung",
        }
    }
}

impl Verdict {
    pub fn retry_cause(&self) -> Option<RetryCause> {
        match self {
            Verdict::Capacity { .. } | Verdict::Queued => Some(RetryCause::Capacity),
            Verdict::Transient | Verdict::Timeout | Verdict::NotJson => Some(RetryCause::Transient),
            Verdict::Hung => Some(RetryCause::Hung),
            Verdict::Success | Verdict::Fatal => None,
        }
    }
}

/// When a request is retried: capacity answers until the budget after its
/// first attempt, transient failures `max_retries` times, neither past the
/// row's deadline. While the breaker is open the endpoint is down, not this
/// request: waiting out an outage spends none of its retries, and the
/// outage's length is `abort_after_seconds`'s.
pub struct RetryPolicy {
    budget: Duration,
    max_retries: u32,
    capacity_retries: u32,
    transient_retries: u32,
}

impl RetryPolicy {
    pub fn new(budget: Duration, max_retries: u32) -> Self {
        Self {
            budget,
            max_retries,
            capacity_retries: 0,
            transient_retries: 0,
        }
    }

    /// The wait before the next attempt, or `None` to stop. `elapsed`: since
    /// the first attempt.
    pub fn wait(
        &self,
        verdict: Verdict,
        elapsed: Duration,
        row_deadline: Option<Instant>,
    ) -> Option<Duration> {
        let wait = match verdict {
            // The server's word, when it gives one, is the wait, as the
            // providers' own SDKs take it: the adaptive limit already eases
            // the load, and growing each row's wait beyond what the server
            // asked kept a row refused six times in one burst away for 3 to
            // 6 s after the endpoint had room again. It is capped at the budget
            // (a wait beyond it is not waited, and the request gives up).
            //
            // A wait shorter than a first back-off (`Retry-After: 0`) says
            // nothing of when there is room, and is backed off from as if
            // unsaid, as the openai SDK does: taken as the wait, a server that
            // refused everything with it was sent every row again ten times a
            // second, 3,900 requests a second for 300 rows at a limit of one.
            Verdict::Capacity {
                retry_after: Some(asked),
            } if asked >= CAPACITY_BACKOFF.0 => asked.min(self.budget),
            Verdict::Capacity { .. } => backoff(
                self.capacity_retries,
                CAPACITY_BACKOFF.0,
                CAPACITY_BACKOFF.1,
            ),
            Verdict::Queued => backoff(
                self.capacity_retries,
                CAPACITY_BACKOFF.0,
                CAPACITY_BACKOFF.1,
            ),
            // The endpoint answers others on time: no reason to wait.
            Verdict::Hung => Duration::ZERO,
            Verdict::Transient | Verdict::Timeout | Verdict::NotJson
                if self.transient_retries < self.max_retries =>
            {
                backoff(
                    self.transient_retries,
                    TRANSIENT_BACKOFF.0,
                    TRANSIENT_BACKOFF.1,
                )
            }
            _ => return None,
        };
        let in_time =
            elapsed + wait < self.budget && row_deadline.is_none_or(|d| Instant::now() + wait < d);
        in_time.then_some(wait)
    }

    /// Counts a retry against its cause's allowance.
    pub fn retried(&mut self, cause: RetryCause, breaker_closed: bool) {
        match cause {
            RetryCause::Capacity => self.capacity_retries += 1,
            RetryCause::Transient if breaker_closed => self.transient_retries += 1,
            RetryCause::Transient | RetryCause::Hung => {}
        }
    }
}

/// `expects_json`: whether a 2xx must carry JSON to be an answer (see
/// [`promises_json`]).
pub fn classify_status(
    status: u16,
    headers: &HeaderMap,
    body: &str,
    expects_json: bool,
) -> Verdict {
    match status {
        200..=299 if expects_json && !is_json(body) => Verdict::NotJson,
        200..=299 => Verdict::Success,
        // A 429 that says the account is out of quota will not clear by waiting.
        429 if out_of_quota(body) => Verdict::Fatal,
        429 | 503 | 529 => Verdict::Capacity {
            retry_after: retry_after(headers),
        },
        408 | 500 | 502 | 504 => Verdict::Transient,
        _ => Verdict::Fatal,
    }
}

/// How a provider's answer went: by its status, unless a 2xx carries the
/// provider's error object instead of an answer, as gateways (OpenRouter,
/// LiteLLM's proxy) answer when the model behind them failed. Such an
/// answer is judged by the error's own code; no tokens were spent on it.
pub fn classify_answer(
    kind: EndpointKind,
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> Verdict {
    let expects_json = promises_json(kind, headers);
    let verdict = classify_status(status, headers, body, expects_json);
    if verdict != Verdict::Success || kind == EndpointKind::Http {
        return verdict;
    }
    match error_instead_of_answer(body) {
        Some(ErrorCode::Status(code)) if !(200..=299).contains(&code) => {
            classify_status(code, headers, body, false)
        }
        Some(ErrorCode::Name(name)) => match name.as_str() {
            "rate_limit_exceeded" | "rate_limit_error" | "overloaded_error" => Verdict::Capacity {
                retry_after: retry_after(headers),
            },
            "insufficient_quota"
            | "invalid_request_error"
            | "authentication_error"
            | "permission_error"
            | "not_found_error"
            | "context_length_exceeded" => Verdict::Fatal,
            _ => Verdict::Transient,
        },
        Some(_) => Verdict::Transient,
        None => Verdict::Success,
    }
}

/// An error's code as a provider's error object gives it.
enum ErrorCode {
    /// An HTTP status (OpenRouter's `"code": 502`).
    Status(u16),
    /// A name (`rate_limit_exceeded`, Anthropic's `overloaded_error`).
    Name(String),
    /// Neither: an error all the same.
    Unnamed,
}

/// The code of the error object a body holds in place of an answer: a
/// top-level `error` and none of an answer's fields.
fn error_instead_of_answer(body: &str) -> Option<ErrorCode> {
    let trimmed = body.trim_start();
    if !trimmed.starts_with('{') || !trimmed.contains("\"error\"") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = value.get("error").filter(|e| !e.is_null())?;
    if ["choices", "content", "output", "data"]
        .iter()
        .any(|field| value.get(field).is_some())
    {
        return None;
    }
    Some(match code_of(error) {
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .map_or(ErrorCode::Unnamed, ErrorCode::Status),
        Some(serde_json::Value::String(text)) => match text.parse::<u16>() {
            Ok(status) => ErrorCode::Status(status),
            Err(_) => ErrorCode::Name(text.to_ascii_lowercase()),
        },
        _ => ErrorCode::Unnamed,
    })
}

/// Whether an answer of this kind must be JSON: every provider API's is; a
/// plain `http` endpoint's answer is left as it came unless its Content-Type
/// says JSON.
pub fn promises_json(kind: EndpointKind, headers: &HeaderMap) -> bool {
    match kind {
        EndpointKind::Http => headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|media| media.trim().to_ascii_lowercase())
            .is_some_and(|media| media == "application/json" || media.ends_with("+json")),
        _ => true,
    }
}

fn is_json(body: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
}

/// How many bytes of a body an error message quotes.
const BODY_START_BYTES: usize = 200;

/// The first 200 bytes of a body for an error message, quoted (see
/// [`escaped_start`]); an empty body is said to be one.
pub fn body_start(body: &str) -> String {
    if body.is_empty() {
        return "an empty body".to_string();
    }
    let (text, cut) = escaped_start(body, BODY_START_BYTES);
    format!("`{text}`{}", if cut { "…" } else { "" })
}

/// The first `limit` bytes of `text` for a message, and whether it goes on
/// beyond them: cut at a character boundary, control characters escaped so
/// a quoted body cannot break a log line or drive a terminal.
pub fn escaped_start(text: &str, limit: usize) -> (String, bool) {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut escaped = String::with_capacity(end);
    for c in text[..end].chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    (escaped, end < text.len())
}

/// A 429 that says the account has no quota or credit left (OpenAI's and
/// Azure's `insufficient_quota`), not that it asks too much at once.
pub fn out_of_quota(body: &str) -> bool {
    error_code(body).as_deref() == Some("insufficient_quota")
}

/// The code a body's error object gives, as text (see [`code_of`]).
pub fn error_code(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    code_of(value.get("error")?)
        .and_then(|c| c.as_str())
        .map(str::to_string)
}

/// An error object's `code`, or its `type` where the code is absent or
/// null: OpenAI gives `"code": null` beside a `type` for many errors
/// (`invalid_request_error`, `server_error`).
fn code_of(error: &serde_json::Value) -> Option<&serde_json::Value> {
    ["code", "type"]
        .into_iter()
        .filter_map(|field| error.get(field))
        .find(|value| !value.is_null())
}

/// The wait the answer's headers ask for (`retry-after-ms`, `Retry-After`),
/// at most `weir_formats::http_headers::MAX_WAIT`.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    http_headers::retry_after(header_text(headers), std::time::SystemTime::now())
}

/// A header's text by name, for the pure parsers of `http_headers`.
pub fn header_text<'h>(headers: &'h HeaderMap) -> impl Fn(&str) -> Option<&'h str> {
    move |name| headers.get(name).and_then(|v| v.to_str().ok())
}

/// Exponential backoff with full jitter, so retries of many rows spread out
/// instead of returning together.
pub fn backoff(retry: u32, base: Duration, cap: Duration) -> Duration {
    let ceiling = base.saturating_mul(1u32 << retry.min(16)).min(cap);
    let jittered = rand::rng().random_range(0.5..=1.0) * ceiling.as_secs_f64();
    Duration::from_secs_f64(jittered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn statuses_are_classified() {
        let none = HeaderMap::new();
        assert_eq!(classify_status(200, &none, "{}", true), Verdict::Success);
        for s in [429, 503, 529] {
            assert_eq!(
                classify_status(s, &none, "", true),
                Verdict::Capacity { retry_after: None }
            );
        }
        for s in [500, 502, 504, 408] {
            assert_eq!(classify_status(s, &none, "", true), Verdict::Transient);
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert_eq!(classify_status(s, &none, "", true), Verdict::Fatal);
        }
    }

    #[test]
    fn a_2xx_that_is_not_the_promised_json_is_retried() {
        let none = HeaderMap::new();
        for body in [
            "",
            "<html><body>502 Bad Gateway</body></html>",
            "{\"choices\": [{\"mess",
        ] {
            assert_eq!(classify_status(200, &none, body, true), Verdict::NotJson);
            assert_eq!(classify_status(200, &none, body, false), Verdict::Success);
        }
        assert_eq!(Verdict::NotJson.retry_cause(), Some(RetryCause::Transient));
    }

    #[test]
    fn a_2xx_carrying_a_providers_error_is_judged_by_the_errors_code() {
        let none = HeaderMap::new();
        let wait = headers(&[("retry-after", "3")]);
        let openai = |status, headers: &HeaderMap, body| {
            classify_answer(EndpointKind::Openai, status, headers, body)
        };
        assert_eq!(
            openai(
                200,
                &none,
                r#"{"error":{"message":"Upstream error","code":502}}"#
            ),
            Verdict::Transient
        );
        assert_eq!(
            openai(200, &wait, r#"{"error":{"message":"busy","code":"429"}}"#),
            Verdict::Capacity {
                retry_after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(
            openai(200, &none, r#"{"error":{"code":"rate_limit_exceeded"}}"#),
            Verdict::Capacity { retry_after: None }
        );
        assert_eq!(
            openai(200, &none, r#"{"error":{"message":"bad","code":400}}"#),
            Verdict::Fatal
        );
        assert_eq!(
            openai(200, &none, r#"{"error":"something broke"}"#),
            Verdict::Transient
        );
        // OpenAI's own errors name themselves by `type` beside a null code.
        assert_eq!(
            openai(
                200,
                &none,
                r#"{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}"#
            ),
            Verdict::Fatal
        );
        assert_eq!(
            classify_answer(
                EndpointKind::Anthropic,
                200,
                &none,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            Verdict::Capacity { retry_after: None }
        );
        // Answers, whatever else they hold; and a plain endpoint's own JSON.
        for body in [
            r#"{"choices":[{"message":{"content":"hi"}}],"error":null}"#,
            r#"{"content":[{"type":"text","text":"hi"}],"error":{"code":1}}"#,
            r#"{"id":"x","object":"chat.completion","choices":[]}"#,
        ] {
            assert_eq!(openai(200, &none, body), Verdict::Success, "{body}");
        }
        assert_eq!(
            classify_answer(EndpointKind::Http, 200, &none, r#"{"error":{"code":502}}"#),
            Verdict::Success
        );
        assert_eq!(
            openai(429, &none, "{}"),
            Verdict::Capacity { retry_after: None }
        );
    }

    #[test]
    fn only_json_kinds_and_json_content_types_promise_json() {
        let json = headers(&[("content-type", "Application/JSON; charset=utf-8")]);
        let problem = headers(&[("content-type", "application/problem+json")]);
        let html = headers(&[("content-type", "text/html")]);
        assert!(promises_json(EndpointKind::Openai, &html));
        assert!(promises_json(EndpointKind::AzureOpenai, &HeaderMap::new()));
        assert!(promises_json(EndpointKind::Http, &json));
        assert!(promises_json(EndpointKind::Http, &problem));
        assert!(!promises_json(EndpointKind::Http, &html));
        assert!(!promises_json(EndpointKind::Http, &HeaderMap::new()));
    }

    #[test]
    fn a_quoted_body_is_cut_at_a_character_and_escaped() {
        assert_eq!(body_start(""), "an empty body");
        assert_eq!(body_start("<p>\x1b[31mred\n"), "`<p>\\u{1b}[31mred\\n`");
        let long = "é".repeat(150);
        let quoted = body_start(&long);
        assert_eq!(quoted, format!("`{}`…", "é".repeat(100)));
        let odd = format!("a{long}");
        assert_eq!(body_start(&odd), format!("`a{}`…", "é".repeat(99)));
    }

    #[test]
    fn quota_exhaustion_is_not_retried() {
        let body = r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#;
        assert_eq!(
            classify_status(429, &HeaderMap::new(), body, true),
            Verdict::Fatal
        );
        let typed = r#"{"error":{"message":"quota","type":"insufficient_quota","code":null}}"#;
        assert_eq!(
            classify_status(429, &HeaderMap::new(), typed, true),
            Verdict::Fatal
        );
        let body = r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#;
        assert!(matches!(
            classify_status(429, &HeaderMap::new(), body, true),
            Verdict::Capacity { .. }
        ));
    }

    #[test]
    fn retry_after_reads_the_answers_headers() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "150")])),
            Some(Duration::from_millis(150))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1e30")])),
            Some(http_headers::MAX_WAIT)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(5);
        for retry in 0..20 {
            let d = backoff(retry, base, cap);
            let ceiling = base.saturating_mul(1 << retry.min(16)).min(cap);
            assert!(d <= ceiling && d >= ceiling / 2, "retry {retry}: {d:?}");
        }
    }

    #[test]
    fn retry_causes_keep_their_stored_names() {
        let cause = |v: Verdict| v.retry_cause().map(RetryCause::name);
        assert_eq!(
            cause(Verdict::Capacity { retry_after: None }),
            Some("capacity")
        );
        assert_eq!(cause(Verdict::Queued), Some("capacity"));
        assert_eq!(cause(Verdict::Timeout), Some("transient"));
        assert_eq!(cause(Verdict::Hung), Some("hung"));
        assert_eq!(cause(Verdict::Transient), Some("transient"));
        assert_eq!(cause(Verdict::Fatal), None);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_stop_after_max_retries_but_not_while_the_breaker_is_open() {
        let mut policy = RetryPolicy::new(Duration::from_secs(60), 2);
        let elapsed = Duration::ZERO;
        for _ in 0..2 {
            assert!(policy.wait(Verdict::Transient, elapsed, None).is_some());
            policy.retried(RetryCause::Transient, true);
        }
        assert!(policy.wait(Verdict::Transient, elapsed, None).is_none());
        let mut outage = RetryPolicy::new(Duration::from_secs(60), 1);
        outage.retried(RetryCause::Transient, false);
        assert!(outage.wait(Verdict::Timeout, elapsed, None).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_waits_end_with_the_budget_or_the_row_deadline() {
        let policy = RetryPolicy::new(Duration::from_secs(10), 0);
        let long = Verdict::Capacity {
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(
            policy.wait(long, Duration::ZERO, None),
            Some(Duration::from_secs(3))
        );
        assert_eq!(policy.wait(long, Duration::from_secs(8), None), None);
        let soon = Some(Instant::now() + Duration::from_secs(1));
        assert_eq!(policy.wait(long, Duration::ZERO, soon), None);
        assert!(policy.wait(Verdict::Queued, Duration::ZERO, None).is_some());
    }

    #[test]
    fn a_capacity_wait_is_what_the_server_asked_however_often_refused() {
        let long = Verdict::Capacity {
            retry_after: Some(Duration::from_secs(3)),
        };
        let mut refused_often = RetryPolicy::new(Duration::from_secs(60), 0);
        for _ in 0..6 {
            refused_often.retried(RetryCause::Capacity, true);
        }
        assert_eq!(
            refused_often.wait(long, Duration::ZERO, None),
            Some(Duration::from_secs(3)),
            "the server's word, not a back-off grown by the refusals before"
        );
        let unsaid = refused_often
            .wait(
                Verdict::Capacity { retry_after: None },
                Duration::ZERO,
                None,
            )
            .unwrap();
        assert!(unsaid >= Duration::from_secs(3), "{unsaid:?}");
        let at_once = Verdict::Capacity {
            retry_after: Some(Duration::ZERO),
        };
        let first = RetryPolicy::new(Duration::from_secs(60), 0);
        let wait = first.wait(at_once, Duration::ZERO, None).unwrap();
        assert!(wait >= CAPACITY_BACKOFF.0 / 2, "{wait:?}");
    }

    #[test]
    fn a_retry_after_of_zero_is_backed_off_from_more_each_time() {
        let at_once = Verdict::Capacity {
            retry_after: Some(Duration::ZERO),
        };
        let mut refused_often = RetryPolicy::new(Duration::from_secs(60), 0);
        for _ in 0..6 {
            refused_often.retried(RetryCause::Capacity, true);
        }
        let wait = refused_often.wait(at_once, Duration::ZERO, None).unwrap();
        // 100 ms doubled six times, jittered down by at most half.
        assert!(wait >= Duration::from_millis(3200), "{wait:?}");
    }
}
