//! YAML as weir reads it: pipeline files and fixtures files.
//!
//! A pipeline file may come from someone else, so reading one must stay cheap
//! whatever it holds: the parser's budget bounds what anchors and aliases
//! expand to and how deep the document nests (a "billion laughs" file is
//! refused at the line of the alias that goes over, instead of expanding into
//! gigabytes). A key given twice in one mapping is refused, not silently
//! overridden by the later one.
//!
//! Untyped values (a transform's `options`) follow YAML 1.2, as weir always
//! has: `yes`, `off`, `012` and `1_000` stay strings, so a label list such as
//! `[yes, no]` reaches the component as written.

use serde::de::DeserializeOwned;
use serde_saphyr::budget::{Budget, BudgetBreach};
use serde_saphyr::localizer::Localizer;
use serde_saphyr::{Error, Location, MessageFormatter, UserMessageFormatter};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// A YAML document weir could not read or write.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The parser knows where: `PATH:LINE:COLUMN: message`.
    #[error("{}:{line}:{column}: {message}", path.display())]
    At {
        path: PathBuf,
        line: u64,
        column: u64,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    InFile { path: PathBuf, message: String },
    #[error(transparent)]
    Write(#[from] serde_saphyr::SerializeError),
}

/// `text` as a `T`, or an error that starts `PATH:LINE:COLUMN:` when the
/// parser knows where the problem is.
pub fn from_str<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| located(path, &e))
}

/// `value` as YAML, for the files weir writes (recorded fixtures).
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, YamlError> {
    Ok(serde_saphyr::to_string(value)?)
}

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        // The message carries the location; a source excerpt would repeat
        // the file back at the user.
        with_snippet: false,
    }
}

fn located(path: &Path, err: &Error) -> YamlError {
    let message = err.render_with_options(serde_saphyr::render_options! {
        formatter: &Plain,
        snippets: serde_saphyr::SnippetMode::Off,
    });
    match err.location() {
        Some(at) if at != Location::UNKNOWN => YamlError::At {
            path: path.to_path_buf(),
            line: at.line(),
            column: at.column(),
            message,
        },
        _ => YamlError::InFile {
            path: path.to_path_buf(),
            message,
        },
    }
}

/// The parser's user-facing wording, without the " at line L, column C" it
/// appends: the `PATH:LINE:COLUMN:` prefix already says where.
struct Plain;

impl MessageFormatter for Plain {
    fn localizer(&self) -> &dyn Localizer {
        &Unlocated
    }

    fn format_message<'a>(&self, err: &'a Error) -> Cow<'a, str> {
        match err {
            // "invalid u64" names a Rust type, not what the file should say.
            Error::InvalidScalar { ty, .. } => {
                Cow::Owned(format!("invalid type: expected {}", expected(ty)))
            }
            Error::Budget { breach, .. } => Cow::Owned(format!(
                "too large or too complex to read: {}",
                beyond(breach)
            )),
            _ => UserMessageFormatter.format_message(err),
        }
    }
}

/// Which of the parser's limits a document went beyond, in the file's terms.
fn beyond(breach: &BudgetBreach) -> String {
    let limits = Budget::default();
    match breach {
        BudgetBreach::Nodes { .. } => format!(
            "more than {} values, counting each value an alias repeats",
            limits.max_nodes
        ),
        BudgetBreach::Depth { .. } => format!("nested more than {} levels deep", limits.max_depth),
        BudgetBreach::Aliases { .. } => format!("more than {} aliases", limits.max_aliases),
        BudgetBreach::Anchors { .. } => format!("more than {} anchors", limits.max_anchors),
        BudgetBreach::AliasAnchorRatio { .. } => {
            format!(
                "more than {} aliases per anchor",
                limits.alias_anchor_ratio_multiplier
            )
        }
        other => format!("{other:?}"),
    }
}

struct Unlocated;

impl Localizer for Unlocated {
    fn attach_location<'a>(&self, base: Cow<'a, str>, _: Location) -> Cow<'a, str> {
        base
    }
}

fn expected(ty: &str) -> &str {
    match ty {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" => "true or false",
        "char" => "a single character",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parse(text: &str) -> Result<Value, YamlError> {
        from_str(Path::new("f.yaml"), text)
    }

    #[test]
    fn untyped_values_read_as_yaml_1_2() {
        let value =
            parse("a: yes\nb: off\nc: 012\nd: 1_000\ne: true\nf: 0.5\ng: ~\nh: 7\n").unwrap();
        assert_eq!(
            value,
            json!({"a": "yes", "b": "off", "c": "012", "d": "1_000", "e": true, "f": 0.5, "g": null, "h": 7})
        );
    }

    #[test]
    fn errors_name_file_line_and_column_once() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            pool_size: usize,
        }
        let err = from_str::<Spec>(Path::new("f.yaml"), "pool_size: many\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "f.yaml:1:12: invalid type: expected a whole number, 0 or more"
        );

        let err = parse("a: [1, 2\n").unwrap_err().to_string();
        assert!(err.starts_with("f.yaml:"), "{err}");
        assert!(!err.contains(" at line "), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err().to_string();
        assert!(err.starts_with("f.yaml:3:1: "), "{err}");
        assert!(err.contains("duplicate"), "{err}");
    }
}
