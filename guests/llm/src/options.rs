//! The node options a pipeline file gives the `llm` transform.

use serde::Deserialize;
use serde_json::{Map, Value};

/// Settings that belong to the endpoint (the host's executor), not to the node.
/// Users of other tools put them on the transform, so say where they go.
const ENDPOINT_SETTINGS: &[&str] = &[
    "pool_size",
    "max_capacity_retry_seconds",
    "api_key",
    "base_url",
    "request_timeout_seconds",
];

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmOptions {
    /// Jinja template of the user message; sees the input row as `row`.
    pub template: String,
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Omitted from the request when absent (e.g. Azure deployments fix the model).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default = "default_response_field")]
    pub response_field: String,
    /// Which granted endpoint to call.
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
}

fn default_response_field() -> String {
    "llm_response".to_string()
}

fn default_endpoint() -> String {
    "llm".to_string()
}

impl LlmOptions {
    pub fn from_json(options: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(options)
            .map_err(|e| format!("options are not valid JSON: {e}"))?;
        if let Value::Object(map) = &value {
            reject_endpoint_settings(map)?;
        }
        let parsed: LlmOptions =
            serde_json::from_value(value).map_err(|e| format!("options: {e}"))?;
        parsed.validate()?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), String> {
        if self.response_field.trim().is_empty() {
            return Err("options.response_field must not be empty".into());
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(format!(
                "options.temperature must be between 0 and 2, got {t}"
            ));
        }
        if self.max_tokens == Some(0) {
            return Err("options.max_tokens must be at least 1".into());
        }
        Ok(())
    }

    /// The fields this node adds to every row, in the order they are written.
    pub fn output_fields(&self) -> Vec<String> {
        let f = &self.response_field;
        vec![f.clone(), format!("{f}_usage"), format!("{f}_model")]
    }
}

fn reject_endpoint_settings(map: &Map<String, Value>) -> Result<(), String> {
    match ENDPOINT_SETTINGS.iter().find(|key| map.contains_key(**key)) {
        Some(key) => Err(format!(
            "options.{key} is an endpoint setting: move it under `endpoints.<name>` in the \
             pipeline file, where every node that uses the endpoint shares it"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply() {
        let o = LlmOptions::from_json(r#"{"template": "Hi {{ row.name }}"}"#).unwrap();
        assert_eq!(o.response_field, "llm_response");
        assert_eq!(o.endpoint, "llm");
        assert_eq!(o.model, None);
        assert_eq!(
            o.output_fields(),
            vec!["llm_response", "llm_response_usage", "llm_response_model"]
        );
    }

    #[test]
    fn unknown_option_is_named() {
        let err = LlmOptions::from_json(r#"{"template": "x", "temprature": 0.2}"#).unwrap_err();
        assert!(err.contains("unknown field `temprature`"), "{err}");
    }

    #[test]
    fn missing_template_is_named() {
        let err = LlmOptions::from_json(r#"{"model": "m"}"#).unwrap_err();
        assert!(err.contains("missing field `template`"), "{err}");
    }

    #[test]
    fn endpoint_settings_point_to_the_endpoint() {
        let err = LlmOptions::from_json(r#"{"template": "x", "pool_size": 4}"#).unwrap_err();
        assert!(err.contains("pool_size is an endpoint setting"), "{err}");
    }

    #[test]
    fn out_of_range_temperature_is_rejected() {
        let err = LlmOptions::from_json(r#"{"template": "x", "temperature": 7}"#).unwrap_err();
        assert!(err.contains("between 0 and 2"), "{err}");
    }
}
