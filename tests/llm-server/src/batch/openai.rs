//! TEST TOOL — not a provider. OpenAI's Batch API (`/v1/files`,
//! `/v1/batches`) and Azure OpenAI's global batch (the same under
//! `/openai/files` and `/openai/batches`, with an `api-version` query and
//! the `api-key` header on every request).
//!
//! Upload refuses what OpenAI refuses up front (a purpose other than
//! `batch`, a line that is not JSON or lacks `custom_id`, `method`, `url` or
//! `body`, a repeated `custom_id`, over 50,000 lines — 100,000 on Azure — or
//! over 200 MB); a line whose `method` is not POST or whose `url` is not the
//! batch's endpoint makes the batch `failed` with `errors.data`.
//!
//! Over `Script::batch_seconds` T a batch is `validating` for the first
//! tenth, `in_progress` until nine tenths (lines answered little by little,
//! `request_counts` growing), `finalizing`, then `completed`; with lines to
//! expire it stays `in_progress` and ends `expired`. A cancel makes it
//! `cancelling` for T/10, then `cancelled`: lines answered by then are in the
//! files, the rest absent (cancelling a batch that already ended is refused
//! with 400; asking again while cancelling changes nothing). The output file holds the 2xx answers, the error
//! file (null when empty) the others and, when expired, the lines never
//! answered with `error.code = "batch_expired"`; both in a shuffled order.

use super::{Batch, File, Ids, Inner, Line, Outcome, Provider, key_ok, unix_now};
use crate::Shared;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// Stricter than "200 MB" read as MiB, so a client kept under it is safe.
const MAX_FILE_BYTES: usize = 200_000_000;

/// What only OpenAI and Azure batches have.
#[derive(Default)]
pub(crate) struct Part {
    input_file_id: String,
    endpoint: String,
    completion_window: String,
    metadata: Value,
    /// Validation errors: the batch fails.
    errors: Vec<Value>,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
}

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/files", post(upload::<false>))
        .route(
            "/v1/files/{id}",
            get(file::<false>).delete(delete_file::<false>),
        )
        .route("/v1/files/{id}/content", get(content::<false>))
        .route("/v1/batches", post(create::<false>).get(list::<false>))
        .route("/v1/batches/{id}", get(retrieve::<false>))
        .route("/v1/batches/{id}/cancel", post(cancel::<false>))
        .route("/openai/files", post(upload::<true>))
        .route(
            "/openai/files/{id}",
            get(file::<true>).delete(delete_file::<true>),
        )
        .route("/openai/files/{id}/content", get(content::<true>))
        .route("/openai/batches", post(create::<true>).get(list::<true>))
        .route("/openai/batches/{id}", get(retrieve::<true>))
        .route("/openai/batches/{id}/cancel", post(cancel::<true>))
}

fn provider(azure: bool) -> Provider {
    match azure {
        true => Provider::Azure,
        false => Provider::OpenAi,
    }
}

type Params = Query<HashMap<String, String>>;

/// OpenAI's error shape.
fn error(status: u16, message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                "param": param, "code": code}});
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(body: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Azure's `api-version`, then the key.
fn gate(
    shared: &Shared,
    azure: bool,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Option<Response> {
    if azure && query.get("api-version").is_none_or(|v| v.is_empty()) {
        return Some(error(
            400,
            "Missing required query parameter: api-version",
            Some("api-version"),
            Some("missing_required_parameter"),
        ));
    }
    if !key_ok(shared, provider(azure), headers) {
        let message = match azure {
            true => "Access denied due to invalid subscription key or wrong API endpoint.",
            false => "Incorrect API key provided",
        };
        return Some(error(401, message, None, Some("invalid_api_key")));
    }
    None
}

fn no_such_file(id: &str) -> Response {
    error(404, &format!("No such File object: {id}"), Some("id"), None)
}

fn no_such_batch(id: &str) -> Response {
    error(
        404,
        &format!("No batch found with id '{id}'."),
        Some("id"),
        None,
    )
}

fn file_object(file: &File) -> Value {
    json!({"id": file.id, "object": "file", "bytes": file.bytes.len(), "created_at": file.created_at,
           "filename": file.filename, "purpose": file.purpose})
}

async fn upload<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(parts) = multipart(content_type, &body) else {
        return error(
            400,
            "The request must be a multipart/form-data body with `purpose` and `file`.",
            None,
            None,
        );
    };
    let field = |name: &str| parts.iter().find(|p| p.name == name);
    let purpose = field("purpose").map(|p| String::from_utf8_lossy(&p.data).trim().to_string());
    match purpose.as_deref() {
        Some("batch") => {}
        None => {
            return error(
                400,
                "Missing required parameter: 'purpose'.",
                Some("purpose"),
                None,
            );
        }
        Some(other) => {
            return error(
                400,
                &format!("Invalid purpose '{other}': this server takes only 'batch' files."),
                Some("purpose"),
                Some("invalid_value"),
            );
        }
    }
    let Some(file) = field("file") else {
        return error(
            400,
            "Missing required parameter: 'file'.",
            Some("file"),
            None,
        );
    };
    let max_lines = match AZURE {
        true => 100_000,
        false => 50_000,
    };
    let lines = match batch_lines(&file.data, max_lines) {
        Ok(lines) => lines,
        Err(message) => return error(400, &message, Some("file"), Some("invalid_file")),
    };
    let mut inner = shared.batch.inner.lock().unwrap();
    let file = File {
        id: inner.ids.make("file-"),
        provider: provider(AZURE),
        bytes: file.data.clone(),
        created_at: unix_now() as u64,
        filename: file
            .filename
            .clone()
            .unwrap_or_else(|| "upload.jsonl".into()),
        purpose: "batch",
        lines,
    };
    let object = file_object(&file);
    inner.files.insert(file.id.clone(), file);
    shared
        .batch
        .uploaded
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    ok(object)
}

/// The requests of a batch input file, or why it is refused.
fn batch_lines(data: &[u8], max_lines: usize) -> Result<Vec<Value>, String> {
    if data.len() > MAX_FILE_BYTES {
        return Err(format!(
            "The file is {} bytes; a batch input file may be at most 200 MB.",
            data.len()
        ));
    }
    let text = std::str::from_utf8(data).map_err(|_| "The file is not UTF-8 text.".to_string())?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return Err("The file has no requests.".into());
    }
    let raw: Vec<&str> = text.split('\n').collect();
    if raw.len() > max_lines {
        return Err(format!(
            "The file has {} requests; a batch may have at most {max_lines}.",
            raw.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut lines = Vec::with_capacity(raw.len());
    for (n, line) in raw.iter().enumerate() {
        let n = n + 1;
        let value: Value = serde_json::from_str(line.trim_end_matches('\r'))
            .map_err(|e| format!("Line {n} is not valid JSON: {e}."))?;
        for field in ["custom_id", "method", "url"] {
            if !value[field].is_string() {
                return Err(format!("Line {n}: missing required field '{field}'."));
            }
        }
        if !value["body"].is_object() {
            return Err(format!("Line {n}: missing required field 'body'."));
        }
        let custom_id = value["custom_id"].as_str().unwrap_or_default();
        if custom_id.is_empty() {
            return Err(format!("Line {n}: 'custom_id' is empty."));
        }
        if !seen.insert(custom_id.to_string()) {
            return Err(format!(
                "Line {n}: duplicate custom_id '{custom_id}'; custom_id must be unique within a file."
            ));
        }
        lines.push(value);
    }
    Ok(lines)
}

async fn file<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let inner = shared.batch.inner.lock().unwrap();
    match inner
        .files
        .get(&id)
        .filter(|f| f.provider == provider(AZURE))
    {
        Some(file) => ok(file_object(file)),
        None => no_such_file(&id),
    }
}

async fn content<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let inner = shared.batch.inner.lock().unwrap();
    match inner
        .files
        .get(&id)
        .filter(|f| f.provider == provider(AZURE))
    {
        Some(file) => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            file.bytes.clone(),
        )
            .into_response(),
        None => no_such_file(&id),
    }
}

async fn delete_file<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    if !inner
        .files
        .get(&id)
        .is_some_and(|f| f.provider == provider(AZURE))
    {
        return no_such_file(&id);
    }
    inner.files.remove(&id);
    shared
        .batch
        .deleted
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    ok(json!({"id": id, "object": "file", "deleted": true}))
}

async fn create<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(
            400,
            "We could not parse the JSON body of your request.",
            None,
            None,
        );
    };
    let Some(input_file_id) = request["input_file_id"].as_str() else {
        return error(
            400,
            "Missing required parameter: 'input_file_id'.",
            Some("input_file_id"),
            None,
        );
    };
    let endpoint = request["endpoint"].as_str().unwrap_or_default();
    let endpoints: &[&str] = match AZURE {
        true => &["/chat/completions", "/v1/chat/completions"],
        false => &["/v1/chat/completions"],
    };
    if !endpoints.contains(&endpoint) {
        return error(
            400,
            &format!(
                "Invalid value for 'endpoint': '{endpoint}'. This server batches only {}.",
                endpoints[0]
            ),
            Some("endpoint"),
            Some("invalid_value"),
        );
    }
    let window = request["completion_window"].as_str().unwrap_or_default();
    if window != "24h" {
        return error(
            400,
            &format!(
                "Invalid value for 'completion_window': '{window}'. Supported values are: '24h'."
            ),
            Some("completion_window"),
            Some("invalid_value"),
        );
    }
    let metadata = &request["metadata"];
    if !(metadata.is_null()
        || metadata
            .as_object()
            .is_some_and(|m| m.len() <= 16 && m.values().all(Value::is_string)))
    {
        return error(
            400,
            "Invalid 'metadata': an object of at most 16 string values.",
            Some("metadata"),
            Some("invalid_value"),
        );
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Some(file) = inner
        .files
        .get(input_file_id)
        .filter(|f| f.provider == provider(AZURE))
    else {
        return no_such_file(input_file_id);
    };
    // Azure's lines say `/chat/completions`, as may its endpoint.
    let same = |url: &str| match AZURE {
        true => url.trim_start_matches("/v1") == endpoint.trim_start_matches("/v1"),
        false => url == endpoint,
    };
    let mut errors = Vec::new();
    let mut lines = Vec::new();
    for (n, value) in file.lines.iter().enumerate() {
        let url = value["url"].as_str().unwrap_or_default();
        if value["method"] != "POST" {
            errors.push(json!({"code": "invalid_method", "line": n + 1, "param": "method",
                "message": format!("The method '{}' is not supported; use POST.", value["method"].as_str().unwrap_or_default())}));
        } else if !same(url) {
            errors.push(json!({"code": "mismatched_endpoint", "line": n + 1, "param": "url",
                "message": format!("The url '{url}' does not match the batch's endpoint '{endpoint}'.")}));
        }
        lines.push(Line {
            custom_id: value["custom_id"].as_str().unwrap_or_default().to_string(),
            url: url.to_string(),
            expire: super::expires(&shared, &value["body"]),
            chat: value["body"].clone(),
            body: value["body"].clone(),
        });
    }
    let part = Part {
        input_file_id: input_file_id.to_string(),
        endpoint: endpoint.to_string(),
        completion_window: window.to_string(),
        metadata: metadata.clone(),
        errors,
        ..Part::default()
    };
    let Inner {
        ids,
        files,
        batches,
    } = &mut *inner;
    let mut batch = Batch::new(
        &shared,
        ids,
        provider(AZURE),
        "batch_",
        &headers,
        lines,
        part,
    );
    advance(&shared, ids, files, &mut batch, Instant::now());
    let object = object(&batch);
    batch.shown = true;
    batches.push(batch);
    ok(object)
}

async fn retrieve<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Some(index) = find(&inner, AZURE, &id) else {
        return no_such_batch(&id);
    };
    super::advance(&shared, &mut inner, index, Instant::now());
    ok(object(&inner.batches[index]))
}

fn find(inner: &Inner, azure: bool, id: &str) -> Option<usize> {
    inner
        .batches
        .iter()
        .position(|b| b.id == id && b.provider == provider(azure))
}

async fn list<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => 20,
        Some(Ok(limit)) if (1..=100).contains(&limit) => limit,
        Some(_) => {
            return error(
                400,
                "Invalid 'limit': an integer from 1 to 100.",
                Some("limit"),
                Some("invalid_value"),
            );
        }
    };
    let mut inner = shared.batch.inner.lock().unwrap();
    let now = Instant::now();
    // Newest first.
    let mine: Vec<usize> = (0..inner.batches.len())
        .rev()
        .filter(|&i| inner.batches[i].provider == provider(AZURE))
        .collect();
    let start = match query.get("after") {
        Some(after) => match mine.iter().position(|&i| inner.batches[i].id == *after) {
            Some(at) => at + 1,
            None => return no_such_batch(after),
        },
        None => 0,
    };
    let page: Vec<usize> = mine.iter().skip(start).take(limit).copied().collect();
    let has_more = start + page.len() < mine.len();
    let data: Vec<Value> = page
        .iter()
        .map(|&i| {
            super::advance(&shared, &mut inner, i, now);
            object(&inner.batches[i])
        })
        .collect();
    ok(json!({
        "object": "list",
        "data": data,
        "first_id": page.first().map(|&i| inner.batches[i].id.clone()),
        "last_id": page.last().map(|&i| inner.batches[i].id.clone()),
        "has_more": has_more,
    }))
}

async fn cancel<const AZURE: bool>(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, AZURE, &query, &headers) {
        return refusal;
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Some(index) = find(&inner, AZURE, &id) else {
        return no_such_batch(&id);
    };
    let now = Instant::now();
    super::advance(&shared, &mut inner, index, now);
    let Inner {
        ids,
        files,
        batches,
    } = &mut *inner;
    let batch = &mut batches[index];
    // Asking again while cancelling, or once cancelled, changes nothing.
    if matches!(batch.status, "cancelling" | "cancelled") {
        return ok(object(batch));
    }
    if !matches!(batch.status, "validating" | "in_progress" | "finalizing") {
        return error(
            400,
            &format!("Cannot cancel a batch with status '{}'.", batch.status),
            None,
            None,
        );
    }
    batch.cancel = Some((now, unix_now()));
    advance(&shared, ids, files, batch, now);
    ok(object(batch))
}

/// Brings an OpenAI or Azure batch up to `now`.
pub(crate) fn advance(
    shared: &Shared,
    ids: &mut Ids,
    files: &mut HashMap<String, File>,
    batch: &mut Batch,
    now: Instant,
) {
    if batch.ended.is_some() {
        return;
    }
    let validated = batch.length.is_zero() || batch.past(now, 0.1);
    if !batch.openai.errors.is_empty() {
        if validated {
            let at = batch.at(0.1);
            batch.mark("failed_at", at);
            batch.ended = Some(at);
            batch.status = "failed";
        } else {
            batch.status = "validating";
        }
        return;
    }
    if let Some((asked, asked_unix)) = batch.cancel {
        batch.mark("cancelling_at", asked_unix);
        let grace = batch.length / 10;
        if now.saturating_duration_since(asked) >= grace {
            let at = asked_unix + grace.as_secs_f64();
            batch.mark("cancelled_at", at);
            finish(ids, files, batch, "cancelled", at);
        } else {
            batch.status = "cancelling";
        }
        return;
    }
    if !validated {
        batch.status = "validating";
        return;
    }
    batch.mark("in_progress_at", batch.at(0.1));
    batch.answer_due(shared, now, (0.1, 0.9));
    let expiring = batch.lines.iter().any(|l| l.expire);
    if batch.time_up(now) {
        let at = batch.at(1.0);
        match expiring {
            true => {
                batch.mark("expired_at", at);
                finish(ids, files, batch, "expired", at);
            }
            false => {
                batch.mark("finalizing_at", batch.at(0.9));
                batch.mark("completed_at", at);
                finish(ids, files, batch, "completed", at);
            }
        }
    } else if !expiring && batch.past(now, 0.9) {
        batch.mark("finalizing_at", batch.at(0.9));
        batch.status = "finalizing";
    } else {
        batch.status = "in_progress";
    }
}

/// Ends the batch: writes its output and error files.
fn finish(
    ids: &mut Ids,
    files: &mut HashMap<String, File>,
    batch: &mut Batch,
    status: &'static str,
    at: f64,
) {
    let mut output = Vec::new();
    let mut errors = Vec::new();
    for (line, outcome) in batch.in_order() {
        match outcome {
            Some(o) if (200..300).contains(&o.status) => output.push(o.record.to_string()),
            Some(o) => errors.push(o.record.to_string()),
            None if status == "expired" && line.expire => errors.push(
                json!({"id": ids.make("batch_req_"), "custom_id": line.custom_id, "response": null,
                       "error": {"code": "batch_expired",
                                 "message": "This request could not be executed before the completion window expired."}})
                .to_string(),
            ),
            None => {}
        }
    }
    let mut write = |lines: Vec<String>, kind: &str| {
        let id = ids.make("file-");
        let bytes = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        files.insert(
            id.clone(),
            File {
                id: id.clone(),
                provider: batch.provider,
                bytes: bytes.into_bytes(),
                created_at: at as u64,
                filename: format!("{}_{kind}.jsonl", batch.id),
                purpose: "batch_output",
                lines: Vec::new(),
            },
        );
        id
    };
    batch.openai.output_file_id = Some(write(output, "output"));
    if !errors.is_empty() {
        batch.openai.error_file_id = Some(write(errors, "error"));
    }
    batch.ended = Some(at);
    batch.status = status;
}

/// One line answered as the online chat route would.
pub(crate) fn answer(shared: &Shared, headers: &HeaderMap, line: &Line) -> Outcome {
    let (status, body) = crate::answer_line(shared, &line.url, headers, &line.chat, None);
    let sequence = shared.count.load(std::sync::atomic::Ordering::SeqCst);
    let hash = crate::mix(sequence ^ crate::mix(line.custom_id.len() as u64));
    Outcome {
        status,
        record: json!({
            "id": format!("batch_req_{hash:016x}{sequence:08x}"),
            "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": format!("req_{:016x}", crate::mix(hash)), "body": body},
            "error": null,
        }),
    }
}

/// The batch object, every field OpenAI sends.
fn object(batch: &Batch) -> Value {
    let part = &batch.openai;
    let time = |field: &str| batch.time(field).map(|t| t as u64);
    let failed = batch.status == "failed";
    let (mut completed, mut errored) = (0, 0);
    for outcome in batch.outcomes.iter().flatten() {
        match (200..300).contains(&outcome.status) {
            true => completed += 1,
            false => errored += 1,
        }
    }
    if batch.status == "expired" {
        errored += batch.lines.iter().filter(|l| l.expire).count();
    }
    let errors = match failed {
        true => json!({"object": "list", "data": part.errors}),
        false => Value::Null,
    };
    json!({
        "id": batch.id,
        "object": "batch",
        "endpoint": part.endpoint,
        "errors": errors,
        "input_file_id": part.input_file_id,
        "completion_window": part.completion_window,
        "status": batch.status,
        "output_file_id": part.output_file_id,
        "error_file_id": part.error_file_id,
        "created_at": batch.created_unix as u64,
        "in_progress_at": time("in_progress_at"),
        "expires_at": batch.created_unix as u64 + 24 * 3600,
        "finalizing_at": time("finalizing_at"),
        "completed_at": time("completed_at"),
        "failed_at": time("failed_at"),
        "expired_at": time("expired_at"),
        "cancelling_at": time("cancelling_at"),
        "cancelled_at": time("cancelled_at"),
        "request_counts": {
            "total": if failed { 0 } else { batch.lines.len() },
            "completed": completed,
            "failed": errored,
        },
        "metadata": part.metadata,
    })
}

struct FormPart {
    name: String,
    filename: Option<String>,
    data: Vec<u8>,
}

/// The parts of a `multipart/form-data` body.
fn multipart(content_type: &str, body: &[u8]) -> Option<Vec<FormPart>> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = params
        .split(';')
        .filter_map(|p| p.trim().split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim_matches('"'))?;
    let delimiter = format!("--{boundary}").into_bytes();
    let next_delimiter = format!("\r\n--{boundary}").into_bytes();
    let mut at = find_bytes(body, &delimiter, 0)? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[at..].starts_with(b"--") {
            return Some(parts);
        }
        at += if body[at..].starts_with(b"\r\n") {
            2
        } else {
            return None;
        };
        let head_end = find_bytes(body, b"\r\n\r\n", at)?;
        let head = std::str::from_utf8(&body[at..head_end]).ok()?;
        let data_start = head_end + 4;
        let data_end = find_bytes(body, &next_delimiter, data_start)?;
        let disposition = head
            .split("\r\n")
            .find_map(|h| {
                h.split_once(':')
                    .filter(|(k, _)| k.trim().eq_ignore_ascii_case("content-disposition"))
            })
            .map(|(_, v)| v)?;
        let param = |name: &str| {
            disposition
                .split(';')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim_matches('"').to_string())
        };
        parts.push(FormPart {
            name: param("name")?,
            filename: param("filename"),
            data: body[data_start..data_end].to_vec(),
        });
        at = data_end + next_delimiter.len();
    }
}

fn find_bytes(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}
