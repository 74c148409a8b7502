//! A call that waits, packed into one buffer.
//!
//! Rows by the hundred thousand wait on provider batches for hours. As a
//! `Call`, each waiting call is a dozen small allocations (its flows, row
//! texts, node states, call counters), each with the allocator's overhead
//! and spare capacity. Packed, it is one buffer about the size of its rows'
//! text, so memory grows with the rows waiting by little more than their
//! data. A live flow's rows are not packed: they are the row texts, read
//! back as `restore_rows` does.

use super::stage::{Call, Flow};
use crate::runtime::RowScope;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub(super) struct PackedCall {
    bytes: Box<[u8]>,
    /// The flows that do not go to the guest (they failed upstream), as
    /// they were: rare, and holding errors and rows best kept as values.
    passing: Vec<(usize, Flow)>,
    /// The call's start, which its rows' deadlines are packed relative to.
    started: Instant,
}

impl Call {
    pub(super) fn pack(self) -> PackedCall {
        let Call {
            flows,
            live,
            started,
            started_at_ms,
            state_ids,
            batch_id,
            input,
            scopes,
            spans,
        } = self;
        let text: usize = input.iter().map(String::len).sum();
        let mut out = Writer(Vec::with_capacity(text + 32 + 48 * live.len()));
        out.uint(flows.len() as u64);
        out.int(started_at_ms);
        out.option(batch_id);
        out.uint(live.len() as u64);
        let mut passing = Vec::new();
        let mut next_live = live.iter().copied().enumerate().peekable();
        for (i, flow) in flows.into_iter().enumerate() {
            let Some((k, _)) = next_live.next_if(|&(_, l)| l == i) else {
                passing.push((i, flow));
                continue;
            };
            out.uint(i as u64);
            out.uint(flow.members.len() as u64);
            flow.members.iter().for_each(|&m| out.uint(m));
            out.option(flow.batch);
            out.uint(state_ids[k]);
            let span = &spans[k];
            out.uint(span.start as u64);
            out.uint(span.end as u64);
            // The rows of one flow share one node state: one scope for them all.
            if let Some(scope) = scopes.get(span.start).filter(|_| !span.is_empty()) {
                out.uint(scope.row_index);
                out.uint(scope.node_id as u64);
                out.option(
                    scope
                        .deadline
                        .map(|d| d.saturating_duration_since(started).as_nanos() as u64),
                );
                out.uint(u64::from(scope.calls.load(Ordering::Relaxed)));
                out.uint(u64::from(scope.requests.load(Ordering::Relaxed)));
            }
        }
        out.uint(input.len() as u64);
        for text in &input {
            out.bytes(text.as_bytes());
        }
        PackedCall {
            bytes: out.0.into_boxed_slice(),
            passing,
            started,
        }
    }
}

impl PackedCall {
    pub(super) fn unpack(self) -> Call {
        let PackedCall {
            bytes,
            passing,
            started,
        } = self;
        let mut at = Reader(&bytes);
        let flow_count = at.uint() as usize;
        let started_at_ms = at.int();
        let batch_id = at.option();
        let live_count = at.uint() as usize;
        let mut flows: Vec<Option<Flow>> = (0..flow_count).map(|_| None).collect();
        let mut live = Vec::with_capacity(live_count);
        let mut state_ids = Vec::with_capacity(live_count);
        let mut spans: Vec<Range<usize>> = Vec::with_capacity(live_count);
        let mut flow_scopes = Vec::with_capacity(live_count);
        for _ in 0..live_count {
            let i = at.uint() as usize;
            let members = (0..at.uint()).map(|_| at.uint()).collect();
            let batch = at.option();
            flows[i] = Some(Flow {
                members,
                batch,
                state: Ok(Vec::new()),
            });
            live.push(i);
            let state_id = at.uint();
            state_ids.push(state_id);
            let span = at.uint() as usize..at.uint() as usize;
            if !span.is_empty() {
                let row_index = at.uint();
                let node_id = at.uint() as usize;
                let deadline = at.option().map(|n| started + Duration::from_nanos(n));
                let calls = Arc::new(AtomicU32::new(at.uint() as u32));
                let requests = Arc::new(AtomicU32::new(at.uint() as u32));
                flow_scopes.push(RowScope {
                    state_id,
                    row_index,
                    node_id,
                    deadline,
                    calls,
                    requests,
                    // Only rows waiting on provider batches are packed, and
                    // their instances wait suspended: nothing recorded.
                    answers: Default::default(),
                });
            }
            spans.push(span);
        }
        let input_count = at.uint() as usize;
        let input: Vec<String> = (0..input_count)
            .map(|_| String::from_utf8(at.bytes().to_vec()).expect("packed from a String"))
            .collect();
        let mut scopes = Vec::with_capacity(input_count);
        for (span, scope) in spans.iter().filter(|s| !s.is_empty()).zip(&flow_scopes) {
            scopes.extend(span.clone().map(|_| scope.clone()));
        }
        for (i, flow) in passing {
            flows[i] = Some(flow);
        }
        Call {
            flows: flows
                .into_iter()
                .map(|f| f.expect("every flow packed or passing"))
                .collect(),
            live,
            started,
            started_at_ms,
            state_ids,
            batch_id,
            input,
            scopes,
            spans,
        }
    }
}

/// LEB128 integers, and byte strings after their length.
struct Writer(Vec<u8>);

impl Writer {
    fn uint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    fn int(&mut self, n: i64) {
        self.uint(((n << 1) ^ (n >> 63)) as u64);
    }

    fn option(&mut self, n: Option<u64>) {
        match n {
            None => self.uint(0),
            Some(n) => {
                self.uint(1);
                self.uint(n);
            }
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.uint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn uint(&mut self) -> u64 {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first().expect("packed by Writer");
            self.0 = rest;
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        n
    }

    fn int(&mut self) -> i64 {
        let n = self.uint();
        ((n >> 1) as i64) ^ -((n & 1) as i64)
    }

    fn option(&mut self) -> Option<u64> {
        match self.uint() {
            0 => None,
            _ => Some(self.uint()),
        }
    }

    fn bytes(&mut self) -> &[u8] {
        let len = self.uint() as usize;
        let (b, rest) = self.0.split_at(len);
        self.0 = rest;
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stage::Failure;
    use crate::types::RowError;

    fn scope(state_id: u64, row_index: u64, deadline: Option<Instant>) -> RowScope {
        let scope = RowScope::new(state_id, row_index, 2, deadline);
        scope.calls.store(3, Ordering::Relaxed);
        scope
    }

    #[test]
    fn a_call_unpacks_to_what_was_packed_with_its_rows_left_to_the_texts() {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(90);
        let shared = scope(7, 10, Some(deadline));
        let call = Call {
            flows: vec![
                Flow::single(
                    9,
                    Err(Failure {
                        node: Some(0),
                        error: RowError::new("upstream", "failed before"),
                        input: Vec::new(),
                    }),
                ),
                Flow {
                    members: vec![10, 11],
                    batch: Some(4),
                    state: Ok(vec![serde_json::Map::new()]),
                },
                Flow::single(12, Ok(Vec::new())),
                Flow::single(u64::MAX, Ok(vec![serde_json::Map::new()])),
            ],
            live: vec![1, 2, 3],
            started,
            started_at_ms: -5,
            state_ids: vec![7, 8, u64::MAX],
            batch_id: Some(300),
            input: vec!["{\"a\":1}".into(), "{\"b\":\"é\"}".into(), "{}".into()],
            scopes: vec![shared.clone(), shared, scope(u64::MAX, u64::MAX, None)],
            spans: vec![0..2, 2..2, 2..3],
        };
        let call = call.pack().unpack();

        assert_eq!(call.live, [1, 2, 3]);
        assert_eq!(call.started, started);
        assert_eq!(call.started_at_ms, -5);
        assert_eq!(call.state_ids, [7, 8, u64::MAX]);
        assert_eq!(call.batch_id, Some(300));
        assert_eq!(call.input, ["{\"a\":1}", "{\"b\":\"é\"}", "{}"]);
        assert_eq!(call.spans, [0..2, 2..2, 2..3]);
        let Err(failure) = &call.flows[0].state else {
            panic!("the failed flow passes as it was")
        };
        assert_eq!(failure.error.code, "upstream");
        assert_eq!(call.flows[1].members, [10, 11]);
        assert_eq!(call.flows[1].batch, Some(4));
        assert!(matches!(&call.flows[1].state, Ok(rows) if rows.is_empty()));
        assert_eq!(call.flows[3].members, [u64::MAX]);

        let [first, second, third] = &call.scopes[..] else {
            panic!("one scope per row")
        };
        assert!(
            Arc::ptr_eq(&first.calls, &second.calls),
            "a flow's rows share their counters"
        );
        assert_eq!(first.calls.load(Ordering::Relaxed), 3);
        assert_eq!((first.state_id, first.row_index, first.node_id), (7, 10, 2));
        assert_eq!(first.deadline, Some(deadline));
        assert_eq!(
            (third.state_id, third.row_index, third.deadline),
            (u64::MAX, u64::MAX, None)
        );
    }
}
