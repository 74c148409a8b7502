//! The response headers by which an endpoint asks weir to wait: `Retry-After`,
//! `retry-after-ms` and the `x-ratelimit-*` family. They are the server's
//! word, from anywhere on the way (a provider, a proxy, a misconfigured
//! gateway), so whatever they say — `1e30`, `inf`, a date in the year 9999 —
//! the answer is a duration of at most [`MAX_WAIT`] or nothing, never a panic.
//! The executor caps these further, at the endpoint's
//! `max_capacity_retry_seconds`.
//!
//! Headers are looked up through a function from a (lowercase) name to the
//! header's text, so this module needs no HTTP library and fuzz targets can
//! reach it without linking one.

use std::time::{Duration, SystemTime};

/// The longest wait a header can ask for: one year. A wait is later capped at
/// the endpoint's own budget; this bound only keeps the arithmetic on
/// instants and timers (which panics on overflow) far from its limits.
pub const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Requests spaced by a provider's reported rate are kept this much further
/// apart: at exactly its rate, network and scheduling jitter land some
/// requests early against an empty bucket.
const HEADER_MARGIN: f64 = 1.1;

/// A number of seconds as a wait: negative or NaN is no wait at all (None);
/// anything longer than [`MAX_WAIT`], infinity included, is [`MAX_WAIT`].
pub fn wait_of_seconds(seconds: f64) -> Option<Duration> {
    if seconds.is_nan() || seconds < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(seconds.min(MAX_WAIT.as_secs_f64())))
}

/// How long to wait before the next attempt: `retry-after-ms` (OpenAI,
/// Azure) is finer than `Retry-After` (seconds or an HTTP date), so it wins.
/// A date in the past is no wait; a value that cannot be read is None.
pub fn retry_after<'h>(
    header: impl Fn(&str) -> Option<&'h str>,
    now: SystemTime,
) -> Option<Duration> {
    let text = |name: &str| header(name).map(str::trim);
    if let Some(wait) = text("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| wait_of_seconds(ms / 1000.0))
    {
        return Some(wait);
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return wait_of_seconds(seconds);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_WAIT),
    )
}

/// What a provider's `x-ratelimit-*` headers say about its rate window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// Nothing left: hold requests this long, and space them this far apart.
    Spent(Duration),
    /// Requests remain.
    Open,
}

pub fn rate_window<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Option<Window> {
    let text = |name: &str| header(name).map(str::trim);
    if let Some(hold) = exhausted_window(&text) {
        return Some(Window::Spent(hold));
    }
    let has_room = ["requests", "tokens"].iter().any(|kind| {
        text(&format!("x-ratelimit-remaining-{kind}"))
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|remaining| remaining > 0)
    });
    has_room.then_some(Window::Open)
}

/// How long to hold every request when the provider says a window is spent
/// (`x-ratelimit-remaining-{requests,tokens}: 0`). `x-ratelimit-reset-*` is
/// when the whole window is back; the next request fits much sooner, after
/// one request's share of the per-minute limit, when the limit is given.
fn exhausted_window<'h>(text: &impl Fn(&str) -> Option<&'h str>) -> Option<Duration> {
    let requests = || {
        let remaining: u64 = text("x-ratelimit-remaining-requests")?.parse().ok()?;
        if remaining > 0 {
            return None;
        }
        let reset = text("x-ratelimit-reset-requests").and_then(parse_reset)?;
        let one_slot = text("x-ratelimit-limit-requests")
            .and_then(|l| l.parse::<f64>().ok())
            .filter(|l| *l > 0.0)
            .and_then(|limit| wait_of_seconds(60.0 / limit * HEADER_MARGIN));
        Some(one_slot.map_or(reset, |slot| slot.min(reset)))
    };
    let tokens = || {
        let remaining: u64 = text("x-ratelimit-remaining-tokens")?.parse().ok()?;
        (remaining == 0).then(|| text("x-ratelimit-reset-tokens").and_then(parse_reset))?
    };
    requests().into_iter().chain(tokens()).max()
}

/// `1s`, `6m0s`, `250ms`, `1.5s`, `1h2m3s`, or bare seconds.
pub fn parse_reset(text: &str) -> Option<Duration> {
    if let Ok(seconds) = text.parse::<f64>() {
        return wait_of_seconds(seconds);
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
    wait_of_seconds(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header lookup over name/value pairs, as a server might send them.
    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        }
    }

    fn retry_after_of(pairs: &[(&str, &str)]) -> Option<Duration> {
        retry_after(headers(pairs), SystemTime::now())
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            retry_after_of(&[("retry-after", "2")]),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after_of(&[("retry-after", "2"), ("retry-after-ms", "150")]),
            Some(Duration::from_millis(150))
        );
        assert_eq!(
            retry_after_of(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after_of(&[("retry-after", "soon")]), None);
        assert_eq!(retry_after_of(&[("retry-after", "-3")]), None);
        assert_eq!(retry_after_of(&[("retry-after", "NaN")]), None);
    }

    #[test]
    fn huge_waits_are_bounded_not_a_panic() {
        for value in [
            "1e30",
            "99999999999999999999",
            "inf",
            "+Infinity",
            "1.7976931348623157e308",
        ] {
            assert_eq!(
                retry_after_of(&[("retry-after", value)]),
                Some(MAX_WAIT),
                "{value}"
            );
            assert_eq!(
                retry_after_of(&[("retry-after-ms", value)]),
                Some(MAX_WAIT),
                "{value}"
            );
            assert_eq!(parse_reset(value), Some(MAX_WAIT), "{value}");
        }
        assert_eq!(
            retry_after_of(&[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")]),
            Some(MAX_WAIT)
        );
        let nines = "9".repeat(400);
        assert_eq!(parse_reset(&format!("{nines}h")), Some(MAX_WAIT));
        assert_eq!(parse_reset(&format!("{nines}h{nines}m")), Some(MAX_WAIT));
    }

    #[test]
    fn a_tiny_rate_limit_does_not_make_a_huge_slot() {
        let h = [
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1e30"),
            ("x-ratelimit-limit-requests", "1e-300"),
        ];
        assert_eq!(rate_window(headers(&h)), Some(Window::Spent(MAX_WAIT)));
    }

    #[test]
    fn reset_durations_parse() {
        assert_eq!(parse_reset("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_reset("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_reset("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_reset("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_reset("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse_reset("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_reset("soon"), None);
        assert_eq!(parse_reset("1é"), None);
    }

    #[test]
    fn only_an_exhausted_window_pauses() {
        let mut h = vec![
            ("x-ratelimit-remaining-requests", "3"),
            ("x-ratelimit-reset-requests", "2s"),
        ];
        assert_eq!(rate_window(headers(&h)), Some(Window::Open));
        h.push(("x-ratelimit-remaining-tokens", "0"));
        h.push(("x-ratelimit-reset-tokens", "750ms"));
        assert_eq!(
            rate_window(headers(&h)),
            Some(Window::Spent(Duration::from_millis(750)))
        );
        assert_eq!(rate_window(headers(&[])), None);
    }

    #[test]
    fn a_spent_request_window_holds_for_one_slot_when_the_limit_is_known() {
        let mut h = vec![
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "6s"),
        ];
        assert_eq!(
            rate_window(headers(&h)),
            Some(Window::Spent(Duration::from_secs(6)))
        );
        h.push(("x-ratelimit-limit-requests", "600"));
        assert_eq!(
            rate_window(headers(&h)),
            Some(Window::Spent(Duration::from_millis(110)))
        );
    }
}
