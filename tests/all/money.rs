//! Prices, budgets and the response cache, end to end: the real `weir`
//! binary against the test LLM server (a test tool, not a model), whose
//! usage counts (words stand in for tokens) are the ground truth.

use crate::common::*;
use weir_test_llm_server::{Reply, Script, TestLlmServer};

const INPUT_PER_MILLION: f64 = 1.5;
const OUTPUT_PER_MILLION: f64 = 6.0;

fn priced(extra: &str) -> String {
    format!(
        "price: {{input_per_million: {INPUT_PER_MILLION}, output_per_million: {OUTPUT_PER_MILLION}}}\n{extra}"
    )
}

/// What the server's answers cost by its own usage counts.
fn server_cost(server: &TestLlmServer) -> f64 {
    server
        .served()
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| {
            let words = |text: &str| text.split_whitespace().count() as f64;
            let prompt: f64 = s.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| words(m["content"].as_str().unwrap_or("")))
                .sum();
            let answer = weir_test_llm_server::expected_answer(Reply::Echo, &s.user_message);
            (prompt * INPUT_PER_MILLION + words(&answer) * OUTPUT_PER_MILLION) / 1e6
        })
        .sum()
}

#[tokio::test]
async fn the_cost_is_the_server_counted_tokens_times_the_price() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 40, &priced(""), "", ECHO_OPTIONS);
    let out = run_with_key(&p, &server.base_url()).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    let expected = server_cost(&server);
    assert!(expected > 0.0);
    let recorded = audit_value::<f64>(&ws, "SELECT sum(cost_usd) FROM calls");
    assert!(
        (recorded - expected).abs() < 1e-12,
        "{recorded} vs {expected}"
    );
    let run = audit_value::<f64>(&ws, "SELECT cost_usd FROM runs");
    assert!((run - expected).abs() < 1e-12);
    let shown =
        format!("cost     ${expected:.6} (endpoint llm ${expected:.6}; node ask ${expected:.6})");
    assert!(summary.contains(&shown), "expected `{shown}` in: {summary}");
    let runs = weir(&["runs", "-p", p.to_str().unwrap()], &[]).await;
    let listed = String::from_utf8_lossy(&runs.stdout);
    assert!(listed.contains(&format!("${expected:.4}")), "{listed}");
}

#[tokio::test]
async fn a_budget_of_half_the_cost_stops_about_half_way_and_a_resume_finishes_exactly() {
    const ROWS: usize = 200;
    // What the whole run costs, from a first run elsewhere.
    let full = {
        let server = TestLlmServer::start(Script::default()).await.unwrap();
        let ws = Workspace::new();
        let p = numbered_rows_pipeline(&ws, ROWS, &priced(""), "", ECHO_OPTIONS);
        assert_eq!(
            run_with_key(&p, &server.base_url()).await.status.code(),
            Some(0)
        );
        server_cost(&server)
    };

    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(ROWS));
    let budget = full / 2.0;
    let p = ws.write(
        "p.yaml",
        &format!(
            "budget_usd: {budget}\n{}",
            pipeline_with("in.csv", "out.csv", &priced(""), "", ECHO_OPTIONS)
        ),
    );
    let out = run_with_key(&p, &server.base_url()).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{summary}");
    assert!(
        summary.contains("stopped  budget: the next call would pass budget_usd"),
        "{summary}"
    );
    assert!(summary.contains("--resume"), "{summary}");
    let sent = server.served().len();
    assert!(
        (ROWS * 35 / 100..=ROWS / 2).contains(&sent),
        "{sent} of {ROWS} rows were sent before the budget stopped the run"
    );
    let spent = server_cost(&server);
    assert!(
        spent <= budget * 1.001,
        "spent {spent} of a budget of {budget}"
    );

    let out = weir(
        &[
            "run",
            p.to_str().unwrap(),
            "--resume",
            "--budget-usd",
            &(full * 1.5).to_string(),
        ],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", &server.base_url()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.served().len(), ROWS, "no request was paid for twice");
    let rows = read_csv(&ws.path("out.csv"));
    let ids: Vec<usize> = rows[1..].iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(ids, (0..ROWS).collect::<Vec<_>>());
    let total = audit_value::<f64>(&ws, "SELECT cost_usd FROM runs");
    assert!((total - full).abs() < 1e-9, "{total} vs {full}");
}

#[tokio::test]
async fn a_second_identical_run_is_answered_from_the_cache_and_writes_the_same_bytes() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(30));
    let options = format!("{ECHO_OPTIONS}      temperature: 0\n");
    let p = ws.write(
        "p.yaml",
        &pipeline_with("in.csv", "out.csv", &priced("cache: true"), "", &options),
    );
    let first = run_with_key(&p, &server.base_url()).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let written = std::fs::read(ws.path("out.csv")).unwrap();
    assert_eq!(server.served().len(), 30);
    let paid = server_cost(&server);

    let second = run_with_key(&p, &server.base_url()).await;
    let summary = stderr(&second);
    assert_eq!(second.status.code(), Some(0), "{summary}");
    assert_eq!(server.served().len(), 30, "the second run sent no request");
    assert_eq!(std::fs::read(ws.path("out.csv")).unwrap(), written);
    let saved = format!("cache    30 answers from the cache, not sent; ${paid:.6} saved");
    assert!(summary.contains(&saved), "expected `{saved}` in: {summary}");
    assert!(!summary.contains("temperature above 0"), "{summary}");
    let cached = audit_value::<f64>(
        &ws,
        "SELECT CAST(sum(cached) AS REAL) FROM calls WHERE run_id = 2",
    );
    assert_eq!(cached, 30.0);

    let stats = weir(&["cache", "stats", "-p", p.to_str().unwrap()], &[]).await;
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(
        text.contains("weir-cache.sqlite: 30 answers (0 of requests with temperature above 0)"),
        "{text}"
    );
    let cleared = weir(&["cache", "clear", "-p", p.to_str().unwrap()], &[]).await;
    assert!(String::from_utf8_lossy(&cleared.stdout).contains("30 answers deleted"));
    let third = run_with_key(&p, &server.base_url()).await;
    assert_eq!(third.status.code(), Some(0));
    assert_eq!(server.served().len(), 60, "a cleared cache answers nothing");
}

#[tokio::test]
async fn only_successful_answers_are_cached() {
    let server = TestLlmServer::start(Script {
        reject_marker: Some("row 3,".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(5));
    let p = ws.write(
        "p.yaml",
        &format!(
            "on_error: discard\n{}",
            pipeline_with("in.csv", "out.csv", "cache: true", "", ECHO_OPTIONS)
        ),
    );
    assert_eq!(
        run_with_key(&p, &server.base_url()).await.status.code(),
        Some(2)
    );
    let again = run_with_key(&p, &server.base_url()).await;
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        server.served().len(),
        6,
        "only the refused request went out again"
    );
    assert!(
        stderr(&again).contains(
            "4 answers from the cache, not sent; 4 of them for requests with temperature above 0"
        ),
        "{}",
        stderr(&again)
    );
}
