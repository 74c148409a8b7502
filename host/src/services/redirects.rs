//! Which redirects an endpoint's requests follow. A provider's key travels in
//! headers (`x-api-key`, `api-key`, or ones the pipeline sets) that an HTTP
//! client forwards to wherever a redirect points, and a 301 or 302 turns a
//! POST into a body-less GET whose failure says nothing of the redirect. So
//! a request follows only a 307 or 308 (which keep the method and the body)
//! to the address it was sent to (the same scheme, host and port); any
//! other redirect comes back as the answer, and the run says where it led.

use reqwest::header::{HeaderMap, LOCATION};
use reqwest::redirect::{Attempt, Policy};

/// More hops than this within one address is a loop.
const MAX_HOPS: usize = 5;

pub fn policy() -> Policy {
    Policy::custom(|attempt: Attempt| {
        let keeps_the_request = matches!(attempt.status().as_u16(), 307 | 308);
        let same_address = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !(keeps_the_request && same_address) {
            attempt.stop()
        } else if attempt.previous().len() > MAX_HOPS {
            attempt.error(format!("more than {MAX_HOPS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// Whether `status` is a redirect weir did not follow.
pub fn is_redirect(status: u16) -> bool {
    (300..400).contains(&status)
}

/// What a message says of a redirect not followed: where it pointed.
pub fn describe(headers: &HeaderMap) -> String {
    let to = headers
        .get(LOCATION)
        .and_then(|l| l.to_str().ok())
        .map_or_else(|| "nowhere (no Location)".to_string(), |l| format!("`{l}`"));
    format!(
        "a redirect to {to}: weir follows only a 307 or 308 to the same address, so the key \
         is sent nowhere else; set base_url to where it leads"
    )
}
