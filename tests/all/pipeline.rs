//! End-to-end tests: the real `weir` binary runs real pipelines, loading the
//! built-in wasm guest, against the test LLM server (a test tool, not a model)
//! over loopback, and writes a real SQLite audit database.

use crate::common::*;
use rusqlite::Connection;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use weir_test_llm_server::{Reply, Script, TestLlmServer, expected_answer};

#[tokio::test]
async fn sentiment_example_classifies_every_row() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Sentiment,
        latency: Duration::from_millis(20),
        require_key: Some(KEY.into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sentiment");
    let yaml = std::fs::read_to_string(example.join("pipeline.yaml")).unwrap();
    let pipeline = ws.write("pipeline.yaml", &yaml);
    std::fs::copy(example.join("reviews.csv"), ws.path("reviews.csv")).unwrap();

    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stderr(&out);
    assert!(
        summary.contains("60 read: 60 ok, 0 failed; 60 written"),
        "{summary}"
    );

    let input = read_csv(&ws.path("reviews.csv"));
    let output = read_csv(&ws.path("out/sentiment.csv"));
    assert_eq!(
        output[0].iter().collect::<Vec<_>>(),
        vec![
            "id",
            "text",
            "sentiment",
            "sentiment_usage",
            "sentiment_model"
        ]
    );
    assert_eq!(output.len(), input.len());
    for (inp, out) in input.iter().zip(&output).skip(1) {
        assert_eq!(&out[0], &inp[0]);
        assert_eq!(&out[1], &inp[1]);
        let prompt = format!("Review: {}", &inp[1]);
        assert_eq!(
            &out[2],
            expected_answer(Reply::Sentiment, &prompt),
            "row {}",
            &inp[0]
        );
        let usage: Value = serde_json::from_str(&out[3]).unwrap();
        assert!(usage["total_tokens"].as_u64().unwrap() > 0);
        assert_eq!(&out[4], "gpt-4o-mini");
    }
    // The model answered every row exactly once, with the system prompt.
    let served = server.served();
    assert_eq!(served.len(), 60);
    assert!(
        served
            .iter()
            .all(|s| s.body["messages"][0]["role"] == "system")
    );
    assert!(
        served
            .iter()
            .all(|s| s.body["temperature"] == 0.0 && s.body["max_tokens"] == 5)
    );
}

#[tokio::test]
async fn a_semicolon_csv_in_windows_1252_is_read_and_a_sink_writes_the_delimiter_it_is_given() {
    // As spreadsheets save CSV where the comma is the decimal mark.
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    std::fs::write(
        ws.path("in.csv"),
        b"id;text\n1;\"one; two\"\n2;1,5 kg caf\xe9\n",
    )
    .unwrap();
    let yaml = pipeline_with("in.csv", "out.csv", "", "", ECHO_OPTIONS)
        .replace(
            "  path: in.csv\n",
            "  path: in.csv\n  encoding: windows-1252\n",
        )
        .replace(
            "  - path: out.csv\n",
            "  - path: out.csv\n    delimiter: ';'\n",
        );
    let pipeline = ws.write("p.yaml", &yaml);
    let validated = weir(&["validate", pipeline.to_str().unwrap()], &[]).await;
    let said = String::from_utf8_lossy(&validated.stdout);
    assert!(said.contains("in.csv (columns id, text)"), "{said}");
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let prompts: Vec<String> = server
        .served()
        .iter()
        .map(|s| s.user_message.clone())
        .collect();
    assert_eq!(prompts.len(), 2);
    assert!(prompts.contains(&"Q1: one; two".to_string()), "{prompts:?}");
    assert!(
        prompts.contains(&"Q2: 1,5 kg café".to_string()),
        "{prompts:?}"
    );
    let written = std::fs::read_to_string(ws.path("out.csv")).unwrap();
    assert!(
        written.starts_with("id;text;llm_response\n1;\"one; two\";"),
        "{written}"
    );
}

#[tokio::test]
async fn a_json_array_source_streams_its_elements_and_one_cut_short_is_refused_at_its_line() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let array = "[\n  {\"id\": 1, \"text\": \"one, ]\"},\n  {\"id\": 2,\n   \"text\": \"two\"},\n  {\"id\": 3, \"text\": \"three\", \"tags\": [\"a\"]}\n]\n";
    ws.write("in.json", array);
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_with("in.json", "out.jsonl", "", "", ECHO_OPTIONS),
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let written = std::fs::read_to_string(ws.path("out.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(rows[2]["tags"], serde_json::json!(["a"]));
    let prompts: Vec<String> = server
        .served()
        .iter()
        .map(|s| s.user_message.clone())
        .collect();
    assert!(prompts.contains(&"Q1: one, ]".to_string()), "{prompts:?}");

    ws.write("in.json", &array[..array.len() - 30]);
    let sent = server.served().len();
    let out = run_with_key(&pipeline, &server.base_url()).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains(
            "in.json:5: the file ends inside the element that begins here; the rest of the \
             file cannot be read as rows"
        ),
        "{message}"
    );
    assert_eq!(server.served().len(), sent, "no request was sent");
}

/// Answers that no row can use (echoes where JSON outputs are declared) cost
/// every row its call: the run stops once its first twenty fail alike, and
/// runs them all when told to.
#[tokio::test]
async fn a_run_whose_first_rows_all_fail_alike_stops_before_paying_for_the_rest() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let options = format!("{ECHO_OPTIONS}      outputs: {{label: string}}\n");
    let p = numbered_rows_pipeline(&ws, 400, "pool_size: 4", "", &options);
    let out = run_with_key(&p, &server.base_url()).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains(
            "the first 20 rows all failed at transform `ask` with response_unparsable: a \
             mistake every row would meet"
        ),
        "{message}"
    );
    let sent = server.served().len();
    assert!(sent < 100, "{sent} requests sent for 400 rows");
    assert_eq!(
        audit_value::<i64>(
            &ws,
            "SELECT count(*) FROM row_outcomes WHERE outcome = 'failed'"
        ),
        20,
        "the rows that failed before the stop keep their outcome; none after"
    );

    let every_row = ws.write(
        "p.yaml",
        &format!(
            "stop_when_first_rows_fail: 0\n{}",
            std::fs::read_to_string(&p).unwrap()
        ),
    );
    let out = run_with_key(&every_row, &server.base_url()).await;
    assert!(
        stderr(&out).contains("rows     400 read: 0 ok, 400 failed"),
        "{}",
        stderr(&out)
    );
}

/// Where stderr is a log rather than a terminal, a run says how far it is
/// in a line now and then; `--no-progress` silences it.
#[tokio::test]
async fn a_run_logged_to_a_file_writes_a_progress_line_now_and_then() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(40),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 100, "pool_size: 2", "", ECHO_OPTIONS);
    let path = p.to_str().unwrap();
    let env = [
        ("OPENAI_API_KEY", KEY),
        ("OPENAI_BASE_URL", &server.base_url()),
        ("WEIR_PROGRESS_SECONDS", "1"),
    ];
    let out = weir(&["run", path], &env).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("weir: ") && l.contains(" of 100 rows ("))
        .map(str::to_string)
        .collect();
    assert!(!lines.is_empty(), "{}", stderr(&out));
    assert!(lines[0].contains(" rows/s"), "{lines:?}");

    let quiet = weir(&["run", path, "--no-progress"], &env).await;
    assert!(
        !stderr(&quiet).contains(" of 100 rows ("),
        "{}",
        stderr(&quiet)
    );
}

#[tokio::test]
async fn each_row_gets_its_own_answer_despite_injected_429s() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(2),
        fail_every: Some((7, 429)),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(300));
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out/answers.jsonl", 8, ECHO_OPTIONS),
    );

    let out = weir(
        &["run", pipeline.to_str().unwrap(), "--no-progress"],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", &server.base_url()),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));

    let lines: Vec<Value> = ws
        .read("out/answers.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 300);
    for (i, row) in lines.iter().enumerate() {
        let text = format!("row {i}, with a comma and \"quotes\"");
        assert_eq!(row["id"], i.to_string(), "rows keep source order");
        assert_eq!(row["text"], text);
        assert_eq!(row["llm_response"], format!("echo: Q{i}: {text}"));
        let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["id", "text", "llm_response"],
            "usage and model columns are opt-in"
        );
    }
    let served = server.served();
    let rejected = served.iter().filter(|s| s.status == 429).count();
    assert_eq!(
        served.len(),
        300 + rejected,
        "every 429 was retried once more, no extra calls"
    );
    assert!(rejected >= 300 / 7, "the script injected {rejected} 429s");

    // The audit trail holds every attempt, with the retried ones marked.
    let db = Connection::open(ws.path("out/weir-audit.sqlite")).unwrap();
    let (calls, retried): (i64, i64) = db
        .query_row(
            "SELECT count(*), sum(retry_cause = 'capacity') FROM calls WHERE run_id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(calls as usize, served.len());
    assert_eq!(retried as usize, rejected);
    assert!(
        stderr(&out).contains(&format!("retries {rejected} capacity")),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_server_over_capacity_slows_the_run_but_loses_nothing() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(10),
        capacity: Some(4),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(120));
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out.csv", 16, ECHO_OPTIONS),
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = read_csv(&ws.path("out.csv"));
    assert_eq!(rows.len(), 121);
    for (i, row) in rows.iter().skip(1).enumerate() {
        assert_eq!(&row[0], i.to_string());
        assert!(row[2].starts_with(&format!("echo: Q{i}: ")), "{:?}", row);
    }
    let ok = server.served().iter().filter(|s| s.status == 200).count();
    assert_eq!(ok, 120);
}

#[tokio::test]
async fn failed_rows_are_reported_and_never_take_other_rows_with_them() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write(
        "in.jsonl",
        "{\"id\": 1, \"text\": \"fine\"}\n{\"id\": 2}\nnot json\n{\"id\": 4, \"text\": \"also fine\"}\n",
    );
    // Without `on_error`, a source with an unreadable line would not run.
    let pipeline = ws.write(
        "p.yaml",
        &format!(
            "on_error: discard\n{}",
            pipeline_yaml("in.jsonl", "out.jsonl", 4, ECHO_OPTIONS)
        ),
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "rows failed, so the exit status says so"
    );
    let summary = stderr(&out);
    assert!(
        summary.contains("4 read: 2 ok, 0 failed, 2 discarded; 2 written"),
        "{summary}"
    );
    assert!(
        summary.contains("template_rendering_failed: 1 rows; first: row 1 at node `ask`"),
        "{summary}"
    );
    // The built guest is a release build: its message still shows the
    // template line that failed.
    assert!(
        summary.contains("near `Q{{ row.id }}: {{ row.text }}`"),
        "{summary}"
    );
    assert!(
        summary.contains("source_invalid: 1 rows; first: row 2 at source"),
        "{summary}"
    );

    let written: Vec<Value> = ws
        .read("out.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(written.len(), 2);
    assert_eq!(written[0]["llm_response"], "echo: Q1: fine");
    assert_eq!(written[1]["llm_response"], "echo: Q4: also fine");
    assert_eq!(
        server.served().len(),
        2,
        "no request is made for a row whose template failed"
    );

    // Exactly one terminal outcome per source row, with the reason.
    let db = Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let mut stmt = db
        .prepare("SELECT row_index, outcome, coalesce(error_code, '') FROM row_outcomes ORDER BY row_index")
        .unwrap();
    let outcomes: Vec<(i64, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (0, "completed".into(), "".into()),
            (1, "discarded".into(), "template_rendering_failed".into()),
            (2, "discarded".into(), "source_invalid".into()),
            (3, "completed".into(), "".into()),
        ]
    );
}

#[tokio::test]
async fn provider_errors_are_not_retried_and_keep_the_providers_message() {
    let server = TestLlmServer::start(Script {
        fail_every: Some((1, 400)),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(3));
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out.csv", 2, ECHO_OPTIONS),
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "llm_call_failed: 3 rows; first: row 0 at node `ask`: HTTP 400: Injected failure"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.served().len(), 3, "a 400 is not retried");
    let rows = read_csv(&ws.path("out.csv"));
    assert_eq!(rows.len(), 1, "only the header: no row succeeded");
}

#[tokio::test]
async fn the_api_key_reaches_the_endpoint_and_nowhere_else() {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        // Error answers and retries go through the audit trail too.
        fail_every: Some((3, 500)),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(5));
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out.jsonl", 2, ECHO_OPTIONS),
    );
    let out = weir(
        &["run", pipeline.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", &server.base_url()),
            ("WEIR_LOG", "trace"),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let served = server.served();
    assert!(served.iter().any(|s| s.status == 500));
    assert!(
        served
            .iter()
            .all(|s| s.authorization.as_deref() == Some(&format!("Bearer {KEY}")))
    );
    let db_path = ws.path("weir-audit.sqlite");
    let explained = weir(
        &["explain", "1", "0", "--audit", db_path.to_str().unwrap()],
        &[],
    )
    .await;
    assert!(explained.status.success(), "{}", stderr(&explained));
    assert!(String::from_utf8_lossy(&explained.stdout).contains("HTTP 200"));
    assert!(served.iter().all(|s| !s.body.to_string().contains(KEY)));

    let db = std::fs::read(ws.path("weir-audit.sqlite")).unwrap();
    let wal = std::fs::read(ws.path("weir-audit.sqlite-wal")).unwrap_or_default();
    for (what, bytes) in [
        ("audit database", db),
        ("audit WAL", wal),
        ("stderr", out.stderr.clone()),
        ("stdout", out.stdout.clone()),
        ("explain output", explained.stdout.clone()),
    ] {
        assert!(
            !contains(&bytes, KEY.as_bytes()),
            "the key leaked into the {what}"
        );
    }
    assert!(!ws.read("out.jsonl").contains(KEY));
    let db = Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let fingerprint: String = db
        .query_row("SELECT secret_fingerprint FROM endpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fingerprint.len(), 16);
    // The bodies are kept compressed, where a byte search cannot see them:
    // they are searched as they read back.
    let payloads = weir::services::audit::payload_bodies(&db, 1).unwrap();
    assert!(payloads.len() >= 15, "{} payloads", payloads.len());
    assert!(
        payloads.iter().all(|body| !body.contains(KEY)),
        "the key leaked into a payload"
    );
}

#[tokio::test]
async fn query_commands_piped_into_a_reader_that_quit_end_quietly() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(3));
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out.csv", 2, ECHO_OPTIONS),
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let audit = ws.path("weir-audit.sqlite");
    let audit = audit.to_str().unwrap();
    let p = pipeline.to_str().unwrap();
    for args in [
        vec!["runs", "--audit", audit],
        vec!["explain", "1", "0", "--full", "--audit", audit],
        vec!["validate", p],
    ] {
        let out = weir_into_a_closed_pipe(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[tokio::test]
async fn a_missing_key_stops_at_once_and_writes_nothing() {
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(3));
    let pipeline = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out/out.csv", 2, ECHO_OPTIONS),
    );
    let out = weir(
        &["run", pipeline.to_str().unwrap()],
        &[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("p.yaml:6: environment variable OPENAI_API_KEY is not set"),
        "{message}"
    );
    assert!(!ws.path("out").exists(), "nothing may be written");
}

#[tokio::test]
async fn validate_names_the_line_of_a_bad_option() {
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(1));
    let options = "      template: \"{{ row.text }}\"\n      temprature: 0.5\n";
    let pipeline = ws.write("p.yaml", &pipeline_yaml("in.csv", "out.csv", 2, options));
    let out = weir(
        &["validate", pipeline.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message
            .contains("p.yaml:15: transform `ask`: options.temprature: unknown field `temprature`"),
        "{message}"
    );

    let broken = "      template: \"{{ row.text \"\n";
    let pipeline = ws.write("p2.yaml", &pipeline_yaml("in.csv", "out.csv", 2, broken));
    let out = weir(
        &["validate", pipeline.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("options.template: syntax error"),
        "{}",
        stderr(&out)
    );

    let good = ws.write(
        "p3.yaml",
        &pipeline_yaml("in.csv", "out.csv", 2, ECHO_OPTIONS),
    );
    let out = weir(
        &["validate", good.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("node    ask adds llm_response\n"));
}

#[tokio::test]
async fn an_anthropic_endpoint_gets_the_messages_api_and_its_answers_are_read() {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(6));
    let p = ws.write(
        "p.yaml",
        "source:\n  path: in.csv\nendpoints:\n  claude:\n    kind: anthropic\n    \
         base_url: ${ANTHROPIC_BASE_URL}\n    api_key: ${ANTHROPIC_API_KEY}\n    \
         price: {input_per_million: 1, output_per_million: 5}\ntransforms:\n  - name: ask\n    \
         component: llm\n    endpoints: [claude]\n    options:\n      endpoint: claude\n      \
         model: claude-haiku-4-5\n      system_prompt: Answer briefly.\n      \
         template: \"Q{{ row.id }}: {{ row.text }}\"\nsinks:\n  - path: out.csv\n",
    );
    let out = weir(
        &["run", p.to_str().unwrap()],
        &[
            ("ANTHROPIC_API_KEY", KEY),
            ("ANTHROPIC_BASE_URL", &server.root_url()),
        ],
    )
    .await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_csv_rows_echoed(&ws);
    let served = server.served();
    assert_eq!(served.len(), 6);
    for s in &served {
        assert_eq!(s.path, "/v1/messages");
        assert_eq!(s.api_key_header.as_deref(), Some(KEY));
        assert_eq!(s.authorization, None, "the key goes in x-api-key only");
        assert_eq!(s.body["system"], "Answer briefly.");
        assert!(s.body["max_tokens"].as_u64().is_some(), "{}", s.body);
        let roles: Vec<&str> = s.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user"]);
    }
    // input_tokens/output_tokens are read as the run's tokens and cost.
    let words = |text: &str| text.split_whitespace().count() as u64;
    let prompt: u64 = served
        .iter()
        .map(|s| words("Answer briefly.") + words(&s.user_message))
        .sum();
    let completion: u64 = (0..6).map(|i| words(&echo_of(i))).sum();
    let tokens = format!("({prompt} prompt, {completion} completion)");
    assert!(summary.contains(&tokens), "expected {tokens}: {summary}");
    let cost = (prompt as f64 + completion as f64 * 5.0) / 1e6;
    assert!(
        summary.contains(&format!("cost     ${cost:.6}")),
        "{summary}"
    );
}

#[tokio::test]
async fn an_overloaded_anthropic_endpoint_is_retried_as_a_capacity_signal() {
    let server = TestLlmServer::start(Script {
        fail_every: Some((3, 529)),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(12));
    let p = ws.write(
        "p.yaml",
        "source:\n  path: in.csv\nendpoints:\n  claude:\n    kind: anthropic\n    \
         base_url: ${ANTHROPIC_BASE_URL}\n    api_key: k\ntransforms:\n  - name: ask\n    \
         component: llm\n    endpoints: [claude]\n    options:\n      endpoint: claude\n      \
         model: claude-haiku-4-5\n      template: \"Q{{ row.id }}: {{ row.text }}\"\n\
         sinks:\n  - path: out.csv\n",
    );
    let out = weir(
        &["run", p.to_str().unwrap()],
        &[("ANTHROPIC_BASE_URL", &server.root_url())],
    )
    .await;
    let summary = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    let overloaded = server.served().iter().filter(|s| s.status == 529).count();
    assert!(overloaded >= 4, "{overloaded}");
    assert!(
        summary.contains(&format!("retries {overloaded} capacity")),
        "{summary}"
    );
    assert_eq!(read_csv(&ws.path("out.csv")).len(), 13);
}
