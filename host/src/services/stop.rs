//! A run that stops before its source is done. The parts that find a reason
//! (a signal, an endpoint that is down or refuses the run's requests) say so
//! here; the parts that act on it (the source reader, the executor, the
//! drain) ask. The first reason given is the one reported.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// SIGINT or SIGTERM; `exit_code` is 128 + the signal's number.
    Signal { name: &'static str, exit_code: u8 },
    /// The endpoint's circuit breaker stayed open past `abort_after_seconds`.
    EndpointDown { endpoint: String, detail: String },
    /// The endpoint refused the run's requests in a way no retry can fix
    /// (bad key, no access, no such model or path).
    EndpointRefused { endpoint: String, detail: String },
    /// The endpoint's TLS handshake failed before any answer: its
    /// certificate is not trusted, or it does not speak TLS.
    TlsHandshake { endpoint: String, detail: String },
    /// The endpoint's host name did not resolve before any answer.
    Unresolved { endpoint: String, detail: String },
    /// The endpoint answered with a redirect weir does not follow, before
    /// any success.
    Redirected { endpoint: String, detail: String },
    /// The next call would have taken the run past `budget_usd`.
    Budget { limit_usd: f64, spent_usd: f64 },
    /// The run's first rows to finish all failed at one node with one code
    /// (`stop_when_first_rows_fail`).
    RowsFailAlike {
        rows: u32,
        node: String,
        code: String,
    },
    /// `--limit`: the rows asked for are done, and the source has more.
    Limit { rows: u64 },
}

impl StopReason {
    pub fn exit_code(&self) -> u8 {
        match self {
            StopReason::Signal { exit_code, .. } => *exit_code,
            StopReason::Limit { .. } => 0,
            _ => 1,
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Signal { name, .. } => write!(f, "stopped by {name}"),
            StopReason::EndpointDown { endpoint, detail } => {
                write!(f, "endpoint `{endpoint}` is down: {detail}")
            }
            StopReason::EndpointRefused { endpoint, detail } => {
                write!(
                    f,
                    "endpoint `{endpoint}` refused the run's requests: {detail}"
                )
            }
            StopReason::TlsHandshake { endpoint, detail } => write!(
                f,
                "endpoint `{endpoint}`: the TLS handshake failed before any answer: {detail}"
            ),
            StopReason::Unresolved { endpoint, detail } => write!(
                f,
                "endpoint `{endpoint}`: its host name did not resolve before any answer: \
                 {detail}; is the host in base_url spelt right, and can this machine reach a \
                 DNS server?"
            ),
            StopReason::Redirected { endpoint, detail } => {
                write!(
                    f,
                    "endpoint `{endpoint}` redirects the run's requests: {detail}"
                )
            }
            StopReason::Budget {
                limit_usd,
                spent_usd,
            } => write!(
                f,
                "budget: the next call would pass budget_usd ${limit_usd} (${spent_usd:.4} spent); \
                 resume with a higher `--budget-usd` to go on"
            ),
            StopReason::Limit { rows } => write!(
                f,
                "--limit {rows}: as many rows as asked for are done; a resume goes on with the rest"
            ),
            StopReason::RowsFailAlike { rows, node, code } => write!(
                f,
                "the first {rows} rows all failed at transform `{node}` with {code}: a mistake \
                 every row would meet, so no more rows were sent; fix it and start a new run, or \
                 set `stop_when_first_rows_fail: 0` to run every row regardless"
            ),
        }
    }
}

#[derive(Default)]
pub struct RunStop {
    reason: OnceLock<StopReason>,
    /// No more source rows are read; rows in flight may finish.
    draining: AtomicBool,
    /// Calls in flight are cut and no more are sent.
    aborted: AtomicBool,
    notify: Notify,
}

impl RunStop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops reading rows and lets the rows in flight finish.
    pub fn drain(&self, reason: StopReason) {
        let _ = self.reason.set(reason);
        self.draining.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Stops reading rows and cuts every call in flight.
    pub fn abort(&self, reason: StopReason) {
        self.drain(reason);
        self.aborted.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    pub fn reason(&self) -> Option<&StopReason> {
        self.reason.get()
    }

    /// Resolves once the run stops reading rows (drains or aborts).
    pub async fn draining(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_draining() {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once the run is aborted.
    pub async fn aborted(&self) {
        loop {
            // Created before the check, so an abort in between still wakes it.
            let notified = self.notify.notified();
            if self.is_aborted() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_reason_stands_and_abort_wakes_waiters() {
        let stop = std::sync::Arc::new(RunStop::new());
        let waiter = tokio::spawn({
            let stop = stop.clone();
            async move { stop.aborted().await }
        });
        tokio::task::yield_now().await;
        stop.drain(StopReason::Signal {
            name: "SIGINT",
            exit_code: 130,
        });
        assert!(stop.is_draining() && !stop.is_aborted());
        stop.abort(StopReason::EndpointDown {
            endpoint: "llm".into(),
            detail: "x".into(),
        });
        waiter.await.unwrap();
        assert_eq!(stop.reason().unwrap().exit_code(), 130);
    }
}
