//! The engine's epoch, the clock of the guests' CPU limits: advanced every
//! tick while guest code runs, and left still while none has run for a
//! while, so that a run waiting on slow answers or a Batch API does not wake
//! a thread a hundred times a second for hours. Between the two, while calls
//! come often but end within a tick (the `llm` guest's take a tenth of a
//! millisecond, a few hundred a second against a capped endpoint), it ticks
//! a fifth as often until it finds a call under way.

use super::limits::TICK;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll};
use std::thread::Thread;
use std::time::Duration;

/// Ticks with no guest code run before the ticker parks.
const IDLE_TICKS: u32 = 10;

/// Ticks in a row that found no call under way (calls came and went
/// between them) before the ticker ticks only every `SPARSE_TICKS` ticks.
const SHORT_CALL_TICKS: u32 = 10;

/// While calls end within a tick, the ticker sleeps this many ticks at once:
/// a call that then runs long gets its first tick up to this much late, and
/// every tick after on time. Its thread woke a hundred times a second through
/// a run against a capped endpoint, 3 % of the run's CPU.
const SPARSE_TICKS: u32 = 5;

/// How often a parked ticker looks whether its engine is gone.
const PARKED_CHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Activity {
    /// Guest calls being polled now.
    running: AtomicUsize,
    /// A guest call was polled since the last tick.
    entered: AtomicBool,
    /// The ticker is parked, or about to be: an entering call wakes it.
    parked: AtomicBool,
}

impl Activity {
    fn quiet(&self) -> bool {
        self.running.load(SeqCst) == 0 && !self.entered.load(SeqCst)
    }

    /// What guest code did since the last call, which starts a new period.
    fn take(&self) -> Since {
        let entered = self.entered.swap(false, SeqCst);
        if self.running.load(SeqCst) > 0 {
            Since::Running
        } else if entered {
            Since::CameAndWent
        } else {
            Since::Nothing
        }
    }
}

/// What guest calls did between two ticks.
enum Since {
    /// A call is under way as the tick comes.
    Running,
    /// Calls ran and ended within the period.
    CameAndWent,
    Nothing,
}

/// The handle guest calls run under; clones share the one ticker thread.
#[derive(Clone)]
pub struct EpochTicker {
    activity: Arc<Activity>,
    /// `None` if the thread could not start: guests then run unlimited.
    thread: Option<Thread>,
}

impl EpochTicker {
    /// Starts the ticker thread of `engine`; it ends once the engine is gone.
    pub fn start(engine: &wasmtime::Engine) -> Self {
        Self::start_checking(engine, PARKED_CHECK)
    }

    /// `start`, with a parked ticker looking for its engine every `check`.
    fn start_checking(engine: &wasmtime::Engine, check: Duration) -> Self {
        let activity = Arc::new(Activity::default());
        let weak = engine.weak();
        let shared = Arc::clone(&activity);
        let spawned = std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || tick(&weak, &shared, check));
        let thread = match spawned {
            Ok(handle) => Some(handle.thread().clone()),
            Err(e) => {
                // Without ticks no deadline fires: guests run unlimited in CPU.
                tracing::error!("cannot start the epoch ticker, guest CPU limits are off: {e}");
                None
            }
        };
        Self { activity, thread }
    }

    /// `call`, counted as guest code running whenever it is polled.
    pub fn running<F>(&self, call: F) -> Running<'_, F> {
        Running { ticker: self, call }
    }

    fn enter(&self) -> Entered<'_> {
        let activity = &self.activity;
        // The order matters against the ticker's (`parked`, then `running`):
        // either it sees this call running, or this call sees it parked.
        activity.running.fetch_add(1, SeqCst);
        if !activity.entered.load(SeqCst) {
            activity.entered.store(true, SeqCst);
        }
        if activity.parked.load(SeqCst)
            && let Some(thread) = &self.thread
        {
            thread.unpark();
        }
        Entered(activity)
    }
}

struct Entered<'a>(&'a Activity);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

/// How often to tick, from what guest calls did at the ticks before.
#[derive(Default)]
struct Pace {
    /// Ticks in a row with no guest code run.
    idle: u32,
    /// Ticks in a row at which calls had come and gone, none under way.
    short: u32,
}

impl Pace {
    fn after(&mut self, since: Since) {
        match since {
            Since::Running => *self = Self::default(),
            Since::CameAndWent => (self.idle, self.short) = (0, self.short + 1),
            Since::Nothing => self.idle += 1,
        }
    }

    fn parks(&self) -> bool {
        self.idle >= IDLE_TICKS
    }

    fn sleep(&self) -> Duration {
        if self.short >= SHORT_CALL_TICKS {
            TICK * SPARSE_TICKS
        } else {
            TICK
        }
    }
}

fn tick(engine: &wasmtime::EngineWeak, activity: &Activity, check: Duration) {
    let mut pace = Pace::default();
    loop {
        if pace.parks() {
            activity.parked.store(true, SeqCst);
            if activity.quiet() {
                std::thread::park_timeout(check);
            }
            activity.parked.store(false, SeqCst);
            if engine.upgrade().is_none() {
                return;
            }
            if activity.quiet() {
                continue;
            }
            pace = Pace::default();
        }
        std::thread::sleep(pace.sleep());
        match engine.upgrade() {
            Some(engine) => engine.increment_epoch(),
            None => return,
        }
        pace.after(activity.take());
    }
}

/// A guest call that keeps the ticker going while it is polled.
pub struct Running<'a, F> {
    ticker: &'a EpochTicker,
    call: F,
}

impl<F: Future + Unpin> Future for Running<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = self.ticker.enter();
        Pin::new(&mut self.call).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// `(module (func (export "spin") (loop (br 0))))`: runs until stopped.
    const SPIN: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
        0x03, 0x02, 0x01, 0x00, // one function of that type
        0x07, 0x08, 0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00, // export "spin"
        0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // loop { br 0 }
    ];

    fn within(limit: Duration, done: impl Fn() -> bool) -> bool {
        let started = Instant::now();
        while !done() {
            if started.elapsed() > limit {
                return false;
            }
            std::thread::sleep(TICK);
        }
        true
    }

    #[test]
    fn short_calls_slow_the_ticks_until_one_is_under_way_and_none_park_them() {
        let mut pace = Pace::default();
        for _ in 0..SHORT_CALL_TICKS - 1 {
            pace.after(Since::CameAndWent);
        }
        assert_eq!(pace.sleep(), TICK, "a few short calls change nothing");
        pace.after(Since::CameAndWent);
        assert_eq!(pace.sleep(), TICK * SPARSE_TICKS);
        // A pause between calls keeps the slower pace, and does not park.
        pace.after(Since::Nothing);
        assert_eq!(pace.sleep(), TICK * SPARSE_TICKS);
        assert!(!pace.parks());
        pace.after(Since::Running);
        assert_eq!(pace.sleep(), TICK, "a call under way is ticked every tick");
        for _ in 0..IDLE_TICKS {
            assert!(!pace.parks());
            pace.after(Since::Nothing);
        }
        assert!(pace.parks(), "no guest code ran for {IDLE_TICKS} ticks");
    }

    #[test]
    fn an_idle_ticker_parks_and_a_call_that_enters_gets_its_ticks_again() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config).unwrap();
        // Parked for an hour unless woken: only the call's wake-up can end
        // it within the test.
        let ticker = EpochTicker::start_checking(&engine, Duration::from_secs(3600));
        assert!(
            within(Duration::from_secs(10), || ticker
                .activity
                .parked
                .load(SeqCst)),
            "no guest code ran, yet the ticker kept ticking"
        );

        let module = wasmtime::Module::new(&engine, SPIN).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .unwrap();
        // A stand-in ticker, should the real one stay parked: the call ends
        // either way, and the test says which ticker ended it.
        let rescued = Arc::new(AtomicBool::new(false));
        let rescue = {
            let (engine, rescued) = (engine.clone(), Arc::clone(&rescued));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(10));
                rescued.store(true, SeqCst);
                engine.increment_epoch();
            })
        };
        store.set_epoch_deadline(1);
        let call = std::future::poll_fn(|_| Poll::Ready(spin.call(&mut store, ())));
        let ended = futures::executor::block_on(ticker.running(call));
        assert!(
            ended.is_err(),
            "the loop ends only when its deadline passes"
        );
        assert!(
            !rescued.load(SeqCst),
            "the parked ticker did not wake for the call"
        );
        drop(rescue);
    }
}
