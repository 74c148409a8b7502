//! Batch API mode end to end: the real `weir` binary against the test LLM
//! server's batch routes (a test tool, not a provider) for OpenAI, Azure
//! OpenAI and Anthropic, with a real audit database: every row answered
//! once and with its own answer, nothing sent online, kills at any moment
//! followed by a resume that submits nothing twice.

use crate::common::*;
use rusqlite::Connection;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use weir_test_llm_server::{Fault, Script, TestLlmServer};

#[derive(Clone, Copy, Debug)]
enum Provider {
    OpenAi,
    Azure,
    Anthropic,
}

/// A one-node `llm` pipeline whose endpoint is in batch mode.
fn batch_pipeline(provider: Provider, root_url: &str, extra: &str) -> String {
    let endpoint = match provider {
        Provider::OpenAi => format!("kind: openai\n    base_url: {root_url}/v1"),
        Provider::Azure => format!(
            "kind: azure-openai\n    base_url: {root_url}\n    deployment: gpt4o-batch\n    \
             api_version: 2024-10-21"
        ),
        Provider::Anthropic => format!("kind: anthropic\n    base_url: {root_url}"),
    };
    format!(
        "source:\n  path: in.csv\nendpoints:\n  llm:\n    {endpoint}\n    api_key: ${{OPENAI_API_KEY}}\n    \
         mode: batch\n    batch_poll_seconds: 0.1\n{extra}transforms:\n  - name: ask\n    \
         component: llm\n    endpoints: [llm]\n    options:\n{ECHO_OPTIONS}sinks:\n  - path: out.jsonl\n"
    )
}

/// The test LLM server (a test tool) following `script`, and a workspace
/// holding `rows` numbered rows and a batch-mode pipeline against it.
async fn batch_workspace(
    script: Script,
    provider: Provider,
    rows: usize,
    extra: &str,
) -> (TestLlmServer, Workspace) {
    let server = TestLlmServer::start(script).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(rows));
    ws.write(
        "p.yaml",
        &batch_pipeline(provider, &server.root_url(), extra),
    );
    (server, ws)
}

async fn run(ws: &Workspace, args: &[&str]) -> std::process::Output {
    let pipeline = ws.path("p.yaml");
    let mut all = vec!["run", pipeline.to_str().unwrap()];
    all.extend(args);
    weir(&all, &[("OPENAI_API_KEY", KEY)]).await
}

fn assert_rows_answered(ws: &Workspace, rows: usize) {
    let out = read_jsonl(ws, "out.jsonl");
    assert_eq!(out.len(), rows);
    for (i, row) in out.iter().enumerate() {
        assert_eq!(
            row["llm_response"],
            echo_of(i),
            "row {i} has its own answer"
        );
    }
}

fn audit(ws: &Workspace) -> Connection {
    Connection::open(ws.path("weir-audit.sqlite")).unwrap()
}

fn count(ws: &Workspace, sql: &str) -> i64 {
    audit(ws).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// No custom_id went into two batches, and none repeats within one.
fn assert_nothing_submitted_twice(server: &TestLlmServer) {
    let mut seen = HashSet::new();
    for batch in server.batches() {
        for id in &batch.custom_ids {
            assert!(seen.insert(id.clone()), "{id} was submitted twice");
        }
    }
}

/// A run's stderr closed under it (a pipe whose reader quit, as with `| head`)
/// costs it its log lines only: the batch it follows, which logs its status
/// there, still ends, and so does the run, with its summary lost.
#[tokio::test]
async fn a_run_whose_stderr_is_closed_still_follows_its_batch_to_the_end() {
    let (_server, ws) = batch_workspace(Script::default(), Provider::OpenAi, 20, "").await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", ws.path("p.yaml").to_str().unwrap(), "--no-progress"])
        .env("OPENAI_API_KEY", KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The reading end goes: every write to stderr fails from now on.
    drop(child.stderr.take());
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the run never ended: a failed write to stderr stopped it")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_rows_answered(&ws, 20);
    assert_eq!(run_status(&ws), "completed");
}

async fn a_run_in_batch_mode_answers_every_row_through_one_batch(provider: Provider) {
    let (server, ws) = batch_workspace(Script::default(), provider, 40, "").await;
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_rows_answered(&ws, 40);
    let batches = server.batches();
    assert_eq!(batches.len(), 1, "{provider:?}: {summary}");
    assert_eq!(batches[0].custom_ids.len(), 40);
    assert_nothing_submitted_twice(&server);
    // Nothing went online: the served requests are the batch's lines.
    let online: Vec<_> = server
        .served()
        .into_iter()
        .filter(|s| !s.path.contains("batch"))
        .collect();
    assert_eq!(online.len(), 40, "each line answered once");
    assert_eq!(
        count(
            &ws,
            "SELECT count(*) FROM calls WHERE provider_batch IS NOT NULL AND replayed = 0"
        ),
        40
    );
    assert_eq!(
        count(
            &ws,
            "SELECT count(*) FROM batch_requests WHERE state = 'answered'"
        ),
        40
    );
    assert_eq!(
        count(
            &ws,
            "SELECT count(*) FROM row_outcomes WHERE outcome = 'completed'"
        ),
        40
    );
    assert!(
        summary.contains("batch mode: 1 batches, 40 requests submitted, 40 answered"),
        "{summary}"
    );
}

#[tokio::test]
async fn openai_batch_mode_answers_every_row_through_one_batch() {
    a_run_in_batch_mode_answers_every_row_through_one_batch(Provider::OpenAi).await;
}

#[tokio::test]
async fn azure_batch_mode_answers_every_row_through_one_batch() {
    a_run_in_batch_mode_answers_every_row_through_one_batch(Provider::Azure).await;
}

#[tokio::test]
async fn anthropic_batch_mode_answers_every_row_through_one_batch() {
    a_run_in_batch_mode_answers_every_row_through_one_batch(Provider::Anthropic).await;
}

#[tokio::test]
async fn batches_split_at_batch_max_requests() {
    let (server, ws) = batch_workspace(
        Script::default(),
        Provider::OpenAi,
        25,
        "    batch_max_requests: 10\n",
    )
    .await;
    let out = run(&ws, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_rows_answered(&ws, 25);
    let sizes: Vec<usize> = server
        .batches()
        .iter()
        .map(|b| b.custom_ids.len())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 25);
    assert!(sizes.iter().all(|&n| n <= 10), "{sizes:?}");
    assert_nothing_submitted_twice(&server);
}

#[tokio::test]
async fn a_batch_of_thousands_is_taken_a_thousand_answers_at_a_time_each_to_its_row() {
    let (server, ws) = batch_workspace(Script::default(), Provider::Anthropic, 2_500, "").await;
    let out = run(&ws, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_rows_answered(&ws, 2_500);
    assert_eq!(server.batches().len(), 1);
    assert_eq!(
        count(
            &ws,
            "SELECT succeeded FROM provider_batches WHERE state = 'ended'"
        ),
        2_500
    );
    assert_eq!(
        count(
            &ws,
            "SELECT count(*) FROM batch_requests WHERE state = 'answered'"
        ),
        2_500
    );
}

#[tokio::test]
async fn a_rejected_line_fails_its_row_with_the_providers_answer() {
    let server = TestLlmServer::start(Script {
        reject_marker: Some("row 3,".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(8));
    let yaml = batch_pipeline(Provider::OpenAi, &server.root_url(), "").replace(
        "    options:\n",
        "    on_error: {path: failed.jsonl}\n    options:\n",
    );
    ws.write("p.yaml", &yaml);
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{summary}");
    let failed = read_jsonl(&ws, "failed.jsonl");
    assert_eq!(failed.len(), 1, "{summary}");
    assert_eq!(failed[0]["id"], "3");
    let message = failed[0]["_error_message"].as_str().unwrap_or_default();
    assert!(message.contains("400"), "{:?}", failed[0]);
    let ok = read_jsonl(&ws, "out.jsonl");
    assert_eq!(ok.len(), 7);
}

#[tokio::test]
async fn expired_lines_are_sent_again_and_answered_online_after_the_last_batch() {
    let (server, ws) = batch_workspace(
        Script {
            batch_expire_marker: Some("row 5,".into()),
            ..Script::default()
        },
        Provider::OpenAi,
        8,
        "",
    )
    .await;
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_rows_answered(&ws, 8);
    let batches = server.batches();
    // The first batch holds all 8; row 5 expires in it and in two more.
    assert_eq!(batches.len(), 3, "{summary}");
    assert_eq!(batches[1].custom_ids, batches[2].custom_ids);
    assert_eq!(batches[1].custom_ids.len(), 1);
    let online = server
        .served()
        .into_iter()
        .filter(|s| s.path == "/v1/chat/completions" && s.user_message.contains("row 5,"))
        .count();
    assert!(online >= 1, "{summary}");
}

#[tokio::test]
async fn batch_mode_refuses_no_audit_and_kind_http() {
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(2));
    ws.write(
        "p.yaml",
        &batch_pipeline(Provider::OpenAi, "http://127.0.0.1:9", ""),
    );
    let out = run(&ws, &["--no-audit"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("batch mode"), "{}", stderr(&out));
    let http = batch_pipeline(Provider::OpenAi, "http://127.0.0.1:9", "")
        .replace("kind: openai", "kind: http");
    ws.write("p.yaml", &http);
    let out = run(&ws, &[]).await;
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("p.yaml:") && said.contains("mode batch needs a provider with a Batch API"),
        "{said}"
    );
}

/// Starts `weir run` on its own, for a test to kill it.
fn spawn_run(ws: &Workspace, resume: bool) -> tokio::process::Child {
    let pipeline = ws.path("p.yaml");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("run").arg(&pipeline).arg("--no-progress");
    if resume {
        cmd.arg("--resume");
    }
    cmd.env_remove("OPENAI_BASE_URL")
        .env("OPENAI_API_KEY", KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn().unwrap()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited 60 s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn job_state(db: &Path) -> Option<String> {
    let conn = Connection::open(db).ok()?;
    conn.query_row(
        "SELECT state FROM provider_batches ORDER BY job_id DESC LIMIT 1",
        [],
        |r| r.get(0),
    )
    .ok()
}

/// Kills `weir` once `moment` holds, resumes it to the end, and checks
/// that every row was answered once, with its own answer, and that nothing
/// was submitted twice.
async fn killed_then_resumed(provider: Provider, moment: &str) {
    let (server, ws) = batch_workspace(
        Script {
            batch_seconds: Duration::from_secs(2),
            ..Script::default()
        },
        provider,
        30,
        "",
    )
    .await;
    let db = ws.path("weir-audit.sqlite");
    let mut child = spawn_run(&ws, false);
    match moment {
        "after submission" => {
            until("the batch's submission", || !server.batches().is_empty()).await;
        }
        "while polling" => {
            until("a poll", || {
                job_state(&db).as_deref() == Some("submitted")
                    && server
                        .batches()
                        .first()
                        .is_some_and(|b| b.status != "validating")
            })
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        "after upload" => {
            until("the upload", || server.files_uploaded() > 0).await;
        }
        _ => unreachable!(),
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let out = run(&ws, &["--resume"]).await;
    let summary = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{provider:?} {moment}: {summary}"
    );
    assert_rows_answered(&ws, 30);
    assert_nothing_submitted_twice(&server);
    let submitted: usize = server.batches().iter().map(|b| b.custom_ids.len()).sum();
    assert_eq!(submitted, 30, "{provider:?} {moment}: {summary}");
    assert_eq!(
        count(&ws, "SELECT count(*) FROM row_outcomes"),
        30,
        "one outcome per row"
    );
    assert_eq!(
        count(
            &ws,
            "SELECT count(*) FROM calls WHERE provider_batch IS NOT NULL AND replayed = 0"
        ),
        30,
        "each answer's call recorded once as not replayed"
    );
}

#[tokio::test]
async fn openai_killed_after_submission_resumes_without_submitting_again() {
    killed_then_resumed(Provider::OpenAi, "after submission").await;
}

#[tokio::test]
async fn openai_killed_while_polling_resumes_without_submitting_again() {
    killed_then_resumed(Provider::OpenAi, "while polling").await;
}

#[tokio::test]
async fn azure_killed_after_upload_resumes_without_submitting_twice() {
    killed_then_resumed(Provider::Azure, "after upload").await;
}

#[tokio::test]
async fn anthropic_killed_while_polling_resumes_without_submitting_again() {
    killed_then_resumed(Provider::Anthropic, "while polling").await;
}

#[tokio::test]
async fn a_batch_line_with_a_server_error_goes_into_the_next_batch() {
    let (server, ws) = batch_workspace(
        Script {
            fault_kinds: vec![Fault::Status(503)],
            faults_first: 1,
            ..Script::default()
        },
        Provider::Anthropic,
        6,
        "",
    )
    .await;
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_rows_answered(&ws, 6);
    let batches = server.batches();
    assert_eq!(batches.len(), 2, "{summary}");
    assert_eq!(batches[1].custom_ids.len(), 1);
}

/// Starts a run whose batch takes `batch_seconds`, and stops it with
/// Ctrl-C once the batch is submitted.
async fn detached_run(server: &TestLlmServer, ws: &Workspace) -> String {
    ws.write("in.csv", &numbered_rows(12));
    ws.write(
        "p.yaml",
        &batch_pipeline(Provider::OpenAi, &server.root_url(), ""),
    );
    let db = ws.path("weir-audit.sqlite");
    let child = spawn_run(ws, false);
    until("the batch's submission", || {
        job_state(&db).as_deref() == Some("submitted")
    })
    .await;
    let pid = child.id().unwrap() as i32;
    // SAFETY: signalling a child this test started and still waits for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("weir detached within 30 s")
        .unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{said}");
    said
}

#[tokio::test]
async fn ctrl_c_detaches_and_a_resume_takes_the_batch_up_again() {
    let server = TestLlmServer::start(Script {
        batch_seconds: Duration::from_secs(3),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    detached_run(&server, &ws).await;
    let batch_id = server.batches()[0].id.clone();
    let runs = weir(&["runs", "-p", ws.path("p.yaml").to_str().unwrap()], &[]).await;
    let listing = String::from_utf8_lossy(&runs.stdout).into_owned();
    assert!(
        listing.contains(&format!("waiting on batch {batch_id}")),
        "{listing}"
    );
    let out = run(&ws, &["--resume"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_rows_answered(&ws, 12);
    assert_eq!(
        server.batches().len(),
        1,
        "re-attached, nothing submitted again"
    );
}

#[tokio::test]
async fn weir_cancel_cancels_the_providers_batch() {
    let server = TestLlmServer::start(Script {
        batch_seconds: Duration::from_secs(60),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    detached_run(&server, &ws).await;
    let pipeline = ws.path("p.yaml");
    let out = weir(
        &["cancel", "1", "-p", pipeline.to_str().unwrap()],
        &[("OPENAI_API_KEY", KEY)],
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", stderr(&out));
    let batch = &server.batches()[0];
    assert!(batch.status.starts_with("cancel"), "{}", batch.status);
    assert!(said.contains(&batch.id), "{said}");
    let runs = weir(&["runs", "-p", pipeline.to_str().unwrap()], &[]).await;
    let listing = String::from_utf8_lossy(&runs.stdout).into_owned();
    assert!(!listing.contains("waiting on batch"), "{listing}");
}

const PRICE: &str = "    price: {input_per_million: 1.5, output_per_million: 6}\n";

fn total_cost(ws: &Workspace) -> f64 {
    audit(ws)
        .query_row("SELECT sum(cost_usd) FROM calls", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn batch_answers_cost_the_online_price_less_the_batch_discount() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let batch = batch_pipeline(Provider::OpenAi, &server.root_url(), PRICE);
    let mut costs = Vec::new();
    for yaml in [
        batch.replace("    mode: batch\n", ""),
        batch.clone(),
        batch.replace(
            "output_per_million: 6}",
            "output_per_million: 6, batch_discount: 0.25}",
        ),
    ] {
        let ws = Workspace::new();
        ws.write("in.csv", &numbered_rows(20));
        ws.write("p.yaml", &yaml);
        let out = run(&ws, &[]).await;
        let summary = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{summary}");
        assert_rows_answered(&ws, 20);
        costs.push((total_cost(&ws), summary));
    }
    let (online, batch, quarter_off) = (costs[0].0, costs[1].0, costs[2].0);
    assert!(online > 0.0);
    assert!((batch - online * 0.5).abs() < 1e-12, "{batch} vs {online}");
    assert!(
        (quarter_off - online * 0.75).abs() < 1e-12,
        "{quarter_off} vs {online}"
    );
    assert!(
        costs[1].1.contains("saved over online prices"),
        "{}",
        costs[1].1
    );
}

#[tokio::test]
async fn a_batch_that_would_pass_the_budget_is_not_sent_and_a_resume_with_more_sends_it() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(20));
    let yaml = format!(
        "budget_usd: 0.00001\n{}",
        batch_pipeline(Provider::OpenAi, &server.root_url(), PRICE)
    );
    ws.write("p.yaml", &yaml);
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{summary}");
    assert!(summary.contains("budget"), "{summary}");
    assert!(server.batches().is_empty(), "nothing was sent");
    let out = run(&ws, &["--resume", "--budget-usd", "10"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_rows_answered(&ws, 20);
    assert_eq!(server.batches().len(), 1);
}

/// A run killed after the provider created its batch but before the
/// batch's id was recorded: the audit database is left as such a kill
/// leaves it, and the resume must find that batch instead of sending
/// another.
async fn a_created_batch_whose_id_was_not_recorded_is_found_again(
    provider: Provider,
    recorded_state: &str,
) {
    let (server, ws) = batch_workspace(
        Script {
            batch_seconds: Duration::from_secs(2),
            ..Script::default()
        },
        provider,
        10,
        "",
    )
    .await;
    let db = ws.path("weir-audit.sqlite");
    let mut child = spawn_run(&ws, false);
    until("the batch's submission", || {
        job_state(&db).as_deref() == Some("submitted")
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let forgotten = Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE provider_batches SET state = ?1, batch_id = NULL, submitted_at_ms = NULL",
            [recorded_state],
        )
        .unwrap();
    assert_eq!(forgotten, 1);
    let out = run(&ws, &["--resume"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_rows_answered(&ws, 10);
    assert_eq!(
        server.batches().len(),
        1,
        "the batch was found, not sent again"
    );
}

#[tokio::test]
async fn an_openai_batch_created_but_not_recorded_is_found_by_its_tag() {
    a_created_batch_whose_id_was_not_recorded_is_found_again(Provider::OpenAi, "uploaded").await;
}

#[tokio::test]
async fn an_anthropic_batch_created_but_not_recorded_is_found_by_its_size_and_time() {
    a_created_batch_whose_id_was_not_recorded_is_found_again(Provider::Anthropic, "preparing")
        .await;
}

#[tokio::test]
async fn a_row_that_asks_again_after_an_answer_goes_in_rounds_one_batch_each() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(10));
    // The second node asks about the first node's answer: each row needs
    // two batches, one after the other.
    let yaml = batch_pipeline(Provider::OpenAi, &server.root_url(), "").replace(
        "sinks:\n",
        "  - name: again\n    component: llm\n    endpoints: [llm]\n    options:\n      \
         model: test-model\n      template: \"again: {{ row.first }}\"\n      \
         response_field: second\nsinks:\n",
    );
    let yaml = yaml.replace(
        "{{ row.text }}\"\n",
        "{{ row.text }}\"\n      response_field: first\n",
    );
    ws.write("p.yaml", &yaml);
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    let rows = read_jsonl(&ws, "out.jsonl");
    assert_eq!(rows.len(), 10);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["first"], echo_of(i));
        assert_eq!(row["second"], format!("echo: again: {}", echo_of(i)));
    }
    let batches = server.batches();
    assert_eq!(batches.len(), 2, "{summary}");
    assert!(batches.iter().all(|b| b.custom_ids.len() == 10));
    assert_nothing_submitted_twice(&server);
}

#[tokio::test]
async fn answers_in_the_response_cache_are_not_sent_in_a_batch() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(12));
    let batch = batch_pipeline(Provider::OpenAi, &server.root_url(), "    cache: true\n");
    ws.write("p.yaml", &batch.replace("    mode: batch\n", ""));
    let out = run(&ws, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_file(ws.path("out.jsonl")).unwrap();
    ws.write("p.yaml", &batch);
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_rows_answered(&ws, 12);
    assert!(server.batches().is_empty(), "{summary}");
    assert!(summary.contains("12 answers from the cache"), "{summary}");
}

#[tokio::test]
async fn answers_a_batch_brought_are_kept_and_a_second_run_submits_nothing() {
    let (server, ws) =
        batch_workspace(Script::default(), Provider::OpenAi, 12, "    cache: true\n").await;
    let out = run(&ws, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.batches().len(), 1);
    std::fs::remove_file(ws.path("out.jsonl")).unwrap();
    let out = run(&ws, &[]).await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_rows_answered(&ws, 12);
    assert_eq!(server.batches().len(), 1, "no second batch: {summary}");
    assert!(summary.contains("12 answers from the cache"), "{summary}");
}
