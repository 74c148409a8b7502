//! Guests stay in their box: the real `weir` binary runs the chaos guest (a
//! test tool that misbehaves on purpose) and every misbehaving row must fail
//! alone, with an error that names the limit, while the other rows go on.

mod common;

use common::*;
use serde_json::json;
use std::collections::BTreeMap;
use weir_test_llm_server::{Script, TestLlmServer};

const CHAOS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../guests/dist/test-chaos.wasm"
);

fn pipeline(transform: &str) -> String {
    format!(
        "source:\n  path: rows.jsonl\ntransforms:\n  - name: chaos\n    component: {CHAOS}\n\
         {transform}    on_error:\n      path: failed.jsonl\nsinks:\n  - path: out.jsonl\n"
    )
}

/// Source id → error code, of the rows in the `on_error` sink.
fn failures(ws: &Workspace) -> BTreeMap<i64, String> {
    read_jsonl(ws, "failed.jsonl")
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["_error_code"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_guest_past_a_limit_fails_only_that_row_and_the_error_names_the_limit() {
    let ws = Workspace::new();
    let rows = [
        json!({"id": 0}),
        json!({"id": 1, "act": "loop"}),
        json!({"id": 2}),
        json!({"id": 3, "act": "alloc"}),
        json!({"id": 4, "act": "panic"}),
        json!({"id": 5, "act": "big", "size": 3_000_000}),
        json!({"id": 6}),
        json!({"id": 7, "act": "big", "size": 1000}),
    ];
    let source: String = rows.iter().map(|r| format!("{r}\n")).collect();
    ws.write("rows.jsonl", &source);
    let p = ws.write(
        "p.yaml",
        &pipeline(
            "    limits:\n      cpu_ms_per_call: 200\n      memory_mb: 64\n      \
             output_mb_per_row: 1\n",
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let written: Vec<i64> = read_jsonl(&ws, "out.jsonl")
        .iter()
        .map(|r| {
            assert!(r["ok"] == json!(true) || r["ok"].as_str().is_some_and(|s| s.len() == 1000));
            r["id"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(
        written,
        vec![0, 2, 6, 7],
        "the well-behaved rows all came through"
    );
    let failed = failures(&ws);
    assert_eq!(
        failed,
        BTreeMap::from([
            (1, "guest_cpu_limit".to_string()),
            (3, "guest_memory_limit".to_string()),
            (4, "guest_trap".to_string()),
            (5, "guest_output_limit".to_string()),
        ])
    );
    let messages: Vec<String> = read_jsonl(&ws, "failed.jsonl")
        .iter()
        .map(|r| r["_error_message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        messages[0].contains("200 ms of CPU") && messages[0].contains("limits.cpu_ms_per_call")
    );
    assert!(messages[1].contains("64 MiB") && messages[1].contains("limits.memory_mb"));
    assert!(messages[3].contains("limits.output_mb_per_row"));
}

#[tokio::test]
async fn a_node_that_keeps_trapping_is_stopped_when_asked() {
    let ws = Workspace::new();
    let source: String = (0..6)
        .map(|i| format!("{}\n", json!({"id": i, "act": "panic"})))
        .collect();
    ws.write("rows.jsonl", &source);
    let p = ws.write(
        "p.yaml",
        &pipeline("    concurrency: 1\n    limits:\n      stop_after_traps: 2\n"),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let codes: Vec<String> = failures(&ws).into_values().collect();
    assert_eq!(
        codes,
        [
            "guest_trap",
            "guest_trap",
            "node_stopped",
            "node_stopped",
            "node_stopped",
            "node_stopped"
        ]
    );
    let stopped = &read_jsonl(&ws, "failed.jsonl")[2];
    assert!(
        stopped["_error_message"]
            .as_str()
            .unwrap()
            .contains("stopped after 2 calls in a row trapped"),
        "{stopped:?}"
    );
}

#[tokio::test]
async fn limits_are_checked_where_they_are_written() {
    let ws = Workspace::new();
    ws.write("rows.jsonl", "{\"id\": 0}\n");
    let p = ws.write(
        "p.yaml",
        &pipeline("    limits:\n      cpu_ms_per_call: 0\n"),
    );
    let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("p.yaml:7: limits.cpu_ms_per_call must be at least 1"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_guest_cannot_reach_an_endpoint_its_node_was_not_granted() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write(
        "rows.jsonl",
        "{\"id\": 0, \"text\": \"a\"}\n{\"id\": 1, \"text\": \"b\"}\n",
    );
    // Both endpoints exist, but the node is granted `public` only while its
    // options ask for `secret`.
    let p = ws.write(
        "p.yaml",
        &format!(
            "source:\n  path: rows.jsonl\nendpoints:\n  public:\n    base_url: {url}\n    \
             api_key: k1\n  secret:\n    base_url: {url}\n    api_key: k2\ntransforms:\n  \
             - name: ask\n    component: llm\n    endpoints: [public]\n    options:\n      \
             endpoint: secret\n      template: \"{{{{ row.text }}}}\"\nsinks:\n  - path: out.jsonl\n",
            url = server.base_url()
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let summary = stderr(&out);
    assert!(
        summary.contains("endpoint_denied: 2 rows")
            && summary.contains("endpoint `secret` is not granted to node `ask` (granted: public)"),
        "{summary}"
    );
    assert!(server.served().is_empty(), "nothing reached the server");
}
