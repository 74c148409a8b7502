//! The 0.3.0 contract from the outside: a configure error that names its
//! option by path is shown at that option's line (in `weir validate`, `weir
//! run` and `weir test`), and the typed `chat.complete` import reaches
//! OpenAI-style and Anthropic endpoints through the path `send` takes.

use crate::common::*;
use weir_test_llm_server::{Reply, Script, TestLlmServer};

/// A 0.3.0 test component (a test tool): asks each row's `text` through
/// `chat.complete` and writes the typed answer onto the row.
const TEST_CHAT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guests/dist/test-chat.wasm");

/// A 0.2.0 test component (a test tool) that takes no options.
const TEST_V0_2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guests/dist/test-v0-2.wasm");

/// The 1-based line of the first line of `text` that starts (after its
/// indentation) with `key:`.
fn line_of_key(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(&format!("{key}:")))
        .expect("the key is in the text")
        + 1
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn chat_pipeline(endpoint: &str, options: &str) -> String {
    format!(
        "source:\n  path: in.jsonl\nendpoints:\n{endpoint}transforms:\n  - name: ask\n    \
         component: {TEST_CHAT}\n    endpoints: [llm]\n    options:\n{options}\
         sinks:\n  - path: out.jsonl\n"
    )
}

const OPENAI: &str = "  llm:\n    base_url: ${OPENAI_BASE_URL}\n    api_key: ${OPENAI_API_KEY}\n";

#[tokio::test]
async fn a_typed_configure_error_names_the_option_path_and_its_line_in_validate_and_run() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"text\":\"a\"}\n");
    let text = chat_pipeline(
        OPENAI,
        "      model: m\n      params:\n        temperature: 5\n",
    );
    let p = ws.write("p.yaml", &text);
    let line = line_of_key(&text, "temperature");
    for command in ["validate", "run"] {
        let out = weir(
            &[command, p.to_str().unwrap()],
            &[
                ("OPENAI_API_KEY", KEY),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9"),
            ],
        )
        .await;
        assert!(!out.status.success());
        let err = stderr(&out);
        for needle in [
            format!("p.yaml:{line}"),
            "transform `ask`: options.params.temperature: must be between 0 and 2, got 5".into(),
        ] {
            assert!(
                err.contains(&needle),
                "{command}: `{needle}` missing from: {err}"
            );
        }
    }
}

/// The built-in `llm` names options in its text (`options.params.NAME: …`);
/// on 0.3.0 that text arrives as a typed path, located the same way.
#[tokio::test]
async fn the_builtin_llm_refuses_an_option_by_its_path() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"text\":\"a\"}\n");
    let text = format!(
        "source:\n  path: in.jsonl\nendpoints:\n{OPENAI}transforms:\n  - name: ask\n    \
         component: llm\n    endpoints: [llm]\n    options:\n{ECHO_OPTIONS}      \
         temperature: 0.1\n      params:\n        seed: 1\n        temperature: 0.5\n\
         sinks:\n  - path: out.jsonl\n"
    );
    let p = ws.write("p.yaml", &text);
    let out = weir(
        &["validate", p.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9"),
        ],
    )
    .await;
    assert!(!out.status.success());
    let err = stderr(&out);
    let line = text
        .lines()
        .position(|l| l == "        temperature: 0.5")
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!("p.yaml:{line}")) && err.contains("options.params.temperature:"),
        "{err}"
    );
}

#[tokio::test]
async fn weir_test_shows_a_configure_error_at_the_option_in_the_fixtures_file() {
    let ws = Workspace::new();
    let text = format!(
        "component: {TEST_CHAT}\nendpoints: [llm]\noptions:\n  params:\n    temperature: 3\n\
         cases:\n  - name: file options\n    row: {{text: a}}\n    expect:\n      rows: []\n  \
         - name: case options\n    options:\n      params:\n        temperature: -1\n    \
         row: {{text: a}}\n    expect:\n      rows: []\n  \
         - name: an expected refusal\n    options:\n      params:\n        temperature: 9\n    \
         expect:\n      configure_error: must be between 0 and 2\n"
    );
    let f = ws.write("fixtures.yaml", &text);
    let out = weir(&["test", f.to_str().unwrap()], &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", stderr(&out));
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("temperature:"))
        .map(|(i, _)| i + 1)
        .collect();
    for (value, line) in [("3", lines[0]), ("-1", lines[1])] {
        let needle = format!(
            "configure refused the options: options.params.temperature: must be between 0 and \
             2, got {value} ({}:{line})",
            f.display()
        );
        assert!(
            stdout.contains(&needle),
            "`{needle}` missing from: {stdout}"
        );
    }
    assert!(stdout.contains("1 passed, 2 failed"), "{stdout}");
}

/// Runs the chat test component over two rows, the first cut at
/// `max_tokens`, against `endpoint`; returns the workspace and the output rows.
async fn complete_through(
    endpoint: &str,
    env: &[(&str, &str)],
) -> (Workspace, Vec<serde_json::Map<String, serde_json::Value>>) {
    let ws = Workspace::new();
    ws.write(
        "in.jsonl",
        "{\"id\":1,\"text\":\"one two three four five\"}\n{\"id\":2,\"text\":\"hi\"}\n",
    );
    let p = ws.write(
        "p.yaml",
        &chat_pipeline(
            endpoint,
            "      model: test-model\n      max_tokens: 3\n      params:\n        temperature: 0.5\n",
        ),
    );
    let out = weir(&["run", p.to_str().unwrap()], env).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = read_jsonl(&ws, "out.jsonl");
    (ws, rows)
}

/// The typed answer on the rows: the text, the finish reason (the server
/// cuts the first row's answer at `max_tokens: 3`) and the usage, which the
/// audit trail records on the row's call just as for `send`.
fn check_answers(ws: &Workspace, rows: &[serde_json::Map<String, serde_json::Value>]) {
    assert_eq!(rows.len(), 2);
    let echo = |text: &str| format!("echo: {text}");
    // Each provider's server cuts in its own unit (characters for the
    // chat-completions one, words for the Messages one): the start is kept.
    let cut = rows[0]["answer"].as_str().unwrap();
    let whole = echo("one two three four five");
    assert!(
        !cut.is_empty() && cut.len() < whole.len() && whole.starts_with(cut),
        "{cut}"
    );
    assert_eq!(rows[0]["finish_reason"], "length");
    assert_eq!(rows[1]["answer"], echo("hi"));
    assert_eq!(rows[1]["finish_reason"], "stop");
    for row in rows {
        assert_eq!(row["answer_model"], "test-model");
        let asked = words("Answer briefly.") + words(row["text"].as_str().unwrap());
        assert_eq!(row["input_tokens"], asked, "{row:?}");
        assert_eq!(
            row["output_tokens"],
            words(row["answer"].as_str().unwrap()),
            "{row:?}"
        );
    }
    let db = rusqlite::Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let calls: Vec<(i64, String, i64, u64, u64)> = db
        .prepare(
            "SELECT row_index, endpoint, status, prompt_tokens, completion_tokens FROM calls \
             WHERE node_id = (SELECT node_id FROM nodes WHERE name = 'ask') ORDER BY row_index",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: Vec<(i64, String, i64, u64, u64)> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            (
                i as i64,
                "llm".to_string(),
                200,
                row["input_tokens"].as_u64().unwrap(),
                row["output_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(calls, expected);
    let version: String = db
        .query_row(
            "SELECT wit_version FROM nodes WHERE name = 'ask'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, "0.3.0");
}

/// The test LLM server (a test tool) echoing prompts, cutting answers at
/// `max_tokens`, and asking for `KEY`.
async fn echo_server_that_cuts_at_max_tokens() -> TestLlmServer {
    TestLlmServer::start(Script {
        reply: Reply::Echo,
        cut_at_max_tokens: true,
        require_key: Some(KEY.into()),
        ..Script::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn complete_asks_an_openai_endpoint_in_the_chat_completions_shape() {
    let server = echo_server_that_cuts_at_max_tokens().await;
    let env = [
        ("OPENAI_API_KEY", KEY),
        ("OPENAI_BASE_URL", &server.base_url()),
    ];
    let (ws, rows) = complete_through(OPENAI, &env).await;
    check_answers(&ws, &rows);
    let served = server.served();
    assert_eq!(served.len(), 2);
    for s in &served {
        assert_eq!(s.path, "/v1/chat/completions");
        assert_eq!(s.body["model"], "test-model");
        assert_eq!(s.body["temperature"], 0.5);
        assert_eq!(s.body["max_tokens"], 3);
        assert_eq!(s.body["messages"][0]["role"], "system");
        assert_eq!(s.body["messages"][0]["content"], "Answer briefly.");
        assert_eq!(s.body["messages"][1]["role"], "user");
    }
}

#[tokio::test]
async fn a_request_asking_for_a_stream_is_not_sent_and_fails_its_row() {
    let server = echo_server_that_cuts_at_max_tokens().await;
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"id\":1,\"text\":\"hi\"}\n");
    let p = ws.write(
        "p.yaml",
        &chat_pipeline(OPENAI, "      params:\n        stream: true\n"),
    );
    let env = [
        ("OPENAI_API_KEY", KEY),
        ("OPENAI_BASE_URL", &server.base_url()),
    ];
    let out = weir(&["run", p.to_str().unwrap()], &env).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("endpoint `llm`: not sent, the request asks for `\"stream\": true`"),
        "{err}"
    );
    assert!(server.served().is_empty(), "nothing is paid for");
}

#[tokio::test]
async fn complete_asks_an_anthropic_endpoint_in_the_messages_shape() {
    let server = echo_server_that_cuts_at_max_tokens().await;
    let endpoint = "  llm:\n    kind: anthropic\n    base_url: ${ANTHROPIC_BASE_URL}\n    \
                    api_key: ${ANTHROPIC_API_KEY}\n";
    let env = [
        ("ANTHROPIC_API_KEY", KEY),
        ("ANTHROPIC_BASE_URL", &server.root_url()),
    ];
    let (ws, rows) = complete_through(endpoint, &env).await;
    check_answers(&ws, &rows);
    let served = server.served();
    assert_eq!(served.len(), 2);
    for s in &served {
        assert_eq!(s.path, "/v1/messages");
        assert_eq!(s.body["system"], "Answer briefly.");
        assert_eq!(s.body["temperature"], 0.5);
        assert_eq!(s.body["max_tokens"], 3);
        let roles: Vec<&str> = s.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user"]);
    }
}

/// A 0.2.0 component refuses its options in text; the host still finds the
/// option it names and points at its line.
#[tokio::test]
async fn a_configure_error_in_text_from_a_0_2_component_is_still_located() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"id\":1}\n");
    let text = format!(
        "source:\n  path: in.jsonl\ntransforms:\n  - name: old\n    component: {TEST_V0_2}\n    \
         options:\n      colour: red\nsinks:\n  - path: out.jsonl\n"
    );
    let p = ws.write("p.yaml", &text);
    let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
    assert!(!out.status.success());
    let err = stderr(&out);
    let line = line_of_key(&text, "colour");
    assert!(
        err.contains(&format!("p.yaml:{line}"))
            && err.contains("options.colour: this component takes no options"),
        "{err}"
    );
}

/// In batch mode, the requests `complete` is given for the rows of a call go
/// into one provider batch; each row runs again when its answer is in, and
/// reads it as an online answer.
#[tokio::test]
async fn complete_in_batch_mode_sends_the_rows_of_a_call_in_one_provider_batch() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let texts = ["alpha", "beta", "gamma", "delta"];
    let input: String = texts
        .iter()
        .map(|t| format!("{{\"text\":\"{t}\"}}\n"))
        .collect();
    ws.write("in.jsonl", &input);
    let endpoint = format!(
        "  llm:\n    kind: openai\n    base_url: {}/v1\n    api_key: ${{OPENAI_API_KEY}}\n    \
         mode: batch\n    batch_poll_seconds: 0.1\n",
        server.root_url()
    );
    let p = ws.write(
        "p.yaml",
        &chat_pipeline(&endpoint, "      model: test-model\n"),
    );
    let out = weir(&["run", p.to_str().unwrap()], &[("OPENAI_API_KEY", KEY)]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = read_jsonl(&ws, "out.jsonl");
    let answers: Vec<&str> = rows.iter().map(|r| r["answer"].as_str().unwrap()).collect();
    let expected: Vec<String> = texts.iter().map(|t| format!("echo: {t}")).collect();
    assert_eq!(answers, expected);
    assert!(rows.iter().all(|r| r["finish_reason"] == "stop"));
    let batches = server.batches();
    assert_eq!(batches.len(), 1, "{}", stderr(&out));
    assert_eq!(batches[0].custom_ids.len(), texts.len());
    // The server logs the batch's lines as chat requests: one each, and
    // nothing beside them went online.
    let chat_requests = server
        .served()
        .iter()
        .filter(|s| !s.path.contains("batch"))
        .count();
    assert_eq!(chat_requests, texts.len());
    let db = rusqlite::Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let batched: usize = db
        .query_row(
            "SELECT count(*) FROM calls WHERE provider_batch IS NOT NULL AND replayed = 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        batched,
        texts.len(),
        "each answer recorded once as a batch call"
    );
}
