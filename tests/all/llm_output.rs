//! The built-in `llm` node's output contract: the response format it asks
//! for, falling back from `json_schema` where a server refuses it, and the
//! instruction its prompt carries where no schema is enforced. The real
//! `weir` binary runs the real component against the test LLM server (a
//! test tool, not a model) over loopback, auditing to a real SQLite file.

use crate::common::*;
use rusqlite::Connection;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use weir_test_llm_server::structured::derived_value;
use weir_test_llm_server::{Reply, Script, TestLlmServer};

const OUTPUTS: &str = "outputs: {label: {enum: [positive, negative, neutral]}, length: integer}\n";

/// A one-node pipeline as a local server wants it: one request at a time.
fn local_pipeline(url: &str, node: &str, options: &str) -> String {
    let indent = |text: &str| -> String { text.lines().map(|l| format!("      {l}\n")).collect() };
    format!(
        "source:\n  path: in.csv\nendpoints:\n  local:\n    base_url: {url}\n    api_key: none\n    \
         pool_size: 1\n    adaptive_concurrency: false\ntransforms:\n  - name: ask\n    \
         component: llm\n    endpoints: [local]\n{node}    options:\n{}sinks:\n  - path: out.jsonl\n",
        indent(options)
    )
}

/// What a model following the outputs' schema answers for `message`.
fn expected(message: &str) -> (Value, Value) {
    let labels = json!({"enum": ["positive", "negative", "neutral"]});
    (
        derived_value(&labels, message),
        derived_value(&json!({"type": "integer"}), message),
    )
}

fn check_rows(ws: &Workspace, n: usize) {
    let written = read_jsonl(ws, "out.jsonl");
    assert_eq!(written.len(), n);
    for row in &written {
        let message = format!("Review: {}", row["text"].as_str().unwrap());
        let (label, length) = expected(&message);
        assert_eq!(
            (&row["label"], &row["length"]),
            (&label, &length),
            "{row:?}"
        );
    }
}

/// A workspace with `rows` reviews and `local_pipeline(url, node, options)`,
/// run once.
async fn run_local(
    rows: usize,
    url: &str,
    node: &str,
    options: &str,
) -> (Workspace, std::process::Output) {
    let ws = Workspace::new();
    ws.write("in.csv", &reviews(rows));
    let p = ws.write("p.yaml", &local_pipeline(url, node, options));
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    (ws, out)
}

fn reviews(n: usize) -> String {
    let mut csv = String::from("id,text\n");
    for i in 0..n {
        csv.push_str(&format!("{i},review number {i}{}\n", "!".repeat(i)));
    }
    csv
}

/// The test LLM server (a test tool) answering JSON as a schema asks, and
/// refusing `json_schema` with HTTP 500 as llama.cpp's server does.
async fn refusing_json_schema() -> TestLlmServer {
    TestLlmServer::start(Script {
        reply: Reply::Structured,
        refuse_json_schema: true,
        ..Script::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn auto_falls_back_to_json_object_at_once_when_the_server_refuses_json_schema() {
    let server = refusing_json_schema().await;
    let ws = Workspace::new();
    ws.write("in.csv", &reviews(5));
    let p = ws.write(
        "p.yaml",
        &local_pipeline(
            &server.base_url(),
            "    concurrency: 1\n",
            &format!("template: \"Review: {{{{ row.text }}}}\"\n{OUTPUTS}"),
        ),
    );
    let started = Instant::now();
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("endpoint `local` refused response_format json_schema"),
        "{}",
        stderr(&out)
    );
    check_rows(&ws, 5);
    let served = server.served();
    let formats: Vec<(u16, String)> = served
        .iter()
        .map(|s| {
            let format = s.body["response_format"]["type"].as_str().unwrap_or("none");
            (s.status, format.to_string())
        })
        .collect();
    let mut expected = vec![(500, "json_schema".to_string())];
    expected.extend(vec![(200, "json_object".to_string()); 5]);
    assert_eq!(
        formats, expected,
        "one refusal, never retried, then json_object"
    );
    for s in &served[1..] {
        assert!(
            s.user_message
                .contains("- label: one of: positive, negative, neutral\n- length: integer"),
            "{}",
            s.user_message
        );
    }
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let calls: Vec<(i64, String)> = audit_pairs(
        &ws,
        "SELECT status, coalesce(retry_cause, '-') FROM calls ORDER BY started_at_ms, row_index, call_index",
    );
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert_eq!(
        calls[0],
        (500, "-".to_string()),
        "the refusal was not retried"
    );
}

#[tokio::test]
async fn rows_in_flight_together_learn_of_the_refusal_from_the_endpoint() {
    let server = refusing_json_schema().await;
    let (ws, out) = run_local(
        12,
        &server.base_url(),
        "",
        &format!("template: \"Review: {{{{ row.text }}}}\"\nresponse_format: auto\n{OUTPUTS}"),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_rows(&ws, 12);
    let served = server.served();
    let refused = served.iter().filter(|s| s.status == 500).count();
    let schema_asked = served
        .iter()
        .filter(|s| s.body["response_format"]["type"] == "json_schema")
        .count();
    assert_eq!(
        refused, schema_asked,
        "every schema request was refused once, never retried"
    );
    assert_eq!(served.len(), 12 + refused);
    // Requests answered by the kept refusal never reached the endpoint.
    let summary = stderr(&out);
    assert!(
        summary.contains(&format!("endpoint local: {} requests,", served.len())),
        "{summary}"
    );
    assert!(
        refused < 12,
        "later rows asked for json_object at once: {refused} refusals"
    );
}

#[tokio::test]
async fn an_explicit_json_schema_fails_its_rows_at_once_on_a_server_that_refuses_it() {
    let server = refusing_json_schema().await;
    let (_ws, out) = run_local(
        3,
        &server.base_url(),
        "    concurrency: 1\n",
        &format!(
            "template: \"Review: {{{{ row.text }}}}\"\nresponse_format: json_schema\n{OUTPUTS}"
        ),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("llm_call_failed: 3 rows; first: row 0 at node `ask`: HTTP 500: Unsupported response_format type 'json_schema'"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        server.served().len(),
        1,
        "the endpoint's refusal is remembered"
    );
}

#[tokio::test]
async fn without_an_enforced_schema_the_prompt_names_the_fields() {
    let server = server_replying(Reply::Structured).await;
    let ws = Workspace::new();
    ws.write("in.csv", &reviews(3));
    for (format, sent) in [
        ("none", Value::Null),
        ("json_object", json!({"type": "json_object"})),
    ] {
        let p = ws.write(
            "p.yaml",
            &local_pipeline(
                &server.base_url(),
                "",
                &format!(
                    "template: \"Review: {{{{ row.text }}}}\"\nresponse_format: {format}\n{OUTPUTS}"
                ),
            ),
        );
        let before = server.served().len();
        let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
        assert_eq!(out.status.code(), Some(0), "{format}: {}", stderr(&out));
        check_rows(&ws, 3);
        for s in &server.served()[before..] {
            assert_eq!(s.body["response_format"], sent, "{format}");
            assert!(
                s.user_message.contains("Answer with only a JSON object"),
                "{}",
                s.user_message
            );
            assert!(
                s.user_message.contains("- length: integer"),
                "{}",
                s.user_message
            );
        }
    }
}

#[tokio::test]
async fn json_schema_requests_carry_strict_as_set() {
    let server = server_replying(Reply::Structured).await;
    let (ws, out) = run_local(
        2,
        &server.base_url(),
        "",
        &format!("template: \"Review: {{{{ row.text }}}}\"\nstrict: false\n{OUTPUTS}"),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_rows(&ws, 2);
    for s in server.served() {
        let format = &s.body["response_format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["strict"], false);
        assert!(
            !s.user_message.contains("JSON Schema"),
            "the schema is enforced: {}",
            s.user_message
        );
    }
}

/// A structured server that gets the first field's type wrong in half its
/// answers, chosen by a hash of the request's sequence number.
async fn sloppy_server() -> TestLlmServer {
    TestLlmServer::start(Script {
        reply: Reply::Structured,
        invalid_rate: 0.5,
        ..Script::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_wrong_answer_is_asked_again_with_the_error_and_every_attempt_is_audited() {
    let server = sloppy_server().await;
    let (ws, out) = run_local(
        8,
        &server.base_url(),
        "    concurrency: 1\n",
        &format!("template: \"Review: {{{{ row.text }}}}\"\nreask: 4\n{OUTPUTS}"),
    )
    .await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    check_rows(&ws, 8);
    let served = server.served();
    let reasks = served.len() - 8;
    assert!(reasks > 0, "the server answered some rows wrongly first");
    assert!(
        summary.contains(&format!("counted  node ask: reasks {reasks}")),
        "{summary}"
    );
    let followed: Vec<_> = served
        .iter()
        .filter(|s| s.body["messages"].as_array().unwrap().len() > 1)
        .collect();
    assert_eq!(followed.len(), reasks);
    for s in followed {
        let messages = s.body["messages"].as_array().unwrap();
        let wrong = messages[messages.len() - 2]["content"].as_str().unwrap();
        assert_eq!(messages[messages.len() - 2]["role"], "assistant");
        assert!(
            wrong.contains("12345") || wrong.contains("not the declared type"),
            "{wrong}"
        );
        let told = messages[messages.len() - 1]["content"].as_str().unwrap();
        assert!(told.starts_with("That answer cannot be used: `"), "{told}");
        assert!(
            told.contains("label (one of: positive, negative, neutral), length (integer)"),
            "{told}"
        );
    }
    let db = Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let calls: i64 = db
        .query_row("SELECT count(*) FROM calls WHERE status = 200", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(
        calls as usize,
        served.len(),
        "every attempt is an audited call"
    );
}

#[tokio::test]
async fn without_reask_a_wrong_answer_fails_its_row_after_one_call() {
    let server = sloppy_server().await;
    let (_ws, out) = run_local(
        8,
        &server.base_url(),
        "    concurrency: 1\n",
        &format!("template: \"Review: {{{{ row.text }}}}\"\n{OUTPUTS}"),
    )
    .await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{summary}");
    assert_eq!(server.served().len(), 8);
    assert!(summary.contains("response_invalid: "), "{summary}");
    assert!(!summary.contains("counted"), "{summary}");
}

const BUNDLED: &str = "    batch: {count: 4}\n";

fn bundle_options() -> String {
    format!(
        "template: \"Review: {{{{ row.text }}}}\"\nbundle_size: 4\nbundle_retry_individually: true\n{OUTPUTS}"
    )
}

#[tokio::test]
async fn a_failed_bundle_call_is_retried_as_a_bundle_and_no_row_is_asked_alone() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        faults_first: 2,
        // A 502: a 500 before any schema was accepted would be taken as a
        // refusal of json_schema.
        fault_kinds: vec![weir_test_llm_server::Fault::Status(502)],
        ..Script::default()
    })
    .await
    .unwrap();
    let (ws, out) = run_local(4, &server.base_url(), BUNDLED, &bundle_options()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_rows(&ws, 4);
    let served = server.served();
    let statuses: Vec<u16> = served.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [502, 502, 200],
        "the bundle, retried by the executor"
    );
    for s in &served {
        assert!(
            s.user_message.contains("Answer each of the 4 items"),
            "{}",
            s.user_message
        );
    }
}

#[tokio::test]
async fn rows_a_bundled_answer_missed_are_asked_alone_with_the_fields_named() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        bundle_fault_rate: 0.5,
        ..Script::default()
    })
    .await
    .unwrap();
    let (ws, out) = run_local(8, &server.base_url(), BUNDLED, &bundle_options()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_rows(&ws, 8);
    let served = server.served();
    let singles: Vec<_> = served
        .iter()
        .filter(|s| !s.user_message.contains("Answer each of"))
        .collect();
    assert_eq!(served.len() - singles.len(), 2, "two bundles of four");
    assert!(!singles.is_empty(), "half the entries were damaged");
    for s in singles {
        assert!(
            s.user_message.starts_with("Review: ")
                && s.user_message
                    .contains("- label: one of: positive, negative, neutral\n- length: integer"),
            "{}",
            s.user_message
        );
    }
}

#[tokio::test]
async fn an_anthropic_endpoint_is_told_the_schema_in_the_prompt() {
    let server = server_replying(Reply::Structured).await;
    let ws = Workspace::new();
    ws.write("in.csv", &reviews(3));
    let p = ws.write(
        "p.yaml",
        &format!(
            "source:\n  path: in.csv\nendpoints:\n  claude:\n    kind: anthropic\n    \
             base_url: {}\n    api_key: {KEY}\ntransforms:\n  - name: ask\n    component: llm\n    \
             endpoints: [claude]\n    options:\n      model: claude-haiku-4-5\n      \
             template: \"Review: {{{{ row.text }}}}\"\n      {OUTPUTS}sinks:\n  - path: out.jsonl\n",
            server.root_url()
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_rows(&ws, 3);
    for s in server.served() {
        assert_eq!(s.path, "/v1/messages");
        assert_eq!(s.body.get("response_format"), None);
        let prompt = s.body["messages"][0]["content"].as_str().unwrap();
        assert!(
            prompt.contains("\n\nAnswer with only a JSON object, no other text.\nJSON Schema: {"),
            "{prompt}"
        );
    }
}

#[tokio::test]
async fn a_cut_json_answer_is_asked_once_more_with_a_larger_max_tokens_when_allowed() {
    // The test LLM server (a test tool) cuts answers at `max_tokens`.
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        cut_at_max_tokens: true,
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &reviews(3));
    let options = format!(
        "template: \"Review: {{{{ row.text }}}}\"\nresponse_format: json_schema\nmax_tokens: 2\n{OUTPUTS}"
    );
    let allowed = ws.write(
        "allowed.yaml",
        &local_pipeline(
            &server.base_url(),
            "",
            &format!("{options}truncated_max_tokens: 64\n"),
        ),
    );
    let out = weir(&["run", allowed.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_rows(&ws, 3);
    let limits: Vec<u64> = server
        .served()
        .iter()
        .map(|s| s.body["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(limits.iter().filter(|&&l| l == 2).count(), 3, "{limits:?}");
    assert_eq!(limits.iter().filter(|&&l| l == 64).count(), 3, "{limits:?}");

    // Without it, a cut JSON answer fails its row after one call.
    std::fs::remove_file(ws.path("out.jsonl")).ok();
    let refused = ws.write(
        "refused.yaml",
        &local_pipeline(&server.base_url(), "", &options)
            .replace("sinks:", "    on_error:\n      path: failed.jsonl\nsinks:"),
    );
    let before = server.served().len();
    let out = weir(&["run", refused.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(server.served().len() - before, 3);
    let failed = read_jsonl(&ws, "failed.jsonl");
    assert_eq!(failed.len(), 3);
    assert!(
        failed
            .iter()
            .all(|r| r["_error_code"] == "response_truncated"),
        "{failed:?}"
    );
}
