//! Prompt templates: Jinja (minijinja) with strict undefined, so a template that
//! names a field the row lacks fails that row instead of sending a hollow prompt.

use minijinja::{Environment, UndefinedBehavior, value::Value};
use serde_json::{Map, Value as Json};

const TEMPLATE_NAME: &str = "template";
const SYSTEM_NAME: &str = "system_prompt";
/// Bounds the work one render may do, so a runaway loop in a template fails the
/// row rather than spinning until the host's CPU deadline.
const RENDER_FUEL: u64 = 1_000_000;

pub struct Prompts {
    env: Environment<'static>,
    has_system: bool,
}

impl Prompts {
    /// Compiles both templates; a syntax error names the template and its line.
    pub fn compile(template: &str, system_prompt: Option<&str>) -> Result<Self, String> {
        let mut env = Environment::new();
        // Debug mode defaults to the build's debug assertions: without it, the
        // release-built guest's errors lose the template line they point at.
        env.set_debug(true);
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(RENDER_FUEL));
        weir_sdk::template::jinja2_compatible(&mut env);
        env.add_template_owned(TEMPLATE_NAME, template.to_owned())
            .map_err(|e| format!("options.template: {}", describe(&e)))?;
        if let Some(system) = system_prompt {
            env.add_template_owned(SYSTEM_NAME, system.to_owned())
                .map_err(|e| format!("options.system_prompt: {}", describe(&e)))?;
        }
        Ok(Self {
            env,
            has_system: system_prompt.is_some(),
        })
    }

    /// Renders the user message and, if configured, the system message, for
    /// one row; `inputs` binds template variables to row fields.
    pub fn render(
        &self,
        row: &Map<String, Json>,
        inputs: &[(String, String)],
    ) -> Result<Rendered, String> {
        let mut ctx = std::collections::BTreeMap::new();
        for (name, field) in inputs {
            let value = row.get(field).ok_or_else(|| {
                format!("input `{name}` is the row field `{field}`, which this row lacks")
            })?;
            ctx.insert(name.clone(), Value::from(minijinja::value::Serde(value)));
        }
        ctx.insert("row".to_string(), Value::from(minijinja::value::Serde(row)));
        self.render_context(&Value::from(ctx))
    }

    /// Renders once for a whole batch: the templates see the rows as `rows`.
    pub fn render_batch(&self, rows: &[Map<String, Json>]) -> Result<Rendered, String> {
        self.render_context(
            &minijinja::context! { rows => Value::from(minijinja::value::Serde(rows)) },
        )
    }

    fn render_context(&self, ctx: &Value) -> Result<Rendered, String> {
        let user = self.render_one(TEMPLATE_NAME, ctx)?;
        let system = if self.has_system {
            Some(self.render_one(SYSTEM_NAME, ctx)?)
        } else {
            None
        };
        Ok(Rendered { system, user })
    }

    fn render_one(&self, name: &str, ctx: &Value) -> Result<String, String> {
        let template = self.env.get_template(name).map_err(|e| describe(&e))?;
        template
            .render(ctx)
            .map_err(|e| format!("{name}: {}", describe(&e)))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub system: Option<String>,
    pub user: String,
}

/// minijinja's Display names the template and line; add the offending source
/// line's text when known so users see what to fix.
fn describe(err: &minijinja::Error) -> String {
    let mut text = err.to_string();
    if let (Some(source), Some(line)) = (err.template_source(), err.line())
        && let Some(src_line) = source.lines().nth(line.saturating_sub(1))
    {
        text.push_str(&format!(" near `{}`", src_line.trim()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Json) -> Map<String, Json> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn renders_row_fields() {
        let p = Prompts::compile(
            "Review: {{ row.text }}",
            Some("Be brief about {{ row.id }}"),
        )
        .unwrap();
        let r = p
            .render(&row(json!({"id": "7", "text": "great"})), &[])
            .unwrap();
        assert_eq!(r.user, "Review: great");
        assert_eq!(r.system.as_deref(), Some("Be brief about 7"));
    }

    #[test]
    fn templates_written_for_jinja2_keep_its_filters_and_pythons_methods() {
        let p = Prompts::compile(
            "{{ row.text.strip().upper() }}|{{ row.text.strip() | truncate(9) }}|{{ row.text | striptags }}|\
             {% for k, v in row.items() %}{{ k }}={{ v }};{% endfor %}|{{ row.get('lang', 'en') }}|{{ row.text.strip() | truncate(length=10, end='…') }}",
            None,
        )
        .unwrap();
        let r = p
            .render(&row(json!({"id": 7, "text": " great kettle, fast "})), &[])
            .unwrap();
        assert_eq!(
            r.user,
            "GREAT KETTLE, FAST|great...|great kettle, fast|id=7;text= great kettle, fast ;|en|great…"
        );
    }

    #[test]
    fn inputs_bind_variables_to_row_fields_and_batches_see_rows() {
        let p = Prompts::compile("{{ body }} / {{ row.id }}", None).unwrap();
        let inputs = vec![("body".to_string(), "text".to_string())];
        let r = p
            .render(&row(json!({"id": "7", "text": "great"})), &inputs)
            .unwrap();
        assert_eq!(r.user, "great / 7");
        let err = p.render(&row(json!({"id": "7"})), &inputs).unwrap_err();
        assert!(err.contains("row field `text`"), "{err}");
        let p = Prompts::compile("{% for r in rows %}{{ r.id }},{% endfor %}", None).unwrap();
        let rows = vec![row(json!({"id": 1})), row(json!({"id": 2}))];
        assert_eq!(p.render_batch(&rows).unwrap().user, "1,2,");
    }

    #[test]
    fn missing_field_fails_the_render() {
        let p = Prompts::compile("{{ row.missing }}", None).unwrap();
        let err = p.render(&row(json!({"text": "x"})), &[]).unwrap_err();
        assert!(err.contains("undefined"), "{err}");
        assert!(err.contains("row.missing"), "{err}");
    }

    #[test]
    fn syntax_error_is_reported_at_compile_time_with_its_line() {
        let err = match Prompts::compile("line one\n{{ row.text ", None) {
            Err(e) => e,
            Ok(_) => panic!("template with an unclosed tag compiled"),
        };
        assert!(err.starts_with("options.template:"), "{err}");
        assert!(err.contains(":2"), "{err}");
    }

    #[test]
    fn runaway_template_runs_out_of_fuel() {
        let p = Prompts::compile(
            "{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}",
            None,
        )
        .unwrap();
        let err = p.render(&row(json!({})), &[]).unwrap_err();
        assert!(err.contains("fuel"), "{err}");
    }
}
