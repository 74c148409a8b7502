//! Throttled time: the wall time during which at least one request of the
//! endpoint waited on a limit (the breaker, a rate limit, a slot). Summing
//! each request's wait instead would report hours for a run of seconds, as
//! hundreds of requests wait side by side.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Default)]
pub struct WaitClock {
    state: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    count: usize,
    since: Option<Instant>,
    total: Duration,
}

/// One request waiting; dropping it ends the wait.
pub struct Wait<'a> {
    clock: &'a WaitClock,
}

impl WaitClock {
    pub fn enter(&self) -> Wait<'_> {
        let mut s = self.state.lock().expect("wait clock lock");
        if s.count == 0 {
            s.since = Some(Instant::now());
        }
        s.count += 1;
        Wait { clock: self }
    }

    /// The throttled time so far, the wait under way included.
    pub fn total(&self) -> Duration {
        let s = self.state.lock().expect("wait clock lock");
        s.total + s.since.map_or(Duration::ZERO, |since| since.elapsed())
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        let mut s = self.clock.state.lock().expect("wait clock lock");
        s.count -= 1;
        if s.count == 0
            && let Some(since) = s.since.take()
        {
            s.total += since.elapsed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_side_by_side_count_once() {
        let clock = WaitClock::default();
        let a = clock.enter();
        let b = clock.enter();
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(a);
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(b);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(clock.total(), Duration::from_secs(3));
        let _c = clock.enter();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            clock.total(),
            Duration::from_secs(4),
            "a wait under way counts"
        );
    }
}
