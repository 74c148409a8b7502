//! Where an endpoint's requests go and which headers they carry. The kind of
//! endpoint decides the URL shape and the auth header; guests never see either.

use crate::config::model::defaults::{ANTHROPIC_BASE_URL, OPENAI_BASE_URL};
use crate::config::{EndpointKind, EndpointSpec};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

/// An endpoint's settings that make no valid URL or header.
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct TargetError {
    context: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// Says which setting of which endpoint an error is about.
fn setting<E: std::error::Error + Send + Sync + 'static>(
    context: impl FnOnce() -> String,
) -> impl FnOnce(E) -> TargetError {
    move |source| TargetError {
        context: context(),
        source: Box::new(source),
    }
}

pub struct Target {
    pub url: reqwest::Url,
    pub headers: HeaderMap,
}

impl Target {
    pub fn new(name: &str, spec: &EndpointSpec) -> Result<Self, TargetError> {
        let default_base = match spec.kind {
            EndpointKind::Anthropic => ANTHROPIC_BASE_URL,
            _ => OPENAI_BASE_URL,
        };
        let base = match spec.base_url.as_deref() {
            // A variable left unset by a check without secrets: nothing is
            // sent then, and a name that cannot resolve stands in.
            Some(unset) if unset.starts_with("${") => "http://unset-variable.invalid",
            Some(base) => base,
            None => default_base,
        }
        .trim_end_matches('/');
        let url = match spec.kind {
            EndpointKind::Openai => format!("{base}/chat/completions"),
            EndpointKind::Anthropic => format!("{base}/v1/messages"),
            EndpointKind::AzureOpenai => format!(
                "{base}/openai/deployments/{}/chat/completions?api-version={}",
                spec.deployment.as_deref().unwrap_or_default(),
                spec.api_version.as_deref().unwrap_or_default()
            ),
            EndpointKind::Http => base.to_string(),
        };
        let url = reqwest::Url::parse(&url).map_err(setting(|| {
            format!("endpoint `{name}`: `{url}` is not a valid URL")
        }))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &spec.api_key {
            let (header, value) = match spec.kind {
                EndpointKind::AzureOpenai => (HeaderName::from_static("api-key"), key.clone()),
                EndpointKind::Anthropic => (HeaderName::from_static("x-api-key"), key.clone()),
                _ => (AUTHORIZATION, format!("Bearer {key}")),
            };
            let mut value = HeaderValue::from_str(&value).map_err(setting(|| {
                format!("endpoint `{name}`: api_key contains characters not allowed in a header")
            }))?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        if spec.kind == EndpointKind::Anthropic {
            headers.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(super::anthropic::API_VERSION),
            );
        }
        for (key, value) in &spec.headers {
            let header = HeaderName::from_bytes(key.as_bytes()).map_err(setting(|| {
                format!("endpoint `{name}`: `{key}` is not a valid header name")
            }))?;
            let mut value = HeaderValue::from_str(value).map_err(setting(|| {
                format!("endpoint `{name}`: header `{key}` has an invalid value")
            }))?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        Ok(Self { url, headers })
    }

    /// The URL without credentials or query secrets, for the audit trail.
    pub fn display_url(&self) -> String {
        let mut url = self.url.clone();
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> EndpointSpec {
        weir_formats::yaml::from_str(std::path::Path::new("endpoint.yaml"), yaml).unwrap()
    }

    #[test]
    fn openai_url_and_bearer_auth() {
        let t = Target::new(
            "llm",
            &spec("base_url: http://127.0.0.1:9/v1/\napi_key: sk-1"),
        )
        .unwrap();
        assert_eq!(t.url.as_str(), "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!(t.headers[AUTHORIZATION], "Bearer sk-1");
        assert!(t.headers[AUTHORIZATION].is_sensitive());
    }

    #[test]
    fn openai_defaults_to_the_public_api() {
        let t = Target::new("llm", &spec("api_key: k")).unwrap();
        assert_eq!(t.url.as_str(), "https://api.openai.com/v1/chat/completions");
    }

    #[test]
    fn anthropic_url_key_and_version_headers() {
        let t = Target::new(
            "claude",
            &spec(
                "kind: anthropic
api_key: k",
            ),
        )
        .unwrap();
        assert_eq!(t.url.as_str(), "https://api.anthropic.com/v1/messages");
        assert_eq!(t.headers["x-api-key"], "k");
        assert_eq!(t.headers["anthropic-version"], "2023-06-01");
        assert!(!t.headers.contains_key(AUTHORIZATION));
    }

    #[test]
    fn azure_url_and_api_key_header() {
        let t = Target::new(
            "az",
            &spec("kind: azure-openai\nbase_url: https://r.openai.azure.com\napi_key: k\ndeployment: gpt4o\napi_version: 2024-10-21"),
        )
        .unwrap();
        assert_eq!(
            t.url.as_str(),
            "https://r.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(t.headers["api-key"], "k");
        assert!(!t.headers.contains_key(AUTHORIZATION));
    }
}
