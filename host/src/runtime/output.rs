//! What a guest writes besides its rows: log lines and audit attachments.
//! Each is capped per row of a call, so a looping guest cannot fill the
//! terminal or the audit database; beyond a cap the rest is dropped and
//! counted, and one mark per call says how much.

use std::collections::BTreeMap;

/// Log text a call may write: `limits.log_kb_per_row` for each of its rows.
pub struct LogCap {
    per_row: usize,
    allowed: usize,
    used: usize,
    dropped: usize,
}

impl LogCap {
    /// Starts with one row's worth, for `configure`.
    pub fn new(per_row: usize) -> Self {
        Self {
            per_row,
            allowed: per_row,
            used: 0,
            dropped: 0,
        }
    }

    pub fn start_call(&mut self, rows: usize) {
        self.allowed = self.per_row.saturating_mul(rows.max(1));
        self.used = 0;
        self.dropped = 0;
    }

    /// The part of `message` that may be written: all of it while it fits,
    /// then what fits of it (cut at a character), then nothing.
    pub fn admit<'a>(&mut self, message: &'a str) -> &'a str {
        let room = self.allowed - self.used;
        if message.len() <= room {
            self.used += message.len();
            return message;
        }
        let cut = (0..=room)
            .rev()
            .find(|&i| message.is_char_boundary(i))
            .unwrap_or(0);
        self.used = self.allowed;
        self.dropped += message.len() - cut;
        &message[..cut]
    }

    /// Bytes dropped in this call so far.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    pub fn per_row(&self) -> usize {
        self.per_row
    }
}

/// Attachment bytes (keys and values) of each row of a call, by node state:
/// `limits.attach_kb_per_row` each.
pub struct AttachCap {
    per_row: usize,
    rows: BTreeMap<u64, Tally>,
}

#[derive(Default)]
struct Tally {
    kept: usize,
    dropped: usize,
}

impl AttachCap {
    pub fn new(per_row: usize) -> Self {
        Self {
            per_row,
            rows: BTreeMap::new(),
        }
    }

    /// Whether an attachment of `bytes` to node state `state_id` is kept. One
    /// that does not fit whole is dropped whole: a value cut short could be
    /// read as a whole one.
    pub fn admit(&mut self, state_id: u64, bytes: usize) -> bool {
        let tally = self.rows.entry(state_id).or_default();
        if tally.kept.saturating_add(bytes) <= self.per_row {
            tally.kept += bytes;
            true
        } else {
            tally.dropped += bytes;
            false
        }
    }

    /// The node states that had attachments dropped in this call, with how
    /// many bytes; the tallies start again.
    pub fn end_call(&mut self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.rows)
            .into_iter()
            .filter(|(_, tally)| tally.dropped > 0)
            .map(|(state_id, tally)| (state_id, tally.dropped))
            .collect()
    }

    pub fn per_row(&self) -> usize {
        self.per_row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_logs_its_rows_worth_then_only_counts() {
        let mut log = LogCap::new(10);
        log.start_call(2);
        assert_eq!(log.admit("012345678901234"), "012345678901234");
        // 5 bytes are left, and the fifth is half of the `é`.
        assert_eq!(log.admit("abcdéf"), "abcd", "cut at a character");
        assert_eq!(log.admit("more"), "");
        assert_eq!(log.dropped(), 3 + 4);
        log.start_call(1);
        assert_eq!((log.admit("again"), log.dropped()), ("again", 0));
    }

    #[test]
    fn attachments_beyond_a_rows_cap_are_dropped_whole_and_counted() {
        let mut cap = AttachCap::new(100);
        assert!(cap.admit(7, 60));
        assert!(!cap.admit(7, 50));
        assert!(cap.admit(7, 40));
        assert!(cap.admit(8, 100), "each row has its own cap");
        assert_eq!(cap.end_call(), vec![(7, 50)]);
        assert!(cap.admit(7, 100), "a new call starts afresh");
    }
}
