//! How `weir runs` and `weir explain` print what the audit database holds.

use crate::services::audit::{CallStory, RowStory, RunInfo, StateStory, utc};
use std::fmt::Write;

/// Bodies longer than this are cut in `weir explain` unless `--full`.
const BODY_PREVIEW: usize = 400;

pub fn runs(runs: &[RunInfo]) -> String {
    if runs.is_empty() {
        return "no runs yet\n".to_string();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4}  {:<23}  {:<19}  {:>8}  {:>6}  {:>7}  {:>10}  outcomes  pipeline",
        "run", "status", "started (UTC)", "duration", "rows", "calls", "cost"
    );
    for run in runs {
        let outcomes: Vec<String> = run
            .outcomes
            .iter()
            .map(|(o, n)| format!("{n} {}", o.replace('_', " ")))
            .collect();
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
        let duration = run
            .finished_at_ms
            .map_or("-".to_string(), |f| seconds(f - run.started_at_ms));
        let _ = writeln!(
            s,
            "{:>4}  {status:<23}  {:<19}  {duration:>8}  {:>6}  {:>7}  {:>10}  {}  {}",
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

pub fn row(story: &RowStory, full: bool) -> String {
    let mut s = String::new();
    let run = &story.run;
    let _ = writeln!(
        s,
        "run {} · {} · {} segment{} · {}",
        run.run_id,
        run.state(),
        run.segments,
        if run.segments == 1 { "" } else { "s" },
        run.pipeline_path
    );
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

/// `YYYY-MM-DD HH:MM:SS` from milliseconds since the epoch.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_bodies_are_cut_on_a_character_boundary() {
        let text = "é".repeat(300);
        let cut = body(Some(&text), false);
        assert!(cut.ends_with("(600 bytes; --full shows all)"), "{cut}");
        assert_eq!(body(Some(&text), true), text);
        assert!(body(None, false).contains("not kept"));
    }
}
