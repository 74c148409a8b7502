//! The words the audit trail stores for how rows, node states and runs
//! ended. Each enum's `as_str` is the stored name: old audit databases hold
//! the same names, so they never change (AUDIT.md lists them).

use rusqlite::types::{ToSql, ToSqlOutput};

/// A source row's terminal outcome (`row_outcomes.outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOutcome {
    /// Its output reached the sinks.
    Completed,
    /// A `transform` batch took it in; the batch's output stands for it.
    ConsumedInBatch,
    Failed,
    /// Dropped, as its node's `on_error: discard` asks.
    Discarded,
    /// Written with its error to an `on_error` sink.
    Quarantined,
}

impl RowOutcome {
    /// The outcomes of rows that did not succeed.
    pub const SET_ASIDE: [RowOutcome; 3] = [
        RowOutcome::Failed,
        RowOutcome::Quarantined,
        RowOutcome::Discarded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RowOutcome::Completed => "completed",
            RowOutcome::ConsumedInBatch => "consumed_in_batch",
            RowOutcome::Failed => "failed",
            RowOutcome::Discarded => "discarded",
            RowOutcome::Quarantined => "quarantined",
        }
    }
}

/// How a row's state at a node ended (`node_states.status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    Completed,
    Failed,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Completed => "completed",
            NodeStatus::Failed => "failed",
        }
    }
}

/// Where a run stands (`runs.status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    Completed,
    /// Every row has its outcome, and some did not succeed.
    CompletedWithFailures,
    /// Some source rows have no outcome: a resume processes them again.
    Incomplete,
    /// Stopped before its end (Ctrl-C, an endpoint that cannot serve it).
    Interrupted,
    /// Its set-up failed before any row began.
    FailedToStart,
    /// Shards' runs being merged into one; a merge cut short leaves it, and
    /// the next merge deletes it.
    Merging,
}

impl RunStatus {
    /// A status read from a database; None for one this weir does not know.
    pub fn parse(name: &str) -> Option<Self> {
        [
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::CompletedWithFailures,
            RunStatus::Incomplete,
            RunStatus::Interrupted,
            RunStatus::FailedToStart,
            RunStatus::Merging,
        ]
        .into_iter()
        .find(|status| status.as_str() == name)
    }

    /// A run a resume can carry on: it never reached its end.
    pub fn is_resumable(self) -> bool {
        matches!(
            self,
            RunStatus::Running | RunStatus::Incomplete | RunStatus::Interrupted
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::CompletedWithFailures => "completed_with_failures",
            RunStatus::Incomplete => "incomplete",
            RunStatus::Interrupted => "interrupted",
            RunStatus::FailedToStart => "failed_to_start",
            RunStatus::Merging => "merging",
        }
    }
}

macro_rules! stored_as_name {
    ($($ty:ty),*) => {$(
        impl ToSql for $ty {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

stored_as_name!(RowOutcome, NodeStatus, RunStatus);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_stored_as_their_names_and_read_back() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let stored: String = conn
            .query_row("SELECT ?1", [RunStatus::CompletedWithFailures], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(stored, "completed_with_failures");
        assert_eq!(
            RunStatus::parse(&stored),
            Some(RunStatus::CompletedWithFailures)
        );
        assert_eq!(RunStatus::parse("no such status"), None);
        let outcome: String = conn
            .query_row("SELECT ?1", [RowOutcome::ConsumedInBatch], |r| r.get(0))
            .unwrap();
        assert_eq!(outcome, "consumed_in_batch");
    }
}
