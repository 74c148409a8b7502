//! Requests that ask for a streamed answer (`"stream": true`) are not sent to
//! a provider: weir reads each answer whole, so a stream would be paid for,
//! found unreadable, and paid for again on every retry.

use crate::config::EndpointKind;

/// Why `body` cannot go to an endpoint of `kind`, when it asks for a stream.
pub fn refusal(kind: EndpointKind, endpoint: &str, body: &str) -> Option<String> {
    if kind == EndpointKind::Http || !body.contains("\"stream\"") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Asks {
        stream: Option<bool>,
    }
    let asks = serde_json::from_str::<Asks>(body).ok()?;
    (asks.stream == Some(true)).then(|| {
        format!(
            "endpoint `{endpoint}`: not sent, the request asks for `\"stream\": true`; weir reads \
             each answer whole, and a streamed one would be paid for and then unreadable: remove \
             `stream` from the request"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_provider_request_asking_for_a_stream_is_refused() {
        let stream = r#"{"model":"m","messages":[],"stream":true}"#;
        let refused = refusal(EndpointKind::Openai, "llm", stream).unwrap();
        assert!(refused.contains("remove `stream`"), "{refused}");
        assert!(refusal(EndpointKind::Anthropic, "llm", stream).is_some());
        assert_eq!(refusal(EndpointKind::Http, "api", stream), None);
        for body in [
            r#"{"model":"m","stream":false}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"\"stream\": true"}]}"#,
            r#"{"model":"m"}"#,
        ] {
            assert_eq!(refusal(EndpointKind::Openai, "llm", body), None, "{body}");
        }
    }
}
