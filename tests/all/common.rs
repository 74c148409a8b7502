//! Helpers shared by the end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

pub const KEY: &str = "sk-weir-canary-4f1d2e";

pub struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }
}

/// The test LLM server (a test tool, not a model) answering every request
/// the way `reply` says, with no faults.
pub async fn server_replying(
    reply: weir_test_llm_server::Reply,
) -> weir_test_llm_server::TestLlmServer {
    weir_test_llm_server::TestLlmServer::start(weir_test_llm_server::Script {
        reply,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Sends `signal` (`INT`, `TERM`) to a running `weir`.
pub fn send_signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until `server` has been sent `n` requests, failing after 60 s.
pub async fn wait_until_served(server: &weir_test_llm_server::TestLlmServer, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.served().len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never reached {n} requests"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for a signalled `weir` to exit, failing after 60 s.
pub async fn finish(child: tokio::process::Child) -> Output {
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("weir did not stop")
        .unwrap()
}

/// Runs `weir` with the given environment (and nothing inherited that names a key).
pub async fn weir(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        );
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("weir did not finish within 120 s")
        .unwrap()
}

/// `weir ARGS` with its stdout on a pipe whose reading end was closed before
/// it started, as in `weir runs | head -0`: every write it makes there fails
/// with a broken pipe.
pub fn weir_into_a_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        .stdout(writer)
        .output()
        .unwrap()
}

/// `weir run PIPELINE` with the test key and the endpoint at `base_url`.
pub async fn run_with_key(pipeline: &Path, base_url: &str) -> Output {
    weir(
        &["run", pipeline.to_str().unwrap()],
        &[("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", base_url)],
    )
    .await
}

/// `weir run PIPELINE --resume --no-progress`, as `run_with_key`.
pub async fn resume_with_key(pipeline: &Path, base_url: &str) -> Output {
    weir(
        &[
            "run",
            pipeline.to_str().unwrap(),
            "--resume",
            "--no-progress",
        ],
        &[("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", base_url)],
    )
    .await
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn read_csv(path: &Path) -> Vec<csv::StringRecord> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let mut rows = vec![reader.headers().unwrap().clone()];
    rows.extend(reader.records().map(Result::unwrap));
    rows
}

pub fn pipeline_yaml(source: &str, sink: &str, pool_size: usize, options: &str) -> String {
    pipeline_with(
        source,
        sink,
        &format!("pool_size: {pool_size}\nmax_capacity_retry_seconds: 30"),
        "",
        options,
    )
}

/// A one-node `llm` pipeline; `endpoint` and `transform` are extra settings,
/// one per line, unindented.
pub fn pipeline_with(
    source: &str,
    sink: &str,
    endpoint: &str,
    transform: &str,
    options: &str,
) -> String {
    let indent = |text: &str, by: &str| {
        text.lines()
            .map(|l| format!("{by}{l}\n"))
            .collect::<String>()
    };
    format!(
        "source:\n  path: {source}\nendpoints:\n  llm:\n    base_url: ${{OPENAI_BASE_URL}}\n    \
         api_key: ${{OPENAI_API_KEY}}\n{}transforms:\n  - name: ask\n    component: llm\n    \
         endpoints: [llm]\n{}    options:\n{options}sinks:\n  - path: {sink}\n",
        indent(endpoint, "    "),
        indent(transform, "    "),
    )
}

/// Writes `rows` of `numbered_rows` to `in.csv` and a `pipeline_with` over
/// them into `out.csv` to `p.yaml`; the pipeline's path.
pub fn numbered_rows_pipeline(
    ws: &Workspace,
    rows: usize,
    endpoint: &str,
    transform: &str,
    options: &str,
) -> PathBuf {
    ws.write("in.csv", &numbered_rows(rows));
    ws.write(
        "p.yaml",
        &pipeline_with("in.csv", "out.csv", endpoint, transform, options),
    )
}

pub const ECHO_OPTIONS: &str =
    "      model: test-model\n      template: \"Q{{ row.id }}: {{ row.text }}\"\n";

pub fn numbered_rows(n: usize) -> String {
    let mut csv = String::from("id,text\n");
    for i in 0..n {
        csv.push_str(&format!(
            "{i},\"row {i}, with a comma and \"\"quotes\"\"\"\n"
        ));
    }
    csv
}

/// The answer the echo server gives row `i` of `numbered_rows`.
pub fn echo_of(i: usize) -> String {
    format!("echo: Q{i}: row {i}, with a comma and \"quotes\"")
}

/// Each row of the workspace's `out.csv` (id, text, answer) got the echo of
/// its own prompt.
pub fn assert_csv_rows_echoed(ws: &Workspace) {
    let rows = read_csv(&ws.path("out.csv"));
    for (i, row) in rows.iter().skip(1).enumerate() {
        assert_eq!(row[2], echo_of(i), "{row:?}");
    }
}

/// The rows of a JSON Lines file of the workspace; none if it does not exist.
pub fn read_jsonl(ws: &Workspace, name: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    std::fs::read_to_string(ws.path(name))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The chaos guest: a test tool that misbehaves on purpose where a row asks.
pub const CHAOS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../guests/dist/test-chaos.wasm"
);

/// Source id → error code, of the rows in the `failed.jsonl` error sink.
pub fn failures(ws: &Workspace) -> std::collections::BTreeMap<i64, String> {
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

/// The concurrency limit `run` learned, and whether a queue held it, from
/// the audit database `db` (read-only: a run may be writing it); `None`
/// until the run has recorded one.
pub fn learned_by_run(db: &Path, run: i64) -> Option<(u32, bool)> {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| {
            c.query_row(
                "SELECT concurrency_limit, held_by_queue FROM learned_limits WHERE run_id = ?1",
                [run],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .ok()
}

/// The one value `sql` selects from the workspace's default audit database.
pub fn audit_value<T: rusqlite::types::FromSql>(ws: &Workspace, sql: &str) -> T {
    let conn = rusqlite::Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Every row of two columns `sql` selects from the workspace's default
/// audit database, as pairs collected into `C` (a `Vec`, a map).
pub fn audit_pairs<A, B, C>(ws: &Workspace, sql: &str) -> C
where
    A: rusqlite::types::FromSql,
    B: rusqlite::types::FromSql,
    C: FromIterator<(A, B)>,
{
    let conn = rusqlite::Connection::open(ws.path("weir-audit.sqlite")).unwrap();
    conn.prepare(sql)
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The status of the audit database's latest run.
pub fn run_status(ws: &Workspace) -> String {
    audit_value::<String>(ws, "SELECT status FROM runs ORDER BY run_id DESC LIMIT 1")
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `weir run` ran to the end: 0 when every row succeeded, 2 when some were
/// failed, quarantined or discarded.
pub fn assert_finished(out: &Output) {
    assert!(matches!(out.status.code(), Some(0 | 2)), "{}", stderr(out));
}

/// The exit status says whether any row was set aside.
pub fn assert_exit_counts_set_aside(out: &Output, set_aside: usize) {
    let expected = if set_aside == 0 { 0 } else { 2 };
    assert_eq!(
        out.status.code(),
        Some(expected),
        "{set_aside} rows set aside: {}",
        stderr(out)
    );
}
