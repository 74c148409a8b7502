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
//! keep that order, or this request hangs: that is no queue. How many
//! answers came back during the wait says how many the endpoint serves in
//! a timeout, which bounds the limit (`Controller::timed_out_in_queue`).

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The share of an attempt's wait within which requests sent after it
/// count as sent with it (see `QueueWait::waited_behind_others`).
const SENT_TOGETHER: u32 = 20;

#[derive(Default)]
pub struct QueueWait {
    answers: Mutex<Answers>,
}

#[derive(Default)]
struct Answers {
    /// Successful answers so far.
    count: u64,
    latest: Option<Latest>,
}

/// How many answers had come back when an attempt was sent.
#[derive(Clone, Copy)]
pub struct Mark(u64);

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
        answers.count += 1;
        answers.latest = Some(Latest {
            answered_at: Instant::now(),
            latest_sent: answers.latest.map_or(sent, |l| l.latest_sent.max(sent)),
        });
    }

    /// Where the answers stand as an attempt is sent.
    pub fn mark(&self) -> Mark {
        Mark(self.lock().count)
    }

    /// Answers that came back since `mark`.
    pub fn answered_since(&self, mark: Mark) -> u32 {
        let since = self.lock().count.saturating_sub(mark.0);
        since.try_into().unwrap_or(u32::MAX)
    }

    /// Whether an attempt sent at `sent` that ran out of time after
    /// `waited` waited behind others: answers came back since its send, none
    /// to a request sent after it. Requests sent together reach the server
    /// in no set order, so one sent within a twentieth of the wait after it
    /// counts as sent with it.
    pub fn waited_behind_others(&self, sent: Instant, waited: Duration) -> bool {
        let together = sent + waited / SENT_TOGETHER;
        self.lock()
            .latest
            .is_some_and(|l| l.answered_at > sent && l.latest_sent <= together)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
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
        let mark = wait.mark();
        // Nothing answered yet: no sign of a queue rather than a dead server.
        assert!(!wait.waited_behind_others(timed_out, WAITED));
        tokio::time::advance(Duration::from_secs(4)).await;
        wait.answered(earlier);
        tokio::time::advance(Duration::from_secs(4)).await;
        wait.answered(earlier);
        assert!(wait.waited_behind_others(timed_out, WAITED));
        assert_eq!(wait.answered_since(mark), 2);
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
        let mark = wait.mark();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!wait.waited_behind_others(timed_out, WAITED));
        assert_eq!(wait.answered_since(mark), 0);
    }
}
