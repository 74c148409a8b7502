//! The response headers by which an endpoint asks weir to wait: `Retry-After`,
//! `retry-after-ms`, and the rate windows of the `x-ratelimit-*` and
//! `anthropic-ratelimit-*` families. They are the server's
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

/// One of a provider's rate windows (requests or tokens) as an answer
/// reports it: OpenAI and Azure send `x-ratelimit-{limit,remaining,reset}-*`,
/// Anthropic `anthropic-ratelimit-*-{limit,remaining,reset}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    /// What the window allows a minute, when the answer says.
    pub per_minute: Option<f64>,
    /// What is left of it when the provider took the request.
    pub remaining: u64,
    /// Until the window is whole again, when the answer says: OpenAI and
    /// Azure give a duration (`1s`, `6m0s`, `250ms`), Anthropic the time
    /// (RFC 3339), read against the clock the report was read by.
    pub reset: Option<Duration>,
}

/// What an answer's rate-limit headers report; `None` from [`rate_report`]
/// when they report no window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RateReport {
    pub requests: Option<Quota>,
    /// Input and output tokens together.
    pub tokens: Option<Quota>,
    /// Anthropic's windows of input and of output tokens, which it reports
    /// beside their sum (`tokens`) and enforces apart: with 80,000 input and
    /// 16,000 output tokens a minute, requests that each allow a long answer
    /// find the output window spent while the sum has room.
    pub input_tokens: Option<Quota>,
    pub output_tokens: Option<Quota>,
}

/// Each window's headers: (limit, remaining, reset), OpenAI's and Azure's
/// names first, then Anthropic's.
const REQUEST_HEADERS: [[&str; 3]; 2] = [
    [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ],
    [
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
    ],
];
const INPUT_TOKEN_HEADERS: [[&str; 3]; 1] = [[
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
]];
const OUTPUT_TOKEN_HEADERS: [[&str; 3]; 1] = [[
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
]];
const TOKEN_HEADERS: [[&str; 3]; 2] = [
    [
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ],
    [
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ],
];

/// Reads the rate windows an answer reports, at `now`; a limit that is not a
/// positive number is left out (no window would refill at it).
pub fn rate_report<'h>(
    header: impl Fn(&str) -> Option<&'h str>,
    now: SystemTime,
) -> Option<RateReport> {
    let text = |name: &str| header(name).map(str::trim);
    let quota = |names: &[[&str; 3]]| {
        names.iter().find_map(|[limit, remaining, reset]| {
            Some(Quota {
                remaining: text(remaining)?.parse::<u64>().ok()?,
                per_minute: text(limit)
                    .and_then(|l| l.parse::<f64>().ok())
                    .filter(|l| l.is_finite() && *l > 0.0),
                reset: text(reset).and_then(|r| parse_reset(r).or_else(|| until_time(r, now))),
            })
        })
    };
    let report = RateReport {
        requests: quota(&REQUEST_HEADERS),
        tokens: quota(&TOKEN_HEADERS),
        input_tokens: quota(&INPUT_TOKEN_HEADERS),
        output_tokens: quota(&OUTPUT_TOKEN_HEADERS),
    };
    (report != RateReport::default()).then_some(report)
}

/// The wait until an RFC 3339 time (`2026-11-28T12:00:30Z`, fractions of a
/// second and offsets such as `+01:00` allowed): zero for a time past,
/// None for text that is no such time.
pub fn until_time(text: &str, now: SystemTime) -> Option<Duration> {
    let (local, east_of_utc) = split_offset(text)?;
    let local = humantime::parse_rfc3339_weak(local).ok()?;
    let utc = if east_of_utc >= 0 {
        local.checked_sub(Duration::from_secs(east_of_utc as u64))?
    } else {
        local.checked_add(Duration::from_secs(east_of_utc.unsigned_abs()))?
    };
    Some(
        utc.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_WAIT),
    )
}

/// A time's text without its offset from UTC, and the offset in seconds
/// (`Z` is none).
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix(['Z', 'z']) {
        return Some((local, 0));
    }
    let at = text.len().checked_sub(6)?;
    let (local, offset) = (text.get(..at)?, text.get(at..)?);
    let sign = match offset.as_bytes() {
        [b'+', _, _, b':', _, _] => 1,
        [b'-', _, _, b':', _, _] => -1,
        _ => return Some((text, 0)),
    };
    let hours: i64 = offset[1..3].parse().ok()?;
    let minutes: i64 = offset[4..6].parse().ok()?;
    Some((local, sign * (hours * 3600 + minutes * 60)))
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

    /// The clock the tests' reports are read by: 2026-11-28T12:00:00Z.
    fn noon() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_867_200)
    }

    fn report_of(pairs: &[(&str, &str)]) -> Option<RateReport> {
        rate_report(headers(pairs), noon())
    }

    #[test]
    fn openai_rate_headers_are_read() {
        let h = [
            ("x-ratelimit-limit-requests", "6000"),
            ("x-ratelimit-remaining-requests", "5999"),
            ("x-ratelimit-reset-requests", "10ms"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        assert_eq!(
            report_of(&h),
            Some(RateReport {
                requests: Some(Quota {
                    per_minute: Some(6000.0),
                    remaining: 5999,
                    reset: Some(Duration::from_millis(10)),
                }),
                tokens: Some(Quota {
                    per_minute: None,
                    remaining: 0,
                    reset: Some(Duration::from_secs(360)),
                }),
                ..RateReport::default()
            })
        );
        assert_eq!(report_of(&[]), None);
        assert_eq!(report_of(&[("x-ratelimit-limit-requests", "60")]), None);
        // A limit of nothing or less is no limit: no window would refill.
        let zero = report_of(&[
            ("x-ratelimit-limit-requests", "0"),
            ("x-ratelimit-remaining-requests", "0"),
        ]);
        assert_eq!(zero.unwrap().requests.unwrap().per_minute, None);
    }

    #[test]
    fn anthropic_rate_headers_are_read() {
        let h = [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-11-28T12:00:30Z"),
            ("anthropic-ratelimit-tokens-limit", "40000"),
            ("anthropic-ratelimit-tokens-remaining", "39000"),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "7000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2026-11-28T12:00:07.5Z",
            ),
        ];
        assert_eq!(
            report_of(&h),
            Some(RateReport {
                requests: Some(Quota {
                    per_minute: Some(50.0),
                    remaining: 0,
                    reset: Some(Duration::from_secs(30)),
                }),
                tokens: Some(Quota {
                    per_minute: Some(40000.0),
                    remaining: 39000,
                    reset: None,
                }),
                input_tokens: None,
                output_tokens: Some(Quota {
                    per_minute: Some(8000.0),
                    remaining: 7000,
                    reset: Some(Duration::from_millis(7500)),
                }),
            })
        );
    }

    #[test]
    fn reset_times_are_read_against_the_clock() {
        let at = |text| until_time(text, noon());
        assert_eq!(at("2026-11-28T12:00:30Z"), Some(Duration::from_secs(30)));
        assert_eq!(
            at("2026-11-28T12:00:01.250Z"),
            Some(Duration::from_millis(1250))
        );
        assert_eq!(
            at("2026-11-28T13:00:30+01:00"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            at("2026-11-28T11:00:30-01:00"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(at("2026-11-28T11:59:00Z"), Some(Duration::ZERO));
        assert_eq!(at("9999-12-31T23:59:59Z"), Some(MAX_WAIT));
        for bad in [
            "soon",
            "2026-11-28",
            "2026-11-28T12:00:30+1:00",
            "+00:00",
            "",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }
}
