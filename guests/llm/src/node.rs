//! A configured `llm` node: turns a batch of rows into one outcome per row.

use crate::chat;
use crate::format::{self, Asked};
use crate::options::{LlmOptions, OnTruncated, Query};
use crate::prompt::{Prompts, Rendered};
use crate::{bundle, hashing, parse};
use serde_json::{Map, Value};
use std::cell::Cell;
use weir_sdk::RowError;
use weir_sdk::chat::Answer;
use weir_sdk::host::{CallError, Host, Level, Request, Response};

pub type Row = Map<String, Value>;

/// One outcome per input row; mirrors `transform.outcome` in the WIT.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Rows(Vec<String>),
    Failed { code: String, message: String },
}

impl Outcome {
    fn failed(code: &str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

impl From<RowError> for Outcome {
    fn from(f: RowError) -> Self {
        Outcome::Failed {
            code: f.code,
            message: f.message,
        }
    }
}

pub struct LlmNode {
    options: LlmOptions,
    /// The granted endpoint every request goes to.
    endpoint: String,
    /// The endpoint refused `json_schema`: `auto` asks for `json_object`
    /// from then on.
    schema_refused: Cell<bool>,
    queries: Vec<CompiledQuery>,
}

struct CompiledQuery {
    query: Query,
    prompts: Prompts,
    template_hash: String,
}

/// One request: a query for one row, or for a bundle of rows.
#[derive(Clone)]
struct Unit {
    query: usize,
    rows: Vec<u32>,
    /// Each row's own rendered prompt, to build the request again.
    prompts: Vec<(u32, Rendered)>,
    asked: Asked,
    /// Earlier answers and what was wrong with them, as (role, content)
    /// messages after the prompt: a re-ask's conversation.
    follow_up: Vec<(&'static str, String)>,
    body: String,
    /// Sent again with `truncated_max_tokens` after a cut answer.
    enlarged: bool,
}

/// What one query gave one row.
type QueryResult = Result<Row, RowError>;

impl LlmNode {
    /// `granted`: the endpoints the node is granted, in the pipeline file's order.
    pub fn configure(options_json: &str, granted: &[String]) -> Result<Self, String> {
        let options = LlmOptions::from_json(options_json)?;
        let endpoint = crate::endpoint::choose(options.endpoint.as_deref(), granted)?;
        let multi = options.queries.is_some();
        let queries = options
            .queries()?
            .into_iter()
            .map(|query| {
                let at = if multi {
                    format!("options.queries.{}", query.name)
                } else {
                    "options".to_string()
                };
                let prompts = Prompts::compile(&query.template, query.system_prompt.as_deref())
                    .map_err(|e| match multi {
                        true => format!("{at}.{e}"),
                        false => e,
                    })?;
                Ok(CompiledQuery {
                    template_hash: hashing::template_hash(&query.template),
                    query,
                    prompts,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            options,
            endpoint,
            schema_refused: Cell::new(false),
            queries,
        })
    }

    pub fn output_fields(&self) -> Vec<String> {
        self.options.output_fields()
    }

    /// Renders every row (and bundle) first and sends all their requests in one
    /// executor call, so the rows of a batch and all their queries wait on the
    /// endpoint together rather than in turn. A row gets the answers of all its
    /// queries or fails as a whole.
    pub fn process(&self, rows: &[String], host: &dyn Host) -> Vec<Outcome> {
        if self.options.batch_template.is_some() {
            return self.summarize(rows, host);
        }
        let parsed: Vec<Result<Row, Outcome>> = rows
            .iter()
            .enumerate()
            .map(|(i, text)| self.parse_row(i as u32, text, host))
            .collect();
        if self.options.bundle_size > 1 && rows.len() == 1 {
            host.log(
                Level::Debug,
                "bundle_size is set but this batch has one row: give the node `batch` so rows \
                 arrive together",
            );
        }
        // results[row][query]
        let mut results: Vec<Vec<Option<QueryResult>>> =
            vec![vec![None; self.queries.len()]; rows.len()];
        let mut units = Vec::new();
        for (q, _) in self.queries.iter().enumerate() {
            let mut rendered = Vec::new();
            for (row, data) in parsed.iter().enumerate() {
                let Ok(data) = data else { continue };
                match self.render(q, data) {
                    Ok(prompt) => rendered.push((row as u32, prompt)),
                    Err(failure) => results[row][q] = Some(Err(failure)),
                }
            }
            let bundle = self.options.bundle_size.max(1);
            for chunk in rendered.chunks(bundle) {
                units.push(self.unit(q, chunk));
            }
        }
        self.run_units(units, &parsed, &mut results, host, true);
        parsed
            .into_iter()
            .zip(results)
            .map(|(row, answers)| match row {
                Ok(row) => self.conclude(row, answers),
                Err(outcome) => outcome,
            })
            .collect()
    }

    fn parse_row(&self, index: u32, text: &str, host: &dyn Host) -> Result<Row, Outcome> {
        let row: Row = serde_json::from_str(text).map_err(|e| {
            Outcome::failed("invalid_row", format!("row is not a JSON object: {e}"))
        })?;
        for compiled in &self.queries {
            host.attach(
                index,
                &self.key("template_hash", compiled),
                &compiled.template_hash,
            );
        }
        match hashing::variables_hash(&row) {
            Ok(hash) => host.attach(index, "variables_hash", &hash),
            Err(e) => host.log(Level::Debug, &e),
        }
        Ok(row)
    }

    /// An audit key, suffixed with the query's name when there are several.
    fn key(&self, base: &str, compiled: &CompiledQuery) -> String {
        match self.options.queries {
            Some(_) => format!("{base}.{}", compiled.query.name),
            None => base.to_string(),
        }
    }

    fn unit(&self, q: usize, chunk: &[(u32, Rendered)]) -> Unit {
        self.unit_following(q, chunk, Vec::new())
    }

    /// A row a bundled answer missed, asked alone. Its own template may
    /// not name the fields (the bundle's prompt did): the prompt names them
    /// whatever is asked.
    fn single_from_bundle(&self, q: usize, row: u32, prompt: &Rendered) -> Unit {
        let outputs = self.queries[q].query.outputs.as_deref().unwrap_or_default();
        let mut prompt = prompt.clone();
        if self.asked(q) == Asked::JsonSchema {
            let schema = parse::object_schema(outputs, None);
            prompt.user.push_str(&format::instruction(outputs, &schema));
        }
        self.unit(q, &[(row, prompt)])
    }

    fn asked(&self, q: usize) -> Asked {
        Asked::for_format(
            self.queries[q].query.response_format,
            self.schema_refused.get(),
        )
    }

    fn unit_following(
        &self,
        q: usize,
        chunk: &[(u32, Rendered)],
        follow_up: Vec<(&'static str, String)>,
    ) -> Unit {
        let query = &self.queries[q].query;
        let asked = self.asked(q);
        let outputs = query.outputs.as_deref().unwrap_or_default();
        let body = match chunk {
            [(_, prompt)] => {
                let schema = || parse::object_schema(outputs, None);
                let mut prompt = prompt.clone();
                if query.outputs.is_some() && asked != Asked::JsonSchema {
                    prompt
                        .user
                        .push_str(&format::instruction(outputs, &schema()));
                }
                chat::request_body(&self.options, query, &prompt, asked, schema, &follow_up)
            }
            several => {
                let items: Vec<(u32, String)> =
                    several.iter().map(|(r, p)| (*r, p.user.clone())).collect();
                // The bundle's prompt names the fields whatever is asked.
                let prompt = Rendered {
                    // The system prompt is the bundle's: its first row's.
                    system: several[0].1.system.clone(),
                    user: bundle::prompt(&items, outputs),
                };
                let schema = || bundle::schema(outputs);
                chat::request_body(&self.options, query, &prompt, asked, schema, &follow_up)
            }
        };
        Unit {
            query: q,
            rows: chunk.iter().map(|(r, _)| *r).collect(),
            prompts: chunk.to_vec(),
            asked,
            follow_up,
            body,
            enlarged: false,
        }
    }

    /// The unit sent again as it was, with room for a longer answer:
    /// `truncated_max_tokens` in place of `max_tokens`.
    fn enlarged(&self, unit: &Unit, max_tokens: u32) -> Unit {
        let mut body: serde_json::Map<String, Value> =
            serde_json::from_str(&unit.body).expect("a request body is a JSON object");
        body.insert("max_tokens".into(), Value::from(max_tokens));
        Unit {
            body: Value::Object(body).to_string(),
            enlarged: true,
            ..unit.clone()
        }
    }

    /// The unit asked again: its conversation, the answer it got, and what
    /// is wrong with that answer.
    fn reask(&self, unit: &Unit, answer: &str, problem: &RowError) -> Unit {
        let query = &self.queries[unit.query].query;
        let fields: Vec<String> = query
            .outputs
            .iter()
            .flatten()
            .map(|(name, t)| format!("{name} ({})", t.in_a_prompt()))
            .collect();
        let mut follow_up = unit.follow_up.clone();
        follow_up.push(("assistant", answer.to_string()));
        follow_up.push((
            "user",
            format!(
                "That answer cannot be used: {}. Answer again with only the JSON object, with \
                 the fields {}.",
                problem.message,
                fields.join(", ")
            ),
        ));
        self.unit_following(unit.query, &unit.prompts, follow_up)
    }

    /// Sends every unit at once and files each answer under its rows. Rows a
    /// bundle left without an answer are asked again one by one when the
    /// options say so (`first_round`).
    fn run_units(
        &self,
        units: Vec<Unit>,
        parsed: &[Result<Row, Outcome>],
        results: &mut [Vec<Option<QueryResult>>],
        host: &dyn Host,
        first_round: bool,
    ) {
        if units.is_empty() {
            return;
        }
        let mut retry = Vec::new();
        let mut pending = units;
        let mut reasks = 0;
        loop {
            let mut again = Vec::new();
            let answers = self.send(&pending, host);
            let reasking = reasks < self.options.reask;
            let mut reasked = false;
            for (unit, answer) in pending.iter().zip(answers) {
                let content = answer.as_ref().map(|a| a.content.clone()).ok();
                let per_row = self.file_answer(unit, answer, host);
                if let Some(larger) = self.options.truncated_max_tokens
                    && !unit.enlarged
                    && per_row
                        .iter()
                        .any(|r| r.as_ref().is_err_and(|e| e.code == "response_truncated"))
                {
                    again.push(self.enlarged(unit, larger));
                    continue;
                }
                if reasking
                    && let ([row], [Err(problem)], Some(content)) =
                        (unit.rows.as_slice(), per_row.as_slice(), &content)
                    && matches!(
                        problem.code.as_str(),
                        "response_unparsable" | "response_invalid"
                    )
                {
                    let compiled = &self.queries[unit.query];
                    host.attach(
                        *row,
                        &self.key("count.reasks", compiled),
                        &(reasks + 1).to_string(),
                    );
                    again.push(self.reask(unit, content, problem));
                    reasked = true;
                    continue;
                }
                for (row, result) in unit.rows.iter().zip(per_row) {
                    // A failed call was retried as a bundle by the executor;
                    // only an answer that does not fit is asked row by row.
                    let bundled_miss = unit.rows.len() > 1
                        && result.as_ref().is_err_and(|e| {
                            matches!(
                                e.code.as_str(),
                                "bundle_answer_missing"
                                    | "bundle_answer_ambiguous"
                                    | "response_invalid"
                                    | "response_unparsable"
                                    | "response_truncated"
                            )
                        });
                    if bundled_miss && first_round && self.options.bundle_retry_individually {
                        retry.push((unit.query, *row));
                    } else {
                        results[*row as usize][unit.query] = Some(result);
                    }
                }
            }
            if again.is_empty() {
                break;
            }
            if reasked {
                reasks += 1;
            }
            host.log(
                Level::Debug,
                &format!(
                    "asking {} answers again: with what was wrong with them, or with room \
                     for a longer answer",
                    again.len()
                ),
            );
            pending = again;
        }
        if retry.is_empty() {
            return;
        }
        host.log(
            Level::Info,
            &format!("asking {} bundled rows again one by one", retry.len()),
        );
        let mut singles = Vec::new();
        for (q, row) in retry {
            let Ok(data) = &parsed[row as usize] else {
                continue;
            };
            match self.render(q, data) {
                Ok(prompt) => singles.push(self.single_from_bundle(q, row, &prompt)),
                Err(failure) => results[row as usize][q] = Some(Err(failure)),
            }
        }
        self.run_units(singles, parsed, results, host, false);
    }

    fn render(&self, q: usize, row: &Row) -> Result<Rendered, RowError> {
        let compiled = &self.queries[q];
        compiled
            .prompts
            .render(row, &compiled.query.inputs)
            .map_err(|e| RowError::new("template_rendering_failed", e))
    }

    /// Sends every unit in one executor call: one answer (or failure) per
    /// unit. Units that asked for `json_schema` under `auto` and were
    /// refused it are asked again for `json_object`, as is every later unit.
    fn send(&self, units: &[Unit], host: &dyn Host) -> Vec<Result<Answer, RowError>> {
        let mut results = self.send_raw(units.iter(), host);
        let refused: Vec<usize> = (0..units.len())
            .filter(|&i| {
                let unit = &units[i];
                let format = self.queries[unit.query].query.response_format;
                format == crate::options::ResponseFormat::Auto
                    && unit.asked == Asked::JsonSchema
                    && format::refuses_schema(&results[i])
            })
            .collect();
        if let Some(&first) = refused.first() {
            if !self.schema_refused.replace(true) {
                let (said, attempts) = match &results[first] {
                    Err(e @ CallError::Status(r)) => (e.to_string(), r.attempts),
                    Err(e) => (e.to_string(), 1),
                    Ok(_) => (String::new(), 1),
                };
                // The host answers later requests with the refusal it keeps,
                // unsent: only the instance whose request was refused warns.
                let level = if attempts == 0 {
                    Level::Debug
                } else {
                    Level::Warn
                };
                host.log(
                    level,
                    &format!(
                        "endpoint `{}` refused response_format json_schema ({said}); asking \
                         for json_object with the fields in the prompt from now on",
                        self.endpoint
                    ),
                );
            }
            let again: Vec<Unit> = refused
                .iter()
                .map(|&i| self.unit(units[i].query, &units[i].prompts))
                .collect();
            for (i, result) in refused.into_iter().zip(self.send_raw(again.iter(), host)) {
                results[i] = result;
            }
        }
        results.into_iter().map(weir_sdk::chat::interpret).collect()
    }

    fn send_raw<'a>(
        &self,
        units: impl ExactSizeIterator<Item = &'a Unit>,
        host: &dyn Host,
    ) -> Vec<Result<Response, CallError>> {
        let count = units.len();
        let requests = units
            .map(|u| Request {
                endpoint: self.endpoint.clone(),
                body: u.body.clone(),
                row: u.rows[0],
            })
            .collect();
        let mut results = host.send(requests);
        // The contract promises one result per request; a short list fails
        // the rest rather than shifting answers onto other rows.
        results.resize_with(count, || {
            Err(CallError::Transport(
                "the executor returned no result".into(),
            ))
        });
        results
    }

    /// A plain-text answer's row: trimmed unless `trim: false`; an answer
    /// cut at `max_tokens` is kept and marked as such in the audit trail and
    /// in `truncated_field`.
    fn plain_row(&self, unit: &Unit, answer: Answer, host: &dyn Host) -> Row {
        let columns = self.options.plain_columns();
        let field = &columns.answer;
        let text = match self.options.trim {
            true => answer.content.trim().to_string(),
            false => answer.content,
        };
        if answer.truncated {
            unit.rows
                .iter()
                .for_each(|row| host.attach(*row, &format!("{field}_truncated"), "true"));
        }
        let mut row = Row::new();
        row.insert(field.clone(), Value::String(text));
        if let Some(column) = columns.usage {
            row.insert(column, answer.usage);
        }
        if let Some(column) = columns.model {
            row.insert(column, answer.model);
        }
        if let Some(column) = columns.truncated {
            row.insert(column, Value::Bool(answer.truncated));
        }
        row
    }

    /// One result per row of the unit.
    fn file_answer(
        &self,
        unit: &Unit,
        answer: Result<Answer, RowError>,
        host: &dyn Host,
    ) -> Vec<QueryResult> {
        let compiled = &self.queries[unit.query];
        let answer = match answer {
            Ok(a) => a,
            Err(f) => return vec![Err(f); unit.rows.len()],
        };
        let plain = compiled.query.outputs.is_none();
        if answer.truncated && (!plain || self.options.on_truncated == OnTruncated::Fail) {
            return vec![Err(weir_sdk::chat::truncated(&answer.content)); unit.rows.len()];
        }
        let Some(outputs) = &compiled.query.outputs else {
            return vec![Ok(self.plain_row(unit, answer, host))];
        };
        let keep_raw =
            |row: u32| host.attach(row, &self.key("raw_answer", compiled), &answer.content);
        let value = match weir_sdk::json::extract_json(&answer.content) {
            Ok(v) => v,
            Err(e) => {
                unit.rows.iter().for_each(|r| keep_raw(*r));
                return vec![Err(RowError::new("response_unparsable", e)); unit.rows.len()];
            }
        };
        if unit.rows.len() == 1 {
            return vec![parse::map_outputs(&value, outputs).map_err(|e| {
                keep_raw(unit.rows[0]);
                RowError::new("response_invalid", e)
            })];
        }
        match bundle::split(&value, &unit.rows, outputs) {
            Ok((per_row, unknown)) => {
                if !unknown.is_empty() {
                    host.log(
                        Level::Warn,
                        &format!(
                            "a bundled answer had entries for unknown ids: {}",
                            unknown.join(", ")
                        ),
                    );
                }
                unit.rows
                    .iter()
                    .zip(per_row)
                    .map(|(row, result)| {
                        result.map_err(|miss| {
                            keep_raw(*row);
                            match miss {
                                bundle::Miss::Missing => RowError::new(
                                    "bundle_answer_missing",
                                    format!(
                                        "the bundled answer has no entry with id {}",
                                        bundle::row_id(*row)
                                    ),
                                ),
                                bundle::Miss::Duplicated(n) => RowError::new(
                                    "bundle_answer_ambiguous",
                                    format!(
                                        "the bundled answer has {n} entries with id {}",
                                        bundle::row_id(*row)
                                    ),
                                ),
                                bundle::Miss::Invalid(e) => RowError::new("response_invalid", e),
                            }
                        })
                    })
                    .collect()
            }
            Err(e) => {
                unit.rows.iter().for_each(|r| keep_raw(*r));
                vec![Err(RowError::new("response_invalid", e)); unit.rows.len()]
            }
        }
    }

    /// All of a row's answers onto the row, or one error naming every query
    /// that failed and how many answers are thrown away with them.
    fn conclude(&self, mut row: Row, answers: Vec<Option<QueryResult>>) -> Outcome {
        let mut failures = Vec::new();
        let mut fields = Vec::new();
        for (compiled, answer) in self.queries.iter().zip(answers) {
            match answer {
                Some(Ok(f)) => fields.push(f),
                Some(Err(f)) => failures.push((compiled.query.name.as_str(), f)),
                None => failures.push((
                    compiled.query.name.as_str(),
                    RowError::new("internal_error", "no answer was filed"),
                )),
            }
        }
        match failures.as_slice() {
            [] => {
                for f in fields {
                    row.extend(f);
                }
                Outcome::Rows(vec![Value::Object(row).to_string()])
            }
            [(_, only)] if self.queries.len() == 1 => only.clone().into(),
            several => {
                let list: Vec<String> = several
                    .iter()
                    .map(|(name, f)| format!("{name}: {} ({})", f.message, f.code))
                    .collect();
                Outcome::failed(
                    &several[0].1.code,
                    format!(
                        "{} of {} queries failed, {} answers discarded: {}",
                        several.len(),
                        self.queries.len(),
                        fields.len(),
                        list.join("; ")
                    ),
                )
            }
        }
    }

    /// `batch_template`: one prompt for the whole batch, one row out (on the
    /// first input row's outcome; the others are consumed into it).
    fn summarize(&self, rows: &[String], host: &dyn Host) -> Vec<Outcome> {
        let mut parsed = Vec::with_capacity(rows.len());
        for (i, text) in rows.iter().enumerate() {
            match self.parse_row(i as u32, text, host) {
                Ok(row) => parsed.push(row),
                Err(outcome) => return vec![outcome; rows.len()],
            }
        }
        let compiled = &self.queries[0];
        let fail = |f: RowError| vec![Outcome::from(f); rows.len()];
        let prompt = match compiled.prompts.render_batch(&parsed) {
            Ok(p) => p,
            Err(e) => return fail(RowError::new("template_rendering_failed", e)),
        };
        let units = [self.unit(0, &[(0, prompt)])];
        let answer = self.send(&units, host).remove(0);
        match self.file_answer(&units[0], answer, host).remove(0) {
            Ok(summary) => {
                let mut outcomes = vec![Outcome::Rows(Vec::new()); rows.len()];
                outcomes[0] = Outcome::Rows(vec![Value::Object(summary).to_string()]);
                outcomes
            }
            Err(f) => fail(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::RefCell;
    use weir_sdk::host::{CallError, Response};

    fn configured(options: &str) -> Result<LlmNode, String> {
        LlmNode::configure(options, &["llm".to_string()])
    }

    /// A scripted host: answers each request with the next scripted result and
    /// records everything the node asked of it.
    #[derive(Default)]
    struct ScriptedHost {
        replies: RefCell<Vec<Result<Response, CallError>>>,
        sent: RefCell<Vec<Request>>,
        attached: RefCell<Vec<(u32, String, String)>>,
    }

    impl ScriptedHost {
        fn replying(replies: Vec<Result<Response, CallError>>) -> Self {
            Self {
                replies: RefCell::new(replies),
                ..Default::default()
            }
        }
    }

    impl Host for ScriptedHost {
        fn send(&self, requests: Vec<Request>) -> Vec<Result<Response, CallError>> {
            let mut replies = self.replies.borrow_mut();
            let results = requests.iter().map(|_| replies.remove(0)).collect();
            self.sent.borrow_mut().extend(requests);
            results
        }
        fn attach(&self, row: u32, key: &str, value: &str) {
            self.attached
                .borrow_mut()
                .push((row, key.to_string(), value.to_string()));
        }
        fn log(&self, _level: Level, _message: &str) {}
        fn node_name(&self) -> String {
            "ask".into()
        }
        fn endpoints(&self) -> Vec<String> {
            vec!["llm".into()]
        }
    }

    fn answer(text: &str) -> Result<Response, CallError> {
        Ok(Response {
            status: 200,
            body: serde_json::json!({
                "model": "m",
                "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                "usage": {"total_tokens": 9}
            })
            .to_string(),
            attempts: 1,
            latency_ms: 1,
        })
    }

    fn node() -> LlmNode {
        configured(r#"{"template": "Classify: {{ row.text }}", "model": "m"}"#).unwrap()
    }

    #[test]
    fn each_row_gets_its_own_answer_in_order() {
        let host = ScriptedHost::replying(vec![answer("positive"), answer("negative")]);
        let rows = vec![
            r#"{"id":"1","text":"love it"}"#.to_string(),
            r#"{"id":"2","text":"hate it"}"#.to_string(),
        ];
        let out = node().process(&rows, &host);
        let texts: Vec<Value> = out
            .iter()
            .map(|o| match o {
                Outcome::Rows(r) => serde_json::from_str(&r[0]).unwrap(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(texts[0]["id"], "1");
        assert_eq!(texts[0]["llm_response"], "positive");
        assert_eq!(texts[1]["id"], "2");
        assert_eq!(texts[1]["llm_response"], "negative");
        assert!(
            texts[1].get("llm_response_usage").is_none(),
            "usage is opt-in"
        );
        let sent = host.sent.borrow();
        assert_eq!(sent.len(), 2);
        assert!(sent[1].body.contains("Classify: hate it"));
        assert_eq!(sent[1].row, 1);
        assert_eq!(sent[0].endpoint, "llm");
    }

    #[test]
    fn usage_and_model_columns_are_written_when_asked() {
        let node = configured(
            r#"{"template": "{{ row.text }}", "usage_column": true, "model_column": true}"#,
        )
        .unwrap();
        let host = ScriptedHost::replying(vec![answer("fine")]);
        let out = node.process(&[r#"{"text":"a"}"#.to_string()], &host);
        let row = first_row(&out[0]);
        assert_eq!(row["llm_response_usage"]["total_tokens"], 9);
        assert_eq!(row["llm_response_model"], "m");
    }

    fn cut(text: &str) -> Result<Response, CallError> {
        let mut response = answer(text).unwrap();
        response.body = response.body.replace("\"stop\"", "\"length\"");
        Ok(response)
    }

    fn first_row(outcome: &Outcome) -> Value {
        match outcome {
            Outcome::Rows(r) => serde_json::from_str(&r[0]).unwrap(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_cut_plain_answer_is_kept_trimmed_and_marked_and_a_cut_json_one_fails() {
        let host = ScriptedHost::replying(vec![cut("  The review is positive and \n")]);
        let options = r#"{"template": "{{ row.text }}", "truncated_field": "cut"}"#;
        let out = configured(options)
            .unwrap()
            .process(&[r#"{"text":"a"}"#.to_string()], &host);
        let row = first_row(&out[0]);
        assert_eq!(row["llm_response"], "The review is positive and");
        assert_eq!(row["cut"], true);
        let marked = (0, "llm_response_truncated".to_string(), "true".to_string());
        assert!(host.attached.borrow().contains(&marked));

        let host = ScriptedHost::replying(vec![cut("kept raw ")]);
        let options = r#"{"template": "{{ row.text }}", "trim": false, "on_truncated": "fail"}"#;
        let out = configured(options)
            .unwrap()
            .process(&[r#"{"text":"a"}"#.to_string()], &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "response_truncated"));

        let host = ScriptedHost::replying(vec![cut("{\"tone\": \"cal")]);
        let options = r#"{"template": "{{ row.text }}", "outputs": {"tone": "string"}}"#;
        let out = configured(options)
            .unwrap()
            .process(&[r#"{"text":"a"}"#.to_string()], &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "response_truncated"));
    }

    #[test]
    fn a_cut_json_answer_is_asked_once_more_with_the_larger_limit_when_allowed() {
        let options = r#"{"template": "{{ row.text }}", "outputs": {"tone": "string"},
                          "max_tokens": 8, "truncated_max_tokens": 64}"#;
        let host = ScriptedHost::replying(vec![
            cut("{\"tone\": \"cal"),
            answer("{\"tone\": \"calm\"}"),
        ]);
        let out = configured(options)
            .unwrap()
            .process(&[r#"{"text":"a"}"#.to_string()], &host);
        assert_eq!(first_row(&out[0])["tone"], "calm");
        let sent = host.sent.borrow();
        let limits: Vec<Value> = sent
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap()["max_tokens"].clone())
            .collect();
        assert_eq!(limits, vec![Value::from(8), Value::from(64)]);

        // Once only: cut again, the row fails.
        let host = ScriptedHost::replying(vec![cut("{\"tone\": \"c"), cut("{\"tone\": \"ca")]);
        let out = configured(options)
            .unwrap()
            .process(&[r#"{"text":"a"}"#.to_string()], &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "response_truncated"));
        assert_eq!(host.sent.borrow().len(), 2);

        let Err(refused) =
            configured(r#"{"template": "x", "max_tokens": 64, "truncated_max_tokens": 32}"#)
        else {
            panic!("a second limit below the first was accepted");
        };
        assert!(
            refused.contains("options.truncated_max_tokens"),
            "{refused}"
        );
    }

    #[test]
    fn a_template_error_fails_only_its_row_and_sends_nothing_for_it() {
        let host = ScriptedHost::replying(vec![answer("ok")]);
        let rows = vec![
            r#"{"id":"1"}"#.to_string(),
            r#"{"id":"2","text":"fine"}"#.to_string(),
        ];
        let out = node().process(&rows, &host);
        match &out[0] {
            Outcome::Failed { code, message } => {
                assert_eq!(code, "template_rendering_failed");
                assert!(message.contains("row.text"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(out[1], Outcome::Rows(_)));
        assert_eq!(host.sent.borrow().len(), 1);
        assert_eq!(host.sent.borrow()[0].row, 1);
    }

    #[test]
    fn call_failures_become_row_errors() {
        let host = ScriptedHost::replying(vec![
            Err(CallError::DeadlineExceeded("still 429".into())),
            answer("fine"),
        ]);
        let rows = vec![r#"{"text":"a"}"#.to_string(), r#"{"text":"b"}"#.to_string()];
        let out = node().process(&rows, &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "retry_timeout"));
        assert!(matches!(out[1], Outcome::Rows(_)));
    }

    #[test]
    fn hashes_are_attached_per_row() {
        let host = ScriptedHost::replying(vec![answer("x")]);
        node().process(&[r#"{"text":"a"}"#.to_string()], &host);
        let attached = host.attached.borrow();
        let keys: Vec<&str> = attached.iter().map(|(_, k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["template_hash", "variables_hash"]);
        assert_eq!(
            attached[0].2,
            hashing::template_hash("Classify: {{ row.text }}")
        );
    }

    #[test]
    fn a_row_that_is_not_an_object_fails_alone() {
        let host = ScriptedHost::replying(vec![answer("x")]);
        let out = node().process(&["[1,2]".to_string(), r#"{"text":"a"}"#.to_string()], &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "invalid_row"));
        assert!(matches!(out[1], Outcome::Rows(_)));
    }
    fn rows(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!(r#"{{"id":"{i}","text":"t{i}"}}"#))
            .collect()
    }

    fn out_row(outcome: &Outcome) -> Value {
        match outcome {
            Outcome::Rows(r) => serde_json::from_str(&r[0]).unwrap(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn every_query_of_every_row_goes_in_one_call_and_a_row_takes_all_or_nothing() {
        let node = configured(
            r#"{"queries": {
                "tone": {"template": "tone of {{ row.text }}", "outputs": {"tone": {"enum": ["calm", "angry"]}}},
                "score": {"template": "score {{ t }}", "inputs": {"t": "text"}, "outputs": {"score": "integer"}}
            }}"#,
        )
        .unwrap();
        assert_eq!(node.output_fields(), vec!["tone", "score"]);
        let host = ScriptedHost::replying(vec![
            answer(r#"{"tone": "Calm"}"#),
            answer("```json\n{\"tone\": \"angry\"}\n```"),
            answer(r#"Sure: {"score": 3}"#),
            answer(r#"{"score": "high"}"#),
        ]);
        let out = node.process(&rows(2), &host);
        assert_eq!(
            host.sent.borrow().len(),
            4,
            "one send for both rows and both queries"
        );
        let first = out_row(&out[0]);
        assert_eq!(
            (first["tone"].clone(), first["score"].clone()),
            (json!("calm"), json!(3))
        );
        match &out[1] {
            Outcome::Failed { code, message } => {
                assert_eq!(code, "response_invalid");
                assert!(
                    message.contains("1 of 2 queries failed, 1 answers discarded"),
                    "{message}"
                );
                assert!(
                    message.contains("score: `score` should be an integer"),
                    "{message}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        let attached = host.attached.borrow();
        assert!(
            attached
                .iter()
                .any(|(row, k, v)| *row == 1 && k == "raw_answer.score" && v.contains("high")),
            "the raw answer of a failed parse is kept: {attached:?}"
        );
    }

    #[test]
    fn a_bundle_is_one_request_matched_by_id_and_misses_can_be_asked_again() {
        let node = configured(
            r#"{"template": "{{ row.text }}", "outputs": {"n": "integer"}, "bundle_size": 3,
                "bundle_retry_individually": true}"#,
        )
        .unwrap();
        let host = ScriptedHost::replying(vec![
            // Rows 0-2 in one bundle (shuffled, row 1 missing), row 3 alone.
            answer(
                r#"{"answers": [{"id": "r2", "n": 20}, {"id": "r0", "n": 0}, {"id": "r7", "n": 70}]}"#,
            ),
            answer(r#"{"n": 30}"#),
            // Row 1 asked again on its own.
            answer(r#"{"n": 10}"#),
        ]);
        let out = node.process(&rows(4), &host);
        let values: Vec<Value> = out.iter().map(|o| out_row(o)["n"].clone()).collect();
        assert_eq!(values, vec![json!(0), json!(10), json!(20), json!(30)]);
        let sent = host.sent.borrow();
        assert_eq!(sent.len(), 3);
        assert!(
            sent[0].body.contains(r#"\"id\":\"r1\""#),
            "{}",
            sent[0].body
        );
        assert!(sent[2].body.contains("t1") && !sent[2].body.contains("t0"));
        assert!(
            sent[2].body.contains("- n: integer"),
            "the single prompt names the fields: {}",
            sent[2].body
        );
    }

    #[test]
    fn a_failed_bundle_call_fails_its_rows_without_asking_them_one_by_one() {
        let node = configured(
            r#"{"template": "{{ row.text }}", "outputs": {"n": "integer"}, "bundle_size": 2,
                "bundle_retry_individually": true}"#,
        )
        .unwrap();
        let host = ScriptedHost::replying(vec![Err(CallError::Status(Response {
            status: 502,
            body: "bad gateway".into(),
            attempts: 4,
            latency_ms: 1,
        }))]);
        let out = node.process(&rows(2), &host);
        for outcome in &out {
            assert!(
                matches!(outcome, Outcome::Failed { code, message }
                    if code == "llm_call_failed" && message.contains("after 4 attempts")),
                "{outcome:?}"
            );
        }
        assert_eq!(
            host.sent.borrow().len(),
            1,
            "the executor retried the bundle"
        );
    }

    #[test]
    fn without_retry_a_bundle_miss_fails_only_that_row() {
        let node = configured(
            r#"{"template": "{{ row.text }}", "outputs": {"n": "integer"}, "bundle_size": 4}"#,
        )
        .unwrap();
        let host = ScriptedHost::replying(vec![answer(
            r#"[{"id": "r0", "n": 0}, {"id": "r1", "n": 1}, {"id": "r1", "n": 2}]"#,
        )]);
        let out = node.process(&rows(3), &host);
        assert_eq!(out_row(&out[0])["n"], 0);
        assert!(
            matches!(&out[1], Outcome::Failed { code, .. } if code == "bundle_answer_ambiguous")
        );
        assert!(matches!(&out[2], Outcome::Failed { code, .. } if code == "bundle_answer_missing"));
    }

    #[test]
    fn a_batch_template_turns_the_batch_into_one_row() {
        let node = configured(
            r#"{"batch_template": "{% for r in rows %}{{ r.text }};{% endfor %}",
                "outputs": {"summary": "string"}}"#,
        )
        .unwrap();
        let host = ScriptedHost::replying(vec![answer(r#"{"summary": "all fine"}"#)]);
        let out = node.process(&rows(3), &host);
        assert_eq!(out_row(&out[0]), json!({"summary": "all fine"}));
        assert_eq!(out[1], Outcome::Rows(vec![]));
        assert!(host.sent.borrow()[0].body.contains("t0;t1;t2;"));
        let failing = ScriptedHost::replying(vec![answer("no json")]);
        let out = node.process(&rows(2), &failing);
        assert!(
            out.iter().all(
                |o| matches!(o, Outcome::Failed { code, .. } if code == "response_unparsable")
            )
        );
    }

    #[test]
    fn auto_falls_back_to_json_object_once_the_schema_is_refused_and_stays_there() {
        let node =
            configured(r#"{"template": "{{ row.text }}", "outputs": {"n": "integer"}}"#).unwrap();
        let refused = Err(CallError::Status(Response {
            status: 500,
            body: r#"{"error":{"message":"cannot convert the schema"}}"#.into(),
            attempts: 1,
            latency_ms: 1,
        }));
        let host =
            ScriptedHost::replying(vec![refused, answer(r#"{"n": 1}"#), answer(r#"{"n": 2}"#)]);
        let first = node.process(&rows(1), &host);
        let second = node.process(&rows(1), &host);
        assert_eq!(out_row(&first[0])["n"], 1);
        assert_eq!(out_row(&second[0])["n"], 2);
        let sent: Vec<Value> = host
            .sent
            .borrow()
            .iter()
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect();
        assert_eq!(
            sent.len(),
            3,
            "one refusal, then json_object for every request"
        );
        assert_eq!(sent[0]["response_format"]["type"], "json_schema");
        let prompt = sent[0]["messages"][0]["content"].as_str().unwrap();
        assert!(!prompt.contains("JSON Schema"), "{prompt}");
        for body in &sent[1..] {
            assert_eq!(body["response_format"]["type"], "json_object");
            let prompt = body["messages"][0]["content"].as_str().unwrap();
            assert!(prompt.contains("- n: integer"), "{prompt}");
        }
    }

    #[test]
    fn a_wrong_answer_is_asked_again_with_what_was_wrong_up_to_reask_times() {
        let node = configured(
            r#"{"template": "{{ row.text }}", "outputs": {"n": "integer"}, "reask": 2}"#,
        )
        .unwrap();
        let host = ScriptedHost::replying(vec![
            answer("no idea"),
            answer(r#"{"n": "three"}"#),
            answer(r#"{"n": 3}"#),
        ]);
        let out = node.process(&rows(1), &host);
        assert_eq!(out_row(&out[0])["n"], 3);
        let sent: Vec<Value> = host
            .sent
            .borrow()
            .iter()
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect();
        assert_eq!(sent.len(), 3);
        let roles = |body: &Value| -> Vec<String> {
            body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            roles(&sent[2]),
            ["user", "assistant", "user", "assistant", "user"]
        );
        assert_eq!(sent[2]["messages"][3]["content"], r#"{"n": "three"}"#);
        let told = sent[2]["messages"][4]["content"].as_str().unwrap();
        assert!(told.contains("`n` should be an integer"), "{told}");
        assert!(told.contains("n (integer)"), "{told}");
        let counted = (0, "count.reasks".to_string(), "2".to_string());
        assert!(host.attached.borrow().contains(&counted));

        let host = ScriptedHost::replying(vec![answer("no"), answer("still no"), answer("nope")]);
        let out = node.process(&rows(1), &host);
        assert!(matches!(&out[0], Outcome::Failed { code, .. } if code == "response_unparsable"));
        assert_eq!(host.sent.borrow().len(), 3, "asked once and re-asked twice");
    }

    #[test]
    fn colliding_outputs_are_refused_at_configure() {
        let err = configured(
            r#"{"queries": {"a": {"template": "x", "outputs": {"label": "string"}},
                            "b": {"template": "y", "outputs": {"label": "string"}}}}"#,
        )
        .err()
        .unwrap();
        assert!(err.contains("`label` comes from both `a` and `b`"), "{err}");
    }
}
