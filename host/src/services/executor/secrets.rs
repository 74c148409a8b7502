//! The secrets an endpoint is configured with (its `api_key`, its `headers:`
//! values, a password in its `base_url`), taken out of whatever comes back.
//! An endpoint or a proxy that reflects request headers would otherwise hand
//! the key to the guest, and through it to the sinks, the audit trail and
//! `weir explain`: answers are redacted here, before anything else sees them.

use crate::config::EndpointSpec;
use reqwest::header::{HeaderMap, HeaderValue};

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shorter values are not searched for: replacing every `abc` or `k` in an
/// answer would corrupt ordinary text, and a key that short protects nothing.
pub const MIN_SECRET_BYTES: usize = 8;

pub struct Secrets {
    /// Each secret as sent and as it reads inside a JSON string, longest
    /// first, so that a secret containing another is replaced whole.
    forms: Vec<String>,
}

impl Secrets {
    pub fn of(spec: &EndpointSpec) -> Self {
        let password = spec
            .base_url
            .as_deref()
            .and_then(|url| reqwest::Url::parse(url).ok())
            .and_then(|url| url.password().map(str::to_string));
        let values = spec
            .api_key
            .iter()
            .chain(spec.headers.values())
            .chain(password.iter())
            .filter(|v| v.len() >= MIN_SECRET_BYTES);
        let mut forms: Vec<String> = values.flat_map(|v| written_forms(v)).collect();
        forms.sort_by_key(|form| std::cmp::Reverse(form.len()));
        forms.dedup();
        Self { forms }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: String) -> String {
        self.forms.iter().fold(text, |text, secret| {
            if text.contains(secret.as_str()) {
                text.replace(secret.as_str(), REDACTED)
            } else {
                text
            }
        })
    }

    /// Replaces every header value that holds a secret, whole: a header value
    /// need not be text, and none that carries a key is worth keeping.
    pub fn redact_headers(&self, headers: &mut HeaderMap) {
        for (_, value) in headers.iter_mut() {
            if self.forms.iter().any(|s| contains(value.as_bytes(), s)) {
                *value = HeaderValue::from_static(REDACTED);
            }
        }
    }
}

/// A secret as it may come back: as sent, and escaped inside a JSON string
/// (`"` and `\` escaped, and `/` as `\/`, as some servers write it).
fn written_forms(secret: &str) -> Vec<String> {
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json
        .get(1..json.len().saturating_sub(1))
        .unwrap_or_default()
        .to_string();
    let slashed = json.replace('/', "\\/");
    let mut forms = vec![secret.to_string(), json, slashed];
    forms.dedup();
    forms
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> EndpointSpec {
        weir_formats::yaml::from_str(std::path::Path::new("endpoint.yaml"), yaml).unwrap()
    }

    #[test]
    fn keys_headers_and_url_passwords_are_redacted() {
        let secrets = Secrets::of(&spec(
            "base_url: https://me:url-password-1@proxy.example/v1\napi_key: sk-live-12345678\n\
             headers: {x-org-token: \"org/token\\\"quoted\"}",
        ));
        let body =
            r#"{"auth":"Bearer sk-live-12345678","org":"org\/token\"quoted","p":"url-password-1"}"#;
        assert_eq!(
            secrets.redact(body.to_string()),
            r#"{"auth":"Bearer [redacted]","org":"[redacted]","p":"[redacted]"}"#
        );
    }

    #[test]
    fn short_or_empty_secrets_leave_answers_alone() {
        let secrets = Secrets::of(&spec("api_key: \"\"\nheaders: {x-title: abc, x-k: k}"));
        let body = "a b c abc k kk".to_string();
        assert_eq!(secrets.redact(body.clone()), body);
    }

    #[test]
    fn a_header_holding_a_secret_is_replaced_whole() {
        let secrets = Secrets::of(&spec("api_key: sk-live-12345678"));
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-echo",
            HeaderValue::from_static("Bearer sk-live-12345678"),
        );
        headers.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("3"),
        );
        secrets.redact_headers(&mut headers);
        assert_eq!(headers["x-echo"], REDACTED);
        assert_eq!(headers["x-ratelimit-remaining-requests"], "3");
    }
}
