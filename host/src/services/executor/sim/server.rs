//! The simulated servers: capped, queueing, batching, long-tailed, and
//! refusing or failing whatever the load, on tokio's paused clock, with a
//! trace of what each request met.

use super::super::controller::Signal;
use super::super::limiter::Limiter;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone)]
pub(super) enum Server {
    /// `cap` requests at once, each answered after `latency`; 429 beyond.
    Capped { cap: usize, latency: Duration },
    /// Capacity changing at the times given (since start).
    Steps {
        steps: Vec<(Duration, usize)>,
        latency: Duration,
    },
    /// Serves `slots` at once and queues the rest, never refusing. Each
    /// request takes `service`, or with `varied`, half to one and a half
    /// times that by a hash (mixed with `seed`), as answers of different
    /// lengths do. With `rescaled`, from that time (since start) on each
    /// takes that many times as long: more, as when prompts grow longer or
    /// the server's other tenants take more of it; less, as when they
    /// leave.
    Queueing {
        slots: usize,
        service: Duration,
        varied: bool,
        seed: u64,
        rescaled: Option<(Duration, f64)>,
    },
    /// Continuous batching, as vLLM, TGI and SGLang serve a model on a GPU:
    /// up to `max_batch` requests decode together, a token each per step,
    /// and a step takes `step` plus `per_request` for each request in it, so
    /// that more at once answer each later but many more a second. Requests
    /// beyond `max_batch` queue. An answer takes `tokens` steps, half to one
    /// and a half times that by a hash.
    Batching {
        max_batch: usize,
        step: Duration,
        per_request: Duration,
        tokens: u32,
    },
    /// Room for every request, each answered after a log-normal time of
    /// mean `mean` whatever the load (`weir_test_llm_server::log_normal_scale`),
    /// as a hosted model's answers of different lengths come: most near
    /// the median, a long tail of answers several times longer; `draw`
    /// picks which request gets which length.
    LongTail {
        mean: Duration,
        sigma: f64,
        draw: u64,
    },
    /// `LongTail`'s answers from a server that takes `cap` requests at
    /// once and refuses (429) beyond, as a gateway in front of a hosted
    /// model does.
    CappedLongTail {
        cap: usize,
        mean: Duration,
        sigma: f64,
        draw: u64,
    },
    /// Every `one_in`-th request (by a hash) gets 429, whatever the load.
    RandomErrors { one_in: u64, latency: Duration },
    /// Capped at `cap`, and in bursts of `burst` at random moments about
    /// every `every`, half the requests are refused whatever the load, as
    /// a shared provider does when others' traffic peaks (one in 50 between
    /// bursts).
    Bursts {
        cap: usize,
        latency: Duration,
        every: Duration,
        burst: Duration,
    },
    /// Capped at `cap`; each `window` of time is a burst by a draw of
    /// `chance` per cent, in which `share` per cent of the requests are
    /// refused whatever the load; `outside` per cent between bursts. The
    /// test LLM server's `bursts` preset: 1 s, 25 %, 80 %, 3 %.
    WindowBursts {
        cap: usize,
        latency: Duration,
        window: Duration,
        chance: u64,
        share: u64,
        outside: u64,
        /// The test LLM server's own schedule of bursts, when given,
        /// instead of the draw.
        schedule: Option<weir_test_llm_server::Bursts>,
        /// Mixed into the draws of bursts and refusals.
        seed: u64,
    },
    /// Never full: `outside` per cent of the requests are refused whatever
    /// the load, and `share` per cent in the first `burst` of every
    /// `every`, from the start (ChaosLLM's bursts).
    Periodic {
        latency: Duration,
        every: Duration,
        burst: Duration,
        share: u64,
        outside: u64,
    },
    /// Capped at `cap`, and per mille of requests, chosen by a hash:
    /// `refused` get 429/503/529 at once, `failed` 500/502/504 or a reset
    /// at once, `hung` no answer for 30 to 60 s, holding their slot, and
    /// `slow` their answer 10 to 30 times late.
    Faulty {
        cap: usize,
        latency: Duration,
        refused: u64,
        failed: u64,
        hung: u64,
        slow: u64,
        /// Picks which requests fail, hang or come late.
        seed: u64,
    },
}

#[derive(Default)]
struct Trace {
    in_flight: usize,
    queued: usize,
    /// The queue's length after each change, and when (since the start).
    queue_changes: Vec<(Duration, usize)>,
    calls: u64,
    successes: Vec<Instant>,
}

pub(super) struct Sim {
    server: Server,
    /// Each way between client and server: what a client's slot holds
    /// beyond the server's, so that a client must keep a little more than
    /// the server's capacity in flight to use all of it, as on real sockets.
    wire: Duration,
    /// What a refusal asks the client to wait (`Retry-After`).
    retry_after: Option<Duration>,
    /// From when to when (since the start) the client is too busy to read
    /// answers: those that come meanwhile are read at its end, as a host
    /// whose cores another process holds reads them in a clump.
    stall: Option<(Duration, Duration)>,
    pub(super) started: Instant,
    trace: RefCell<Trace>,
    queue: tokio::sync::Semaphore,
    batch: RefCell<Batch>,
    this: std::rc::Weak<Sim>,
}

/// A batching server's requests: those decoding, with the steps each has
/// left, and those queued.
#[derive(Default)]
struct Batch {
    decoding: Vec<(u32, tokio::sync::oneshot::Sender<()>)>,
    queued: std::collections::VecDeque<(u32, tokio::sync::oneshot::Sender<()>)>,
    stepping: bool,
}

impl Sim {
    pub(super) fn new(server: Server) -> Rc<Self> {
        Self::over_wire(server, Duration::ZERO, None)
    }

    /// The wait before a request is sent again after `retries` retries, as
    /// the executor's retry policy takes it (at the mean of its jitter): the
    /// server's word after a refusal if it gave one, else a back-off that
    /// doubles with each retry.
    fn retry_wait(&self, signal: Signal, retries: u32) -> Duration {
        let base = Duration::from_millis(75);
        match self.retry_after {
            Some(asked) if signal == Signal::Overload && asked >= base => asked,
            _ => base * (1 << retries.min(7)),
        }
    }

    /// Waits before a request is sent again, as the executor waits: after a
    /// refusal through the limiter, which may end early the part of the
    /// back-off the server did not ask for.
    pub(super) async fn wait_out(&self, limiter: &Limiter, signal: Signal, retries: u32) {
        let wait = self.retry_wait(signal, retries);
        if signal == Signal::Overload {
            limiter.wait_out_refusal(wait, self.retry_after).await;
        } else {
            tokio::time::sleep(wait).await;
        }
    }

    pub(super) fn over_wire(
        server: Server,
        wire: Duration,
        retry_after: Option<Duration>,
    ) -> Rc<Self> {
        Self::build(server, wire, retry_after, None)
    }

    fn build(
        server: Server,
        wire: Duration,
        retry_after: Option<Duration>,
        stall: Option<(Duration, Duration)>,
    ) -> Rc<Self> {
        let slots = match &server {
            Server::Queueing { slots, .. } => *slots,
            _ => 0,
        };
        Rc::new_cyclic(|this| Self {
            server,
            wire,
            retry_after,
            stall,
            started: Instant::now(),
            trace: RefCell::default(),
            queue: tokio::sync::Semaphore::new(slots),
            batch: RefCell::default(),
            this: this.clone(),
        })
    }

    /// Queues a request of `tokens` steps at a batching server, and starts
    /// its steps if none are under way.
    async fn batched(&self, tokens: u32) -> Signal {
        let (done, answered) = tokio::sync::oneshot::channel();
        self.queue_changed(1);
        let start = {
            let mut batch = self.batch.borrow_mut();
            batch.queued.push_back((tokens, done));
            !std::mem::replace(&mut batch.stepping, true)
        };
        if start {
            let sim = self.this.upgrade().expect("the sim outlives its requests");
            tokio::task::spawn_local(async move { sim.step_batches().await });
        }
        match answered.await {
            Ok(()) => Signal::Success,
            Err(_) => Signal::Neutral,
        }
    }

    /// Steps until no request is left: requests join the batch between
    /// steps, and one whose client gave up leaves it, as vLLM aborts it.
    async fn step_batches(&self) {
        let Server::Batching {
            max_batch,
            step,
            per_request,
            ..
        } = self.server.clone()
        else {
            unreachable!("only a batching server steps")
        };
        loop {
            let size = {
                let mut batch = self.batch.borrow_mut();
                batch.decoding.retain(|(_, done)| !done.is_closed());
                let mut joined = 0;
                while batch.decoding.len() < max_batch
                    && let Some(request) = batch.queued.pop_front()
                {
                    joined += 1;
                    if !request.1.is_closed() {
                        batch.decoding.push(request);
                    }
                }
                // Nothing decoding once the queue was taken in: nothing left.
                let size = batch.decoding.len();
                batch.stepping = size > 0;
                drop(batch);
                self.queue_changed(-joined);
                size
            };
            if size == 0 {
                return;
            }
            tokio::time::sleep(step + per_request * size as u32).await;
            let mut batch = self.batch.borrow_mut();
            let decoding = std::mem::take(&mut batch.decoding);
            for (left, done) in decoding {
                if left <= 1 {
                    let _ = done.send(());
                } else {
                    batch.decoding.push((left - 1, done));
                }
            }
        }
    }

    fn queue_changed(&self, by: isize) {
        let mut t = self.trace.borrow_mut();
        t.queued = t.queued.saturating_add_signed(by);
        let change = (Instant::now() - self.started, t.queued);
        t.queue_changes.push(change);
    }

    /// `server`, with a client that reads no answer from `from` to `to`.
    pub(super) fn stalled(server: Server, from: Duration, to: Duration) -> Rc<Self> {
        Self::build(server, Duration::ZERO, None, Some((from, to)))
    }

    /// One request; a client that gives up on it (drops the future) frees
    /// its slot at the server then, as a closed connection does.
    pub(super) async fn call(&self) -> Signal {
        let signal = self.over_wire_and_back().await;
        if let Some((from, to)) = self.stall {
            let since = Instant::now() - self.started;
            if (from..to).contains(&since) {
                tokio::time::sleep_until(self.started + to).await;
            }
        }
        signal
    }

    async fn over_wire_and_back(&self) -> Signal {
        if self.wire.is_zero() {
            return self.at_server().await;
        }
        // Each way takes half to one and a half times `wire`, so that
        // requests do not move in lockstep.
        let n = self.trace.borrow().calls;
        let way = |salt: u64| {
            self.wire
                .mul_f64(0.5 + (mix(n ^ salt) % 1000) as f64 / 1000.0)
        };
        tokio::time::sleep(way(0x5A)).await;
        let signal = self.at_server().await;
        tokio::time::sleep(way(0xA5)).await;
        signal
    }

    async fn at_server(&self) -> Signal {
        let n = {
            let mut t = self.trace.borrow_mut();
            t.calls += 1;
            t.in_flight += 1;
            t.calls
        };
        let _slot = Slot(self);
        let signal = self.serve(n).await;
        if signal == Signal::Success {
            self.trace.borrow_mut().successes.push(Instant::now());
        }
        signal
    }

    async fn serve(&self, n: u64) -> Signal {
        let in_flight = self.trace.borrow().in_flight;
        let refuse = Duration::from_millis(1);
        match &self.server {
            Server::Capped { cap, latency } => self.capped(*cap, in_flight, *latency).await,
            Server::Steps { steps, latency } => {
                let since = Instant::now() - self.started;
                let cap = steps.iter().rev().find(|(at, _)| *at <= since).unwrap().1;
                self.capped(cap, in_flight, *latency).await
            }
            Server::Queueing {
                service,
                varied,
                seed,
                rescaled,
                ..
            } => {
                self.queue_changed(1);
                let slot = self.queue.acquire().await.unwrap();
                self.queue_changed(-1);
                let scale = match varied {
                    true => 0.5 + (mix(n ^ 0x5E2F ^ (seed << 20)) % 1000) as f64 / 1000.0,
                    false => 1.0,
                };
                let rescale = match rescaled {
                    Some((from, factor)) if Instant::now() - self.started >= *from => *factor,
                    _ => 1.0,
                };
                tokio::time::sleep(service.mul_f64(scale * rescale)).await;
                drop(slot);
                Signal::Success
            }
            Server::LongTail { mean, sigma, draw } => {
                tokio::time::sleep(long_tail(*mean, *sigma, *draw, n)).await;
                Signal::Success
            }
            Server::CappedLongTail {
                cap,
                mean,
                sigma,
                draw,
            } => {
                let latency = long_tail(*mean, *sigma, *draw, n);
                self.capped(*cap, in_flight, latency).await
            }
            Server::Batching { tokens, .. } => {
                let scale = 0.5 + (mix(n ^ 0x70C5) % 1000) as f64 / 1000.0;
                self.batched(((*tokens as f64 * scale) as u32).max(1)).await
            }
            Server::Bursts {
                cap,
                latency,
                every,
                burst,
            } => {
                let since = Instant::now() - self.started;
                let period = since.as_nanos() / every.as_nanos();
                let offset = mix(period as u64) % (every.as_millis() as u64 / 2);
                let into = since.as_millis() as u64 - period as u64 * every.as_millis() as u64;
                let bursting = (offset..offset + burst.as_millis() as u64).contains(&into);
                let one_in = if bursting { 2 } else { 50 };
                if mix(n).is_multiple_of(one_in) {
                    tokio::time::sleep(refuse).await;
                    return Signal::Overload;
                }
                self.capped(*cap, in_flight, *latency).await
            }
            Server::WindowBursts {
                cap,
                latency,
                window,
                chance,
                share,
                outside,
                schedule,
                seed,
            } => {
                let since = Instant::now() - self.started;
                let index = (since.as_nanos() / window.as_nanos()) as u64;
                let bursting = match schedule {
                    Some(schedule) => schedule.covers(since),
                    None => mix(index ^ 0xB0B5 ^ seed) % 100 < *chance,
                };
                let refused = if bursting { share } else { outside };
                if mix(n ^ seed) % 100 < *refused {
                    return Signal::Overload;
                }
                self.capped(*cap, in_flight, *latency).await
            }
            Server::Periodic {
                latency,
                every,
                burst,
                share,
                outside,
            } => {
                let since = Instant::now() - self.started;
                let into = since.as_nanos() % every.as_nanos();
                let refused = if into < burst.as_nanos() {
                    share
                } else {
                    outside
                };
                if mix(n) % 100 < *refused {
                    return Signal::Overload;
                }
                tokio::time::sleep(*latency).await;
                Signal::Success
            }
            Server::Faulty {
                cap,
                latency,
                refused,
                failed,
                hung,
                slow,
                seed,
            } => {
                let draw = mix(n ^ seed) % 1000;
                let fast_failure = draw < refused + failed;
                if fast_failure || in_flight > *cap {
                    tokio::time::sleep(refuse).await;
                    return if draw >= *refused && fast_failure {
                        Signal::Neutral
                    } else {
                        Signal::Overload
                    };
                }
                let late = mix(n ^ 0xA5A5 ^ seed) % 1000;
                let held = if draw < refused + failed + hung {
                    Duration::from_secs(30 + late * 30 / 1000)
                } else if draw < refused + failed + hung + slow {
                    *latency * (10 + (late * 20 / 1000) as u32)
                } else {
                    *latency
                };
                tokio::time::sleep(held).await;
                if draw < refused + failed + hung {
                    // The hung connection ends in a reset.
                    Signal::Neutral
                } else {
                    Signal::Success
                }
            }
            Server::RandomErrors { one_in, latency } => {
                let refused = n
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .rotate_left(29)
                    .is_multiple_of(*one_in);
                tokio::time::sleep(if refused { refuse } else { *latency }).await;
                if refused {
                    Signal::Overload
                } else {
                    Signal::Success
                }
            }
        }
    }

    async fn capped(&self, cap: usize, in_flight: usize, latency: Duration) -> Signal {
        if in_flight > cap {
            // Refused on arrival, as the test server does: a refusal that
            // held the server's count for a while would refuse others.
            if self.wire.is_zero() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            return Signal::Overload;
        }
        tokio::time::sleep(latency).await;
        Signal::Success
    }

    /// The requests answered, whoever asked.
    pub(super) fn answered(&self) -> usize {
        self.trace.borrow().successes.len()
    }

    /// Answers per second between `from` and `to` after the start.
    pub(super) fn goodput(&self, from: f64, to: f64) -> f64 {
        let t = self.trace.borrow();
        let n = t
            .successes
            .iter()
            .map(|at| (*at - self.started).as_secs_f64())
            .filter(|s| *s >= from && *s < to)
            .count();
        n as f64 / (to - from)
    }

    pub(super) fn calls_per_success(&self) -> f64 {
        let t = self.trace.borrow();
        t.calls as f64 / t.successes.len() as f64
    }

    /// The time-weighted mean queue over the first `over` of the run. The
    /// requests that rows waiting on a slot send once the run is over
    /// (each sends one more) queue after it, and count for nothing here.
    pub(super) fn mean_queue(&self, over: Duration) -> f64 {
        self.mean_queue_between(Duration::ZERO, over)
    }

    pub(super) fn mean_queue_between(&self, from: Duration, to: Duration) -> f64 {
        weir_test_llm_server::time_weighted_mean(&self.trace.borrow().queue_changes, from, to)
    }

    /// The longest the queue was from `from` on.
    pub(super) fn peak_queue_from(&self, from: Duration) -> usize {
        let trace = self.trace.borrow();
        let changes = &trace.queue_changes;
        // The length in force at `from`, and every change after.
        let start = changes
            .partition_point(|(at, _)| *at <= from)
            .saturating_sub(1);
        changes[start..]
            .iter()
            .map(|(_, len)| *len)
            .max()
            .unwrap_or(0)
    }

    /// The first second-long stretch from `at` on that served at least
    /// `share` of `capacity`, as seconds after `at`.
    pub(super) fn recovery(&self, at: f64, capacity: f64, share: f64) -> Option<f64> {
        (0..100)
            .map(|tenth| at + f64::from(tenth) / 10.0)
            .find(|from| self.goodput(*from, from + 1.0) >= share * capacity)
            .map(|from| from - at)
    }
}

/// A request held at the server, until it is answered or given up.
struct Slot<'a>(&'a Sim);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.trace.borrow_mut().in_flight -= 1;
    }
}

/// A well-mixed hash of `n` (SplitMix64's finaliser), for choosing faults.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `n`th request's answer time of a log-normal long tail of mean
/// `mean`, as `draw` deals them out.
fn long_tail(mean: Duration, sigma: f64, draw: u64, n: u64) -> Duration {
    let n = n.wrapping_add(draw.wrapping_mul(1_000_003));
    mean.mul_f64(weir_test_llm_server::log_normal_scale(sigma, n))
}
