//! How many rows are still to enter a run: what tells an endpoint's limiter
//! that the run is in its last stretch before the rows buffered in the run
//! have run out.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct RowsToCome {
    total: OnceLock<u64>,
    entered: AtomicU64,
}

impl RowsToCome {
    /// The rows the run will take in all, once counted.
    pub fn set_total(&self, total: u64) {
        let _ = self.total.set(total);
    }

    pub fn entered(&self) {
        self.entered.fetch_add(1, Ordering::Relaxed);
    }

    /// Rows not yet taken in, once the total is known.
    pub fn left(&self) -> Option<u64> {
        let entered = self.entered.load(Ordering::Relaxed);
        self.total.get().map(|total| total.saturating_sub(entered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_left_are_known_once_counted() {
        let rows = RowsToCome::default();
        rows.entered();
        assert_eq!(rows.left(), None);
        rows.set_total(10);
        rows.entered();
        assert_eq!(rows.left(), Some(8));
    }
}
