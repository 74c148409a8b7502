//! Row semantics end to end: multi-query, bundles, batches and `on_error`
//! sinks, run by the real `weir` binary against the test LLM server (a test
//! tool, not a model) with injected failures. Every source row must come out
//! exactly once, with its own answers or an error.

use crate::common::*;
use proptest::prelude::*;
use rusqlite::Connection;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use weir_test_llm_server::structured::derived_value;
use weir_test_llm_server::{Reply, Script, TestLlmServer};

fn texts(n: usize) -> Vec<String> {
    // Lengths vary so derived values differ from row to row.
    (0..n)
        .map(|i| format!("review {i}{}", "!".repeat(i % 7)))
        .collect()
}

fn jsonl_rows(texts: &[String]) -> String {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{}\n", json!({"id": i, "text": t})))
        .collect()
}

/// The source ids found in the sink and the `on_error` sink together, sorted:
/// each exactly once means no row was lost or doubled.
fn ids(written: &[Map<String, Value>], failed: &[Map<String, Value>]) -> Vec<i64> {
    let mut ids: Vec<i64> = written
        .iter()
        .chain(failed)
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    ids
}

fn pipeline(node: &str) -> String {
    format!(
        "source:\n  path: rows.jsonl\nendpoints:\n  llm:\n    base_url: ${{OPENAI_BASE_URL}}\n    \
         api_key: ${{OPENAI_API_KEY}}\n    pool_size: 8\n    max_retries: 0\n\
         transforms:\n  - name: ask\n    component: llm\n    endpoints: [llm]\n{node}\
         sinks:\n  - path: out.jsonl\n"
    )
}

fn outcomes(ws: &Workspace) -> BTreeMap<String, i64> {
    audit_pairs(
        ws,
        "SELECT outcome, count(*) FROM row_outcomes GROUP BY outcome",
    )
}

#[tokio::test]
async fn a_row_gets_all_its_queries_answers_or_fails_naming_the_failed_ones() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        decorate: true,
        // Refuses the `tone` query of the poisoned rows only.
        reject_marker: Some("tone POISON".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let mut rows = texts(12);
    rows[4] = "POISON in row 4".into();
    rows[9] = "POISON again".into();
    ws.write("rows.jsonl", &jsonl_rows(&rows));
    let node = "    options:\n      response_format: json_schema\n      queries:\n\
        \x20       tone:\n          template: \"tone {{ row.text }}\"\n\
        \x20         outputs: {tone: {enum: [calm, angry, mixed]}}\n\
        \x20       length:\n          template: \"{{ t }}\"\n          inputs: {t: text}\n\
        \x20         outputs: {length: integer, loud: boolean}\n\
        \x20   on_error: {path: failed.jsonl}\n";
    let pipeline = ws.write("p.yaml", &pipeline(node));
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert_finished(&out);

    let written = read_jsonl(&ws, "out.jsonl");
    let failed = read_jsonl(&ws, "failed.jsonl");
    assert_exit_counts_set_aside(&out, failed.len());
    assert_eq!(
        (written.len(), failed.len()),
        (10, 2),
        "{:?}",
        failed.first()
    );
    let schema_tone = json!({"enum": ["calm", "angry", "mixed"]});
    for row in &written {
        let text = row["text"].as_str().unwrap();
        assert_eq!(
            row["tone"],
            derived_value(&schema_tone, &format!("tone {text}"))
        );
        assert_eq!(row["length"], json!(text.chars().count()));
        assert_eq!(row["loud"], json!(text.chars().count().is_multiple_of(2)));
    }
    for row in &failed {
        assert!(row["text"].as_str().unwrap().contains("POISON"));
        assert_eq!(row["_error_node"], "ask");
        let message = row["_error_message"].as_str().unwrap();
        assert!(
            message.contains("1 of 2 queries failed, 1 answers discarded")
                && message.contains("tone: HTTP 400"),
            "{message}"
        );
        assert!(row.get("length").is_none(), "no half answers: {row:?}");
    }
    let counts = outcomes(&ws);
    assert_eq!(counts.get("completed"), Some(&10));
    assert_eq!(counts.get("quarantined"), Some(&2));
    assert!(
        stderr(&out).contains("10 ok, 0 failed, 2 quarantined"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn bundles_never_misattribute_and_misses_are_asked_again() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        bundle_fault_rate: 0.3,
        ..Script::default()
    })
    .await
    .unwrap();
    for retry in [false, true] {
        let ws = Workspace::new();
        let rows = texts(40);
        ws.write("rows.jsonl", &jsonl_rows(&rows));
        let node = format!(
            "    batch: {{count: 8}}\n    options:\n      template: \"{{{{ row.text }}}}\"\n\
             \x20     response_format: json_schema\n      outputs: {{n: integer}}\n\
             \x20     bundle_size: 4\n      bundle_retry_individually: {retry}\n\
             \x20   on_error: {{path: failed.jsonl}}\n"
        );
        let pipeline = ws.write("p.yaml", &pipeline(&node));
        let out = run_with_key(&pipeline, &server.base_url()).await;
        assert_finished(&out);
        let written = read_jsonl(&ws, "out.jsonl");
        let failed = read_jsonl(&ws, "failed.jsonl");
        assert_exit_counts_set_aside(&out, failed.len());
        assert_eq!(
            ids(&written, &failed),
            (0..40).collect::<Vec<_>>(),
            "every row exactly once"
        );
        for row in &written {
            assert_eq!(
                row["n"],
                json!(row["text"].as_str().unwrap().chars().count())
            );
        }
        if retry {
            assert!(failed.is_empty(), "misses were asked again: {failed:?}");
        } else {
            assert!(!failed.is_empty(), "30 % of entries were damaged");
            for row in &failed {
                let code = row["_error_code"].as_str().unwrap();
                assert!(
                    code == "bundle_answer_missing" || code == "bundle_answer_ambiguous",
                    "{code}"
                );
            }
        }
    }
    // Bundles of 4: 10 requests for 40 rows before any retry.
    assert!(
        server.served().len() < 40,
        "{} requests",
        server.served().len()
    );
}

#[tokio::test]
async fn a_transform_batch_makes_one_row_and_accounts_for_every_member() {
    let server = server_replying(Reply::Structured).await;
    let ws = Workspace::new();
    ws.write("rows.jsonl", &jsonl_rows(&texts(12)));
    let node = "    batch: {count: 5, mode: transform}\n    options:\n\
        \x20     batch_template: \"{% for r in rows %}{{ r.text }}|{% endfor %}\"\n\
        \x20     response_format: json_schema\n      outputs: {summary: string}\n";
    let pipeline = ws.write("p.yaml", &pipeline(node));
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let written = read_jsonl(&ws, "out.jsonl");
    assert_eq!(
        written.len(),
        3,
        "batches of 5, 5 and 2 (flushed at the end)"
    );
    let all = texts(12);
    assert_eq!(
        written[2]["summary"],
        json!(format!("echo: {}|{}|", all[10], all[11]))
    );
    assert_eq!(outcomes(&ws).get("consumed_in_batch"), Some(&12));
    let db = Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let members: i64 = db
        .query_row("SELECT count(*) FROM batch_members", [], |r| r.get(0))
        .unwrap();
    assert_eq!(members, 12);
}

#[tokio::test]
async fn a_failing_batch_still_gives_every_member_an_outcome() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        reject_marker: Some("review 3".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("rows.jsonl", &jsonl_rows(&texts(8)));
    let node = "    batch: {count: 4, mode: transform}\n    options:\n\
        \x20     batch_template: \"{% for r in rows %}{{ r.text }}|{% endfor %}\"\n\
        \x20     response_format: json_schema\n      outputs: {summary: string}\n\
        \x20   on_error: discard\n";
    let pipeline = ws.write("p.yaml", &pipeline(node));
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "rows were discarded: {}",
        stderr(&out)
    );
    let counts = outcomes(&ws);
    assert_eq!(counts.get("discarded"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("consumed_in_batch"), Some(&4), "{counts:?}");
    assert_eq!(read_jsonl(&ws, "out.jsonl").len(), 1);
}

#[tokio::test]
async fn a_batch_timeout_fires_while_the_source_is_idle() {
    let server = server_replying(Reply::Echo).await;
    let ws = Workspace::new();
    let fifo = ws.path("rows.jsonl");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let node = "    batch: {count: 100, timeout_seconds: 0.2}\n    options:\n\
        \x20     template: \"{{ row.text }}\"\n";
    let pipeline = ws.write("p.yaml", &pipeline(node));
    let run = tokio::spawn({
        let pipeline = pipeline.clone();
        let base = server.base_url();
        async move {
            weir(
                &["run", "--no-progress", pipeline.to_str().unwrap()],
                &[("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", &base)],
            )
            .await
        }
    });
    // Opened read-write, a pipe opens at once even if weir never reads it.
    let mut held_open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    std::io::Write::write_all(&mut held_open, jsonl_rows(&texts(3)).as_bytes()).unwrap();
    // The source stays open and idle; the partial batch must go anyway.
    let mut waited = 0;
    while server.served().len() < 3 && waited < 50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    assert_eq!(
        server.served().len(),
        3,
        "the batch of 3 went out while the source was idle"
    );
    drop(held_open);
    let out = run.await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_jsonl(&ws, "out.jsonl").len(), 3);
}

#[tokio::test]
async fn output_fields_that_collide_are_refused_at_validation() {
    let ws = Workspace::new();
    ws.write("rows.csv", "id,text,tone\n1,a,b\n");
    let node = "    options:\n      template: \"{{ row.text }}\"\n      outputs: {tone: string}\n";
    let yaml = pipeline(node).replace("rows.jsonl", "rows.csv");
    let pipeline = ws.write("p.yaml", &yaml);
    let out = weir(
        &["validate", pipeline.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9"),
        ],
    )
    .await;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("p.yaml:13:")
            && err.contains("writes the field `tone`, which its input rows already have"),
        "{err}"
    );
}

/// One random case: rows, queries, bundle size and failures.
#[derive(Debug, Clone)]
struct Case {
    rows: usize,
    queries: usize,
    bundle: usize,
    bundle_fault_rate: f64,
    invalid_rate: f64,
    poisoned: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..30, 1usize..4, 1usize..5, 0.0..0.4f64, 0.0..0.3f64).prop_flat_map(
        |(rows, queries, bundle, faults, invalid)| {
            proptest::collection::vec(0..rows, 0..3).prop_map(move |poisoned| Case {
                rows,
                queries,
                bundle,
                bundle_fault_rate: faults,
                invalid_rate: invalid,
                poisoned,
            })
        },
    )
}

async fn check(case: Case) -> Result<(), TestCaseError> {
    let server = TestLlmServer::start(Script {
        reply: Reply::Structured,
        bundle_fault_rate: case.bundle_fault_rate,
        invalid_rate: case.invalid_rate,
        reject_marker: Some("POISON".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let mut rows = texts(case.rows);
    for &p in &case.poisoned {
        rows[p] = format!("POISON {p}");
    }
    ws.write("rows.jsonl", &jsonl_rows(&rows));
    let mut queries = String::new();
    for q in 0..case.queries {
        queries.push_str(&format!(
            "        q{q}:\n          template: \"{q} {{{{ row.text }}}}\"\n\
             \x20         outputs: {{n{q}: integer}}\n"
        ));
    }
    let node = format!(
        "    batch: {{count: 6, timeout_seconds: 1}}\n    options:\n      response_format: json_schema\n\
         \x20     bundle_size: {}\n      queries:\n{queries}    on_error: {{path: failed.jsonl}}\n",
        case.bundle
    );
    let pipeline = ws.write("p.yaml", &pipeline(&node));
    let out = run_with_key(&pipeline, &server.base_url()).await;
    prop_assert!(matches!(out.status.code(), Some(0 | 2)), "{}", stderr(&out));
    let written = read_jsonl(&ws, "out.jsonl");
    let failed = read_jsonl(&ws, "failed.jsonl");
    prop_assert_eq!(
        out.status.code(),
        Some(if failed.is_empty() { 0 } else { 2 })
    );
    prop_assert_eq!(
        ids(&written, &failed),
        (0..case.rows as i64).collect::<Vec<_>>()
    );
    for row in &written {
        let text = row["text"].as_str().unwrap();
        for q in 0..case.queries {
            let input = format!("{q} {text}");
            prop_assert_eq!(&row[&format!("n{q}")], &json!(input.chars().count()));
        }
    }
    for row in &failed {
        prop_assert!(row["_error_code"].is_string());
    }
    for &p in &case.poisoned {
        prop_assert!(failed.iter().any(|r| r["id"] == json!(p)));
    }
    let counts = outcomes(&ws);
    let total: i64 = counts.values().sum();
    prop_assert_eq!(total, case.rows as i64, "one terminal outcome per row");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// For random row counts, query counts, bundle sizes and failure patterns,
    /// every input row comes out exactly once, with its own answers or an error.
    #[test]
    fn every_row_comes_out_once_with_its_own_answers_or_an_error(case in case()) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(check(case))?;
    }
}

#[tokio::test]
async fn a_slow_row_does_not_hold_back_the_rows_behind_it_and_output_keeps_order() {
    // Row 0's answer takes 2 s; the others' none. Two rows in flight at most.
    let server = TestLlmServer::start(Script {
        slow_marker: Some(("Q0:".into(), std::time::Duration::from_secs(2))),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let pipeline = numbered_rows_pipeline(
        &ws,
        30,
        "pool_size: 2\nadaptive_concurrency: false",
        "concurrency: 2",
        ECHO_OPTIONS,
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));

    // Every other row was answered while row 0 waited: with the window tied
    // to `concurrency`, only row 1 could have been.
    let answered: Vec<String> = server
        .served()
        .iter()
        .map(|s| s.user_message.clone())
        .collect();
    assert_eq!(answered.len(), 30);
    assert!(
        answered[29].starts_with("Q0:"),
        "row 0 should be answered last: {answered:?}"
    );
    let written = read_csv(&ws.path("out.csv"));
    let ids: Vec<&str> = written[1..].iter().map(|r| &r[0]).collect();
    let expected: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    assert_eq!(ids, expected, "the sink keeps source order");
}
