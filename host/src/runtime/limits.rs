//! A guest's box: CPU per call, counted in ticks of the engine's epoch while
//! the guest runs, and linear memory. A guest past either traps; the store
//! remembers which limit it hit, so the row error can name it.

use std::time::Duration;
use wasmtime::ResourceLimiter;

/// How often the engine's epoch advances: the resolution of the CPU limit,
/// and how often a long guest call lets other rows' tasks run.
pub const TICK: Duration = Duration::from_millis(10);

/// The limit that stopped a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LimitHit {
    Cpu,
    Memory,
}

/// The CPU a call has left, in ticks. A tick is counted when the epoch
/// advances while the guest runs; after each wait on the host at most one
/// more is counted, so time spent waiting for endpoints is not charged.
pub struct CpuBudget {
    per_call: u64,
    left: u64,
    /// Whether a call ran out.
    pub hit: bool,
}

impl CpuBudget {
    pub fn new(per_call: Duration) -> Self {
        let ticks = per_call.as_millis().div_ceil(TICK.as_millis()).max(1) as u64;
        Self {
            per_call: ticks,
            left: ticks,
            hit: false,
        }
    }

    /// A new call starts with the whole budget.
    pub fn refill(&mut self) {
        self.left = self.per_call;
    }

    /// Charges one tick; false once the budget is spent.
    pub fn charge(&mut self) -> bool {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                true
            }
            None => {
                self.hit = true;
                false
            }
        }
    }
}

/// Refuses to grow an instance's linear memory beyond its limit: the growth
/// traps, and the limit is remembered.
pub struct MemoryLimit {
    pub bytes: usize,
    pub hit: bool,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.bytes {
            self.hit = true;
            return Err(wasmtime::Error::msg(format!(
                "the guest asked for {desired} bytes of memory, beyond its limit of {}",
                self.bytes
            )));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // A table element costs a pointer: the same budget covers tables.
        Ok(desired.saturating_mul(std::mem::size_of::<usize>()) <= self.bytes)
    }
}

/// Advances `engine`'s epoch every tick for as long as the engine lives.
pub fn start_ticker(engine: &wasmtime::Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("weir-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        });
    if let Err(e) = spawned {
        // Without ticks no deadline fires: guests run unlimited in CPU.
        tracing::error!("cannot start the epoch ticker, guest CPU limits are off: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_allows_its_ticks_then_refuses_until_refilled() {
        let mut budget = CpuBudget::new(Duration::from_millis(25));
        assert!(budget.charge() && budget.charge() && budget.charge());
        assert!(!budget.charge(), "25 ms is three ticks of 10 ms");
        budget.refill();
        assert!(budget.charge());
    }
}
