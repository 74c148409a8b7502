//! Admission: what a request waits for before it may be sent — the rate
//! limits, a slot, the run's budget and the circuit breaker — and the
//! throttled time that waiting adds up to.

use super::breaker::Ticket;
use super::limiter::Permit;
use super::{Endpoint, cost};
use crate::services::budget::Hold;
use tokio::time::Instant;

/// What an admitted request holds while it is on the wire.
pub struct Admitted<'a> {
    pub ticket: Ticket,
    pub permit: Permit<'a>,
    pub hold: Option<Hold>,
}

impl Endpoint {
    /// Waits for the rate limits, a slot in the pool and the breaker; also
    /// holds the request's expected cost against the run's budget. `None`
    /// when `deadline` passes first, the run is stopping, the budget is
    /// spent or the endpoint has refused what the request asks for.
    pub(super) async fn admit(
        &self,
        body: &str,
        tokens: u32,
        deadline: Option<Instant>,
        retry: bool,
    ) -> Option<Admitted<'_>> {
        let _waiting = self.throttled.enter();
        if self.rates.is_limited() && !self.admit_rates(tokens, deadline).await {
            return None;
        }
        let permit = self.limiter.acquire(deadline, retry).await?;
        // A run that is stopping lets the calls on the wire finish but sends
        // no new one.
        if self.health.stop().is_draining() {
            return None;
        }
        // The endpoint refused a schema while this request waited for its
        // slot: it would be refused too.
        if self.schema.known_refusal(body).is_some() {
            return None;
        }
        let expected = self
            .spec
            .price
            .as_ref()
            .map(|p| cost::estimate(p, body, self.stats.mean_cost()));
        let hold = match expected {
            Some(expected) => Some(self.budget.hold(expected)?),
            None => None,
        };
        // The breaker is asked last, right before sending: a request that
        // waited for a slot while the endpoint went down must not go out
        // once the breaker has opened.
        let (ticket, transition) = self.breaker.admit(deadline).await;
        if let Some(transition) = transition {
            self.report(transition);
        }
        match ticket {
            Some(ticket) => Some(Admitted {
                ticket,
                permit,
                hold,
            }),
            None => {
                if let Some(hold) = hold {
                    self.budget.settle(hold, 0.0);
                }
                None
            }
        }
    }

    async fn admit_rates(&self, tokens: u32, deadline: Option<Instant>) -> bool {
        match deadline {
            Some(d) => tokio::time::timeout_at(d, self.rates.admit(tokens))
                .await
                .is_ok(),
            None => {
                self.rates.admit(tokens).await;
                true
            }
        }
    }
}
