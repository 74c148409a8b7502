//! Rows in flight beyond what a node's instances may hold while they wait on
//! the network: each such row waits without its instance, and runs again
//! from the start once its answer is in, taking that answer instead of
//! sending its request a second time.

use crate::common::*;
use rusqlite::Connection;
use std::collections::BTreeSet;
use std::time::Duration;
use weir_test_llm_server::{Reply, Script, TestLlmServer};

#[tokio::test]
async fn rows_beyond_the_nodes_waiting_instances_are_answered_once_and_in_order() {
    // The test LLM server (a test tool, not a model) echoes each prompt
    // after 200 ms, so the pool of 64 fills. The node's budget of 8 MiB
    // holds at most 7 instances of the built-in `llm` component (over 1 MiB
    // each), and lets at most half of it wait on the network.
    let server = TestLlmServer::start(Script {
        reply: Reply::Echo,
        latency: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let rows = 300;
    let p = numbered_rows_pipeline(
        &ws,
        rows,
        "pool_size: 64",
        "limits:\n  node_memory_mb: 8",
        ECHO_OPTIONS,
    );
    let out = run_with_key(&p, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));

    // More requests were in flight than the node's instances could be:
    // rows waited on their answers without one.
    assert!(
        server.peak_in_flight() > 8,
        "peak in flight {}: the rows waited with their instances",
        server.peak_in_flight()
    );
    // Each row's request reached the server once.
    let served = server.served();
    let prompts: BTreeSet<String> = served
        .iter()
        .map(|s| s.body["messages"].to_string())
        .collect();
    assert_eq!(served.len(), rows);
    assert_eq!(prompts.len(), rows, "no prompt sent twice");

    let written = read_csv(&ws.path("out.csv"));
    assert_eq!(written.len(), rows + 1, "a header and every row");
    assert_csv_rows_echoed(&ws);

    let db = Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        count("SELECT count(DISTINCT row_index) FROM row_outcomes WHERE outcome = 'completed'"),
        rows as i64
    );
    assert_eq!(
        count("SELECT count(*) FROM row_outcomes"),
        rows as i64,
        "one terminal outcome per row"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM calls WHERE status = 200 AND replayed = 0 AND cached = 0 \
             AND attempt = 1"
        ),
        rows as i64,
        "one call recorded per row, answered once"
    );
    assert_eq!(
        count("SELECT count(*) FROM calls"),
        rows as i64,
        "no call recorded for the replays"
    );
}
