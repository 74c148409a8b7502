//! The CPU time a thread spends on a piece of work, rather than the wall
//! time: a thread the system preempts, or a call waiting on the network,
//! does not make the work look heavy.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A future and, when `measured`, the CPU time its thread spent polling
/// it: waits on endpoints and timers do not count.
pub struct Timed<F> {
    inner: F,
    spent: Option<Duration>,
}

impl<F> Timed<F> {
    pub fn new(inner: F, measured: bool) -> Self {
        Self {
            inner,
            spent: measured.then_some(Duration::ZERO),
        }
    }
}

impl<F: Future + Unpin> Future for Timed<F> {
    type Output = (F::Output, Option<Duration>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(spent) = self.spent else {
            return Pin::new(&mut self.inner)
                .poll(cx)
                .map(|output| (output, None));
        };
        let started = thread_cpu_time();
        let polled = Pin::new(&mut self.inner).poll(cx);
        let spent = spent + thread_cpu_time().saturating_sub(started);
        self.spent = Some(spent);
        polled.map(|output| (output, Some(spent)))
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if read != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
