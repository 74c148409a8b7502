//! The services a weir host gives a transform, as a trait: the real imports
//! inside wasm, [`crate::testing::MockHost`] in native tests.

/// One request to a granted endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The endpoint's name under the node's `endpoints:` in the pipeline file.
    pub endpoint: String,
    /// The request body (for `openai` endpoints, a chat-completions body).
    pub body: String,
    /// The index, within the current `process` call, of the row it is for.
    pub row: u32,
}

/// The final answer to a request, after the host's retries.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: String,
    /// Attempts made, retries included (0 when answered from the audit trail).
    pub attempts: u32,
    pub latency_ms: u32,
}

/// Why a request got no successful answer.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The endpoint is not granted to this node, or the row index is wrong.
    Denied(String),
    /// An error status that is not retried, or a retryable one after the retries.
    Status(Response),
    /// Capacity or transient errors outlasted the endpoint's retry deadline.
    DeadlineExceeded(String),
    /// No connection, or it broke before an answer.
    Transport(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Denied(m) => write!(f, "denied: {m}"),
            CallError::Status(r) => write!(f, "HTTP {}: {}", r.status, excerpt(&r.body)),
            CallError::DeadlineExceeded(m) => write!(f, "retries ran past the deadline: {m}"),
            CallError::Transport(m) => write!(f, "transport error: {m}"),
        }
    }
}

/// Keeps error messages readable when a body is huge (an HTML error page, say).
pub(crate) fn excerpt(text: &str) -> String {
    const LIMIT: usize = 300;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

/// A chat request in the typed shape: the host writes the provider's body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub endpoint: String,
    /// The index, within the current `process` call, of the row it is for.
    pub row: u32,
    pub messages: Vec<Message>,
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// The chat-completions `response_format` object, as JSON text.
    pub response_format: Option<String>,
    /// Further provider parameters, a JSON object as text, merged into the
    /// body under the typed fields.
    pub extra: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// A chat answer as the host reads it, for every provider alike.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    pub text: String,
    /// `stop`, `length`, `content_filter`, `tool_calls` or `other`.
    pub finish_reason: String,
    pub usage: Option<Usage>,
    pub model: Option<String>,
    pub status: u16,
    pub attempts: u32,
    pub latency_ms: u32,
    /// The provider's answer, in the chat-completions shape.
    pub body: String,
}

/// Why a chat request got no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatError {
    /// The request failed as a `send` request would have.
    Call(CallError),
    /// The request could not be written (e.g. `extra` is not a JSON object).
    InvalidRequest(String),
    /// A successful answer that is not a chat answer, kept whole.
    Unreadable(Response),
}

impl std::fmt::Display for ChatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatError::Call(e) => write!(f, "{e}"),
            ChatError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            ChatError::Unreadable(r) => {
                write!(
                    f,
                    "not a chat answer (HTTP {}): {}",
                    r.status,
                    excerpt(&r.body)
                )
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// What a transform can ask of its host.
pub trait Host {
    /// Sends every request concurrently; one result per request, in order.
    fn send(&self, requests: Vec<Request>) -> Vec<Result<Response, CallError>>;
    /// Sends chat requests in the typed shape, concurrently, as `send` does;
    /// one result per request, in order. By default the requests are
    /// written and their answers read as weir's host does, over
    /// [`Host::send`]: what a scripted host needs.
    fn complete(&self, requests: Vec<ChatRequest>) -> Vec<Result<ChatAnswer, ChatError>> {
        crate::complete::over_send(self, requests)
    }
    /// Attaches a named value to row `row`'s record in the audit trail.
    fn attach(&self, row: u32, key: &str, value: &str);
    fn log(&self, level: Level, message: &str);
    /// The node's name in the pipeline file.
    fn node_name(&self) -> String;
    /// The endpoints granted to the node, in the pipeline file's order.
    fn endpoints(&self) -> Vec<String>;
}
