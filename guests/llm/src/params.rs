//! `params`: request fields the node has no option for (`top_p`, `seed`,
//! `stop`, `logprobs`, `reasoning_effort`, Anthropic's `top_k` or
//! `metadata`, ...), merged last and as written into every request body, so
//! a provider's newer fields need no new option.

use serde_json::{Map, Value};

/// Fields the node builds itself: a param in their place would replace the
/// prompt, the model or the output contract the node parses against.
const BUILT_BY_THE_NODE: &[(&str, &str)] = &[
    (
        "messages",
        "the messages are built from `template` and `system_prompt`",
    ),
    ("system", "the system message is built from `system_prompt`"),
    ("model", "set it with options.model"),
    ("response_format", "set it with options.response_format"),
];

/// Refuses params that would replace what the node builds, or that repeat
/// an option the node was given (`temperature`, `max_tokens`).
pub fn check(params: &Map<String, Value>, options_given: &[&str]) -> Result<(), String> {
    for (field, why) in BUILT_BY_THE_NODE {
        if params.contains_key(*field) {
            return Err(format!("options.params.{field} is not allowed: {why}"));
        }
    }
    for field in options_given {
        if params.contains_key(*field) {
            return Err(format!(
                "options.params.{field}: `{field}` is also set as options.{field}; give it once"
            ));
        }
    }
    Ok(())
}

/// Puts every param into the body, replacing a field of the same name.
pub fn merge(body: &mut Map<String, Value>, params: &Map<String, Value>) {
    for (field, value) in params {
        body.insert(field.clone(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn params_are_merged_as_written() {
        let mut body = map(json!({"messages": [], "temperature": 0}));
        merge(
            &mut body,
            &map(json!({"top_p": 0.5, "metadata": {"user_id": "u1"}, "stop": ["\n\n"]})),
        );
        assert_eq!(
            Value::Object(body),
            json!({"messages": [], "temperature": 0, "top_p": 0.5,
                   "metadata": {"user_id": "u1"}, "stop": ["\n\n"]})
        );
    }

    #[test]
    fn params_may_not_replace_what_the_node_builds_or_repeat_an_option() {
        for field in ["messages", "system", "model", "response_format"] {
            let err = check(&map(json!({field: 1})), &[]).unwrap_err();
            assert!(
                err.starts_with(&format!("options.params.{field} ")),
                "{err}"
            );
        }
        let err = check(&map(json!({"temperature": 1})), &["temperature"]).unwrap_err();
        assert!(err.contains("also set as options.temperature"), "{err}");
        assert!(check(&map(json!({"temperature": 1, "seed": 7})), &[]).is_ok());
    }
}
