//! Crash safety: the real `weir` binary is killed with SIGKILL at random
//! moments, again and again, and resumed until the run ends. The sinks must
//! then hold every row exactly once, and the test LLM server's own log (a test
//! tool, not a model) must show that no answer the audit trail had recorded
//! was ever paid for again.

use crate::common::*;
use rusqlite::{Connection, OpenFlags};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
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

/// Answers the audit database holds so far (0 before it exists).
fn answered_calls(db: &std::path::Path) -> u64 {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return 0;
    };
    conn.query_row(
        "SELECT count(*) FROM calls WHERE status BETWEEN 200 AND 299",
        [],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

/// Waits for `child` to exit (its status), or, with `kill_at`, until the
/// audit database holds that many answers (None: time to kill it). Gives up
/// waiting after 120 s.
async fn run_until(
    child: &mut tokio::process::Child,
    db: &std::path::Path,
    kill_at: Option<u64>,
) -> Option<std::process::ExitStatus> {
    let give_up = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        let reached = kill_at.is_some_and(|n| answered_calls(db) >= n);
        if reached || std::time::Instant::now() > give_up {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Requests (by canonical hash) whose successful answer the audit database
/// holds: a resumed segment must never send them again.
fn recorded_answers(db: &std::path::Path) -> HashSet<String> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return HashSet::new();
    };
    let Ok(mut stmt) = conn.prepare(
        "SELECT lower(hex(c.request_sha256)) FROM calls c WHERE c.status BETWEEN 200 AND 299
         AND EXISTS (SELECT 1 FROM row_payloads p WHERE p.run_id = c.run_id
                     AND p.row_index = c.row_index)",
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
    for attempt in 0..60 {
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
        // Kills land at random moments of the run's own progress: after a
        // random number of answers more have been recorded, so they fall
        // mid-run however fast or slow the machine is. After a dozen, the run
        // is left to finish.
        let kill_at = match attempt {
            0..12 => Some(answered_calls(&db) + 1 + rng.below(60)),
            _ => None,
        };
        let status = match run_until(&mut child, &db, kill_at).await {
            Some(status) => Some(status),
            None => {
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
    let args = ["run", pipeline.to_str().unwrap(), "--no-progress"];
    kill_midway_in(&std::env::current_dir().unwrap(), &args, db, base_url).await
}

/// `weir ARGS`, started in `dir`, killed once some rows have their outcome
/// in `db`.
async fn kill_midway_in(dir: &Path, args: &[&str], db: &Path, base_url: &str) {
    let done = || -> i64 {
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row("SELECT count(*) FROM row_outcomes", [], |r| r.get(0)))
            .unwrap_or(0)
    };
    kill_once_in(dir, args, base_url, || done() > 0).await;
    assert!(done() > 0, "no row finished");
}

/// `weir ARGS`, started in `dir`, killed once `reached` holds, or after
/// 30 s: long enough for a cold component cache on a loaded machine.
async fn kill_once_in(dir: &Path, args: &[&str], base_url: &str, reached: impl Fn() -> bool) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", base_url)
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..3000 {
        if reached() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

    // A comment changes nothing that matters; a changed source does.
    ws.write("p.yaml", &format!("# edited\n{PIPELINE}"));
    let original = source().replace("POISON", "text");
    ws.write("rows.jsonl", &original.replacen("text 0", "text zero", 1));
    let out = resume().await;
    let message = stderr(&out);
    assert!(
        message.contains(&format!(
            "the source {} changed since segment 1 of run 1 began reading it: its size was {} \
             bytes and is {} now",
            ws.path("rows.jsonl").display(),
            original.len(),
            original.len() + 3
        )) && message.contains("resume with `--allow-changed-source`"),
        "{message}"
    );
    // Even then, a row the run has done must be what it was.
    let allowing = weir(
        &[
            "run",
            pipeline.to_str().unwrap(),
            "--resume",
            "--allow-changed-source",
        ],
        &env,
    )
    .await;
    let message = stderr(&allowing);
    assert!(
        message.contains("the source changed since run 1 read it: row 0 (line 1)"),
        "{message}"
    );

    // Written again as it was: the content is what the run read, although
    // the file's modification time is not.
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

/// `weir ARGS` started in `dir`, with the test key and endpoint.
async fn weir_in(dir: &Path, args: &[&str], base_url: &str) -> std::process::Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", base_url)
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("weir did not finish within 120 s")
        .unwrap()
}

/// Every row of `source()` exactly once: answered in `out`, or refused into
/// `failed`, each with its own values. (A run that sets rows aside this way
/// exits 2.)
fn assert_every_row_once(ws: &Workspace, out: &str, failed: &str) {
    let mut seen = vec![0; ROWS];
    for row in read_jsonl(ws, out) {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        assert!(!is_poisoned(id));
        assert_eq!(row["answer"], format!("echo: Q{id}: text {id}"));
        assert_eq!(row["second"], format!("echo: R{id}"));
    }
    for row in read_jsonl(ws, failed) {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        assert!(is_poisoned(id), "row {id} failed: {row:?}");
    }
    let wrong: Vec<_> = seen.iter().enumerate().filter(|(_, n)| **n != 1).collect();
    assert!(wrong.is_empty(), "rows not exactly once: {wrong:?}");
}

async fn slow_rejecting_server() -> TestLlmServer {
    TestLlmServer::start(Script {
        latency: Duration::from_millis(20),
        reject_marker: Some("POISON".into()),
        ..Script::default()
    })
    .await
    .unwrap()
}

/// `weir run sub/p.yaml --audit sub/a.sqlite`, started in the workspace and
/// killed midway: a run whose pipeline names its files relative to itself.
async fn killed_relative_run(ws: &Workspace, base_url: &str) {
    ws.write("sub/rows.jsonl", &source());
    ws.write("sub/p.yaml", PIPELINE);
    let args = [
        "run",
        "sub/p.yaml",
        "--audit",
        "sub/a.sqlite",
        "--no-progress",
    ];
    kill_midway_in(&ws.path(""), &args, &ws.path("sub/a.sqlite"), base_url).await;
}

#[tokio::test]
async fn a_run_started_with_relative_paths_resumes_from_any_directory() {
    let server = slow_rejecting_server().await;
    let base_url = server.base_url();
    // Each way of resuming gets its own killed run.
    let resumed = |form: usize| {
        let base_url = base_url.clone();
        async move {
            let ws = Workspace::new();
            killed_relative_run(&ws, &base_url).await;
            let elsewhere = ws.path("elsewhere");
            std::fs::create_dir_all(&elsewhere).unwrap();
            let (pipeline, db) = (ws.path("sub/p.yaml"), ws.path("sub/a.sqlite"));
            let (pipeline, db) = (pipeline.to_str().unwrap(), db.to_str().unwrap());
            let (dir, args) = match form {
                0 => (
                    ws.path(""),
                    vec!["run", "sub/p.yaml", "--audit", "sub/a.sqlite", "--resume"],
                ),
                1 => (elsewhere, vec!["run", pipeline, "--audit", db, "--resume"]),
                _ => (elsewhere, vec!["resume", "1", "--audit", db]),
            };
            let out = weir_in(&dir, &args, &base_url).await;
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
            assert_every_row_once(&ws, "sub/out.jsonl", "sub/failed.jsonl");
        }
    };
    tokio::join!(resumed(0), resumed(1), resumed(2));
}

#[tokio::test]
async fn a_run_an_older_weir_recorded_with_relative_paths_resumes_from_its_directory() {
    let server = slow_rejecting_server().await;
    let base_url = server.base_url();
    let ws = Workspace::new();
    killed_relative_run(&ws, &base_url).await;
    // What weir wrote before audit schema 5, for the same run: paths as the
    // pipeline file gave them, relative to the directory it was started
    // from, and no stamp of the source.
    let db = ws.path("sub/a.sqlite");
    let conn = Connection::open(&db).unwrap();
    let root = std::fs::canonicalize(ws.path("")).unwrap();
    let relative = |path: String| {
        Path::new(&path)
            .strip_prefix(&root)
            .unwrap()
            .display()
            .to_string()
    };
    let checkpoints: Vec<String> = conn
        .prepare("SELECT path FROM sink_checkpoints")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for path in checkpoints {
        conn.execute(
            "UPDATE sink_checkpoints SET path = ?2 WHERE path = ?1",
            [&path, &relative(path.clone())],
        )
        .unwrap();
    }
    conn.execute_batch(
        "UPDATE runs SET source_path = 'sub/rows.jsonl',
             sinks_json = '{\"sinks\":[\"sub/out.jsonl\"],\"on_error\":[\"sub/failed.jsonl\"]}';
         UPDATE row_outcomes SET error_sink = 'sub/failed.jsonl' WHERE error_sink IS NOT NULL;
         ALTER TABLE segments DROP COLUMN source_size;
         ALTER TABLE segments DROP COLUMN source_mtime_ns;
         ALTER TABLE segments DROP COLUMN source_sha256;
         ALTER TABLE calls DROP COLUMN provider_batch;
         DROP TABLE provider_batches;
         DROP TABLE batch_requests;
         DROP TABLE learned_limits;
         ALTER TABLE runs DROP COLUMN shards_at_once;
         PRAGMA user_version = 4;",
    )
    .unwrap();
    drop(conn);

    // From another directory the relative paths name other files.
    let elsewhere = ws.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let pipeline = ws.path("sub/p.yaml");
    let args = [
        "run",
        pipeline.to_str().unwrap(),
        "--audit",
        db.to_str().unwrap(),
        "--resume",
    ];
    let out = weir_in(&elsewhere, &args, &base_url).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains(
            "it was sub/rows.jsonl (relative to the directory the run was started from: resume \
             it from there)"
        ),
        "{message}"
    );

    // From the directory it was started from, it resumes, and is recorded
    // with absolute paths from then on.
    let args = ["run", "sub/p.yaml", "--audit", "sub/a.sqlite", "--resume"];
    let out = weir_in(&ws.path(""), &args, &base_url).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_every_row_once(&ws, "sub/out.jsonl", "sub/failed.jsonl");
    let conn = Connection::open(&db).unwrap();
    let (source, status): (String, String) = conn
        .query_row("SELECT source_path, status FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(source, root.join("sub/rows.jsonl").display().to_string());
    assert_eq!(status, "completed_with_failures");
    let relative_left: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM sink_checkpoints WHERE path NOT LIKE '/%')
                  + (SELECT count(*) FROM row_outcomes WHERE error_sink NOT LIKE '/%')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(relative_left, 0);
}

/// Rows enough that a run killed at its first outcomes has not read them all.
const MANY_ROWS: usize = 1500;

const ONE_NODE: &str = "\
source:
  path: rows.jsonl
endpoints:
  llm:
    base_url: ${OPENAI_BASE_URL}
    api_key: ${OPENAI_API_KEY}
    pool_size: 8
transforms:
  - name: ask
    component: llm
    endpoints: [llm]
    options:
      model: test-model
      template: \"Q{{ row.id }}: {{ row.text }}\"
      response_field: answer
sinks:
  - path: out.jsonl
";

fn many_rows() -> String {
    (0..MANY_ROWS)
        .map(|i| format!("{}\n", json!({"id": i, "text": format!("text {i}")})))
        .collect()
}

fn rows_recorded(db: &Path) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row("SELECT count(*) FROM rows", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn rows_changed_where_the_killed_run_had_not_read_are_noticed() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(5),
        ..Script::default()
    })
    .await
    .unwrap();
    let base_url = server.base_url();
    let ws = Workspace::new();
    let source = ws.write("rows.jsonl", &many_rows());
    let pipeline = ws.write("p.yaml", ONE_NODE);
    let db = ws.path("weir-audit.sqlite");
    kill_midway(&pipeline, &db, &base_url).await;
    assert!(
        rows_recorded(&db) < MANY_ROWS as i64,
        "the killed run read every row; the test would prove nothing"
    );

    // The last row, which the run had not read, is edited.
    let last = MANY_ROWS - 1;
    let before = std::fs::read_to_string(&source).unwrap();
    let edited = before.replace(
        &format!("\"text {last}\""),
        &format!("\"text {last}, edited\""),
    );
    std::fs::write(&source, &edited).unwrap();
    let resume = ["run", pipeline.to_str().unwrap(), "--resume"];
    let out = weir_in(&ws.path(""), &resume, &base_url).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains(&format!(
            "run 1 cannot be resumed: the source {} changed since segment 1 of run 1 began \
             reading it: its size was {} bytes and is {} now (it was last modified at ",
            source.display(),
            before.len(),
            edited.len()
        )),
        "{message}"
    );
    assert!(
        message.contains("resume with `--allow-changed-source`: the rows already done are kept"),
        "{message}"
    );
    assert!(!ws.path("out.jsonl").exists());

    // Allowed: the rows done stay as they were, the others are read as the
    // file is now.
    let allowing = [&resume[..], &["--allow-changed-source"]].concat();
    let out = weir_in(&ws.path(""), &allowing, &base_url).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("changed since segment 1"),
        "{}",
        stderr(&out)
    );
    let written = read_jsonl(&ws, "out.jsonl");
    let mut seen = vec![0; MANY_ROWS];
    for row in &written {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        let text = if id == last {
            format!("text {id}, edited")
        } else {
            format!("text {id}")
        };
        assert_eq!(row["answer"], format!("echo: Q{id}: {text}"));
    }
    assert!(seen.iter().all(|&n| n == 1));
}

#[tokio::test]
async fn a_same_size_edit_that_kept_the_modification_time_is_noticed_by_the_content_hash() {
    let server = slow_rejecting_server().await;
    let base_url = server.base_url();
    let ws = Workspace::new();
    let source_file = ws.write("rows.jsonl", &source());
    let pipeline = ws.write("p.yaml", PIPELINE);
    let db = ws.path("weir-audit.sqlite");
    kill_midway(&pipeline, &db, &base_url).await;
    let conn = Connection::open(&db).unwrap();
    let read_whole: bool = conn
        .query_row(
            "SELECT source_sha256 IS NOT NULL FROM segments WHERE segment = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(read_whole, "the killed run read the whole source first");
    let last = ROWS - 1;
    let last_done: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM row_outcomes WHERE row_index = ?1",
            [last],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!last_done, "the test edits a row the run has not done");

    // An edit of the same size, with the modification time put back.
    let modified = std::fs::metadata(&source_file).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&source_file)
        .unwrap()
        .replace(&format!("\"text {last}\""), &format!("\"TEXT {last}\""));
    std::fs::write(&source_file, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&source_file)
        .unwrap()
        .set_modified(modified)
        .unwrap();

    let out = weir_in(&ws.path(""), &["run", "p.yaml", "--resume"], &base_url).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("began reading it: its content is not what it was (sha256 "),
        "{message}"
    );
    // Refused before the resume began on any row.
    let segments: i64 = conn
        .query_row("SELECT count(*) FROM segments", [], |r| r.get(0))
        .unwrap();
    assert_eq!(segments, 1);

    // `weir resume` takes the change too, when asked to.
    let db_arg = db.to_str().unwrap();
    let args = ["resume", "1", "--audit", db_arg, "--allow-changed-source"];
    let out = weir_in(&ws.path(""), &args, &base_url).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let rows = read_jsonl(&ws, "out.jsonl");
    let row = rows
        .iter()
        .find(|r| r["id"] == last)
        .expect("the last row is written");
    assert_eq!(row["answer"], format!("echo: Q{last}: TEXT {last}"));
}

/// A resume starts from the limit its killed process learned, as a new
/// run does from an earlier run's, rather than slow-starting again from 4
/// against a server it had already measured.
#[tokio::test]
async fn a_resume_starts_from_the_limit_its_killed_process_learned() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(100),
        capacity: Some(24),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(2400));
    let yaml = pipeline_with("in.csv", "out.jsonl", "pool_size: 128", "", ECHO_OPTIONS);
    let pipeline = ws.write("p.yaml", &yaml);
    let db = ws.path("weir-audit.sqlite");
    let learned = || learned_by_run(&db, 1).map(|(limit, _)| limit);
    // A run records what its limit learned every 5 s.
    let args = ["run", pipeline.to_str().unwrap(), "--no-progress"];
    let here = std::env::current_dir().unwrap();
    kill_once_in(&here, &args, &server.base_url(), || learned().is_some()).await;
    let limit = learned().expect("the killed process recorded no learned limit");
    assert!(limit > 8, "the killed process learned {limit}");
    let resumed = resume_with_key(&pipeline, &server.base_url()).await;
    let summary = stderr(&resumed);
    assert_eq!(resumed.status.code(), Some(0), "{summary}");
    let start = limit * 3 / 4;
    assert!(
        summary.contains(&format!(
            "concurrency limit started at {start}, from the {limit} run 1 learned against the \
             same endpoint"
        )),
        "{summary}"
    );
}

/// `--limit N` takes N rows not done before and stops as an interrupted run
/// does: a resume (limited again, or not) goes on with the rest, and no row
/// is asked for twice. The audit database holds every segment in its file
/// alone once the run ends: nothing is left in a write-ahead log beside it.
#[tokio::test]
async fn a_limited_run_takes_its_rows_and_resumes_go_on_without_asking_twice() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 100, "", "", ECHO_OPTIONS);
    let env = [
        ("OPENAI_API_KEY", KEY),
        ("OPENAI_BASE_URL", &server.base_url()),
    ];
    let path = p.to_str().unwrap();
    let first = weir(&["run", path, "--limit", "10"], &env).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("--limit 10: as many rows as asked for are done"),
        "{}",
        stderr(&first)
    );
    assert_eq!(server.served().len(), 10);
    assert_eq!(
        read_csv(&ws.path("out.csv.partial")).len(),
        11,
        "a header and 10 rows"
    );

    let more = weir(&["run", path, "--resume", "--limit", "30"], &env).await;
    assert_eq!(more.status.code(), Some(0), "{}", stderr(&more));
    assert_eq!(server.served().len(), 40);
    let rest = weir(&["run", path, "--resume"], &env).await;
    assert_eq!(rest.status.code(), Some(0), "{}", stderr(&rest));
    assert_eq!(server.served().len(), 100, "no row asked for twice");
    let ids: Vec<usize> = read_csv(&ws.path("out.csv"))[1..]
        .iter()
        .map(|row| row[0].parse().unwrap())
        .collect();
    assert_eq!(ids, (0..100).collect::<Vec<_>>());

    assert!(!ws.path("weir-audit.sqlite-wal").exists());
    let copy = ws.path("copy.sqlite");
    std::fs::copy(ws.path("weir-audit.sqlite"), &copy).unwrap();
    let (status, outcomes): (String, i64) = rusqlite::Connection::open(&copy)
        .unwrap()
        .query_row(
            "SELECT status, (SELECT count(*) FROM row_outcomes) FROM runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((status.as_str(), outcomes), ("completed", 100));
}
