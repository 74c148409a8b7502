//! Bad input gets one clear error that says where and what, and never a
//! panic: each case runs the real `weir` binary (no endpoint is reached).

use crate::common::*;

const GOOD_NODE: &str = "transforms:\n  - name: ask\n    component: llm\n    endpoints: [llm]\n    \
                         options:\n      template: \"{{ row.text }}\"\n";
const ENDPOINT: &str = "endpoints:\n  llm:\n    base_url: http://127.0.0.1:9/v1\n    api_key: k\n";

struct Case {
    name: &'static str,
    files: Vec<(&'static str, Vec<u8>)>,
    pipeline: String,
    /// Text the error must contain.
    expect: &'static str,
}

fn pipeline(source: &str, middle: &str) -> String {
    format!("source:\n  path: {source}\n{ENDPOINT}{middle}sinks:\n  - path: out.jsonl\n")
}

fn cases() -> Vec<Case> {
    let csv = |text: &str| vec![("in.csv", text.as_bytes().to_vec())];
    let good_csv = || csv("id,text\n1,a\n");
    vec![
        Case {
            name: "an empty pipeline file",
            files: good_csv(),
            pipeline: "# nothing yet\n\n".into(),
            expect: "p.yaml: the file is empty: a pipeline file names a source, transforms and sinks",
        },
        Case {
            name: "a CSV given as the pipeline file",
            files: good_csv(),
            pipeline: "id,text\n1,a\n".into(),
            expect: "a pipeline file is a YAML mapping (`source:`, `transforms:`, `sinks:`); is",
        },
        Case {
            name: "malformed YAML",
            files: good_csv(),
            pipeline: "source:\n  path: in.csv\n  - oops\n".into(),
            expect: "p.yaml:3:",
        },
        Case {
            name: "unknown key",
            files: good_csv(),
            pipeline: pipeline("in.csv", &format!("{GOOD_NODE}    concurency: 3\n")),
            expect: "unknown field `concurency`",
        },
        Case {
            name: "wrong type",
            files: good_csv(),
            pipeline: pipeline("in.csv", &format!("{GOOD_NODE}    concurrency: many\n")),
            expect: "p.yaml:",
        },
        Case {
            name: "missing source file",
            files: vec![],
            pipeline: pipeline("nowhere.csv", GOOD_NODE),
            expect: "p.yaml:2:",
        },
        Case {
            name: "unknown option of the component",
            files: good_csv(),
            pipeline: pipeline("in.csv", &GOOD_NODE.replace("template", "templat")),
            expect: "unknown field `templat`",
        },
        Case {
            name: "template syntax error",
            files: good_csv(),
            pipeline: pipeline(
                "in.csv",
                &GOOD_NODE.replace("{{ row.text }}", "{{ row.text "),
            ),
            expect: "p.yaml:12: transform `ask`: options.template: syntax error",
        },
        Case {
            name: "an option of the wrong type",
            files: good_csv(),
            pipeline: pipeline("in.csv", &format!("{GOOD_NODE}      temperature: hot\n")),
            expect: "p.yaml:13: transform `ask`: options.temperature: invalid type",
        },
        Case {
            name: "a file that is not WebAssembly",
            files: vec![
                ("in.csv", b"id,text\n1,a\n".to_vec()),
                ("bad.wasm", b"not wasm".to_vec()),
            ],
            pipeline: pipeline(
                "in.csv",
                &GOOD_NODE.replace("component: llm", "component: bad.wasm"),
            ),
            expect: "bad.wasm is not a WebAssembly file: it begins with \"not wasm\"",
        },
        Case {
            name: "a core module, not a component",
            files: vec![
                ("in.csv", b"id,text\n1,a\n".to_vec()),
                ("core.wasm", b"\0asm\x01\0\0\0".to_vec()),
            ],
            pipeline: pipeline(
                "in.csv",
                &GOOD_NODE.replace("component: llm", "component: core.wasm"),
            ),
            expect: "core.wasm",
        },
        Case {
            name: "a CSV with two columns of one name",
            files: csv("id,id\n1,2\n"),
            pipeline: pipeline("in.csv", GOOD_NODE),
            expect: "in.csv:1: the header names column `id` twice",
        },
        Case {
            name: "a quote that never closes, and no on_error",
            files: csv(&stray_quote_csv()),
            pipeline: pipeline("in.csv", GOOD_NODE),
            expect: "in.csv:8: the quoted field that opens at column 4 is never closed",
        },
        Case {
            name: "a quote inside a quoted field, and no on_error",
            files: csv("id,text,label\nr4,fine,OK\nr5,\"He said \"hi\" there\",NEUTRAL\n"),
            pipeline: pipeline("in.csv", GOOD_NODE),
            expect: "in.csv:3: the quoted field that opens at column 4 closes at column 13 but `h` \
                     follows the closing quote",
        },
        Case {
            name: "a JSON Lines line that is not JSON, and no on_error",
            files: vec![("in.jsonl", b"{\"text\":\"a\"}\n{\"text\": oops}\n".to_vec())],
            pipeline: pipeline("in.jsonl", GOOD_NODE),
            expect: "in.jsonl:2: invalid JSON",
        },
        Case {
            name: "a sink over the source",
            files: good_csv(),
            pipeline: format!(
                "source:\n  path: in.csv\n{ENDPOINT}{GOOD_NODE}sinks:\n  - path: ./in.csv\n"
            ),
            expect: "p.yaml:14: a sink `",
        },
        Case {
            name: "two sinks on one file",
            files: good_csv(),
            pipeline: format!(
                "source:\n  path: in.csv\n{ENDPOINT}{GOOD_NODE}sinks:\n  - path: out.csv\n  - path: sub/../out.csv\n"
            ),
            expect: "is the same file as a sink (line 14); each would overwrite the other",
        },
        Case {
            name: "a sink that is also the on_error sink",
            files: good_csv(),
            pipeline: format!(
                "source:\n  path: in.csv\non_error:\n  path: out.jsonl\n{ENDPOINT}{GOOD_NODE}sinks:\n  - path: out.jsonl\n"
            ),
            expect: "p.yaml:3: an on_error sink `",
        },
        Case {
            name: "a budget without prices",
            files: good_csv(),
            pipeline: format!("budget_usd: 5\n{}", pipeline("in.csv", GOOD_NODE)),
            expect: "p.yaml:1: budget_usd needs a price on every endpoint, and endpoint `llm` has none",
        },
        Case {
            name: "a response cache over the source",
            files: good_csv(),
            pipeline: pipeline("in.csv", GOOD_NODE)
                .replace("api_key: k\n", "api_key: k\n    cache: in.csv\n"),
            expect: "a response cache `",
        },
        Case {
            name: "the audit database over the source",
            files: good_csv(),
            pipeline: format!("{}audit:\n  path: in.csv\n", pipeline("in.csv", GOOD_NODE)),
            expect: "the audit database `",
        },
    ]
}

/// 100 rows of `id,text`, never quoted, but line 8 opens a quote it never closes.
fn stray_quote_csv() -> String {
    let mut text = String::from("id,text\n");
    for i in 0..100 {
        if i == 6 {
            text.push_str("r6,\"Broken quote I love it\n");
        } else {
            text.push_str(&format!("r{i},review number {i}\n"));
        }
    }
    text
}

#[tokio::test]
async fn each_bad_input_gets_one_located_error_and_no_panic() {
    for case in cases() {
        let ws = Workspace::new();
        for (name, bytes) in &case.files {
            let path = ws.path(name);
            std::fs::write(path, bytes).unwrap();
        }
        let p = ws.write("p.yaml", &case.pipeline);
        for command in ["validate", "run"] {
            let out = weir(
                &[command, p.to_str().unwrap(), "--no-progress"]
                    [..if command == "run" { 3 } else { 2 }],
                &[],
            )
            .await;
            let message = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{}: {command}: {message}",
                case.name
            );
            assert!(
                message.contains(case.expect),
                "{}: {command}: {message}",
                case.name
            );
            assert!(!message.contains("panicked"), "{}: {message}", case.name);
            let errors = message.lines().filter(|l| l.starts_with("error:")).count();
            assert_eq!(errors, 1, "{}: one error: {message}", case.name);
            for (name, bytes) in &case.files {
                assert_eq!(
                    &std::fs::read(ws.path(name)).unwrap(),
                    bytes,
                    "{}: {command} changed {name}",
                    case.name
                );
            }
            for output in ["out.jsonl", "out.jsonl.partial"] {
                assert!(
                    !ws.path(output).exists(),
                    "{}: {command} wrote {output}",
                    case.name
                );
            }
        }
    }
}

#[tokio::test]
async fn a_stray_quote_costs_its_own_row_and_the_run_goes_on_with_on_error() {
    let server = server_replying(weir_test_llm_server::Reply::Echo).await;
    let ws = Workspace::new();
    ws.write("in.csv", &stray_quote_csv());
    let p = ws.write(
        "p.yaml",
        &format!(
            "on_error:\n  path: rejected.jsonl\n{}",
            pipeline_with("in.csv", "out.csv", "", "", ECHO_OPTIONS)
        ),
    );
    let out = run_with_key(&p, &server.base_url()).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let written = read_csv(&ws.path("out.csv"));
    let ids: Vec<&str> = written[1..].iter().map(|r| &r[0]).collect();
    let expected: Vec<String> = (0..100)
        .filter(|&i| i != 6)
        .map(|i| format!("r{i}"))
        .collect();
    assert_eq!(ids, expected, "every other row, each once, in order");
    let rejected = read_jsonl(&ws, "rejected.jsonl");
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["_source_row"], 6);
    let message = rejected[0]["_error_message"].as_str().unwrap();
    assert!(
        message.contains("in.csv:8: the quoted field that opens at column 4 is never closed")
            && message.ends_with("r6,\"Broken quote I love it"),
        "{message}"
    );
    assert_eq!(server.served().len(), 99);
}

#[tokio::test]
async fn bad_rows_fail_alone_and_the_rest_of_the_run_goes_on() {
    // A ragged row, a row that is not UTF-8 and a 2 MB field, among good rows.
    let mut source = b"id,text\n1,fine\n2,ragged,extra\n3,".to_vec();
    source.extend_from_slice(&[0xff, 0xfe, b'\n']);
    source.extend_from_slice(b"4,also fine\n5,");
    source.extend_from_slice("x".repeat(2 << 20).as_bytes());
    source.extend_from_slice(b"\n");
    let server = weir_test_llm_server::TestLlmServer::start(Default::default())
        .await
        .unwrap();
    let ws = Workspace::new();
    std::fs::write(ws.path("in.csv"), &source).unwrap();
    let p = ws.write(
        "p.yaml",
        &format!(
            "source:\n  path: in.csv\non_error:\n  path: failed.jsonl\nendpoints:\n  llm:\n    \
             base_url: {}\n    api_key: k\ntransforms:\n  - name: ask\n    component: llm\n    \
             endpoints: [llm]\n    options:\n      template: \"{{{{ row.text }}}}\"\n\
             sinks:\n  - path: out.jsonl\n",
            server.base_url()
        ),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let ids = |name: &str| -> Vec<String> {
        std::fs::read_to_string(ws.path(name))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let row: serde_json::Value = serde_json::from_str(l).unwrap();
                row["_source_row"]
                    .as_u64()
                    .map(|r| format!("row {r}"))
                    .unwrap_or_else(|| row["id"].as_str().unwrap().to_string())
            })
            .collect()
    };
    // weir reads, renders and sends the 2 MB row; the server refuses a body
    // that large (as providers refuse an overlong prompt), and only that row fails.
    assert_eq!(ids("out.jsonl"), ["1", "4"]);
    assert_eq!(ids("failed.jsonl"), ["row 1", "row 2", "row 4"]);
    let failed: Vec<serde_json::Value> = std::fs::read_to_string(ws.path("failed.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reason = |i: usize| {
        format!(
            "{}: {}",
            failed[i]["_error_code"].as_str().unwrap(),
            failed[i]["_error_message"].as_str().unwrap()
        )
    };
    let located =
        |i: usize| reason(i).replace(&format!("{}", ws.path("in.csv").display()), "in.csv");
    assert_eq!(
        located(0),
        "source_invalid: in.csv:3: the row has 3 fields but the header has 2"
    );
    assert_eq!(
        located(1),
        "source_invalid: in.csv:4: field `text` is not valid UTF-8 (if the file is in another \
         encoding, give it as source.encoding, e.g. windows-1252)"
    );
    assert!(
        reason(2).starts_with("llm_call_failed: HTTP 413"),
        "{}",
        reason(2)
    );
}

#[tokio::test]
async fn an_audit_database_given_over_the_source_is_refused() {
    let ws = Workspace::new();
    ws.write("in.csv", "id,text\n1,a\n");
    let p = ws.write("p.yaml", &pipeline("in.csv", GOOD_NODE));
    let source = ws.path("in.csv");
    let out = weir(
        &[
            "run",
            p.to_str().unwrap(),
            "--audit",
            source.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("is the same file as the source"),
        "{message}"
    );
    assert_eq!(ws.read("in.csv"), "id,text\n1,a\n");
}

#[tokio::test]
async fn validate_needs_no_secrets_and_says_which_are_missing() {
    let ws = Workspace::new();
    ws.write("in.csv", "id,text\n1,a\n");
    let p = ws.write(
        "p.yaml",
        &pipeline_with("in.csv", "out.csv", "", "", ECHO_OPTIONS).replace(
            "${OPENAI_BASE_URL}",
            "${OPENAI_BASE_URL:-http://127.0.0.1:9/v1}",
        ),
    );
    let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text.contains("note    OPENAI_API_KEY is not set; `weir run` will need it"),
        "{text}"
    );
    assert!(
        !text.contains("OPENAI_BASE_URL"),
        "a default stands in: {text}"
    );
    let run = weir(&["run", p.to_str().unwrap()], &[]).await;
    assert_eq!(run.status.code(), Some(1));
    assert!(stderr(&run).contains("environment variable OPENAI_API_KEY is not set"));
}

/// Numbers no duration or guest limit can sensibly be (more than a year,
/// more than a 32-bit guest's 4 GiB), each refused at its line by `validate`
/// and `run` alike, where some used to panic building a duration.
#[tokio::test]
async fn durations_and_sizes_beyond_sense_are_refused_at_their_line() {
    let endpoint = |setting: &str| {
        format!(
            "source:\n  path: in.csv\n{ENDPOINT}    {setting}\n{GOOD_NODE}sinks:\n  - path: out.jsonl\n"
        )
    };
    let node = |setting: &str| pipeline("in.csv", &format!("{GOOD_NODE}    {setting}\n"));
    let cases = [
        (
            endpoint("request_timeout_seconds: 1e30"),
            "p.yaml:7: endpoint `llm`: request_timeout_seconds must be a positive number of seconds, at most 31536000 (one year); got 1e30",
        ),
        (
            endpoint("connect_timeout_seconds: 99999999999999999999"),
            "p.yaml:7: endpoint `llm`: connect_timeout_seconds must be a positive number of seconds, at most 31536000 (one year); got 1e20",
        ),
        (
            endpoint("max_capacity_retry_seconds: 1e30"),
            "p.yaml:7: endpoint `llm`: max_capacity_retry_seconds must",
        ),
        (
            endpoint("breaker_cooldown_seconds: 1e30"),
            "p.yaml:7: endpoint `llm`: breaker_cooldown_seconds must",
        ),
        (
            node("row_deadline_seconds: 1e30"),
            "p.yaml:13: row_deadline_seconds must be a positive number of seconds, at most 31536000 (one year); got 1e30",
        ),
        (
            node("batch:\n      count: 2\n      timeout_seconds: 1e30"),
            "p.yaml:15: batch.timeout_seconds must",
        ),
        (
            node("limits:\n      output_mb_per_row: 1e30"),
            "p.yaml:14: limits.output_mb_per_row must be a positive number, at most 4096",
        ),
        (
            node("limits:\n      memory_mb: 1000000"),
            "p.yaml:14: limits.memory_mb must be at most 4096",
        ),
    ];
    for (yaml, expect) in cases {
        let ws = Workspace::new();
        ws.write("in.csv", "id,text\n1,a\n");
        let p = ws.write("p.yaml", &yaml);
        for command in [vec!["validate"], vec!["run", "--no-progress"]] {
            let mut args = command.clone();
            args.insert(1, p.to_str().unwrap());
            let out = weir(&args, &[]).await;
            let message = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{command:?}: {message}");
            assert!(message.contains(expect), "{command:?}: {message}");
            assert!(!message.contains("panicked"), "{message}");
        }
    }
}
