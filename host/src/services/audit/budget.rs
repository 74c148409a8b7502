//! The bytes of records handed to the writer and not yet written, kept
//! under a budget: a burst of rows finishing at once (a provider batch's
//! answers, a fast endpoint) makes senders wait for the writer instead of
//! piling records up in memory.
//!
//! The writer only ever releases bytes, never waits on a sender, so a
//! waiting sender always gets on once the disk takes what is queued; and a
//! writer that stops closes the budget, which lets every sender through to
//! find the writer gone.

use std::sync::{Condvar, Mutex};

pub struct ByteBudget {
    limit: usize,
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Default)]
struct State {
    queued: usize,
    closed: bool,
}

impl ByteBudget {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            state: Mutex::default(),
            freed: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `bytes` as queued, first waiting while they would pass the
    /// limit, and says how many bytes are queued now. A record larger than
    /// the whole budget goes once nothing else is queued.
    pub fn take(&self, bytes: usize) -> usize {
        let mut state = self.state();
        while !state.closed && state.queued > 0 && state.queued + bytes > self.limit {
            state = self.freed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.queued += bytes;
        state.queued
    }

    /// The writer has written `bytes` of what was queued.
    pub fn release(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut state = self.state();
        state.queued = state.queued.saturating_sub(bytes);
        drop(state);
        self.freed.notify_all();
    }

    /// The writer stopped: nobody waits for it any more.
    pub fn close(&self) {
        self.state().closed = true;
        self.freed.notify_all();
    }

    pub fn queued(&self) -> usize {
        self.state().queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_sender_past_the_limit_waits_until_the_writer_releases() {
        let budget = Arc::new(ByteBudget::new(100));
        budget.take(80);
        let sender = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.take(50))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !sender.is_finished(),
            "130 bytes would pass the limit of 100"
        );
        assert_eq!(budget.queued(), 80);
        budget.release(80);
        sender.join().unwrap();
        assert_eq!(budget.queued(), 50);
    }

    #[test]
    fn a_record_larger_than_the_budget_goes_alone() {
        let budget = ByteBudget::new(100);
        budget.take(500);
        assert_eq!(budget.queued(), 500);
    }

    #[test]
    fn a_closed_budget_lets_waiting_senders_through() {
        let budget = Arc::new(ByteBudget::new(100));
        budget.take(100);
        let sender = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.take(10))
        };
        std::thread::sleep(Duration::from_millis(20));
        budget.close();
        sender.join().unwrap();
    }
}
