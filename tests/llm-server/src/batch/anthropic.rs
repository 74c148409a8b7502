//! TEST TOOL — not a provider. Anthropic's Message Batches
//! (`/v1/messages/batches`), with the online Messages route's header checks
//! (`anthropic-version`; the key in `x-api-key` or `Authorization: Bearer`).
//!
//! Creation refuses a `custom_id` not matching `^[a-zA-Z0-9_-]{1,64}$`, a
//! repeated one, over 100,000 requests or over 256 MB. A batch is
//! `in_progress` for `Script::batch_seconds`, its lines answered little by
//! little (`request_counts.processing` falling), then `ended`, with
//! `results_url` on this server. Each result is what the online Messages
//! route would answer: `succeeded` with its message, or `errored` with the
//! error it would send; lines to expire come out `expired`, and after a
//! cancel (`canceling` for a tenth of the batch's length) the lines not yet
//! answered come out `canceled`. Results come in a shuffled order.

use super::{Batch, Inner, Line, Outcome, Provider, key_ok, rfc3339, unix_now};
use crate::Shared;
use crate::anthropic::{chat_shape, error, error_type, message, refuse_headers, refuse_params};
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

/// Stricter than "256 MB" read as MiB, so a client kept under it is safe.
const MAX_BATCH_BYTES: usize = 256_000_000;
const MAX_REQUESTS: usize = 100_000;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/messages/batches", post(create).get(list))
        .route("/v1/messages/batches/{id}", get(retrieve))
        .route("/v1/messages/batches/{id}/results", get(results))
        .route("/v1/messages/batches/{id}/cancel", post(cancel))
}

fn bad(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

fn not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found_error",
        &format!("No message batch with id '{id}'."),
    )
}

fn ok(body: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `anthropic-version`, then the key, as the online route checks them.
fn gate(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    if let Some(message) = refuse_headers(headers) {
        return Some(bad(message));
    }
    if !key_ok(shared, Provider::Anthropic, headers) {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid x-api-key",
        ));
    }
    None
}

fn valid_custom_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

async fn create(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refusal) = gate(&shared, &headers) {
        return refusal;
    }
    if body.len() > MAX_BATCH_BYTES {
        return bad(&format!(
            "The batch is {} bytes; a batch may be at most 256 MB.",
            body.len()
        ));
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return bad("There was an error parsing the body of your request");
    };
    let Some(requests) = request["requests"].as_array() else {
        return bad("requests: Field required");
    };
    if requests.is_empty() {
        return bad("requests: List should have at least 1 item after validation, not 0");
    }
    if requests.len() > MAX_REQUESTS {
        return bad(&format!(
            "requests: a batch may have at most {MAX_REQUESTS} requests, not {}",
            requests.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut lines = Vec::with_capacity(requests.len());
    for (n, entry) in requests.iter().enumerate() {
        let Some(custom_id) = entry["custom_id"].as_str() else {
            return bad(&format!("requests.{n}.custom_id: Field required"));
        };
        if !valid_custom_id(custom_id) {
            return bad(&format!(
                "requests.{n}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            ));
        }
        if !seen.insert(custom_id) {
            return bad(&format!(
                "requests.{n}.custom_id: Duplicate custom_id '{custom_id}'; each request in a batch must have a unique custom_id."
            ));
        }
        let params = &entry["params"];
        if !params.is_object() {
            return bad(&format!("requests.{n}.params: Field required"));
        }
        let chat = chat_shape(params);
        lines.push(Line {
            custom_id: custom_id.to_string(),
            url: "/v1/messages".into(),
            expire: super::expires(&shared, &chat),
            chat,
            body: params.clone(),
        });
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Inner { ids, batches, .. } = &mut *inner;
    let mut batch = Batch::new(
        &shared,
        ids,
        Provider::Anthropic,
        "msgbatch_",
        &headers,
        lines,
        Default::default(),
    );
    advance(&shared, &mut batch, Instant::now());
    let object = object(&shared, &batch);
    batch.shown = true;
    batches.push(batch);
    ok(object)
}

fn find(inner: &Inner, id: &str) -> Option<usize> {
    inner
        .batches
        .iter()
        .position(|b| b.id == id && b.provider == Provider::Anthropic)
}

async fn retrieve(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, &headers) {
        return refusal;
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Some(index) = find(&inner, &id) else {
        return not_found(&id);
    };
    super::advance(&shared, &mut inner, index, Instant::now());
    ok(object(&shared, &inner.batches[index]))
}

async fn results(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, &headers) {
        return refusal;
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Some(index) = find(&inner, &id) else {
        return not_found(&id);
    };
    super::advance(&shared, &mut inner, index, Instant::now());
    let batch = &inner.batches[index];
    if batch.ended.is_none() {
        return bad(&format!(
            "Message batch '{id}' has not ended yet; its results are available once processing_status is 'ended'."
        ));
    }
    let body: String = batch
        .in_order()
        .filter_map(|(_, outcome)| outcome.map(|o| format!("{}\n", o.record)))
        .collect();
    (
        StatusCode::OK,
        [("content-type", "application/x-jsonl")],
        body,
    )
        .into_response()
}

async fn list(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, &headers) {
        return refusal;
    }
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => 20,
        Some(Ok(limit)) if (1..=1000).contains(&limit) => limit,
        Some(_) => return bad("limit: Input should be an integer from 1 to 1000"),
    };
    let mut inner = shared.batch.inner.lock().unwrap();
    let now = Instant::now();
    // Newest first.
    let mine: Vec<usize> = (0..inner.batches.len())
        .rev()
        .filter(|&i| inner.batches[i].provider == Provider::Anthropic)
        .collect();
    let position = |id: &String| mine.iter().position(|&i| inner.batches[i].id == *id);
    let (from, to) = match (query.get("after_id"), query.get("before_id")) {
        (Some(after), _) => match position(after) {
            Some(at) => (at + 1, (at + 1 + limit).min(mine.len())),
            None => return not_found(after),
        },
        (None, Some(before)) => match position(before) {
            Some(at) => (at.saturating_sub(limit), at),
            None => return not_found(before),
        },
        (None, None) => (0, limit.min(mine.len())),
    };
    let page = mine[from..to].to_vec();
    let backwards = query.contains_key("before_id") && !query.contains_key("after_id");
    let has_more = match backwards {
        true => from > 0,
        false => to < mine.len(),
    };
    let data: Vec<Value> = page
        .iter()
        .map(|&i| {
            super::advance(&shared, &mut inner, i, now);
            object(&shared, &inner.batches[i])
        })
        .collect();
    ok(json!({
        "data": data,
        "has_more": has_more,
        "first_id": page.first().map(|&i| inner.batches[i].id.clone()),
        "last_id": page.last().map(|&i| inner.batches[i].id.clone()),
    }))
}

async fn cancel(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = gate(&shared, &headers) {
        return refusal;
    }
    let mut inner = shared.batch.inner.lock().unwrap();
    let Some(index) = find(&inner, &id) else {
        return not_found(&id);
    };
    let now = Instant::now();
    super::advance(&shared, &mut inner, index, now);
    let batch = &mut inner.batches[index];
    if batch.status == "in_progress" {
        batch.cancel = Some((now, unix_now()));
        advance(&shared, batch, now);
    }
    // Cancelling a batch that is canceling or ended changes nothing.
    ok(object(&shared, batch))
}

/// Brings an Anthropic batch up to `now`.
pub(crate) fn advance(shared: &Shared, batch: &mut Batch, now: Instant) {
    if batch.ended.is_some() {
        return;
    }
    if let Some((asked, asked_unix)) = batch.cancel {
        batch.mark("cancel_initiated_at", asked_unix);
        let grace = batch.length / 10;
        if now.saturating_duration_since(asked) < grace {
            batch.status = "canceling";
            return;
        }
        end(batch, "canceled", asked_unix + grace.as_secs_f64());
        return;
    }
    batch.answer_due(shared, now, (0.0, 1.0));
    if batch.time_up(now) {
        let at = batch.at(1.0);
        end(batch, "expired", at);
    } else {
        batch.status = "in_progress";
    }
}

/// Ends the batch; the lines never answered come out as `kind`.
fn end(batch: &mut Batch, kind: &str, at: f64) {
    for (line, outcome) in batch.lines.iter().zip(batch.outcomes.iter_mut()) {
        if outcome.is_none() {
            *outcome = Some(Outcome {
                status: 0,
                record: json!({"custom_id": line.custom_id, "result": {"type": kind}}),
            });
        }
    }
    batch.mark("ended_at", at);
    batch.ended = Some(at);
    batch.status = "ended";
}

/// One request answered as the online Messages route would.
pub(crate) fn answer(shared: &Shared, headers: &HeaderMap, line: &Line) -> Outcome {
    let errored = |status: u16, kind: &str, message: &str| Outcome {
        status,
        record: json!({"custom_id": line.custom_id, "result": {"type": "errored",
            "error": {"type": "error", "error": {"type": kind, "message": message}}}}),
    };
    if let Some(refusal) = refuse_params(&line.body) {
        return errored(400, "invalid_request_error", refusal);
    }
    let (status, body) =
        crate::answer_line(shared, &line.url, headers, &line.chat, Some(&line.body));
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if !code.is_success() {
        let said = body["error"]["message"].as_str().unwrap_or("error");
        return errored(status, error_type(code), said);
    }
    match message(&body, line.body["max_tokens"].as_u64().unwrap_or(u64::MAX)) {
        Some(message) => Outcome {
            status,
            record: json!({"custom_id": line.custom_id,
                           "result": {"type": "succeeded", "message": message}}),
        },
        None => errored(500, "api_error", "Internal server error"),
    }
}

/// The batch object, every field Anthropic sends.
fn object(shared: &Shared, batch: &Batch) -> Value {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for outcome in &batch.outcomes {
        let kind = match outcome {
            None => "processing",
            Some(o) => o.record["result"]["type"].as_str().unwrap_or("errored"),
        };
        *counts.entry(kind).or_default() += 1;
    }
    let count = |kind: &str| counts.get(kind).copied().unwrap_or_default();
    let time = |field: &str| batch.time(field).map(rfc3339);
    let results_url = batch
        .ended
        .map(|_| format!("{}/v1/messages/batches/{}/results", shared.root, batch.id));
    json!({
        "id": batch.id,
        "type": "message_batch",
        "processing_status": batch.status,
        "request_counts": {
            "processing": count("processing"),
            "succeeded": count("succeeded"),
            "errored": count("errored"),
            "canceled": count("canceled"),
            "expired": count("expired"),
        },
        "ended_at": time("ended_at"),
        "created_at": rfc3339(batch.created_unix),
        "expires_at": rfc3339(batch.created_unix + 24.0 * 3600.0),
        "cancel_initiated_at": time("cancel_initiated_at"),
        "archived_at": null,
        "results_url": results_url,
    })
}
