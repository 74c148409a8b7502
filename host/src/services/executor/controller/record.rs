//! The record of a run's limit: its changes, and the decisions that made
//! them, bounded however long the run.

use super::*;

impl Controller {
    /// A cut, undo or drain moved the limit from `from`, for `why`.
    pub(super) fn decided(&mut self, why: Why, from: f64) {
        self.why = Some((why, from));
    }

    /// Records a change of the whole-number limit since `before`, and the
    /// decision made within this answer, if one moved it, which it returns.
    /// A decision the floor or the pool's size left without effect is not
    /// one.
    pub(super) fn note_change(&mut self, before: f64, now: Instant) -> Option<Decision> {
        let at = now.saturating_duration_since(self.started);
        let to = self.limit.floor() as u32;
        if self.limit.floor() != before.floor() {
            self.peak = self.peak.max(self.limit);
            self.changes.push((at, to));
            if self.changes.len() > MAX_CHANGES {
                thin(&mut self.changes, MAX_CHANGES);
            }
        }
        // A decision after growth within the same answer can end where the
        // limit began it, and is a decision all the same.
        let (why, from) = self
            .why
            .take()
            .filter(|&(_, from)| from.floor() as u32 != to)?;
        // The limit it started from may have grown within this answer.
        self.peak = self.peak.max(from);
        let decision = Decision {
            at,
            from: from.floor() as u32,
            to,
            why,
        };
        self.decisions.push(decision);
        if self.decisions.len() > MAX_DECISIONS {
            thin(&mut self.decisions, MAX_DECISIONS);
        }
        Some(decision)
    }
}

/// Halves a record of `most` entries after its first quarter, keeping every
/// other one: a long run's record stays bounded, its start whole and the
/// rest at a resolution that halves each time it fills.
pub(super) fn thin<T>(record: &mut Vec<T>, most: usize) {
    let keep = most / 4;
    let mut i = 0;
    record.retain(|_| {
        i += 1;
        i <= keep || (i - keep).is_multiple_of(2)
    });
}
