//! Jinja prompt templates over a row, with minijinja.

use crate::row::{Row, RowError};
use minijinja::{Environment, UndefinedBehavior};

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
