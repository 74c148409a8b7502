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
    /// Required unless `queries` or `batch_template` is given.
    #[serde(default)]
    pub template: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Omitted from the request when absent (e.g. Azure deployments fix the model).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Where a plain-text answer goes (when no `outputs` are declared).
    #[serde(default = "default_response_field")]
    pub response_field: String,
    /// Parse the answer as JSON and take these fields from it.
    #[serde(default)]
    pub outputs: Option<Outputs>,
    /// What the request asks of the answer's shape; `auto` when `outputs`
    /// are declared, else `none` (see `format`).
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// `json_schema` requests ask the provider to hold to the schema exactly.
    #[serde(default = "yes")]
    pub strict: bool,
    /// Template variables taken from row fields: `{name: field}`.
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// Several questions per row, each with its own template and outputs.
    #[serde(default)]
    pub queries: Option<Map<String, Value>>,
    /// Rows packed into one prompt (the node must be given batches).
    #[serde(default = "one")]
    pub bundle_size: usize,
    /// Rows a bundle's answer did not cover are asked again one by one.
    #[serde(default)]
    pub bundle_retry_individually: bool,
    /// One prompt for a whole batch (sees `rows`), one row out: for nodes
    /// whose batch mode is `transform`.
    #[serde(default)]
    pub batch_template: Option<String>,
    /// Which granted endpoint to call; when absent, the only one the node
    /// is granted (see `endpoint::choose`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Request fields merged last, as written, into every request body
    /// (see `params`).
    #[serde(default)]
    pub params: Map<String, Value>,
    /// What a plain-text answer cut at `max_tokens` becomes: kept (and
    /// marked in the audit trail), or a `response_truncated` row error. A
    /// cut JSON answer is always an error.
    #[serde(default)]
    pub on_truncated: OnTruncated,
    /// A column that says whether the plain-text answer was cut at
    /// `max_tokens`; none when absent.
    #[serde(default)]
    pub truncated_field: Option<String>,
    /// An answer cut at `max_tokens` that is a row error (JSON outputs, or
    /// `on_truncated: fail`) is asked once more with this larger limit.
    #[serde(default)]
    pub truncated_max_tokens: Option<u32>,
    /// After an answer that is not the JSON the outputs declare, ask again
    /// up to this many times with the answer and what is wrong with it.
    #[serde(default)]
    pub reask: u32,
    /// A plain-text answer's token usage goes in `<response_field>_usage`.
    #[serde(default)]
    pub usage_column: bool,
    /// The model the provider says answered goes in `<response_field>_model`.
    #[serde(default)]
    pub model_column: bool,
    /// Cut the whitespace around plain-text answers.
    #[serde(default = "yes")]
    pub trim: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTruncated {
    #[default]
    Keep,
    Fail,
}

fn yes() -> bool {
    true
}

/// One query of a multi-query node, as written in the pipeline file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuerySpec {
    template: String,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    inputs: Map<String, Value>,
    outputs: Outputs,
    #[serde(default)]
    response_format: Option<ResponseFormat>,
    #[serde(default)]
    max_tokens: Option<u32>,
}

/// Output fields in declaration order, each with its type.
pub type Outputs = Map<String, Value>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// No `response_format` is sent (`text` is the same).
    #[serde(alias = "text")]
    None,
    JsonObject,
    JsonSchema,
    /// `json_schema`, and `json_object` from an endpoint that refused it.
    Auto,
}

/// The type of one output field.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldType {
    String,
    Integer,
    Number,
    Boolean,
    Enum(Vec<String>),
}

impl FieldType {
    /// How a prompt names the type: `integer`, `one of: a, b`.
    pub fn in_a_prompt(&self) -> String {
        match self {
            FieldType::String => "string".into(),
            FieldType::Integer => "integer".into(),
            FieldType::Number => "number".into(),
            FieldType::Boolean => "boolean".into(),
            FieldType::Enum(values) => format!("one of: {}", values.join(", ")),
        }
    }

    fn parse(field: &str, spec: &Value) -> Result<Self, String> {
        match spec {
            Value::String(name) => match name.as_str() {
                "string" => Ok(Self::String),
                "integer" => Ok(Self::Integer),
                "number" => Ok(Self::Number),
                "boolean" => Ok(Self::Boolean),
                other => Err(format!(
                    "output `{field}`: unknown type `{other}`, expected string, integer, number, \
                     boolean or {{enum: [...]}}"
                )),
            },
            Value::Object(map) => match map.get("enum").and_then(Value::as_array) {
                Some(values) if !values.is_empty() && map.len() == 1 => values
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .map(Self::Enum)
                    .ok_or_else(|| format!("output `{field}`: enum values must be strings")),
                _ => Err(format!(
                    "output `{field}`: expected a type name or {{enum: [value, ...]}}"
                )),
            },
            _ => Err(format!(
                "output `{field}`: expected a type name or {{enum: [value, ...]}}"
            )),
        }
    }
}

/// A query after normalisation: the single-query form is one query named
/// after its response field.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub name: String,
    pub template: String,
    pub system_prompt: Option<String>,
    pub inputs: Vec<(String, String)>,
    /// None: the answer is plain text, written to `response_field`.
    pub outputs: Option<Vec<(String, FieldType)>>,
    pub response_format: ResponseFormat,
    pub max_tokens: Option<u32>,
}

fn default_response_field() -> String {
    "llm_response".to_string()
}

fn one() -> usize {
    1
}

impl LlmOptions {
    pub fn from_json(options: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(options)
            .map_err(|e| format!("options are not valid JSON: {e}"))?;
        if let Value::Object(map) = &value {
            reject_endpoint_settings(map)?;
        }
        let parsed: LlmOptions = serde_path_to_error::deserialize(value).map_err(|e| {
            match e.path().to_string().as_str() {
                "." => format!("options: {}", e.inner()),
                path => format!("options.{path}: {}", e.inner()),
            }
        })?;
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
        if let Some(larger) = self.truncated_max_tokens
            && self.max_tokens.is_some_and(|first| larger <= first)
        {
            return Err(format!(
                "options.truncated_max_tokens ({larger}) must be larger than options.max_tokens"
            ));
        }
        if self.bundle_size == 0 {
            return Err("options.bundle_size must be at least 1".into());
        }
        let forms = [
            self.template.is_some(),
            self.queries.is_some(),
            self.batch_template.is_some(),
        ];
        match forms.iter().filter(|f| **f).count() {
            0 => {
                return Err(
                    "options: missing field `template` (or `queries`, or `batch_template`)".into(),
                );
            }
            1 => {}
            _ => {
                return Err(
                    "options: give one of `template`, `queries` and `batch_template`, not several"
                        .into(),
                );
            }
        }
        if self.queries.is_some() && (self.outputs.is_some() || !self.inputs.is_empty()) {
            return Err(
                "options: with `queries`, put `outputs` and `inputs` inside each query".into(),
            );
        }
        let queries = self.queries()?;
        let mut given = Vec::new();
        if self.temperature.is_some() {
            given.push("temperature");
        }
        if queries.iter().any(|q| q.max_tokens.is_some()) {
            given.push("max_tokens");
        }
        crate::params::check(&self.params, &given)?;
        if self.bundle_size > 1 && queries.iter().any(|q| q.outputs.is_none()) {
            return Err(
                "options.bundle_size: bundled answers must be JSON; declare `outputs`".into(),
            );
        }
        if self.bundle_size > 1 && self.batch_template.is_some() {
            return Err("options: `bundle_size` and `batch_template` do not go together".into());
        }
        let mut seen: Vec<(String, &str)> = Vec::new();
        let plain = self.plain_columns();
        for query in &queries {
            for field in query_fields(query, &plain) {
                if let Some((_, other)) = seen.iter().find(|(f, _)| *f == field) {
                    return Err(format!(
                        "options.queries: output field `{field}` comes from both `{other}` and `{}`",
                        query.name
                    ));
                }
                seen.push((field, &query.name));
            }
        }
        Ok(())
    }

    /// Every query this node asks per row (one, unless `queries` is given).
    pub fn queries(&self) -> Result<Vec<Query>, String> {
        let Some(specs) = &self.queries else {
            let template = self
                .template
                .clone()
                .or_else(|| self.batch_template.clone())
                .unwrap_or_default();
            return Ok(vec![Query {
                name: self.response_field.clone(),
                template,
                system_prompt: self.system_prompt.clone(),
                inputs: inputs(&self.inputs, "options.inputs")?,
                outputs: self
                    .outputs
                    .as_ref()
                    .map(|o| outputs(o, "options.outputs"))
                    .transpose()?,
                response_format: self.format_for(self.response_format, self.outputs.is_some())?,
                max_tokens: self.max_tokens,
            }]);
        };
        if specs.is_empty() {
            return Err("options.queries must name at least one query".into());
        }
        specs
            .iter()
            .map(|(name, spec)| {
                let spec: QuerySpec = serde_json::from_value(spec.clone())
                    .map_err(|e| format!("options.queries.{name}: {e}"))?;
                let at = format!("options.queries.{name}");
                Ok(Query {
                    name: name.clone(),
                    inputs: inputs(&spec.inputs, &format!("{at}.inputs"))?,
                    outputs: Some(outputs(&spec.outputs, &format!("{at}.outputs"))?),
                    response_format: self
                        .format_for(spec.response_format.or(self.response_format), true)?,
                    template: spec.template,
                    system_prompt: spec.system_prompt.or_else(|| self.system_prompt.clone()),
                    max_tokens: spec.max_tokens.or(self.max_tokens),
                })
            })
            .collect()
    }

    fn format_for(
        &self,
        format: Option<ResponseFormat>,
        has_outputs: bool,
    ) -> Result<ResponseFormat, String> {
        match format {
            Some(
                ResponseFormat::JsonObject | ResponseFormat::JsonSchema | ResponseFormat::Auto,
            ) if !has_outputs => {
                Err("options.response_format: a JSON response format needs `outputs` to map".into())
            }
            Some(f) => Ok(f),
            None if has_outputs => Ok(ResponseFormat::Auto),
            None => Ok(ResponseFormat::None),
        }
    }

    /// The fields this node adds to every row, in the order they are written.
    pub fn output_fields(&self) -> Vec<String> {
        self.queries()
            .unwrap_or_default()
            .iter()
            .flat_map(|q| query_fields(q, &self.plain_columns()))
            .collect()
    }

    /// The columns a plain-text answer fills.
    pub fn plain_columns(&self) -> PlainColumns {
        let field = &self.response_field;
        PlainColumns {
            answer: field.clone(),
            usage: self.usage_column.then(|| format!("{field}_usage")),
            model: self.model_column.then(|| format!("{field}_model")),
            truncated: self.truncated_field.clone(),
        }
    }
}

/// Where a plain-text answer and what comes with it go; `None`: not written.
#[derive(Debug, Clone, PartialEq)]
pub struct PlainColumns {
    pub answer: String,
    pub usage: Option<String>,
    pub model: Option<String>,
    pub truncated: Option<String>,
}

/// A plain-text query writes its answer (and its usage, its model and
/// whether it was cut, when asked); a JSON one its outputs.
pub fn query_fields(query: &Query, plain: &PlainColumns) -> Vec<String> {
    match &query.outputs {
        Some(outputs) => outputs.iter().map(|(f, _)| f.clone()).collect(),
        None => [
            Some(plain.answer.clone()),
            plain.usage.clone(),
            plain.model.clone(),
            plain.truncated.clone(),
        ]
        .into_iter()
        .flatten()
        .collect(),
    }
}

fn inputs(map: &Map<String, Value>, at: &str) -> Result<Vec<(String, String)>, String> {
    map.iter()
        .map(|(name, field)| match field.as_str() {
            Some(field) if name != "row" && name != "rows" => Ok((name.clone(), field.to_string())),
            Some(_) => Err(format!("{at}.{name}: `row` and `rows` are reserved names")),
            None => Err(format!("{at}.{name}: expected the name of a row field")),
        })
        .collect()
}

fn outputs(map: &Outputs, at: &str) -> Result<Vec<(String, FieldType)>, String> {
    if map.is_empty() {
        return Err(format!("{at} must declare at least one field"));
    }
    map.iter()
        .map(|(field, spec)| {
            FieldType::parse(field, spec)
                .map(|t| (field.clone(), t))
                .map_err(|e| format!("{at}: {e}"))
        })
        .collect()
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
        assert_eq!(o.endpoint, None);
        assert_eq!(o.model, None);
        assert_eq!(o.output_fields(), vec!["llm_response"]);
        let o = LlmOptions::from_json(
            r#"{"template": "x", "usage_column": true, "model_column": true}"#,
        )
        .unwrap();
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
    fn an_option_of_the_wrong_type_is_named_with_its_path() {
        let err = LlmOptions::from_json(r#"{"template": "x", "temperature": "hot"}"#).unwrap_err();
        assert!(
            err.starts_with("options.temperature: invalid type"),
            "{err}"
        );
        let err =
            LlmOptions::from_json(r#"{"template": "x", "params": {"seed": 1}, "bundle_size": -1}"#)
                .unwrap_err();
        assert!(err.starts_with("options.bundle_size: "), "{err}");
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
