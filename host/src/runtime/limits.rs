//! A guest's box: CPU per call, counted in ticks of the engine's epoch while
//! the guest runs, and linear memory, per instance and across all of a
//! node's instances. A guest past a limit traps; the store remembers which
//! limit it hit, so the row error can name it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime::ResourceLimiter;

/// How often the engine's epoch advances while guest code runs: the
/// resolution of the CPU limit, and how often a long guest call lets other
/// rows' tasks run. Where calls have all been short, a long one's first tick
/// may come a few ticks late (see `ticker`).
pub const TICK: Duration = Duration::from_millis(10);

/// The limit that stopped a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LimitHit {
    Cpu,
    /// The instance's own memory limit (`limits.memory_mb`).
    Memory,
    /// The node's memory budget, shared by all its instances
    /// (`limits.node_memory_mb`).
    NodeMemory,
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

/// The linear memory all of one node's instances hold together. A node may
/// keep hundreds of instances (one per row in flight), so the per-instance
/// limit alone would let it take many gigabytes.
pub struct NodeMemory {
    budget: usize,
    held: AtomicUsize,
    peak: AtomicUsize,
}

impl NodeMemory {
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Takes `bytes` from the budget, or nothing if they do not fit.
    fn reserve(&self, bytes: usize) -> bool {
        match self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes)
                    .filter(|&total| total <= self.budget)
            }) {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::AcqRel);
                true
            }
            Err(_) => false,
        }
    }

    fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes the node's live instances hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// The most they held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }
}

/// Refuses to grow an instance's linear memory beyond its own limit or
/// beyond what is left of its node's budget: the growth traps, and the limit
/// is remembered. What the instance holds goes back to the node when the
/// instance is dropped.
pub struct MemoryLimit {
    bytes: usize,
    node: Arc<NodeMemory>,
    /// Of the node's budget, taken by this instance.
    held: usize,
    pub hit: Option<LimitHit>,
}

impl MemoryLimit {
    pub fn new(bytes: usize, node: Arc<NodeMemory>) -> Self {
        Self {
            bytes,
            node,
            held: 0,
            hit: None,
        }
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        self.node.release(self.held);
    }
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.bytes {
            self.hit = Some(LimitHit::Memory);
            return Err(wasmtime::Error::msg(format!(
                "the guest asked for {desired} bytes of memory, beyond its limit of {}",
                self.bytes
            )));
        }
        let more = desired.saturating_sub(current);
        if !self.node.reserve(more) {
            self.hit = Some(LimitHit::NodeMemory);
            return Err(wasmtime::Error::msg(format!(
                "the guest asked for {more} more bytes of memory, beyond what is left of its \
                 node's budget of {} (its instances hold {})",
                self.node.budget,
                self.node.held()
            )));
        }
        self.held += more;
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

    fn grow(limit: &mut MemoryLimit, current: usize, desired: usize) -> bool {
        limit.memory_growing(current, desired, None).is_ok()
    }

    #[test]
    fn instances_share_their_node_budget_and_give_it_back_when_dropped() {
        let node = Arc::new(NodeMemory::new(100));
        let mut a = MemoryLimit::new(80, Arc::clone(&node));
        let mut b = MemoryLimit::new(80, Arc::clone(&node));
        assert!(grow(&mut a, 0, 60));
        assert!(!grow(&mut b, 0, 60), "60 + 60 is beyond the node's 100");
        assert_eq!(b.hit, Some(LimitHit::NodeMemory));
        assert!(grow(&mut b, 0, 40));
        assert!(
            !grow(&mut a, 60, 90),
            "the instance's own limit comes first"
        );
        assert_eq!(a.hit, Some(LimitHit::Memory));
        assert_eq!((node.held(), node.peak()), (100, 100));
        drop(a);
        assert_eq!(node.held(), 40);
        let mut c = MemoryLimit::new(80, Arc::clone(&node));
        assert!(grow(&mut c, 0, 60));
    }
}
