//! How `weir runs` and `weir explain` print what the audit database holds.

use crate::engine::StoredSummary;
use crate::services::audit::{CallStory, RowStory, RunInfo, RunStatus, StateStory, utc};
use crate::terminal::escape;
use std::fmt::Write;

/// Bodies longer than this are cut in `weir explain` unless `--full`.
const BODY_PREVIEW: usize = 400;

/// The limit's decisions `weir runs RUN` lists unless `--full`: the last
/// ones, which tell where the limit ended and why.
const DECISIONS_SHOWN: usize = 20;

pub fn runs(runs: &[RunInfo]) -> String {
    if runs.is_empty() {
        return "no runs yet\n".to_string();
    }
    let statuses: Vec<String> = runs.iter().map(status).collect();
    let width = statuses
        .iter()
        .map(|s| s.chars().count())
        .fold(23, usize::max);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4}  {:<width$}  {:<19}  {:>8}  {:>6}  {:>7}  {:>10}  outcomes  pipeline",
        "run", "status", "started (UTC)", "duration", "rows", "calls", "cost"
    );
    for (run, status) in runs.iter().zip(statuses) {
        let outcomes: Vec<String> = run
            .outcomes
            .iter()
            .map(|(o, n)| format!("{n} {}", o.replace('_', " ")))
            .collect();
        let duration = run
            .finished_at_ms
            .map_or("-".to_string(), |f| seconds(f - run.started_at_ms));
        let _ = writeln!(
            s,
            "{:>4}  {status:<width$}  {:<19}  {duration:>8}  {:>6}  {:>7}  {:>10}  {}  {}",
            run.run_id,
            utc(run.started_at_ms),
            run.rows,
            run.calls,
            run.cost_usd
                .map_or("-".to_string(), |usd| format!("${usd:.4}")),
            if outcomes.is_empty() {
                "-".to_string()
            } else {
                outcomes.join(", ")
            },
            run.pipeline_path
        );
    }
    s
}

/// A run's status as `weir runs` lists it: with its segments, its shard and
/// the batches it waits on.
fn status(run: &RunInfo) -> String {
    let mut status = match run.segments {
        0 | 1 => run.state().to_string(),
        n => format!("{} ({n} segments)", run.state()),
    };
    if let Some(shard) = &run.shard {
        status.push_str(&format!(", {shard}"));
    }
    if !run.open_batches.is_empty() {
        let ids: Vec<&str> = run.open_batches.iter().map(|(_, id)| id.as_str()).collect();
        status.push_str(&format!(", waiting on batch {}", ids.join(", ")));
    }
    status
}

/// One run told again from what it kept: the run's line, then the summary
/// its last segment printed, with the limit's decisions listed.
pub fn run(run: &RunInfo, summary: &StoredSummary, full: bool) -> String {
    let mut s = String::new();
    run_line(&mut s, run);
    let took = run.finished_at_ms.map_or(String::new(), |f| {
        format!(", took {}", seconds(f - run.started_at_ms))
    });
    let _ = writeln!(s, "  started  {} UTC{took}", utc(run.started_at_ms));
    let outcomes: Vec<String> = run
        .outcomes
        .iter()
        .map(|(o, n)| format!("{n} {}", o.replace('_', " ")))
        .collect();
    // A stopped run read rows it never finished; they keep no outcome.
    let ended: u64 = run.outcomes.values().sum();
    let unfinished = match run.rows.saturating_sub(ended) {
        0 => String::new(),
        n => format!("; {n} read but not finished"),
    };
    let _ = writeln!(
        s,
        "  rows     {}: {}{unfinished}",
        run.rows,
        if outcomes.is_empty() {
            "none ended yet".to_string()
        } else {
            outcomes.join(", ")
        }
    );
    let cost = run
        .cost_usd
        .map_or(String::new(), |usd| format!("; cost ${usd:.4}"));
    let _ = writeln!(s, "  calls    {} recorded{cost}", run.calls);
    // An error may quote a component or a file: each of its lines escaped,
    // it cannot forge one of weir's or move the terminal's cursor.
    if let Some(error) = &summary.error {
        for (i, line) in error.lines().enumerate() {
            let head = if i == 0 { "  error    " } else { "           " };
            let _ = writeln!(s, "{head}{}", escape(line));
        }
    }
    if let Some(reason) = &summary.stopped {
        let _ = writeln!(s, "  stopped  {reason}");
    }
    if let Some(shards) = summary.merged_shards {
        let _ = writeln!(
            s,
            "  merged   from {shards} shards: each shard's endpoint figures stay in its own audit \
             database (`weir runs RUN --audit` on it)"
        );
    }
    if summary.endpoints.is_empty() {
        if summary.error.is_none() && summary.merged_shards.is_none() {
            let why = match run.state() {
                state if state == RunStatus::Running.as_str() => {
                    "the run is still going; its figures are kept when it ends"
                }
                _ => "the run ended without keeping them (its process was killed)",
            };
            let _ = writeln!(s, "  figures  none: {why}");
        }
        return s;
    }
    if run.segments > 1 {
        let _ = writeln!(
            s,
            "  figures  of segment {}, the last; each segment keeps only its own",
            run.segments
        );
    }
    for endpoint in &summary.endpoints {
        s.push_str(&endpoint.lines(summary.stopped.is_some()));
        let decisions = &endpoint.stats.concurrency_limit_decisions;
        if decisions.is_empty() {
            continue;
        }
        let shown = if full {
            decisions.len()
        } else {
            decisions.len().min(DECISIONS_SHOWN)
        };
        let which = if shown == decisions.len() {
            format!("all {}", decisions.len())
        } else {
            format!("the last {shown} of {} (--full lists all)", decisions.len())
        };
        let _ = writeln!(s, "           limit decisions, {which}:");
        for d in &decisions[decisions.len() - shown..] {
            let _ = writeln!(
                s,
                "           {:>8.1} s  {:>4} → {:<4} {}",
                d.at, d.from, d.to, d.why
            );
        }
    }
    s
}

/// The line that names a run: its id, state, segments and pipeline.
fn run_line(s: &mut String, run: &RunInfo) {
    let _ = writeln!(
        s,
        "run {} · {} · {} segment{} · {}",
        run.run_id,
        run.state(),
        run.segments,
        if run.segments == 1 { "" } else { "s" },
        run.pipeline_path
    );
}

pub fn row(story: &RowStory, full: bool) -> String {
    let mut s = String::new();
    run_line(&mut s, &story.run);
    let _ = writeln!(
        s,
        "row {} · source line {} · sha256 {}",
        story.row_index,
        story.source_line,
        short(&story.content_sha256)
    );
    let _ = writeln!(s, "  input     {}", body(story.content.as_deref(), full));
    for state in &story.states {
        s.push('\n');
        state_story(&mut s, state, full);
    }
    s.push('\n');
    match &story.outcome {
        None => {
            let _ = writeln!(
                s,
                "ended     not yet: the row has no terminal outcome (the run was stopped before it)"
            );
        }
        Some(o) => {
            let mut line = format!(
                "ended     {} in segment {}",
                o.outcome.replace('_', " "),
                o.segment
            );
            if let Some(node) = &o.node_name {
                let _ = write!(line, " at transform `{node}`");
            }
            if let (Some(code), Some(message)) = (&o.error_code, &o.error_message) {
                let _ = write!(line, ": {code}: {message}");
            }
            let _ = writeln!(s, "{line}");
            if let Some(sink) = &o.error_sink {
                let _ = writeln!(s, "          written with its error to {sink}");
            } else if o.outcome == "completed" || o.rows_written > 0 {
                let _ = writeln!(
                    s,
                    "          {} row{} written to {}",
                    o.rows_written,
                    if o.rows_written == 1 { "" } else { "s" },
                    o.sinks.join(", ")
                );
            }
            if let Some(batch) = o.batch_id {
                let _ = writeln!(s, "          consumed by batch {batch}");
            }
        }
    }
    s
}

fn state_story(s: &mut String, state: &StateStory, full: bool) {
    let head = format!("transform `{}` (node {})", state.node_name, state.node_id);
    match &state.finished {
        Some(f) => {
            let _ = writeln!(
                s,
                "{head} · segment {} · {} in {} ms",
                state.segment.unwrap_or_default(),
                f.status,
                f.duration_ms
            );
        }
        None => {
            let _ = writeln!(
                s,
                "{head} · interrupted: its process was killed before the node finished the row"
            );
        }
    }
    if let Some(f) = &state.finished {
        let _ = writeln!(s, "  received  sha256 {}", short(&f.input_sha256));
    }
    if let Some(batch) = &state.batch {
        let members: Vec<String> = batch.members.iter().take(12).map(u64::to_string).collect();
        let more = if batch.members.len() > 12 {
            ", …"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  batch     {} ({}, {} rows: {}{more})",
            batch.batch_id,
            batch.mode,
            batch.members.len(),
            members.join(", ")
        );
    }
    for call in &state.calls {
        call_story(s, call, full);
    }
    for (key, value) in &state.attributes {
        let _ = writeln!(s, "  attached  {key}: {value}");
    }
    if let Some(f) = &state.finished {
        if let Some(sha) = &f.output_sha256 {
            let _ = writeln!(s, "  output    {}", body(f.output.as_deref(), full));
            if f.output.is_none() {
                let _ = writeln!(s, "            (sha256 {})", short(sha));
            }
        }
        if let (Some(code), Some(message)) = (&f.error_code, &f.error_message) {
            let _ = writeln!(s, "  error     {code}: {message}");
        }
    }
}

fn call_story(s: &mut String, call: &CallStory, full: bool) {
    let status = match (call.status, &call.error) {
        (_, Some(error)) => format!("error: {error}"),
        (Some(status), None) => format!("HTTP {status}"),
        (None, None) => "no answer".to_string(),
    };
    let mut line = format!(
        "  call {}    {} · request {} attempt {} · {status}",
        call.call_index, call.endpoint, call.request_index, call.attempt
    );
    if let Some(batch) = &call.provider_batch {
        let _ = write!(line, " · through provider batch {batch}");
        if call.replayed {
            line.push_str(", taken before");
        }
    } else if call.replayed {
        line.push_str(" · answered from the audit trail, not sent again");
    } else {
        let _ = write!(line, " · {} ms", call.latency_ms);
    }
    if let Some((prompt, completion)) = call.tokens {
        let _ = write!(line, " · tokens {prompt}+{completion}");
    }
    if let Some(cause) = &call.retry_cause {
        let _ = write!(line, " · retried ({cause})");
    }
    let _ = writeln!(s, "{line}");
    let _ = writeln!(s, "    request   {}", body(call.request.as_deref(), full));
    if call.response_sha256.is_some() {
        let _ = writeln!(s, "    response  {}", body(call.response.as_deref(), full));
    }
}

fn body(text: Option<&str>, full: bool) -> String {
    match text {
        None => "(not kept: payloads off or purged; its hash is recorded)".to_string(),
        Some(t) if full || t.len() <= BODY_PREVIEW => t.to_string(),
        Some(t) => {
            let mut cut = BODY_PREVIEW;
            while !t.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}… ({} bytes; --full shows all)", &t[..cut], t.len())
        }
    }
}

fn short(sha256: &str) -> &str {
    &sha256[..sha256.len().min(16)]
}

fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn finished_run(segments: u32) -> RunInfo {
        RunInfo {
            run_id: 3,
            status: "completed".into(),
            in_progress: false,
            pipeline_path: "p.yaml".into(),
            started_at_ms: 1_795_255_445_000,
            finished_at_ms: Some(1_795_255_457_300),
            segments,
            rows: 10,
            outcomes: BTreeMap::from([("completed".to_string(), 10)]),
            calls: 10,
            cost_usd: None,
            shard: None,
            shards_at_once: None,
            open_batches: vec![],
        }
    }

    #[test]
    fn a_summary_kept_before_the_limit_kept_its_decisions_is_told() {
        let json = r#"{"endpoints":[{"name":"llm","pool_size":16,"requests":10,"successes":10,
            "concurrency_limit":9,"peak_concurrency_limit":12,"breaker":"closed",
            "latency_p50_ms":51}],"stopped":null}"#;
        let told = run(
            &finished_run(2),
            &StoredSummary::parse(json).unwrap(),
            false,
        );
        assert!(told.contains("took 12.3 s"), "{told}");
        assert!(told.contains("  figures  of segment 2, the last"), "{told}");
        assert!(
            told.contains("  endpoint llm: 10 requests, 10 ok, 0 failed;"),
            "{told}"
        );
        assert!(
            told.contains("concurrency limit 9 (peak 12) of pool 16"),
            "{told}"
        );
        assert!(!told.contains("decision"), "{told}");
    }

    #[test]
    fn the_last_decisions_are_listed_unless_all_are_asked_for() {
        let decisions: Vec<String> = (0..25)
            .map(|i| {
                format!(
                    r#"{{"at":{i}.0,"from":{},"to":{i},"why":"refused {i}"}}"#,
                    i + 1
                )
            })
            .collect();
        let json = format!(
            r#"{{"endpoints":[{{"name":"llm","concurrency_limit_decisions":[{}]}}]}}"#,
            decisions.join(",")
        );
        let summary = StoredSummary::parse(&json).unwrap();
        let told = run(&finished_run(1), &summary, false);
        assert!(told.contains("limit decisions, the last 20 of 25 (--full lists all):"));
        assert!(
            !told.contains("refused 4\n") && told.contains("refused 5\n"),
            "{told}"
        );
        let full = run(&finished_run(1), &summary, true);
        assert!(full.contains("limit decisions, all 25:") && full.contains("refused 0\n"));
    }

    #[test]
    fn runs_without_endpoint_figures_say_why() {
        let failed =
            StoredSummary::parse(r#"{"error":"component not found\nin \u001b[2J"}"#).unwrap();
        let told = run(&finished_run(1), &failed, false);
        assert!(
            told.contains("  error    component not found\n           in \\u{1b}[2J\n"),
            "{told}"
        );
        assert!(!told.contains("figures"), "{told}");
        let mut going = finished_run(1);
        going.status = "running".into();
        going.finished_at_ms = None;
        going.rows = 14;
        let told = run(&going, &StoredSummary::parse("[]").unwrap(), false);
        assert!(told.contains("  figures  none: the run ended without keeping them"));
        assert!(
            told.contains("  rows     14: 10 completed; 4 read but not finished"),
            "{told}"
        );
        going.in_progress = true;
        let told = run(&going, &StoredSummary::parse("[]").unwrap(), false);
        assert!(
            told.contains("  figures  none: the run is still going"),
            "{told}"
        );
        let merged = StoredSummary::parse(r#"{"merged_shards":4}"#).unwrap();
        assert!(run(&finished_run(1), &merged, false).contains("  merged   from 4 shards"));
        assert!(StoredSummary::parse(r#"{"endpoints":3}"#).is_err());
    }

    #[test]
    fn long_bodies_are_cut_on_a_character_boundary() {
        let text = "é".repeat(300);
        let cut = body(Some(&text), false);
        assert!(cut.ends_with("(600 bytes; --full shows all)"), "{cut}");
        assert_eq!(body(Some(&text), true), text);
        assert!(body(None, false).contains("not kept"));
    }
}
