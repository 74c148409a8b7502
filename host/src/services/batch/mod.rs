//! Batch API mode: an endpoint's requests gathered into the provider's
//! batches instead of sent one by one.
//!
//! A row whose component sends a request with no answer yet is parked: the
//! request is queued here, the component's instance is dropped, and the row
//! waits holding only its data. Once the batch that carries the request
//! ends, the row runs again from the start; components are deterministic,
//! so it sends the same requests, and those answered are answered from here.
//! A row that sends again after reading an answer parks again: such rows
//! proceed in rounds, one batch each.

mod client;
mod error;
pub mod lines;
mod spool;
mod store;

use crate::config::{BatchFallback, EndpointSpec, PriceSpec, provider_batch_limit};
use crate::context::{Context as _, causes};
use crate::services::budget::{Budget, Hold};
use crate::services::cost;
use crate::services::stop::{RunStop, StopReason};
use client::{Client, Status};
use lines::{LineOutcome, LineResult};
use spool::{Spool, Spooled};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use store::{Job, JobState, Recorded, Store};

pub use store::Request;

pub use error::BatchError;

type Result<T, E = BatchError> = std::result::Result<T, E>;

/// A batch is sent once no new request has joined it for this long (or it
/// is full): the rows in flight have all parked by then.
const GATHER: Duration = Duration::from_millis(500);

/// A batch line's bytes besides its body: custom_id, method, url, and for
/// Anthropic the body's translation; generous, so a batch stays under the
/// provider's size limit.
const LINE_ENVELOPE_BYTES: usize = 512;

/// The most bytes of one batch: OpenAI and Azure OpenAI take files of up to
/// 200 MB, Anthropic batches of up to 256 MB; a margin is kept below each.
fn provider_batch_bytes(kind: crate::config::EndpointKind) -> usize {
    match kind {
        crate::config::EndpointKind::Anthropic => 250_000_000,
        _ => 195_000_000,
    }
}

/// A request whose line failed in this many batches is sent online.
const MAX_BATCH_ATTEMPTS: u32 = 3;

/// Waits between tries of an upload, creation or poll the network broke.
const NETWORK_BACKOFF: Duration = Duration::from_secs(2);

/// What a row's request finds when it asks for its answer.
pub enum Lookup {
    Answer(Answer),
    /// Not answered yet: the row parks.
    Wait,
    /// Its batch line failed for capacity or a server error and
    /// `batch_fallback: online` sends it online.
    Online,
}

/// A request's answer from a batch.
pub struct Answer {
    pub status: u16,
    pub body: String,
    pub tokens: Option<(u64, u64)>,
    pub batch_id: Option<String>,
    /// A row already took this answer, in this process or an earlier one:
    /// its call and cost are recorded.
    pub used_before: bool,
}

#[derive(Debug, Clone)]
enum Entry {
    /// Queued for the next batch.
    Waiting,
    InJob,
    Answered {
        used: bool,
    },
    Failed,
    Online,
}

#[derive(Default)]
struct Queue {
    entries: HashMap<String, Entry>,
    /// Requests for the next batch, in the order they came.
    waiting: Vec<Request>,
    last_added: Option<Instant>,
    /// Batches each request has been in, for those that failed before.
    attempts: HashMap<String, u32>,
}

/// What the summary tells of an endpoint's batches.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BatchStats {
    pub batches: u64,
    pub requests: u64,
    pub answered: u64,
    pub failed: u64,
    pub resubmitted: u64,
    /// From the first submission of this process to the last batch's end.
    pub waited: Duration,
    /// What the answers taken would have cost online, less what they cost.
    pub saved_usd: f64,
}

pub struct BatchQueue {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: String,
    client: Client,
    store: Store,
    run_id: i64,
    /// Where the audit database is: part of every batch's tag.
    audit_path: String,
    poll: Duration,
    max_requests: usize,
    max_bytes: usize,
    fallback: BatchFallback,
    stop: Arc<RunStop>,
    budget: Arc<Budget>,
    price: Option<PriceSpec>,
    queue: Mutex<Queue>,
    /// Told by `enqueue`; gathering waits on it while the queue is empty.
    added: tokio::sync::Notify,
    /// The rows waiting on this endpoint's batches, woken to look again
    /// whenever answers arrive and once the run stops.
    wakers: Mutex<Vec<Waker>>,
    counts: Counts,
    /// Stopped when the queue is dropped; the provider keeps working on
    /// what was submitted, and a resume follows it again.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

#[derive(Default)]
struct Counts {
    batches: AtomicU64,
    requests: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
    resubmitted: AtomicU64,
    saved_usd: Mutex<f64>,
    first_submit: Mutex<Option<Instant>>,
    last_end: Mutex<Option<Instant>>,
}

impl BatchQueue {
    /// Opens the endpoint's batch state for run `run_id` of the audit
    /// database at `audit_path`, takes up the batches an earlier segment
    /// left with the provider, and starts gathering.
    pub fn open(
        name: &str,
        spec: &EndpointSpec,
        headers: reqwest::header::HeaderMap,
        audit_path: &Path,
        run_id: i64,
        stop: Arc<RunStop>,
        budget: Arc<Budget>,
    ) -> Result<Self> {
        let inner = Arc::new(Inner {
            endpoint: name.to_string(),
            client: Client::new(name, spec, headers)?,
            store: Store::open(audit_path, run_id, name)?,
            run_id,
            audit_path: audit_path.display().to_string(),
            poll: Duration::from_secs_f64(spec.batch_poll_seconds),
            max_requests: spec
                .batch_max_requests
                .unwrap_or_else(|| provider_batch_limit(spec.kind)),
            max_bytes: provider_batch_bytes(spec.kind),
            fallback: spec.batch_fallback,
            stop,
            budget,
            price: spec.price.clone(),
            queue: Mutex::new(Queue::default()),
            added: tokio::sync::Notify::new(),
            wakers: Mutex::new(Vec::new()),
            counts: Counts::default(),
            tasks: Mutex::new(Vec::new()),
        });
        let queue = Self {
            inner: Arc::clone(&inner),
        };
        queue.take_up_recorded()?;
        let gatherer = tokio::spawn(Arc::clone(&inner).gather());
        inner.keep(gatherer.abort_handle());
        let waking = tokio::spawn({
            let inner = Arc::clone(&inner);
            async move {
                inner.stop.draining().await;
                inner.wake_all();
            }
        });
        inner.keep(waking.abort_handle());
        Ok(queue)
    }

    /// What an earlier segment left: answers to hand out, batches to
    /// follow, requests to send again.
    fn take_up_recorded(&self) -> Result<()> {
        let inner = &self.inner;
        let recorded = inner.store.recorded()?;
        {
            let mut queue = inner.queue();
            for (custom_id, recorded) in recorded {
                let entry = match recorded {
                    Recorded::Answered { used } => Entry::Answered { used },
                    Recorded::Failed => Entry::Failed,
                    // The row sends it again when it runs, and it is queued then.
                    Recorded::Retry => continue,
                    Recorded::InJob => Entry::InJob,
                };
                queue.entries.insert(custom_id, entry);
            }
        }
        for job in inner.store.open_jobs()? {
            let task = tokio::spawn(Arc::clone(inner).follow(job, None));
            inner.keep(task.abort_handle());
        }
        Ok(())
    }

    /// The answer to a request, or what the row should do meanwhile. A
    /// request seen for the first time is queued for the next batch.
    pub fn lookup(&self, request: Request) -> Lookup {
        let inner = &self.inner;
        let mut queue = inner.queue();
        let used_before = match queue.entries.get_mut(&request.custom_id) {
            Some(Entry::Answered { used }) => std::mem::replace(used, true),
            // A failure costs nothing: there is no call to count.
            Some(Entry::Failed) => true,
            Some(Entry::Online) => return Lookup::Online,
            Some(Entry::Waiting | Entry::InJob) => return Lookup::Wait,
            None => {
                queue
                    .entries
                    .insert(request.custom_id.clone(), Entry::Waiting);
                inner.enqueue(&mut queue, [request]);
                return Lookup::Wait;
            }
        };
        drop(queue);
        match inner.store.answer(&request.custom_id) {
            Ok(Some(stored)) => Lookup::Answer(Answer {
                status: stored.status,
                body: stored.body,
                tokens: stored.tokens,
                batch_id: stored.batch_id,
                used_before,
            }),
            // The audit database cannot be read: the row waits, and a
            // resume finds the answer.
            Ok(None) | Err(_) => Lookup::Wait,
        }
    }

    /// Ready once none of `custom_ids` waits any more, or failed once the
    /// run stops: the row then keeps no outcome, and a resume takes it up.
    /// While pending, `cx` is woken when answers arrive or the run stops;
    /// a waiting row is so only data, with no future of its own to wait in.
    pub fn poll_answered(
        &self,
        custom_ids: &[String],
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), String>> {
        // Registered before looking, so answers handed out in between still
        // wake the row.
        self.inner.wake_later(cx.waker());
        if self.inner.stop.is_draining() {
            let reason = self
                .inner
                .stop
                .reason()
                .map(ToString::to_string)
                .unwrap_or_default();
            return Poll::Ready(Err(format!(
                "detached from the batches of endpoint `{}` ({reason})",
                self.inner.endpoint
            )));
        }
        let queue = self.inner.queue();
        let pending = custom_ids.iter().any(|id| {
            matches!(
                queue.entries.get(id),
                Some(Entry::Waiting | Entry::InJob) | None
            )
        });
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }

    pub fn saved(&self, usd: f64) {
        *self
            .inner
            .counts
            .saved_usd
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += usd;
    }

    pub fn stats(&self) -> BatchStats {
        let c = &self.inner.counts;
        let waited = match (
            *c.first_submit.lock().unwrap_or_else(|e| e.into_inner()),
            *c.last_end.lock().unwrap_or_else(|e| e.into_inner()),
        ) {
            (Some(first), Some(last)) if last > first => last - first,
            (Some(first), _) => first.elapsed(),
            _ => Duration::ZERO,
        };
        BatchStats {
            batches: c.batches.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            answered: c.answered.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            resubmitted: c.resubmitted.load(Ordering::Relaxed),
            waited,
            saved_usd: *c.saved_usd.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl Drop for BatchQueue {
    fn drop(&mut self) {
        let tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            task.abort();
        }
    }
}

impl Inner {
    fn keep(&self, task: tokio::task::AbortHandle) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `requests` in line for the next batch, and tells gathering.
    fn enqueue(&self, queue: &mut Queue, requests: impl IntoIterator<Item = Request>) {
        queue.waiting.extend(requests);
        queue.last_added = Some(Instant::now());
        self.added.notify_one();
    }

    fn wake_later(&self, waker: &Waker) {
        let mut wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        // A row waiting on several requests of this endpoint asks once.
        if !wakers.last().is_some_and(|last| last.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }

    fn wake_all(&self) {
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        for waker in wakers {
            waker.wake();
        }
    }

    /// Sends a batch whenever one is full, or once requests stopped coming.
    /// A stopping run sends nothing more: what waits is recorded by the
    /// rows, and a resume sends it.
    async fn gather(self: Arc<Self>) {
        loop {
            // A run waits hours on its batches with nothing to gather: it
            // sleeps until a request comes instead of looking five times a
            // second. A request added after this look leaves a permit.
            let empty = self.queue().waiting.is_empty();
            tokio::select! {
                _ = self.added.notified(), if empty => {}
                _ = tokio::time::sleep(GATHER / 5), if !empty => {}
                _ = self.stop.draining() => return,
            }
            let batch = {
                let mut queue = self.queue();
                let idle = queue.last_added.is_some_and(|at| at.elapsed() >= GATHER);
                let take = fits(&queue.waiting, self.max_requests, self.max_bytes);
                // Full: a batch of `take` leaves requests behind.
                if take < queue.waiting.len() || (idle && take > 0) {
                    let batch: Vec<Request> = queue.waiting.drain(..take).collect();
                    for r in &batch {
                        queue.entries.insert(r.custom_id.clone(), Entry::InJob);
                    }
                    Some(batch)
                } else {
                    None
                }
            };
            if let Some(batch) = batch {
                // What the batch is expected to cost is held against the
                // budget until it ends; a batch that would pass it is not
                // sent, and the run stops, resumable.
                let Some(hold) = self.budget.hold(self.expected_cost(&batch)) else {
                    return;
                };
                match self.store.prepare(&batch) {
                    Ok((job_id, prepared_at_ms)) => {
                        let job = Job {
                            job_id,
                            state: JobState::Preparing,
                            input_file_id: None,
                            batch_id: None,
                            prepared_at_ms,
                            recovered: false,
                        };
                        let task = tokio::spawn(Arc::clone(&self).follow(job, Some(hold)));
                        self.keep(task.abort_handle());
                    }
                    Err(e) => {
                        self.budget.settle(hold, 0.0);
                        self.stop.abort(StopReason::EndpointDown {
                            endpoint: self.endpoint.clone(),
                            detail: format!(
                                "cannot record a batch in the audit database before sending it: {}",
                                causes(&e)
                            ),
                        });
                        return;
                    }
                }
            }
        }
    }

    fn expected_cost(&self, batch: &[Request]) -> f64 {
        let Some(price) = &self.price else {
            return 0.0;
        };
        let online: f64 = batch
            .iter()
            .map(|r| cost::estimate(price, &r.body, None))
            .sum();
        online * cost::batch_factor(price)
    }

    /// The tag in a batch's metadata: this run's batch and no other, even
    /// where several audit databases share a provider account.
    fn tag(&self, job: &Job) -> String {
        let digest = crate::hashing::sha256_hex(format!(
            "{}\n{}\n{}\n{}",
            self.audit_path, self.run_id, job.job_id, job.prepared_at_ms
        ));
        format!("weir-{}-{}-{}", self.run_id, job.job_id, &digest[..16])
    }

    /// Takes a batch from wherever it stands to its end: uploads, creates,
    /// polls, downloads, and hands out what came back.
    /// `hold`: the batch's expected cost, held against the budget until it
    /// ends; its answers then count as rows take them.
    async fn follow(self: Arc<Self>, mut job: Job, hold: Option<Hold>) {
        let driven = self.drive(&mut job).await;
        if let Some(hold) = hold {
            self.budget.settle(hold, 0.0);
        }
        if let Err(e) = driven {
            let refused = e.refused_status();
            let reason = match refused {
                Some(401 | 403) => StopReason::EndpointRefused {
                    endpoint: self.endpoint.clone(),
                    detail: causes(&e),
                },
                _ => StopReason::EndpointDown {
                    endpoint: self.endpoint.clone(),
                    detail: format!("batch {}: {}", job.job_id, causes(&e)),
                },
            };
            // The batch stays recorded where it stands; a resume takes it up.
            if !self.stop.is_draining() {
                self.stop.abort(reason);
            }
        }
    }

    /// Takes a batch from where it stands to submitted, finding one that
    /// a killed run created but did not record before creating another;
    /// returns the provider's id for it.
    async fn submit(&self, job: &mut Job, lines: &Spooled) -> Result<String> {
        let tag = self.tag(job);
        if job.state == JobState::Uploaded && job.batch_id.is_none() {
            // Killed between creating the batch and recording its id?
            job.batch_id = self.retry(|| self.client.find(&tag)).await?;
            if let Some(id) = &job.batch_id {
                self.store.submitted(job.job_id, id)?;
                job.state = JobState::Submitted;
            }
        }
        if job.recovered
            && job.state == JobState::Preparing
            && self.client.wire() == lines::Wire::Anthropic
        {
            // Killed between creating the batch and recording its id?
            let known = self.store.batch_ids()?;
            job.batch_id = self
                .retry(|| {
                    self.client
                        .find_untagged(job.prepared_at_ms, lines.count, &known)
                })
                .await?;
            if let Some(id) = &job.batch_id {
                self.store.submitted(job.job_id, id)?;
                job.state = JobState::Submitted;
            }
        }
        if job.state == JobState::Preparing && self.client.wire() != lines::Wire::Anthropic {
            let file = self.retry(|| self.client.upload(lines)).await?;
            self.store.uploaded(job.job_id, &file)?;
            job.input_file_id = Some(file);
            job.state = JobState::Uploaded;
        }
        if job.batch_id.is_none() {
            let file = job.input_file_id.clone();
            let id = self
                .retry(|| self.client.create(file.as_deref(), lines, &tag))
                .await?;
            self.store.submitted(job.job_id, &id)?;
            job.batch_id = Some(id);
            job.state = JobState::Submitted;
        }
        Ok(job.batch_id.clone().unwrap_or_default())
    }

    async fn drive(&self, job: &mut Job) -> Result<()> {
        let lines = self.spool(job.job_id)?;
        let batch_id = self.submit(job, &lines).await?;
        {
            let mut first = self
                .counts
                .first_submit
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(Instant::now);
        }
        self.counts.batches.fetch_add(1, Ordering::Relaxed);
        self.counts
            .requests
            .fetch_add(lines.count as u64, Ordering::Relaxed);
        tracing::info!(
            endpoint = %self.endpoint,
            "batch {batch_id}: {} requests submitted; asking for its status every {:.0} s",
            lines.count,
            self.poll.as_secs_f64()
        );
        // The requests are in the audit database: not kept while the
        // provider works, which may be hours.
        drop(lines);
        let status = self.poll_until_ended(&batch_id, job.job_id).await?;
        // Their ids only: the bodies stay in the database, whence the few
        // requests sent again are read.
        let taking = Mutex::new(Taking {
            unanswered: self.store.custom_ids_of(job.job_id)?.into_iter().collect(),
            succeeded: 0,
            failed: 0,
        });
        let unreadable = self
            .retry(|| self.take_results(job.job_id, &status, &taking))
            .await?;
        if unreadable > 0 {
            tracing::warn!(
                endpoint = %self.endpoint,
                "batch {batch_id}: {unreadable} result lines could not be read; their requests go into another batch"
            );
        }
        *self
            .counts
            .last_end
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let mut taking = taking.into_inner().unwrap_or_else(|e| e.into_inner());
        let left_out = left_out(std::mem::take(&mut taking.unanswered), &status);
        self.take(job.job_id, left_out, &mut taking)?;
        self.store
            .ended(job.job_id, &status.status, taking.succeeded, taking.failed)
    }

    /// Records and hands out the batch's results as they download, some at
    /// a time: the answers of 50,000 requests are never held at once. A
    /// download tried again skips the lines already taken.
    async fn take_results(
        &self,
        job_id: i64,
        status: &Status,
        taking: &Mutex<Taking>,
    ) -> Result<usize> {
        let mut chunk = Vec::new();
        let mut failure = None;
        let unreadable = self
            .client
            .results(status, |line| {
                let mut taking = taking.lock().unwrap_or_else(|e| e.into_inner());
                if failure.is_some() || !taking.unanswered.contains(&line.custom_id) {
                    return;
                }
                chunk.push(line);
                if chunk.len() >= RESULTS_AT_ONCE
                    && let Err(e) = self.take(job_id, std::mem::take(&mut chunk), &mut taking)
                {
                    failure = Some(e);
                }
            })
            .await?;
        if let Some(e) = failure {
            return Err(e);
        }
        let mut taking = taking.lock().unwrap_or_else(|e| e.into_inner());
        self.take(job_id, chunk, &mut taking)?;
        Ok(unreadable)
    }

    fn take(&self, job_id: i64, results: Vec<LineResult>, taking: &mut Taking) -> Result<()> {
        let (succeeded, failed) = self.store.record_results(job_id, &results)?;
        taking.succeeded += succeeded;
        taking.failed += failed;
        for result in &results {
            taking.unanswered.remove(&result.custom_id);
        }
        self.hand_out(results)
    }

    /// The batch's lines, read one request at a time from the audit
    /// database.
    fn spool(&self, job_id: i64) -> Result<Spooled> {
        const SPOOLING: &str = "cannot spool the lines of a batch to a temporary file";
        let mut spool =
            Spool::new(self.client.wire() == lines::Wire::Anthropic).context(SPOOLING)?;
        self.store.each_request_of(job_id, |request| {
            Ok(spool.push(&self.client.line(request)).context(SPOOLING)?)
        })?;
        Ok(spool.finish().context(SPOOLING)?)
    }

    async fn poll_until_ended(&self, batch_id: &str, job_id: i64) -> Result<Status> {
        let mut last = String::new();
        loop {
            let status = self.retry(|| self.client.status(batch_id)).await?;
            let said = format!(
                "{}: {}/{} done, {} failed",
                status.status, status.done, status.total, status.failed
            );
            if said != last {
                tracing::info!(endpoint = %self.endpoint, "batch {batch_id}: {said}");
                self.store.status(job_id, &status.status)?;
                last = said;
            }
            if status.ended {
                return Ok(status);
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Makes the results known to the rows waiting on them, and queues the
    /// requests to try again.
    fn hand_out(&self, results: Vec<LineResult>) -> Result<()> {
        let mut again = Vec::new();
        let mut queue = self.queue();
        for result in results {
            // A resumed run follows a batch whose results it had begun to
            // take: what a row may already have used stays as it was.
            if matches!(
                queue.entries.get(&result.custom_id),
                Some(Entry::Answered { .. } | Entry::Failed)
            ) {
                continue;
            }
            let entry = match result.outcome {
                LineOutcome::Answer { .. } => {
                    self.counts.answered.fetch_add(1, Ordering::Relaxed);
                    Entry::Answered { used: false }
                }
                LineOutcome::Failed { .. } => {
                    self.counts.failed.fetch_add(1, Ordering::Relaxed);
                    Entry::Failed
                }
                LineOutcome::Retry { reason } => {
                    let attempts = queue.attempts.entry(result.custom_id.clone()).or_insert(1);
                    *attempts += 1;
                    if *attempts > MAX_BATCH_ATTEMPTS {
                        self.counts.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            endpoint = %self.endpoint,
                            "request {} failed in {MAX_BATCH_ATTEMPTS} batches ({reason}); it is sent online",
                            result.custom_id
                        );
                        Entry::Online
                    } else if self.fallback == BatchFallback::Online {
                        Entry::Online
                    } else {
                        self.counts.resubmitted.fetch_add(1, Ordering::Relaxed);
                        again.push(result.custom_id.clone());
                        Entry::Waiting
                    }
                }
            };
            queue.entries.insert(result.custom_id, entry);
        }
        drop(queue);
        // Read outside the queue's lock, and queued before any row looks.
        let again = self.store.requests(&again)?;
        if !again.is_empty() {
            self.enqueue(&mut self.queue(), again);
        }
        self.wake_all();
        Ok(())
    }

    /// Tries a provider call again while the network breaks, but not past
    /// a refusal and not once the run stops.
    async fn retry<T, F, Fut>(&self, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut tries = 0u32;
        loop {
            match call().await {
                Ok(value) => return Ok(value),
                Err(e) => {
                    let refused = e.refused_status();
                    let retryable = match refused {
                        Some(status) => status == 408 || status == 429 || status >= 500,
                        None => true,
                    };
                    tries += 1;
                    if !retryable || tries >= 8 || self.stop.is_draining() {
                        return Err(e);
                    }
                    tracing::warn!(endpoint = %self.endpoint, "{}; trying again", causes(&e));
                    tokio::time::sleep(NETWORK_BACKOFF * tries.min(5)).await;
                }
            }
        }
    }
}

/// Asks the provider to cancel each of `batches` ((endpoint, batch id)) of
/// run `run_id`, and records them as cancelled: the provider stops working
/// on them, and a resume sends their unanswered requests again.
pub async fn cancel(
    endpoints: &std::collections::BTreeMap<String, EndpointSpec>,
    audit_path: &Path,
    run_id: i64,
    batches: &[(String, String)],
) -> Result<()> {
    for (endpoint, batch_id) in batches {
        let Some(spec) = endpoints.get(endpoint) else {
            return Err(BatchError::Invalid(format!(
                "batch {batch_id} went to endpoint `{endpoint}`, which the pipeline no longer has"
            )));
        };
        let headers = crate::services::executor::request_headers(endpoint, spec)?;
        Client::new(endpoint, spec, headers)?
            .cancel(batch_id)
            .await?;
        Store::open(audit_path, run_id, endpoint)?.cancelled(batch_id)?;
    }
    Ok(())
}

/// How many of the requests waiting, from the first, one batch can hold: at
/// most `max_requests`, and within `max_bytes` (each line counted with room
/// for its envelope); always at least one.
fn fits(waiting: &[Request], max_requests: usize, max_bytes: usize) -> usize {
    let mut bytes = 0;
    for (taken, request) in waiting.iter().enumerate() {
        bytes += request.body.len() + LINE_ENVELOPE_BYTES;
        if taken == max_requests || (taken > 0 && bytes > max_bytes) {
            return taken;
        }
    }
    waiting.len()
}

/// The stable id of a request in a batch: the run, row, node and request
/// number, and a prefix of the request's hash, so that a changed request
/// never takes an old answer. At most 64 characters of `[A-Za-z0-9_-]`, as
/// Anthropic requires.
pub fn custom_id(
    run_id: i64,
    row_index: u64,
    node_id: usize,
    request_index: u32,
    request_sha256: &str,
) -> String {
    format!(
        "w{run_id}-r{row_index}-n{node_id}-q{request_index}-{}",
        &request_sha256[..request_sha256.len().min(12)]
    )
}

/// Results handed out at once while a batch's results download.
const RESULTS_AT_ONCE: usize = 1000;

/// A batch's results as they are taken.
struct Taking {
    /// The batch's requests with no result yet.
    unanswered: std::collections::HashSet<String>,
    succeeded: u64,
    failed: u64,
}

/// Every request of the batch gets a result: one the provider left out goes
/// into another batch, and so does one that failed as a whole batch for a
/// reason its lines do not share.
fn left_out(custom_ids: std::collections::HashSet<String>, status: &Status) -> Vec<LineResult> {
    let mut custom_ids: Vec<String> = custom_ids.into_iter().collect();
    custom_ids.sort_unstable();
    custom_ids
        .into_iter()
        .map(|custom_id| LineResult {
            custom_id,
            outcome: match &status.errors {
                // The provider refused the batch itself (validation).
                Some(errors) if status.status == "failed" => LineOutcome::Failed {
                    status: 400,
                    body: serde_json::json!({"error": {"message": errors}}).to_string(),
                },
                _ => LineOutcome::Retry {
                    reason: format!("the batch ended {} without it", status.status),
                },
            },
        })
        .collect()
}

/// A row's component sent requests that wait on provider batches, or that
/// are sent online after its node ran out of room for suspended instances:
/// it stops here, its instance is dropped, and it runs again once they are
/// answered.
pub struct Parked {
    pub waits: Vec<(Arc<BatchQueue>, String)>,
    /// The online requests under way; they keep their answers for the
    /// row's replay, which takes them rather than send again.
    pub sending: Option<futures::future::BoxFuture<'static, ()>>,
}

impl Parked {
    pub fn on_batches(waits: Vec<(Arc<BatchQueue>, String)>) -> Self {
        Self {
            waits,
            sending: None,
        }
    }

    pub fn sending(sending: futures::future::BoxFuture<'static, ()>) -> Self {
        Self {
            waits: Vec::new(),
            sending: Some(sending),
        }
    }

    /// Whether the row waits on provider batches: a wait its deadline does
    /// not count, unlike that of its own requests.
    pub fn waits_on_batches(&self) -> bool {
        !self.waits.is_empty()
    }

    /// Ready once every request is answered; Err once the run stops.
    pub fn poll_answered(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        if let Some(sending) = &mut self.sending {
            std::task::ready!(std::future::Future::poll(sending.as_mut(), cx));
            self.sending = None;
        }
        let mut pending = false;
        for (queue, id) in &self.waits {
            match queue.poll_answered(std::slice::from_ref(id), cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(detached)) => return Poll::Ready(Err(detached)),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }
}

impl std::fmt::Display for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.sending.is_some() {
            return f.write_str("the row waits for its answers with no instance held");
        }
        write!(
            f,
            "the row waits for {} answers from a provider batch",
            self.waits.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(bytes: usize) -> Request {
        Request {
            custom_id: String::new(),
            row_index: 0,
            node_id: 0,
            request_index: 0,
            request_sha256: String::new(),
            body: "x".repeat(bytes),
        }
    }

    #[test]
    fn a_batch_takes_what_fits_its_count_and_its_bytes() {
        let waiting: Vec<Request> = (0..10).map(|_| request(1000)).collect();
        let line = 1000 + LINE_ENVELOPE_BYTES;
        assert_eq!(fits(&waiting, 100, 100 * line), 10);
        assert_eq!(fits(&waiting, 4, 100 * line), 4);
        assert_eq!(fits(&waiting, 100, 3 * line), 3);
        // A request larger than a batch still goes, alone: the provider says
        // what is wrong with it.
        assert_eq!(fits(&waiting, 100, 10), 1);
        assert_eq!(fits(&[], 100, 10), 0);
    }

    #[test]
    fn custom_ids_are_stable_and_fit_anthropics_rule() {
        let sha = "ab".repeat(32);
        let id = custom_id(12, 99_999_999, 3, 7, &sha);
        assert_eq!(id, custom_id(12, 99_999_999, 3, 7, &sha));
        assert!(id.len() <= 64, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_ne!(id, custom_id(12, 99_999_999, 3, 8, &sha));
    }
}
