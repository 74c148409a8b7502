//! A component's refusal of its options, and the option it is about. A
//! 0.3.0 component names the option by its path (`config-error`); older
//! ones only say it in their text, from which the option's name is read
//! when it follows the conventions the SDKs use (`options.NAME: …`, serde's
//! "unknown field `NAME`").

use super::bindings::ConfigError;

#[derive(Debug, Clone, PartialEq)]
pub struct RefusedOptions {
    /// The option's path of keys, when the component gave one; empty for the
    /// options as a whole.
    pub path: Option<Vec<String>>,
    pub message: String,
}

impl RefusedOptions {
    /// A refusal as text (contracts before 0.3.0).
    pub fn text(message: String) -> Self {
        Self {
            path: None,
            message,
        }
    }

    pub fn typed(error: ConfigError) -> Self {
        Self {
            path: Some(error.path),
            message: error.message,
        }
    }

    /// The path of keys, within the node's options, of the option the
    /// refusal is about, if it names one.
    pub fn option_path(&self) -> Option<Vec<String>> {
        match &self.path {
            Some(path) if path.is_empty() => None,
            Some(path) => Some(path.clone()),
            None => named_option(&self.message).map(|name| vec![name]),
        }
    }
}

/// `options.params.temperature: message`, a list item as `labels[2]`.
impl std::fmt::Display for RefusedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(path) = &self.path else {
            return f.write_str(&self.message);
        };
        f.write_str("options")?;
        for key in path {
            if key.parse::<usize>().is_ok() {
                write!(f, "[{key}]")?;
            } else {
                write!(f, ".{key}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// The option a refusal's text names, as `options.NAME` or serde's
/// "unknown field `NAME`".
fn named_option(message: &str) -> Option<String> {
    let after = message
        .split_once("unknown field `")
        .map(|(_, rest)| rest.split('`').next().unwrap_or_default())
        .or_else(|| {
            message.split_once("options.").map(|(_, rest)| {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
        })?;
    (!after.is_empty()).then(|| after.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(path: &[&str], message: &str) -> RefusedOptions {
        RefusedOptions::typed(ConfigError {
            path: path.iter().map(|k| k.to_string()).collect(),
            message: message.into(),
        })
    }

    #[test]
    fn a_typed_refusal_shows_and_locates_its_path() {
        let refused = typed(&["params", "temperature"], "must be at most 2");
        assert_eq!(
            refused.to_string(),
            "options.params.temperature: must be at most 2"
        );
        assert_eq!(
            refused.option_path(),
            Some(vec!["params".to_string(), "temperature".to_string()])
        );
        assert_eq!(
            typed(&["labels", "2"], "empty").to_string(),
            "options.labels[2]: empty"
        );
        let whole = typed(&[], "expected an object");
        assert_eq!(whole.to_string(), "options: expected an object");
        assert_eq!(whole.option_path(), None);
    }

    #[test]
    fn a_refusal_as_text_is_shown_as_it_is_and_located_by_the_name_it_gives() {
        let unknown =
            RefusedOptions::text("options: unknown field `temprature`, expected one of `a`".into());
        assert_eq!(unknown.option_path(), Some(vec!["temprature".to_string()]));
        assert_eq!(
            unknown.to_string(),
            "options: unknown field `temprature`, expected one of `a`"
        );
        let named = RefusedOptions::text("options.template: syntax error: unexpected end".into());
        assert_eq!(named.option_path(), Some(vec!["template".to_string()]));
        assert_eq!(
            RefusedOptions::text("options are not valid JSON".into()).option_path(),
            None
        );
    }
}
