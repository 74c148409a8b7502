//! Request and token rate limits of one endpoint: the configured
//! requests-per-minute and tokens-per-minute (GCRA, via `governor`), and the
//! provider's own `x-ratelimit-*` headers, which pause the endpoint until the
//! window resets when they report nothing left.

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::header::HeaderMap;
use std::num::NonZeroU32;
use std::time::Duration;

/// Up to this share of a minute's quota may go at once, so a run does not
/// open with a burst the provider would reject.
const BURST_SECONDS: u32 = 6;
/// Requests spaced by a provider's reported rate are kept this much further
/// apart: at exactly its rate, network and scheduling jitter land some
/// requests early against an empty bucket.
const HEADER_MARGIN: f64 = 1.1;

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

/// Tokens a chat request may use: its text at ~4 characters a token, plus the
/// answer it allows (`max_tokens`).
pub fn estimate_tokens(body: &str) -> u32 {
    let answer = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("max_tokens").and_then(|m| m.as_u64()))
        .unwrap_or(0);
    (body.len() as u64 / 4 + answer).min(u32::MAX as u64) as u32
}

/// What a provider's `x-ratelimit-*` headers say about its rate window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// Nothing left: hold requests this long, and space them this far apart.
    Spent(Duration),
    /// Requests remain.
    Open,
}

pub fn window(headers: &HeaderMap) -> Option<Window> {
    if let Some(hold) = exhausted_window(headers) {
        return Some(Window::Spent(hold));
    }
    let has_room = ["requests", "tokens"].iter().any(|kind| {
        headers
            .get(format!("x-ratelimit-remaining-{kind}"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|remaining| remaining > 0)
    });
    has_room.then_some(Window::Open)
}

/// How long to hold every request when the provider says a window is spent
/// (`x-ratelimit-remaining-{requests,tokens}: 0`). `x-ratelimit-reset-*` is
/// when the whole window is back; the next request fits much sooner, after
/// one request's share of the per-minute limit, when the limit is given.
fn exhausted_window(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: String| headers.get(name)?.to_str().ok().map(str::trim);
    let requests = || {
        let remaining: u64 = get("x-ratelimit-remaining-requests".into())?.parse().ok()?;
        if remaining > 0 {
            return None;
        }
        let reset = get("x-ratelimit-reset-requests".into()).and_then(parse_reset)?;
        let one_slot = get("x-ratelimit-limit-requests".into())
            .and_then(|l| l.parse::<f64>().ok())
            .filter(|l| *l > 0.0)
            .map(|limit| Duration::from_secs_f64(60.0 / limit * HEADER_MARGIN));
        Some(one_slot.map_or(reset, |slot| slot.min(reset)))
    };
    let tokens = || {
        let remaining: u64 = get("x-ratelimit-remaining-tokens".into())?.parse().ok()?;
        (remaining == 0).then(|| get("x-ratelimit-reset-tokens".into()).and_then(parse_reset))?
    };
    requests().into_iter().chain(tokens()).max()
}

/// `1s`, `6m0s`, `250ms`, `1.5s`, `1h2m3s`, or bare seconds.
fn parse_reset(text: &str) -> Option<Duration> {
    if let Ok(seconds) = text.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;
    use std::time::Instant;

    #[test]
    fn reset_durations_parse() {
        assert_eq!(parse_reset("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_reset("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_reset("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_reset("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_reset("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse_reset("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_reset("soon"), None);
    }

    #[test]
    fn only_an_exhausted_window_pauses() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("3"),
        );
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("2s"));
        assert_eq!(exhausted_window(&h), None);
        h.insert(
            "x-ratelimit-remaining-tokens",
            HeaderValue::from_static("0"),
        );
        h.insert(
            "x-ratelimit-reset-tokens",
            HeaderValue::from_static("750ms"),
        );
        assert_eq!(exhausted_window(&h), Some(Duration::from_millis(750)));
    }

    #[test]
    fn a_spent_request_window_holds_for_one_slot_when_the_limit_is_known() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("0"),
        );
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("6s"));
        assert_eq!(exhausted_window(&h), Some(Duration::from_secs(6)));
        h.insert(
            "x-ratelimit-limit-requests",
            HeaderValue::from_static("600"),
        );
        assert_eq!(exhausted_window(&h), Some(Duration::from_millis(110)));
    }

    #[test]
    fn tokens_are_estimated_from_text_and_max_tokens() {
        let body = r#"{"messages":[{"role":"user","content":"0123456789012345"}],"max_tokens":10}"#;
        assert_eq!(estimate_tokens(body), body.len() as u32 / 4 + 10);
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
