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

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The share of an attempt's wait within which requests sent after it
/// count as sent with it (see `QueueWait::waited_behind_others`).
const SENT_TOGETHER: u32 = 20;

/// An endpoint that has answered nothing for this many times the longest
/// any of its answers took has stopped rather than queued: a queue drains
/// one request after another, each taking about as long as those before
/// it. A local server that hangs after its first answers in 100 ms was
/// otherwise taken for a queue for two request timeouts of 120 s, before
/// its timeouts counted towards the breaker.
const SILENT_PER_SLOWEST: u32 = 10;

/// Timeouts in the queue kept as ones a later timeout may have waited
/// behind. Those told during one wait are at most the requests in flight,
/// so this covers the pools most runs use; the oldest go first, being the
/// least likely to have come during a wait still under way.
const TIMED_OUT_KEPT: usize = 256;

#[derive(Default)]
pub struct QueueWait {
    answers: Mutex<Answers>,
}

#[derive(Default)]
struct Answers {
    /// Successful answers so far.
    count: u64,
    latest: Option<Latest>,
    /// The longest any successful answer took, from its send.
    slowest: Duration,
    /// The latest attempts that timed out in the queue while answers came
    /// back, at most `TIMED_OUT_KEPT`: when each was told, and when sent.
    queued: VecDeque<(Instant, Instant)>,
}

/// What an attempt that ran out of time waited behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behind {
    /// Answers to requests sent before it came back during its wait.
    Answers,
    /// None did, but a request sent before it timed out in the queue
    /// during its wait, while answers came back: the server spent the wait
    /// on requests whose clients hung up.
    TimedOutAhead,
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

impl Behind {
    /// What an attempt's error adds to its timeout.
    pub fn says(self) -> &'static str {
        match self {
            Behind::Answers => {
                "while the endpoint answered requests sent before it: it waited in the \
                 endpoint's queue"
            }
            Behind::TimedOutAhead => {
                "while requests sent before it timed out in the endpoint's queue: it waited in \
                 that queue"
            }
        }
    }
}

impl QueueWait {
    /// A request sent at `sent` was answered now.
    pub fn answered(&self, sent: Instant) {
        let mut answers = self.lock();
        let now = Instant::now();
        answers.count += 1;
        answers.slowest = answers.slowest.max(now - sent);
        answers.latest = Some(Latest {
            answered_at: now,
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

    /// An attempt sent at `sent` timed out in the queue now, while answers
    /// came back (it waited behind `Behind::Answers`).
    pub fn timed_out_in_line(&self, sent: Instant) {
        let mut answers = self.lock();
        if answers.queued.len() == TIMED_OUT_KEPT {
            answers.queued.pop_front();
        }
        answers.queued.push_back((Instant::now(), sent));
    }

    /// What an attempt sent at `sent` that ran out of time after `waited`
    /// waited behind, if others: answers came back since its send, or a
    /// request sent before it timed out in the queue meanwhile, and no
    /// request sent after it was answered. Requests sent together reach
    /// the server in no set order, so one sent within a twentieth of the
    /// wait after it counts as sent with it.
    ///
    /// Only a timeout that saw answers counts as one ahead in line
    /// (`timed_out_in_line`): against an endpoint that stopped answering,
    /// timeouts behind timeouts would otherwise be taken for a queue's one
    /// generation after another, never failing their rows. Nor do answers
    /// the endpoint gave early in the wait count once it has answered
    /// nothing for `SILENT_PER_SLOWEST` times its slowest answer.
    pub fn waited_behind_others(&self, sent: Instant, waited: Duration) -> Option<Behind> {
        let together = sent + waited / SENT_TOGETHER;
        let answers = self.lock();
        let latest = answers.latest.filter(|l| l.latest_sent <= together)?;
        if latest.answered_at > sent {
            let silent = latest.answered_at.elapsed() > answers.slowest * SILENT_PER_SLOWEST;
            return (!silent).then_some(Behind::Answers);
        }
        answers
            .queued
            .iter()
            .rev()
            .take_while(|&&(told, _)| told > sent)
            .any(|&(_, queued_sent)| queued_sent <= together)
            .then_some(Behind::TimedOutAhead)
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
        assert_eq!(wait.waited_behind_others(timed_out, WAITED), None);
        tokio::time::advance(Duration::from_secs(4)).await;
        wait.answered(earlier);
        tokio::time::advance(Duration::from_secs(4)).await;
        wait.answered(earlier);
        assert_eq!(
            wait.waited_behind_others(timed_out, WAITED),
            Some(Behind::Answers)
        );
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
        assert_eq!(
            wait.waited_behind_others(timed_out, WAITED),
            Some(Behind::Answers)
        );
        wait.answered(later);
        assert_eq!(wait.waited_behind_others(timed_out, WAITED), None);
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
        assert_eq!(wait.waited_behind_others(timed_out, WAITED), None);
        assert_eq!(wait.answered_since(mark), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_behind_others_that_timed_out_in_line_waited_in_line_too() {
        let wait = QueueWait::default();
        let first = Instant::now();
        tokio::time::advance(Duration::from_millis(300)).await;
        wait.answered(first);
        tokio::time::advance(Duration::from_millis(10)).await;
        let behind = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        // One sent before it, that saw answers, times out in line during
        // its wait, and then one sent after it; nothing is answered.
        wait.timed_out_in_line(first);
        tokio::time::advance(Duration::from_secs(1)).await;
        wait.timed_out_in_line(behind + Duration::from_secs(2));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(
            wait.waited_behind_others(behind, WAITED),
            Some(Behind::TimedOutAhead)
        );
        // Nothing of the kind during the wait of one sent after that: an
        // endpoint that stopped answering fails its rows in the end.
        let later = Instant::now();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(wait.waited_behind_others(later, WAITED), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_endpoint_silent_for_ten_times_its_slowest_answer_keeps_no_queue() {
        const TIMEOUT: Duration = Duration::from_secs(120);
        let wait = QueueWait::default();
        let earlier = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let timed_out = Instant::now();
        tokio::time::advance(Duration::from_millis(100)).await;
        wait.answered(earlier);
        // A queue's next answer may take up to ten times as long as the
        // slowest before it (110 ms).
        tokio::time::advance(Duration::from_millis(1090)).await;
        assert_eq!(
            wait.waited_behind_others(timed_out, TIMEOUT),
            Some(Behind::Answers)
        );
        wait.timed_out_in_line(timed_out);
        // 20 ms on, the endpoint has been silent for more than ten times its
        // slowest answer: neither this timeout nor one sent after it waited
        // in a queue.
        tokio::time::advance(Duration::from_millis(20)).await;
        assert_eq!(wait.waited_behind_others(timed_out, TIMEOUT), None);
        let behind = timed_out + Duration::from_millis(50);
        assert_eq!(wait.waited_behind_others(behind, TIMEOUT), None);
    }
}
