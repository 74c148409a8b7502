//! TEST TOOL — not a model. A stand-in OpenAI-compatible chat server for
//! weir's tests and benchmarks, served over loopback. Answers are computed
//! from the prompt so that a test can check every row got its own answer;
//! latency, a concurrency capacity and injected errors are scripted. It
//! also serves the providers' batch APIs (OpenAI and Azure OpenAI Batch,
//! Anthropic Message Batches; see `batch`), answering each batch line as the
//! online route would.

mod anthropic;
mod batch;
pub mod presets;
mod queue;
pub mod structured;

pub use batch::BatchSeen;
pub use queue::time_weighted_mean;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the server makes up an answer from the last user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `echo: <message>`: lets tests match each answer to its row.
    Echo,
    /// positive / negative / neutral by keywords: a stand-in for demos.
    Sentiment,
    /// JSON following the request's `json_schema`, each value derived from
    /// the prompt (see `structured`), bundles answered entry by entry. In a
    /// conversation that goes on after an answer, the first user message is
    /// the one answered.
    Structured,
    /// One of the labels the system prompt lists after `labels:`: one the
    /// message names, else one picked by a hash of the message.
    Label,
}

/// A way to answer badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// This status with a JSON error body (and `Retry-After` for 429/503/529).
    Status(u16),
    /// No answer for `Script::hang` (up to `Script::hang_up_to`), then 504.
    Hang,
    /// The connection breaks right after the headers.
    Reset,
    /// A 200 whose body stops half-way.
    Truncated,
    /// A 200 whose body is not JSON.
    MalformedJson,
    /// A 502 with an HTML error page, as proxies send.
    HtmlPage,
    /// A 200 with an HTML error page (`text/html`), as some proxies and
    /// captive portals send.
    OkHtmlPage,
    /// A 200 whose JSON stops half-way, the connection closed cleanly.
    OkCutShort,
    /// A 200 whose JSON is an error object instead of an answer, as
    /// gateways (OpenRouter) send when the model behind them failed.
    OkError,
    /// A 200 with an empty body.
    OkEmpty,
}

#[derive(Debug, Clone)]
pub struct Script {
    pub reply: Reply,
    pub latency: Duration,
    /// (time since start, latency), in order of time: `latency` changes at
    /// each time given, as a server does when its other tenants leave or a
    /// larger GPU takes over.
    pub latency_steps: Vec<(Duration, Duration)>,
    /// Each answer takes from `1 - spread / 2` to `1 + spread / 2` times
    /// `latency`, by a hash of its sequence number, whatever the load, as a
    /// model's answers of different lengths do (0: all alike).
    pub latency_spread: f64,
    /// When above 0, each answer's latency is instead drawn from a log-normal
    /// distribution with this sigma whose mean is `latency` (whatever the
    /// load), as a model's answers are: most near the median, a long tail of
    /// answers several times longer (0.8: median 0.73×, one in a hundred
    /// beyond 4.7×). Capped at 20 times `latency`.
    pub latency_tail: f64,
    /// Requests beyond this many at once get 429 with `Retry-After`.
    pub capacity: Option<usize>,
    /// (time since start, capacity): the capacity changes at each time given.
    pub capacity_steps: Vec<(Duration, usize)>,
    /// Requests per minute, as a token bucket holding 6 seconds' worth; every
    /// answer carries `x-ratelimit-*-requests` headers.
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute, as a bucket holding 6 seconds' worth; a request
    /// takes, at its arrival, its prompt's tokens and its `max_tokens` when
    /// it gives one (as OpenAI and Anthropic count), else its answer's.
    /// Every answer carries `x-ratelimit-*-tokens` headers.
    pub tokens_per_minute: Option<u32>,
    /// Output tokens per minute on `/v1/messages`, as Anthropic enforces
    /// them apart from input tokens: a bucket holding 6 seconds' worth, a
    /// request taking its `max_tokens` at arrival. Every answer there carries
    /// `anthropic-ratelimit-output-tokens-*`; OpenAI has no such window, so
    /// the chat route ignores it.
    pub output_tokens_per_minute: Option<u32>,
    /// (from, to) since start: every request in the window gets 500.
    pub outage: Option<(Duration, Duration)>,
    /// (n, length): once n requests have arrived, every request gets 500 for
    /// this long, however long the client took to start.
    pub outage_after: Option<(u64, Duration)>,
    /// Once this many requests have arrived, the server answers nothing
    /// more: the requests it is serving or queueing and every later one wait
    /// until their client hangs up, as a model server whose GPU hung does.
    /// Batch lines are not held.
    pub stall_after: Option<u64>,
    /// This share of requests (0 to 1) gets one of `fault_kinds`, chosen by a
    /// hash of the request's sequence number, so runs repeat exactly.
    pub fault_rate: f64,
    pub fault_kinds: Vec<Fault>,
    /// The first n requests get `fault_kinds` in turn, before `fault_rate`.
    pub faults_first: u64,
    /// When set, faults go only to requests whose prompt contains this text.
    pub fault_marker: Option<String>,
    /// Answers quote the request's `Authorization` and `api-key` headers, as
    /// an endpoint or proxy that reflects requests does: the content of a
    /// chat answer, the message of an error, and an `x-reflected-authorization`
    /// header.
    pub reflect_headers: bool,
    pub hang: Duration,
    /// When set, each hang lasts from `hang` to this, by a hash of the
    /// request's sequence number.
    pub hang_up_to: Option<Duration>,
    /// Refusals that come and go whatever the load.
    pub bursts: Option<Bursts>,
    /// (share, latency): this share of the answers that succeed (0 to 1,
    /// chosen by hash) comes after this latency instead of `latency`.
    pub slow: Option<(f64, Duration)>,
    /// Serves this many requests at once and queues the rest, first come,
    /// first served, instead of refusing them (llama.cpp, vLLM, Ollama).
    pub serve_at_once: Option<usize>,
    /// Under `serve_at_once`: each answer takes this share of its latency
    /// more for every other request served with it, as a continuous-batching
    /// server (vLLM, TGI, SGLang) decodes every sequence of its batch each
    /// step, each step a little slower the larger the batch. Weighed over
    /// ten stretches of the answer, as the batch changes.
    pub batch_slowdown: f64,
    /// Every n-th request (1-based count) is answered with this status instead.
    pub fail_every: Option<(u64, u16)>,
    /// The `Retry-After` seconds sent with 429/503 answers.
    pub retry_after_seconds: Option<f64>,
    /// When set, requests without `Authorization: Bearer <key>` get 401.
    pub require_key: Option<String>,
    /// Requests after this many are refused as from an account out of
    /// credit: OpenAI's 429 `insufficient_quota`, Anthropic's 400 "credit
    /// balance is too low".
    pub credit_for: Option<u64>,
    /// Requests to `/moved/REST` get this status with `Location: TO/REST`,
    /// as a server that has moved, or one that sends plain HTTP to HTTPS.
    pub redirect: Option<(u16, String)>,
    /// Structured answers: the share of bundle entries (0 to 1) dropped,
    /// duplicated, or sent under an id nobody was given, chosen by hash.
    pub bundle_fault_rate: f64,
    /// Structured answers: the share of answers with a field of the wrong type.
    pub invalid_rate: f64,
    /// Structured answers come wrapped in prose and a ```json fence.
    pub decorate: bool,
    /// Requests whose prompt contains this text get 400 `invalid_request`.
    pub reject_marker: Option<String>,
    /// Requests asking for `response_format: json_schema` get 500, as
    /// llama.cpp's server (llama-cpp-python) answers them; `json_object` is
    /// honoured.
    pub refuse_json_schema: bool,
    /// An answer longer than the request's `max_tokens` (four characters
    /// standing in for a token) is cut there, with `finish_reason: length`,
    /// as a model's is.
    pub cut_at_max_tokens: bool,
    /// Requests whose prompt contains this text are answered after this long
    /// instead of `latency`.
    pub slow_marker: Option<(String, Duration)>,
    /// Batch APIs: from a batch's creation to its end. Zero: a batch is
    /// done at the first look after the answer that created it (OpenAI's
    /// `validating` is skipped).
    pub batch_seconds: Duration,
    /// Batch APIs: lines whose user message contains this text are never
    /// answered; the batch ends `expired` (OpenAI, Azure) or those lines are
    /// `expired` (Anthropic).
    pub batch_expire_marker: Option<String>,
    /// Keep every request for `served`. The standalone server, which never
    /// reads them, keeps none: its memory stays flat over a long run, and it
    /// takes less of the CPU of a client measured on the same cores.
    pub record: bool,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            reply: Reply::Echo,
            latency: Duration::ZERO,
            latency_steps: Vec::new(),
            latency_spread: 0.0,
            latency_tail: 0.0,
            capacity: None,
            capacity_steps: Vec::new(),
            requests_per_minute: None,
            tokens_per_minute: None,
            output_tokens_per_minute: None,
            outage: None,
            outage_after: None,
            stall_after: None,
            fault_rate: 0.0,
            fault_kinds: Vec::new(),
            faults_first: 0,
            fault_marker: None,
            reflect_headers: false,
            hang: Duration::from_secs(30),
            hang_up_to: None,
            bursts: None,
            slow: None,
            serve_at_once: None,
            batch_slowdown: 0.0,
            fail_every: None,
            retry_after_seconds: Some(0.0),
            require_key: None,
            redirect: None,
            credit_for: None,
            bundle_fault_rate: 0.0,
            invalid_rate: 0.0,
            decorate: false,
            reject_marker: None,
            refuse_json_schema: false,
            cut_at_max_tokens: false,
            slow_marker: None,
            batch_seconds: Duration::ZERO,
            batch_expire_marker: None,
            record: true,
        }
    }
}

/// Periods when a large share of requests is refused, as shared endpoints
/// have them whatever one client's load: time is cut into windows, and a
/// hash of a window's index makes it a burst or not, so every run meets the
/// same schedule.
#[derive(Debug, Clone)]
pub struct Bursts {
    pub window: Duration,
    /// The share of windows (0 to 1) that are bursts.
    pub chance: f64,
    /// The share of requests (0 to 1, chosen by hash) refused in a burst.
    pub share: f64,
    /// The statuses refused with, chosen by hash.
    pub statuses: Vec<u16>,
    /// Picks the schedule: each seed makes other windows bursts, with the
    /// same share of them.
    pub schedule: u64,
    /// When given, the bursts are instead the first `window` of every
    /// `every`, from the start, as ChaosLLM's presets throw them.
    pub every: Option<Duration>,
}

impl Bursts {
    /// Whether `since_start` falls in a burst.
    pub fn covers(&self, since_start: Duration) -> bool {
        if let Some(every) = self.every {
            return since_start.as_nanos() % every.as_nanos().max(1) < self.window.as_nanos();
        }
        let index = since_start.as_nanos() / self.window.as_nanos().max(1);
        // Schedule 0 is the one the server had before schedules were named.
        let schedule = match self.schedule {
            0 => 0,
            n => mix(n),
        };
        roll(mix(index as u64 ^ BURST_WINDOW_SEED ^ schedule)) < self.chance
    }

    fn refusal(&self, since_start: Duration, sequence: u64) -> Option<u16> {
        if self.statuses.is_empty() || !self.covers(since_start) {
            return None;
        }
        let h = mix(sequence ^ BURST_REQUEST_SEED);
        (roll(h) < self.share).then(|| self.statuses[(h % self.statuses.len() as u64) as usize])
    }
}

// Each choice hashes the sequence number with its own seed, so that which
// requests fail, burst, hang long or come slowly are unrelated.
const BURST_WINDOW_SEED: u64 = 0x6275_7273_7477_696e;
const BURST_REQUEST_SEED: u64 = 0x6275_7273_7472_6571;
const HANG_SEED: u64 = 0x6861_6e67_6c65_6e67;
const SLOW_SEED: u64 = 0x736c_6f77_616e_7377;
const SPREAD_SEED: u64 = 0x7370_7265_6164_0001;
const TAIL_SEED: u64 = 0x7461_696c_6c61_7465;

/// One request as the server saw it: the ground truth tests compare against.
#[derive(Debug, Clone)]
pub struct Served {
    pub sequence: u64,
    /// When the request arrived, since the server started.
    pub at: Duration,
    /// From the request's arrival to its answer (the scripted latency plus
    /// the timer's slack, and `queued`).
    pub held: Duration,
    /// How long it waited for a slot under `Script::serve_at_once`.
    pub queued: Duration,
    pub status: u16,
    pub user_message: String,
    pub body: Value,
    pub authorization: Option<String>,
    pub api_key_header: Option<String>,
    pub path: String,
    /// The fault injected into this answer, if any.
    pub fault: Option<Fault>,
}

struct Shared {
    script: Script,
    started: Instant,
    bucket: Mutex<Bucket>,
    token_bucket: Mutex<Bucket>,
    output_token_bucket: Mutex<Bucket>,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
    /// `TestLlmServer::add_credit` was called: `Script::credit_for` is over.
    credit_added: std::sync::atomic::AtomicBool,
    count: AtomicU64,
    /// When `Script::outage_after` began.
    outage_began: std::sync::OnceLock<Instant>,
    /// True once `Script::stall_after` requests have arrived.
    stalled: tokio::sync::watch::Sender<bool>,
    log: Mutex<Vec<Served>>,
    queue: Option<queue::ServingQueue>,
    /// `http://host:port`, for URLs the server hands out.
    root: String,
    batch: batch::Store,
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
        let bucket = Bucket::full(script.requests_per_minute);
        let token_bucket = Bucket::full(script.tokens_per_minute);
        let output_token_bucket = Bucket::full(script.output_tokens_per_minute);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let started = Instant::now();
        let queue = script
            .serve_at_once
            .map(|at_once| queue::ServingQueue::new(at_once, started, script.record));
        let shared = Arc::new(Shared {
            script,
            started,
            queue,
            bucket: Mutex::new(bucket),
            token_bucket: Mutex::new(token_bucket),
            output_token_bucket: Mutex::new(output_token_bucket),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            credit_added: std::sync::atomic::AtomicBool::new(false),
            count: AtomicU64::new(0),
            outage_began: std::sync::OnceLock::new(),
            stalled: tokio::sync::watch::Sender::new(false),
            log: Mutex::new(Vec::new()),
            root: format!("http://{addr}"),
            batch: batch::Store::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(chat),
            )
            .route("/v1/messages", post(anthropic::messages))
            .route("/moved/{*rest}", post(moved))
            .merge(batch::routes())
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// The server's root, for endpoints that build their own paths (Azure).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What `OPENAI_BASE_URL` should be set to.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn served(&self) -> Vec<Served> {
        self.shared.log.lock().unwrap().clone()
    }

    /// Time since the server started, on the clock of `Served::at`.
    pub fn elapsed(&self) -> Duration {
        self.shared.started.elapsed()
    }

    /// Ends `Script::credit_for`'s refusals, as a top-up of the account.
    pub fn add_credit(&self) {
        self.shared.credit_added.store(true, Ordering::SeqCst);
    }

    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
    }

    /// Under `Script::serve_at_once`: (time since start, requests waiting
    /// from then on) at every change of the queue, for `time_weighted_mean`.
    pub fn queue_changes(&self) -> Vec<(Duration, usize)> {
        self.shared
            .queue
            .as_ref()
            .map_or_else(Vec::new, queue::ServingQueue::changes)
    }

    /// Every batch created on any provider's route, oldest first, brought up
    /// to date (lines due by now are answered).
    pub fn batches(&self) -> Vec<BatchSeen> {
        batch::seen(&self.shared)
    }

    /// Files uploaded through `/v1/files` or `/openai/files`.
    pub fn files_uploaded(&self) -> usize {
        self.shared.batch.uploaded.load(Ordering::SeqCst)
    }

    /// Files deleted through `DELETE /v1/files/{id}` or `/openai/files/{id}`.
    pub fn files_deleted(&self) -> usize {
        self.shared.batch.deleted.load(Ordering::SeqCst)
    }
}

impl Drop for TestLlmServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The answer the server gives to `message` under `reply`.
/// The label `Reply::Label` gives: deterministic, and always one listed.
pub fn label_answer(body: &Value, message: &str) -> String {
    let system = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "system"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let labels: Vec<&str> = system
        .split_once("labels:")
        .map(|(_, rest)| rest.split('.').next().unwrap_or_default())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if labels.is_empty() {
        return "no labels were listed".into();
    }
    let lower = message.to_lowercase();
    if let Some(named) = labels.iter().find(|l| lower.contains(&l.to_lowercase())) {
        return named.to_string();
    }
    let hash = message.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    labels[(hash % labels.len() as u64) as usize].to_string()
}

pub fn expected_answer(reply: Reply, message: &str) -> String {
    match reply {
        // A structured server asked for plain text echoes too.
        Reply::Echo | Reply::Structured | Reply::Label => format!("echo: {message}"),
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

/// A token bucket of requests or tokens: refills at `per_minute / 60` a
/// second and holds 6 seconds' worth.
struct Bucket {
    per_second: f64,
    capacity: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    fn full(per_minute: Option<u32>) -> Self {
        let per_second = per_minute.map_or(0.0, |m| m as f64 / 60.0);
        let capacity = (per_second * 6.0).max(1.0);
        Self {
            per_second,
            capacity,
            level: capacity,
            at: Instant::now(),
        }
    }

    /// Takes `n` if there is room; returns the headers' figures.
    fn take(&mut self, n: f64) -> (bool, u64, Duration) {
        let now = Instant::now();
        self.level =
            (self.level + (now - self.at).as_secs_f64() * self.per_second).min(self.capacity);
        self.at = now;
        let allowed = self.level >= n;
        if allowed {
            self.level -= n;
        }
        let to_full = Duration::from_secs_f64((self.capacity - self.level) / self.per_second);
        (allowed, self.level.floor() as u64, to_full)
    }
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let sequence = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    let (_in_flight, now) = InFlight::count(shared.clone());
    let answering = answer(
        &shared,
        sequence,
        now,
        uri.path(),
        &headers,
        &body,
        None,
        Online,
    );
    unless_stalled(&shared, sequence, answering).await
}

/// `Script::redirect`'s answer to a request under `/moved/`, logged with
/// the headers it came with.
async fn moved(
    State(shared): State<Arc<Shared>>,
    axum::extract::Path(rest): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let sequence = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    let Some((status, to)) = &shared.script.redirect else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (authorization, api_key_header) = keys_sent(&headers);
    shared.log.lock().unwrap().push(Served {
        sequence,
        at: shared.started.elapsed(),
        held: Duration::ZERO,
        queued: Duration::ZERO,
        status: *status,
        user_message: String::new(),
        body: Value::Null,
        authorization,
        api_key_header,
        path: format!("/moved/{rest}"),
        fault: None,
    });
    let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
    (status, [("location", format!("{to}/{rest}"))]).into_response()
}

/// The keys a request came with: its `Authorization` header, and its
/// `api-key` (Azure) or `x-api-key` (Anthropic) header.
fn keys_sent(headers: &HeaderMap) -> (Option<String>, Option<String>) {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let api_key = text("api-key").or_else(|| text("x-api-key"));
    (text("authorization"), api_key)
}

/// A request counted in flight until it is answered, or until its client
/// goes away and the server drops it unanswered: a client killed with
/// requests out must not leave them holding the capacity for good.
struct InFlight(Arc<Shared>);

impl InFlight {
    /// Counts one more in flight: the guard, and how many are now.
    fn count(shared: Arc<Shared>) -> (Self, usize) {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        (Self(shared), now)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answers a request given in the chat shape; `wire` is the body as it
/// came, when it came in another shape, for the log.
async fn answer_as_chat(
    shared: &Arc<Shared>,
    path: &str,
    headers: &HeaderMap,
    chat_body: &str,
    wire: &Value,
) -> Response {
    let sequence = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    let (_in_flight, now) = InFlight::count(shared.clone());
    let answering = answer(
        shared,
        sequence,
        now,
        path,
        headers,
        chat_body,
        Some(wire),
        Online,
    );
    unless_stalled(shared, sequence, answering).await
}

/// Whether a request came on its own or as a line of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    Online,
    /// A batch line: the key was checked when the batch was made, and the
    /// online-only knobs (latency, capacity, rate limit, outages) do not
    /// apply; faults other than a status answer 500. Nothing awaits.
    BatchLine,
}
use Arrival::{BatchLine, Online};

/// Answers one batch line given in the chat shape, logged under `path` (the
/// line's `url`): the status and the JSON body the online route would send.
/// `headers` are those of the request that made the batch.
pub(crate) fn answer_line(
    shared: &Shared,
    path: &str,
    headers: &HeaderMap,
    chat_body: &Value,
    wire: Option<&Value>,
) -> (u16, Value) {
    use futures::FutureExt;
    let sequence = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    let body = chat_body.to_string();
    // A batch line's answer never waits on a timer or a socket.
    let Some(response) =
        answer(shared, sequence, 0, path, headers, &body, wire, BatchLine).now_or_never()
    else {
        return (
            500,
            json!({"error": {"message": "no answer", "type": "server_error"}}),
        );
    };
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .now_or_never()
        .and_then(Result::ok)
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The value of the last of `steps` (time since start, value) begun by
/// `since_start`.
fn step_in_force<T: Copy>(steps: &[(Duration, T)], since_start: Duration) -> Option<T> {
    steps
        .iter()
        .rev()
        .find(|(at, _)| since_start >= *at)
        .map(|(_, value)| *value)
}

fn latency_now(script: &Script, since_start: Duration) -> Duration {
    step_in_force(&script.latency_steps, since_start).unwrap_or(script.latency)
}

fn capacity_now(script: &Script, since_start: Duration) -> Option<usize> {
    step_in_force(&script.capacity_steps, since_start).or(script.capacity)
}

/// A well-mixed hash of the sequence number (splitmix64), for repeatable faults.
pub(crate) fn mix(sequence: u64) -> u64 {
    let mut z = sequence.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash as a number from 0 to 1.
fn roll(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// A log-normal factor of mean 1 (at most 20) for request `sequence`, from
/// two rolls by Box–Muller, so runs repeat exactly. Public for the
/// executor's simulated servers, which draw answers the same way.
pub fn log_normal_scale(sigma: f64, sequence: u64) -> f64 {
    let first = roll(mix(sequence ^ TAIL_SEED)).max(f64::MIN_POSITIVE);
    let second = roll(mix(sequence ^ TAIL_SEED.rotate_left(17)));
    let normal = (-2.0 * first.ln()).sqrt() * (std::f64::consts::TAU * second).cos();
    (sigma * normal - sigma * sigma / 2.0).exp().min(20.0)
}

fn fault_for(script: &Script, sequence: u64, user_message: &str) -> Option<Fault> {
    let kinds = &script.fault_kinds;
    if kinds.is_empty()
        || script
            .fault_marker
            .as_ref()
            .is_some_and(|marker| !user_message.contains(marker.as_str()))
    {
        return None;
    }
    if sequence <= script.faults_first {
        return Some(kinds[((sequence - 1) % kinds.len() as u64) as usize]);
    }
    if script.fault_rate <= 0.0 {
        return None;
    }
    let h = mix(sequence);
    (roll(h) < script.fault_rate)
        .then(|| script.fault_kinds[(h % script.fault_kinds.len() as u64) as usize])
}

/// `answering`, a request that came on its own, unless `Script::stall_after`
/// requests have arrived before it is answered: then nothing.
async fn unless_stalled(
    shared: &Shared,
    sequence: u64,
    answering: impl Future<Output = Response>,
) -> Response {
    let Some(stall_after) = shared.script.stall_after else {
        return answering.await;
    };
    if sequence > stall_after {
        shared.stalled.send_replace(true);
    }
    let mut stalled = shared.stalled.subscribe();
    let stall = async move {
        // The guard `wait_for` returns is not `Send`: dropped at once.
        let _ = stalled.wait_for(|stalled| *stalled).await.map(drop);
    };
    tokio::select! {
        answered = answering => answered,
        // Held until the client hangs up, which drops this future.
        () = stall => std::future::pending().await,
    }
}

#[allow(clippy::too_many_arguments)]
async fn answer(
    shared: &Shared,
    sequence: u64,
    in_flight: usize,
    path: &str,
    headers: &HeaderMap,
    body: &str,
    wire: Option<&Value>,
    arrival: Arrival,
) -> Response {
    let since_start = shared.started.elapsed();
    let script = &shared.script;
    // Held until the answer is sent: a queueing server's slot.
    let (slot, queued) = match (&shared.queue, arrival) {
        (Some(queue), Online) => {
            let (slot, waited) = queue.enter().await;
            (Some(slot), waited)
        }
        _ => (None, Duration::ZERO),
    };
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let user_message = parsed["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    let (authorization, api_key_header) = keys_sent(headers);
    let reflected = match script.reflect_headers {
        true => format!(
            " (you sent authorization: {}; api-key: {})",
            authorization.as_deref().unwrap_or("none"),
            api_key_header.as_deref().unwrap_or("none")
        ),
        false => String::new(),
    };
    let log = |status: u16, fault: Option<Fault>| {
        if !script.record {
            return;
        }
        shared.log.lock().unwrap().push(Served {
            fault,
            sequence,
            at: since_start,
            held: shared.started.elapsed() - since_start,
            queued,
            status,
            user_message: user_message.clone(),
            body: wire.cloned().unwrap_or_else(|| parsed.clone()),
            authorization: authorization.clone(),
            api_key_header: api_key_header.clone(),
            path: path.to_string(),
        })
    };

    let key_in_header = path.starts_with("/openai/") || path == "/v1/messages";
    let key_ok = |key: &str| match key_in_header {
        true => api_key_header.as_deref() == Some(key),
        false => authorization.as_deref() == Some(&format!("Bearer {key}")),
    };
    if let Some(key) = &script.require_key
        && arrival == Online
        && !key_ok(key)
    {
        log(401, None);
        return error(401, "invalid_api_key", "Incorrect API key provided", None);
    }
    if let Some(credit) = script.credit_for
        && arrival == Online
        && sequence > credit
        && !shared.credit_added.load(Ordering::SeqCst)
    {
        return match path == "/v1/messages" {
            true => {
                log(400, None);
                error(
                    400,
                    "invalid_request_error",
                    "Your credit balance is too low to access the Anthropic API. Please go to \
                     Plans & Billing to upgrade or purchase credits.",
                    None,
                )
            }
            false => {
                log(429, None);
                error(
                    429,
                    "insufficient_quota",
                    "You exceeded your current quota, please check your plan and billing details.",
                    None,
                )
            }
        };
    }
    if parsed.is_null() {
        log(400, None);
        return error(
            400,
            "invalid_json",
            "We could not parse the JSON body of your request.",
            None,
        );
    }
    if script.refuse_json_schema && parsed["response_format"]["type"] == "json_schema" {
        log(500, None);
        return server_error(
            "Unsupported response_format type 'json_schema': use 'json_object' with a 'schema'",
        );
    }
    // Batch lines neither start nor meet an outage.
    let after_outage = arrival == Online
        && script.outage_after.is_some_and(|(n, length)| {
            sequence > n && shared.outage_began.get_or_init(Instant::now).elapsed() < length
        });
    if after_outage
        || (arrival == Online
            && script
                .outage
                .is_some_and(|(from, to)| since_start >= from && since_start < to))
    {
        log(500, None);
        return error(500, "server_error", "The server is down", None);
    }
    let mut rate_headers = Vec::new();
    if let Some(rpm) = script.requests_per_minute.filter(|_| arrival == Online) {
        let mut bucket = shared.bucket.lock().unwrap();
        if let Some(refused) =
            take_from_window(&mut bucket, rpm, 1.0, REQUEST_WINDOW, &mut rate_headers)
        {
            log(429, None);
            return refused;
        }
    }
    // Computed ahead only when a token window needs what it takes.
    let mut chat = None;
    // As the request came: the chat shape of a Messages request has none.
    let asked_max_tokens = wire.unwrap_or(&parsed)["max_tokens"].as_u64();
    if let Some(tpm) = script.tokens_per_minute.filter(|_| arrival == Online) {
        let answer = chat
            .get_or_insert_with(|| Chat::of(script, &parsed, &user_message, sequence, &reflected));
        let tokens = (answer.prompt_tokens + answer.taken_on_arrival(asked_max_tokens)) as f64;
        let mut bucket = shared.token_bucket.lock().unwrap();
        if let Some(refused) =
            take_from_window(&mut bucket, tpm, tokens, TOKEN_WINDOW, &mut rate_headers)
        {
            log(429, None);
            return refused;
        }
    }
    if let Some(otpm) = script
        .output_tokens_per_minute
        .filter(|_| arrival == Online && wire.is_some())
    {
        let answer = chat
            .get_or_insert_with(|| Chat::of(script, &parsed, &user_message, sequence, &reflected));
        let tokens = answer.taken_on_arrival(asked_max_tokens) as f64;
        let mut bucket = shared.output_token_bucket.lock().unwrap();
        if let Some(refused) = take_from_window(
            &mut bucket,
            otpm,
            tokens,
            OUTPUT_TOKEN_WINDOW,
            &mut rate_headers,
        ) {
            log(429, None);
            return refused;
        }
    }
    if let Some(capacity) = capacity_now(script, since_start)
        && arrival == Online
        && in_flight > capacity
    {
        log(429, None);
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
        log(status, None);
        return error(
            status,
            "injected",
            &format!("Injected failure{reflected}"),
            script.retry_after_seconds,
        );
    }
    if let Some(status) = script
        .bursts
        .as_ref()
        .filter(|_| arrival == Online)
        .and_then(|bursts| bursts.refusal(since_start, sequence))
    {
        let fault = Fault::Status(status);
        return faulty(shared, sequence, fault, &|status| log(status, Some(fault))).await;
    }
    if let Some(marker) = &script.reject_marker
        && user_message.contains(marker.as_str())
    {
        log(400, None);
        return error(
            400,
            "invalid_request",
            &format!("The prompt was refused{reflected}"),
            None,
        );
    }
    if let Some(fault) = fault_for(script, sequence, &user_message) {
        if arrival == BatchLine && !matches!(fault, Fault::Status(_)) {
            log(500, Some(fault));
            return error(
                500,
                "server_error",
                "The server had an error while processing your request.",
                None,
            );
        }
        return faulty(shared, sequence, fault, &|status| log(status, Some(fault))).await;
    }
    if arrival == Online {
        // Under `serve_at_once`, as fast as the server is once it starts
        // on the request, not when it queued it.
        let base = latency_now(script, shared.started.elapsed());
        let latency = match (&script.slow_marker, script.slow) {
            (Some((marker, slow)), _) if user_message.contains(marker.as_str()) => *slow,
            (_, Some((share, slow))) if roll(mix(sequence ^ SLOW_SEED)) < share => slow,
            _ if script.latency_tail > 0.0 => {
                base.mul_f64(log_normal_scale(script.latency_tail, sequence))
            }
            _ => {
                let spread = script.latency_spread;
                let scale = 1.0 - spread / 2.0 + spread * roll(mix(sequence ^ SPREAD_SEED));
                base.mul_f64(scale.max(0.0))
            }
        };
        match (&shared.queue, &slot) {
            (Some(queue), Some(_)) if script.batch_slowdown > 0.0 => {
                const STRETCHES: u32 = 10;
                for _ in 0..STRETCHES {
                    let others = queue.serving().saturating_sub(1) as f64;
                    let stretch = latency / STRETCHES;
                    tokio::time::sleep(stretch.mul_f64(1.0 + script.batch_slowdown * others)).await;
                }
            }
            _ => tokio::time::sleep(latency).await,
        }
    }
    log(200, None);
    let Chat {
        content,
        finish_reason,
        prompt_tokens,
        completion_tokens,
    } = chat.unwrap_or_else(|| Chat::of(script, &parsed, &user_message, sequence, &reflected));
    let reply = json!({
        "id": format!("chatcmpl-test-{sequence}"),
        "object": "chat.completion",
        "model": parsed["model"].as_str().unwrap_or("weir-test-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}
    });
    let mut response = (
        StatusCode::OK,
        [("content-type", "application/json")],
        reply.to_string(),
    )
        .into_response();
    add_headers(&mut response, &rate_headers);
    if let Some(authorization) = authorization.filter(|_| script.reflect_headers) {
        add_headers(
            &mut response,
            &[("x-reflected-authorization", authorization)],
        );
    }
    response
}

/// A rate window's name in messages and its `x-ratelimit-*` headers:
/// limit, remaining, reset.
type WindowNames = (&'static str, [&'static str; 3]);

pub(crate) const REQUEST_WINDOW: WindowNames = (
    "requests",
    [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ],
);
/// Named as the chat route would name it, for `anthropic.rs` to word as
/// Anthropic does; only `/v1/messages` has it.
pub(crate) const OUTPUT_TOKEN_WINDOW: WindowNames = (
    "output tokens",
    [
        "x-ratelimit-limit-output-tokens",
        "x-ratelimit-remaining-output-tokens",
        "x-ratelimit-reset-output-tokens",
    ],
);
pub(crate) const TOKEN_WINDOW: WindowNames = (
    "tokens",
    [
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ],
);

/// Takes `n` from a rate window of `per_minute` and adds its headers to
/// `headers`; returns a 429 carrying them, as OpenAI answers, when the
/// window has not that much left.
fn take_from_window(
    bucket: &mut Bucket,
    per_minute: u32,
    n: f64,
    (kind, [limit, left, reset]): WindowNames,
    headers: &mut Vec<(&'static str, String)>,
) -> Option<Response> {
    let (allowed, remaining, to_full) = bucket.take(n);
    headers.extend([
        (limit, per_minute.to_string()),
        (left, remaining.to_string()),
        (reset, format!("{:.3}s", to_full.as_secs_f64())),
    ]);
    if allowed {
        return None;
    }
    let mut response = error(
        429,
        "rate_limit_exceeded",
        &format!("Rate limit reached for {kind} per minute"),
        None,
    );
    let next_ms = (60_000.0 * n / per_minute as f64).ceil();
    add_headers(&mut response, headers);
    add_headers(&mut response, &[("retry-after-ms", next_ms.to_string())]);
    Some(response)
}

/// A chat answer and the tokens it reports.
struct Chat {
    content: String,
    finish_reason: &'static str,
    prompt_tokens: usize,
    completion_tokens: usize,
}

impl Chat {
    /// The answer's tokens a token window takes on arrival: the request's
    /// `max_tokens` up front, as OpenAI and Anthropic count it, whatever the
    /// answer then uses; the answer's own without one.
    fn taken_on_arrival(&self, max_tokens: Option<u64>) -> usize {
        max_tokens.map_or(self.completion_tokens, |most| most as usize)
    }

    fn of(
        script: &Script,
        parsed: &Value,
        user_message: &str,
        sequence: u64,
        reflected: &str,
    ) -> Self {
        // In a conversation that goes on after an answer (an answer asked
        // again), the question is still the first user message.
        let question = parsed["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        let content = match script.reply {
            Reply::Structured => structured::answer(script, parsed, question, sequence),
            Reply::Label => label_answer(parsed, user_message),
            reply => expected_answer(reply, user_message),
        } + reflected;
        // Words of every message stand in for tokens: enough to compare prompts.
        let prompt_tokens: usize = parsed["messages"]
            .as_array()
            .map(|messages| {
                messages
                    .iter()
                    .filter_map(|m| m["content"].as_str())
                    .map(|c| c.split_whitespace().count())
                    .sum()
            })
            .unwrap_or_default();
        let (content, finish_reason) = match parsed["max_tokens"].as_u64() {
            Some(limit) if script.cut_at_max_tokens => cut_at(content, limit as usize),
            _ => (content, "stop"),
        };
        let completion_tokens = content.split_whitespace().count();
        Self {
            content,
            finish_reason,
            prompt_tokens,
            completion_tokens,
        }
    }
}

async fn faulty(shared: &Shared, sequence: u64, fault: Fault, log: &impl Fn(u16)) -> Response {
    match fault {
        Fault::Status(status) => {
            log(status);
            error(
                status,
                "injected",
                "Injected failure",
                shared.script.retry_after_seconds,
            )
        }
        Fault::Hang => {
            tokio::time::sleep(hang_for(&shared.script, sequence)).await;
            log(504);
            error(504, "timeout", "Hung", None)
        }
        Fault::Reset | Fault::Truncated => {
            log(200);
            let head = if fault == Fault::Truncated {
                "{\"choices\": [{\"mess"
            } else {
                ""
            };
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from(head)),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "injected reset",
                )),
            ];
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .header("content-length", "4096")
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .unwrap()
        }
        Fault::MalformedJson => {
            log(200);
            let body = "{\"choices\": [{\"message\": oops";
            (StatusCode::OK, [("content-type", "application/json")], body).into_response()
        }
        Fault::OkHtmlPage => {
            log(200);
            let page = "<html><head><title>Service Unavailable</title></head><body>\n\
                        <h1>The upstream is waking up</h1></body></html>";
            (StatusCode::OK, [("content-type", "text/html")], page).into_response()
        }
        Fault::OkCutShort => {
            log(200);
            let body = "{\"id\": \"chatcmpl-cut\", \"choices\": [{\"message\": {\"con";
            (StatusCode::OK, [("content-type", "application/json")], body).into_response()
        }
        Fault::OkError => {
            log(200);
            let body = json!({"error": {"message": "Upstream provider returned 502",
                                        "code": 502}});
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                body.to_string(),
            )
                .into_response()
        }
        Fault::OkEmpty => {
            log(200);
            (StatusCode::OK, [("content-type", "application/json")], "").into_response()
        }
        Fault::HtmlPage => {
            log(502);
            let page = "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>";
            (
                StatusCode::BAD_GATEWAY,
                [("content-type", "text/html")],
                page,
            )
                .into_response()
        }
    }
}

fn hang_for(script: &Script, sequence: u64) -> Duration {
    match script.hang_up_to {
        Some(up_to) if up_to > script.hang => {
            script.hang + (up_to - script.hang).mul_f64(roll(mix(sequence ^ HANG_SEED)))
        }
        _ => script.hang,
    }
}

/// A 500 worded as llama-cpp-python's server words its errors.
fn server_error(message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "internal_server_error",
                                "param": null, "code": null}});
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn add_headers(response: &mut Response, headers: &[(&'static str, String)]) {
    for (name, value) in headers {
        response.headers_mut().insert(*name, value.parse().unwrap());
    }
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

/// `content` cut where `limit` tokens end, four characters standing in for
/// a token, and the finish reason a model gives for it.
fn cut_at(content: String, limit: usize) -> (String, &'static str) {
    let room = limit.saturating_mul(4);
    match content.char_indices().nth(room) {
        Some((end, _)) => (content[..end].to_string(), "length"),
        None => (content, "stop"),
    }
}
