//! Whether a run's first rows fail alike: every one of them at one node with
//! one code, none ok. That is a prompt, a parser or an option every row
//! would meet (a column misspelt in a template, outputs the model never
//! gives), and each answered row of it is paid for: the run stops rather than
//! fail every row of a large source one by one
//! (`stop_when_first_rows_fail`).

use super::stage::Flow;
use crate::services::stop::StopReason;

/// Failures that say nothing of the pipeline's own options: the source's
/// rows, answers that did not come in time, a stop's own.
const NOT_COUNTED: &[&str] = &[
    "source_invalid",
    "retry_timeout",
    "detached",
    "node_stopped",
];

pub struct FirstRows {
    /// 0: never stops.
    limit: u32,
    failed: u32,
    /// (node, code) of the failures so far.
    alike: Option<(usize, String)>,
    /// A row went through, or two failed differently: nothing more to tell.
    settled: bool,
}

impl FirstRows {
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            failed: 0,
            alike: None,
            settled: limit == 0,
        }
    }

    /// Looks at a finished flow, in source order; the stop it calls for
    /// when it is the `limit`-th of the first rows failing alike.
    pub fn observe(
        &mut self,
        flow: &Flow,
        node_name: impl Fn(usize) -> String,
    ) -> Option<StopReason> {
        if self.settled {
            return None;
        }
        let failure = match &flow.state {
            Ok(_) => {
                self.settled = true;
                return None;
            }
            Err(failure) => failure,
        };
        let node = failure.node?;
        let code = &failure.error.code;
        if NOT_COUNTED.contains(&code.as_str()) {
            return None;
        }
        let (at, first_code) = self.alike.get_or_insert_with(|| (node, code.clone()));
        if *at != node || first_code != code {
            self.settled = true;
            return None;
        }
        self.failed += flow.members.len() as u32;
        if self.failed < self.limit {
            return None;
        }
        self.settled = true;
        let (node, code) = self.alike.take()?;
        Some(StopReason::RowsFailAlike {
            rows: self.failed,
            node: node_name(node),
            code,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stage::Failure;
    use crate::types::RowError;

    fn failed(index: u64, node: usize, code: &str) -> Flow {
        Flow::single(
            index,
            Err(Failure {
                node: Some(node),
                error: RowError::new(code, format!("bad {index}")),
                input: Vec::new(),
            }),
        )
    }

    fn name(node: usize) -> String {
        format!("node{node}")
    }

    #[test]
    fn the_limit_th_row_failing_alike_stops_the_run() {
        let mut first = FirstRows::new(3);
        assert!(
            first
                .observe(&failed(0, 1, "response_invalid"), name)
                .is_none()
        );
        assert!(
            first
                .observe(&failed(1, 1, "retry_timeout"), name)
                .is_none()
        );
        assert!(
            first
                .observe(&failed(2, 1, "response_invalid"), name)
                .is_none()
        );
        let stop = first.observe(&failed(3, 1, "response_invalid"), name);
        let Some(StopReason::RowsFailAlike { rows, node, code }) = stop else {
            panic!("{stop:?}");
        };
        assert_eq!(
            (rows, node.as_str(), code.as_str()),
            (3, "node1", "response_invalid")
        );
        assert!(
            first
                .observe(&failed(4, 1, "response_invalid"), name)
                .is_none(),
            "once"
        );
    }

    #[test]
    fn a_row_gone_through_or_failures_unlike_settle_it() {
        let mut first = FirstRows::new(2);
        assert!(first.observe(&failed(0, 1, "x"), name).is_none());
        assert!(
            first
                .observe(&Flow::single(1, Ok(Vec::new())), name)
                .is_none()
        );
        assert!(first.observe(&failed(2, 1, "x"), name).is_none());
        let mut first = FirstRows::new(2);
        assert!(first.observe(&failed(0, 1, "x"), name).is_none());
        assert!(first.observe(&failed(1, 0, "x"), name).is_none());
        assert!(first.observe(&failed(2, 0, "x"), name).is_none());
        let mut never = FirstRows::new(0);
        assert!(never.observe(&failed(0, 1, "x"), name).is_none());
    }
}
