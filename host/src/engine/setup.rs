//! Turns a checked pipeline into running parts: the executor, and for each
//! node its compiled component and a configured instance pool.

use crate::config::{ComponentRef, NodeConfig, Pipeline};
use crate::context::causes;
use crate::hashing;
use crate::runtime::{NodeRuntime, NodeServices, Outbound, Runtime, builtin};
use crate::services::audit::{AuditLog, EndpointRecord, NodeRecord, Record};
use crate::services::budget::Budget;
use crate::services::cache::ResponseCache;
use crate::services::executor::{Endpoint, Executor, RunControls};
use crate::services::stop::RunStop;
use crate::terminal::escape;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

pub struct Node {
    /// The node as the pipeline file configures it.
    pub config: NodeConfig,
    /// Calls in a row that trapped, for `limits.stop_after_traps`.
    pub traps_in_a_row: std::sync::atomic::AtomicU32,
    /// Rows whose guest log lines or audit attachments were cut at their caps.
    pub rows_truncated: std::sync::atomic::AtomicU64,
    /// How long its reorder window held rows back behind a slow one.
    pub window_held: Arc<super::ordered::WindowHeld>,
    pub runtime: Arc<NodeRuntime>,
    /// Its guest's time per call: whether its calls go to the guest threads.
    pub guest_cost: super::guest_cost::GuestCost,
    /// Rows running the component at once, for a node granted a Batch API
    /// endpoint: its many waiting rows hold no instance, and those that run
    /// again when a batch ends take turns instead of each starting one.
    pub guest_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// The online endpoints it is granted: their limits bound the rows it
    /// runs at once (`rows_wanted`).
    pub online: Vec<Arc<Endpoint>>,
}

pub struct Prepared {
    pub executor: Arc<Executor>,
    pub nodes: Vec<Arc<Node>>,
    /// What the audit trail records of the endpoints and nodes, and what a
    /// resume compares with the run it carries on.
    pub endpoint_records: Vec<EndpointRecord>,
    pub node_records: Vec<NodeRecord>,
}

pub async fn prepare(
    pipeline: &Pipeline,
    audit: Option<&Arc<AuditLog>>,
    controls: &RunControls,
) -> Result<Prepared> {
    let executor = Arc::new(
        Executor::new(&pipeline.endpoints, audit.cloned(), controls)
            .map_err(|e| pipeline.file.error_at(&["endpoints"], causes(&e)))?,
    );
    let endpoint_records = executor
        .endpoints()
        .map(|endpoint| EndpointRecord {
            name: endpoint.name.clone(),
            kind: endpoint.kind_name().to_string(),
            url: endpoint.display_url(),
            secret_fingerprint: endpoint
                .spec
                .api_key
                .as_deref()
                .map(hashing::secret_fingerprint),
            settings_json: serde_json::json!({
                "pool_size": endpoint.spec.pool_size,
                "max_capacity_retry_seconds": endpoint.spec.max_capacity_retry_seconds,
                "max_retries": endpoint.spec.max_retries,
                "request_timeout_seconds": endpoint.spec.request_timeout_seconds,
                "connect_timeout_seconds": endpoint.spec.connect_timeout_seconds,
                "http2": endpoint.spec.http2,
                "adaptive_concurrency": endpoint.spec.adaptive_concurrency,
                "initial_concurrency": endpoint.spec.initial_concurrency,
                "requests_per_minute": endpoint.spec.requests_per_minute,
                "tokens_per_minute": endpoint.spec.tokens_per_minute,
                "breaker_failures": endpoint.spec.breaker_failures,
                "breaker_cooldown_seconds": endpoint.spec.breaker_cooldown_seconds,
                "header_names": endpoint.spec.headers.keys().collect::<Vec<_>>(),
            })
            .to_string(),
        })
        .collect();
    if audit.is_some() {
        for endpoint in executor.endpoints() {
            endpoint.carry_learned_limit(&models_asked_of(pipeline, &endpoint.name));
        }
    }
    let runtime = Runtime::new().map_err(RunError::Runtime)?;
    let mut nodes = Vec::with_capacity(pipeline.nodes.len());
    let mut node_records = Vec::with_capacity(pipeline.nodes.len());
    for config in &pipeline.nodes {
        let (node, record) = prepare_node(pipeline, &runtime, &executor, config, audit).await?;
        nodes.push(Arc::new(node));
        node_records.push(record);
    }
    Ok(Prepared {
        executor,
        nodes,
        endpoint_records,
        node_records,
    })
}

/// The models the nodes granted `endpoint` ask for in their options,
/// comma-separated: with its URL, what identifies an endpoint's capacity.
fn models_asked_of(pipeline: &Pipeline, endpoint: &str) -> String {
    let mut models: Vec<String> = pipeline
        .nodes
        .iter()
        .filter(|n| n.grants.iter().any(|(_, e)| e == endpoint))
        .filter_map(|n| {
            let options: serde_json::Value = serde_json::from_str(&n.options_json).ok()?;
            options.get("model")?.as_str().map(str::to_string)
        })
        .collect();
    models.sort();
    models.dedup();
    models.join(",")
}

/// The run's stop, its budget (`budget_usd` or `--budget-usd`, with what
/// earlier segments spent) and its response caches, one per file.
pub fn controls(
    pipeline: &Pipeline,
    stop: Arc<RunStop>,
    budget_usd: Option<f64>,
    spent_before: f64,
) -> Result<RunControls> {
    let mut opened: BTreeMap<&std::path::Path, Arc<ResponseCache>> = BTreeMap::new();
    let mut caches = BTreeMap::new();
    for (endpoint, path) in &pipeline.caches {
        let cache = match opened.get(path.as_path()) {
            Some(cache) => Arc::clone(cache),
            None => {
                let cache = Arc::new(ResponseCache::open(path).map_err(|e| {
                    pipeline
                        .file
                        .error_at(&["endpoints", endpoint, "cache"], causes(&e))
                })?);
                opened.insert(path, Arc::clone(&cache));
                cache
            }
        };
        caches.insert(endpoint.clone(), cache);
    }
    Ok(RunControls {
        budget: Arc::new(Budget::new(
            budget_usd.or(pipeline.budget_usd),
            spent_before,
            Arc::clone(&stop),
        )),
        stop,
        caches,
    })
}

impl Prepared {
    /// Starts the instances of slow-to-start guests before the first row
    /// (`NodeRuntime::start_ahead`), for a run about to start: as many as
    /// each node's endpoints are expected to keep under way, and no more
    /// than `source_rows` when the source was counted. Nodes in batch mode
    /// keep their rows waiting without instances, and start none.
    pub async fn start_ahead(&self, source_rows: Option<u64>) {
        // A row the source does not have would only keep an instance idle.
        let rows = source_rows.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        for node in self.nodes.iter().filter(|n| n.guest_slots.is_none()) {
            let started = node
                .runtime
                .start_ahead(node.rows_expected().min(rows))
                .await;
            if started > 0 {
                tracing::info!(
                    "node `{}`: {started} instances started ahead of its rows ({} µs of CPU each)",
                    node.config.name,
                    node.runtime.start_cost().as_micros()
                );
            }
        }
    }

    /// Records what the run is made of, for a run that starts now.
    pub fn record_identity(&self, audit: &AuditLog) {
        for e in &self.endpoint_records {
            audit.record(Record::Endpoint(e.clone()));
        }
        for n in &self.node_records {
            audit.record(Record::Node(n.clone()));
        }
    }
}

async fn prepare_node(
    pipeline: &Pipeline,
    runtime: &Runtime,
    executor: &Executor,
    config: &NodeConfig,
    audit: Option<&Arc<AuditLog>>,
) -> Result<(Node, NodeRecord)> {
    let key = config.index.to_string();
    let at = |field: &str, message: String| {
        pipeline.file.error_at(
            &["transforms", &key, field],
            format!("transform `{}`: {message}", config.name),
        )
    };
    let (bytes, origin) =
        builtin::read(&config.component).map_err(|message| at("component", message))?;
    let loaded = runtime
        .load(&bytes, &origin)
        .map_err(|e| at("component", causes(&e)))?;
    let grants: BTreeMap<String, _> = config
        .grants
        .iter()
        .map(|(alias, name)| {
            let endpoint = executor
                .endpoint(name)
                .expect("grants were checked against endpoints");
            (alias.clone(), endpoint)
        })
        .collect();
    let batch_mode = grants.values().any(|e| e.batch().is_some());
    let online: Vec<Arc<Endpoint>> = grants.values().cloned().collect();
    let services = Arc::new(NodeServices {
        node_name: config.name.clone(),
        endpoints: config
            .grants
            .iter()
            .map(|(alias, _)| alias.clone())
            .collect(),
        outbound: Outbound::Live(grants),
        audit: audit.cloned(),
    });
    let node_runtime = NodeRuntime::new(
        runtime,
        &loaded,
        services,
        config.options_json.clone(),
        config.limits,
    )
    .await
    // What the component says (its options error, its stderr) is its own
    // text: escaped, so it prints as what it is.
    .map_err(|e| match e {
        crate::runtime::NodeSetupError::Options(refused) => {
            let option = refused.option_path().unwrap_or_default();
            let mut key_path = vec!["transforms", key.as_str(), "options"];
            key_path.extend(option.iter().map(String::as_str));
            // An option the file leaves out (one the component requires)
            // has no line of its own: the nearest enclosing one stands in.
            let line = crate::config::locate::nearest_line_of(&pipeline.file.text, &key_path, 2);
            crate::config::ConfigError::Invalid {
                path: pipeline.file.path.clone(),
                line,
                message: format!(
                    "transform `{}`: {}",
                    config.name,
                    escape(&refused.to_string())
                ),
            }
        }
        other => at(
            "component",
            format!("{origin}: {}", escape(&other.to_string())),
        ),
    })?;
    let record = NodeRecord {
        node_id: config.index,
        name: config.name.clone(),
        component: match &config.component {
            ComponentRef::Builtin(name) => name.clone(),
            ComponentRef::File(path) => path.display().to_string(),
        },
        component_sha256: loaded.sha256.clone(),
        wit_version: node_runtime.contract().version().to_string(),
        options_sha256: hashing::json_text_sha256(&config.options_json),
        output_fields: node_runtime.output_fields().to_vec(),
    };
    let mut node = Node::new(config.clone(), node_runtime, batch_mode);
    if !batch_mode {
        node.online = online;
    }
    Ok((node, record))
}

impl Node {
    /// The node `config` describes, around its configured instances.
    /// `batch_mode`: it is granted a Batch API endpoint.
    pub fn new(config: NodeConfig, runtime: NodeRuntime, batch_mode: bool) -> Self {
        if batch_mode {
            runtime.keep_instances_suspended();
        }
        Self {
            config,
            traps_in_a_row: Default::default(),
            rows_truncated: Default::default(),
            window_held: Default::default(),
            guest_cost: Default::default(),
            runtime: Arc::new(runtime),
            guest_slots: batch_mode.then(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    std::thread::available_parallelism().map_or(2, |n| n.get()) * 2,
                ))
            }),
            online: Vec::new(),
        }
    }

    /// Rows worth running at once: what its online endpoints' limits can
    /// take (each row waiting in line holds an instance), never more than
    /// its `concurrency`. A node without one runs its `concurrency`.
    pub fn rows_wanted(&self) -> usize {
        self.rows_for(Endpoint::rows_wanted)
    }

    /// `rows_wanted` once the endpoints' limits are where they should
    /// settle (see `Endpoint::rows_expected`): the instances worth starting
    /// ahead of the rows.
    pub fn rows_expected(&self) -> usize {
        self.rows_for(Endpoint::rows_expected)
    }

    /// What `per_endpoint` says of the online endpoints, summed, within
    /// the node's `concurrency`; that `concurrency` without one.
    fn rows_for(&self, per_endpoint: impl Fn(&Endpoint) -> usize) -> usize {
        if self.online.is_empty() {
            return self.config.concurrency;
        }
        let rows: usize = self.online.iter().map(|e| per_endpoint(e)).sum();
        rows.clamp(1, self.config.concurrency)
    }
}
