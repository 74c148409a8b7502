//! Any bytes as an answer's headers (`name: value` lines): the waits they ask
//! for (`Retry-After`, `retry-after-ms`, rate-limit windows) are read as at most
//! a year or as nothing, never a panic and never a duration that overflows a
//! timer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant, SystemTime};
use weir_formats::http_headers::{self, MAX_WAIT};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let headers: Vec<(String, &str)> = text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| *value)
    };
    // A fixed clock, so that a crash found with an HTTP date repeats.
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let bounded = |wait: Duration| {
        assert!(wait <= MAX_WAIT, "{wait:?}");
        // What the executor does with a wait: it must not overflow.
        let _ = Instant::now() + wait;
    };
    if let Some(wait) = http_headers::retry_after(header, now) {
        bounded(wait);
    }
    if let Some(report) = http_headers::rate_report(header, now) {
        for quota in [
            report.requests,
            report.tokens,
            report.input_tokens,
            report.output_tokens,
        ]
        .into_iter()
        .flatten()
        {
            quota.reset.into_iter().for_each(bounded);
            if let Some(per_minute) = quota.per_minute {
                assert!(per_minute.is_finite() && per_minute > 0.0, "{per_minute}");
            }
        }
    }
    for (_, value) in &headers {
        if let Some(reset) = http_headers::parse_reset(value.trim()) {
            bounded(reset);
        }
        if let Some(reset) = http_headers::until_time(value.trim(), now) {
            bounded(reset);
        }
    }
});
