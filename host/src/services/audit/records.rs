//! What the host tells the audit trail, one variant per table.

use super::outcome::{NodeStatus, RowOutcome};
use crate::io::FileStamp;
use std::sync::Arc;

/// JSON the audit trail records by its canonical hash. The writer thread
/// canonicalizes and hashes it (and keeps it, when payloads are kept), so the
/// pipeline's own thread never does.
pub enum Json {
    /// Hashed already: the hash.
    Hashed(String),
    /// A JSON document as text.
    Text(Arc<str>),
    /// JSON texts that form an array together (a node's input or output rows).
    Array(Vec<String>),
}

pub struct NewRun {
    pub pipeline_path: String,
    pub config_sha256: String,
    pub source_path: String,
    pub sinks: SinkPaths,
    pub weir_version: String,
    /// `I/N` when the run is one shard of a sharded run.
    pub shard: Option<String>,
    /// With `shard`: how many shards run at once, when told.
    pub shards_at_once: Option<u32>,
}

/// The files a run writes, as `runs.sinks_json` keeps them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SinkPaths {
    pub sinks: Vec<String>,
    pub on_error: Vec<String>,
}

impl SinkPaths {
    /// Every file, sinks first: the order of the engine's writers.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.sinks.iter().chain(&self.on_error)
    }
}

/// What the segment that ends a run knows that the database does not.
pub struct RunEnd {
    /// Per-endpoint statistics of this segment, as JSON.
    pub summary_json: String,
    pub calls_replayed: u64,
    /// The run stopped before its source was done (a signal, an endpoint
    /// down): it stays resumable.
    pub interrupted: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeRecord {
    pub node_id: usize,
    pub name: String,
    pub component: String,
    pub component_sha256: String,
    pub wit_version: String,
    pub options_sha256: String,
    pub output_fields: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EndpointRecord {
    pub name: String,
    pub kind: String,
    pub url: String,
    pub secret_fingerprint: Option<String>,
    pub settings_json: String,
}

pub struct RowRecord {
    pub row_index: u64,
    pub source_line: u64,
    pub content_sha256: String,
}

pub struct NodeStateRecord {
    pub state_id: u64,
    pub row_index: u64,
    pub node_id: usize,
    pub attempt: u32,
    pub status: NodeStatus,
    /// The rows as the node received them.
    pub input: Json,
    /// The rows it returned, when it succeeded.
    pub output: Option<Json>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// The batch the row went through this node in, if the node batches.
    pub batch_id: Option<u64>,
    pub started_at_ms: i64,
    pub duration_ms: u64,
}

/// Rows a batching node handed its component together.
pub struct BatchRecord {
    pub batch_id: u64,
    pub node_id: usize,
    pub mode: &'static str,
    pub members: Vec<u64>,
}

pub struct AttributeRecord {
    pub state_id: u64,
    pub key: String,
    pub value: String,
}

pub struct CallRecord {
    pub state_id: u64,
    pub row_index: u64,
    pub node_id: usize,
    pub call_index: u32,
    pub endpoint: String,
    pub request_index: u32,
    pub attempt: u32,
    pub request: Json,
    pub response: Option<Json>,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub retry_cause: Option<&'static str>,
    pub latency_ms: u64,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub started_at_ms: i64,
    /// Answered from a payload an earlier segment recorded; nothing was sent.
    pub replayed: bool,
    /// (USD, estimated) of a successful attempt, by the endpoint's price.
    pub cost: Option<(f64, bool)>,
    /// Answered from the response cache; nothing was sent.
    pub cached: bool,
    /// The provider batch (its id) that answered this call, in batch mode.
    pub provider_batch: Option<String>,
}

pub struct OutcomeRecord {
    pub row_index: u64,
    pub outcome: RowOutcome,
    pub node_id: Option<usize>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub rows_written: u64,
    /// The `transform` batch the row was consumed by.
    pub batch_id: Option<u64>,
    /// Where the row was written instead of the sinks (its `on_error` sink).
    pub error_sink: Option<String>,
}

/// Outcomes of finished rows with the sink positions just past their output:
/// written in one transaction, so a resume never sees one without the other.
pub struct CommitRecord {
    pub outcomes: Vec<OutcomeRecord>,
    /// Sink path and the bytes it holds once these rows are in.
    pub checkpoints: Vec<(String, u64)>,
}

/// A body kept by its hash: a source row, a request, a response, a node output.
pub struct PayloadRecord {
    /// The row it belongs to: bodies are kept by row.
    pub row_index: u64,
    pub sha256: String,
    pub body: String,
}

/// Something that happened to an endpoint (its circuit breaker opening, …).
pub struct EndpointEventRecord {
    pub endpoint: String,
    pub at_ms: i64,
    pub event: String,
    pub detail: String,
}

/// What an endpoint's adaptive concurrency limit had learned, recorded as
/// the run goes on and when it ends, for the next run against the endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedLimitRecord {
    /// What identifies the endpoint across runs, whatever it is named in
    /// the pipeline: its kind and URL, and the models its requests ask for.
    pub url: String,
    pub model: String,
    pub endpoint: String,
    pub concurrency_limit: u32,
    /// The floor it had learned: the limit is not cut below it.
    pub floor: u32,
    pub no_load_rtt_ms: Option<u32>,
    pub at_ms: i64,
    /// A queue at the endpoint held the limit, not refusals: the limit is
    /// what it serves at once, however few (see `Controller::start_from`).
    pub held_by_queue: bool,
}

pub enum Record {
    Node(NodeRecord),
    Endpoint(EndpointRecord),
    Row(RowRecord),
    NodeState(NodeStateRecord),
    Batch(BatchRecord),
    Attribute(AttributeRecord),
    Call(CallRecord),
    Commit(CommitRecord),
    Payload(PayloadRecord),
    EndpointEvent(EndpointEventRecord),
    LearnedLimit(LearnedLimitRecord),
    /// This process starts its segment of the run, after these many rows
    /// were already ended by earlier ones, and finds the source so.
    SegmentStarted {
        rows_skipped: u64,
        source: FileStamp,
    },
    /// This segment read the whole source; the hash of its bytes.
    SourceRead {
        sha256: String,
    },
    /// This segment found a row the run had read differ, and stopped: the
    /// source it saw is not one the run can carry on from.
    SourceRefused,
    /// The run carries on from a source that changed (`--allow-changed-source`):
    /// rows without an outcome are forgotten, and recorded again as they are
    /// read now.
    SourceReplaced,
    /// Recorded paths that now go by another name (a relative path an older
    /// weir recorded, now absolute): old, new.
    PathsRenamed(Vec<(String, String)>),
    /// Commit what came before, then acknowledge.
    Flush(std::sync::mpsc::SyncSender<()>),
}

impl Json {
    fn heap_bytes(&self) -> usize {
        match self {
            Json::Hashed(sha256) => sha256.len(),
            Json::Text(text) => text.len(),
            Json::Array(texts) => texts.iter().map(|t| t.len() + TEXT_OVERHEAD).sum(),
        }
    }
}

/// What an allocation costs besides its bytes: the allocator's header and
/// rounding, and the `String` or `Vec` that owns it.
const TEXT_OVERHEAD: usize = 40;

fn text_bytes(text: &str) -> usize {
    text.len() + TEXT_OVERHEAD
}

fn optional_text_bytes(text: &Option<String>) -> usize {
    text.as_deref().map_or(0, text_bytes)
}

impl Record {
    /// About what the record holds in memory until it is written: what the
    /// audit queue's byte budget counts.
    pub fn approx_bytes(&self) -> usize {
        let heap = match self {
            Record::Node(n) => {
                text_bytes(&n.name)
                    + text_bytes(&n.component)
                    + n.output_fields.iter().map(|f| text_bytes(f)).sum::<usize>()
            }
            Record::Endpoint(e) => text_bytes(&e.settings_json) + text_bytes(&e.url),
            Record::Row(r) => text_bytes(&r.content_sha256),
            Record::NodeState(s) => {
                s.input.heap_bytes()
                    + s.output.as_ref().map_or(0, Json::heap_bytes)
                    + optional_text_bytes(&s.error_code)
                    + optional_text_bytes(&s.error_message)
            }
            Record::Batch(b) => b.members.len() * 8 + TEXT_OVERHEAD,
            Record::Attribute(a) => text_bytes(&a.key) + text_bytes(&a.value),
            Record::Call(c) => {
                text_bytes(&c.endpoint)
                    + c.request.heap_bytes()
                    + c.response.as_ref().map_or(0, Json::heap_bytes)
                    + optional_text_bytes(&c.error)
                    + optional_text_bytes(&c.provider_batch)
            }
            Record::Commit(c) => {
                c.outcomes
                    .iter()
                    .map(|o| {
                        std::mem::size_of::<OutcomeRecord>()
                            + optional_text_bytes(&o.error_code)
                            + optional_text_bytes(&o.error_message)
                            + optional_text_bytes(&o.error_sink)
                    })
                    .sum::<usize>()
                    + c.checkpoints
                        .iter()
                        .map(|(path, _)| text_bytes(path) + 8)
                        .sum::<usize>()
            }
            Record::Payload(p) => text_bytes(&p.sha256) + text_bytes(&p.body),
            Record::EndpointEvent(e) => {
                text_bytes(&e.endpoint) + text_bytes(&e.event) + text_bytes(&e.detail)
            }
            Record::LearnedLimit(l) => {
                text_bytes(&l.url) + text_bytes(&l.model) + text_bytes(&l.endpoint)
            }
            Record::SourceRead { sha256 } => text_bytes(sha256),
            Record::PathsRenamed(paths) => paths
                .iter()
                .map(|(old, new)| text_bytes(old) + text_bytes(new))
                .sum(),
            Record::SegmentStarted { .. }
            | Record::SourceRefused
            | Record::SourceReplaced
            | Record::Flush(_) => 0,
        };
        std::mem::size_of::<Record>() + heap
    }
}
