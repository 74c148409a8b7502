//! The state each guest instance's store holds, and the host side of the
//! `executor`, `audit`, `log` and `context` imports (of every supported
//! contract version: older ones convert and delegate to the current one).

use super::bindings::{CallError, Level, Request, Response, v0_1, v0_2};
use super::limits::{CpuBudget, LimitHit, MemoryLimit, NodeMemory};
use super::output::{AttachCap, LogCap};
use super::stderr::StderrTail;
use crate::config::GuestLimits;
use crate::hashing;
use crate::services::audit::{AttributeRecord, AuditLog, CallRecord, Json, Record, now_ms};
use crate::services::batch::{self, BatchQueue, Lookup, Parked};
use crate::services::executor::{self, Endpoint};
use crate::terminal;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{
    Deterministic, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView,
};

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
}

impl RowScope {
    /// The same node state run again from the start: its requests are
    /// numbered afresh, its calls go on being numbered where they were.
    pub fn restart(&self) -> Self {
        Self {
            requests: Arc::new(AtomicU32::new(0)),
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
        }
    }
}

pub struct GuestState {
    node: Arc<NodeServices>,
    pub(super) cpu: CpuBudget,
    pub(super) memory: MemoryLimit,
    /// One entry per row of the `process` call under way.
    pub(super) scope: Vec<RowScope>,
    log: LogCap,
    attachments: AttachCap,
    /// Rows of the last call whose log or attachments were cut at their cap.
    pub(super) rows_truncated: usize,
    // WASI is linked so that components whose language runtime imports it
    // load, but the context grants nothing: see `sealed_wasi`.
    wasi: WasiCtx,
    pub(super) stderr: StderrTail,
    table: ResourceTable,
}

impl GuestState {
    pub fn new(
        node: Arc<NodeServices>,
        limits: &GuestLimits,
        node_memory: Arc<NodeMemory>,
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
            wasi: sealed_wasi(&stderr),
            stderr,
            table: ResourceTable::new(),
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

    /// The call is over (returned or trapped): marks what was cut at the
    /// caps, once per call, and counts the rows it was cut from.
    pub(super) fn end_call(&mut self) {
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

/// A WASI context that grants nothing a guest could learn the world from: no
/// files, environment, arguments or sockets; clocks stopped at the Unix epoch;
/// randomness from a fixed sequence. Only stderr is kept, to explain traps. A guest therefore processes a row the
/// same way every time, which is also what lets a resumed run recognise the
/// requests it already paid for.
fn sealed_wasi(stderr: &StderrTail) -> WasiCtx {
    let mut builder = WasiCtx::builder();
    builder
        .stderr(stderr.clone())
        .wall_clock(StoppedClock)
        .monotonic_clock(StoppedClock)
        .secure_random(Deterministic::new(fixed_bytes()))
        .insecure_random(Deterministic::new(fixed_bytes()))
        .insecure_random_seed(0x5745_4952);
    builder.build()
}

/// 4 KiB from a fixed-seed SplitMix64: varied, but the same in every run.
fn fixed_bytes() -> Vec<u8> {
    let mut state: u64 = 0x5745_4952_5345_4544;
    (0..512)
        .flat_map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .collect()
}

struct StoppedClock;

impl HostWallClock for StoppedClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
    fn now(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl v0_2::weir::transform::types::Host for GuestState {}

impl v0_2::weir::transform::executor::Host for GuestState {
    /// Every request is numbered in the order the component gave it, so a
    /// row run again numbers its requests the same way. When any request
    /// waits on a provider batch, nothing is sent and the component stops
    /// (`Parked`): the row runs again once the answers are in.
    async fn send(
        &mut self,
        requests: Vec<Request>,
    ) -> wasmtime::Result<Vec<Result<Response, CallError>>> {
        let mut plans = Vec::with_capacity(requests.len());
        let mut waits = Vec::new();
        for request in requests {
            match self.plan(request) {
                Plan::Wait(queue, custom_id) => waits.push((queue, custom_id)),
                plan => plans.push(plan),
            }
        }
        if !waits.is_empty() {
            return Err(wasmtime::Error::new(Parked { waits }));
        }
        let node = &self.node;
        let calls = plans.into_iter().map(|plan| async move {
            match plan {
                Plan::Done(result) => result,
                Plan::Send {
                    endpoint,
                    scope,
                    request_index,
                    body,
                } => send_one(node, &endpoint, &scope, request_index, body).await,
                Plan::Wait(..) => unreachable!("waits return above"),
            }
        });
        Ok(futures::future::join_all(calls).await)
    }
}

/// What becomes of one request of a `send`.
enum Plan {
    Done(Result<Response, CallError>),
    Send {
        endpoint: Arc<Endpoint>,
        scope: RowScope,
        request_index: u32,
        body: String,
    },
    Wait(Arc<BatchQueue>, String),
}

impl GuestState {
    fn plan(&mut self, request: Request) -> Plan {
        let rows = self.scope.len();
        let Some(scope) = self.scope.get(request.row as usize).cloned() else {
            return Plan::Done(Err(CallError::Denied(format!(
                "row index {} is out of range: this call has {rows} rows",
                request.row
            ))));
        };
        if !self.node.endpoints.contains(&request.endpoint) {
            return Plan::Done(Err(CallError::Denied(denied_message(
                &self.node,
                &request.endpoint,
            ))));
        }
        let request_index = scope.requests.fetch_add(1, Ordering::Relaxed);
        let endpoint = match &self.node.outbound {
            Outbound::Scripted(script) => {
                return Plan::Done(script.answer(request.row, &request.endpoint, &request.body));
            }
            Outbound::Live(grants) => Arc::clone(&grants[&request.endpoint]),
        };
        if let (Some(queue), Some(audit)) = (endpoint.batch(), &self.node.audit) {
            let request_sha256 = hashing::json_text_sha256(&request.body);
            let custom_id = batch::custom_id(
                audit.run_id(),
                scope.row_index,
                scope.node_id,
                request_index,
                &request_sha256,
            );
            let lookup = queue.lookup(batch::Request {
                custom_id: custom_id.clone(),
                row_index: scope.row_index,
                node_id: scope.node_id,
                request_index,
                request_sha256,
                body: request.body.clone(),
            });
            match lookup {
                Lookup::Answer(answer) => {
                    let result = batch_answer(
                        audit,
                        &endpoint,
                        &scope,
                        request_index,
                        &request.body,
                        answer,
                    );
                    return Plan::Done(result);
                }
                Lookup::Wait => return Plan::Wait(Arc::clone(queue), custom_id),
                Lookup::Online => {}
            }
        }
        Plan::Send {
            endpoint,
            scope,
            request_index,
            body: request.body,
        }
    }
}

/// A batch's answer as the component gets it, recorded as a call the first
/// time a row takes it, with its cost at the Batch API's price.
fn batch_answer(
    audit: &AuditLog,
    endpoint: &Endpoint,
    scope: &RowScope,
    request_index: u32,
    body: &str,
    answer: batch::Answer,
) -> Result<Response, CallError> {
    let cost = (!answer.used_before && (200..300).contains(&answer.status))
        .then(|| endpoint.batch_answer_taken(body, &answer.body, answer.tokens))
        .flatten();
    audit.record(Record::Call(CallRecord {
        state_id: scope.state_id,
        row_index: scope.row_index,
        node_id: scope.node_id,
        call_index: scope.calls.fetch_add(1, Ordering::Relaxed),
        endpoint: endpoint.name.clone(),
        request_index,
        attempt: 1,
        request: Json::Text(Arc::from(body)),
        response: Some(Json::Text(Arc::from(answer.body.as_str()))),
        status: Some(answer.status),
        error: None,
        retry_cause: None,
        latency_ms: 0,
        prompt_tokens: answer.tokens.map(|t| t.0),
        completion_tokens: answer.tokens.map(|t| t.1),
        started_at_ms: now_ms(),
        replayed: answer.used_before,
        cost: cost.map(|c| (c.usd, c.estimated)),
        cached: false,
        provider_batch: answer.batch_id,
    }));
    let response = Response {
        status: answer.status,
        body: answer.body,
        attempts: 1,
        latency_ms: 0,
    };
    if (200..300).contains(&response.status) {
        Ok(response)
    } else {
        Err(CallError::Status(response))
    }
}

fn denied_message(node: &NodeServices, endpoint: &str) -> String {
    let granted: Vec<&str> = node.endpoints.iter().map(String::as_str).collect();
    format!(
        "endpoint `{endpoint}` is not granted to node `{}` (granted: {}); add it to the node's `endpoints:`",
        node.node_name,
        if granted.is_empty() {
            "none".to_string()
        } else {
            granted.join(", ")
        }
    )
}

async fn send_one(
    node: &NodeServices,
    endpoint: &Endpoint,
    scope: &RowScope,
    request_index: u32,
    body: String,
) -> Result<Response, CallError> {
    let Some(audit) = &node.audit else {
        if let Some(answer) = endpoint.cached_answer(&body) {
            return Ok(to_wit_response(answer));
        }
        return endpoint
            .send(&body, scope.deadline, |_| {})
            .await
            .map(to_wit_response)
            .map_err(to_wit_error);
    };
    let request: Arc<str> = Arc::from(body.as_str());
    let call = |attempt: u32, request: Json| CallRecord {
        state_id: scope.state_id,
        row_index: scope.row_index,
        node_id: scope.node_id,
        call_index: scope.calls.fetch_add(1, Ordering::Relaxed),
        endpoint: endpoint.name.clone(),
        request_index,
        attempt,
        request,
        response: None,
        status: None,
        error: None,
        retry_cause: None,
        latency_ms: 0,
        prompt_tokens: None,
        completion_tokens: None,
        started_at_ms: now_ms(),
        replayed: false,
        cost: None,
        cached: false,
        provider_batch: None,
    };
    if let Some(replay) = audit.replay() {
        // Only a resumed run hashes here: the hash is what it looks up.
        let request_sha256 = hashing::json_text_sha256(&body);
        let answer = replay.answer(
            scope.row_index,
            scope.node_id,
            &endpoint.name,
            &request_sha256,
        );
        if let Some((response_sha256, answer)) = answer {
            audit.record(Record::Call(CallRecord {
                response: Some(Json::Hashed(response_sha256)),
                status: Some(200),
                replayed: true,
                ..call(1, Json::Hashed(request_sha256))
            }));
            return Ok(Response {
                status: 200,
                body: answer,
                attempts: 0,
                latency_ms: 0,
            });
        }
    }
    // The run's own recorded answers come first; the cache may hold answers
    // of other runs.
    if let Some(answer) = endpoint.cached_answer(&body) {
        let response = Json::Text(Arc::from(answer.body.as_str()));
        audit.record(Record::Call(CallRecord {
            response: Some(response),
            status: Some(answer.status),
            cached: true,
            ..call(1, Json::Text(Arc::clone(&request)))
        }));
        return Ok(to_wit_response(answer));
    }
    endpoint
        .send(&body, scope.deadline, |attempt| {
            audit.record(Record::Call(CallRecord {
                response: attempt.body.map(|text| Json::Text(Arc::from(text))),
                status: attempt.status,
                error: attempt.error,
                retry_cause: attempt.retry_cause,
                latency_ms: attempt.latency.as_millis() as u64,
                prompt_tokens: attempt.tokens.map(|t| t.0),
                completion_tokens: attempt.tokens.map(|t| t.1),
                started_at_ms: attempt.started_at_ms,
                cost: attempt.cost.map(|c| (c.usd, c.estimated)),
                ..call(attempt.attempt, Json::Text(Arc::clone(&request)))
            }));
        })
        .await
        .map(to_wit_response)
        .map_err(to_wit_error)
}

fn to_wit_error(e: executor::CallError) -> CallError {
    match e {
        executor::CallError::Denied(m) => CallError::Denied(m),
        executor::CallError::Status(r) => CallError::Status(to_wit_response(r)),
        executor::CallError::DeadlineExceeded(m) => CallError::DeadlineExceeded(m),
        executor::CallError::Transport(m) => CallError::Transport(m),
    }
}

fn to_wit_response(r: executor::Response) -> Response {
    Response {
        status: r.status,
        body: r.body,
        attempts: r.attempts,
        latency_ms: r.latency.as_millis().min(u32::MAX as u128) as u32,
    }
}

impl v0_2::weir::transform::audit::Host for GuestState {
    async fn attach(&mut self, row: u32, key: String, value: String) {
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
}

impl v0_2::weir::transform::log::Host for GuestState {
    /// Only lines the log filter lets through count against the cap; they
    /// are written escaped, one line each whatever they hold.
    async fn log(&mut self, level: Level, message: String) {
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

impl v0_2::weir::transform::context::Host for GuestState {
    async fn node_name(&mut self) -> String {
        self.node.node_name.clone()
    }

    async fn endpoints(&mut self) -> Vec<String> {
        self.node.endpoints.clone()
    }
}

impl v0_1::weir::transform::types::Host for GuestState {}

impl v0_1::weir::transform::executor::Host for GuestState {
    async fn send(
        &mut self,
        requests: Vec<v0_1::weir::transform::executor::Request>,
    ) -> wasmtime::Result<
        Vec<
            Result<
                v0_1::weir::transform::executor::Response,
                v0_1::weir::transform::executor::CallError,
            >,
        >,
    > {
        let requests = requests.into_iter().map(v0_1::request_to_current).collect();
        Ok(v0_2::weir::transform::executor::Host::send(self, requests)
            .await?
            .into_iter()
            .map(|result| {
                result
                    .map(v0_1::response_from_current)
                    .map_err(v0_1::call_error_from_current)
            })
            .collect())
    }
}

impl v0_1::weir::transform::audit::Host for GuestState {
    async fn attach(&mut self, row: u32, key: String, value: String) {
        v0_2::weir::transform::audit::Host::attach(self, row, key, value).await
    }
}

impl v0_1::weir::transform::log::Host for GuestState {
    async fn log(&mut self, level: v0_1::weir::transform::log::Level, message: String) {
        v0_2::weir::transform::log::Host::log(self, v0_1::level_to_current(level), message).await
    }
}
