//! Guest calls run on the guest threads: the real `weir` binary, told to
//! hand every call over (`WEIR_GUEST_THREADS_ABOVE_US=0`), keeps its limits,
//! its output order, its audit trail and its stopping as when calls run on
//! the main thread. The endpoint is the test LLM server, a test tool, not a
//! model.

use crate::common::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use weir_test_llm_server::{Reply, Script, TestLlmServer};

/// Two threads for guest code (the main one and a guest thread), every
/// call handed to the guest thread, and the log line that counts those
/// calls.
const ON_GUEST_THREADS: [(&str, &str); 3] = [
    ("WEIR_THREADS", "2"),
    ("WEIR_GUEST_THREADS_ABOVE_US", "0"),
    ("WEIR_LOG", "info"),
];

/// The calls the run's log says node `node` ran on the guest threads.
fn calls_on_guest_threads(out: &std::process::Output, node: &str) -> u64 {
    let log = stderr(out);
    let line = log
        .lines()
        .find(|l| l.contains(&format!("node `{node}`: its guest held a thread")))
        .unwrap_or_else(|| panic!("no guest time line for `{node}`: {log}"));
    let (_, after) = line.split_once("(recent mean); ").unwrap();
    after.split_whitespace().next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn limits_hold_on_the_guest_threads_and_each_failing_row_fails_alone() {
    let ws = Workspace::new();
    let rows = [
        json!({"id": 0}),
        json!({"id": 1, "act": "loop"}),
        json!({"id": 2}),
        json!({"id": 3, "act": "alloc"}),
        json!({"id": 4, "act": "panic"}),
        json!({"id": 5}),
    ];
    let source: String = rows.iter().map(|r| format!("{r}\n")).collect();
    ws.write("rows.jsonl", &source);
    let p = ws.write(
        "p.yaml",
        &format!(
            "source:\n  path: rows.jsonl\ntransforms:\n  - name: chaos\n    component: {CHAOS}\n    \
             limits:\n      cpu_ms_per_call: 200\n      memory_mb: 64\n    on_error:\n      \
             path: failed.jsonl\nsinks:\n  - path: out.jsonl\n"
        ),
    );
    let out = weir(
        &["run", p.to_str().unwrap(), "--no-progress"],
        &ON_GUEST_THREADS,
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let written: Vec<i64> = read_jsonl(&ws, "out.jsonl")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(written, vec![0, 2, 5]);
    assert_eq!(calls_on_guest_threads(&out, "chaos"), 6);
    assert_eq!(
        failures(&ws),
        BTreeMap::from([
            (1, "guest_cpu_limit".to_string()),
            (3, "guest_memory_limit".to_string()),
            (4, "guest_trap".to_string()),
        ]),
        "the CPU limit's epoch ticks reach a guest on another thread"
    );
}

#[tokio::test]
async fn rows_answered_out_of_order_on_the_guest_threads_are_written_in_source_order() {
    // The rows whose id ends in 1 are answered late, after rows behind them.
    let server = TestLlmServer::start(Script {
        reply: Reply::Echo,
        slow_marker: Some(("1, with".into(), Duration::from_millis(80))),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 400, "pool_size: 32", "", ECHO_OPTIONS);
    let mut env = ON_GUEST_THREADS.to_vec();
    let base_url = server.base_url();
    env.extend([("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", &base_url)]);
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = read_csv(&ws.path("out.csv"));
    let ids: Vec<usize> = rows[1..].iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(ids, (0..400).collect::<Vec<_>>());
    assert_csv_rows_echoed(&ws);
    assert_eq!(
        audit_value::<i64>(
            &ws,
            "SELECT count(*) FROM row_outcomes WHERE outcome = 'completed'"
        ),
        400
    );
    assert_eq!(server.served().len(), 400, "one request per row");
    assert_eq!(calls_on_guest_threads(&out, "ask"), 400);
}

#[tokio::test]
async fn sigint_on_the_guest_threads_ends_resumable_and_a_resume_finishes_every_row_once() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Echo,
        latency: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .unwrap();
    // 4 s of answers, 4 at a time; the signal comes after 12.
    let row_count = 80;
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, row_count, "pool_size: 4", "", ECHO_OPTIONS);
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", p.to_str().unwrap(), "--no-progress"])
        .envs(ON_GUEST_THREADS)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", server.base_url())
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_served(&server, 12).await;
    send_signal(&child, "INT");
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        server.served().len() < row_count,
        "the run went on after the signal"
    );

    let mut env = ON_GUEST_THREADS.to_vec();
    let base_url = server.base_url();
    env.extend([("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", &base_url)]);
    let out = weir(&["run", p.to_str().unwrap(), "--resume"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = read_csv(&ws.path("out.csv"));
    let ids: Vec<usize> = rows[1..].iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(ids, (0..row_count).collect::<Vec<_>>());
    assert_csv_rows_echoed(&ws);
    assert_eq!(
        server.served().len(),
        row_count,
        "no request was sent twice"
    );
}

#[tokio::test]
async fn a_run_stopped_at_once_waits_for_the_calls_cancelled_on_the_guest_threads() {
    // Every call on the guest thread and still waiting on its answer when
    // the 401s stop the run: the run ends as it would with calls on the
    // main thread, its audit trail closed rather than "still in use".
    let server = TestLlmServer::start(Script {
        require_key: Some("the-right-key".into()),
        latency: Duration::from_millis(50),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 500, "pool_size: 32", "", ECHO_OPTIONS);
    let base_url = server.base_url();
    let mut env = ON_GUEST_THREADS.to_vec();
    env.extend([("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", &base_url)]);
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &env).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("endpoint `llm` refused the run's requests: HTTP 401"),
        "{message}"
    );
    assert!(!message.contains("still in use"), "{message}");
    assert_eq!(run_status(&ws), "interrupted");
}
