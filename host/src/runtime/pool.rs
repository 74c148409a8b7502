//! A node's instances. Each instance runs one `process` call at a time, so a
//! node keeps a pool of configured instances, created on demand up to its
//! concurrency and reused afterwards; one that trapped is thrown away.

use super::bindings::{NodeInfo, Outcome, v0_1, v0_2};
use super::contract::{self, Contract};
use super::limits::LimitHit;
use super::state::{GuestState, NodeServices, RowScope};
use super::{LoadedComponent, Runtime};
use crate::config::GuestLimits;
use anyhow::{Result, anyhow};
use std::sync::{Arc, Mutex};
use wasmtime::{Store, UpdateDeadline};

pub struct GuestInstance {
    store: Store<GuestState>,
    exports: Exports,
}

/// A linked component, ready to instantiate, under the bindings of the
/// contract it was built against.
enum Pre {
    V0_1(v0_1::NodePre<GuestState>),
    V0_2(v0_2::NodePre<GuestState>),
}

impl Pre {
    fn new(
        contract: Contract,
        instance_pre: wasmtime::component::InstancePre<GuestState>,
    ) -> wasmtime::Result<Self> {
        Ok(match contract {
            Contract::V0_1 => Pre::V0_1(v0_1::NodePre::new(instance_pre)?),
            Contract::V0_2 => Pre::V0_2(v0_2::NodePre::new(instance_pre)?),
        })
    }

    async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Exports> {
        Ok(match self {
            Pre::V0_1(pre) => Exports::V0_1(pre.instantiate_async(store).await?),
            Pre::V0_2(pre) => Exports::V0_2(pre.instantiate_async(store).await?),
        })
    }
}

/// An instance's exports; results come back as the current contract's types.
enum Exports {
    V0_1(v0_1::Node),
    V0_2(v0_2::Node),
}

impl Exports {
    async fn configure(
        &self,
        store: &mut Store<GuestState>,
        options: &String,
    ) -> wasmtime::Result<Result<NodeInfo, String>> {
        Ok(match self {
            Exports::V0_1(node) => node
                .weir_transform_transform()
                .call_configure(store, options)
                .await?
                .map(v0_1::node_info_to_current),
            Exports::V0_2(node) => {
                node.weir_transform_transform()
                    .call_configure(store, options)
                    .await?
            }
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
            Exports::V0_2(node) => {
                node.weir_transform_transform()
                    .call_process(store, rows)
                    .await?
            }
        })
    }
}

impl GuestInstance {
    /// Runs `process`; an `Err` is a trap, which leaves the instance unusable.
    pub async fn process(&mut self, rows: &[String], scope: Vec<RowScope>) -> Result<Vec<Outcome>> {
        self.store.data_mut().cpu.refill();
        self.store.set_epoch_deadline(1);
        self.store.data_mut().scope = scope;
        let result = self.exports.process(&mut self.store, rows).await;
        self.store.data_mut().scope.clear();
        let stderr = self.store.data().stderr.take();
        result.map_err(|trap| explain_trap(&trap, &stderr))
    }

    /// The limit that made the last call trap, if one did.
    pub fn limit_hit(&self) -> Option<LimitHit> {
        if self.store.data().cpu.hit {
            Some(LimitHit::Cpu)
        } else if self.store.data().memory.hit {
            Some(LimitHit::Memory)
        } else {
            None
        }
    }
}

/// A trap as users read it: its cause and what the guest last wrote to
/// stderr; the wasm backtrace goes to the debug log.
fn explain_trap(trap: &wasmtime::Error, stderr: &str) -> anyhow::Error {
    tracing::debug!("guest trap: {trap:?}");
    let cause = trap.root_cause().to_string();
    let stderr = stderr.trim();
    if stderr.is_empty() {
        anyhow!("{cause}")
    } else {
        anyhow!("{cause}; the component wrote to stderr:\n{stderr}")
    }
}

pub struct NodeRuntime {
    pre: Pre,
    contract: Contract,
    engine: wasmtime::Engine,
    services: Arc<NodeServices>,
    limits: GuestLimits,
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
            services,
            limits,
            options_json,
            idle: Mutex::new(Vec::new()),
            info: NodeInfo {
                output_fields: Vec::new(),
            },
        };
        let (instance, info) = node.instantiate().await?;
        node.info = info;
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

    async fn instantiate(&self) -> Result<(GuestInstance, NodeInfo), NodeSetupError> {
        let state = GuestState::new(Arc::clone(&self.services), &self.limits);
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
        let exports = self.pre.instantiate(&mut store).await.map_err(|e| {
            let trap = explain_trap(&e, &store.data().stderr.take());
            NodeSetupError::Trap(format!("instantiating: {trap}"))
        })?;
        let info = exports
            .configure(&mut store, &self.options_json)
            .await
            .map_err(|e| {
                let trap = explain_trap(&e, &store.data().stderr.take());
                NodeSetupError::Trap(format!("configure trapped: {trap}"))
            })?
            .map_err(NodeSetupError::Options)?;
        Ok((GuestInstance { store, exports }, info))
    }

    /// An idle instance, or a new configured one.
    pub async fn checkout(&self) -> Result<GuestInstance> {
        if let Some(instance) = self.idle.lock().expect("pool lock").pop() {
            return Ok(instance);
        }
        let (instance, _) = self.instantiate().await.map_err(|e| anyhow!("{e}"))?;
        Ok(instance)
    }

    pub fn checkin(&self, instance: GuestInstance) {
        self.idle.lock().expect("pool lock").push(instance);
    }

    pub fn instances_idle(&self) -> usize {
        self.idle.lock().expect("pool lock").len()
    }
}

#[derive(Debug)]
pub enum NodeSetupError {
    /// The component targets no contract version this host supports.
    Contract(String),
    /// The component does not fit the `weir:transform` world it names.
    Link { contract: Contract, message: String },
    /// The component trapped while starting.
    Trap(String),
    /// The component refused its options.
    Options(String),
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
            Self::Trap(m) => write!(f, "the component failed while starting: {m}"),
            Self::Options(m) => write!(f, "{m}"),
        }
    }
}
