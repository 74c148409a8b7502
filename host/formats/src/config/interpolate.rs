//! `${VAR}` and `${VAR:-default}` in the pipeline file, replaced in the text
//! before it is parsed so that numbers and booleans can come from the
//! environment too, and so that parse errors keep their line numbers.

use std::fmt;

#[derive(Debug, PartialEq)]
pub enum InterpolationError {
    Unset { name: String, line: usize },
    Empty { name: String, line: usize },
    LineBreak { name: String, line: usize },
    Malformed { line: usize, text: String },
}

impl fmt::Display for InterpolationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unset { name, .. } => write!(
                f,
                "environment variable {name} is not set; set it (export {name}=...) \
                 or give a default with ${{{name}:-default}}"
            ),
            Self::Empty { name, .. } => write!(
                f,
                "environment variable {name} is set but empty; give it a value"
            ),
            Self::LineBreak { name, .. } => write!(
                f,
                "environment variable {name} contains a line break, which cannot be \
                 placed into the pipeline file"
            ),
            Self::Malformed { text, .. } => write!(
                f,
                "`{text}` is not a valid reference; write ${{NAME}} or \
                 ${{NAME:-default}} (NAME: letters, digits, _), or $${{ for a literal ${{"
            ),
        }
    }
}

impl InterpolationError {
    pub fn line(&self) -> usize {
        match self {
            Self::Unset { line, .. }
            | Self::Empty { line, .. }
            | Self::LineBreak { line, .. }
            | Self::Malformed { line, .. } => *line,
        }
    }
}

/// Replaces every reference using `lookup`; `$${` is a literal `${`. Lines
/// starting with `#` are left alone so commented-out settings need no variables.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, InterpolationError> {
    let mut out = String::with_capacity(text.len());
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        interpolate_line(line, index + 1, &lookup, &mut out)?;
    }
    Ok(out)
}

fn interpolate_line(
    line: &str,
    number: usize,
    lookup: &impl Fn(&str) -> Option<String>,
    out: &mut String,
) -> Result<(), InterpolationError> {
    let mut rest = line;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail
                .find('}')
                .ok_or_else(|| InterpolationError::Malformed {
                    line: number,
                    text: after.trim_end().to_string(),
                })?;
            let inner = &tail[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(InterpolationError::Malformed {
                    line: number,
                    text: format!("${{{inner}}}"),
                });
            }
            let value = match (lookup(name), default) {
                (Some(v), _) if !v.is_empty() => v,
                (_, Some(d)) => d.to_string(),
                (Some(_), None) => {
                    return Err(InterpolationError::Empty {
                        name: name.into(),
                        line: number,
                    });
                }
                (None, None) => {
                    return Err(InterpolationError::Unset {
                        name: name.into(),
                        line: number,
                    });
                }
            };
            if value.contains('\n') {
                return Err(InterpolationError::LineBreak {
                    name: name.into(),
                    line: number,
                });
            }
            out.push_str(&value);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("sk-test".into()),
            "EMPTY" => Some(String::new()),
            "MULTI" => Some("a\nb".into()),
            _ => None,
        }
    }

    #[test]
    fn replaces_variables_and_defaults() {
        let text = "a: ${KEY}\nb: ${MISSING:-http://x:1/v1}\nc: ${EMPTY:-d}\nprice: $5\n";
        assert_eq!(
            interpolate(text, env).unwrap(),
            "a: sk-test\nb: http://x:1/v1\nc: d\nprice: $5\n"
        );
    }

    #[test]
    fn unset_variable_names_line_and_fix() {
        let err = interpolate("x: 1\napi_key: ${OPENAI_API_KEY}\n", env).unwrap_err();
        assert_eq!(
            err,
            InterpolationError::Unset {
                name: "OPENAI_API_KEY".into(),
                line: 2
            }
        );
        assert!(err.to_string().contains("export OPENAI_API_KEY="));
    }

    #[test]
    fn empty_and_multiline_values_are_refused() {
        assert!(matches!(
            interpolate("k: ${EMPTY}", env),
            Err(InterpolationError::Empty { .. })
        ));
        assert!(matches!(
            interpolate("k: ${MULTI}", env),
            Err(InterpolationError::LineBreak { .. })
        ));
    }

    #[test]
    fn escapes_comments_and_malformed_references() {
        assert_eq!(interpolate("t: $${KEY}", env).unwrap(), "t: ${KEY}");
        assert_eq!(interpolate("# ${UNSET}\n", env).unwrap(), "# ${UNSET}\n");
        assert!(matches!(
            interpolate("k: ${KEY", env),
            Err(InterpolationError::Malformed { line: 1, .. })
        ));
        assert!(matches!(
            interpolate("k: ${BAD NAME}", env),
            Err(InterpolationError::Malformed { .. })
        ));
    }
}
