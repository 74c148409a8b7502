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

/// The shape of the sampling params every chat API shares, checked before
/// any row so that a wrong value is named at its line rather than refused
/// by the provider on every row. Others pass as written.
enum Shape {
    Number {
        min: f64,
        max: f64,
    },
    Integer {
        min: i64,
    },
    Bool,
    /// A string, or a list of strings.
    Strings,
}

const KNOWN: &[(&str, Shape)] = &[
    ("temperature", Shape::Number { min: 0.0, max: 2.0 }),
    ("top_p", Shape::Number { min: 0.0, max: 1.0 }),
    (
        "frequency_penalty",
        Shape::Number {
            min: -2.0,
            max: 2.0,
        },
    ),
    (
        "presence_penalty",
        Shape::Number {
            min: -2.0,
            max: 2.0,
        },
    ),
    ("max_tokens", Shape::Integer { min: 1 }),
    ("max_completion_tokens", Shape::Integer { min: 1 }),
    ("n", Shape::Integer { min: 1 }),
    ("top_k", Shape::Integer { min: 0 }),
    ("top_logprobs", Shape::Integer { min: 0 }),
    ("seed", Shape::Integer { min: i64::MIN }),
    ("logprobs", Shape::Bool),
    ("stop", Shape::Strings),
    ("stop_sequences", Shape::Strings),
];

fn check_shape(field: &str, shape: &Shape, value: &Value) -> Result<(), String> {
    let fits = match shape {
        Shape::Number { min, max } => value.as_f64().is_some_and(|n| (*min..=*max).contains(&n)),
        Shape::Integer { min } => value.as_i64().is_some_and(|n| n >= *min),
        Shape::Bool => value.is_boolean(),
        Shape::Strings => {
            value.is_string()
                || value
                    .as_array()
                    .is_some_and(|items| items.iter().all(Value::is_string))
        }
    };
    if fits {
        return Ok(());
    }
    let wanted = match shape {
        Shape::Number { min, max } => format!("a number from {min} to {max}"),
        Shape::Integer { min: i64::MIN } => "an integer".to_string(),
        Shape::Integer { min } => format!("an integer of at least {min}"),
        Shape::Bool => "true or false".to_string(),
        Shape::Strings => "a string or a list of strings".to_string(),
    };
    Err(format!(
        "options.params.{field}: must be {wanted}, got {value}"
    ))
}

/// Refuses params that would replace what the node builds, that repeat an
/// option the node was given (`temperature`, `max_tokens`), or whose value
/// no chat API takes.
pub fn check(params: &Map<String, Value>, options_given: &[&str]) -> Result<(), String> {
    for (field, why) in BUILT_BY_THE_NODE {
        if params.contains_key(*field) {
            return Err(format!("options.params.{field} is not allowed: {why}"));
        }
    }
    if params.get("stream") == Some(&Value::Bool(true)) {
        return Err(
            "options.params.stream: weir reads each answer whole, and a streamed one \
             would be paid for and then unreadable: remove `stream`"
                .to_string(),
        );
    }
    for field in options_given {
        if params.contains_key(*field) {
            return Err(format!(
                "options.params.{field}: `{field}` is also set as options.{field}; give it once"
            ));
        }
    }
    for (field, shape) in KNOWN {
        if let Some(value) = params.get(*field) {
            check_shape(field, shape, value)?;
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
    fn known_params_are_checked_and_others_pass_as_written() {
        let err = |v: Value| check(&map(v), &[]).unwrap_err();
        assert_eq!(
            err(json!({"temperature": "hot"})),
            "options.params.temperature: must be a number from 0 to 2, got \"hot\""
        );
        assert_eq!(
            err(json!({"top_p": 1.5})),
            "options.params.top_p: must be a number from 0 to 1, got 1.5"
        );
        assert_eq!(
            err(json!({"seed": 1.5})),
            "options.params.seed: must be an integer, got 1.5"
        );
        assert_eq!(
            err(json!({"n": 0})),
            "options.params.n: must be an integer of at least 1, got 0"
        );
        assert_eq!(
            err(json!({"stop": ["a", 1]})),
            "options.params.stop: must be a string or a list of strings, got [\"a\",1]"
        );
        let fine = json!({"temperature": 0.2, "top_p": 1, "seed": -3, "stop": "END",
                          "logprobs": true, "reasoning_effort": "low", "metadata": {"a": 1}});
        assert_eq!(check(&map(fine), &[]), Ok(()));
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
        let err = check(&map(json!({"stream": true})), &[]).unwrap_err();
        assert!(err.starts_with("options.params.stream: "), "{err}");
        assert!(check(&map(json!({"stream": false})), &[]).is_ok());
        let err = check(&map(json!({"temperature": 1})), &["temperature"]).unwrap_err();
        assert!(err.contains("also set as options.temperature"), "{err}");
        assert!(check(&map(json!({"temperature": 1, "seed": 7})), &[]).is_ok());
    }
}
