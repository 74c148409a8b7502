//! TEST TOOL — not a provider. The providers' batch APIs over the same
//! scripted answers as the online routes: OpenAI's Batch API (`/v1/files`,
//! `/v1/batches`), Azure OpenAI's global batch (`/openai/files`,
//! `/openai/batches`, `api-version` query, `api-key` header) and Anthropic's
//! Message Batches (`/v1/messages/batches`).
//!
//! Every batch line is answered as an online request of its shape would be
//! (reply mode, `reject_marker`, `fault_*`, `fail_every`, the `Served` log
//! under the line's `url`), except that the online-only knobs (latency,
//! capacity, rate limit, outages) do not apply and faults other than a status
//! answer 500. A batch runs on its own clock: `Script::batch_seconds` from
//! creation to its end, lines answered little by little on the way in a
//! shuffled order (seeded by the batch id), which is also the order results
//! come out in. Lines whose prompt holds `Script::batch_expire_marker` are
//! never answered. Batches and files live in memory only.

mod anthropic;
mod openai;

use crate::Shared;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderMap;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A batch as the server holds it, for tests to compare against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSeen {
    pub id: String,
    /// "openai", "azure" or "anthropic".
    pub provider: &'static str,
    /// In the order they were submitted.
    pub custom_ids: Vec<String>,
    /// OpenAI's `status` or Anthropic's `processing_status`, as of now.
    pub status: String,
    /// When the batch was created, since the server started.
    pub created_at: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    OpenAi,
    Azure,
    Anthropic,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Azure => "azure",
            Provider::Anthropic => "anthropic",
        }
    }
}

/// The batch routes, with room for bodies up to the providers' limits (so
/// that an oversized one is refused in the provider's words).
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .merge(openai::routes())
        .merge(anthropic::routes())
        .layer(DefaultBodyLimit::max(300 << 20))
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    pub(crate) uploaded: AtomicUsize,
    pub(crate) deleted: AtomicUsize,
}

impl Default for Store {
    fn default() -> Self {
        // Ids differ from one server to the next, so that a client holding
        // an id from before a restart does not find somebody else's batch.
        static SERVERS: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let salt = crate::mix(nanos ^ SERVERS.fetch_add(1, Ordering::SeqCst).rotate_left(32));
        Self {
            inner: Mutex::new(Inner {
                ids: Ids { salt, next: 0 },
                files: HashMap::new(),
                batches: Vec::new(),
            }),
            uploaded: AtomicUsize::new(0),
            deleted: AtomicUsize::new(0),
        }
    }
}

pub(crate) struct Inner {
    ids: Ids,
    files: HashMap<String, File>,
    /// Oldest first.
    batches: Vec<Batch>,
}

pub(crate) struct Ids {
    salt: u64,
    next: u64,
}

impl Ids {
    /// A fresh id: `prefix` and 24 hex digits.
    fn make(&mut self, prefix: &str) -> String {
        self.next += 1;
        let high = crate::mix(self.salt ^ self.next);
        let low = crate::mix(high ^ self.next) as u32;
        format!("{prefix}{high:016x}{low:08x}")
    }
}

pub(crate) struct File {
    id: String,
    provider: Provider,
    bytes: Vec<u8>,
    created_at: u64,
    filename: String,
    purpose: &'static str,
    /// An input file's requests, one JSON object a line.
    lines: Vec<Value>,
}

pub(crate) struct Line {
    custom_id: String,
    /// Where the line says it goes: the `Served.path` of its answer.
    url: String,
    /// As sent: an OpenAI line's `body`, an Anthropic request's `params`.
    body: Value,
    /// The request in the chat shape the scripted answers read.
    chat: Value,
    /// Holds `Script::batch_expire_marker`: never answered.
    expire: bool,
}

pub(crate) struct Outcome {
    /// The status the online route would have answered (Anthropic: 200 for
    /// a succeeded line, else the status behind the error or 0).
    status: u16,
    /// The line of the output, error or results file.
    record: Value,
}

pub(crate) struct Batch {
    id: String,
    provider: Provider,
    created: Instant,
    created_unix: f64,
    since_start: Duration,
    /// `Script::batch_seconds` when the batch was made.
    length: Duration,
    /// The headers of the request that made the batch, for the log.
    headers: HeaderMap,
    /// In the order submitted.
    lines: Vec<Line>,
    /// Indexes into `lines`: the order lines are answered and come out in.
    order: Vec<usize>,
    outcomes: Vec<Option<Outcome>>,
    /// When a cancel arrived (instant, unix seconds).
    cancel: Option<(Instant, f64)>,
    /// Unix seconds the batch ended at; nothing changes after.
    ended: Option<f64>,
    /// The status as last worked out.
    status: &'static str,
    /// The answer that made the batch has been given: with a zero
    /// `batch_seconds`, the batch is done from then on.
    shown: bool,
    /// Unix seconds of each status change seen, by the provider's field name.
    times: HashMap<&'static str, f64>,
    openai: openai::Part,
}

impl Batch {
    #[allow(clippy::too_many_arguments)]
    fn new(
        shared: &Shared,
        ids: &mut Ids,
        provider: Provider,
        prefix: &str,
        headers: &HeaderMap,
        lines: Vec<Line>,
        openai: openai::Part,
    ) -> Self {
        let id = ids.make(prefix);
        let order = shuffled(lines.len(), &id);
        Self {
            provider,
            created: Instant::now(),
            created_unix: unix_now(),
            since_start: shared.started.elapsed(),
            length: shared.script.batch_seconds,
            headers: headers.clone(),
            outcomes: lines.iter().map(|_| None).collect(),
            lines,
            order,
            cancel: None,
            ended: None,
            status: "",
            shown: false,
            times: HashMap::new(),
            openai,
            id,
        }
    }

    /// The batch's own time is up: it ends now unless cancelled first.
    fn time_up(&self, now: Instant) -> bool {
        match self.length.is_zero() {
            true => self.shown,
            false => now.saturating_duration_since(self.created) >= self.length,
        }
    }

    /// Whether `share` (0 to 1) of the batch's length has gone by.
    fn past(&self, now: Instant, share: f64) -> bool {
        self.time_up(now)
            || (!self.length.is_zero()
                && now.saturating_duration_since(self.created).as_secs_f64()
                    >= share * self.length.as_secs_f64())
    }

    /// Unix seconds at `share` of the batch's length.
    fn at(&self, share: f64) -> f64 {
        self.created_unix + share * self.length.as_secs_f64()
    }

    /// Answers, in processing order, the lines due once the share of the
    /// answering window `(from, to)` (shares of the length) gone by at
    /// `now`; lines to expire are never answered.
    fn answer_due(&mut self, shared: &Shared, now: Instant, (from, to): (f64, f64)) {
        let share = if self.time_up(now) {
            1.0
        } else if self.length.is_zero() {
            0.0
        } else {
            let gone = now.saturating_duration_since(self.created).as_secs_f64()
                / self.length.as_secs_f64();
            ((gone - from) / (to - from)).clamp(0.0, 1.0)
        };
        let answerable = self.lines.iter().filter(|l| !l.expire).count();
        let due = (answerable as f64 * share).floor() as usize;
        let mut answered = (0..self.lines.len())
            .filter(|&i| !self.lines[i].expire && self.outcomes[i].is_some())
            .count();
        for &i in &self.order {
            if answered >= due {
                break;
            }
            if self.lines[i].expire || self.outcomes[i].is_some() {
                continue;
            }
            let outcome = match self.provider {
                Provider::Anthropic => anthropic::answer(shared, &self.headers, &self.lines[i]),
                _ => openai::answer(shared, &self.headers, &self.lines[i]),
            };
            self.outcomes[i] = Some(outcome);
            answered += 1;
        }
    }

    /// Records a status change's time, once.
    fn mark(&mut self, field: &'static str, unix: f64) {
        self.times.entry(field).or_insert(unix);
    }

    fn time(&self, field: &str) -> Option<f64> {
        self.times.get(field).copied()
    }

    /// The outcomes in processing order, with their line.
    fn in_order(&self) -> impl Iterator<Item = (&Line, Option<&Outcome>)> {
        self.order
            .iter()
            .map(|&i| (&self.lines[i], self.outcomes[i].as_ref()))
    }

    fn seen(&self) -> BatchSeen {
        BatchSeen {
            id: self.id.clone(),
            provider: self.provider.name(),
            custom_ids: self.lines.iter().map(|l| l.custom_id.clone()).collect(),
            status: self.status.to_string(),
            created_at: self.since_start,
        }
    }
}

/// Brings a batch up to `now`: answers the lines due and moves its status on.
fn advance(shared: &Shared, inner: &mut Inner, index: usize, now: Instant) {
    let Inner {
        ids,
        files,
        batches,
    } = inner;
    let batch = &mut batches[index];
    match batch.provider {
        Provider::Anthropic => anthropic::advance(shared, batch, now),
        _ => openai::advance(shared, ids, files, batch, now),
    }
}

/// Every batch, brought up to date.
pub(crate) fn seen(shared: &Shared) -> Vec<BatchSeen> {
    let mut inner = shared.batch.inner.lock().unwrap();
    let now = Instant::now();
    (0..inner.batches.len())
        .map(|i| {
            advance(shared, &mut inner, i, now);
            inner.batches[i].seen()
        })
        .collect()
}

/// The last user message of a chat-shaped request, as the online route
/// reads it.
fn user_message(chat: &Value) -> String {
    chat["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn expires(shared: &Shared, chat: &Value) -> bool {
    shared
        .script
        .batch_expire_marker
        .as_deref()
        .is_some_and(|marker| user_message(chat).contains(marker))
}

/// A permutation of `0..n` seeded by `seed`, never the identity when `n > 1`.
fn shuffled(n: usize, seed: &str) -> Vec<usize> {
    let mut state = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        state = crate::mix(state);
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    if n > 1 && order.iter().enumerate().all(|(i, &j)| i == j) {
        order.rotate_left(1);
    }
    order
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// RFC 3339 in UTC with microseconds, as Anthropic writes times.
fn rfc3339(unix: f64) -> String {
    let micros = (unix * 1e6).round() as i64;
    let (secs, micros) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The key the request carries matches `Script::require_key` (or none is
/// required): `api-key` on Azure, `x-api-key` or a bearer token on
/// Anthropic, a bearer token on OpenAI.
fn key_ok(shared: &Shared, provider: Provider, headers: &HeaderMap) -> bool {
    let Some(key) = &shared.script.require_key else {
        return true;
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = header("authorization") == Some(format!("Bearer {key}").as_str());
    match provider {
        Provider::OpenAi => bearer,
        Provider::Azure => header("api-key") == Some(key.as_str()),
        Provider::Anthropic => bearer || header("x-api-key") == Some(key.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_rfc3339() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(1_727_202_644.5), "2024-09-24T18:30:44.500000Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn shuffles_repeat_and_never_keep_the_order() {
        for n in 2..50 {
            let order = shuffled(n, "batch_x");
            assert_eq!(order, shuffled(n, "batch_x"));
            assert_ne!(order, (0..n).collect::<Vec<_>>());
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        }
    }
}
