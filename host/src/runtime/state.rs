//! The state each guest instance's store holds: the node's services, the
//! rows of the call under way, the caps, and the sealed WASI context. The
//! contract versions' imports (`bindings`) call into it; what a request
//! becomes is in `calls`.

use super::bindings::{CallError, Level, Response};
use super::limits::{CpuBudget, LimitHit, MemoryLimit, NodeMemory};
use super::output::{AttachCap, LogCap};
use super::parking::{RecordedAnswers, SuspendBudget, Suspended};
use super::stderr::StderrTail;
use crate::config::GuestLimits;
use crate::services::audit::{AttributeRecord, AuditLog, Record};
use crate::services::executor::Endpoint;
use crate::terminal;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What a node's instances may use: the endpoints granted to the node, by the
/// name the guest uses for them, and where to record.
pub struct NodeServices {
    pub node_name: String,
    /// The granted endpoint names, in the order the pipeline file lists them.
    pub endpoints: Vec<String>,
    pub outbound: Outbound,
    pub audit: Option<Arc<AuditLog>>,
}

/// Where a node's requests go.
pub enum Outbound {
    /// To real endpoints, through the pooled executor, by granted name.
    Live(BTreeMap<String, Arc<Endpoint>>),
    /// To a script that answers in place of the endpoints (`weir test`):
    /// nothing leaves the process.
    Scripted(Arc<dyn Script>),
}

/// Scripted answers for a node's requests.
pub trait Script: Send + Sync {
    /// The answer to `body`, sent to the granted endpoint `endpoint` for row
    /// `row` of the current `process` call.
    fn answer(&self, row: u32, endpoint: &str, body: &str) -> Result<Response, CallError>;
}

/// The audit identity of one row within the current `process` call.
#[derive(Clone)]
pub struct RowScope {
    pub state_id: u64,
    /// The source row and node of the state, so a call stays traceable even
    /// when its process dies before the node state is recorded.
    pub row_index: u64,
    pub node_id: usize,
    /// When the row's calls must be over (`row_deadline_seconds`).
    pub deadline: Option<std::time::Instant>,
    /// Hands out call indexes, unique within the node state.
    pub calls: Arc<AtomicU32>,
    /// Numbers the logical requests of the node state.
    pub requests: Arc<AtomicU32>,
    /// What its requests were answered while it was parked, for its replay.
    pub answers: Arc<RecordedAnswers>,
}

impl RowScope {
    /// The same node state run again from the start, after `waited` on
    /// provider batches: its requests are numbered afresh (so they find the
    /// answers recorded while it was parked), its calls go on being numbered
    /// where they were, and the wait does not count against its deadline.
    pub fn restart(&self, waited: std::time::Duration) -> Self {
        Self {
            requests: Arc::new(AtomicU32::new(0)),
            deadline: self.deadline.map(|d| d + waited),
            ..self.clone()
        }
    }

    pub fn new(
        state_id: u64,
        row_index: u64,
        node_id: usize,
        deadline: Option<std::time::Instant>,
    ) -> Self {
        Self {
            state_id,
            row_index,
            node_id,
            deadline,
            calls: Arc::new(AtomicU32::new(0)),
            requests: Arc::new(AtomicU32::new(0)),
            answers: Arc::default(),
        }
    }
}

pub struct GuestState {
    pub(super) node: Arc<NodeServices>,
    pub(super) cpu: CpuBudget,
    pub(super) memory: MemoryLimit,
    /// One entry per row of the `process` call under way.
    pub(super) scope: Vec<RowScope>,
    log: LogCap,
    attachments: AttachCap,
    /// Rows of the last call whose log or attachments were cut at their cap.
    pub(super) rows_truncated: usize,
    // WASI is linked so that components whose language runtime imports it
    // load, but the context grants nothing: see `wasi::sealed`.
    wasi: WasiCtx,
    pub(super) stderr: StderrTail,
    table: ResourceTable,
    /// Set when the call stopped because its rows wait on provider batches
    /// or on answers sent for them after their instance was dropped.
    pub(super) parked: Option<crate::services::batch::Parked>,
    /// The node's instances waiting on the network, this one among them
    /// from its call's first request to the call's end.
    pub(super) suspend: Arc<SuspendBudget>,
    /// This instance's place in `suspend`, while it holds one.
    pub(super) suspended: Option<Suspended>,
}

impl GuestState {
    pub fn new(
        node: Arc<NodeServices>,
        limits: &GuestLimits,
        node_memory: Arc<NodeMemory>,
        suspend: Arc<SuspendBudget>,
    ) -> Self {
        let stderr = StderrTail::default();
        Self {
            node,
            cpu: CpuBudget::new(limits.cpu_per_call),
            memory: MemoryLimit::new(limits.memory_bytes, node_memory),
            scope: Vec::new(),
            log: LogCap::new(limits.log_bytes_per_row),
            attachments: AttachCap::new(limits.attach_bytes_per_row),
            rows_truncated: 0,
            wasi: super::wasi::sealed(&stderr),
            stderr,
            table: ResourceTable::new(),
            parked: None,
            suspend,
            suspended: None,
        }
    }

    /// The limit that made the last call trap, if one did.
    pub(super) fn limit_hit(&self) -> Option<LimitHit> {
        if self.cpu.hit {
            Some(LimitHit::Cpu)
        } else {
            self.memory.hit
        }
    }

    /// A `process` call over `scope`'s rows starts.
    pub(super) fn start_call(&mut self, scope: Vec<RowScope>) {
        self.log.start_call(scope.len());
        self.scope = scope;
        self.rows_truncated = 0;
    }

    /// The call is over (returned or trapped): gives back its place among
    /// the suspended, marks what was cut at the caps, once per call, and
    /// counts the rows it was cut from.
    pub(super) fn end_call(&mut self) {
        self.suspended = None;
        let node = self.node.node_name.as_str();
        let log_dropped = self.log.dropped();
        if log_dropped > 0 {
            tracing::warn!(
                node,
                "truncated: the component logged {log_dropped} bytes more than \
                 limits.log_kb_per_row allows ({} KiB a row; rows in this call: {}); they were \
                 dropped",
                self.log.per_row() >> 10,
                self.scope.len().max(1)
            );
        }
        let attach_dropped = self.attachments.end_call();
        if let Some(audit) = &self.node.audit {
            for &(state_id, bytes) in &attach_dropped {
                audit.record(Record::Attribute(AttributeRecord {
                    state_id,
                    key: TRUNCATED_MARK.to_string(),
                    value: format!(
                        "dropped {bytes} bytes of attachments beyond limits.attach_kb_per_row \
                         ({} KiB)",
                        self.attachments.per_row() >> 10
                    ),
                }));
            }
        }
        let cut_states: BTreeSet<u64> = attach_dropped.iter().map(|&(id, _)| id).collect();
        let rows: BTreeSet<u64> = self
            .scope
            .iter()
            .filter(|s| log_dropped > 0 || cut_states.contains(&s.state_id))
            .map(|s| s.row_index)
            .collect();
        self.rows_truncated = rows.len();
        // The next call, or `configure` of a fresh instance, starts afresh.
        self.log.start_call(1);
        self.scope.clear();
    }
}

/// The key of the attachment that marks a row whose attachments were cut at
/// `limits.attach_kb_per_row`, saying how many bytes were dropped.
const TRUNCATED_MARK: &str = "weir.truncated";

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl GuestState {
    /// `audit.attach`: kept within `limits.attach_kb_per_row` per row.
    pub(super) fn attach(&mut self, row: u32, key: String, value: String) {
        let (Some(audit), Some(scope)) = (&self.node.audit, self.scope.get(row as usize)) else {
            return;
        };
        if !self
            .attachments
            .admit(scope.state_id, key.len() + value.len())
        {
            return;
        }
        audit.record(Record::Attribute(AttributeRecord {
            state_id: scope.state_id,
            key,
            value,
        }));
    }

    /// Only lines the log filter lets through count against the cap; they
    /// are written escaped, one line each whatever they hold.
    pub(super) fn log(&mut self, level: Level, message: String) {
        if !shown(level) {
            return;
        }
        let kept = self.log.admit(&message);
        if kept.is_empty() {
            return;
        }
        let node = self.node.node_name.as_str();
        let text = terminal::escape(kept);
        match level {
            Level::Trace => tracing::trace!(node, "{text}"),
            Level::Debug => tracing::debug!(node, "{text}"),
            Level::Info => tracing::info!(node, "{text}"),
            Level::Warn => tracing::warn!(node, "{text}"),
            Level::Error => tracing::error!(node, "{text}"),
        }
    }

    /// `context.node-name`.
    pub(super) fn node_name(&self) -> String {
        self.node.node_name.clone()
    }

    /// `context.endpoints`: the granted names, in pipeline order.
    pub(super) fn granted_endpoints(&self) -> Vec<String> {
        self.node.endpoints.clone()
    }
}

/// Whether the log filter lets a guest's line of `level` through.
fn shown(level: Level) -> bool {
    match level {
        Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
        Level::Info => tracing::enabled!(tracing::Level::INFO),
        Level::Warn => tracing::enabled!(tracing::Level::WARN),
        Level::Error => tracing::enabled!(tracing::Level::ERROR),
    }
}
