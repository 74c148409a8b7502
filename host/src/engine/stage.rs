//! One node's work on one source row: run the guest, check what it returned,
//! and record the node state.

use super::setup::Node;
use crate::hashing;
use crate::runtime::RowScope;
use crate::runtime::bindings::Outcome;
use crate::services::audit::{AuditLog, NodeStateRecord, Record, now_ms};
use crate::types::{Row, RowError};
use std::sync::Arc;
use std::time::Instant;

/// A source row on its way through the nodes.
pub struct Flow {
    pub index: u64,
    /// The rows it has become so far (usually one), or why it failed.
    pub state: Result<Vec<Row>, Failure>,
}

pub struct Failure {
    /// The node where it failed; None for a row the source could not read.
    pub node: Option<usize>,
    pub error: RowError,
}

impl Node {
    pub async fn process(self: Arc<Self>, mut flow: Flow, audit: Option<Arc<AuditLog>>) -> Flow {
        let rows = match flow.state {
            Ok(rows) => rows,
            Err(_) => return flow,
        };
        let started = Instant::now();
        let started_at_ms = now_ms();
        let state_id = audit.as_ref().map_or(0, |a| a.new_state_id());
        let input_sha256 = audit.as_ref().map(|_| hashing::canonical_sha256(&rows));
        let result = self.run_guest(&rows, state_id).await;
        if let (Some(audit), Some(input_sha256)) = (&audit, input_sha256) {
            let (status, output_sha256, error) = match &result {
                Ok(out) => ("completed", Some(hashing::canonical_sha256(out)), None),
                Err(e) => ("failed", None, Some(e)),
            };
            audit.record(Record::NodeState(NodeStateRecord {
                state_id,
                row_index: flow.index,
                node_id: self.index,
                attempt: 1,
                status,
                input_sha256,
                output_sha256,
                error_code: error.map(|e| e.code.clone()),
                error_message: error.map(|e| e.message.clone()),
                started_at_ms,
                duration_ms: started.elapsed().as_millis() as u64,
            }));
        }
        flow.state = result.map_err(|error| Failure {
            node: Some(self.index),
            error,
        });
        flow
    }

    async fn run_guest(&self, rows: &[Row], state_id: u64) -> Result<Vec<Row>, RowError> {
        let input: Vec<String> = rows
            .iter()
            .map(|r| serde_json::to_string(r).expect("a JSON object always serializes"))
            .collect();
        let deadline = self.row_deadline.map(|d| Instant::now() + d);
        let scope = vec![RowScope::new(state_id, deadline); rows.len()];
        let mut instance = self
            .runtime
            .checkout()
            .await
            .map_err(|e| RowError::new("guest_unavailable", format!("{e:#}")))?;
        match instance.process(&input, scope).await {
            Ok(outcomes) => {
                self.runtime.checkin(instance);
                collect(outcomes, rows.len())
            }
            // The instance is dropped: after a trap its state cannot be trusted.
            Err(trap) => Err(RowError::new(
                "guest_trap",
                format!("the component of node `{}` trapped: {trap:#}", self.name),
            )),
        }
    }
}

/// All of a source row's outputs, or its first error: a row is never half done.
fn collect(outcomes: Vec<Outcome>, expected: usize) -> Result<Vec<Row>, RowError> {
    if outcomes.len() != expected {
        return Err(RowError::new(
            "guest_contract_violation",
            format!(
                "the component returned {} outcomes for {expected} rows",
                outcomes.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(expected);
    for outcome in outcomes {
        match outcome {
            Outcome::Failed(e) => return Err(RowError::new(e.code, e.message)),
            Outcome::Rows(texts) => {
                for text in texts {
                    match serde_json::from_str::<serde_json::Value>(&text) {
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
