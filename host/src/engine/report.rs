//! What a run reports when it ends.

use crate::services::audit::{RowOutcome, Totals};
use crate::services::batch::BatchStats;
use crate::services::executor::StatsSnapshot;
use crate::services::stop::StopReason;
use crate::terminal::escape;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Timeouts fewer than this are a long answer now and then, not worth a
/// line of the summary.
const MANY_TIMEOUTS: u64 = 3;

#[derive(Default)]
pub struct RunReport {
    /// None when the run kept no audit trail.
    pub run_id: Option<i64>,
    /// Which process of the run this is: 1, then one more per resume.
    pub segment: u32,
    /// Rows earlier segments had already ended.
    pub rows_skipped: u64,
    /// Calls answered from what earlier segments recorded.
    pub calls_replayed: u64,
    /// The whole run's counts, from the audit database, once it is closed.
    pub totals: Option<Totals>,
    pub rows_total: u64,
    pub rows_completed: u64,
    pub rows_failed: u64,
    pub rows_quarantined: u64,
    pub rows_discarded: u64,
    /// Rows a `transform` batch consumed into its output.
    pub rows_consumed: u64,
    pub rows_written: u64,
    /// By error code: how many rows, and the first one's index and message.
    pub failures: BTreeMap<String, FailureGroup>,
    pub endpoints: Vec<EndpointReport>,
    /// By node: rows whose guest log lines or audit attachments were cut at
    /// their caps; nodes with none are left out.
    pub rows_truncated: Vec<(String, u64)>,
    /// Nodes whose reorder window held rows back behind a slow one for
    /// `WINDOW_HELD_TOLD` or longer.
    pub windows_held: Vec<WindowHeldReport>,
    pub wall: Duration,
    pub sinks: Vec<PathBuf>,
    pub audit_path: Option<PathBuf>,
    /// The URLs of sinks and the audit database that are objects, by their
    /// local stand-ins: uploaded once the summary is told.
    pub objects: BTreeMap<PathBuf, String>,
    /// Why the run stopped before its source was done, if it did.
    pub stopped: Option<StopReason>,
    /// How to carry the run on: `weir run PIPELINE --resume`.
    pub resume_command: String,
}

/// Held back this long in all, a node's reorder window is named in the
/// summary: shorter holds are a slow answer's ordinary wait.
pub const WINDOW_HELD_TOLD: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct WindowHeldReport {
    pub node: String,
    /// Its `reorder_window`, in rows.
    pub window: usize,
    /// How long, in all, a row was ready to start but the window was full.
    pub held: Duration,
}

#[derive(Debug, Default)]
pub struct FailureGroup {
    pub count: u64,
    pub first_row: u64,
    pub first_node: Option<String>,
    pub first_message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointReport {
    pub name: String,
    #[serde(default)]
    pub pool_size: usize,
    #[serde(default)]
    pub request_timeout_seconds: f64,
    /// The endpoint has a `price`, so its cost means something.
    #[serde(default)]
    pub priced: bool,
    #[serde(flatten)]
    pub stats: StatsSnapshot,
    /// `mode: batch`: what its provider batches did in this process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batches: Option<BatchStats>,
}

/// What a run keeps of its summary in `runs.summary_json`: the figures of
/// the segment that ended it, read back by `weir runs RUN`. A run that
/// failed to start keeps its error instead, a merge how many shards it
/// joined, and a run still going (or killed) nothing yet.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StoredSummary {
    #[serde(default)]
    pub endpoints: Vec<EndpointReport>,
    #[serde(default)]
    pub stopped: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_shards: Option<u32>,
}

impl StoredSummary {
    /// A run that has not ended keeps `[]`: nothing to read yet.
    pub fn parse(json: &str) -> serde_json::Result<Self> {
        match serde_json::from_str::<serde_json::Value>(json)? {
            serde_json::Value::Array(items) if items.is_empty() => Ok(Self::default()),
            value => serde_json::from_value(value),
        }
    }
}

impl EndpointReport {
    /// Timeouts beyond one attempt in twenty, while answers came: a timeout
    /// shorter than the endpoint's slower answers, each of which is sent
    /// again, and which a provider may bill although weir hung up. A run
    /// whose endpoint answered nothing says so in its stop reason instead.
    fn write_timeouts(&self, s: &mut String) {
        let (timeouts, attempts) = (self.stats.timeouts, self.stats.attempts);
        if timeouts < MANY_TIMEOUTS || timeouts * 20 < attempts || self.stats.successes == 0 {
            return;
        }
        let _ = writeln!(
            s,
            "           timeouts {timeouts} of {attempts} attempts ({:.0} %) had no answer within \
             request_timeout_seconds ({} s); a provider may bill answers it finished after weir \
             hung up: where answers this slow are expected, raise it",
            100.0 * timeouts as f64 / attempts as f64,
            self.request_timeout_seconds
        );
    }

    /// What the summary tells of the endpoint, a line each: its batches,
    /// its requests, its limit and why the limit stands where it does.
    pub fn lines(&self, stopped: bool) -> String {
        let mut s = String::new();
        if let Some(b) = &self.batches {
            let _ = write!(
                s,
                "  endpoint {}: batch mode: {} batches, {} requests submitted, {} answered, \
                 {} failed, {} sent again; waited {:.1} s",
                self.name,
                b.batches,
                b.requests,
                b.answered,
                b.failed,
                b.resubmitted,
                b.waited.as_secs_f64()
            );
            if self.priced {
                let _ = write!(s, "; {} saved over online prices", usd(b.saved_usd));
            }
            let _ = writeln!(s);
            if self.stats.requests == 0 {
                return s;
            }
        }
        let ms = |v: Option<u32>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        // A stop that cuts calls ends them neither answered nor failed.
        let cut = self
            .stats
            .requests
            .saturating_sub(self.stats.successes + self.stats.failures);
        let cut = if stopped && cut > 0 {
            format!(", {cut} cut by the stop")
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  endpoint {}: {} requests, {} ok, {} failed{cut}; retries {} capacity, \
             {} transient, {} hung; latency p50 {}, p99 {}",
            self.name,
            self.stats.requests,
            self.stats.successes,
            self.stats.failures,
            self.stats.capacity_retries,
            self.stats.transient_retries,
            self.stats.hung_retries,
            ms(self.stats.latency_p50_ms),
            ms(self.stats.latency_p99_ms)
        );
        // Rows held behind an open breaker count as throttled: say how
        // much of the run it was open, so an outage does not read as
        // rate limiting.
        let breaker = match self.stats.breaker_open_seconds {
            open if open >= 0.05 => {
                format!("open {open:.1} s in all, {} at the end", self.stats.breaker)
            }
            _ => self.stats.breaker.to_string(),
        };
        let _ = writeln!(
            s,
            "           concurrency limit {} (peak {}) of pool {}, peak {} in flight; \
             {} capacity errors; throttled {:.1} s; breaker {breaker}",
            self.stats.concurrency_limit,
            self.stats.peak_concurrency_limit,
            self.pool_size,
            self.stats.peak_in_flight,
            self.stats.capacity_errors,
            self.stats.throttled_seconds,
        );
        // Why the limit stands where it does: a user who set a pool of
        // 64 and sees 2 learns that the endpoint queued.
        if let Some(last) = self.stats.concurrency_limit_decisions.last() {
            let _ = writeln!(
                s,
                "           last limit decision at {:.1} s: {} → {}, {}",
                last.at, last.from, last.to, last.why
            );
        }
        match &self.stats.learned_start {
            Some(l) if l.learned < l.start && !l.held_by_queue => {
                let _ = writeln!(
                    s,
                    "           concurrency limit slow-started from {}, not from the {} run {} \
                     learned against the same endpoint: refusals, not a queue, held it there",
                    l.start, l.learned, l.run_id
                );
            }
            Some(l) => {
                let _ = writeln!(
                    s,
                    "           concurrency limit started at {}, from the {} run {} learned \
                     against the same endpoint",
                    l.start, l.learned, l.run_id
                );
            }
            None => {}
        }
        self.write_timeouts(&mut s);
        s
    }
}

impl RunReport {
    pub fn record_failure(&mut self, code: &str, row: u64, node: Option<String>, message: &str) {
        let group = self
            .failures
            .entry(code.to_string())
            .or_insert_with(|| FailureGroup {
                first_row: row,
                first_node: node,
                first_message: message.to_string(),
                ..FailureGroup::default()
            });
        group.count += 1;
    }

    /// Cost (with prices) and the response cache's hits, when there are any.
    fn write_money(&self, s: &mut String) {
        let money: Vec<_> = self
            .endpoints
            .iter()
            .map(|e| (&e.name, &e.stats.money))
            .collect();
        let cost: f64 = money.iter().map(|(_, m)| m.cost_usd).sum();
        let priced = self.endpoints.iter().any(|e| e.priced);
        if priced {
            let by_endpoint: Vec<String> = money
                .iter()
                .map(|(name, m)| format!("{name} {}", usd(m.cost_usd)))
                .collect();
            let _ = write!(
                s,
                "  cost     {} (endpoint {}",
                usd(cost),
                by_endpoint.join(", ")
            );
            if let Some(totals) = &self.totals {
                let by_node: Vec<String> = totals
                    .cost_by_node
                    .iter()
                    .map(|(node, cost)| format!("{node} {}", usd(*cost)))
                    .collect();
                let _ = write!(s, "; node {}", by_node.join(", "));
                if self.segment > 1 {
                    let _ = write!(s, "; {} in all segments", usd(totals.cost_usd));
                }
            }
            let estimated: u64 = money.iter().map(|(_, m)| m.cost_estimated_calls).sum();
            if estimated > 0 {
                let _ = write!(
                    s,
                    "; {estimated} calls estimated: their answers had no usage"
                );
            }
            let _ = writeln!(s, ")");
        }
        let hits: u64 = money.iter().map(|(_, m)| m.cache_hits).sum();
        if hits > 0 {
            let saved: f64 = money.iter().map(|(_, m)| m.cache_saved_usd).sum();
            let sampled: u64 = money.iter().map(|(_, m)| m.cache_sampled_hits).sum();
            let _ = write!(s, "  cache    {hits} answers from the cache, not sent");
            if priced {
                let _ = write!(s, "; {} saved", usd(saved));
            }
            if sampled > 0 {
                let _ = write!(
                    s,
                    "; {sampled} of them for requests with temperature above 0, which a fresh call \
                     could have answered differently"
                );
            }
            let _ = writeln!(s);
        }
    }

    /// Rows of the whole run that did not succeed (failed, quarantined or
    /// discarded), earlier segments included.
    pub fn rejected_in_run(&self) -> u64 {
        let this_segment = self.rows_failed + self.rows_quarantined + self.rows_discarded;
        self.totals.as_ref().map_or(this_segment, |t| {
            RowOutcome::SET_ASIDE
                .iter()
                .filter_map(|o| t.outcomes.get(o.as_str()))
                .sum()
        })
    }

    /// What the components counted, by node (`llm`'s re-asks, say).
    fn write_counted(&self, s: &mut String) {
        let Some(totals) = &self.totals else { return };
        let mut by_node: Vec<(&str, Vec<String>)> = Vec::new();
        for (node, name, total) in &totals.counted {
            let entry = format!("{} {total}", escape(name));
            match by_node.last_mut() {
                Some((last, entries)) if last == node => entries.push(entry),
                _ => by_node.push((node.as_str(), vec![entry])),
            }
        }
        for (node, entries) in by_node {
            let _ = writeln!(s, "  counted  node {node}: {}", entries.join(", "));
        }
    }

    pub fn calls(&self) -> u64 {
        self.endpoints.iter().map(|e| e.stats.attempts).sum()
    }

    pub fn retries(&self) -> u64 {
        self.endpoints
            .iter()
            .map(|e| e.stats.capacity_retries + e.stats.transient_retries)
            .sum()
    }

    /// The summary printed at the end of `weir run`.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let secs = self.wall.as_secs_f64();
        let rate = if secs > 0.0 {
            self.rows_total as f64 / secs
        } else {
            0.0
        };
        let name = self
            .run_id
            .map_or("run (not audited)".to_string(), |id| format!("run {id}"));
        let ended = if self.stopped.is_some() {
            "stopped after"
        } else {
            "finished in"
        };
        let _ = writeln!(s, "{name} {ended} {:.1} s ({rate:.1} rows/s)", secs);
        if let Some(reason) = &self.stopped {
            let _ = writeln!(s, "  stopped  {reason}");
        }
        if self.segment > 1 {
            let _ = writeln!(
                s,
                "  resumed  segment {}: {} rows were already done; {} answers replayed from the \
                 audit trail instead of sent",
                self.segment, self.rows_skipped, self.calls_replayed
            );
        }
        let mut ends = format!("{} ok, {} failed", self.rows_completed, self.rows_failed);
        for (count, what) in [
            (self.rows_quarantined, "quarantined"),
            (self.rows_discarded, "discarded"),
            (self.rows_consumed, "consumed in batches"),
        ] {
            if count > 0 {
                let _ = write!(ends, ", {count} {what}");
            }
        }
        // A stopped run read rows it did not finish; they keep no outcome
        // and are not counted here, so "read" would say the source was short.
        let counted = if self.stopped.is_some() {
            "finished before the stop"
        } else {
            "read"
        };
        let _ = writeln!(
            s,
            "  rows     {} {counted}: {ends}; {} written",
            self.rows_total, self.rows_written
        );
        let (prompt, completion) = self.endpoints.iter().fold((0, 0), |(p, c), e| {
            (p + e.stats.prompt_tokens, c + e.stats.completion_tokens)
        });
        let in_batches: u64 = self
            .endpoints
            .iter()
            .filter_map(|e| e.batches.as_ref())
            .map(|b| b.requests)
            .sum();
        let batched = if in_batches > 0 {
            format!(" online, {in_batches} requests in provider batches")
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  calls    {}{batched} ({} retries); tokens {} ({} prompt, {} completion)",
            self.calls(),
            self.retries(),
            prompt + completion,
            prompt,
            completion
        );
        self.write_counted(&mut s);
        for e in &self.endpoints {
            s.push_str(&e.lines(self.stopped.is_some()));
        }
        self.write_money(&mut s);
        for (code, g) in &self.failures {
            let node = g
                .first_node
                .as_deref()
                .map_or("source".to_string(), |n| format!("node `{n}`"));
            // Codes and messages come from guests and endpoints: escaped, a
            // message cannot forge a line of the summary.
            let _ = writeln!(
                s,
                "  failed   {}: {} rows; first: row {} at {node}: {}",
                escape(code),
                g.count,
                g.first_row,
                escape(&g.first_message)
            );
        }
        if !self.rows_truncated.is_empty() {
            let total: u64 = self.rows_truncated.iter().map(|(_, n)| n).sum();
            let nodes: Vec<String> = self
                .rows_truncated
                .iter()
                .map(|(node, n)| format!("node `{node}` {n}"))
                .collect();
            let _ = writeln!(
                s,
                "  truncated {total} rows: guest log lines or attachments beyond \
                 limits.log_kb_per_row or limits.attach_kb_per_row were dropped ({})",
                nodes.join(", ")
            );
        }
        for w in &self.windows_held {
            let _ = writeln!(
                s,
                "  held     node `{}`: rows ready to start waited {:.1} s on its reorder window \
                 ({} rows), full behind a row still running (a retry, a long answer); a larger \
                 `reorder_window` lets them go on meanwhile",
                w.node,
                w.held.as_secs_f64(),
                w.window
            );
        }
        for sink in &self.sinks {
            match (&self.stopped, self.run_id) {
                (Some(_), Some(_)) => {
                    let _ = writeln!(s, "  output   {}.partial (so far)", sink.display());
                }
                (Some(_), None) => {}
                (None, _) => {
                    let _ = writeln!(s, "  output   {}", sink.display());
                    if let Some(url) = self.objects.get(sink) {
                        let _ = writeln!(s, "           uploaded to {url}");
                    }
                }
            }
        }
        if let Some(totals) = self.totals.as_ref().filter(|_| self.segment > 1) {
            let counts: Vec<String> = totals
                .outcomes
                .iter()
                .map(|(outcome, n)| format!("{n} {}", outcome.replace('_', " ")))
                .collect();
            let _ = writeln!(
                s,
                "  run      {} rows in all segments: {}",
                totals.rows,
                counts.join(", ")
            );
        }
        if let (Some(_), Some(_)) = (&self.stopped, self.run_id) {
            let _ = writeln!(
                s,
                "  resume   {} (rows not finished kept no outcome; answers already received are \
                 not paid for again)",
                self.resume_command
            );
        }
        if let (Some(path), Some(id)) = (&self.audit_path, self.run_id) {
            let _ = writeln!(
                s,
                "  audit    {} (run {id}; `weir explain {id} ROW --audit {}` tells a row's story)",
                path.display(),
                path.display()
            );
            if let Some(url) = self.objects.get(path) {
                let _ = writeln!(s, "           uploaded to {url}");
            }
        }
        s
    }
}

/// Dollars to the cent, or finer for small amounts.
pub(super) fn usd(amount: f64) -> String {
    if amount >= 1.0 {
        format!("${amount:.2}")
    } else {
        format!("${amount:.6}")
    }
}
