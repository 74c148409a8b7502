//! Guests stay in their box: the real `weir` binary runs the chaos guest (a
//! test tool that misbehaves on purpose) and every misbehaving row must fail
//! alone, with an error that names the limit, while the other rows go on.

use crate::common::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;
use weir_test_llm_server::{Script, TestLlmServer};

fn pipeline(transform: &str) -> String {
    format!(
        "source:\n  path: rows.jsonl\ntransforms:\n  - name: chaos\n    component: {CHAOS}\n\
         {transform}    on_error:\n      path: failed.jsonl\nsinks:\n  - path: out.jsonl\n"
    )
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

fn write_rows(ws: &Workspace, rows: &[serde_json::Value]) {
    let source: String = rows.iter().map(|r| format!("{r}\n")).collect();
    ws.write("rows.jsonl", &source);
}

#[tokio::test]
async fn a_guest_log_flood_is_cut_at_its_cap_with_one_counted_mark() {
    let ws = Workspace::new();
    // 1 MB of log lines from one row, against a cap of 16 KiB a row.
    write_rows(
        &ws,
        &[
            json!({"id": 0, "act": "log", "size": 10_000, "count": 100}),
            json!({"id": 1}),
            json!({"id": 2, "act": "log", "text": "a line that fits"}),
        ],
    );
    let p = ws.write(
        "p.yaml",
        &pipeline("    limits:\n      log_kb_per_row: 16\n"),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.len() < 32 << 10,
        "{} bytes of stderr for 16 KiB of log",
        err.len()
    );
    assert_eq!(
        err.matches("truncated: the component logged").count(),
        1,
        "{err:.2000}"
    );
    assert!(
        err.contains(
            "the component logged 983616 bytes more than limits.log_kb_per_row allows \
             (16 KiB a row; rows in this call: 1); they were dropped"
        ),
        "{err:.2000}"
    );
    assert!(
        err.contains("a line that fits"),
        "other rows keep their log"
    );
    assert!(
        err.contains("  truncated 1 rows: guest log lines or attachments beyond"),
        "the summary counts the row: {err:.2000}"
    );
    assert_eq!(read_jsonl(&ws, "out.jsonl").len(), 3);
}

#[tokio::test]
async fn a_guest_attachment_flood_is_cut_at_its_cap_and_the_audit_database_stays_small() {
    let ws = Workspace::new();
    // Each of two rows attaches 100 values of 100 kB: 20 MB in all, against
    // a cap of 256 KiB a row.
    write_rows(
        &ws,
        &[
            json!({"id": 0, "act": "attach", "size": 100_000, "count": 100}),
            json!({"id": 1}),
            json!({"id": 2, "act": "attach", "size": 100_000, "count": 100}),
        ],
    );
    let p = ws.write(
        "p.yaml",
        &pipeline("    limits:\n      attach_kb_per_row: 256\n"),
    );
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("  truncated 2 rows: guest log lines or attachments beyond"),
        "{}",
        stderr(&out)
    );

    let database_bytes: u64 = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|end| std::fs::metadata(ws.path(&format!("weir-audit.sqlite{end}"))).ok())
        .map(|m| m.len())
        .sum();
    assert!(
        database_bytes < 2 << 20,
        "the audit database holds {database_bytes} bytes after a 20 MB flood"
    );

    let db = rusqlite::Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    let marks: Vec<(i64, String)> = audit_pairs(
        &ws,
        "SELECT state_id, value FROM node_state_attributes WHERE key = 'weir.truncated'",
    );
    assert_eq!(marks.len(), 2, "one mark for each flooding row: {marks:?}");
    let offered: u64 = (0..100)
        .map(|i| format!("k{i}").len() as u64 + 100_000)
        .sum();
    for (state, mark) in marks {
        let kept: u64 = db
            .query_row(
                "SELECT SUM(LENGTH(key) + LENGTH(value)) FROM node_state_attributes \
                 WHERE state_id = ?1 AND key != 'weir.truncated'",
                [state],
                |r| r.get(0),
            )
            .unwrap();
        let dropped: u64 = mark
            .strip_prefix("dropped ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected mark: {mark}"));
        assert!(kept <= 256 << 10, "{kept} bytes kept");
        assert_eq!(kept + dropped, offered, "every byte is kept or counted");
        assert!(
            mark.ends_with("beyond limits.attach_kb_per_row (256 KiB)"),
            "{mark}"
        );
    }
}

/// A line break, a forged summary line and terminal escape codes.
const FORGED: &str = "ok\n  failed   forged: 9 rows; first: row 0\r\u{1b}[2K\u{1b}[31mRED\u{1b}[0m";

#[tokio::test]
async fn guest_text_reaches_stderr_escaped_and_uncoloured() {
    let ws = Workspace::new();
    write_rows(
        &ws,
        &[
            json!({"id": 0, "act": "log", "text": FORGED}),
            json!({"id": 1, "act": "fail", "code": "chaos", "text": FORGED}),
        ],
    );
    let p = ws.write("p.yaml", &pipeline(""));
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    let err = stderr(&out);
    assert!(
        !err.contains('\u{1b}'),
        "no escape code on a stderr that is not a terminal: {err:?}"
    );
    assert!(!err.contains('\r'), "{err:?}");
    assert!(
        !err.lines().any(|l| l.starts_with("  failed   forged")),
        "a guest forged a summary line: {err}"
    );
    let shown = r"ok\n  failed   forged: 9 rows; first: row 0\r\u{1b}[2K\u{1b}[31mRED\u{1b}[0m";
    assert_eq!(
        err.matches(shown).count(),
        2,
        "the log line and the summary's first failure show the text escaped: {err}"
    );
    let kept = &read_jsonl(&ws, "failed.jsonl")[0];
    assert_eq!(
        kept["_error_message"], FORGED,
        "the on_error sink keeps the text as it was"
    );
}

#[tokio::test]
async fn a_row_that_fans_out_beyond_the_cap_fails_alone() {
    let ws = Workspace::new();
    write_rows(
        &ws,
        &[
            json!({"id": 0}),
            json!({"id": 1, "act": "fan", "n": 3}),
            json!({"id": 2, "act": "fan", "n": 10_001}),
            json!({"id": 3}),
        ],
    );
    // The default cap, 10 000 rows per input row.
    let p = ws.write("p.yaml", &pipeline(""));
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "rows set aside: {}",
        stderr(&out)
    );
    let written: Vec<i64> = read_jsonl(&ws, "out.jsonl")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(written, [0, 1, 1, 1, 3]);
    assert_eq!(
        failures(&ws),
        BTreeMap::from([(2, "fan_out_limit".to_string())])
    );
    let message = read_jsonl(&ws, "failed.jsonl")[0]["_error_message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("into 10001 rows")
            && message.contains("limit of 10000 (limits.max_rows_per_input)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_nodes_instances_share_one_memory_budget() {
    // The test LLM server (a test tool, not a model) answers after 300 ms,
    // so every row holds its memory while the others allocate theirs.
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(300),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let rows: Vec<_> = (0..16)
        .map(|i| json!({"id": i, "act": "hold", "mb": 40, "wait": "llm"}))
        .collect();
    write_rows(&ws, &rows);
    // Each instance may hold 48 MiB, so 16 rows in flight would hold 640 MiB
    // without the node's budget of 100 MiB.
    let p = ws.write(
        "p.yaml",
        &format!(
            "source:\n  path: rows.jsonl\nendpoints:\n  llm:\n    base_url: {}\n    \
             api_key: k\n    pool_size: 16\ntransforms:\n  - name: chaos\n    \
             component: {CHAOS}\n    endpoints: [llm]\n    limits:\n      memory_mb: 48\n      \
             node_memory_mb: 100\n    on_error:\n      path: failed.jsonl\n\
             sinks:\n  - path: out.jsonl\n",
            server.base_url()
        ),
    );
    let (out, peak_mib) = weir_measured(&["run", p.to_str().unwrap(), "--no-progress"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "rows set aside: {}",
        stderr(&out)
    );
    let failed = read_jsonl(&ws, "failed.jsonl");
    let written = read_jsonl(&ws, "out.jsonl");
    assert_eq!(failed.len() + written.len(), 16);
    assert!(!written.is_empty(), "rows that fit the budget ran");
    assert!(!failed.is_empty(), "rows beyond the budget failed");
    for row in &failed {
        assert_eq!(row["_error_code"], "guest_memory_limit");
        let message = row["_error_message"].as_str().unwrap();
        assert!(
            message.contains("node's budget of 100 MiB")
                && message.contains("limits.node_memory_mb"),
            "{message}"
        );
    }
    assert!(
        peak_mib < 400,
        "weir peaked at {peak_mib} MiB: the budget did not hold (the rows asked for 640 MiB)"
    );
}

#[tokio::test]
async fn a_node_whose_memory_budget_is_full_makes_rows_wait_rather_than_fail() {
    // The test LLM server (a test tool, not a model) echoes each prompt after
    // 50 ms: with a pool of 16, the node would start 16 instances of the
    // built-in `llm` component (over 1 MiB each) but its budget holds 8 MiB.
    // Rows whose requests are out wait without an instance (`parking.rs`);
    // the others take turns with the instances the budget holds.
    let server = TestLlmServer::start(Script {
        reply: weir_test_llm_server::Reply::Echo,
        latency: Duration::from_millis(50),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(
        &ws,
        60,
        "pool_size: 16",
        "limits:\n  node_memory_mb: 8",
        ECHO_OPTIONS,
    );
    let out = run_with_key(&p, &server.base_url()).await;
    let err = stderr(&out);
    assert!(out.status.success(), "every row waited its turn: {err}");
    let rows = read_csv(&ws.path("out.csv"));
    assert_eq!(rows.len(), 61);
    assert_eq!(&rows[60][2], echo_of(59));
    // Whether rows ever had to wait for an instance depends on how the
    // guest's runs and the answers interleave; if they did, it is said once.
    let said = err
        .matches("rows wait for an instance rather than start a new one")
        .count();
    assert!(said <= 1, "said once at most: {err}");
    if said == 1 {
        assert!(err.contains("limits.node_memory_mb: 8"), "{err}");
    }
}

/// Runs `weir` as `weir` does and also returns its peak resident memory in
/// MiB: the kernel's high-water mark, from `wait4`.
async fn weir_measured(args: &[&str]) -> (Output, u64) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        use std::os::unix::process::ExitStatusExt;
        // Reaped by `wait4` below, which std does not know of.
        #[allow(clippy::zombie_processes)]
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env(
                "WEIR_CACHE_DIR",
                std::env::temp_dir().join("weir-test-cache"),
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                pipe.read_to_end(&mut bytes).unwrap();
                bytes
            })
        };
        let stdout = drain(Box::new(child.stdout.take().unwrap()));
        let stderr = drain(Box::new(child.stderr.take().unwrap()));
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: rusage is plain data, and wait4 writes only into the two
        // locals it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(reaped, pid, "wait4 failed");
        let output = Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        };
        // Linux reports ru_maxrss in KiB.
        (output, usage.ru_maxrss as u64 / 1024)
    })
    .await
    .unwrap()
}

/// A row error must carry a code: an empty one is a broken contract, the same
/// in `weir run` and in `weir test`.
#[tokio::test]
async fn an_empty_error_code_is_refused_by_run_and_by_test_alike() {
    let ws = Workspace::new();
    ws.write(
        "rows.jsonl",
        "{\"id\":0,\"act\":\"fail\",\"code\":\"\",\"text\":\"no code\"}\n\
         {\"id\":1,\"act\":\"fail\",\"code\":\"mine\",\"text\":\"a code\"}\n",
    );
    let p = ws.write("p.yaml", &pipeline(""));
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let failed = failures(&ws);
    assert_eq!(failed[&0], "guest_contract_violation");
    assert_eq!(failed[&1], "mine");
    let message = read_jsonl(&ws, "failed.jsonl")[0]["_error_message"].to_string();
    assert!(
        message.contains("empty error code") && message.contains("no code"),
        "{message}"
    );

    let fixtures = ws.write(
        "fixtures.yaml",
        &format!(
            "component: {CHAOS}\noptions: {{}}\ncases:\n  - name: no code\n    \
             row: {{act: fail, code: \"\", text: x}}\n    expect:\n      \
             error: guest_contract_violation\n"
        ),
    );
    let out = weir(&["test", fixtures.to_str().unwrap()], &[]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.contains("1 passed, 0 failed"), "{text}");
}
