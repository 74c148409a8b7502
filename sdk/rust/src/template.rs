//! Jinja prompt templates over a row, with minijinja.

use crate::row::{Row, RowError};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, State, UndefinedBehavior};

/// A compiled template. Rendering sees the row as `row` (`{{ row.text }}`);
/// a field the row lacks is an error rather than an empty string, so a typo
/// cannot send a prompt with a hole in it.
pub struct Template {
    env: Environment<'static>,
}

/// Bounds a template's work, so a runaway loop fails its row quickly.
const FUEL: u64 = 2_000_000;

impl Template {
    /// Compiles `source`; the error gives the line and what is wrong.
    pub fn new(source: &str) -> Result<Self, String> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        jinja2_compatible(&mut env);
        env.add_template_owned("template", source.to_string())
            .map_err(|e| describe(&e))?;
        Ok(Self { env })
    }

    /// Renders against `row`; failures have the code `template_rendering_failed`.
    pub fn render(&self, row: &Row) -> Result<String, RowError> {
        let template = self.env.get_template("template").expect("added in new");
        template
            .render(minijinja::context! { row => minijinja::Value::from(minijinja::value::Serde(&row.0)) })
            .map_err(|e| RowError::new("template_rendering_failed", describe(&e)))
    }
}

/// Gives `env` what templates written for Jinja2 use beyond minijinja's
/// own: the filters `truncate` (by position too, as Jinja2 takes it),
/// `striptags`, `filesizeformat` and `pluralize`, and Python's methods on
/// strings, lists and mappings (`row.text.strip()`, `row.items()`,
/// `row.get('lang', 'en')`).
pub fn jinja2_compatible(env: &mut Environment) {
    minijinja_contrib::add_to_environment(env);
    env.add_filter("truncate", truncate);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
}

/// Jinja2's `truncate(length=255, killwords=False, end='...', leeway=None)`,
/// whose arguments minijinja-contrib's takes by name only.
fn truncate(
    state: &mut State,
    value: &Value,
    positional: minijinja::value::Rest<Value>,
    named: Kwargs,
) -> Result<Value, Error> {
    const NAMES: [&str; 4] = ["length", "killwords", "end", "leeway"];
    if positional.len() > NAMES.len() {
        return Err(Error::new(
            minijinja::ErrorKind::TooManyArguments,
            "truncate takes at most length, killwords, end and leeway",
        ));
    }
    let mut args: Vec<(String, Value)> = NAMES
        .iter()
        .zip(positional.iter())
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    for name in named.args() {
        args.push((name.to_string(), named.get::<Value>(name)?));
    }
    minijinja_contrib::filters::truncate(state, value, args.into_iter().collect())
}

fn describe(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!(
            "template line {line}: {}",
            e.detail().unwrap_or(&e.kind().to_string())
        ),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fields_and_names_missing_ones() {
        let t = Template::new("Review: {{ row.text | upper }}").unwrap();
        let row = Row::parse(r#"{"text":"good"}"#).unwrap();
        assert_eq!(t.render(&row).unwrap(), "Review: GOOD");
        let err = t
            .render(&Row::parse(r#"{"body":"x"}"#).unwrap())
            .unwrap_err();
        assert_eq!(err.code, "template_rendering_failed");
        let err = Template::new("line one\n{{ row.text ").err().unwrap();
        assert!(err.starts_with("template line 2"), "{err}");
    }
}
