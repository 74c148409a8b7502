//! The adaptive limit carried from one run to the next: what the limit had
//! learned is kept in the audit database, keyed by what identifies the
//! endpoint (kind, URL, the models asked for), every few seconds while the
//! run goes on, so a killed run leaves it too, and when it ends; the next run
//! against the same endpoint starts from it instead of slow-starting from
//! `initial_concurrency`.

use super::Endpoint;
use crate::context::causes;
use crate::services::audit::{LearnedLimitRecord, Record, now_ms};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// How often a run records what its limit has learned so far.
const RECORD_EVERY_MS: i64 = 5_000;

/// Where a run's limit started, when an earlier run had learned one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LearnedStart {
    pub run_id: i64,
    pub learned: u32,
    pub start: u32,
    /// A queue held the learned limit, not refusals.
    #[serde(default)]
    pub held_by_queue: bool,
}

/// What identifies the endpoint across runs, once the run knows its models.
#[derive(Default)]
pub struct Carry {
    key: std::sync::OnceLock<(String, String)>,
    started: std::sync::OnceLock<LearnedStart>,
    next_record_ms: AtomicI64,
}

impl Carry {
    pub fn started(&self) -> Option<LearnedStart> {
        self.started.get().cloned()
    }
}

impl Endpoint {
    /// Keys the endpoint's learned limit by `models` (those its nodes ask
    /// for, comma-separated), and starts the adaptive limit from the newest
    /// one an earlier run learned for the same endpoint. Only before the
    /// run's first request; nothing without an audit trail, in batch mode,
    /// or without the adaptive limit.
    pub fn carry_learned_limit(&self, models: &str) -> Option<LearnedStart> {
        let audit = self.audit.as_ref()?;
        if !self.spec.adaptive_concurrency || self.batch.is_some() {
            return None;
        }
        let url = self.identity();
        let _ = self.carry.key.set((url.clone(), models.to_string()));
        self.carry
            .next_record_ms
            .store(now_ms() + RECORD_EVERY_MS, Relaxed);
        let (run_id, learned) = match audit.learned_limit(&url, models) {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(endpoint = %self.name, "the limit learned by earlier runs cannot be read: {}", causes(&e));
                return None;
            }
        };
        let start = self.limiter.start_from(
            learned.concurrency_limit,
            learned.floor,
            learned.held_by_queue,
        );
        let started = LearnedStart {
            run_id,
            learned: learned.concurrency_limit,
            start,
            held_by_queue: learned.held_by_queue,
        };
        let _ = self.carry.started.set(started.clone());
        Some(started)
    }

    /// Records what the limit has learned, when `RECORD_EVERY_MS` passed
    /// since it last did; called after each attempt.
    pub(super) fn record_learned_limit_now_and_then(&self, now_ms: i64) {
        let due = self.carry.next_record_ms.load(Relaxed);
        if now_ms < due
            || self
                .carry
                .next_record_ms
                .compare_exchange(due, now_ms + RECORD_EVERY_MS, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        self.record_learned_limit();
    }

    /// Records what the limit has learned, once it has left slow start or
    /// reached `pool_size` (a run too short to find either tells the next
    /// nothing): at the end of the run, and now and then before.
    pub fn record_learned_limit(&self) {
        let (Some(audit), Some((url, model))) = (&self.audit, self.carry.key.get()) else {
            return;
        };
        let snapshot = self.limiter.snapshot();
        let (Some(rtt), true) = (snapshot.no_load_rtt, snapshot.has_learned) else {
            return;
        };
        audit.record(Record::LearnedLimit(LearnedLimitRecord {
            url: url.clone(),
            model: model.clone(),
            endpoint: self.name.clone(),
            concurrency_limit: snapshot.limit,
            floor: snapshot.floor,
            no_load_rtt_ms: u32::try_from(rtt.as_millis()).ok(),
            at_ms: now_ms(),
            held_by_queue: snapshot.held_by_queue,
        }));
    }
}
