//! Runs a stream of futures with two separate bounds and yields their outputs
//! in the order the futures came: at most `running` of them at once, and at
//! most `window` between the oldest not yet yielded and the newest started.
//!
//! `StreamExt::buffered(n)` ties both bounds to one number, so one slow future
//! (a row waiting out a retry's back-off) stops every other from starting
//! once `n - 1` have finished behind it. Here the finished ones wait as plain
//! outputs, which cost memory only, while new ones keep starting.

use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FusedStream, FuturesUnordered, Stream, StreamExt};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

pub trait OrderedWindowExt: Stream + Sized {
    /// See the module documentation. `window` is raised to `running` if
    /// smaller, and both to 1.
    fn ordered_window<T>(self, running: usize, window: usize) -> OrderedWindow<Self, T>
    where
        Self::Item: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let running = running.max(1);
        OrderedWindow {
            futures: self.fuse().peekable(),
            running_futures: FuturesUnordered::new(),
            finished: VecDeque::new(),
            oldest_seq: 0,
            running,
            running_now: None,
            window: window.max(running),
            held: None,
        }
    }

    /// As `ordered_window`, with at most `running_now()` running, read each
    /// time one could start, when that is fewer than `running`. The time
    /// during which the window alone kept a future from starting adds up in
    /// `held`.
    fn ordered_window_following<T>(
        self,
        running: usize,
        window: usize,
        running_now: Arc<dyn Fn() -> usize + Send + Sync>,
        held: Arc<WindowHeld>,
    ) -> OrderedWindow<Self, T>
    where
        Self::Item: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let mut ordered = self.ordered_window(running, window);
        ordered.running_now = Some(running_now);
        ordered.held = Some((held, None));
        ordered
    }
}

impl<S: Stream> OrderedWindowExt for S {}

pub struct OrderedWindow<S: Stream, T> {
    futures: futures::stream::Peekable<futures::stream::Fuse<S>>,
    running_futures: FuturesUnordered<BoxFuture<'static, (u64, T)>>,
    /// Slot `i` holds the output of future `oldest_seq + i` once it finished;
    /// the next future started gets `oldest_seq + finished.len()`. Boxed: a
    /// window of rows waiting hours on provider batches is mostly empty
    /// slots, each the size of a pointer rather than of an output.
    finished: VecDeque<Option<Box<T>>>,
    oldest_seq: u64,
    running: usize,
    running_now: Option<Arc<dyn Fn() -> usize + Send + Sync>>,
    window: usize,
    /// Where the time the window held futures back adds up, and since when
    /// it holds them now.
    held: Option<(Arc<WindowHeld>, Option<Instant>)>,
}

/// How long a window was full while a future could otherwise have started:
/// the time the rows behind a slow one waited on it.
#[derive(Debug, Default)]
pub struct WindowHeld {
    nanos: AtomicU64,
}

impl WindowHeld {
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    fn add(&self, time: Duration) {
        let nanos = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

// Outputs are only moved, never pinned, so the window can move whatever they are.
impl<S: Stream + Unpin, T> Unpin for OrderedWindow<S, T> {}

impl<S, T> OrderedWindow<S, T>
where
    S: Stream + Unpin,
    S::Item: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    /// Starts futures while both bounds allow and the stream has one ready.
    fn start_more(&mut self, cx: &mut Context<'_>) {
        let running = match &self.running_now {
            Some(running_now) => self.running.min(running_now().max(1)),
            None => self.running,
        };
        while self.running_futures.len() < running && self.finished.len() < self.window {
            match self.futures.poll_next_unpin(cx) {
                Poll::Ready(Some(future)) => {
                    let seq = self.oldest_seq + self.finished.len() as u64;
                    self.finished.push_back(None);
                    // Mapped rather than awaited in an async block, which
                    // would hold the future twice over: once as captured,
                    // once as awaited.
                    self.running_futures
                        .push(Box::pin(future.map(move |output| (seq, output))));
                }
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        // Held back: room to run one more, and one ready to run, but the
        // window is full.
        let held_back = self.held.is_some()
            && self.running_futures.len() < running
            && self.finished.len() >= self.window
            && matches!(
                Pin::new(&mut self.futures).poll_peek(cx),
                Poll::Ready(Some(_))
            );
        if let Some((held, since)) = &mut self.held {
            match (held_back, *since) {
                (true, None) => *since = Some(Instant::now()),
                (false, Some(at)) => {
                    held.add(at.elapsed());
                    *since = None;
                }
                _ => {}
            }
        }
    }
}

impl<S: Stream, T> Drop for OrderedWindow<S, T> {
    /// A run stopped while the window held rows back counts that hold too.
    fn drop(&mut self) {
        if let Some((held, Some(since))) = &self.held {
            held.add(since.elapsed());
        }
    }
}

impl<S, T> Stream for OrderedWindow<S, T>
where
    S: Stream + Unpin,
    S::Item: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        loop {
            this.start_more(cx);
            if matches!(this.finished.front(), Some(Some(_))) {
                let output = this.finished.pop_front().flatten();
                this.oldest_seq += 1;
                return Poll::Ready(output.map(|o| *o));
            }
            match this.running_futures.poll_next_unpin(cx) {
                Poll::Ready(Some((seq, output))) => {
                    let slot = (seq - this.oldest_seq) as usize;
                    this.finished[slot] = Some(Box::new(output));
                }
                // Nothing runs and the oldest has been yielded, so nothing
                // waits either: done once the stream is.
                Poll::Ready(None) if this.futures.is_terminated() => return Poll::Ready(None),
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn outputs_keep_input_order_whatever_order_futures_finish_in() {
        let delays = [50u64, 10, 30, 0, 20, 40, 5];
        let out: Vec<usize> = stream::iter(delays.iter().copied().enumerate())
            .map(|(i, ms)| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                i
            })
            .ordered_window(3, 5)
            .collect()
            .await;
        assert_eq!(out, (0..delays.len()).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_first_future_does_not_stop_the_window_behind_it() {
        let running = Arc::new(AtomicUsize::new(0));
        let most_running = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let (r, m, s) = (running.clone(), most_running.clone(), started.clone());
        let mut outputs = stream::iter(0..100u64)
            .map(move |i| {
                let (r, m, s) = (r.clone(), m.clone(), s.clone());
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    let ms = if i == 0 { 10_000 } else { 1 };
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    i
                }
            })
            .ordered_window(4, 50);
        let first = tokio::spawn(async move {
            let first = outputs.next().await;
            (first, outputs.collect::<Vec<_>>().await)
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Half-way through the slow one: the whole window has started, though
        // never more than 4 at once; `buffered(4)` would have started 4.
        assert_eq!(started.load(Ordering::SeqCst), 50);
        assert!(most_running.load(Ordering::SeqCst) <= 4);
        let (first, rest) = first.await.unwrap();
        assert_eq!(first, Some(0));
        assert_eq!(rest, (1..100).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn the_running_bound_followed_is_read_as_futures_start() {
        let bound = Arc::new(AtomicUsize::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let most_running = Arc::new(AtomicUsize::new(0));
        let (r, m) = (running.clone(), most_running.clone());
        let follow = bound.clone();
        let mut outputs = stream::iter(0..40u64)
            .map(move |i| {
                let (r, m) = (r.clone(), m.clone());
                async move {
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    i
                }
            })
            .ordered_window_following(
                8,
                50,
                Arc::new(move || follow.load(Ordering::SeqCst)),
                Arc::default(),
            );
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(outputs.next().await.unwrap());
        }
        assert_eq!(most_running.load(Ordering::SeqCst), 2, "held to the bound");
        bound.store(100, Ordering::SeqCst);
        seen.extend(outputs.collect::<Vec<_>>().await);
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        assert_eq!(
            most_running.load(Ordering::SeqCst),
            8,
            "never beyond the fixed bound"
        );
    }

    /// 100 futures, the first taking 10 s and the rest 1 ms, 4 at once in
    /// `window`: their outputs, and how long the window held any back.
    async fn slow_first_in_a_window_of(window: usize) -> (Vec<u64>, Duration) {
        let held = Arc::new(WindowHeld::default());
        let out = stream::iter(0..100u64)
            .map(|i| async move {
                let ms = if i == 0 { 10_000 } else { 1 };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                i
            })
            .ordered_window_following(4, window, Arc::new(|| 4), Arc::clone(&held))
            .collect()
            .await;
        (out, held.total())
    }

    #[tokio::test(start_paused = true)]
    async fn the_time_a_full_window_held_ready_futures_back_is_counted() {
        // A window of 20 is full once 19 quick ones have finished, about
        // 5 ms in, and holds the other 80 back until the first ends.
        let (out, held) = slow_first_in_a_window_of(20).await;
        assert_eq!(out, (0..100).collect::<Vec<_>>());
        assert!(
            held > Duration::from_millis(9_900) && held <= Duration::from_secs(10),
            "held {held:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_that_never_fills_holds_nothing_back() {
        let (out, held) = slow_first_in_a_window_of(200).await;
        assert_eq!(out.len(), 100);
        assert_eq!(held, Duration::ZERO);
    }

    #[tokio::test]
    async fn an_empty_stream_ends() {
        let out: Vec<u8> = stream::iter(Vec::<u8>::new())
            .map(|i| async move { i })
            .ordered_window(2, 2)
            .collect()
            .await;
        assert!(out.is_empty());
    }
}
