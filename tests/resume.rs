//! Crash safety: the real `weir` binary is killed with SIGKILL at random
//! moments, again and again, and resumed until the run ends. The sinks must
//! then hold every row exactly once, and the test LLM server's own log (a test
//! tool, not a model) must show that no answer the audit trail had recorded
//! was ever paid for again.

mod common;

use common::*;
use rusqlite::{Connection, OpenFlags};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::process::Stdio;
use std::time::Duration;
use weir_test_llm_server::{Fault, Reply, Script, TestLlmServer};

const ROWS: usize = 240;

fn is_poisoned(i: usize) -> bool {
    i % 17 == 5
}

fn source() -> String {
    (0..ROWS)
        .map(|i| {
            let text = if is_poisoned(i) {
                format!("POISON {i}")
            } else {
                format!("text {i}")
            };
            format!("{}\n", json!({"id": i, "text": text}))
        })
        .collect()
}

/// Two nodes; the second batches rows 20 at a time, so a kill often finds
/// rows the first node has answered waiting in its buffer.
const PIPELINE: &str = "\
source:
  path: rows.jsonl
endpoints:
  llm:
    base_url: ${OPENAI_BASE_URL}
    api_key: ${OPENAI_API_KEY}
    pool_size: 4
    max_retries: 6
transforms:
  - name: ask
    component: llm
    endpoints: [llm]
    on_error:
      path: failed.jsonl
    options:
      model: test-model
      template: \"Q{{ row.id }}: {{ row.text }}\"
      response_field: answer
  - name: again
    component: llm
    endpoints: [llm]
    batch:
      count: 20
      timeout_seconds: 1
    options:
      model: test-model
      template: \"R{{ row.id }}\"
      response_field: second
sinks:
  - path: out.jsonl
";

/// A small deterministic generator, so a failing run can be repeated from
/// the seed it prints.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Requests (by canonical hash) whose successful answer the audit database
/// holds: a resumed segment must never send them again.
fn recorded_answers(db: &std::path::Path) -> HashSet<String> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return HashSet::new();
    };
    let Ok(mut stmt) = conn.prepare(
        "SELECT c.request_sha256 FROM calls c WHERE c.status BETWEEN 200 AND 299
         AND EXISTS (SELECT 1 FROM payloads p WHERE p.run_id = c.run_id
                     AND p.sha256 = c.response_sha256)",
    ) else {
        return HashSet::new();
    };
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test]
async fn a_run_killed_at_random_moments_resumes_to_every_row_exactly_once() {
    let seed = std::env::var("WEIR_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("WEIR_KILL_SEED={seed}");
    let mut rng = Lcg(seed);
    let server = TestLlmServer::start(Script {
        reply: Reply::Echo,
        latency: Duration::from_millis(25),
        fault_rate: 0.05,
        fault_kinds: vec![Fault::Status(500), Fault::Status(503)],
        reject_marker: Some("POISON".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("rows.jsonl", &source());
    let pipeline = ws.write("p.yaml", PIPELINE);
    let db = ws.path("weir-audit.sqlite");
    let base_url = server.base_url();

    let (mut kills, mut resume, mut finished) = (0, false, None);
    let mut sent_before = 0;
    for _ in 0..60 {
        let replayable = recorded_answers(&db);
        let mut args = vec!["run", pipeline.to_str().unwrap(), "--no-progress"];
        if resume {
            args.push("--resume");
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .env("OPENAI_API_KEY", KEY)
            .env("OPENAI_BASE_URL", &base_url)
            .env(
                "WEIR_CACHE_DIR",
                std::env::temp_dir().join("weir-test-cache"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let kill_after = Duration::from_millis(150 + rng.below(700));
        let ended = tokio::time::timeout(kill_after, child.wait()).await;
        let status = match ended {
            Ok(status) => Some(status.unwrap()),
            Err(_) => {
                child.start_kill().unwrap();
                child.wait().await.unwrap();
                kills += 1;
                None
            }
        };
        let mut stderr = String::new();
        tokio::io::AsyncReadExt::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr)
            .await
            .unwrap();

        // What this segment sent: none of it may have had a recorded answer.
        let served = server.served();
        for s in &served[sent_before..] {
            let sha = weir::hashing::canonical_sha256(&s.body);
            assert!(
                !replayable.contains(&sha),
                "request `{}` was sent again although its answer was recorded (seed {seed})",
                s.user_message
            );
        }
        sent_before = served.len();

        match status {
            None => resume = true,
            // 2: finished, with the rows the server refused quarantined.
            Some(status) if status.code() == Some(2) => {
                finished = Some(stderr);
                break;
            }
            // Killed before the run began on any row: start it afresh.
            Some(_)
                if stderr.contains("nothing to resume") || stderr.contains("no unfinished run") =>
            {
                resume = false
            }
            Some(status) => panic!("weir failed ({status}), seed {seed}:\n{stderr}"),
        }
    }
    let summary = finished.unwrap_or_else(|| panic!("the run never finished (seed {seed})"));
    eprintln!("{kills} kills before the run finished");
    assert!(
        kills >= 3,
        "only {kills} kills landed; the test proved little (seed {seed})"
    );

    // Every row exactly once: answered in the sink, or refused in the
    // on_error sink, each with its own values.
    let written = read_jsonl(&ws, "out.jsonl");
    let failed = read_jsonl(&ws, "failed.jsonl");
    let mut seen = vec![0; ROWS];
    for row in &written {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        assert!(!is_poisoned(id));
        assert_eq!(row["answer"], format!("echo: Q{id}: text {id}"));
        assert_eq!(row["second"], format!("echo: R{id}"));
    }
    for row in &failed {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        assert!(is_poisoned(id), "row {id} failed: {row:?}");
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "rows not exactly once (seed {seed}): {:?}",
        seen.iter()
            .enumerate()
            .filter(|(_, n)| **n != 1)
            .collect::<Vec<_>>()
    );

    // The audit database: one run made of several segments, one outcome per row.
    let conn = Connection::open(&db).unwrap();
    let (run, status): (i64, String) = conn
        .query_row(
            "SELECT run_id, status FROM runs ORDER BY run_id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "completed_with_failures", "{summary}");
    let outcomes: BTreeMap<String, usize> = conn
        .prepare("SELECT outcome, count(*) FROM row_outcomes WHERE run_id = ?1 GROUP BY outcome")
        .unwrap()
        .query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let poisoned = (0..ROWS).filter(|&i| is_poisoned(i)).count();
    assert_eq!(
        outcomes,
        BTreeMap::from([
            ("completed".to_string(), ROWS - poisoned),
            ("quarantined".to_string(), poisoned)
        ])
    );
    let segments: i64 = conn
        .query_row(
            "SELECT count(*) FROM segments WHERE run_id = ?1",
            [run],
            |r| r.get(0),
        )
        .unwrap();
    assert!(segments >= 2, "{segments} segments");

    // `weir explain` tells the story of a row whose answer was replayed.
    let replayed_row: Option<i64> = conn
        .query_row(
            "SELECT row_index FROM calls WHERE run_id = ?1 AND replayed = 1 LIMIT 1",
            [run],
            |r| r.get(0),
        )
        .ok();
    let row = replayed_row.expect("some answer was replayed after a kill");
    let out = weir(
        &[
            "explain",
            &run.to_string(),
            &row.to_string(),
            "--audit",
            db.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let story = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        story.contains(&format!("row {row} · source line {}", row + 1)),
        "{story}"
    );
    assert!(
        story.contains("answered from the audit trail, not sent again"),
        "{story}"
    );
    assert!(story.contains("ended     completed"), "{story}");
    assert!(
        story.contains(&format!("\"text\":\"text {row}\"")),
        "{story}"
    );
}

/// Starts a run and kills it once some rows have their outcome.
async fn kill_midway(pipeline: &std::path::Path, db: &std::path::Path, base_url: &str) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", pipeline.to_str().unwrap(), "--no-progress"])
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", base_url)
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let done = || -> i64 {
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row("SELECT count(*) FROM row_outcomes", [], |r| r.get(0)))
            .unwrap_or(0)
    };
    for _ in 0..400 {
        if done() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(done() > 0, "no row finished");
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

#[tokio::test]
async fn a_resume_is_refused_when_the_pipeline_or_the_source_changed_and_says_what() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(20),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("rows.jsonl", &source().replace("POISON", "text"));
    let pipeline = ws.write("p.yaml", PIPELINE);
    let db = ws.path("weir-audit.sqlite");
    kill_midway(&pipeline, &db, &server.base_url()).await;
    let base_url = server.base_url();
    let env = [
        ("OPENAI_API_KEY", KEY),
        ("OPENAI_BASE_URL", base_url.as_str()),
    ];
    let args = ["run", pipeline.to_str().unwrap(), "--resume"];
    let resume = || weir(&args, &env);

    // Another template: the finished rows would disagree with the rest.
    ws.write(
        "p.yaml",
        &PIPELINE.replace("R{{ row.id }}", "S{{ row.id }}"),
    );
    let out = resume().await;
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("run 1 cannot be resumed: the pipeline changed since it started")
            && message.contains("transform `again`: its options changed"),
        "{message}"
    );

    // A comment changes nothing that matters; a changed source row does.
    ws.write("p.yaml", &format!("# edited\n{PIPELINE}"));
    let original = source().replace("POISON", "text");
    ws.write("rows.jsonl", &original.replacen("text 0", "text zero", 1));
    let out = resume().await;
    let message = stderr(&out);
    assert!(
        message.contains("the source changed since run 1 read it: row 0 (line 1)"),
        "{message}"
    );

    ws.write("rows.jsonl", &original);
    let out = resume().await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_jsonl(&ws, "out.jsonl").len(), ROWS);
    let out = resume().await;
    assert!(
        stderr(&out).contains("no unfinished run"),
        "{}",
        stderr(&out)
    );
}
