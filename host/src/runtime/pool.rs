//! A node's instances. Each instance runs one `process` call at a time, so a
//! node keeps a pool of configured instances, created on demand up to its
//! concurrency and reused afterwards; one that trapped is thrown away.

use super::bindings::{self, NodeInfo, NodePre, Outcome};
use super::limits::LimitHit;
use super::state::{GuestState, NodeServices, RowScope};
use super::{LoadedComponent, Runtime};
use crate::config::GuestLimits;
use anyhow::{Result, anyhow};
use std::sync::{Arc, Mutex};
use wasmtime::{Store, UpdateDeadline};

pub struct GuestInstance {
    store: Store<GuestState>,
    bindings: bindings::Node,
}

impl GuestInstance {
    /// Runs `process`; an `Err` is a trap, which leaves the instance unusable.
    pub async fn process(&mut self, rows: &[String], scope: Vec<RowScope>) -> Result<Vec<Outcome>> {
        self.store.data_mut().cpu.refill();
        self.store.set_epoch_deadline(1);
        self.store.data_mut().scope = scope;
        let result = self
            .bindings
            .weir_transform_transform()
            .call_process(&mut self.store, rows)
            .await
            .map_err(anyhow::Error::from);
        self.store.data_mut().scope.clear();
        result
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

pub struct NodeRuntime {
    pre: NodePre<GuestState>,
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
        let instance_pre = runtime
            .linker()
            .instantiate_pre(&loaded.component)
            .map_err(|e| NodeSetupError::Link(format!("{e:#}")))?;
        let pre = NodePre::new(instance_pre).map_err(|e| NodeSetupError::Link(format!("{e:#}")))?;
        let mut node = Self {
            pre,
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
        let bindings = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| NodeSetupError::Trap(format!("instantiating: {e:#}")))?;
        let info = bindings
            .weir_transform_transform()
            .call_configure(&mut store, &self.options_json)
            .await
            .map_err(|e| NodeSetupError::Trap(format!("configure trapped: {e:#}")))?
            .map_err(NodeSetupError::Options)?;
        Ok((GuestInstance { store, bindings }, info))
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
    /// The component does not fit the `weir:transform` world.
    Link(String),
    /// The component trapped while starting.
    Trap(String),
    /// The component refused its options.
    Options(String),
}

impl std::fmt::Display for NodeSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Link(m) => write!(
                f,
                "the component does not implement the weir:transform@{} world: {m}",
                bindings::WIT_VERSION
            ),
            Self::Trap(m) => write!(f, "the component failed while starting: {m}"),
            Self::Options(m) => write!(f, "{m}"),
        }
    }
}
