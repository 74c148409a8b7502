//! Which of a circuit breaker's changes the log warns of.
//!
//! An endpoint that is down has its breaker probed every cool-down: two
//! lines each time, the same ones, for up to a minute, burying what the
//! first said. The log warns when an outage begins (saying what ends the
//! run), when what the probes meet changes, every `REMINDER` while it
//! lasts, and when it ends; the other changes go to the info level. The
//! audit trail keeps every one.

use super::breaker::{BreakerState, Transition};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How often an outage that goes on is warned of again.
const REMINDER: Duration = Duration::from_secs(15);

pub struct OutageLog {
    abort_after: Duration,
    outage: Mutex<Option<Outage>>,
}

struct Outage {
    began: Instant,
    warned: Instant,
    /// What the last opening or failed probe met.
    failure: Option<String>,
}

impl OutageLog {
    /// `abort_after`: how long an outage may last before the run stops.
    pub fn new(abort_after: Duration) -> Self {
        Self {
            abort_after,
            outage: Mutex::new(None),
        }
    }

    /// The warning `transition` deserves, or `None` where it repeats what
    /// the log said less than `REMINDER` ago.
    pub fn warning(&self, transition: &Transition) -> Option<String> {
        let mut outage = self.outage.lock().expect("outage log lock");
        let now = Instant::now();
        match (transition.to, outage.as_mut()) {
            (BreakerState::HalfOpen, _) => None,
            (BreakerState::Open, None) => {
                *outage = Some(Outage {
                    began: now,
                    warned: now,
                    failure: transition.failure.clone(),
                });
                Some(format!(
                    "{}; requests wait for it, and the run stops if it stays open {} s \
                     (abort_after_seconds)",
                    transition.reason,
                    self.abort_after.as_secs_f64()
                ))
            }
            (BreakerState::Open, Some(going_on)) => {
                let news = transition.failure != going_on.failure;
                if !news && now - going_on.warned < REMINDER {
                    return None;
                }
                going_on.warned = now;
                going_on.failure.clone_from(&transition.failure);
                Some(format!(
                    "still open after {:.0} s: {}",
                    (now - going_on.began).as_secs_f64(),
                    transition.reason
                ))
            }
            (BreakerState::Closed, ended) => {
                let lasted = ended.map(|outage| now - outage.began);
                *outage = None;
                Some(match lasted {
                    Some(lasted) => format!(
                        "{} after {:.1} s open",
                        transition.reason,
                        lasted.as_secs_f64()
                    ),
                    None => transition.reason.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transition as the breaker makes it: an opening or a failed probe
    /// names the failure its reason ends with.
    fn to(state: BreakerState, reason: &str) -> Transition {
        let failure = reason
            .strip_prefix("the probe failed: ")
            .or_else(|| reason.split_once("; the last: ").map(|(_, last)| last));
        Transition {
            to: state,
            reason: reason.into(),
            failure: failure.map(str::to_string),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_warned_of_once_then_on_news_and_every_reminder() {
        let log = OutageLog::new(Duration::from_secs(60));
        let refused = "connection refused at 127.0.0.1:9";
        let opened = log
            .warning(&to(
                BreakerState::Open,
                &format!("5 failures in a row; the last: {refused}"),
            ))
            .expect("the outage's start");
        assert!(
            opened.ends_with("the run stops if it stays open 60 s (abort_after_seconds)"),
            "{opened}"
        );
        let probe_failed = format!("the probe failed: {refused}");
        for _ in 0..2 {
            tokio::time::advance(Duration::from_secs(5)).await;
            assert_eq!(log.warning(&to(BreakerState::HalfOpen, "probe")), None);
            assert_eq!(log.warning(&to(BreakerState::Open, &probe_failed)), None);
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(
            log.warning(&to(BreakerState::Open, &probe_failed))
                .as_deref(),
            Some(format!("still open after 15 s: {probe_failed}").as_str())
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let other = "the probe failed: HTTP 502";
        assert_eq!(
            log.warning(&to(BreakerState::Open, other)).as_deref(),
            Some("still open after 16 s: the probe failed: HTTP 502")
        );
        assert_eq!(
            log.warning(&to(BreakerState::Closed, "the probe succeeded"))
                .as_deref(),
            Some("the probe succeeded after 16.0 s open")
        );
        let again = log.warning(&to(BreakerState::Open, "3 failures in a row; the last: x"));
        assert!(again.is_some_and(|w| w.contains("requests wait for it")));
    }
}
