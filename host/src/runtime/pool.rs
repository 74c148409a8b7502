//! A node's instances. Each instance runs one `process` call at a time, so a
//! node keeps a pool of configured instances, created on demand up to its
//! concurrency and reused afterwards; one that trapped is thrown away. When
//! the node's memory budget has no room for another instance, a row waits
//! for one to come back instead.

use super::bindings::{GuestRowError, NodeInfo, Outcome, v0_1, v0_2, v0_3};
use super::contract::{self, Contract};
use super::cpu_time::Timed;
use super::limits::{LimitHit, NodeMemory};
use super::parking::SuspendBudget;
use super::refused::RefusedOptions;
use super::state::{GuestState, NodeServices, RowScope};
use super::ticker::EpochTicker;
use super::{LoadedComponent, Runtime};
use crate::config::GuestLimits;
use crate::services::batch::Parked;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use wasmtime::{Store, UpdateDeadline};

pub struct GuestInstance {
    store: Store<GuestState>,
    exports: Exports,
    /// No call has run on it yet: the first writes pages of its memory
    /// image for the first time, which a row that parks pays again.
    fresh: bool,
    /// The thread it last ran on (0: the main thread, n: the nth guest
    /// thread): its memory is warm in that core's cache.
    thread: usize,
    ticker: EpochTicker,
    /// Declared last, so dropped last: the instance's memory is back in the
    /// node's budget before waiting rows are told.
    _counted: Counted,
}

/// A guest whose instances take this much CPU to start and configure has
/// them started ahead of its rows (`start_ahead`): above the built-in `llm`
/// guest's (0.1–0.3 ms) and the Rust and C examples' (under 0.1 ms), which
/// rows start on demand; the Python and JavaScript examples take 1–1.6 ms.
const SLOW_TO_START: std::time::Duration = std::time::Duration::from_millis(1);

/// The node's live instances (idle or busy), and a signal each time one
/// comes back to the pool or is thrown away: what a row waiting for room in
/// the memory budget waits for.
#[derive(Default)]
struct Census {
    live: AtomicUsize,
    /// Instances started over the run.
    started: AtomicUsize,
    returned: Notify,
    /// Whether rows have had to wait, so it is said once.
    waited: AtomicBool,
}

/// One live instance in its node's census.
struct Counted(Arc<Census>);

impl Counted {
    fn new(census: &Arc<Census>) -> Self {
        census.live.fetch_add(1, Ordering::AcqRel);
        census.started.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(census))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
        self.0.returned.notify_one();
    }
}

/// A linked component, ready to instantiate, under the bindings of the
/// contract it was built against.
enum Pre {
    V0_1(v0_1::NodePre<GuestState>),
    V0_2(v0_2::NodePre<GuestState>),
    V0_3(v0_3::NodePre<GuestState>),
}

impl Pre {
    fn new(
        contract: Contract,
        instance_pre: wasmtime::component::InstancePre<GuestState>,
    ) -> wasmtime::Result<Self> {
        Ok(match contract {
            Contract::V0_1 => Pre::V0_1(v0_1::NodePre::new(instance_pre)?),
            Contract::V0_2 => Pre::V0_2(v0_2::NodePre::new(instance_pre)?),
            Contract::V0_3 => Pre::V0_3(v0_3::NodePre::new(instance_pre)?),
        })
    }

    async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Exports> {
        Ok(match self {
            Pre::V0_1(pre) => Exports::V0_1(pre.instantiate_async(store).await?),
            Pre::V0_2(pre) => Exports::V0_2(pre.instantiate_async(store).await?),
            Pre::V0_3(pre) => Exports::V0_3(pre.instantiate_async(store).await?),
        })
    }
}

/// An instance's exports; results come back as the current contract's types.
enum Exports {
    V0_1(v0_1::Node),
    V0_2(v0_2::Node),
    V0_3(v0_3::Node),
}

impl Exports {
    async fn configure(
        &self,
        store: &mut Store<GuestState>,
        options: &String,
    ) -> wasmtime::Result<Result<NodeInfo, RefusedOptions>> {
        Ok(match self {
            Exports::V0_1(node) => node
                .weir_transform_transform()
                .call_configure(store, options)
                .await?
                .map(v0_1::node_info_to_current)
                .map_err(RefusedOptions::text),
            Exports::V0_2(node) => node
                .weir_transform_transform()
                .call_configure(store, options)
                .await?
                .map(v0_2::node_info_to_current)
                .map_err(RefusedOptions::text),
            Exports::V0_3(node) => node
                .weir_transform_transform()
                .call_configure(store, options)
                .await?
                .map_err(RefusedOptions::typed),
        })
    }

    async fn process(
        &self,
        store: &mut Store<GuestState>,
        rows: &[String],
    ) -> wasmtime::Result<Vec<Outcome>> {
        Ok(match self {
            Exports::V0_1(node) => node
                .weir_transform_transform()
                .call_process(store, rows)
                .await?
                .into_iter()
                .map(v0_1::outcome_to_current)
                .collect(),
            Exports::V0_2(node) => node
                .weir_transform_transform()
                .call_process(store, rows)
                .await?
                .into_iter()
                .map(v0_2::outcome_to_current)
                .collect(),
            Exports::V0_3(node) => {
                node.weir_transform_transform()
                    .call_process(store, rows)
                    .await?
            }
        })
    }
}

/// Why a call of `process` did not return.
pub enum Interrupted {
    /// Not a fault: the rows wait on provider batches (see `Parked`).
    Parked(Parked),
    /// A trap, explained.
    Trap(super::Trap),
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interrupted::Parked(parked) => write!(f, "{parked}"),
            Interrupted::Trap(trap) => write!(f, "{trap}"),
        }
    }
}

impl GuestInstance {
    /// Records that it runs on `thread` (see `idle_instance_for`).
    pub fn ran_on(&mut self, thread: usize) {
        self.thread = thread;
    }

    /// Runs `process`; an `Err` leaves the instance unusable.
    pub async fn process(
        &mut self,
        rows: &[String],
        scope: Vec<RowScope>,
    ) -> Result<Vec<Outcome>, Interrupted> {
        self.store.data_mut().cpu.refill();
        self.store.set_epoch_deadline(1);
        self.store.data_mut().start_call(scope);
        let fresh = std::mem::take(&mut self.fresh);
        let (result, spent) = {
            let call = std::pin::pin!(self.exports.process(&mut self.store, rows));
            Timed::new(self.ticker.running(call), fresh).await
        };
        if let Some(spent) = spent {
            self.store.data().suspend.first_call_took(spent);
        }
        self.store.data_mut().end_call();
        let stderr = self.store.data().stderr.take();
        let outcomes = result.map_err(|trap| match self.store.data_mut().parked.take() {
            Some(parked) => Interrupted::Parked(parked),
            None => Interrupted::Trap(explain_trap(&trap, &stderr)),
        })?;
        Ok(outcomes.into_iter().map(without_empty_code).collect())
    }

    /// The limit that made the last call trap, if one did.
    pub fn limit_hit(&self) -> Option<LimitHit> {
        self.store.data().limit_hit()
    }

    /// Rows of the last call whose log lines or audit attachments went
    /// beyond their caps (`limits.log_kb_per_row`, `limits.attach_kb_per_row`).
    pub fn rows_truncated(&self) -> usize {
        self.store.data().rows_truncated
    }
}

/// A row error must carry a code users can match on; an empty one breaks
/// the contract, in `weir run` and `weir test` alike.
fn without_empty_code(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Failed(e) if e.code.trim().is_empty() => Outcome::Failed(GuestRowError {
            code: "guest_contract_violation".into(),
            message: format!(
                "the component failed the row with an empty error code (message: {})",
                e.message
            ),
        }),
        other => other,
    }
}

/// A trap as users read it: its cause and what the guest last wrote to
/// stderr; the wasm backtrace goes to the debug log.
fn explain_trap(trap: &wasmtime::Error, stderr: &str) -> super::Trap {
    // The backtrace names the guest's own functions: its text, escaped.
    tracing::debug!(
        "guest trap: {}",
        crate::terminal::escape(&format!("{trap:?}"))
    );
    super::Trap {
        cause: trap.root_cause().to_string(),
        stderr: stderr.trim().to_string(),
    }
}

pub struct NodeRuntime {
    pre: Pre,
    contract: Contract,
    engine: wasmtime::Engine,
    ticker: EpochTicker,
    services: Arc<NodeServices>,
    limits: GuestLimits,
    /// The linear memory all the node's instances hold, within
    /// `limits.node_memory_mb`.
    memory: Arc<NodeMemory>,
    /// How many instances may wait on the network; rows beyond park.
    suspend: Arc<SuspendBudget>,
    census: Arc<Census>,
    options_json: String,
    idle: Mutex<Vec<GuestInstance>>,
    info: NodeInfo,
}

impl NodeRuntime {
    /// Links the component and configures a first instance with the node's
    /// options, so that bad options fail before any row is read.
    pub async fn new(
        runtime: &Runtime,
        loaded: &LoadedComponent,
        services: Arc<NodeServices>,
        options_json: String,
        limits: GuestLimits,
    ) -> Result<Self, NodeSetupError> {
        let contract = contract::detect(runtime.engine(), &loaded.component)
            .map_err(NodeSetupError::Contract)?;
        let link_error = |e: wasmtime::Error| NodeSetupError::Link {
            contract,
            message: format!("{e:#}"),
        };
        let instance_pre = runtime
            .linker()
            .instantiate_pre(&loaded.component)
            .map_err(link_error)?;
        let pre = Pre::new(contract, instance_pre).map_err(link_error)?;
        let mut node = Self {
            pre,
            contract,
            engine: runtime.engine().clone(),
            ticker: runtime.ticker().clone(),
            services,
            limits,
            memory: Arc::new(NodeMemory::new(limits.node_memory_bytes)),
            suspend: Arc::new(SuspendBudget::new(usize::MAX)),
            census: Arc::default(),
            options_json,
            idle: Mutex::new(Vec::new()),
            info: NodeInfo {
                output_fields: Vec::new(),
            },
        };
        let (instance, info) = node.instantiate().await?;
        node.info = info;
        node.suspend.set_limit(SuspendBudget::limit_for_node(
            node.memory.held(),
            limits.node_memory_bytes,
        ));
        node.idle.lock().expect("pool lock").push(instance);
        Ok(node)
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.contract
    }

    pub fn output_fields(&self) -> &[String] {
        &self.info.output_fields
    }

    /// A new configured instance; the CPU it took to start is part of what
    /// a row that parks costs (see `parking`).
    async fn instantiate(&self) -> Result<(GuestInstance, NodeInfo), NodeSetupError> {
        self.instantiate_timed().await.0
    }

    /// `instantiate`, with the CPU the start took where the platform tells.
    async fn instantiate_timed(
        &self,
    ) -> (
        Result<(GuestInstance, NodeInfo), NodeSetupError>,
        Option<std::time::Duration>,
    ) {
        let starting = std::pin::pin!(self.start_instance());
        let (started, spent) = Timed::new(self.ticker.running(starting), true).await;
        // Only what a start that succeeds costs: one stopped early by the
        // node's memory budget would make starting look cheap, and parking
        // a row look cheap with it.
        if let (Ok(_), Some(spent)) = (&started, spent) {
            self.suspend.instance_started(spent);
        }
        (started, spent)
    }

    async fn start_instance(&self) -> Result<(GuestInstance, NodeInfo), NodeSetupError> {
        let state = GuestState::new(
            Arc::clone(&self.services),
            &self.limits,
            Arc::clone(&self.memory),
            Arc::clone(&self.suspend),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        store.epoch_deadline_callback(|mut ctx| {
            if ctx.data_mut().cpu.charge() {
                // Let the other rows' tasks run between ticks of a long call.
                Ok(UpdateDeadline::Yield(1))
            } else {
                Err(wasmtime::Error::msg(
                    "the guest used up its CPU time for this call",
                ))
            }
        });
        // Starting and configuring are held to the same limit as a call.
        store.set_epoch_deadline(1);
        let trapped = |store: &Store<GuestState>, e: wasmtime::Error, when: &str| {
            let trap = explain_trap(&e, &store.data().stderr.take());
            NodeSetupError::Trap {
                message: format!("{when}: {trap}"),
                limit: store.data().limit_hit(),
            }
        };
        let exports = match self.pre.instantiate(&mut store).await {
            Ok(exports) => exports,
            Err(e) => return Err(trapped(&store, e, "instantiating")),
        };
        let configured = exports.configure(&mut store, &self.options_json).await;
        let info = match configured {
            Ok(info) => info.map_err(NodeSetupError::Options)?,
            Err(e) => return Err(trapped(&store, e, "configure trapped")),
        };
        store.data_mut().end_call();
        let instance = GuestInstance {
            store,
            exports,
            fresh: true,
            thread: 0,
            ticker: self.ticker.clone(),
            _counted: Counted::new(&self.census),
        };
        Ok((instance, info))
    }

    /// Starts instances before the first row, up to `rows` live in all, for
    /// a guest slow to start (an interpreter inside the component); returns
    /// how many. Instances started while rows run on several threads cost
    /// two to three times the CPU: each write to a page of the memory
    /// image, copy-on-write, makes the kernel flush that page from the
    /// other cores by interrupt, and started one after the other while
    /// nothing else runs, no other core needs it. Stops quietly at the
    /// node's memory budget: rows then wait for an instance, as they would.
    pub async fn start_ahead(&self, rows: usize) -> usize {
        self.start_ahead_above(rows, SLOW_TO_START).await
    }

    /// `start_ahead` for a guest whose instances take `slow` or more to start.
    async fn start_ahead_above(&self, rows: usize, slow: std::time::Duration) -> usize {
        if self.start_cost() < slow {
            return 0;
        }
        let mut started = 0;
        while self.census.live.load(Ordering::Acquire) < rows {
            let (result, spent) = self.instantiate_timed().await;
            match result {
                Ok((instance, _)) => {
                    self.idle.lock().expect("pool lock").push(instance);
                    started += 1;
                }
                Err(e) => {
                    tracing::debug!(
                        "node `{}`: {started} instances started ahead, then: {e}",
                        self.services.node_name
                    );
                    break;
                }
            }
            // The node's first instance also paid for what later ones find
            // ready (the compiled code paged in): the second one tells what
            // each costs.
            if started == 1 && spent.is_none_or(|spent| spent < slow) {
                break;
            }
        }
        started
    }

    /// An idle instance, or a new configured one. While the node's memory
    /// budget has no room for a new one, waits for one of the node's
    /// instances to come back (or be thrown away, freeing its memory): the
    /// budget then limits how many rows run at once instead of failing them.
    pub async fn checkout(&self) -> Result<GuestInstance, Unavailable> {
        loop {
            // Listening before looking: an instance that comes back in
            // between still wakes this row.
            let returned = self.census.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if let Some(instance) = self.idle_instance() {
                return Ok(instance);
            }
            match self.instantiate().await {
                Ok((instance, _)) => return Ok(instance),
                Err(e) if self.worth_waiting(&e) => {
                    self.say_rows_wait();
                    returned.await;
                }
                Err(e) => {
                    return Err(Unavailable {
                        limit: e.limit(),
                        message: e.to_string(),
                    });
                }
            }
        }
    }

    /// A new instance that did not fit the node's memory budget may fit once
    /// one of the node's instances comes back; with none alive, none will.
    fn worth_waiting(&self, e: &NodeSetupError) -> bool {
        e.limit() == Some(LimitHit::NodeMemory) && self.census.live.load(Ordering::Acquire) > 0
    }

    fn say_rows_wait(&self) {
        if !self.census.waited.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                "node `{}`: its instances hold its memory budget (limits.node_memory_mb: {}), so \
                 rows wait for an instance rather than start a new one; a larger budget lets \
                 more run at once",
                self.services.node_name,
                self.limits.node_memory_bytes >> 20
            );
        }
    }

    /// Every instance may wait on the network: for a node whose rows
    /// already run a few at a time, and whose waiting rows are packed as
    /// data without their recorded answers (Batch API mode).
    pub fn keep_instances_suspended(&self) {
        self.suspend.set_limit(usize::MAX);
    }

    /// An idle instance, if one is waiting; `checkout` starts one otherwise.
    fn idle_instance(&self) -> Option<GuestInstance> {
        self.idle.lock().expect("pool lock").pop()
    }

    /// An idle instance for a call on `thread` (see `warmest_for`).
    pub fn idle_instance_for(&self, thread: usize) -> Option<GuestInstance> {
        let mut idle = self.idle.lock().expect("pool lock");
        warmest_for(&idle, thread, |i| i.thread).map(|at| idle.remove(at))
    }

    /// The CPU a new instance takes to start and configure (a running mean).
    pub fn start_cost(&self) -> std::time::Duration {
        self.suspend.start_cost()
    }

    /// What a new instance usually takes to start, a cold start aside.
    pub fn typical_start_cost(&self) -> std::time::Duration {
        self.suspend.typical_start_cost()
    }

    /// The CPU a new instance's first call takes (a running mean).
    pub fn first_call_cost(&self) -> std::time::Duration {
        self.suspend.first_call_cost()
    }

    pub fn checkin(&self, instance: GuestInstance) {
        self.idle.lock().expect("pool lock").push(instance);
        self.census.returned.notify_one();
    }

    /// Instances started over the run, and rows that parked without theirs.
    pub fn starts_and_parks(&self) -> (usize, u64) {
        (
            self.census.started.load(Ordering::Relaxed),
            self.suspend.rows_parked(),
        )
    }

    pub fn instances_idle(&self) -> usize {
        self.idle.lock().expect("pool lock").len()
    }

    /// The most linear memory the node's instances held at once.
    pub fn memory_peak(&self) -> usize {
        self.memory.peak()
    }
}

/// Where in `idle` (returned oldest first) the instance for a call on
/// `thread` is: the last to come back from that thread, whose memory that
/// core's cache still holds, else the last to come back at all. An instance
/// moved between cores costs its call the misses that bring its memory over.
fn warmest_for<T>(idle: &[T], thread: usize, ran_on: impl Fn(&T) -> usize) -> Option<usize> {
    idle.iter()
        .rposition(|i| ran_on(i) == thread)
        .or_else(|| idle.len().checked_sub(1))
}

/// Why no instance could be had for a call: a new one could not start.
#[derive(Debug)]
pub struct Unavailable {
    /// The limit that stopped it, e.g. the node's memory budget being spent.
    pub limit: Option<LimitHit>,
    pub message: String,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Unavailable {}

#[derive(Debug)]
pub enum NodeSetupError {
    /// The component targets no contract version this host supports.
    Contract(String),
    /// The component does not fit the `weir:transform` world it names.
    Link { contract: Contract, message: String },
    /// The component trapped while starting, past `limit` if it hit one.
    Trap {
        message: String,
        limit: Option<LimitHit>,
    },
    /// The component refused its options.
    Options(RefusedOptions),
}

impl NodeSetupError {
    /// The limit that stopped the component while it started, if one did.
    pub fn limit(&self) -> Option<LimitHit> {
        match self {
            Self::Trap { limit, .. } => *limit,
            _ => None,
        }
    }
}

impl std::fmt::Display for NodeSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Contract(m) => write!(f, "{m}"),
            Self::Link { contract, message } => write!(
                f,
                "the component does not implement the weir:transform@{} world: {message}",
                contract.version()
            ),
            Self::Trap { message, .. } => {
                write!(f, "the component failed while starting: {message}")
            }
            Self::Options(m) => write!(f, "{m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::builtin;
    use crate::runtime::state::Outbound;
    use std::time::Duration;

    /// The built-in `llm` guest as a node; nothing here sends a request.
    async fn llm_node(runtime: &Runtime, limits: GuestLimits) -> NodeRuntime {
        let loaded = runtime
            .load(builtin::find("llm").unwrap().bytes, "llm")
            .unwrap();
        let services = Arc::new(NodeServices {
            node_name: "ask".into(),
            endpoints: vec!["llm".into()],
            outbound: Outbound::Live(Default::default()),
            audit: None,
        });
        let options = r#"{"template": "{{ row.text }}"}"#.to_string();
        NodeRuntime::new(runtime, &loaded, services, options, limits)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn instances_started_ahead_wait_idle_up_to_the_rows_expected() {
        let runtime = Runtime::new().unwrap();
        let node = llm_node(&runtime, GuestLimits::default()).await;
        assert_eq!(node.instances_idle(), 1, "the one that checked the options");
        let started = node.start_ahead_above(6, Duration::ZERO).await;
        assert_eq!(started, 5);
        assert_eq!(node.instances_idle(), 6);
        assert_eq!(node.start_ahead_above(6, Duration::ZERO).await, 0);
        assert_eq!(
            node.start_ahead_above(9, Duration::MAX).await,
            0,
            "a guest quick to start is started on demand"
        );
    }

    #[tokio::test]
    async fn a_second_instance_quick_to_start_ends_the_starting_ahead() {
        let runtime = Runtime::new().unwrap();
        let node = llm_node(&runtime, GuestLimits::default()).await;
        // As though the first start had been slow: the threshold lies
        // between no time at all and anything the next start can take.
        node.suspend.instance_started(Duration::from_secs(3600));
        let started = node.start_ahead_above(6, Duration::from_secs(60)).await;
        assert_eq!(started, 1, "the second instance tells, and is kept");
        assert_eq!(node.instances_idle(), 2);
    }

    #[tokio::test]
    async fn starting_ahead_stops_quietly_at_the_nodes_memory_budget() {
        let runtime = Runtime::new().unwrap();
        let probe = llm_node(&runtime, GuestLimits::default()).await;
        let each = probe.memory_peak();
        let limits = GuestLimits {
            node_memory_bytes: each * 3,
            ..GuestLimits::default()
        };
        let node = llm_node(&runtime, limits).await;
        let started = node.start_ahead_above(50, Duration::ZERO).await;
        assert_eq!(started, 2, "three instances fit the budget");
        assert_eq!(node.instances_idle(), 3);
    }

    #[test]
    fn a_call_takes_the_instance_last_back_from_its_own_thread_else_the_last_back() {
        // Each idle instance stands for the thread it last ran on.
        let idle = [0, 1, 0, 1, 1];
        let ran_on = |thread: &usize| *thread;
        assert_eq!(warmest_for(&idle, 0, ran_on), Some(2));
        assert_eq!(warmest_for(&idle, 1, ran_on), Some(4));
        assert_eq!(warmest_for(&idle, 2, ran_on), Some(4));
        assert_eq!(warmest_for(&[] as &[usize], 0, ran_on), None);
    }
}
