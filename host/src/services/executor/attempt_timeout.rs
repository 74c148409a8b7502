//! How long one attempt may take before it is given up for hung: a high
//! quantile of the endpoint's recent successful attempts times a factor,
//! never under a floor and never beyond `request_timeout_seconds`. A request
//! that hangs while its peers answer on time says nothing of the endpoint's
//! capacity; waiting out the whole configured timeout for it holds its row,
//! and every row behind it in the ordered output, for minutes.
//!
//! Latencies go into log-spaced buckets (four per doubling, so a quantile is
//! off by at most 19 %), halved every `WINDOW` answers so the estimate
//! follows the endpoint as its answers get longer or shorter. The quantile
//! is worked out again every `REFRESH` answers, not on every one.

use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;

/// The quantile of successful attempts' latencies the timeout is a multiple of.
const QUANTILE: f64 = 0.99;
/// Answers needed before the estimate is trusted; until then only the
/// configured timeout applies.
const MIN_ANSWERS: u32 = 50;
/// Counts are halved once they add up to twice this many answers.
const WINDOW: u32 = 1024;
/// The quantile is computed again after this many answers.
const REFRESH: u32 = 16;
/// Four buckets per doubling, from 1 µs to about 70 minutes.
const BUCKETS: usize = 4 * 32;

/// The settings that shape the timeout.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub factor: f64,
    pub floor: Duration,
}

pub struct AttemptTimeout {
    shape: Option<Shape>,
    counts: [u32; BUCKETS],
    total: u32,
    since_refresh: u32,
    /// The current learned timeout, once enough answers were seen.
    learned: Option<Duration>,
}

impl AttemptTimeout {
    /// `None`: only the configured timeout applies.
    pub fn new(shape: Option<Shape>) -> Self {
        Self {
            shape,
            counts: [0; BUCKETS],
            total: 0,
            since_refresh: 0,
            learned: None,
        }
    }

    /// A successful attempt took `latency`. True when the learned timeout
    /// changed with it.
    pub fn answered(&mut self, latency: Duration) -> bool {
        if self.shape.is_none() {
            return false;
        }
        self.counts[bucket(latency)] += 1;
        self.total += 1;
        if self.total >= 2 * WINDOW {
            for count in &mut self.counts {
                *count /= 2;
            }
            self.total = self.counts.iter().sum();
        }
        self.since_refresh += 1;
        if self.since_refresh < REFRESH || self.total < MIN_ANSWERS {
            return false;
        }
        self.since_refresh = 0;
        let learned = self
            .shape
            .map(|s| self.quantile().mul_f64(s.factor).max(s.floor));
        std::mem::replace(&mut self.learned, learned) != learned
    }

    /// How long the `tries`-th attempt (1 for the first) given up for hung
    /// in a row may take, within `total`: the learned timeout doubles with
    /// each, so a request that is slow by nature, not hung, gets all of
    /// `total` after a few. `None`: only `total` applies.
    pub fn limit(&self, total: Duration, hung_before: u32) -> Option<Duration> {
        let learned = self.learned?.saturating_mul(1 << hung_before.min(16));
        (learned < total).then_some(learned)
    }

    /// The upper edge of the bucket holding the quantile.
    fn quantile(&self) -> Duration {
        let rank = (f64::from(self.total) * QUANTILE).ceil() as u32;
        let mut seen = 0;
        for (i, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank.max(1) {
                return upper_edge(i);
            }
        }
        upper_edge(BUCKETS - 1)
    }
}

/// An endpoint's attempt timeout, shared by its requests. Attempts sent
/// before one was learned wait on `changed` for it, rather than looking
/// again and again for the minutes a slow endpoint takes to answer.
pub struct SharedAttemptTimeout {
    timeout: Mutex<AttemptTimeout>,
    changed: Notify,
}

impl SharedAttemptTimeout {
    pub fn new(shape: Option<Shape>) -> Self {
        Self {
            timeout: Mutex::new(AttemptTimeout::new(shape)),
            changed: Notify::new(),
        }
    }

    /// As [`AttemptTimeout::limit`].
    pub fn limit(&self, total: Duration, hung_before: u32) -> Option<Duration> {
        self.lock().limit(total, hung_before)
    }

    /// As [`AttemptTimeout::answered`], telling the attempts that wait for a
    /// learned timeout when it changed.
    pub fn answered(&self, latency: Duration) {
        if self.lock().answered(latency) {
            self.changed.notify_waiters();
        }
    }

    /// Returns, with it, once a limit under `total` has been learned; never,
    /// if none is.
    pub async fn learned(&self, total: Duration, hung_before: u32) -> Duration {
        loop {
            // Registered before the look, so a change between the look and
            // the wait is not missed.
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if let Some(limit) = self.limit(total, hung_before) {
                return limit;
            }
            changed.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AttemptTimeout> {
        self.timeout.lock().expect("attempt timeout lock")
    }
}

fn bucket(latency: Duration) -> usize {
    let us = u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .max(1);
    let log = 63 - us.leading_zeros() as usize;
    let quarter = if log >= 2 {
        (us >> (log - 2)) as usize & 3
    } else {
        0
    };
    (log * 4 + quarter).min(BUCKETS - 1)
}

fn upper_edge(bucket: usize) -> Duration {
    let (log, quarter) = (bucket / 4, bucket % 4);
    let us = if log >= 2 {
        ((4 + quarter as u64 + 1) << (log - 2)).saturating_sub(1)
    } else {
        (1u64 << (log + 1)) - 1
    };
    Duration::from_micros(us)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        factor: 3.0,
        floor: Duration::from_secs(5),
    };
    const TOTAL: Duration = Duration::from_secs(120);

    #[test]
    fn nothing_is_learned_before_enough_answers() {
        let mut timeout = AttemptTimeout::new(Some(SHAPE));
        for _ in 0..(MIN_ANSWERS - 1) {
            timeout.answered(Duration::from_secs(4));
        }
        assert_eq!(timeout.limit(TOTAL, 0), None);
        for _ in 0..REFRESH {
            timeout.answered(Duration::from_secs(4));
        }
        let limit = timeout.limit(TOTAL, 0).unwrap();
        assert!(
            (12.0..=14.5).contains(&limit.as_secs_f64()),
            "three times 4 s, within a bucket: {limit:?}"
        );
    }

    #[test]
    fn fast_answers_get_the_floor_and_slow_ones_a_multiple_of_their_tail() {
        let mut fast = AttemptTimeout::new(Some(SHAPE));
        for _ in 0..200 {
            fast.answered(Duration::from_millis(100));
        }
        assert_eq!(fast.limit(TOTAL, 0), Some(Duration::from_secs(5)));
        // 2 % answered in 20 s: the 99th percentile is theirs.
        let mut tail = AttemptTimeout::new(Some(SHAPE));
        for i in 0..400 {
            let latency = if i % 50 == 0 { 20_000 } else { 100 };
            tail.answered(Duration::from_millis(latency));
        }
        let limit = tail.limit(TOTAL, 0).unwrap().as_secs_f64();
        assert!((60.0..=72.0).contains(&limit), "{limit}");
    }

    #[test]
    fn each_attempt_given_up_doubles_the_next_until_the_configured_timeout() {
        let mut timeout = AttemptTimeout::new(Some(SHAPE));
        for _ in 0..200 {
            timeout.answered(Duration::from_millis(100));
        }
        let secs = |n| timeout.limit(TOTAL, n).map(|d| d.as_secs());
        assert_eq!(
            [secs(0), secs(1), secs(2), secs(3), secs(4), secs(5)],
            [Some(5), Some(10), Some(20), Some(40), Some(80), None]
        );
    }

    #[test]
    fn the_estimate_follows_answers_that_got_longer() {
        let mut timeout = AttemptTimeout::new(Some(SHAPE));
        for _ in 0..3000 {
            timeout.answered(Duration::from_millis(100));
        }
        for _ in 0..3000 {
            timeout.answered(Duration::from_secs(10));
        }
        let limit = timeout.limit(TOTAL, 0).unwrap().as_secs_f64();
        assert!((30.0..=36.0).contains(&limit), "{limit}");
    }

    #[tokio::test]
    async fn an_attempt_waiting_for_a_learned_timeout_is_told_when_one_is_learned() {
        let shared = std::sync::Arc::new(SharedAttemptTimeout::new(Some(SHAPE)));
        let waiting = tokio::spawn({
            let shared = std::sync::Arc::clone(&shared);
            async move { shared.learned(TOTAL, 1).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing is learned yet");
        for _ in 0..200 {
            shared.answered(Duration::from_millis(100));
        }
        let limit = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the waiting attempt was not told")
            .unwrap();
        assert_eq!(
            limit,
            Duration::from_secs(10),
            "the 5 s floor, doubled once"
        );
    }

    #[test]
    fn only_a_refresh_that_moves_the_timeout_counts_as_a_change() {
        let mut timeout = AttemptTimeout::new(Some(SHAPE));
        let changes = (0..400)
            .filter(|_| timeout.answered(Duration::from_millis(100)))
            .count();
        assert_eq!(changes, 1, "learned once, then the same on every refresh");
    }

    #[test]
    fn turned_off_it_never_limits() {
        let mut timeout = AttemptTimeout::new(None);
        for _ in 0..500 {
            timeout.answered(Duration::from_millis(100));
        }
        assert_eq!(timeout.limit(TOTAL, 0), None);
    }

    #[test]
    fn buckets_are_ordered_and_hold_their_values() {
        for us in [1u64, 2, 3, 5, 7, 100, 1000, 123_456, 3_600_000_000] {
            let d = Duration::from_micros(us);
            let b = bucket(d);
            assert!(upper_edge(b) >= d, "{us} in {b}");
            if b > 0 {
                assert!(upper_edge(b - 1) < d, "{us} in {b}");
            }
        }
    }
}
