//! Whether an attempt that ran out of time waited in the endpoint's queue.
//!
//! A server that serves a few requests at a time and queues the rest
//! (llama.cpp, vLLM, Ollama) answers in the order it took them. When an
//! attempt times out while the endpoint answered other requests meanwhile,
//! all of them sent before it, the attempt was waiting its turn behind
//! them: the endpoint is busy, not failing. Retried as a transient failure,
//! such timeouts spent each row's `max_retries` on the client's own queue;
//! against a server serving one at a time with answers in 4 s and a 10 s
//! timeout, rows took up to six attempts, all that `max_retries` allows.
//! Where a request sent after it was answered first, the server does not
//! keep that order, or this request hangs: that is no queue.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The share of an attempt's wait within which requests sent after it
/// count as sent with it (see `QueueWait::waited_behind_others`).
const SENT_TOGETHER: u32 = 20;

#[derive(Default)]
pub struct QueueWait {
    answers: Mutex<Option<Latest>>,
}

/// Of the successful answers so far: when the last came back, and the
/// latest send among them.
#[derive(Clone, Copy)]
struct Latest {
    answered_at: Instant,
    latest_sent: Instant,
}

impl QueueWait {
    /// A request sent at `sent` was answered now.
    pub fn answered(&self, sent: Instant) {
        let mut answers = self.lock();
        *answers = Some(Latest {
            answered_at: Instant::now(),
            latest_sent: answers.map_or(sent, |l| l.latest_sent.max(sent)),
        });
    }

    /// Whether an attempt sent at `sent` that ran out of time after
    /// `waited` waited behind others: answers came back since its send, none
    /// to a request sent after it. Requests sent together reach the server
    /// in no set order, so one sent within a twentieth of the wait after it
    /// counts as sent with it.
    pub fn waited_behind_others(&self, sent: Instant, waited: Duration) -> bool {
        let together = sent + waited / SENT_TOGETHER;
        self.lock()
            .is_some_and(|l| l.answered_at > sent && l.latest_sent <= together)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Latest>> {
        self.answers.lock().expect("queue wait lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAITED: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_timeout_behind_answers_to_earlier_requests_waited_in_line() {
        let wait = QueueWait::default();
        let earlier = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let timed_out = Instant::now();
        // Nothing answered yet: no sign of a queue rather than a dead server.
        assert!(!wait.waited_behind_others(timed_out, WAITED));
        tokio::time::advance(Duration::from_secs(4)).await;
        wait.answered(earlier);
        assert!(wait.waited_behind_others(timed_out, WAITED));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_to_a_request_sent_later_says_it_was_no_queue() {
        let wait = QueueWait::default();
        let timed_out = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let sent_with_it = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        wait.answered(sent_with_it);
        assert!(wait.waited_behind_others(timed_out, WAITED));
        wait.answered(later);
        assert!(!wait.waited_behind_others(timed_out, WAITED));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_before_its_send_say_nothing_of_its_wait() {
        let wait = QueueWait::default();
        let earlier = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        wait.answered(earlier);
        tokio::time::advance(Duration::from_millis(10)).await;
        let timed_out = Instant::now();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!wait.waited_behind_others(timed_out, WAITED));
    }
}
