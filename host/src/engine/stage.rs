//! One node's work on one source row: run the guest, check what it returned,
//! and record the node state.

use super::guest_threads;
use super::setup::Node;
use crate::config::BatchMode;
use crate::runtime::LimitHit;
use crate::runtime::bindings::{GuestRowError, Outcome};
use crate::runtime::{Interrupted, RowScope};
use crate::services::audit::{
    AuditLog, BatchRecord, Json, NodeStateRecord, NodeStatus, Record, now_ms,
};
use crate::types::{Row, RowError};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;

use super::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

/// A source row (or a batch of them) on its way through the nodes.
pub struct Flow {
    /// The source rows it stands for: one, unless a `transform` batch merged
    /// several into it.
    pub members: Vec<u64>,
    /// The `transform` batch that made it.
    pub batch: Option<u64>,
    /// The rows it has become so far (usually one), or why it failed.
    pub state: Result<Vec<Row>, Failure>,
}

impl Flow {
    pub fn single(index: u64, state: Result<Vec<Row>, Failure>) -> Self {
        Self {
            members: vec![index],
            batch: None,
            state,
        }
    }
}

pub struct Failure {
    /// The node where it failed; None for a row the source could not read.
    pub node: Option<usize>,
    pub error: RowError,
    /// The rows as they entered the failing node, for an `on_error` sink.
    pub input: Vec<Row>,
}

impl Node {
    pub async fn process(self: Arc<Self>, flow: Flow, audit: Option<Arc<AuditLog>>) -> Flow {
        let mut out = self.process_batch(vec![flow], audit).await;
        out.pop().expect("one flow in, one out")
    }

    /// Runs the guest once over every row of `flows` that is still alive;
    /// failed flows pass through untouched. In `transform` mode the live
    /// flows that succeed leave as one flow of the batch's output.
    pub async fn process_batch(
        self: Arc<Self>,
        flows: Vec<Flow>,
        audit: Option<Arc<AuditLog>>,
    ) -> Vec<Flow> {
        // The work before and after the guest's run is done in plain
        // functions, whose locals the future does not keep across its wait.
        let call = match self.prepare_call(flows, audit.as_ref()) {
            Ok(call) => call,
            Err(flows) => return flows,
        };
        let outcomes = self.run_guest(&call.input, &call.scopes).await;
        self.finish_call(call, outcomes, audit.as_ref())
    }

    /// The guest's input for the live rows of `flows`, and their node
    /// states; the flows back when none is live.
    pub(super) fn prepare_call(
        &self,
        flows: Vec<Flow>,
        audit: Option<&Arc<AuditLog>>,
    ) -> Result<Call, Vec<Flow>> {
        let live: Vec<usize> = (0..flows.len())
            .filter(|&i| flows[i].state.is_ok())
            .collect();
        if live.is_empty() {
            return Err(flows);
        }
        let started = Instant::now();
        let started_at_ms = now_ms();
        let state_ids: Vec<u64> = live
            .iter()
            .map(|_| audit.as_ref().map_or(0, |a| a.new_state_id()))
            .collect();
        let batch_id = match (&self.config.batch, audit) {
            (Some(batch), Some(audit)) => {
                let id = audit.new_batch_id();
                audit.record(Record::Batch(BatchRecord {
                    batch_id: id,
                    node_id: self.config.index,
                    mode: match batch.mode {
                        BatchMode::Passthrough => "passthrough",
                        BatchMode::Transform => "transform",
                    },
                    members: live
                        .iter()
                        .flat_map(|&i| flows[i].members.iter().copied())
                        .collect(),
                }));
                Some(id)
            }
            _ => None,
        };
        // Rows go to the guest as JSON text, serialized straight from the
        // flows: they stay there for the audit and an `on_error` sink.
        let mut input = Vec::new();
        let mut scopes = Vec::new();
        let mut spans = Vec::new();
        let deadline = self.config.row_deadline.map(|d| Instant::now() + d);
        for (k, &i) in live.iter().enumerate() {
            let Ok(flow_rows) = &flows[i].state else {
                unreachable!("only live flows")
            };
            spans.push(input.len()..input.len() + flow_rows.len());
            // The rows of one flow share its node state, and so its call numbering.
            let scope = RowScope::new(
                state_ids[k],
                flows[i].members[0],
                self.config.index,
                deadline,
            );
            scopes.extend(flow_rows.iter().map(|_| scope.clone()));
            input.extend(
                flow_rows
                    .iter()
                    .map(|r| serde_json::to_string(r).expect("a JSON object always serializes")),
            );
        }
        Ok(Call {
            flows,
            live,
            started,
            started_at_ms,
            state_ids,
            batch_id,
            input,
            scopes,
            spans,
        })
    }

    /// Checks what the guest returned, records each node state, and hands
    /// the flows on.
    pub(super) fn finish_call(
        &self,
        call: Call,
        outcomes: Result<Vec<Outcome>, RowError>,
        audit: Option<&Arc<AuditLog>>,
    ) -> Vec<Flow> {
        let Call {
            flows,
            live,
            started,
            started_at_ms,
            state_ids,
            batch_id,
            input: input_texts,
            scopes: _,
            spans,
        } = call;

        let results: Vec<Result<Vec<Row>, RowError>> = spans
            .iter()
            .map(|span| match &outcomes {
                Ok(outcomes) => self
                    .within_fan_out_limit(&outcomes[span.clone()])
                    .and_then(|()| collect(&outcomes[span.clone()])),
                Err(e) => Err(e.clone()),
            })
            .collect();

        let mut flows: Vec<Option<Flow>> = flows.into_iter().map(Some).collect();
        let transform = self
            .config
            .batch
            .as_ref()
            .is_some_and(|b| b.mode == BatchMode::Transform);
        let mut merged: Option<(usize, Flow)> = None;
        for (k, (&i, result)) in live.iter().zip(results).enumerate() {
            let flow = flows[i].as_mut().expect("each flow once");
            let input = std::mem::replace(&mut flow.state, Ok(Vec::new())).unwrap_or_default();
            if let Some(audit) = &audit {
                // The texts that crossed the boundary are what the audit
                // hashes, on its own thread.
                let texts = Texts {
                    input: input_texts[spans[k].clone()].to_vec(),
                    output: match (&outcomes, &result) {
                        (Ok(outcomes), Ok(_)) => Some(output_texts(&outcomes[spans[k].clone()])),
                        _ => None,
                    },
                };
                let record = self.state_record(
                    state_ids[k],
                    flow,
                    texts,
                    &result,
                    batch_id,
                    started_at_ms,
                    started,
                );
                audit.record(Record::NodeState(record));
            }
            match result {
                Ok(out) if transform => {
                    let taken = flows[i].take().expect("each flow once");
                    let (_, into) = merged.get_or_insert_with(|| {
                        (
                            i,
                            Flow {
                                members: Vec::new(),
                                batch: batch_id,
                                state: Ok(Vec::new()),
                            },
                        )
                    });
                    into.members.extend(taken.members);
                    if let Ok(rows) = &mut into.state {
                        rows.extend(out);
                    }
                }
                Ok(out) => flow.state = Ok(out),
                Err(error) => {
                    flow.state = Err(Failure {
                        node: Some(self.config.index),
                        error,
                        input,
                    })
                }
            }
        }
        if let Some((at, flow)) = merged {
            flows[at] = Some(flow);
        }
        flows.into_iter().flatten().collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn state_record(
        &self,
        state_id: u64,
        flow: &Flow,
        texts: Texts,
        result: &Result<Vec<Row>, RowError>,
        batch_id: Option<u64>,
        started_at_ms: i64,
        started: Instant,
    ) -> NodeStateRecord {
        let (status, error) = match result {
            Ok(_) => (NodeStatus::Completed, None),
            Err(e) => (NodeStatus::Failed, Some(e)),
        };
        NodeStateRecord {
            state_id,
            row_index: flow.members[0],
            node_id: self.config.index,
            attempt: 1,
            status,
            input: Json::Array(texts.input),
            output: texts.output.map(Json::Array),
            error_code: error.map(|e| e.code.clone()),
            error_message: error.map(|e| e.message.clone()),
            batch_id,
            started_at_ms,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }

    /// One outcome per row, or an error for them all (the guest trapped, or
    /// the node was stopped after trapping too often).
    async fn run_guest(
        &self,
        input: &[String],
        scopes: &[RowScope],
    ) -> Result<Vec<Outcome>, RowError> {
        if let Some(stopped) = self.stopped_after_traps() {
            return Err(stopped);
        }
        let mut waited = std::time::Duration::ZERO;
        loop {
            let slot = match &self.guest_slots {
                Some(slots) => Some(
                    Arc::clone(slots)
                        .acquire_owned()
                        .await
                        .expect("never closed"),
                ),
                None => None,
            };
            match self.attempt(input, scopes, waited, slot).await {
                Attempt::Finished(outcomes) => return outcomes,
                // Parked beyond the node's suspended instances: the row
                // holds its data and its requests under way, no instance.
                // (A node granted a Batch API endpoint runs its calls as
                // `ResumableCall`s, which wait on batches as data.)
                Attempt::Parked(mut parked) => {
                    let since = Instant::now();
                    std::future::poll_fn(|cx| parked.poll_answered(cx))
                        .await
                        .map_err(|detached| RowError::new("detached", detached))?;
                    if parked.waits_on_batches() {
                        waited += since.elapsed();
                    }
                }
            }
        }
    }

    /// The error of a node stopped after `limits.stop_after_traps` calls in
    /// a row trapped.
    pub(super) fn stopped_after_traps(&self) -> Option<RowError> {
        let traps = self.traps_in_a_row.load(Ordering::Relaxed);
        let stop = self.config.limits.stop_after_traps?;
        (traps >= stop).then(|| {
            RowError::new(
                "node_stopped",
                format!(
                    "node `{}` stopped after {traps} calls in a row trapped \
                     (limits.stop_after_traps: {stop})",
                    self.config.name
                ),
            )
        })
    }

    /// Runs the guest once over `input`, after `waited` on provider
    /// batches, in `slot` (one of `guest_slots`): to its outcomes, or until
    /// its rows park on a batch.
    pub(super) async fn attempt(
        &self,
        input: &[String],
        scopes: &[RowScope],
        waited: std::time::Duration,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Attempt {
        let run = scopes.iter().map(|s| s.restart(waited)).collect();
        let (instance, processed) =
            match guest_threads::process(&self.runtime, input, run, &self.guest_cost).await {
                Ok(ran) => ran,
                Err(e) => {
                    return Attempt::Finished(Err(match e.limit {
                        Some(limit) => self.trap_error(Some(limit), &e),
                        None => RowError::new("guest_unavailable", e.message),
                    }));
                }
            };
        self.rows_truncated
            .fetch_add(instance.rows_truncated() as u64, Ordering::Relaxed);
        drop(slot);
        Attempt::Finished(match processed {
            // The instance is dropped: a waiting row holds only its data.
            Err(Interrupted::Parked(parked)) => return Attempt::Parked(parked),
            Ok(outcomes) if outcomes.len() == input.len() => {
                self.runtime.checkin(instance);
                self.traps_in_a_row.store(0, Ordering::Relaxed);
                Ok(outcomes
                    .into_iter()
                    .map(|o| self.within_output_limit(o))
                    .collect())
            }
            Ok(outcomes) => Err(RowError::new(
                "guest_contract_violation",
                format!(
                    "the component returned {} outcomes for {} rows",
                    outcomes.len(),
                    input.len()
                ),
            )),
            // The instance is dropped: after a trap its state cannot be trusted.
            Err(Interrupted::Trap(trap)) => {
                self.traps_in_a_row.fetch_add(1, Ordering::Relaxed);
                Err(self.trap_error(instance.limit_hit(), &trap))
            }
        })
    }

    /// Names the limit a trap came from, when it came from one.
    fn trap_error(&self, hit: Option<LimitHit>, trap: &dyn std::fmt::Display) -> RowError {
        let node = &self.config.name;
        match hit {
            Some(LimitHit::Cpu) => RowError::new(
                "guest_cpu_limit",
                format!(
                    "the component of node `{node}` used more than its {} ms of CPU for one call \
                     (limits.cpu_ms_per_call)",
                    self.config.limits.cpu_per_call.as_millis()
                ),
            ),
            Some(LimitHit::Memory) => RowError::new(
                "guest_memory_limit",
                format!(
                    "the component of node `{node}` tried to grow its memory beyond {} MiB \
                     (limits.memory_mb)",
                    self.config.limits.memory_bytes >> 20
                ),
            ),
            Some(LimitHit::NodeMemory) => RowError::new(
                "guest_memory_limit",
                format!(
                    "the component of node `{node}` needed more memory than is left of the \
                     node's budget of {} MiB, shared by all its instances \
                     (limits.node_memory_mb)",
                    self.config.limits.node_memory_bytes >> 20
                ),
            ),
            None => RowError::new(
                "guest_trap",
                format!("the component of node `{node}` trapped: {trap}"),
            ),
        }
    }

    /// A row whose output is larger than `limits.output_mb_per_row` fails.
    fn within_output_limit(&self, outcome: Outcome) -> Outcome {
        let Outcome::Rows(rows) = &outcome else {
            return outcome;
        };
        let bytes: usize = rows.iter().map(String::len).sum();
        let limit = self.config.limits.output_bytes_per_row;
        if bytes <= limit {
            return outcome;
        }
        Outcome::Failed(GuestRowError {
            code: "guest_output_limit".into(),
            message: format!(
                "the component of node `{}` returned {bytes} bytes for one row, more than its \
                 limit of {limit} (limits.output_mb_per_row)",
                self.config.name
            ),
        })
    }

    /// One input row may become at most `limits.max_rows_per_input` rows:
    /// counted before they are parsed, so a row that would become millions
    /// costs no more than its text.
    fn within_fan_out_limit(&self, outcomes: &[Outcome]) -> Result<(), RowError> {
        let rows: usize = outcomes
            .iter()
            .map(|o| match o {
                Outcome::Rows(texts) => texts.len(),
                Outcome::Failed(_) => 0,
            })
            .sum();
        let limit = self.config.limits.max_rows_per_input;
        if rows <= limit {
            return Ok(());
        }
        Err(RowError::new(
            "fan_out_limit",
            format!(
                "the component of node `{}` turned one input row into {rows} rows, more than \
                 its limit of {limit} (limits.max_rows_per_input)",
                self.config.name
            ),
        ))
    }
}

/// What one run of a node's guest came to.
pub(super) enum Attempt {
    /// One outcome per row, or an error for them all.
    Finished(Result<Vec<Outcome>, RowError>),
    /// Its rows wait on provider batches; the guest runs again once they
    /// are answered.
    Parked(crate::services::batch::Parked),
}

/// One call of a node's guest over the live rows of some flows.
pub(super) struct Call {
    pub(super) flows: Vec<Flow>,
    /// Which of `flows` go to the guest.
    pub(super) live: Vec<usize>,
    pub(super) started: Instant,
    pub(super) started_at_ms: i64,
    /// The node state of each live flow.
    pub(super) state_ids: Vec<u64>,
    pub(super) batch_id: Option<u64>,
    /// The rows as the guest gets them, and each one's node state.
    pub(super) input: Vec<String>,
    pub(super) scopes: Vec<RowScope>,
    /// Which of `input` each live flow's rows are.
    pub(super) spans: Vec<std::ops::Range<usize>>,
}

impl Call {
    /// The live rows' values again, read from `input`, for `finish_call`
    /// (a failed row goes to an `on_error` sink as it entered the node).
    pub(super) fn restore_rows(&mut self) {
        for (k, &i) in self.live.iter().enumerate() {
            if let Ok(rows) = &mut self.flows[i].state {
                *rows = self.input[self.spans[k].clone()]
                    .iter()
                    .map(|text| match serde_json::from_str(text) {
                        Ok(serde_json::Value::Object(row)) => row,
                        _ => unreachable!("serialized from a row by prepare_call"),
                    })
                    .collect();
            }
        }
    }
}

/// A node state's rows as JSON text: as the guest got them, and as it
/// returned them.
struct Texts {
    input: Vec<String>,
    output: Option<Vec<String>>,
}

fn output_texts(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .flat_map(|o| match o {
            Outcome::Rows(texts) => texts.clone(),
            Outcome::Failed(_) => Vec::new(),
        })
        .collect()
}

/// All of a source row's outputs, or its first error: a row is never half done.
fn collect(outcomes: &[Outcome]) -> Result<Vec<Row>, RowError> {
    let mut out = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        match outcome {
            Outcome::Failed(e) => return Err(RowError::new(e.code.clone(), e.message.clone())),
            Outcome::Rows(texts) => {
                for text in texts {
                    match serde_json::from_str::<serde_json::Value>(text) {
                        Ok(serde_json::Value::Object(row)) => out.push(row),
                        _ => {
                            return Err(RowError::new(
                                "guest_contract_violation",
                                "the component returned a row that is not a JSON object",
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}
