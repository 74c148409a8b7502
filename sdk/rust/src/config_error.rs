//! Why `configure` refused the options: the option at fault, by its path of
//! keys, and what is wrong with it. weir shows it as
//! `options.params.temperature: …` at that option's line in the pipeline file.

/// A refusal of the node's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The keys leading to the option, e.g. `["params", "temperature"]`; a
    /// list item by its index (`"2"`). Empty: the options as a whole.
    pub path: Vec<String>,
    pub message: String,
}

impl ConfigError {
    /// A refusal of the option at `path`.
    pub fn at<S: AsRef<str>>(path: &[S], message: impl Into<String>) -> Self {
        Self {
            path: path.iter().map(|k| k.as_ref().to_string()).collect(),
            message: message.into(),
        }
    }

    /// A refusal of the options as a whole.
    pub fn whole(message: impl Into<String>) -> Self {
        Self {
            path: Vec::new(),
            message: message.into(),
        }
    }

    /// The same refusal, for an option one level down under `key`: what a
    /// helper that checks a nested part of the options returns is placed
    /// where that part sits.
    pub fn under(mut self, key: &str) -> Self {
        self.path.insert(0, key.to_string());
        self
    }
}

/// Text written the way weir shows a refusal (`options.a.b: message`,
/// `options.a[2] message`, `options: message`) becomes that refusal; serde's
/// "unknown field `x`" names the option `x`. Any other text refuses the
/// options as a whole. So `?` on a `Result<_, String>` keeps working.
impl From<String> for ConfigError {
    fn from(text: String) -> Self {
        if let Some(rest) = text.strip_prefix("options.") {
            let end = rest.find([':', ' ']).unwrap_or(rest.len());
            let path = split_path(&rest[..end]);
            let message = rest[end..].trim_start_matches(':').trim_start();
            if !path.is_empty() {
                return Self {
                    path,
                    message: message.to_string(),
                };
            }
        }
        let message = text
            .strip_prefix("options:")
            .map(str::trim_start)
            .unwrap_or(&text);
        let unknown = message
            .split_once("unknown field `")
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(name, _)| vec![name.to_string()]);
        Self {
            path: unknown.unwrap_or_default(),
            message: message.to_string(),
        }
    }
}

impl From<&str> for ConfigError {
    fn from(text: &str) -> Self {
        Self::from(text.to_string())
    }
}

/// `params.temperature` and `labels[2]` as keys.
fn split_path(text: &str) -> Vec<String> {
    text.split(['.', '[', ']'])
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("options")?;
        for key in &self.path {
            if key.parse::<usize>().is_ok() {
                write!(f, "[{key}]")?;
            } else {
                write!(f, ".{key}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_in_weirs_own_form_keeps_its_path() {
        let e = ConfigError::from("options.params.temperature: must be at most 2");
        assert_eq!(
            e,
            ConfigError::at(&["params", "temperature"], "must be at most 2")
        );
        let e = ConfigError::from("options.max_tokens must be at least 1");
        assert_eq!(e, ConfigError::at(&["max_tokens"], "must be at least 1"));
        let e = ConfigError::from("options.labels[2]: empty");
        assert_eq!(e.path, ["labels", "2"]);
        assert_eq!(e.to_string(), "options.labels[2]: empty");
    }

    #[test]
    fn other_text_refuses_the_whole_options_unless_serde_names_a_field() {
        let e = ConfigError::from("options: unknown field `colour`, expected `labels`");
        assert_eq!(e.path, ["colour"]);
        assert_eq!(e.message, "unknown field `colour`, expected `labels`");
        let e = ConfigError::from("options are not valid JSON");
        assert_eq!(e, ConfigError::whole("options are not valid JSON"));
        assert_eq!(
            ConfigError::at(&["b"], "bad").under("a").to_string(),
            "options.a.b: bad"
        );
    }
}
