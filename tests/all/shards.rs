//! Sharded runs: shards run at once against one capacity-capped endpoint
//! (the test LLM server, a test tool), one is killed and resumed, and
//! `weir merge` joins them into what a single run writes.

use crate::common::*;
use std::time::Duration;
use weir_test_llm_server::{Script, TestLlmServer};

const ROWS: usize = 400;
/// The rows shard 2 of 4 runs: a contiguous quarter of the source.
const SHARD_2: std::ops::Range<usize> = 200..300;

/// N of a request for `row N, …` (see `numbered_rows`).
fn row_number(user_message: &str) -> usize {
    let tail = &user_message[user_message.find("row ").expect("a numbered row") + 4..];
    tail[..tail.find(',').expect("a numbered row")]
        .parse()
        .unwrap()
}

fn sharded_pipeline(ws: &Workspace) -> std::path::PathBuf {
    ws.write("in.csv", &numbered_rows(ROWS));
    ws.write(
        "p.yaml",
        &format!(
            "on_error:\n  path: out/failed.jsonl\n{}",
            pipeline_with(
                "in.csv",
                "out/result.csv",
                "pool_size: 16",
                "",
                ECHO_OPTIONS
            )
        ),
    )
}

fn shard_command(p: &std::path::Path, base_url: &str, shard: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args([
        "run",
        p.to_str().unwrap(),
        "--no-progress",
        "--shard",
        shard,
    ])
    .env("OPENAI_API_KEY", KEY)
    .env("OPENAI_BASE_URL", base_url)
    .env(
        "WEIR_CACHE_DIR",
        std::env::temp_dir().join("weir-test-cache"),
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    cmd
}

#[tokio::test]
async fn four_shards_with_one_killed_and_resumed_merge_into_what_one_run_writes() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(20),
        capacity: Some(8),
        reject_marker: Some("row 13,".into()),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = sharded_pipeline(&ws);
    let mut children = Vec::new();
    for i in 0..4 {
        children.push(
            shard_command(&p, &server.base_url(), &format!("{i}/4"))
                .spawn()
                .unwrap(),
        );
    }
    // Kill shard 2 once the shards are under way.
    while server.served().len() < 200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed_at = server.elapsed();
    children[2].start_kill().unwrap();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().await.unwrap();
        if i != 2 {
            assert!(
                matches!(out.status.code(), Some(0 | 2)),
                "shard {i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // A merge before shard 2 is done is refused, and writes nothing.
    let refused = weir(&["merge", p.to_str().unwrap(), "--shards", "4"], &[]).await;
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    assert!(
        message.contains("shard 2/4 is not finished") || message.contains("shard 2/4 has not run"),
        "{message}"
    );
    assert!(!ws.path("out/result.csv").exists());

    let mut resume = shard_command(&p, &server.base_url(), "2/4");
    resume.arg("--resume");
    let out = resume.output().await.unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = weir(&["merge", p.to_str().unwrap(), "--shards", "4"], &[]).await;
    assert_eq!(merged.status.code(), Some(0), "{}", stderr(&merged));
    let merged_csv = std::fs::read(ws.path("out/result.csv")).unwrap();
    let merged_failed = std::fs::read(ws.path("out/failed.jsonl")).unwrap();
    // A kill -9 loses the answers that were on the wire, at most a pool's
    // worth, and those shard 2 received but had not committed yet: at most
    // the audit writer's linger (250 ms, with slack for the kill itself).
    // Every other answer is paid once.
    let served = server.served();
    let ok = served.iter().filter(|s| s.status == 200).count();
    let uncommitted = served
        .iter()
        .filter(|s| s.status == 200 && SHARD_2.contains(&row_number(&s.user_message)))
        .filter(|s| {
            (killed_at.saturating_sub(Duration::from_millis(350))..=killed_at)
                .contains(&(s.at + s.held))
        })
        .count();
    assert!(
        (ROWS - 1..=ROWS - 1 + 16 + uncommitted).contains(&ok),
        "{ok} answers for {} rows, {uncommitted} answered in shard 2 just before its kill",
        ROWS - 1
    );

    // One run over the same rows writes the same bytes.
    let single = Workspace::new();
    let p1 = sharded_pipeline(&single);
    let out = run_with_key(&p1, &server.base_url()).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(single.path("out/result.csv")).unwrap(),
        merged_csv
    );
    // The message of a refused row counts the attempts it took, which
    // depends on the 429s it met; the rest is the same.
    let without_message = |bytes: &[u8]| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(|l| {
                let mut row: serde_json::Value = serde_json::from_str(l).unwrap();
                row.as_object_mut().unwrap().remove("_error_message");
                row
            })
            .collect()
    };
    assert_eq!(
        without_message(&std::fs::read(single.path("out/failed.jsonl")).unwrap()),
        without_message(&merged_failed)
    );

    // The merged audit is one run that `runs` and `explain` read as any other.
    let runs = weir(&["runs", "-p", p.to_str().unwrap()], &[]).await;
    let listed = String::from_utf8_lossy(&runs.stdout);
    assert!(listed.contains("merged 4"), "{listed}");
    assert!(
        listed.contains(&format!("{} completed, 1 quarantined", ROWS - 1)),
        "{listed}"
    );
    for row in ["0", "250", "399"] {
        let story = weir(&["explain", "1", row, "-p", p.to_str().unwrap()], &[]).await;
        let text = String::from_utf8_lossy(&story.stdout);
        assert!(text.contains("ended     completed"), "row {row}: {text}");
    }
}

#[tokio::test]
async fn a_shards_run_resumed_by_its_number_carries_on_as_that_shard() {
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(20),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = sharded_pipeline(&ws);
    let mut shard = shard_command(&p, &server.base_url(), "1/4")
        .args(["--shards-at-once", "2"])
        .spawn()
        .unwrap();
    while server.served().len() < 30 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shard.start_kill().unwrap();
    shard.wait().await.unwrap();

    let audit = ws.path("out/weir-audit.part-1-of-4.sqlite");
    let out = weir(
        &[
            "resume",
            "1",
            "--audit",
            audit.to_str().unwrap(),
            "--no-progress",
        ],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", &server.base_url()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Its own quarter of the rows, into its own part file: nothing else.
    let ids: Vec<usize> = read_csv(&ws.path("out/result.part-1-of-4.csv"))[1..]
        .iter()
        .map(|row| row[0].parse().unwrap())
        .collect();
    assert_eq!(ids, (100..200).collect::<Vec<_>>());
    assert!(!ws.path("out/result.csv").exists());
    let asked: std::collections::HashSet<usize> = server
        .served()
        .iter()
        .map(|s| row_number(&s.user_message))
        .collect();
    assert!(
        asked.iter().all(|row| (100..200).contains(row)),
        "{asked:?}"
    );
    // With the share of the rate limits its scheduler gave it.
    let recorded: (String, Option<u32>) = rusqlite::Connection::open(&audit)
        .unwrap()
        .query_row("SELECT shard, shards_at_once FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(recorded, ("1/4".to_string(), Some(2)));
}

/// Runs shard `shard` of `p`, with `more` arguments, to the end: the
/// settings its audit database recorded for the endpoint.
async fn shard_settings(
    ws: &Workspace,
    p: &std::path::Path,
    base_url: &str,
    shard: &str,
    more: &[&str],
) -> String {
    let mut args = vec!["run", p.to_str().unwrap(), "--shard", shard];
    args.extend_from_slice(more);
    let out = weir(
        &args,
        &[("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", base_url)],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (i, n) = shard.split_once('/').unwrap();
    let audit = ws.path(&format!("weir-audit.part-{i}-of-{n}.sqlite"));
    rusqlite::Connection::open(audit)
        .unwrap()
        .query_row("SELECT settings_json FROM endpoints", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn rate_limits_are_shared_among_the_shards_running_at_once() {
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 8, "requests_per_minute: 600", "", ECHO_OPTIONS);
    let settings = shard_settings(&ws, &p, &server.base_url(), "0/4", &[]).await;
    assert!(
        settings.contains("\"requests_per_minute\":150"),
        "{settings}"
    );
    assert_eq!(
        read_csv(&ws.path("out.part-0-of-4.csv")).len(),
        3,
        "rows 0 and 1"
    );

    // Four shards run two at a time share the key two ways.
    let two_at_once = ["--shards-at-once", "2"];
    let settings = shard_settings(&ws, &p, &server.base_url(), "1/4", &two_at_once).await;
    assert!(
        settings.contains("\"requests_per_minute\":300"),
        "{settings}"
    );
    let refused = weir(
        &[
            "run",
            p.to_str().unwrap(),
            "--shard",
            "2/4",
            "--shards-at-once",
            "5",
        ],
        &[("OPENAI_API_KEY", KEY)],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("--shards-at-once 5 with --shard 2/4: give 1 to 4"),
        "{}",
        stderr(&refused)
    );
}
