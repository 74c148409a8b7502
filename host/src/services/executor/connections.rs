//! Which connections a thread's requests use. A connection's task runs on
//! the runtime that opened it, so a request sent over a connection another
//! thread's runtime opened wakes that thread, and back, for every exchange.
//! The main thread uses an endpoint's first pool; each guest thread, a
//! runtime of its own, keeps a pool of its own, made on its first request.

use std::cell::Cell;
use std::sync::OnceLock;

/// Guest threads with pools of their own at most; any beyond share the
/// main thread's.
const OWN_POOLS: usize = 64;

thread_local! {
    /// 0 on the main thread; a guest thread's number (from 1) on it.
    static POOL: Cell<usize> = const { Cell::new(0) };
}

/// Gives the calling thread, guest thread `number` (from 1), connections
/// of its own.
pub fn use_own_connections(number: usize) {
    POOL.set(number);
}

/// An endpoint's clients: the main thread's, and one per guest thread.
pub struct Clients {
    main: reqwest::Client,
    own: Box<[OnceLock<reqwest::Client>]>,
}

impl Clients {
    pub fn new(main: reqwest::Client) -> Self {
        Self {
            main,
            own: (0..OWN_POOLS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The calling thread's client; `make` builds a guest thread's the
    /// first time (on failure, the main thread's pool still serves).
    pub fn current<E>(
        &self,
        make: impl FnOnce() -> Result<reqwest::Client, E>,
    ) -> &reqwest::Client {
        match POOL.get().checked_sub(1).and_then(|i| self.own.get(i)) {
            Some(own) => own.get_or_init(|| make().unwrap_or_else(|_| self.main.clone())),
            None => &self.main,
        }
    }
}
