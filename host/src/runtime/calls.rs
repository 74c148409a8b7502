//! What becomes of a component's requests: answered from the record of an
//! earlier segment, from a provider batch (or parked until one answers),
//! from the response cache, or sent through the executor; each recorded in
//! the audit trail as a call.

use super::bindings::{CallError, Request, Response};
use super::parking::body_hash;
use super::state::{GuestState, NodeServices, Outbound, RowScope};
use crate::hashing;
use crate::services::audit::{AuditLog, CallRecord, Json, Record, now_ms};
use crate::services::batch::{self, BatchQueue, Lookup, Parked};
use crate::services::cache::CacheSlot;
use crate::services::executor::{self, Endpoint};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl GuestState {
    /// Every request is numbered in the order the component gave it, so a
    /// row run again numbers its requests the same way. When any request
    /// waits on a provider batch, nothing is sent and the component stops
    /// (`Parked`): the row runs again once the answers are in. When the
    /// node has no room for another instance waiting on the network, the
    /// requests are sent without it: the component stops, and the row runs
    /// again once they are answered, taking their answers (see `parking`).
    pub(super) async fn send(
        &mut self,
        requests: Vec<Request>,
    ) -> wasmtime::Result<Vec<Result<Response, CallError>>> {
        let mut plans = Vec::with_capacity(requests.len());
        let mut waits = Vec::new();
        for request in requests {
            match self.plan(request) {
                Plan::Wait(queue, custom_id) => waits.push((queue, custom_id)),
                plan => plans.push(plan),
            }
        }
        if !waits.is_empty() {
            // What the row waits for stays here; the trap only unwinds the
            // component, and carries nothing a waiting row would keep.
            self.parked = Some(Parked::on_batches(waits));
            return Err(wasmtime::Error::msg("the row waits on a provider batch"));
        }
        // The place is kept until the call ends, not only while it waits:
        // the answers of a wave come in together, and the rows they wake
        // hold their instances until they have run; places given back at
        // the answer would let as many new rows suspend meanwhile.
        let goes_out = plans.iter().any(|p| matches!(p, Plan::Send { .. }));
        match (goes_out && self.suspended.is_none()).then(|| self.suspend.try_suspend()) {
            Some(None) if self.suspend.parking_pays(expected_wait(&plans)) => {
                self.suspend.parked();
                self.parked = Some(Parked::sending(send_parked(Arc::clone(&self.node), plans)));
                return Err(wasmtime::Error::msg(
                    "the row waits for its answers without its instance",
                ));
            }
            // Beyond the budget, a row whose restart would cost more than
            // its wait keeps its instance suspended.
            Some(suspended) => self.suspended = suspended,
            None => {}
        }
        let node = &self.node;
        let calls = plans.into_iter().map(|plan| async move {
            match plan {
                Plan::Done(result) => result,
                Plan::Send {
                    endpoint,
                    scope,
                    request_index,
                    body,
                } => send_one(node, &endpoint, &scope, request_index, body).await,
                Plan::Wait(..) => unreachable!("waits return above"),
            }
        });
        Ok(futures::future::join_all(calls).await)
    }
}

/// How long the requests that go out should take: the slowest of their
/// endpoints' recent latencies, unknown until each has answered.
fn expected_wait(plans: &[Plan]) -> Option<std::time::Duration> {
    let mut longest = None;
    for plan in plans {
        if let Plan::Send { endpoint, .. } = plan {
            let wait = endpoint.expected_wait()?;
            longest = longest.max(Some(wait));
        }
    }
    longest
}

/// Sends a parked row's requests, each answer recorded for its replay. The
/// answers already known (a denied endpoint) are worked out again then.
fn send_parked(
    node: Arc<NodeServices>,
    plans: Vec<Plan>,
) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        let node = &node;
        let calls = plans.into_iter().map(|plan| async move {
            if let Plan::Send {
                endpoint,
                scope,
                request_index,
                body,
            } = plan
            {
                // Hashed now, to tell that the replay's request is this one.
                let asked = body_hash(&body);
                let answer = send_one(node, &endpoint, &scope, request_index, body).await;
                scope.answers.put(request_index, asked, answer);
            }
        });
        futures::future::join_all(calls).await;
    })
}

/// What becomes of one request of a `send`.
enum Plan {
    Done(Result<Response, CallError>),
    Send {
        endpoint: Arc<Endpoint>,
        scope: RowScope,
        request_index: u32,
        body: String,
    },
    Wait(Arc<BatchQueue>, String),
}

impl GuestState {
    fn plan(&mut self, request: Request) -> Plan {
        let rows = self.scope.len();
        let Some(scope) = self.scope.get(request.row as usize).cloned() else {
            return Plan::Done(Err(CallError::Denied(format!(
                "row index {} is out of range: this call has {rows} rows",
                request.row
            ))));
        };
        if !self.node.endpoints.contains(&request.endpoint) {
            return Plan::Done(Err(CallError::Denied(denied_message(
                &self.node,
                &request.endpoint,
            ))));
        }
        let request_index = scope.requests.fetch_add(1, Ordering::Relaxed);
        // Answered while the row was parked: its call is recorded already.
        if let Some(answer) = scope.answers.take(request_index, &request.body) {
            return Plan::Done(answer);
        }
        let endpoint = match &self.node.outbound {
            Outbound::Scripted(script) => {
                return Plan::Done(script.answer(request.row, &request.endpoint, &request.body));
            }
            Outbound::Live(grants) => Arc::clone(&grants[&request.endpoint]),
        };
        if let Some(refusal) = endpoint.refusal(&request.body) {
            return Plan::Done(Err(CallError::Denied(refusal)));
        }
        if let (Some(queue), Some(audit)) = (endpoint.batch(), &self.node.audit) {
            let cache_slot = endpoint.cache_slot(&request.body);
            if let Some(slot) = &cache_slot
                && let Some(answer) =
                    from_cache(audit, &endpoint, &scope, request_index, slot, &request.body)
            {
                return Plan::Done(Ok(answer));
            }
            let request_sha256 = hashing::json_text_sha256(&request.body);
            let custom_id = batch::custom_id(
                audit.run_id(),
                scope.row_index,
                scope.node_id,
                request_index,
                &request_sha256,
            );
            let lookup = queue.lookup(batch::Request {
                custom_id: custom_id.clone(),
                row_index: scope.row_index,
                node_id: scope.node_id,
                request_index,
                request_sha256,
                body: request.body.clone(),
            });
            match lookup {
                Lookup::Answer(answer) => {
                    let result = batch_answer(
                        audit,
                        &endpoint,
                        &scope,
                        request_index,
                        &request.body,
                        cache_slot.as_ref(),
                        answer,
                    );
                    return Plan::Done(result);
                }
                Lookup::Wait => return Plan::Wait(Arc::clone(queue), custom_id),
                Lookup::Online => {}
            }
        }
        Plan::Send {
            endpoint,
            scope,
            request_index,
            body: request.body,
        }
    }
}

/// A batch's answer as the component gets it, recorded as a call the first
/// time a row takes it, with its cost at the Batch API's price, and kept in
/// the response cache like an online answer.
fn batch_answer(
    audit: &AuditLog,
    endpoint: &Endpoint,
    scope: &RowScope,
    request_index: u32,
    body: &str,
    cache_slot: Option<&CacheSlot>,
    answer: batch::Answer,
) -> Result<Response, CallError> {
    let ok = (200..300).contains(&answer.status);
    let cost = (!answer.used_before && ok)
        .then(|| endpoint.batch_answer_taken(body, &answer.body, answer.tokens))
        .flatten();
    if let (true, Some(slot)) = (ok, cache_slot) {
        // An answer a row took before, in this process or a killed one, was
        // counted then; a cache that lacks it (cleared since) still learns
        // what it cost, or its hits would say they saved nothing.
        let paid = cost.or_else(|| {
            endpoint
                .batch_answer_cost(body, &answer.body)
                .map(|(c, _)| c)
        });
        endpoint.keep_answer(slot, &answer.body, paid.map(|c| c.usd));
    }
    audit.record(Record::Call(CallRecord {
        response: Some(Json::Text(Arc::from(answer.body.as_str()))),
        status: Some(answer.status),
        prompt_tokens: answer.tokens.map(|t| t.0),
        completion_tokens: answer.tokens.map(|t| t.1),
        replayed: answer.used_before,
        cost: cost.map(|c| (c.usd, c.estimated)),
        provider_batch: answer.batch_id,
        ..call_record(
            endpoint,
            scope,
            request_index,
            1,
            Json::Text(Arc::from(body)),
        )
    }));
    let response = Response {
        status: answer.status,
        body: answer.body,
        attempts: 1,
        latency_ms: 0,
    };
    if (200..300).contains(&response.status) {
        Ok(response)
    } else {
        Err(CallError::Status(response))
    }
}

fn denied_message(node: &NodeServices, endpoint: &str) -> String {
    let granted: Vec<&str> = node.endpoints.iter().map(String::as_str).collect();
    format!(
        "endpoint `{endpoint}` is not granted to node `{}` (granted: {}); add it to the node's `endpoints:`",
        node.node_name,
        if granted.is_empty() {
            "none".to_string()
        } else {
            granted.join(", ")
        }
    )
}

async fn send_one(
    node: &NodeServices,
    endpoint: &Endpoint,
    scope: &RowScope,
    request_index: u32,
    body: String,
) -> Result<Response, CallError> {
    let Some(audit) = &node.audit else {
        let cache_slot = endpoint.cache_slot(&body);
        if let Some(answer) = cache_slot.as_ref().and_then(|s| endpoint.cached_answer(s)) {
            return Ok(to_wit_response(answer));
        }
        return endpoint
            .send(&body, cache_slot.as_ref(), scope.deadline, |_| {})
            .await
            .map(to_wit_response)
            .map_err(to_wit_error);
    };
    let request: Arc<str> = Arc::from(body.as_str());
    let call =
        |attempt: u32, request: Json| call_record(endpoint, scope, request_index, attempt, request);
    if let Some(replay) = audit.replay() {
        // Only a resumed run hashes here: the hash is what it looks up.
        let request_sha256 = hashing::json_text_sha256(&body);
        let answer = replay.answer(
            scope.row_index,
            scope.node_id,
            &endpoint.name,
            &request_sha256,
        );
        if let Some((response_sha256, answer)) = answer {
            audit.record(Record::Call(CallRecord {
                response: Some(Json::Hashed(response_sha256)),
                status: Some(200),
                replayed: true,
                ..call(1, Json::Hashed(request_sha256))
            }));
            return Ok(Response {
                status: 200,
                body: answer,
                attempts: 0,
                latency_ms: 0,
            });
        }
    }
    // The run's own recorded answers come first; the cache may hold answers
    // of other runs.
    let cache_slot = endpoint.cache_slot(&body);
    if let Some(slot) = &cache_slot
        && let Some(answer) = from_cache(audit, endpoint, scope, request_index, slot, &body)
    {
        return Ok(answer);
    }
    endpoint
        .send(&body, cache_slot.as_ref(), scope.deadline, |attempt| {
            audit.record(Record::Call(CallRecord {
                response: attempt.body.map(|text| Json::Text(Arc::from(text))),
                status: attempt.status,
                error: attempt.error,
                retry_cause: attempt.retry_cause,
                latency_ms: attempt.latency.as_millis() as u64,
                prompt_tokens: attempt.tokens.map(|t| t.0),
                completion_tokens: attempt.tokens.map(|t| t.1),
                started_at_ms: attempt.started_at_ms,
                cost: attempt.cost.map(|c| (c.usd, c.estimated)),
                ..call(attempt.attempt, Json::Text(Arc::clone(&request)))
            }));
        })
        .await
        .map(to_wit_response)
        .map_err(to_wit_error)
}

/// A call of the node state `scope` to `endpoint`, to be filled in.
fn call_record(
    endpoint: &Endpoint,
    scope: &RowScope,
    request_index: u32,
    attempt: u32,
    request: Json,
) -> CallRecord {
    CallRecord {
        state_id: scope.state_id,
        row_index: scope.row_index,
        node_id: scope.node_id,
        call_index: scope.calls.fetch_add(1, Ordering::Relaxed),
        endpoint: endpoint.name.clone(),
        request_index,
        attempt,
        request,
        response: None,
        status: None,
        error: None,
        retry_cause: None,
        latency_ms: 0,
        prompt_tokens: None,
        completion_tokens: None,
        started_at_ms: now_ms(),
        replayed: false,
        cost: None,
        cached: false,
        provider_batch: None,
    }
}

/// An identical request's answer from the endpoint's response cache,
/// recorded as a cached call.
fn from_cache(
    audit: &AuditLog,
    endpoint: &Endpoint,
    scope: &RowScope,
    request_index: u32,
    slot: &CacheSlot,
    body: &str,
) -> Option<Response> {
    let answer = endpoint.cached_answer(slot)?;
    audit.record(Record::Call(CallRecord {
        response: Some(Json::Text(Arc::from(answer.body.as_str()))),
        status: Some(answer.status),
        cached: true,
        ..call_record(
            endpoint,
            scope,
            request_index,
            1,
            Json::Text(Arc::from(body)),
        )
    }));
    Some(to_wit_response(answer))
}

fn to_wit_error(e: executor::CallError) -> CallError {
    match e {
        executor::CallError::Denied(m) => CallError::Denied(m),
        executor::CallError::Status(r) => CallError::Status(to_wit_response(r)),
        executor::CallError::DeadlineExceeded(m) => CallError::DeadlineExceeded(m),
        executor::CallError::Transport(m) => CallError::Transport(m),
    }
}

fn to_wit_response(r: executor::Response) -> Response {
    Response {
        status: r.status,
        body: r.body,
        attempts: r.attempts,
        latency_ms: r.latency.as_millis().min(u32::MAX as u128) as u32,
    }
}
