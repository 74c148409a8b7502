//! `budget_usd`: before a call is sent, the run's spending so far plus what
//! the calls on the wire are expected to cost plus this call's expected cost
//! is held against the budget. A call that would pass it is not sent: the run stops
//! sending, lets the calls on the wire finish, and ends resumable.

use crate::services::stop::{RunStop, StopReason};
use std::sync::{Arc, Mutex};

pub struct Budget {
    limit_usd: Option<f64>,
    stop: Arc<RunStop>,
    ledger: Mutex<Ledger>,
}

#[derive(Default, Clone, Copy)]
struct Ledger {
    /// Cost of every call answered so far, earlier segments included.
    spent: f64,
    /// What the calls on the wire are expected to cost.
    held: f64,
}

/// A call's hold on the budget while it is on the wire.
#[must_use]
pub struct Hold {
    usd: f64,
}

impl Budget {
    /// `spent_before`: what earlier segments of the run spent.
    pub fn new(limit_usd: Option<f64>, spent_before: f64, stop: Arc<RunStop>) -> Self {
        Self {
            limit_usd,
            stop,
            ledger: Mutex::new(Ledger {
                spent: spent_before,
                held: 0.0,
            }),
        }
    }

    /// Holds `expected` for a call about to be sent; None when that would
    /// pass the budget, which stops the run.
    pub fn hold(&self, expected: f64) -> Option<Hold> {
        let mut ledger = self.ledger.lock().expect("budget lock");
        if let Some(limit) = self.limit_usd
            && ledger.spent + ledger.held + expected > limit
        {
            self.stop.drain(StopReason::Budget {
                limit_usd: limit,
                spent_usd: ledger.spent,
            });
            return None;
        }
        ledger.held += expected;
        Some(Hold { usd: expected })
    }

    /// The call ended; it cost `actual` (nothing when it was refused).
    pub fn settle(&self, hold: Hold, actual: f64) {
        let mut ledger = self.ledger.lock().expect("budget lock");
        ledger.held = (ledger.held - hold.usd).max(0.0);
        ledger.spent += actual;
    }

    /// A cost known only after the fact: a provider batch's answer.
    pub fn spend(&self, usd: f64) {
        self.ledger.lock().expect("budget lock").spent += usd;
    }

    pub fn spent(&self) -> f64 {
        self.ledger.lock().expect("budget lock").spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_would_pass_the_budget_is_refused_and_stops_the_run() {
        let stop = Arc::new(RunStop::new());
        let budget = Budget::new(Some(1.0), 0.25, stop.clone());
        let first = budget.hold(0.5).unwrap();
        assert!(
            budget.hold(0.5).is_none(),
            "0.25 spent + 0.5 held + 0.5 > 1"
        );
        assert!(stop.is_draining());
        budget.settle(first, 0.1);
        assert!((budget.spent() - 0.35).abs() < 1e-12);
        assert!(Budget::new(None, 0.0, stop).hold(1e9).is_some());
    }
}
