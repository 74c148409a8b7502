//! Whether an endpoint can serve the run at all. What no retry fixes stops
//! the whole run instead of failing its rows one by one, hours later: an
//! endpoint that refuses the run's requests (a bad key, no access, no such
//! model or path, an account out of credit), one that cannot be reached
//! before its first answer (a failed TLS handshake, a host name that does
//! not resolve, a redirect elsewhere), and one whose circuit breaker stays
//! open past `abort_after_seconds`. Rows not finished by then keep no
//! outcome, so a resume does them once the endpoint is back.

use super::breaker::{BreakerState, Transition};
use super::dispatch::{AttemptFailure, FailureKind, TlsFailure};
use super::{CallError, Response, retry};
use crate::config::EndpointKind;
use crate::services::redirects;
use crate::services::stop::{RunStop, StopReason};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Health {
    endpoint: String,
    kind: EndpointKind,
    /// Where the requests go, for a refusal that questions the path.
    url: String,
    abort_after: Duration,
    stop: Arc<RunStop>,
    /// Some request was answered with success: the key, the URL and the
    /// model are right, so a later 404 is about the request, not the run.
    answered: AtomicBool,
    /// Before any success, an answer was a web page (HTML) where JSON was
    /// due: the stop's message asks whether base_url names the API.
    web_page: Arc<AtomicBool>,
    /// The breaker is open or half-open.
    down: AtomicBool,
    /// Counts the outages begun and ended; a watch is for one outage.
    outage: Arc<AtomicU64>,
    /// The reason of the breaker's latest opening, with its last error.
    last_opening: Arc<Mutex<String>>,
}

impl Health {
    pub fn new(
        endpoint: &str,
        kind: EndpointKind,
        url: String,
        abort_after: Duration,
        stop: Arc<RunStop>,
    ) -> Self {
        Self {
            endpoint: endpoint.to_string(),
            kind,
            url,
            abort_after,
            stop,
            answered: AtomicBool::new(false),
            web_page: Arc::default(),
            down: AtomicBool::new(false),
            outage: Arc::new(AtomicU64::new(0)),
            last_opening: Arc::default(),
        }
    }

    pub fn stop(&self) -> &RunStop {
        &self.stop
    }

    /// Watches an outage from the breaker's first opening: if it has not
    /// closed again within `abort_after`, the run stops.
    pub fn breaker_changed(&self, transition: &Transition) {
        match transition.to {
            BreakerState::Closed => {
                self.down.store(false, Ordering::SeqCst);
                self.outage.fetch_add(1, Ordering::SeqCst);
            }
            BreakerState::Open => {
                if let Ok(mut last) = self.last_opening.lock() {
                    last.clone_from(&transition.reason);
                }
                if !self.down.swap(true, Ordering::SeqCst) {
                    let outage = self.outage.fetch_add(1, Ordering::SeqCst) + 1;
                    self.watch(outage);
                }
            }
            BreakerState::HalfOpen => {}
        }
    }

    fn watch(&self, outage: u64) {
        let (current, last, stop, web_page) = (
            Arc::clone(&self.outage),
            Arc::clone(&self.last_opening),
            Arc::clone(&self.stop),
            Arc::clone(&self.web_page),
        );
        let (endpoint, after) = (self.endpoint.clone(), self.abort_after);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if current.load(Ordering::SeqCst) != outage {
                return;
            }
            let last = last.lock().map(|l| l.clone()).unwrap_or_default();
            let hint = match web_page.load(Ordering::Relaxed) {
                true => {
                    "; every answer so far was a web page, not the API's JSON: does base_url \
                     name the API (an OpenAI-compatible server's ends in /v1)?"
                }
                false => "",
            };
            stop.abort(StopReason::EndpointDown {
                endpoint,
                detail: format!(
                    "its circuit breaker has been open for {} s (abort_after_seconds); \
                     {last}{hint}",
                    after.as_secs_f64()
                ),
            });
        });
    }

    /// An attempt reached no server: its TLS handshake failed, or its host
    /// name did not resolve. Before the endpoint's first success that is
    /// the certificate, the URL's scheme or its host (misspelt, or a
    /// machine that cannot reach its resolver), which no retry fixes: the
    /// run stops rather than wait out the breaker. After it, a retry may
    /// find the server again; other failures are the breaker's.
    pub fn attempt_failed(&self, failure: &AttemptFailure) {
        if self.answered.load(Ordering::Relaxed) {
            return;
        }
        let (endpoint, message) = (self.endpoint.clone(), &failure.message);
        let reason = match failure.kind {
            FailureKind::Tls(why) => {
                let hint = match why {
                    TlsFailure::Untrusted => {
                        "; its certificate is not one weir trusts: SSL_CERT_FILE names a PEM \
                         bundle with the CA to trust (of a self-hosted server, or of a company \
                         proxy that inspects TLS)"
                    }
                    TlsFailure::NotTls => {
                        "; what came back is not TLS: does base_url say https:// for a plain \
                         HTTP server?"
                    }
                    TlsFailure::Other => "",
                };
                StopReason::TlsHandshake {
                    endpoint,
                    detail: format!("{message}{hint}"),
                }
            }
            FailureKind::Unresolved => StopReason::Unresolved {
                endpoint,
                detail: message.clone(),
            },
            FailureKind::Transport
            | FailureKind::Timeout
            | FailureKind::NoFirstByte
            | FailureKind::TooLarge => return,
        };
        self.stop.abort(reason);
    }

    /// An attempt was answered with success (and JSON where it is due): the
    /// key, the URL and the model are right. An answer handed on as it came
    /// after its retries (a 200 that is never JSON) says no such thing.
    pub fn succeeded(&self) {
        self.answered.store(true, Ordering::Relaxed);
        self.web_page.store(false, Ordering::Relaxed);
    }

    /// An attempt was answered with a body that is not JSON where JSON was
    /// due. A web page before any success may be a proxy's error page
    /// (retried, as any such answer) or base_url naming a web site rather
    /// than the API, which the stop's message then asks about.
    pub fn not_json(&self, body: &str) {
        let page = body.trim_start().as_bytes().first() == Some(&b'<');
        if page && !self.answered.load(Ordering::Relaxed) {
            self.web_page.store(true, Ordering::Relaxed);
        }
    }

    /// An attempt was answered with a redirect weir does not follow (see
    /// `services::redirects`). Before the endpoint's first success that is
    /// base_url (`http://` for an `https://` API, a moved host), which every
    /// row would meet alike: the run stops and says where it led.
    pub fn redirected(&self, status: u16, headers: &reqwest::header::HeaderMap) {
        if self.answered.load(Ordering::Relaxed) {
            return;
        }
        self.stop.abort(StopReason::Redirected {
            endpoint: self.endpoint.clone(),
            detail: format!("HTTP {status}, {}", redirects::describe(headers)),
        });
    }

    /// Looks at a request's final outcome; an answer that says the run's
    /// configuration is wrong stops the run.
    pub fn judge(&self, result: &Result<Response, CallError>) {
        let Err(CallError::Status(response)) = result else {
            return;
        };
        let Some(why) = self.refusal(response) else {
            return;
        };
        let mut detail = format!("HTTP {} ({why})", response.status);
        if matches!(response.status, 404 | 405 | 501) {
            detail.push_str(&format!(" at POST {}", self.url));
        }
        let body = provider_message(&response.body)
            .unwrap_or_else(|| first_bytes(response.body.trim(), 200));
        if !body.is_empty() {
            detail.push_str(&format!(": {body}"));
        }
        let reason = StopReason::EndpointRefused {
            endpoint: self.endpoint.clone(),
            detail,
        };
        // Requests on the wire when the credit ran out were taken before it
        // did, and are paid for: their answers are let in and kept. Refused
        // for a key, they would be refused too.
        match why {
            OUT_OF_CREDIT => self.stop.drain(reason),
            _ => self.stop.abort(reason),
        }
    }

    fn refusal(&self, response: &Response) -> Option<&'static str> {
        let before_any_success = !self.answered.load(Ordering::Relaxed);
        match response.status {
            401 => Some("the API key was not accepted"),
            // Out of credit: every row after it would fail alike, however
            // many have been answered; stopped, they keep no outcome and a
            // resume does them once the account is topped up.
            429 if retry::out_of_quota(&response.body) => Some(OUT_OF_CREDIT),
            402 => Some(OUT_OF_CREDIT),
            400 if self.kind == EndpointKind::Anthropic
                && says_credit_is_too_low(&response.body) =>
            {
                Some(OUT_OF_CREDIT)
            }
            403 => Some("the API key has no access to this endpoint or model"),
            // A plain HTTP endpoint may answer 404 for one row's lookup.
            404 if before_any_success && self.kind == EndpointKind::Openai && !self.names_v1() => {
                Some(
                    "no such model or path: an OpenAI-compatible server's base_url usually ends in /v1",
                )
            }
            404 if before_any_success && self.kind != EndpointKind::Http => {
                Some("no such model, deployment or path")
            }
            // A base_url that names a web server rather than the API: its
            // pages take no POST there. Every row would fail alike.
            405 | 501 if before_any_success && self.kind != EndpointKind::Http => {
                Some("the endpoint takes no such request at this path: is base_url the API's?")
            }
            400 if before_any_success && names_a_missing_model(&response.body) => {
                Some("no such model")
            }
            // The model refuses a parameter every request carries (OpenAI's
            // reasoning models and `max_tokens` or `temperature`).
            400 if before_any_success
                && matches!(
                    retry::error_code(&response.body).as_deref(),
                    Some("unsupported_parameter" | "unsupported_value")
                ) =>
            {
                Some("the model takes no such parameter or value")
            }
            _ => None,
        }
    }

    /// Whether the request's path has a version segment (`/v1`, `/v1beta`),
    /// as the OpenAI-compatible servers' paths do.
    fn names_v1(&self) -> bool {
        reqwest::Url::parse(&self.url).map_or(true, |url| url.path().contains("/v1"))
    }
}

const OUT_OF_CREDIT: &str =
    "the account is out of credit or quota: add some at the provider, then resume";

/// Anthropic's answer to an account out of credit: a 400
/// `invalid_request_error` whose message alone tells it from a bad request.
fn says_credit_is_too_low(body: &str) -> bool {
    body.to_ascii_lowercase()
        .contains("credit balance is too low")
}

/// A 400 that says the model does not exist, as OpenAI-compatible servers
/// word it (`model_not_found`, "The model `x` does not exist").
fn names_a_missing_model(body: &str) -> bool {
    let text = body.to_ascii_lowercase();
    text.contains("model_not_found")
        || (text.contains("model")
            && (text.contains("does not exist") || text.contains("not found")))
}

/// The provider's own words in an error body (`error.message`, as OpenAI,
/// Azure and Anthropic give it), with its code where it has one: what the
/// user is to read, rather than the JSON around it.
fn provider_message(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = value.get("error")?;
    let message = error.get("message")?.as_str()?.trim();
    if message.is_empty() {
        return None;
    }
    let mut text = first_bytes(message, 400);
    if let Some(code) = error.get("code").and_then(|c| c.as_str()) {
        text.push_str(&format!(" ({code})"));
    }
    Some(text)
}

/// The start of a body for a message: at most `limit` bytes, on one line,
/// `…` where it goes on.
fn first_bytes(body: &str, limit: usize) -> String {
    let (mut text, cut) = retry::escaped_start(body, limit);
    if cut {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, body: &str) -> Response {
        Response {
            status,
            body: body.into(),
            attempts: 1,
            latency: Duration::ZERO,
        }
    }

    fn health(kind: EndpointKind) -> Health {
        Health::new(
            "llm",
            kind,
            "http://127.0.0.1:9/v1/chat/completions".into(),
            Duration::from_secs(60),
            Arc::new(RunStop::new()),
        )
    }

    #[test]
    fn a_bad_key_stops_the_run_and_says_why() {
        let h = health(EndpointKind::Openai);
        h.judge(&Err(CallError::Status(response(
            401,
            "{\"error\":\"bad key\"}",
        ))));
        let reason = h.stop().reason().unwrap().to_string();
        assert!(h.stop().is_aborted());
        assert!(
            reason.contains("HTTP 401 (the API key was not accepted)"),
            "{reason}"
        );
        assert!(reason.contains("bad key"), "{reason}");
    }

    #[test]
    fn a_404_after_a_success_is_the_rows_problem() {
        let h = health(EndpointKind::Openai);
        h.succeeded();
        h.judge(&Err(CallError::Status(response(404, "gone"))));
        assert!(!h.stop().is_aborted());
        let http = health(EndpointKind::Http);
        http.judge(&Err(CallError::Status(response(404, "no such item"))));
        assert!(!http.stop().is_aborted());
    }

    #[test]
    fn a_404_before_any_success_names_the_url_and_asks_for_v1_where_it_is_missing() {
        let h = health(EndpointKind::Openai);
        h.judge(&Err(CallError::Status(response(404, ""))));
        let reason = h.stop().reason().unwrap().to_string();
        assert!(
            reason.ends_with(
                "HTTP 404 (no such model, deployment or path) at POST \
                 http://127.0.0.1:9/v1/chat/completions"
            ),
            "an empty body adds nothing: {reason}"
        );
        let h = Health::new(
            "llm",
            EndpointKind::Openai,
            "http://127.0.0.1:9/chat/completions".into(),
            Duration::from_secs(60),
            Arc::new(RunStop::new()),
        );
        h.judge(&Err(CallError::Status(response(
            404,
            "{\"detail\":\"Not Found\"}",
        ))));
        let reason = h.stop().reason().unwrap().to_string();
        assert!(reason.contains("base_url usually ends in /v1"), "{reason}");
        assert!(reason.ends_with(r#": {"detail":"Not Found"}"#), "{reason}");
    }

    #[test]
    fn a_405_or_501_before_any_success_stops_the_run_but_not_after_one() {
        for status in [405, 501] {
            let not_allowed = Err(CallError::Status(response(status, "Method Not Allowed")));
            let h = health(EndpointKind::Openai);
            h.judge(&not_allowed);
            let reason = h.stop().reason().unwrap().to_string();
            assert!(reason.contains("is base_url the API's?"), "{reason}");
            let h = health(EndpointKind::Openai);
            h.succeeded();
            h.judge(&not_allowed);
            assert!(!h.stop().is_aborted());
        }
    }

    #[test]
    fn a_400_naming_a_missing_model_stops_the_run_but_other_400s_do_not() {
        let h = health(EndpointKind::Openai);
        h.judge(&Err(CallError::Status(response(400, "prompt too long"))));
        assert!(!h.stop().is_aborted());
        h.judge(&Err(CallError::Status(response(
            400,
            "{\"error\":{\"message\":\"The model `gpt-9` does not exist\"}}",
        ))));
        assert!(h.stop().is_aborted());
    }

    #[test]
    fn a_parameter_the_model_refuses_before_any_success_stops_the_run() {
        let unsupported = "{\"error\":{\"message\":\"Unsupported parameter: 'max_tokens' is not \
                           supported with this model. Use 'max_completion_tokens' instead.\",\
                           \"type\":\"invalid_request_error\",\"param\":\"max_tokens\",\
                           \"code\":\"unsupported_parameter\"}}";
        let h = health(EndpointKind::Openai);
        h.judge(&Err(CallError::Status(response(400, unsupported))));
        let reason = h.stop().reason().unwrap().to_string();
        assert!(h.stop().is_aborted());
        assert!(
            reason.contains("HTTP 400 (the model takes no such parameter or value): "),
            "{reason}"
        );
        assert!(
            reason.contains("Use 'max_completion_tokens' instead."),
            "{reason}"
        );
        let h = health(EndpointKind::Openai);
        h.succeeded();
        h.judge(&Err(CallError::Status(response(400, unsupported))));
        assert!(
            !h.stop().is_aborted(),
            "a row's own request, once others passed"
        );
    }

    #[test]
    fn an_account_out_of_credit_stops_the_run_even_after_successes() {
        let quota = "{\"error\":{\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\"}}";
        let credit = "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\
                      \"message\":\"Your credit balance is too low to access the Anthropic API.\"}}";
        for (kind, status, body) in [
            (EndpointKind::Openai, 429, quota),
            (EndpointKind::AzureOpenai, 429, quota),
            (EndpointKind::Openai, 402, "{}"),
            (EndpointKind::Anthropic, 400, credit),
        ] {
            let h = health(kind);
            h.succeeded();
            h.judge(&Err(CallError::Status(response(status, body))));
            let reason = h.stop().reason().unwrap().to_string();
            assert!(
                reason.contains("the account is out of credit or quota"),
                "{reason}"
            );
            assert!(
                h.stop().is_draining() && !h.stop().is_aborted(),
                "requests on the wire finish"
            );
        }
        let h = health(EndpointKind::Openai);
        h.judge(&Err(CallError::Status(response(
            429,
            "{\"error\":{\"code\":\"rate_limit_exceeded\"}}",
        ))));
        h.judge(&Err(CallError::Status(response(400, credit))));
        assert!(!h.stop().is_draining(), "a rate limit, and an OpenAI 400");
    }

    #[test]
    fn a_redirect_before_any_success_stops_the_run_but_not_after_one() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::LOCATION,
            "https://api.example.com/v1/chat/completions"
                .parse()
                .unwrap(),
        );
        let h = health(EndpointKind::Openai);
        h.redirected(301, &headers);
        let reason = h.stop().reason().unwrap().to_string();
        assert!(h.stop().is_aborted());
        assert!(
            reason.contains(
                "endpoint `llm` redirects the run's requests: HTTP 301, a redirect to \
                 `https://api.example.com/v1/chat/completions`"
            ),
            "{reason}"
        );
        let h = health(EndpointKind::Openai);
        h.succeeded();
        h.redirected(302, &headers);
        assert!(!h.stop().is_aborted());
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_of_web_pages_before_any_success_asks_about_base_url() {
        let open = Transition {
            to: BreakerState::Open,
            reason: "the probe failed: HTTP 200 with a body that is not JSON: `<html>`".into(),
            failure: Some("HTTP 200 with a body that is not JSON: `<html>`".into()),
        };
        for succeeded_first in [false, true] {
            let h = health(EndpointKind::Openai);
            if succeeded_first {
                h.succeeded();
            }
            h.not_json("\n<!DOCTYPE html><html><body>Welcome</body></html>");
            h.not_json("{\"choices\": [");
            h.breaker_changed(&open);
            tokio::time::sleep(Duration::from_secs(61)).await;
            let reason = h.stop().reason().unwrap().to_string();
            assert_eq!(
                reason.contains("every answer so far was a web page, not the API's JSON"),
                !succeeded_first,
                "{reason}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_longer_than_abort_after_stops_the_run_and_a_short_one_does_not() {
        let h = health(EndpointKind::Openai);
        let open = Transition {
            to: BreakerState::Open,
            reason: "10 failures in a row; the last: connection refused".into(),
            failure: Some("connection refused".into()),
        };
        let closed = Transition {
            to: BreakerState::Closed,
            reason: "the probe succeeded".into(),
            failure: None,
        };
        h.breaker_changed(&open);
        tokio::time::sleep(Duration::from_secs(30)).await;
        h.breaker_changed(&closed);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            !h.stop().is_aborted(),
            "the breaker closed within the limit"
        );

        h.breaker_changed(&open);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(h.stop().is_aborted());
        let reason = h.stop().reason().unwrap().to_string();
        assert!(reason.contains("open for 60 s"), "{reason}");
        assert!(reason.contains("connection refused"), "{reason}");
    }
}
