//! What the built-in `llm` node sends: request fields from `params`, and
//! which endpoint it calls. The real `weir` binary runs the real component
//! against the test LLM server (a test tool, not a model) over loopback.

use crate::common::*;
use serde_json::{Value, json};
use weir_test_llm_server::{Script, TestLlmServer};

/// A one-node `llm` pipeline over `in.csv` with these endpoints (YAML under
/// `endpoints:`, unindented), grants and options (unindented).
fn pipeline(endpoints: &str, grants: &str, options: &str) -> String {
    let indent =
        |text: &str, by: &str| -> String { text.lines().map(|l| format!("{by}{l}\n")).collect() };
    format!(
        "source:\n  path: in.csv\nendpoints:\n{}transforms:\n  - name: ask\n    component: llm\n    \
         endpoints: [{grants}]\n    options:\n{}sinks:\n  - path: out.csv\n",
        indent(endpoints, "  "),
        indent(options, "      "),
    )
}

fn openai_endpoint(name: &str, url: &str, key: &str) -> String {
    format!("{name}:\n  base_url: {url}\n  api_key: {key}\n")
}

fn bodies(server: &TestLlmServer) -> Vec<Value> {
    server.served().into_iter().map(|s| s.body).collect()
}

#[tokio::test]
async fn params_reach_an_openai_endpoint_as_written() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(3));
    let p = ws.write(
        "p.yaml",
        &pipeline(
            &openai_endpoint("llm", &server.base_url(), KEY),
            "llm",
            "model: test-model\ntemperature: 0\ntemplate: \"Q{{ row.id }}: {{ row.text }}\"\n\
             params:\n  top_p: 0.5\n  seed: 7\n  stop: [\"\\n\\n\"]\n  logprobs: true\n  \
             reasoning_effort: low\n  metadata: {user_id: u1}\n",
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bodies = bodies(&server);
    assert_eq!(bodies.len(), 3);
    for body in &bodies {
        assert_eq!(body["top_p"], json!(0.5), "{body}");
        assert_eq!(body["seed"], json!(7));
        assert_eq!(body["stop"], json!(["\n\n"]));
        assert_eq!(body["logprobs"], json!(true));
        assert_eq!(body["reasoning_effort"], json!("low"));
        assert_eq!(body["metadata"], json!({"user_id": "u1"}));
        assert_eq!(body["model"], json!("test-model"));
        assert_eq!(body["temperature"], json!(0.0));
    }
    assert_csv_rows_echoed(&ws);
}

#[tokio::test]
async fn params_reach_an_anthropic_endpoint_beside_its_own_fields() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(2));
    let endpoint = format!(
        "claude:\n  kind: anthropic\n  base_url: {}\n  api_key: {KEY}\n",
        server.root_url()
    );
    let p = ws.write(
        "p.yaml",
        &pipeline(
            &endpoint,
            "claude",
            "model: claude-haiku-4-5\nsystem_prompt: Answer briefly.\nmax_tokens: 50\n\
             template: \"Q{{ row.id }}: {{ row.text }}\"\nparams:\n  top_p: 0.5\n  top_k: 5\n  \
             stop_sequences: [\"\\n\\n\"]\n  metadata: {user_id: u1}\n",
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let served = server.served();
    assert_eq!(served.len(), 2);
    for s in &served {
        assert_eq!(s.path, "/v1/messages");
        let body = &s.body;
        assert_eq!(body["top_p"], json!(0.5), "{body}");
        assert_eq!(body["top_k"], json!(5));
        assert_eq!(body["stop_sequences"], json!(["\n\n"]));
        assert_eq!(body["metadata"], json!({"user_id": "u1"}));
        assert_eq!(body["system"], json!("Answer briefly."));
        assert_eq!(body["max_tokens"], json!(50));
    }
}

#[tokio::test]
async fn params_that_would_replace_the_prompt_or_repeat_an_option_are_refused_by_validate() {
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(1));
    let endpoint = openai_endpoint("llm", "http://127.0.0.1:9/v1", KEY);
    for (params, expected) in [
        (
            "params:\n  messages: []\n",
            "options.params.messages: is not allowed: the messages are built from `template`",
        ),
        (
            "params:\n  model: other\n",
            "options.params.model: is not allowed: set it with options.model",
        ),
        (
            "params:\n  system: be terse\n",
            "options.params.system: is not allowed",
        ),
        (
            "temperature: 0\nparams:\n  temperature: 1\n",
            "options.params.temperature: `temperature` is also set as options.temperature",
        ),
        (
            "params:\n  top_p: high\n",
            "options.params.top_p: must be a number from 0 to 1, got \"high\"",
        ),
    ] {
        let p = ws.write(
            "p.yaml",
            &pipeline(
                &endpoint,
                "llm",
                &format!("template: \"{{{{ row.text }}}}\"\n{params}"),
            ),
        );
        let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
        assert_eq!(out.status.code(), Some(1), "{params}");
        let message = stderr(&out);
        assert!(message.contains("transform `ask`"), "{message}");
        assert!(message.contains(expected), "{expected} not in {message}");
    }
}

#[tokio::test]
async fn a_node_granted_one_endpoint_calls_it_whatever_its_name() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(3));
    let p = ws.write(
        "p.yaml",
        &pipeline(
            &openai_endpoint("claude", &server.base_url(), KEY),
            "claude",
            ECHO_OPTIONS.replace("      ", "").as_str(),
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.served().len(), 3);
    assert_csv_rows_echoed(&ws);
}

#[tokio::test]
async fn a_node_granted_several_endpoints_must_name_one() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(2));
    let endpoints = openai_endpoint("fast", &server.base_url(), "key-fast")
        + &openai_endpoint("smart", &server.base_url(), "key-smart");
    let options = ECHO_OPTIONS.replace("      ", "");
    let unnamed = ws.write("p.yaml", &pipeline(&endpoints, "fast, smart", &options));
    let out = weir(&["validate", unnamed.to_str().unwrap()], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains(
            "p.yaml:14: transform `ask`: options.endpoint: is required: this node is granted 2 \
             endpoints (fast, smart); name the one to call"
        ),
        "{message}"
    );

    let named = ws.write(
        "named.yaml",
        &pipeline(
            &endpoints,
            "fast, smart",
            &format!("endpoint: smart\n{options}"),
        ),
    );
    let out = weir(&["run", named.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let served = server.served();
    assert_eq!(served.len(), 2);
    for s in &served {
        assert_eq!(s.authorization.as_deref(), Some("Bearer key-smart"));
    }
}
