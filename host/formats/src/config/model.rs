//! The pipeline file's shape. Every struct refuses unknown keys so that a typo
//! is an error at its line rather than a setting silently ignored.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    pub source: SourceSpec,
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointSpec>,
    #[serde(default)]
    pub transforms: Vec<TransformSpec>,
    pub sinks: Vec<SinkSpec>,
    #[serde(default)]
    pub audit: AuditSpec,
    /// Where failed rows go unless their node says otherwise: `discard`, or a
    /// sink. Without it they are counted, reported and audited as failed.
    #[serde(default)]
    pub on_error: Option<OnErrorSpec>,
    /// The most the whole run may spend, in USD, by the endpoints' prices.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// How many rows, the first of a run to finish, failing alike stop it.
    #[serde(default)]
    pub stop_when_first_rows_fail: Option<u32>,
}

/// USD per million tokens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSpec {
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Prompt tokens the provider served from its prompt cache; the input
    /// price when absent.
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
    /// Prices of particular models, by the model name requests give.
    #[serde(default)]
    pub models: BTreeMap<String, ModelPriceSpec>,
    /// The share taken off these prices for answers through the provider's
    /// Batch API (`mode: batch`): 0.5 (half price) when absent.
    #[serde(default)]
    pub batch_discount: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPriceSpec {
    pub input_per_million: f64,
    pub output_per_million: f64,
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
}

/// `cache: true` (a file beside the audit database), `false`, or a path.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum CacheSpec {
    Enabled(bool),
    Path(String),
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec::Enabled(false)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Csv,
    Jsonl,
    /// A source's `.json`: one JSON array of objects, or JSON Lines under
    /// that name (as many datasets are published), told by its first byte.
    Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Relative to the pipeline file.
    pub path: String,
    /// Taken from the extension when absent.
    #[serde(default)]
    pub format: Option<Format>,
    /// A CSV's field separator; told from the header line when absent.
    #[serde(default)]
    pub delimiter: Option<String>,
    /// The file's text encoding, by its WHATWG label; UTF-8 when absent.
    #[serde(default)]
    pub encoding: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkSpec {
    pub path: String,
    #[serde(default)]
    pub format: Option<Format>,
    /// A CSV's field separator; a comma when absent.
    #[serde(default)]
    pub delimiter: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointKind {
    /// OpenAI-compatible chat completions: OpenAI, OpenRouter, vLLM, Ollama, …
    #[default]
    Openai,
    /// Azure OpenAI deployments (`api-key` header, deployment in the URL).
    AzureOpenai,
    /// Anthropic's Messages API (`x-api-key`, `anthropic-version`); chat
    /// requests are sent in its shape and its answers read in both.
    Anthropic,
    /// A plain JSON-over-HTTP POST to `base_url` as given.
    Http,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    #[serde(default)]
    pub kind: EndpointKind,
    /// `openai`: defaults to https://api.openai.com/v1. Required otherwise.
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key: Option<String>,
    /// `azure-openai` only.
    #[serde(default)]
    pub deployment: Option<String>,
    /// `azure-openai` only.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Extra request headers (e.g. OpenRouter's `HTTP-Referer`); never shown to guests.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Requests in flight at once across every node and row using this endpoint.
    #[serde(default = "defaults::pool_size")]
    pub pool_size: usize,
    /// How long capacity errors (429/503/529) are retried, from the first attempt.
    #[serde(default = "defaults::max_capacity_retry_seconds")]
    pub max_capacity_retry_seconds: f64,
    /// Retries of transient failures (other 5xx, timeouts, broken connections).
    #[serde(default = "defaults::max_retries")]
    pub max_retries: u32,
    #[serde(default = "defaults::request_timeout_seconds")]
    pub request_timeout_seconds: f64,
    #[serde(default = "defaults::connect_timeout_seconds")]
    pub connect_timeout_seconds: f64,
    /// The largest answer read, in MiB: an endpoint that sends more (a
    /// proxy streaming without end, a base_url that serves files) fails the
    /// attempt rather than fill the machine's memory, one copy per request
    /// in flight.
    #[serde(default = "defaults::max_answer_mb")]
    pub max_answer_mb: u64,
    /// Let an HTTPS endpoint that offers HTTP/2 carry every request over one
    /// connection. Off, each request in flight has a connection of its own
    /// (HTTP/1.1, as the OpenAI and Anthropic SDKs do): over one HTTP/2
    /// connection the requests in flight stop at the server's stream limit
    /// (often 100 to 256) whatever `pool_size` says, the rest waiting in the
    /// client where they look like a queue at the server.
    #[serde(default)]
    pub http2: bool,
    /// The longest an attempt waits for its answer to begin (the response
    /// head), out of `request_timeout_seconds`. A server that queues instead
    /// of answering 429 (llama.cpp, vLLM, Ollama) holds a request's answer
    /// back while it waits in its queue: past this, the attempt counts as a
    /// capacity answer — retried until `max_capacity_retry_seconds` without
    /// spending `max_retries`, and a sign of overload to the adaptive limit;
    /// one with no answer from the endpoint meanwhile (and no timeout ahead
    /// of it in the queue) counts towards the breaker too.
    /// Unset: only `request_timeout_seconds` applies.
    #[serde(default)]
    pub first_byte_timeout_seconds: Option<f64>,
    /// Give up an attempt that takes `attempt_timeout_factor` times as long
    /// as the endpoint's recent slowest successful attempts (their 99th
    /// percentile), at least `min_attempt_timeout_seconds`, and retry it: a
    /// hung request would otherwise hold its row, and the rows behind it,
    /// for all of `request_timeout_seconds`. Each retry of it gets twice the
    /// time, up to `request_timeout_seconds`.
    #[serde(default = "defaults::adaptive_attempt_timeout")]
    pub adaptive_attempt_timeout: bool,
    #[serde(default = "defaults::attempt_timeout_factor")]
    pub attempt_timeout_factor: f64,
    #[serde(default = "defaults::min_attempt_timeout_seconds")]
    pub min_attempt_timeout_seconds: f64,
    /// Adapt the number of requests in flight to the endpoint's capacity
    /// (AIMD, up to `pool_size`); when false, always use `pool_size`.
    #[serde(default = "defaults::adaptive_concurrency")]
    pub adaptive_concurrency: bool,
    /// Where the adaptive limit starts; it doubles every round trip until the
    /// first capacity error.
    #[serde(default = "defaults::initial_concurrency")]
    pub initial_concurrency: usize,
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Estimated from each request's text (~4 characters a token) plus its `max_tokens`.
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    /// Failures in a row (broken connections, timeouts, 5xx other than 503)
    /// that open the circuit breaker; two or more in a row over a whole
    /// `request_timeout_seconds` (`first_byte_timeout_seconds` when shorter)
    /// open it too.
    #[serde(default = "defaults::breaker_failures")]
    pub breaker_failures: u32,
    /// How long the breaker stays open before a probe request.
    #[serde(default = "defaults::breaker_cooldown_seconds")]
    pub breaker_cooldown_seconds: f64,
    /// An endpoint whose breaker stays open this long is taken for down: the
    /// run stops, resumable, instead of failing its rows one by one.
    #[serde(default = "defaults::abort_after_seconds")]
    pub abort_after_seconds: f64,
    /// What the endpoint charges; gives each call its cost.
    #[serde(default)]
    pub price: Option<PriceSpec>,
    /// Answer identical requests from a store instead of sending them again.
    #[serde(default)]
    pub cache: CacheSpec,
    /// In a sharded run, each shard gets `requests_per_minute` and
    /// `tokens_per_minute` divided by the shard count, and takes its share
    /// of the rate windows the provider reports (at least that one, more
    /// where fewer shards are running), unless this is true (each shard has
    /// its own key, say).
    #[serde(default)]
    pub rate_limits_per_shard: bool,
    /// The shards of a sharded run that share this endpoint's key, and with
    /// it the rate windows its answers report (0 outside a sharded run).
    #[serde(skip)]
    pub shards_sharing_windows: u32,
    /// `online` sends each request as it comes; `batch` gathers them into the
    /// provider's Batch API: half the price, answers within 24 hours.
    #[serde(default)]
    pub mode: EndpointMode,
    /// How often a provider batch's status is asked for.
    #[serde(default = "defaults::batch_poll_seconds")]
    pub batch_poll_seconds: f64,
    /// Where a request goes after its batch line failed for capacity or a
    /// server error, or expired: into the next batch, or online.
    #[serde(default)]
    pub batch_fallback: BatchFallback,
    /// At most this many requests in one provider batch; the provider's
    /// limit when unset.
    #[serde(default)]
    pub batch_max_requests: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointMode {
    #[default]
    Online,
    Batch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BatchFallback {
    #[default]
    Batch,
    Online,
}

pub mod defaults {
    pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
    pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

    pub fn pool_size() -> usize {
        8
    }
    pub fn max_capacity_retry_seconds() -> f64 {
        3600.0
    }
    /// Five retries: an endpoint failing one request in seven for passing
    /// reasons (a proxy's 502, a reset) fails about one row in 118,000,
    /// where three failed one in 2,400; 5xx answers are not billed.
    pub fn max_retries() -> u32 {
        5
    }
    pub fn request_timeout_seconds() -> f64 {
        120.0
    }
    pub fn connect_timeout_seconds() -> f64 {
        10.0
    }
    pub fn max_answer_mb() -> u64 {
        64
    }
    pub fn cpu_ms_per_call() -> u64 {
        10_000
    }
    pub fn memory_mb() -> u64 {
        512
    }
    pub fn output_mb_per_row() -> f64 {
        16.0
    }
    /// A node may hold its concurrency of instances: without a budget across
    /// them, `memory_mb` times a few hundred instances is many gigabytes.
    /// 768 MiB keeps a default one-node run under 1 GB.
    pub fn node_memory_mb() -> u64 {
        768
    }
    pub fn max_rows_per_input() -> usize {
        10_000
    }
    pub fn log_kb_per_row() -> u64 {
        64
    }
    pub fn attach_kb_per_row() -> u64 {
        1024
    }
    pub fn audit_payloads() -> bool {
        true
    }
    pub fn adaptive_concurrency() -> bool {
        true
    }
    pub fn initial_concurrency() -> usize {
        4
    }
    pub fn adaptive_attempt_timeout() -> bool {
        true
    }
    pub fn attempt_timeout_factor() -> f64 {
        3.0
    }
    pub fn min_attempt_timeout_seconds() -> f64 {
        5.0
    }
    pub fn breaker_failures() -> u32 {
        10
    }
    pub fn breaker_cooldown_seconds() -> f64 {
        5.0
    }
    pub fn abort_after_seconds() -> f64 {
        60.0
    }
    pub fn batch_poll_seconds() -> f64 {
        30.0
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformSpec {
    pub name: String,
    /// A built-in name (`llm`) or a path to a `.wasm` component.
    pub component: String,
    /// Handed to the component's `configure` as a JSON object.
    #[serde(default)]
    pub options: Option<serde_json::Value>,
    /// The endpoints this node may call: a list of endpoint names, or a map
    /// from the name the component uses to the endpoint's name.
    #[serde(default)]
    pub endpoints: Grants,
    /// Rows in flight in this node at once; defaults to the pool sizes of its
    /// endpoints plus room for rows waiting out a retry's back-off.
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// Rows this node may have finished while an earlier row is still in it:
    /// output keeps source order, and this is how far the rows behind a slow
    /// one may go on meanwhile.
    #[serde(default)]
    pub reorder_window: Option<usize>,
    /// The longest a row may spend in this node's calls, retries included;
    /// then its pending calls fail with `deadline-exceeded`.
    #[serde(default)]
    pub row_deadline_seconds: Option<f64>,
    /// Hand the component rows in batches rather than one at a time.
    #[serde(default)]
    pub batch: Option<BatchSpec>,
    /// Where rows that fail in this node go (the pipeline's `on_error` when absent).
    #[serde(default)]
    pub on_error: Option<OnErrorSpec>,
    /// What the component may use of the machine.
    #[serde(default)]
    pub limits: LimitsSpec,
}

/// A guest's box: a call that goes beyond it traps and fails only its rows.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// CPU time one call of the component may use (waiting for its
    /// endpoints does not count).
    #[serde(default = "defaults::cpu_ms_per_call")]
    pub cpu_ms_per_call: u64,
    /// Linear memory of one instance.
    #[serde(default = "defaults::memory_mb")]
    pub memory_mb: u64,
    /// Linear memory of all the node's instances together (so also the most
    /// one instance may have). Defaults to the larger of 768 and `memory_mb`.
    #[serde(default)]
    pub node_memory_mb: Option<u64>,
    /// JSON one row may come back as, all its output rows together.
    #[serde(default = "defaults::output_mb_per_row")]
    pub output_mb_per_row: f64,
    /// Rows one input row may become at this node.
    #[serde(default = "defaults::max_rows_per_input")]
    pub max_rows_per_input: usize,
    /// Log text the component may write per row of a call; the rest is
    /// dropped and counted.
    #[serde(default = "defaults::log_kb_per_row")]
    pub log_kb_per_row: u64,
    /// Audit attachments (keys and values) the component may attach to one
    /// row; the rest is dropped and counted.
    #[serde(default = "defaults::attach_kb_per_row")]
    pub attach_kb_per_row: u64,
    /// Stop the node (its remaining rows fail at once) after this many calls
    /// in a row trapped; never when absent.
    #[serde(default)]
    pub stop_after_traps: Option<u32>,
}

impl Default for LimitsSpec {
    fn default() -> Self {
        Self {
            cpu_ms_per_call: defaults::cpu_ms_per_call(),
            memory_mb: defaults::memory_mb(),
            node_memory_mb: None,
            output_mb_per_row: defaults::output_mb_per_row(),
            max_rows_per_input: defaults::max_rows_per_input(),
            log_kb_per_row: defaults::log_kb_per_row(),
            attach_kb_per_row: defaults::attach_kb_per_row(),
            stop_after_traps: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSpec {
    /// Rows per batch at most.
    pub count: usize,
    /// A partial batch goes this long after its first row arrived, even while
    /// the source is idle. Without it, a batch waits until it is full or the
    /// source ends.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    pub mode: BatchMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BatchMode {
    /// N rows in, N rows out, each with its own outcome.
    #[default]
    Passthrough,
    /// N rows in, whatever the component makes of them out (a summary, say);
    /// the members end as consumed by the batch.
    Transform,
}

/// `discard`, or a sink (`{path: failed.csv}`) for failed rows with their error.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OnErrorSpec {
    Keyword(String),
    Sink(SinkSpec),
}

#[derive(Debug, Deserialize, Default)]
#[serde(untagged)]
pub enum Grants {
    #[default]
    None,
    List(Vec<String>),
    Aliased(BTreeMap<String, String>),
}

impl Grants {
    /// (name the component uses, endpoint name) pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Grants::None => Vec::new(),
            Grants::List(names) => names.iter().map(|n| (n.clone(), n.clone())).collect(),
            Grants::Aliased(map) => map.iter().map(|(a, n)| (a.clone(), n.clone())).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSpec {
    /// Defaults to `weir-audit.sqlite` beside the first sink.
    #[serde(default)]
    pub path: Option<String>,
    /// Keep bodies (rows, requests, responses, outputs) as well as their
    /// hashes: `weir explain` shows them and a resume answers from them.
    #[serde(default = "defaults::audit_payloads")]
    pub payloads: bool,
}

impl Default for AuditSpec {
    fn default() -> Self {
        Self {
            path: None,
            payloads: defaults::audit_payloads(),
        }
    }
}
