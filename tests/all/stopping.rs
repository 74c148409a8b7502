//! Runs that stop before their source is done: an endpoint that is down,
//! stops answering or refuses the run's key, SIGINT and SIGTERM. Each ends at
//! once with one message, leaves the rows it did not finish without an
//! outcome, and a resume finishes them: every row once, no request sent
//! twice. The endpoint is the test LLM server, a test tool; `weir` is the
//! real binary.

use crate::common::*;
use std::time::{Duration, Instant};
use weir_test_llm_server::{Reply, Script, TestLlmServer};

/// A loopback port held bound but not listening: connections to it are
/// refused, and while it is held no other test's server can be given it (a
/// port only looked up and let go could go to one running beside this test).
fn dead_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

/// The ids in the sink, which must hold rows 0..n each once, in order.
fn assert_every_row_once(ws: &Workspace, n: usize) {
    let rows = read_csv(&ws.path("out.csv"));
    let ids: Vec<usize> = rows[1..].iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_dead_endpoint_stops_the_run_within_abort_after_and_a_resume_finishes_it() {
    let (dead, port) = dead_port();
    let base_url = format!("http://127.0.0.1:{port}/v1");
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(
        &ws,
        2000,
        "abort_after_seconds: 3\nbreaker_cooldown_seconds: 0.5",
        "",
        ECHO_OPTIONS,
    );
    let started = Instant::now();
    let out = run_with_key(&p, &base_url).await;
    let took = started.elapsed();
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        message
            .contains("stopped  endpoint `llm` is down: its circuit breaker has been open for 3 s")
            && message.contains(&format!(
                "connection refused at 127.0.0.1:{port}: nothing listens there"
            )),
        "{message}"
    );
    // The breaker's probes every half second are not each warned of.
    let warnings = message
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("circuit breaker"))
        .count();
    assert_eq!(warnings, 1, "{message}");
    assert!(
        message.contains(&format!("weir run {} --resume", p.display())),
        "{message}"
    );
    assert!(
        message.contains("rows     0 finished before the stop: 0 ok, 0 failed; 0 written"),
        "{message}"
    );
    // The calls the stop cut, still retrying, are neither answered nor failed.
    let counts: Vec<u64> = message
        .lines()
        .find_map(|l| l.trim().strip_prefix("endpoint llm: "))
        .and_then(|l| l.split(';').next())
        .expect("the endpoint's line")
        .split(", ")
        .map(|part| part.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let [requests, 0, 0, cut] = counts[..] else {
        panic!("{counts:?}: {message}")
    };
    assert!(cut > 0 && cut == requests, "{message}");
    assert_eq!(run_status(&ws), "interrupted");
    assert_eq!(
        audit_value::<i64>(&ws, "SELECT count(*) FROM row_outcomes"),
        0,
        "no row was recorded as failed"
    );

    drop(dead);
    let server = TestLlmServer::bind(Script::default(), &format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    let out = resume_with_key(&p, &base_url).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_every_row_once(&ws, 2000);
    assert_eq!(server.served().len(), 2000);
    assert_eq!(run_status(&ws), "completed");
}

#[tokio::test]
async fn a_server_that_stops_answering_stops_the_run_two_timeouts_later_and_a_resume_finishes_it() {
    stall_stops_the_run_and_a_resume_finishes_it(
        "request_timeout_seconds: 1",
        "no answer within 1 s (request_timeout_seconds)",
    )
    .await;
}

/// A first-byte timeout is retried as a queue's; with nothing answered it
/// still counts towards the breaker, or the stalled server would be
/// retried for all of `max_capacity_retry_seconds`.
#[tokio::test]
async fn a_server_that_stops_answering_stops_the_run_behind_a_first_byte_timeout_too() {
    stall_stops_the_run_and_a_resume_finishes_it(
        "first_byte_timeout_seconds: 1",
        "no answer began within 1 s (first_byte_timeout_seconds), while nothing came back from \
         the endpoint",
    )
    .await;
}

/// A local server that hangs after its first answers in 100 ms, the
/// requests sent about then still out: answers that early say nothing of a
/// wait a whole request timeout long, so the first timeouts count towards
/// the breaker, which opens before any request sent after them could time
/// out (with the defaults, two timeouts of 120 s sooner than when those
/// answers had them taken for a queue's).
#[tokio::test]
async fn a_server_that_hangs_after_its_first_answers_opens_the_breaker_at_the_first_timeouts() {
    let stalled = run_until_a_stall_stops_it(
        None,
        10,
        60,
        "request_timeout_seconds: 4\nabort_after_seconds: 1",
    )
    .await;
    let ws = &stalled.ws;
    let queued: i64 = audit_value(ws, "SELECT count(*) FROM calls WHERE error LIKE '%queue%'");
    assert_eq!(queued, 0, "no timeout was taken for a queue's");
    let first_timeouts_at: i64 = audit_value(
        ws,
        "SELECT min(started_at_ms + latency_ms) FROM calls WHERE error LIKE 'no answer within%'",
    );
    let opened_at: i64 = audit_value(
        ws,
        "SELECT min(at_ms) FROM endpoint_events WHERE event = 'breaker_open'",
    );
    assert!(
        opened_at < first_timeouts_at + 4000,
        "opened {} ms after the first timeouts",
        opened_at - first_timeouts_at
    );
}

/// A run the test LLM server (a test tool) stopped: its pipeline, where it
/// ran, and what it said.
struct Stalled {
    server: TestLlmServer,
    ws: Workspace,
    pipeline: std::path::PathBuf,
    message: String,
}

/// Runs `rows` rows, with the endpoint's `settings` and a breaker
/// cool-down of 0.5 s, against a server that answers in 100 ms,
/// `serve_at_once` at a time, until `stall_after` requests have come and
/// then answers nothing. The run must stop with the endpoint down, exit 1,
/// no row recorded as failed.
async fn run_until_a_stall_stops_it(
    serve_at_once: Option<usize>,
    stall_after: u64,
    rows: usize,
    settings: &str,
) -> Stalled {
    let server = TestLlmServer::start(Script {
        serve_at_once,
        latency: Duration::from_millis(100),
        stall_after: Some(stall_after),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let pipeline = numbered_rows_pipeline(
        &ws,
        rows,
        &format!("{settings}\nbreaker_cooldown_seconds: 0.5"),
        "",
        ECHO_OPTIONS,
    );
    let out = run_with_key(&pipeline, &server.base_url()).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(message.contains("endpoint `llm` is down"), "{message}");
    assert_eq!(
        audit_value::<i64>(
            &ws,
            "SELECT count(*) FROM row_outcomes WHERE outcome != 'completed'"
        ),
        0,
        "no row was recorded as failed"
    );
    Stalled {
        server,
        ws,
        pipeline,
        message,
    }
}

/// A local model server serving two at a time whose GPU hangs after 40
/// requests: nothing is answered again, not even what it had in hand. The
/// run, with `timeout` (the endpoint's line), stops saying `says`.
async fn stall_stops_the_run_and_a_resume_finishes_it(timeout: &str, says: &str) {
    let Stalled {
        server,
        ws,
        pipeline: p,
        message,
    } = run_until_a_stall_stops_it(
        Some(2),
        40,
        200,
        &format!("{timeout}\nabort_after_seconds: 3"),
    )
    .await;
    assert!(message.contains(says), "{message}");
    // The adaptive limit is down to one or two by then: ten timeouts in a
    // row, the count alone, would have taken ten seconds.
    let opened: String = audit_value(
        &ws,
        "SELECT detail FROM endpoint_events WHERE event = 'breaker_open' ORDER BY at_ms LIMIT 1",
    );
    let failures: u32 = opened
        .split(" failures in a row over ")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("opened on the count, not on the span: {opened}"));
    assert!((2..10).contains(&failures), "{opened}");
    let finished: i64 = audit_value(&ws, "SELECT count(*) FROM row_outcomes");
    assert!(
        (30..=40).contains(&finished),
        "{finished} rows before the stall"
    );
    assert_eq!(run_status(&ws), "interrupted");

    let base_url = server.base_url();
    drop(server);
    let server = rebind(&base_url).await;
    let out = resume_with_key(&p, &base_url).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_every_row_once(&ws, 200);
    // Only the rows not finished are asked again (an attempt that ran out
    // of its 1 s on a loaded machine is asked twice); an answer that came as
    // the run stopped, its row unfinished, is replayed from the audit trail.
    let asked: std::collections::HashSet<String> = server
        .served()
        .into_iter()
        .map(|served| served.user_message)
        .collect();
    let replayed: i64 = audit_value(&ws, "SELECT count(*) FROM calls WHERE replayed = 1");
    assert_eq!(
        asked.len() as i64 + replayed,
        200 - finished,
        "{replayed} replayed"
    );
    assert_eq!(run_status(&ws), "completed");
}

#[tokio::test]
async fn a_key_the_endpoint_refuses_stops_the_run_at_once() {
    let server = TestLlmServer::start(Script {
        require_key: Some("the-right-key".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 500, "", "", ECHO_OPTIONS);
    let out = run_with_key(&p, &server.base_url()).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains(
            "endpoint `llm` refused the run's requests: HTTP 401 (the API key was not accepted)"
        ),
        "{message}"
    );
    let sent = server.served().len();
    assert!(sent <= 8, "{sent} requests were sent after the first 401");
    assert_eq!(run_status(&ws), "interrupted");
}

/// An account that runs out of credit mid-run refuses every row after it
/// (OpenAI: 429 `insufficient_quota`; Anthropic: 400 "credit balance is too
/// low"). The run stops at the first such refusal, however many rows were
/// answered before, rather than fail every row left one by one; the rows it
/// refused keep no outcome, and a resume once the account is topped up
/// finishes the run, every row once.
#[tokio::test]
async fn an_account_out_of_credit_stops_the_run_and_a_resume_finishes_it() {
    for (kind, url, status) in [
        (
            "openai",
            TestLlmServer::base_url as fn(&TestLlmServer) -> String,
            429,
        ),
        ("anthropic", TestLlmServer::root_url, 400),
    ] {
        let broke = TestLlmServer::start(Script {
            credit_for: Some(30),
            ..Script::default()
        })
        .await
        .unwrap();
        let ws = Workspace::new();
        let p = numbered_rows_pipeline(
            &ws,
            200,
            &format!("kind: {kind}\npool_size: 4"),
            "",
            ECHO_OPTIONS,
        );
        let out = run_with_key(&p, &url(&broke)).await;
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{kind}: {message}");
        assert!(
            message.contains(&format!(
                "refused the run's requests: HTTP {status} (the account is out of credit or \
                 quota: add some at the provider, then resume)"
            )),
            "{kind}: {message}"
        );
        let refused = broke.served().iter().filter(|s| s.status != 200).count();
        assert!(
            refused <= 8,
            "{kind}: {refused} refused after the first; {message}"
        );
        assert_eq!(run_status(&ws), "interrupted", "{kind}");
        let failed: i64 = audit_value(
            &ws,
            "SELECT count(*) FROM row_outcomes WHERE outcome != 'completed'",
        );
        assert_eq!(failed, 0, "{kind}: refused rows keep no outcome");

        broke.add_credit();
        let before = broke.served().len();
        let out = resume_with_key(&p, &url(&broke)).await;
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr(&out));
        assert_every_row_once(&ws, 200);
        let served = broke.served();
        let answered_before = served[..before].iter().filter(|s| s.status == 200).count();
        assert_eq!(
            served.len() - before + answered_before,
            200,
            "{kind}: a row answered before the stop was asked again"
        );
    }
}

/// A host name misspelt in `base_url` resolves no better on a retry: the
/// run stops at the first attempt, not once the breaker has been open for
/// `abort_after_seconds`. `.invalid` is reserved never to resolve (RFC 6761).
#[tokio::test]
async fn a_host_that_does_not_resolve_stops_the_run_at_once() {
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 20, "", "", ECHO_OPTIONS);
    let started = Instant::now();
    let out = run_with_key(&p, "http://no-such-host.invalid/v1").await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("endpoint `llm`: its host name did not resolve before any answer")
            && message.contains("is the host in base_url spelt right")
            && !message.contains("circuit breaker has been open"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(30), "{message}");
    assert_eq!(run_status(&ws), "interrupted");
}

/// A `base_url` that redirects elsewhere, or redirects a POST to a GET, is
/// met by every row alike: the run stops at the first answer and says where
/// it led, and nothing (least of all the key, which some providers send in
/// headers an HTTP client forwards) goes to the other address.
#[tokio::test]
async fn a_redirect_elsewhere_stops_the_run_and_nothing_is_sent_there() {
    let target = TestLlmServer::start(Script::default()).await.unwrap();
    for (status, to) in [(308, target.base_url()), (301, "/v1".to_string())] {
        let mover = TestLlmServer::start(Script {
            redirect: Some((status, to.clone())),
            ..Script::default()
        })
        .await
        .unwrap();
        let ws = Workspace::new();
        let p = numbered_rows_pipeline(&ws, 20, "", "", ECHO_OPTIONS);
        let out = run_with_key(&p, &format!("{}/moved", mover.root_url())).await;
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{message}");
        assert!(
            message.contains(&format!(
                "endpoint `llm` redirects the run's requests: HTTP {status}, a redirect to \
                 `{to}/chat/completions`"
            )) && message.contains("set base_url to where it leads"),
            "{message}"
        );
        assert!(
            mover
                .served()
                .iter()
                .all(|s| s.path == "/moved/chat/completions"),
            "the redirect was followed: {:?}",
            mover.served()
        );
        assert_eq!(run_status(&ws), "interrupted");
    }
    assert!(target.served().is_empty(), "{:?}", target.served());
}

/// A 307 or 308 to the same address keeps the request as it was, key and
/// body: it is followed, as a server that moved its path asks.
#[tokio::test]
async fn a_307_within_the_same_address_is_followed() {
    let server = TestLlmServer::start(Script {
        redirect: Some((307, "/v1".into())),
        ..Script::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 20, "", "", ECHO_OPTIONS);
    let out = run_with_key(&p, &format!("{}/moved", server.root_url())).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_every_row_once(&ws, 20);
    let served = server.served();
    let answered: Vec<_> = served
        .iter()
        .filter(|s| s.path == "/v1/chat/completions")
        .collect();
    assert_eq!(answered.len(), 20, "{served:?}");
    let key = format!("Bearer {KEY}");
    assert!(
        answered
            .iter()
            .all(|s| s.status == 200 && s.authorization.as_deref() == Some(key.as_str())),
        "{served:?}"
    );
    assert_eq!(served.len(), 40, "each row redirected once: {served:?}");
}

/// Starts `weir run` in the background, with stdout and stderr kept.
fn spawn_run(p: &std::path::Path, base_url: &str, extra: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", p.to_str().unwrap(), "--no-progress"])
        .args(extra)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", base_url)
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Rows of [`slow_echo_run`]: 9 s of answers, 4 at a time.
const SLOW_ECHO_ROWS: usize = 120;

/// A test LLM server (a test tool) echoing after 300 ms, and a workspace
/// whose pipeline sends it [`SLOW_ECHO_ROWS`] rows, 4 at a time: a run long
/// enough to stop.
async fn slow_echo_run() -> (TestLlmServer, Workspace, std::path::PathBuf) {
    let server = TestLlmServer::start(Script {
        reply: Reply::Echo,
        latency: Duration::from_millis(300),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, SLOW_ECHO_ROWS, "pool_size: 4", "", ECHO_OPTIONS);
    (server, ws, p)
}

/// A signal is obeyed even when stderr, where weir says so, is closed.
#[tokio::test]
async fn sigterm_stops_a_run_whose_stderr_is_closed() {
    let (server, ws, p) = slow_echo_run().await;
    let mut child = spawn_run(&p, &server.base_url(), &[]);
    drop(child.stderr.take());
    wait_until_served(&server, 8).await;
    send_signal(&child, "TERM");
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(143));
    assert_eq!(run_status(&ws), "interrupted");
    assert!(
        server.served().len() < SLOW_ECHO_ROWS,
        "the run went on after the signal"
    );
}

#[tokio::test]
async fn sigint_lets_calls_in_flight_finish_then_ends_resumable_with_the_summary() {
    let (server, ws, p) = slow_echo_run().await;
    let child = spawn_run(&p, &server.base_url(), &[]);
    wait_until_served(&server, 20).await;
    send_signal(&child, "INT");
    let out = finish(child).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{message}");
    assert!(message.contains("stopped  stopped by SIGINT"), "{message}");
    assert!(
        message.contains(&format!("weir run {} --resume", p.display())),
        "{message}"
    );
    assert_eq!(run_status(&ws), "interrupted");
    let sent_before = server.served().len();
    assert!(
        sent_before < SLOW_ECHO_ROWS,
        "the run went on after the signal"
    );
    // Requests that waited for a slot when the signal came were never sent:
    // they are not the endpoint's, nor its failures.
    let endpoint = format!("endpoint llm: {sent_before} requests, {sent_before} ok, 0 failed");
    assert!(
        message.contains(&endpoint),
        "expected `{endpoint}`: {message}"
    );
    let done = audit_value::<usize>(&ws, "SELECT count(*) FROM row_outcomes");
    let locks = std::fs::read_dir(ws.path(".")).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".lock")
    });
    assert_eq!(locks.count(), 0, "the run's lock was released");

    let out = resume_with_key(&p, &server.base_url()).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{message}");
    assert_every_row_once(&ws, SLOW_ECHO_ROWS);
    assert_eq!(
        server.served().len(),
        SLOW_ECHO_ROWS,
        "no request was sent twice"
    );
    // Answers that came back after the stop, behind a row that had to wait,
    // were kept and are not paid for again.
    let replayed = format!(
        "{done} rows were already done; {} answers replayed",
        sent_before - done
    );
    assert!(
        message.contains(&replayed),
        "expected `{replayed}`: {message}"
    );
}

#[tokio::test]
async fn a_second_sigterm_stops_at_once_and_the_run_still_resumes() {
    let server = TestLlmServer::start(Script {
        reply: Reply::Echo,
        latency: Duration::from_secs(3),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 40, "pool_size: 8", "", ECHO_OPTIONS);
    let child = spawn_run(&p, &server.base_url(), &["--grace-seconds", "60"]);
    wait_until_served(&server, 4).await;
    // The rows that follow the first answers go out meanwhile; theirs are
    // 3 s away, so the first signal has calls on the wire to wait for.
    tokio::time::sleep(Duration::from_millis(200)).await;
    send_signal(&child, "TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = Instant::now();
    send_signal(&child, "TERM");
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(
        second.elapsed() < Duration::from_secs(2),
        "{:?}",
        second.elapsed()
    );

    // The same endpoint, answering at once now.
    let base_url = server.base_url();
    drop(server);
    let _fast = rebind(&base_url).await;
    let out = resume_with_key(&p, &base_url).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{message}");
    assert!(
        message.contains("taking over"),
        "the left lock is taken over with a notice: {message}"
    );
    assert_every_row_once(&ws, 40);
}

/// A fresh server on the address of a dropped one whose `base_url` this
/// was, once the port is free.
async fn rebind(base_url: &str) -> TestLlmServer {
    let address = base_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    for _ in 0..50 {
        if let Ok(server) = TestLlmServer::bind(Script::default(), address).await {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{address} stayed in use");
}

#[tokio::test]
async fn exit_status_and_run_state_tell_the_truth() {
    let server = TestLlmServer::start(Script {
        reject_marker: Some("row".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(5));
    let p = ws.write(
        "p.yaml",
        &format!(
            "on_error:\n  path: failed.jsonl\n{}",
            pipeline_with("in.csv", "out.csv", "", "", ECHO_OPTIONS)
        ),
    );
    let out = run_with_key(&p, &server.base_url()).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "every row quarantined is not a success: {}",
        stderr(&out)
    );
    assert_eq!(read_jsonl(&ws, "failed.jsonl").len(), 5);
    assert_eq!(run_status(&ws), "completed_with_failures");
    let runs = weir(&["runs", "-p", p.to_str().unwrap()], &[]).await;
    assert!(String::from_utf8_lossy(&runs.stdout).contains("completed_with_failures"));

    // A component that cannot load: the run is recorded as failed to start.
    std::fs::write(ws.path("bad.wasm"), b"not wasm").unwrap();
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("component: llm", "component: bad.wasm");
    std::fs::write(&p, text).unwrap();
    let out = run_with_key(&p, &server.base_url()).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(run_status(&ws), "failed_to_start");
    let run: i64 = audit_value(&ws, "SELECT max(run_id) FROM runs");
    let told = weir(&["runs", &run.to_string(), "-p", p.to_str().unwrap()], &[]).await;
    let told = String::from_utf8_lossy(&told.stdout);
    assert!(
        told.contains("failed_to_start")
            && told.contains("  error    ")
            && told.contains("bad.wasm is not a WebAssembly file"),
        "{told}"
    );
}
