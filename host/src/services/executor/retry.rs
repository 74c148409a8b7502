//! What to do after an attempt: classify by HTTP status and the provider's
//! error code (never by message text), and how long to wait before the next.

use rand::Rng;
use reqwest::header::HeaderMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Success,
    /// The endpoint is over capacity (429, 503, 529): retry until the deadline.
    Capacity {
        retry_after: Option<Duration>,
    },
    /// Likely to pass (other 5xx, 408, broken connections): a few retries.
    Transient,
    /// No answer in time: retried like a transient failure, and taken as a
    /// sign of overload by the adaptive limit.
    Timeout,
    /// Retrying cannot help (400, 401, 403, 404, 413, quota exhausted, …).
    Fatal,
}

impl Verdict {
    pub fn retry_cause(&self) -> Option<&'static str> {
        match self {
            Verdict::Capacity { .. } => Some("capacity"),
            Verdict::Transient | Verdict::Timeout => Some("transient"),
            _ => None,
        }
    }
}

pub fn classify_status(status: u16, headers: &HeaderMap, body: &str) -> Verdict {
    match status {
        200..=299 => Verdict::Success,
        // A 429 that says the account is out of quota will not clear by waiting.
        429 if error_code(body).as_deref() == Some("insufficient_quota") => Verdict::Fatal,
        429 | 503 | 529 => Verdict::Capacity {
            retry_after: retry_after(headers),
        },
        408 | 500 | 502 | 504 => Verdict::Transient,
        _ => Verdict::Fatal,
    }
}

fn error_code(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = value.get("error")?;
    error
        .get("code")
        .or_else(|| error.get("type"))
        .and_then(|c| c.as_str())
        .map(str::to_string)
}

/// `retry-after-ms` (OpenAI, Azure) is finer than `Retry-After` (seconds or an HTTP date).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
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
        assert_eq!(classify_status(200, &none, ""), Verdict::Success);
        for s in [429, 503, 529] {
            assert_eq!(
                classify_status(s, &none, ""),
                Verdict::Capacity { retry_after: None }
            );
        }
        for s in [500, 502, 504, 408] {
            assert_eq!(classify_status(s, &none, ""), Verdict::Transient);
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert_eq!(classify_status(s, &none, ""), Verdict::Fatal);
        }
    }

    #[test]
    fn quota_exhaustion_is_not_retried() {
        let body = r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#;
        assert_eq!(
            classify_status(429, &HeaderMap::new(), body),
            Verdict::Fatal
        );
        let body = r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#;
        assert!(matches!(
            classify_status(429, &HeaderMap::new(), body),
            Verdict::Capacity { .. }
        ));
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "150")])),
            Some(Duration::from_millis(150))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(Duration::ZERO)
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
}
