//! Request and token rate limits of one endpoint: the configured
//! requests-per-minute and tokens-per-minute (GCRA, via `governor`), and the
//! provider's own rate-limit headers, which space the endpoint's requests at
//! the window's rate once it runs low and pause them when it is spent.

use super::window::Tokens;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::header::HeaderMap;
use std::num::NonZeroU32;
use weir_formats::http_headers;

pub use http_headers::RateReport;

/// Up to this share of a minute's quota may go at once, so a run does not
/// open with a burst the provider would reject.
const BURST_SECONDS: u32 = 6;

pub struct RateLimits {
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<(DefaultDirectRateLimiter, u32)>,
}

impl RateLimits {
    pub fn new(requests_per_minute: Option<u32>, tokens_per_minute: Option<u32>) -> Self {
        Self {
            requests: requests_per_minute.and_then(quota).map(RateLimiter::direct),
            tokens: tokens_per_minute
                .and_then(|tpm| quota(tpm).map(|q| (RateLimiter::direct(q), burst_of(tpm)))),
        }
    }

    pub fn is_limited(&self) -> bool {
        self.requests.is_some() || self.tokens.is_some()
    }

    /// Waits until the request (with its estimated tokens) fits both limits.
    pub async fn admit(&self, estimated_tokens: u32) {
        if let Some(requests) = &self.requests {
            requests.until_ready().await;
        }
        if let Some((tokens, burst)) = &self.tokens {
            // A request larger than the burst still goes, at the burst's cost.
            let n = NonZeroU32::new(estimated_tokens.clamp(1, *burst)).expect("at least 1");
            let _ = tokens.until_n_ready(n).await;
        }
    }
}

fn burst_of(per_minute: u32) -> u32 {
    (per_minute / 60 * BURST_SECONDS).max(1)
}

fn quota(per_minute: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_minute)?;
    let burst = NonZeroU32::new(burst_of(per_minute)).expect("at least 1");
    Some(Quota::per_minute(rate).allow_burst(burst))
}

/// Tokens a chat request may use, as OpenAI and Anthropic count it against
/// their token windows when it arrives: its text at ~4 characters a token,
/// and the answer it allows (`max_tokens`, or `max_completion_tokens`, for
/// each of its `n` choices).
pub fn estimate_tokens(body: &str) -> Tokens {
    // Only the limits are read: the messages are skipped, not copied.
    #[derive(serde::Deserialize)]
    struct Limits {
        max_tokens: Option<u64>,
        max_completion_tokens: Option<u64>,
        n: Option<u64>,
    }
    let answer = serde_json::from_str::<Limits>(body).map_or(0, |limits| {
        let each = limits.max_completion_tokens.or(limits.max_tokens);
        each.unwrap_or(0)
            .saturating_mul(limits.n.unwrap_or(1).max(1))
    });
    Tokens {
        input: (body.len() / 4) as f64,
        output: answer as f64,
    }
}

/// What the answer's rate-limit headers say about the provider's windows;
/// see `weir_formats::http_headers::rate_report`.
pub fn report(headers: &HeaderMap) -> Option<RateReport> {
    http_headers::rate_report(
        super::retry::header_text(headers),
        std::time::SystemTime::now(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;
    use std::time::{Duration, Instant};

    #[test]
    fn the_answers_rate_headers_are_read() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-tokens",
            HeaderValue::from_static("0"),
        );
        h.insert(
            "x-ratelimit-reset-tokens",
            HeaderValue::from_static("750ms"),
        );
        let tokens = report(&h).unwrap().tokens.unwrap();
        assert_eq!(tokens.remaining, 0);
        assert_eq!(tokens.reset, Some(Duration::from_millis(750)));
    }

    #[test]
    fn tokens_are_estimated_from_text_and_max_tokens() {
        let tokens = |input: usize, output: f64| Tokens {
            input: (input / 4) as f64,
            output,
        };
        let body = r#"{"messages":[{"role":"user","content":"0123456789012345"}],"max_tokens":10}"#;
        assert_eq!(estimate_tokens(body), tokens(body.len(), 10.0));
        let choices = r#"{"messages":[],"max_completion_tokens":10,"max_tokens":99,"n":3}"#;
        assert_eq!(estimate_tokens(choices), tokens(choices.len(), 30.0));
        assert_eq!(estimate_tokens("not json"), tokens(8, 0.0));
    }

    #[tokio::test]
    async fn requests_per_minute_spaces_requests_after_the_burst() {
        // 600 per minute: a burst of 60, then one every 100 ms.
        let limits = RateLimits::new(Some(600), None);
        let started = Instant::now();
        for _ in 0..62 {
            limits.admit(1).await;
        }
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    }
}
