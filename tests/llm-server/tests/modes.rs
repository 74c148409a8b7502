//! The test server's queueing mode, long-tailed answers, error bursts and
//! chaos preset (a TEST TOOL, not a model), driven over loopback as a client
//! would.

use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;
use weir_test_llm_server::{
    Bursts, Fault, Script, TestLlmServer, expected_answer, log_normal_scale, presets,
    time_weighted_mean,
};

fn request(prompt: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": prompt}]})
}

/// Status, `Retry-After` and whether the body was the right answer; `None`
/// when the connection broke.
async fn ask(
    http: &reqwest::Client,
    server: &TestLlmServer,
    prompt: &str,
) -> Option<(u16, Option<String>, bool)> {
    let response = http
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&request(prompt))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = response.text().await.ok()?;
    let answer = serde_json::from_str::<Value>(&body).ok();
    let right = answer.is_some_and(|a| {
        a["choices"][0]["message"]["content"]
            == expected_answer(weir_test_llm_server::Reply::Echo, prompt)
    });
    Some((status, retry_after, right))
}

/// Sends `n` requests at once and checks that each got its right answer.
async fn ask_all_at_once(server: &TestLlmServer, n: usize) {
    let http = reqwest::Client::new();
    let prompts: Vec<String> = (0..n).map(|i| format!("row {i}")).collect();
    let answers = futures::future::join_all(prompts.iter().map(|p| ask(&http, server, p))).await;
    assert!(
        answers.iter().all(|a| a == &Some((200, None, true))),
        "{answers:?}"
    );
}

#[tokio::test]
async fn a_queueing_server_serves_its_slots_and_queues_the_rest_in_turn() {
    let latency = Duration::from_millis(500);
    let server = TestLlmServer::start(Script {
        latency,
        serve_at_once: Some(8),
        ..Script::default()
    })
    .await
    .unwrap();
    ask_all_at_once(&server, 16).await;

    let served = server.served();
    assert_eq!(served.len(), 16);
    let (straight, waited): (Vec<_>, Vec<_>) =
        served.iter().partition(|s| s.queued == Duration::ZERO);
    assert_eq!((straight.len(), waited.len()), (8, 8));
    // A waiting request's slot was freed by one held for the latency, so it
    // is answered two latencies after the first arrival at the earliest.
    let first = served.iter().map(|s| s.at).min().unwrap();
    for s in &waited {
        assert!(s.at + s.held >= first + latency * 2, "{s:?}");
        assert!(s.held >= s.queued + latency, "{s:?}");
    }

    let changes = server.queue_changes();
    assert_eq!(changes.iter().map(|c| c.1).max(), Some(8));
    assert_eq!(changes.last().map(|c| c.1), Some(0));
    // Each request's wait is bounded by the queue's own changes, so the
    // queue's area over time is exactly the sum of the waits.
    let end = changes.last().unwrap().0;
    let area = time_weighted_mean(&changes, Duration::ZERO, end) * end.as_secs_f64();
    let waits: f64 = served.iter().map(|s| s.queued.as_secs_f64()).sum();
    assert!((area - waits).abs() < 1e-6, "area {area}, waits {waits}");
}

#[tokio::test]
async fn a_queued_request_takes_the_latency_in_force_when_its_slot_frees() {
    // One slot, 300 ms until 400 ms after the start, 50 ms from then on: the
    // first request starts at once and takes 300 ms; the second, queued
    // behind it, starts at 300 ms, when the old latency still holds; the
    // third starts at 600 ms and takes 50.
    let server = TestLlmServer::start(Script {
        latency: Duration::from_millis(300),
        latency_steps: vec![(Duration::from_millis(400), Duration::from_millis(50))],
        serve_at_once: Some(1),
        ..Script::default()
    })
    .await
    .unwrap();
    ask_all_at_once(&server, 3).await;
    let mut service: Vec<Duration> = server.served().iter().map(|s| s.held - s.queued).collect();
    service.sort();
    let ms = Duration::from_millis;
    assert!(service[0] >= ms(50) && service[0] < ms(250), "{service:?}");
    assert!(service[1] >= ms(300), "{service:?}");
}

#[tokio::test]
async fn a_batching_server_answers_each_later_the_more_it_serves_at_once() {
    let latency = Duration::from_millis(200);
    let server = TestLlmServer::start(Script {
        latency,
        serve_at_once: Some(16),
        batch_slowdown: 0.1,
        ..Script::default()
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    assert_eq!(ask(&http, &server, "alone").await, Some((200, None, true)));
    let prompts: Vec<String> = (0..8).map(|i| format!("row {i}")).collect();
    let answers = futures::future::join_all(prompts.iter().map(|p| ask(&http, &server, p))).await;
    assert!(
        answers.iter().all(|a| a == &Some((200, None, true))),
        "{answers:?}"
    );
    let served = server.served();
    let alone = &served[0];
    assert!(alone.held >= latency, "{alone:?}");
    // Eight at once, none queued: each tenth of an answer is slowed by a
    // tenth for every other one served then, so with seven others for six
    // of its ten stretches (the eight arrive within 80 ms) an answer takes
    // at least 1.42 times the latency.
    let together = &served[1..];
    assert!(together.iter().all(|s| s.queued == Duration::ZERO));
    let slowed = latency.mul_f64(1.4);
    assert!(together.iter().all(|s| s.held >= slowed), "{together:?}");
}

#[test]
fn a_long_tail_is_log_normal_with_a_mean_of_one() {
    let sigma: f64 = 0.8;
    let mut scales: Vec<f64> = (0..20_000).map(|n| log_normal_scale(sigma, n)).collect();
    let mean = scales.iter().sum::<f64>() / scales.len() as f64;
    scales.sort_by(f64::total_cmp);
    let quantile = |q: f64| scales[(q * scales.len() as f64) as usize];
    let median = (-sigma * sigma / 2.0).exp();
    let p99 = (-sigma * sigma / 2.0 + 2.326 * sigma).exp();
    assert!((mean - 1.0).abs() < 0.03, "mean {mean}");
    assert!(
        (quantile(0.5) / median - 1.0).abs() < 0.03,
        "median {}",
        quantile(0.5)
    );
    assert!(
        (quantile(0.99) / p99 - 1.0).abs() < 0.1,
        "p99 {}",
        quantile(0.99)
    );
    assert!(scales.iter().all(|s| *s > 0.0 && *s <= 20.0));
    assert_eq!(log_normal_scale(sigma, 7), log_normal_scale(sigma, 7));
}

#[test]
fn the_time_weighted_mean_weighs_each_value_by_how_long_it_held() {
    let s = Duration::from_secs;
    let changes = [(s(1), 2), (s(3), 1), (s(5), 0)];
    assert_eq!(time_weighted_mean(&changes, s(0), s(4)), 1.25);
    assert_eq!(time_weighted_mean(&changes, s(2), s(3)), 2.0);
    assert_eq!(time_weighted_mean(&changes, s(4), s(6)), 0.5);
    assert_eq!(time_weighted_mean(&[], s(0), s(6)), 0.0);
}

fn bursts(chance: f64, share: f64) -> Bursts {
    Bursts {
        window: Duration::from_secs(1),
        chance,
        share,
        statuses: vec![429, 529, 503],
        schedule: 0,
        every: None,
    }
}

#[test]
fn periodic_bursts_are_the_first_window_of_every_period() {
    let periodic = Bursts {
        window: Duration::from_secs(5),
        every: Some(Duration::from_secs(15)),
        ..bursts(0.0, 0.97)
    };
    let at = Duration::from_millis;
    assert!(periodic.covers(at(0)) && periodic.covers(at(4_999)));
    assert!(!periodic.covers(at(5_000)) && !periodic.covers(at(14_999)));
    assert!(periodic.covers(at(15_000)) && !periodic.covers(at(20_000)));
}

#[test]
fn bursts_cover_their_share_of_windows_on_a_fixed_schedule() {
    let schedule = |b: &Bursts| -> Vec<bool> {
        (0..4000)
            .map(|i| b.covers(Duration::from_millis(i * 1000 + 500)))
            .collect()
    };
    let covered = schedule(&bursts(0.25, 0.8));
    let share = covered.iter().filter(|c| **c).count() as f64 / 4000.0;
    assert!((0.22..0.28).contains(&share), "{share}");
    assert_eq!(covered, schedule(&bursts(0.25, 0.8)));
    // Another schedule covers other windows, as many of them.
    let other = schedule(&Bursts {
        schedule: 1,
        ..bursts(0.25, 0.8)
    });
    let share = other.iter().filter(|c| **c).count() as f64 / 4000.0;
    assert!((0.22..0.28).contains(&share), "{share}");
    let same = covered.iter().zip(&other).filter(|(a, b)| a == b).count();
    assert!(same < 3000, "{same} of 4000 windows alike");
    // Within one window the answer does not change.
    let b = bursts(0.25, 0.8);
    for i in 0..100 {
        let start = Duration::from_secs(i);
        assert_eq!(
            b.covers(start),
            b.covers(start + Duration::from_millis(999))
        );
    }
}

/// The statuses a fresh server with `script` gives to `n` requests sent one
/// after another.
async fn statuses(script: Script, n: usize) -> Vec<(u16, Option<String>, bool)> {
    let server = TestLlmServer::start(script).await.unwrap();
    let http = reqwest::Client::new();
    let mut seen = Vec::new();
    for i in 0..n {
        seen.push(ask(&http, &server, &format!("row {i}")).await.unwrap());
    }
    seen
}

#[tokio::test]
async fn in_a_burst_its_share_of_requests_is_refused_the_same_way_each_run() {
    let script = Script {
        bursts: Some(bursts(1.0, 0.5)),
        retry_after_seconds: Some(1.0),
        ..Script::default()
    };
    let first = statuses(script.clone(), 200).await;
    let refused: Vec<_> = first.iter().filter(|s| s.0 != 200).collect();
    assert!((75..125).contains(&refused.len()), "{}", refused.len());
    let kinds: HashSet<u16> = refused.iter().map(|s| s.0).collect();
    assert_eq!(kinds, HashSet::from([429, 529, 503]));
    assert!(refused.iter().all(|s| s.1.as_deref() == Some("1") && !s.2));
    assert!(first.iter().filter(|s| s.0 == 200).all(|s| s.2));
    assert_eq!(first, statuses(script, 200).await);

    let calm = statuses(
        Script {
            bursts: Some(bursts(0.0, 1.0)),
            ..Script::default()
        },
        50,
    )
    .await;
    assert!(calm.iter().all(|s| s.0 == 200 && s.2));
}

#[tokio::test]
async fn the_chaos_preset_fails_a_quarter_of_requests_in_every_way_it_lists() {
    let latency = Duration::from_millis(10);
    let (hang, hang_up_to) = (Duration::from_millis(10), Duration::from_millis(200));
    let server = TestLlmServer::start(Script {
        hang,
        hang_up_to: Some(hang_up_to),
        ..presets::chaos(latency)
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let n = 400;
    let mut right = 0;
    for i in 0..n {
        if let Some((_, _, true)) = ask(&http, &server, &format!("row {i}")).await {
            right += 1;
        }
    }
    let failed = (n - right) as f64 / n as f64;
    assert!((0.18..0.32).contains(&failed), "{failed}");

    let served = server.served();
    let kinds: HashSet<String> = served
        .iter()
        .filter_map(|s| s.fault)
        .map(|f| format!("{f:?}"))
        .collect();
    let listed: HashSet<String> = presets::chaos(latency)
        .fault_kinds
        .iter()
        .map(|f| format!("{f:?}"))
        .collect();
    assert_eq!(kinds, listed);

    let hangs: Vec<Duration> = served
        .iter()
        .filter(|s| s.fault == Some(Fault::Hang))
        .map(|s| s.held)
        .collect();
    assert!(hangs.iter().all(|h| *h >= hang), "{hangs:?}");
    // Hangs spread over the range rather than all lasting `hang`.
    assert!(
        hangs.iter().any(|h| *h >= (hang + hang_up_to) / 2),
        "{hangs:?}"
    );

    let answered: Vec<Duration> = served
        .iter()
        .filter(|s| s.status == 200 && s.fault.is_none())
        .map(|s| s.held)
        .collect();
    // 3 % are chosen slow by hash: 5 of the 306 answered here.
    let slow = answered.iter().filter(|h| **h >= latency * 5).count();
    assert!(
        slow as f64 >= 0.01 * answered.len() as f64,
        "{slow} of {}",
        answered.len()
    );
}

#[tokio::test]
async fn an_anthropic_answer_reports_its_windows_as_anthropic_does() {
    // A bucket of 6 seconds' worth: 6 requests at 60 a minute.
    let server = TestLlmServer::start(Script {
        requests_per_minute: Some(60),
        ..Script::default()
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for i in 0..7 {
        let response = http
            .post(format!("{}/v1/messages", server.root_url()))
            .header("anthropic-version", "2023-06-01")
            .json(&json!({
                "model": "m",
                "max_tokens": 100,
                "messages": [{"role": "user", "content": format!("q{i}")}],
            }))
            .send()
            .await
            .unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        answers.push((
            response.status().as_u16(),
            header("anthropic-ratelimit-requests-limit"),
            header("anthropic-ratelimit-requests-remaining"),
            header("anthropic-ratelimit-requests-reset"),
            header("retry-after"),
            header("x-ratelimit-remaining-requests"),
        ));
    }
    for (i, (status, limit, remaining, reset, _, openai)) in answers[..6].iter().enumerate() {
        assert_eq!(*status, 200);
        assert_eq!(limit.as_deref(), Some("60"));
        assert_eq!(remaining.as_deref(), Some((5 - i).to_string().as_str()));
        let reset = reset.as_deref().unwrap();
        assert!(humantime::parse_rfc3339(reset).is_ok(), "{reset}");
        assert_eq!(*openai, None, "OpenAI's names are not Anthropic's");
    }
    let (status, _, remaining, _, retry_after, _) = &answers[6];
    assert_eq!(*status, 429);
    assert_eq!(remaining.as_deref(), Some("0"));
    assert_eq!(retry_after.as_deref(), Some("1"));
}
