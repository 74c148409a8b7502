//! The circuit breaker of one endpoint.
//!
//! Closed: requests flow; `threshold` failures in a row (broken connections,
//! timeouts, 5xx other than capacity answers) open it, and so do two or more
//! failures in a row once nothing has succeeded for a whole request timeout
//! since the first of them was sent: at a limit of one or two, as a server
//! that hung leaves the adaptive limit, `threshold` timeouts would take
//! `threshold` timeouts' time, and the few requests a run starts with that
//! time out together have already waited that whole timeout. Open: requests
//! wait (until their own deadline at most) instead of failing, for `cooldown`.
//! Then one request goes through as a probe (half-open): its success closes
//! the breaker, its failure opens it again. An answer to a request sent
//! before it opened closes it too. Capacity answers (429/503/529)
//! never open it: they say the endpoint is busy, not broken, and the
//! adaptive limit handles them.

use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

/// A change of state, for the log and the audit trail.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub to: BreakerState,
    pub reason: String,
    /// The failure that opened the breaker, or that its probe met.
    pub failure: Option<String>,
}

pub struct Breaker {
    threshold: u32,
    /// Failures in a row over this long open the breaker, however few.
    span: Duration,
    cooldown: Duration,
    state: Mutex<Inner>,
    notify: Notify,
}

struct Inner {
    state: BreakerState,
    consecutive_failures: u32,
    /// Since when nothing has succeeded while `consecutive_failures` were
    /// recorded: the earliest send among them, or the last success if later.
    streak_began: Instant,
    /// When a request last succeeded (or was told busy: a live endpoint).
    last_success: Instant,
    open_until: Instant,
    probe_out: bool,
    /// When the breaker last left `Closed`, while it has not closed again.
    opened_at: Option<Instant>,
    /// Time spent open or half-open before `opened_at`.
    open_before: Duration,
}

/// Admission to send one request; says whether it is the half-open probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub probe: bool,
}

impl Breaker {
    /// `span`: the request timeout, or the first-byte timeout when shorter.
    pub fn new(threshold: u32, span: Duration, cooldown: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            span,
            cooldown,
            state: Mutex::new(Inner {
                state: BreakerState::Closed,
                consecutive_failures: 0,
                streak_began: Instant::now(),
                last_success: Instant::now(),
                open_until: Instant::now(),
                probe_out: false,
                opened_at: None,
                open_before: Duration::ZERO,
            }),
            notify: Notify::new(),
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state.lock().expect("breaker lock").state
    }

    /// How long the breaker has not been closed (open or half-open), in all.
    /// Rows held behind it wait as they do for a slot, so the summary names
    /// this share of their throttled time apart.
    pub fn open_time(&self) -> Duration {
        let s = self.state.lock().expect("breaker lock");
        s.open_before + s.opened_at.map_or(Duration::ZERO, |at| at.elapsed())
    }

    /// Waits while the breaker is open (or its probe is out). `None` when
    /// `deadline` passes first. A transition to half-open is reported.
    pub async fn admit(&self, deadline: Option<Instant>) -> (Option<Ticket>, Option<Transition>) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake = {
                let mut s = self.state.lock().expect("breaker lock");
                let now = Instant::now();
                match s.state {
                    BreakerState::Closed => return (Some(Ticket { probe: false }), None),
                    BreakerState::Open if now >= s.open_until => {
                        s.state = BreakerState::HalfOpen;
                        s.probe_out = true;
                        let transition = Transition {
                            to: BreakerState::HalfOpen,
                            reason: format!(
                                "cool-down of {:.1} s over; sending a probe",
                                self.cooldown.as_secs_f64()
                            ),
                            failure: None,
                        };
                        return (Some(Ticket { probe: true }), Some(transition));
                    }
                    BreakerState::HalfOpen if !s.probe_out => {
                        s.probe_out = true;
                        return (Some(Ticket { probe: true }), None);
                    }
                    BreakerState::Open => Some(s.open_until),
                    BreakerState::HalfOpen => None,
                }
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return (None, None);
            }
            super::clock::wait(notified, super::clock::earliest(wake, deadline)).await;
        }
    }

    /// Records how an admitted request, sent at `sent`, went. `failure`: a
    /// broken connection, a timeout or a non-capacity 5xx. Returns the
    /// transition, if any.
    pub fn record(
        &self,
        ticket: Ticket,
        sent: Instant,
        failure: Option<&str>,
    ) -> Option<Transition> {
        let transition = {
            let mut s = self.state.lock().expect("breaker lock");
            if failure.is_none() {
                s.last_success = Instant::now();
            }
            if ticket.probe {
                s.probe_out = false;
            }
            match (failure, s.state) {
                (None, BreakerState::Closed) => {
                    s.consecutive_failures = 0;
                    None
                }
                // The probe, or a request sent before the breaker opened:
                // the endpoint answers. A slow one's answers may come after
                // its timeouts opened the breaker; rows must not wait for a
                // probe as slow, nor the run stop for an outage that is over.
                (None, _) => {
                    s.state = BreakerState::Closed;
                    s.consecutive_failures = 0;
                    if let Some(at) = s.opened_at.take() {
                        s.open_before += at.elapsed();
                    }
                    let reason = if ticket.probe {
                        "the probe succeeded"
                    } else {
                        "a request sent before it opened was answered"
                    };
                    Some(Transition {
                        to: BreakerState::Closed,
                        reason: reason.into(),
                        failure: None,
                    })
                }
                (Some(why), BreakerState::HalfOpen) if ticket.probe => {
                    s.state = BreakerState::Open;
                    s.open_until = Instant::now() + self.cooldown;
                    Some(Transition {
                        to: BreakerState::Open,
                        reason: format!("the probe failed: {why}"),
                        failure: Some(why.to_string()),
                    })
                }
                (Some(why), BreakerState::Closed) => {
                    let now = Instant::now();
                    let failing_since = sent.max(s.last_success);
                    if s.consecutive_failures == 0 || failing_since < s.streak_began {
                        s.streak_began = failing_since;
                    }
                    s.consecutive_failures += 1;
                    let lasted = now - s.streak_began;
                    let over_span = s.consecutive_failures >= 2 && lasted >= self.span;
                    (s.consecutive_failures >= self.threshold || over_span).then(|| {
                        s.state = BreakerState::Open;
                        s.open_until = now + self.cooldown;
                        s.opened_at = Some(now);
                        let over = match over_span && s.consecutive_failures < self.threshold {
                            true => format!(" over {:.1} s", lasted.as_secs_f64()),
                            false => String::new(),
                        };
                        Transition {
                            to: BreakerState::Open,
                            reason: format!(
                                "{} failures in a row{over}; the last: {why}",
                                s.consecutive_failures
                            ),
                            failure: Some(why.to_string()),
                        }
                    })
                }
                (Some(_), _) => None,
            }
        };
        self.notify.notify_waiters();
        transition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opens_after_the_threshold_and_closes_after_a_good_probe() {
        let breaker = Breaker::new(3, Duration::from_secs(60), Duration::from_millis(40));
        let closed = Ticket { probe: false };
        assert_eq!(breaker.record(closed, Instant::now(), Some("reset")), None);
        assert_eq!(
            breaker.record(closed, Instant::now(), None),
            None,
            "a success resets the count"
        );
        assert_eq!(breaker.record(closed, Instant::now(), Some("reset")), None);
        assert_eq!(breaker.record(closed, Instant::now(), Some("reset")), None);
        let opened = breaker
            .record(closed, Instant::now(), Some("timeout"))
            .unwrap();
        assert_eq!(opened.to, BreakerState::Open);
        assert!(
            opened.reason.contains("3 failures in a row"),
            "{}",
            opened.reason
        );

        let started = Instant::now();
        let (ticket, transition) = breaker.admit(None).await;
        assert!(
            started.elapsed() >= Duration::from_millis(35),
            "requests wait out the cool-down"
        );
        assert_eq!(ticket, Some(Ticket { probe: true }));
        assert_eq!(transition.unwrap().to, BreakerState::HalfOpen);

        let soon = Some(Instant::now() + Duration::from_millis(10));
        assert_eq!(
            breaker.admit(soon).await.0,
            None,
            "only one probe at a time"
        );
        let closed_again = breaker
            .record(ticket.unwrap(), Instant::now(), None)
            .unwrap();
        assert_eq!(closed_again.to, BreakerState::Closed);
        assert_eq!(breaker.admit(soon).await.0, Some(Ticket { probe: false }));
    }

    #[tokio::test(start_paused = true)]
    async fn counts_the_time_it_was_not_closed() {
        let breaker = Breaker::new(1, Duration::from_secs(60), Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(breaker.open_time(), Duration::ZERO);
        breaker.record(Ticket { probe: false }, Instant::now(), Some("refused"));
        // The first probe fails: open again, still one outage.
        let (probe, _) = breaker.admit(None).await;
        breaker.record(probe.unwrap(), Instant::now(), Some("refused"));
        let (probe, _) = breaker.admit(None).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(breaker.open_time(), Duration::from_secs(5), "under way");
        breaker.record(probe.unwrap(), Instant::now(), None);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(breaker.open_time(), Duration::from_secs(5), "closed");
    }

    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_over_a_request_timeout_open_it_however_few() {
        let breaker = Breaker::new(10, Duration::from_secs(120), Duration::from_secs(5));
        let closed = Ticket { probe: false };
        assert_eq!(
            breaker.record(closed, Instant::now(), Some("no answer within 120 s")),
            None
        );
        tokio::time::sleep(Duration::from_secs(119)).await;
        assert_eq!(
            breaker.record(closed, Instant::now(), Some("no answer within 120 s")),
            None,
            "two failures within a request timeout of each other are not enough"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let opened = breaker
            .record(closed, Instant::now(), Some("no answer within 120 s"))
            .unwrap();
        assert_eq!(opened.to, BreakerState::Open);
        assert_eq!(
            opened.reason,
            "3 failures in a row over 120.0 s; the last: no answer within 120 s"
        );

        // A success starts the count and its span again.
        let (probe, _) = breaker.admit(None).await;
        breaker.record(probe.unwrap(), Instant::now(), None);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(breaker.record(closed, Instant::now(), Some("reset")), None);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            breaker.record(closed, Instant::now(), Some("reset")),
            None,
            "60 s of 120"
        );
    }

    const TIMEOUT: &str = "no answer within 120 s";

    /// A breaker of 10 failures, a 120 s span and 5 s of cool-down, whose
    /// first two requests, sent together, time out 120 s later: the first
    /// leaves it closed, the second opens it. When they were sent.
    async fn opened_by_two_timeouts_together() -> (Breaker, Instant) {
        let breaker = Breaker::new(10, Duration::from_secs(120), Duration::from_secs(5));
        let closed = Ticket { probe: false };
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(breaker.record(closed, sent, Some(TIMEOUT)), None);
        let opened = breaker.record(closed, sent, Some(TIMEOUT)).unwrap();
        assert_eq!(
            opened.reason,
            "2 failures in a row over 120.0 s; the last: no answer within 120 s"
        );
        (breaker, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_that_time_out_together_a_whole_timeout_after_their_send_open_it() {
        let (breaker, start) = opened_by_two_timeouts_together().await;
        let closed = Ticket { probe: false };

        // Nothing failing counts from before the last success.
        let (probe, _) = breaker.admit(None).await;
        breaker.record(probe.unwrap(), Instant::now(), None);
        let sent = start + Duration::from_secs(25);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(breaker.record(closed, sent, Some(TIMEOUT)), None);
        assert_eq!(
            breaker.record(closed, sent, Some(TIMEOUT)),
            None,
            "sent 160 s ago, but a request succeeded 60 s ago"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_to_a_request_sent_before_it_opened_closes_it() {
        let (breaker, sent) = opened_by_two_timeouts_together().await;
        let closed = Ticket { probe: false };
        let (probe, _) = breaker.admit(None).await;
        tokio::time::advance(Duration::from_secs(5)).await;
        let answered = breaker.record(closed, sent, None).unwrap();
        assert_eq!(
            (answered.to, answered.reason.as_str()),
            (
                BreakerState::Closed,
                "a request sent before it opened was answered"
            )
        );
        assert_eq!(breaker.open_time(), Duration::from_secs(10));
        // The probe's own answer, later, changes nothing.
        assert_eq!(breaker.record(probe.unwrap(), sent, None), None);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[tokio::test]
    async fn a_failed_probe_opens_it_again() {
        let breaker = Breaker::new(1, Duration::from_secs(60), Duration::from_millis(10));
        breaker.record(Ticket { probe: false }, Instant::now(), Some("refused"));
        let (ticket, _) = breaker.admit(None).await;
        let reopened = breaker
            .record(ticket.unwrap(), Instant::now(), Some("refused"))
            .unwrap();
        assert_eq!(reopened.to, BreakerState::Open);
        assert!(reopened.reason.contains("probe failed"));
        assert_eq!(breaker.state(), BreakerState::Open);
    }
}
