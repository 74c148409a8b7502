//! A disk that fills up during a run, for real: a sink, an `on_error` sink or
//! the audit database lives on a small tmpfs, mostly taken by a filler file.
//! The real `weir` binary must stop naming the file and the operating
//! system's error, and once the filler is deleted, `weir run --resume` must
//! finish the run with every row written exactly once. The endpoint is the
//! test LLM server (a test tool, not a model).
//!
//! Mounting needs root (CI runs as root); where it is not permitted, each
//! test says so and passes without checking anything.

use crate::common::*;
use rusqlite::Connection;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use weir_test_llm_server::{Script, TestLlmServer};

const ROWS: usize = 2000;
/// The tmpfs: room for the whole run, once the filler is deleted.
const TMPFS_BYTES: u64 = 16 << 20;

/// Every third row is refused by the endpoint and goes to the `on_error` sink.
fn is_poisoned(i: usize) -> bool {
    i % 3 == 1
}

fn source() -> String {
    (0..ROWS)
        .map(|i| {
            let word = if is_poisoned(i) { "POISON" } else { "text" };
            let text = format!("{word} {i}: {}", "some words to take up room ".repeat(3));
            format!("{}\n", json!({"id": i, "text": text}))
        })
        .collect()
}

/// A tmpfs mounted for one test, unmounted when it ends.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// None, with the reason printed, where mounting is not permitted.
    fn mount(dir: &Path, bytes: u64) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .output();
        match mounted {
            Ok(out) if out.status.success() => Some(Self {
                dir: dir.to_path_buf(),
            }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs at {} ({}); this test needs root",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount ({e}); this test needs it, and root");
                None
            }
        }
    }

    /// Takes all but `free` bytes of the file system with a filler file.
    fn fill_leaving(&self, free: u64) -> PathBuf {
        let filler = self.dir.join("filler");
        std::fs::write(&filler, vec![0u8; (TMPFS_BYTES - free) as usize]).unwrap();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Which file lands on the full disk.
#[derive(Clone, Copy)]
enum Full {
    Sink,
    ErrorSink,
    AuditDatabase,
}

fn pipeline(full: Full) -> String {
    let on = |what: Full, name: &str| match (what, full) {
        (Full::Sink, Full::Sink)
        | (Full::ErrorSink, Full::ErrorSink)
        | (Full::AuditDatabase, Full::AuditDatabase) => format!("full/{name}"),
        _ => name.to_string(),
    };
    format!(
        "source:\n  path: rows.jsonl\nendpoints:\n  llm:\n    base_url: ${{OPENAI_BASE_URL}}\n    \
         api_key: ${{OPENAI_API_KEY}}\n    pool_size: 8\ntransforms:\n  - name: ask\n    \
         component: llm\n    endpoints: [llm]\n    on_error:\n      path: {}\n    options:\n      \
         model: test-model\n      template: \"Q{{{{ row.id }}}}: {{{{ row.text }}}}\"\n      \
         response_field: answer\nsinks:\n  - path: {}\naudit:\n  path: {}\n",
        on(Full::ErrorSink, "failed.jsonl"),
        on(Full::Sink, "out.jsonl"),
        on(Full::AuditDatabase, "a.sqlite"),
    )
}

/// Runs the pipeline with `full`'s file on a full disk, checks how it stops,
/// frees the space, resumes, and checks every row is written exactly once.
/// Returns what the stopped run said.
async fn fill_then_resume(full: Full, free: u64) -> Option<String> {
    let ws = Workspace::new();
    let tmpfs = Tmpfs::mount(&ws.path("full"), TMPFS_BYTES)?;
    let server = TestLlmServer::start(Script {
        reject_marker: Some("POISON".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    ws.write("rows.jsonl", &source());
    let pipeline = ws.write("p.yaml", &pipeline(full));
    let filler = tmpfs.fill_leaving(free);

    let out = run_with_key(&pipeline, &server.base_url()).await;
    let stopped = stderr(&out);
    eprintln!("the stopped run said:\n{stopped}");
    assert_eq!(out.status.code(), Some(1), "{stopped}");
    assert!(
        stopped.contains("with their outcome in the audit trail")
            && stopped.contains(&format!(
                "once there is space again, `weir run {} --resume`",
                pipeline.display()
            )),
        "{stopped}"
    );

    std::fs::remove_file(filler).unwrap();
    let resume = resume_with_key(&pipeline, &server.base_url()).await;
    // 2: finished, with the refused rows quarantined.
    assert_eq!(resume.status.code(), Some(2), "{}", stderr(&resume));
    let in_dir = |name: &str, on: bool| {
        if on {
            format!("full/{name}")
        } else {
            name.into()
        }
    };
    let out_name = in_dir("out.jsonl", matches!(full, Full::Sink));
    let failed_name = in_dir("failed.jsonl", matches!(full, Full::ErrorSink));
    let mut seen = vec![0; ROWS];
    for row in read_jsonl(&ws, &out_name) {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        assert!(!is_poisoned(id));
        assert!(
            row["answer"]
                .as_str()
                .unwrap()
                .starts_with(&format!("echo: Q{id}: text {id}"))
        );
    }
    for row in read_jsonl(&ws, &failed_name) {
        let id = row["id"].as_u64().unwrap() as usize;
        seen[id] += 1;
        assert!(is_poisoned(id), "row {id} failed: {row:?}");
    }
    let wrong: Vec<_> = seen.iter().enumerate().filter(|(_, n)| **n != 1).collect();
    assert!(wrong.is_empty(), "rows not exactly once: {wrong:?}");

    let db = ws.path(&in_dir("a.sqlite", matches!(full, Full::AuditDatabase)));
    let conn = Connection::open(db).unwrap();
    let (status, outcomes): (String, i64) = conn
        .query_row(
            "SELECT status, (SELECT count(*) FROM row_outcomes) FROM runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (status.as_str(), outcomes),
        ("completed_with_failures", ROWS as i64)
    );
    // The rows the stopped run said it kept are the rows the resume skipped.
    let skipped: i64 = conn
        .query_row(
            "SELECT rows_skipped FROM segments WHERE segment = 2",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let kept = if skipped == 1 {
        "1 row".to_string()
    } else {
        format!("{skipped} rows")
    };
    assert!(
        stopped.contains(&format!("kept: {kept}, with their outcome")),
        "{stopped}"
    );
    drop(tmpfs);
    Some(stopped)
}

/// What the stopped run must say of the file that filled the disk.
fn names_the_file(stopped: &str, file: &str) {
    assert!(
        stopped.contains(file) && stopped.contains("No space left on device (os error 28)"),
        "{stopped}"
    );
}

#[tokio::test]
async fn a_sink_on_a_full_disk_stops_the_run_naming_it_and_the_run_resumes() {
    let Some(stopped) = fill_then_resume(Full::Sink, 160 << 10).await else {
        return;
    };
    names_the_file(&stopped, "full/out.jsonl.partial: No space left on device");
    assert!(stopped.contains("cannot write "), "{stopped}");
}

#[tokio::test]
async fn an_on_error_sink_on_a_full_disk_stops_the_run_naming_it_and_the_run_resumes() {
    let Some(stopped) = fill_then_resume(Full::ErrorSink, 96 << 10).await else {
        return;
    };
    names_the_file(
        &stopped,
        "full/failed.jsonl.partial: No space left on device",
    );
}

#[tokio::test]
async fn an_audit_database_on_a_full_disk_stops_the_run_naming_it_and_the_run_resumes() {
    let Some(stopped) = fill_then_resume(Full::AuditDatabase, 1 << 20).await else {
        return;
    };
    names_the_file(&stopped, "cannot write the audit database ");
    assert!(
        stopped.contains("full/a.sqlite: No space left on device (os error 28)"),
        "{stopped}"
    );
}
