//! What the host tells the audit trail, one variant per table.

pub struct NewRun {
    pub pipeline_path: String,
    pub config_sha256: String,
    pub weir_version: String,
}

pub struct RunEnd {
    pub status: &'static str,
    pub rows_total: u64,
    pub rows_completed: u64,
    pub rows_failed: u64,
    /// Rows per terminal outcome, as a JSON object.
    pub outcomes_json: String,
    pub summary_json: String,
}

pub struct NodeRecord {
    pub node_id: usize,
    pub name: String,
    pub component: String,
    pub component_sha256: String,
    pub wit_version: String,
    pub options_sha256: String,
    pub output_fields: Vec<String>,
}

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
    pub status: &'static str,
    pub input_sha256: String,
    pub output_sha256: Option<String>,
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
    pub call_index: u32,
    pub endpoint: String,
    pub request_index: u32,
    pub attempt: u32,
    pub request_sha256: String,
    pub response_sha256: Option<String>,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub retry_cause: Option<&'static str>,
    pub latency_ms: u64,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub started_at_ms: i64,
}

pub struct OutcomeRecord {
    pub row_index: u64,
    pub outcome: &'static str,
    pub node_id: Option<usize>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub rows_written: u64,
    /// The `transform` batch the row was consumed by.
    pub batch_id: Option<u64>,
    /// Where the row was written instead of the sinks (its `on_error` sink).
    pub error_sink: Option<String>,
}

/// Something that happened to an endpoint (its circuit breaker opening, …).
pub struct EndpointEventRecord {
    pub endpoint: String,
    pub at_ms: i64,
    pub event: String,
    pub detail: String,
}

pub enum Record {
    Node(NodeRecord),
    Endpoint(EndpointRecord),
    Row(RowRecord),
    NodeState(NodeStateRecord),
    Batch(BatchRecord),
    Attribute(AttributeRecord),
    Call(CallRecord),
    Outcome(OutcomeRecord),
    EndpointEvent(EndpointEventRecord),
    RunFinished(RunEnd),
}
