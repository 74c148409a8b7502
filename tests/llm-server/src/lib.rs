//! TEST TOOL — not a model. A stand-in OpenAI-compatible chat server for
//! weir's tests and benchmarks, served over loopback. Answers are computed
//! from the prompt so that a test can check every row got its own answer;
//! latency, a concurrency capacity and injected errors are scripted.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the server makes up an answer from the last user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `echo: <message>`: lets tests match each answer to its row.
    Echo,
    /// positive / negative / neutral by keywords: a stand-in for demos.
    Sentiment,
}

#[derive(Debug, Clone)]
pub struct Script {
    pub reply: Reply,
    pub latency: Duration,
    /// Requests beyond this many at once get 429 with `Retry-After`.
    pub capacity: Option<usize>,
    /// Every n-th request (1-based count) is answered with this status instead.
    pub fail_every: Option<(u64, u16)>,
    /// The `Retry-After` seconds sent with 429/503 answers.
    pub retry_after_seconds: Option<f64>,
    /// When set, requests without `Authorization: Bearer <key>` get 401.
    pub require_key: Option<String>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            reply: Reply::Echo,
            latency: Duration::ZERO,
            capacity: None,
            fail_every: None,
            retry_after_seconds: Some(0.0),
            require_key: None,
        }
    }
}

/// One request as the server saw it: the ground truth tests compare against.
#[derive(Debug, Clone)]
pub struct Served {
    pub sequence: u64,
    pub status: u16,
    pub user_message: String,
    pub body: Value,
    pub authorization: Option<String>,
}

struct Shared {
    script: Script,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
    count: AtomicU64,
    log: Mutex<Vec<Served>>,
}

pub struct TestLlmServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl TestLlmServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    pub async fn start(script: Script) -> std::io::Result<Self> {
        Self::bind(script, "127.0.0.1:0").await
    }

    pub async fn bind(script: Script, addr: &str) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            script,
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            count: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// What `OPENAI_BASE_URL` should be set to.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn served(&self) -> Vec<Served> {
        self.shared.log.lock().unwrap().clone()
    }

    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for TestLlmServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The answer the server gives to `message` under `reply`.
pub fn expected_answer(reply: Reply, message: &str) -> String {
    match reply {
        Reply::Echo => format!("echo: {message}"),
        Reply::Sentiment => {
            let lower = message.to_lowercase();
            let score = |words: &[&str]| words.iter().filter(|w| lower.contains(*w)).count();
            let pos = score(&[
                "love",
                "great",
                "excellent",
                "amazing",
                "perfect",
                "happy",
                "recommend",
                "best",
                "fantastic",
                "good",
            ]);
            let neg = score(&[
                "hate",
                "terrible",
                "awful",
                "broke",
                "worst",
                "refund",
                "disappoint",
                "poor",
                "bad",
                "waste",
            ]);
            match pos.cmp(&neg) {
                std::cmp::Ordering::Greater => "positive",
                std::cmp::Ordering::Less => "negative",
                std::cmp::Ordering::Equal => "neutral",
            }
            .to_string()
        }
    }
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: String) -> Response {
    let sequence = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    let response = answer(&shared, sequence, now, &headers, &body).await;
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

async fn answer(
    shared: &Shared,
    sequence: u64,
    in_flight: usize,
    headers: &HeaderMap,
    body: &str,
) -> Response {
    let script = &shared.script;
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let user_message = parsed["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let log = |status: u16| {
        shared.log.lock().unwrap().push(Served {
            sequence,
            status,
            user_message: user_message.clone(),
            body: parsed.clone(),
            authorization: authorization.clone(),
        })
    };

    if let Some(key) = &script.require_key
        && authorization.as_deref() != Some(&format!("Bearer {key}"))
    {
        log(401);
        return error(401, "invalid_api_key", "Incorrect API key provided", None);
    }
    if parsed.is_null() {
        log(400);
        return error(
            400,
            "invalid_json",
            "We could not parse the JSON body of your request.",
            None,
        );
    }
    if let Some(capacity) = script.capacity
        && in_flight > capacity
    {
        log(429);
        return error(
            429,
            "rate_limit_exceeded",
            "Rate limit reached",
            script.retry_after_seconds,
        );
    }
    if let Some((every, status)) = script.fail_every
        && sequence.is_multiple_of(every)
    {
        log(status);
        return error(
            status,
            "injected",
            "Injected failure",
            script.retry_after_seconds,
        );
    }
    tokio::time::sleep(script.latency).await;
    log(200);
    let content = expected_answer(script.reply, &user_message);
    let prompt_tokens = user_message.split_whitespace().count();
    let completion_tokens = content.split_whitespace().count();
    let reply = json!({
        "id": format!("chatcmpl-test-{sequence}"),
        "object": "chat.completion",
        "model": parsed["model"].as_str().unwrap_or("weir-test-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}
    });
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        reply.to_string(),
    )
        .into_response()
}

fn error(status: u16, code: &str, message: &str, retry_after: Option<f64>) -> Response {
    let body = json!({"error": {"message": message, "type": code, "code": code}}).to_string();
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body,
    )
        .into_response();
    if let (Some(seconds), true) = (retry_after, matches!(status, 429 | 503 | 529)) {
        response
            .headers_mut()
            .insert("retry-after", seconds.to_string().parse().unwrap());
    }
    response
}
