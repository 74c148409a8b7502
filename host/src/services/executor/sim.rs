//! The adaptive limit and its slots against simulated servers, on tokio's
//! paused clock: every run is deterministic and takes no real time, so the
//! figures asserted are the controller's, not the machine's.

mod clients;
mod compare;
mod server;

use super::limiter::Limiter;
use clients::{
    Concurrency, drive, drive_shards, drive_through, run_rows, run_rows_in_window, run_rows_through,
};
use compare::{
    against_fixed, assert_near_best_fixed, draws, env_number, largest, least, listed, mean,
    mean_ratio_over_draws, ratio_to_best_fixed, ratios_over_draws,
};
use server::{Server, Sim};
use std::rc::Rc;
use std::time::Duration;

const LATENCY: Duration = Duration::from_millis(100);

#[tokio::test(start_paused = true)]
async fn a_capped_server_is_used_to_its_capacity_with_few_rejections() {
    let sim = Sim::new(Server::Capped {
        cap: 32,
        latency: LATENCY,
    });
    drive(&sim, 256, 256, Duration::from_secs(30)).await;
    let capacity = 320.0;
    let steady = sim.goodput(2.0, 30.0);
    assert!(steady >= 0.95 * capacity, "steady goodput {steady:.0}/s");
    let whole = sim.goodput(0.0, 30.0);
    assert!(whole >= 0.93 * capacity, "whole-run goodput {whole:.0}/s");
    let calls = sim.calls_per_success();
    assert!(calls <= 1.05, "{calls:.3} calls per answer");
    // Slow start: from 4 to the capacity within about two round trips.
    let early = sim.recovery(0.0, capacity, 0.9).unwrap();
    eprintln!(
        "capped: steady {steady:.0}/s, whole {whole:.0}/s of {capacity}, {calls:.3} calls/answer, 90 % after {early:.1} s"
    );
    assert!(early <= 0.4, "90 % of capacity only after {early:.1} s");
}

/// The queueing server of the figures (8 at once, 200 ms each) driven for
/// `run` at a pool of 256.
async fn against_eight_at_once(run: Duration) -> (Rc<Sim>, Rc<Limiter>) {
    let sim = Sim::new(Server::Queueing {
        slots: 8,
        service: Duration::from_millis(200),
        varied: false,
        seed: 0,
        rescaled: None,
    });
    let limiter = drive(&sim, 256, 256, run).await;
    (sim, limiter)
}

#[tokio::test(start_paused = true)]
async fn a_queueing_server_gets_a_short_queue_at_full_throughput() {
    let run = Duration::from_secs(30);
    let (sim, limiter) = against_eight_at_once(run).await;
    let capacity = 40.0;
    let steady = sim.goodput(2.0, 30.0);
    assert!(steady >= 0.9 * capacity, "goodput {steady:.1}/s");
    let queue = sim.mean_queue(run);
    assert!(queue <= 8.0, "mean queue {queue:.1}");
    let limit = limiter.snapshot().limit;
    eprintln!("queueing: {steady:.1}/s of {capacity}, mean queue {queue:.2}, limit {limit}");
    assert!((8..=20).contains(&limit), "limit {limit}");
}

/// llama.cpp's server as `examples/local-llm` runs it: one request at a time,
/// the rest queued. Its first four answers come at one to four times its
/// service time, so the window that closes among them must not take their
/// mean for the no-load round trip, and once slow start ends the limit holds
/// at most two in its queue.
#[tokio::test(start_paused = true)]
async fn a_server_that_serves_one_at_a_time_gets_a_queue_of_one_or_two() {
    for varied in [false, true] {
        one_at_a_time(varied).await;
    }
}

/// The same server over five minutes, answers of 120 ms from half to one
/// and a half times that (a small model's answers of different lengths,
/// as llama.cpp serves them), twelve draws. Now and then the answers after
/// a queue cut came fewer a second and their round trip looked not to
/// follow the load, the cut was found useless, and the queue's round trip
/// became the no-load estimate: a queue of three or four for minutes. With
/// a cut standing where its round trip was within half again that of the
/// requests sent alone lately, the estimate still rose step by step in one
/// draw (1.71), and the mean queue over the draws was 1.19. Judged by
/// whether the answers were surely slower than those sent alone, however
/// long ago, too: 1.00, the worst draw 1.16.
#[tokio::test(start_paused = true)]
async fn a_long_run_keeps_a_one_at_a_time_servers_queue_short() {
    let service = Duration::from_millis(120);
    let run = Duration::from_secs(300);
    let mut queues = Vec::new();
    for seed in draws(12) {
        let sim = Sim::new(Server::Queueing {
            slots: 1,
            service,
            varied: true,
            seed,
            rescaled: None,
        });
        drive(&sim, 64, 64, run).await;
        let goodput = sim.goodput(10.0, run.as_secs_f64()) * service.as_secs_f64();
        assert!(goodput >= 0.95, "draw {seed}: goodput {goodput:.3}");
        queues.push(sim.mean_queue_between(Duration::from_secs(10), run));
    }
    let mean = mean(&queues);
    let worst = largest(&queues);
    eprintln!("one at a time for five minutes: mean queue by draw {queues:.2?}, mean {mean:.2}");
    assert!(mean <= 1.1, "mean queue {mean:.2}");
    assert!(worst <= 1.3, "a mean queue of {worst:.2} in one draw");
}

/// With `varied`, its answers take from half to one and a half times their
/// mean, as answers of different lengths do: a queue cut must not be found
/// useless for their spread.
async fn one_at_a_time(varied: bool) {
    let service = Duration::from_millis(180);
    let sim = Sim::new(Server::Queueing {
        slots: 1,
        service,
        varied,
        seed: 0,
        rescaled: None,
    });
    let run = Duration::from_secs(20);
    let limiter = drive(&sim, 64, 64, run).await;
    let capacity = 1.0 / service.as_secs_f64();
    let steady = sim.goodput(2.0, 20.0);
    let queue = sim.mean_queue(run);
    let changes = limiter.snapshot().samples;
    // Slow start ends once the quickest of its latest answers is delayed,
    // which here is the seventh answer (1.26 s).
    let since_first_answers = changes
        .iter()
        .filter(|(at, _)| *at >= Duration::from_millis(1500))
        .map(|(_, limit)| *limit)
        .max();
    eprintln!(
        "one at a time (varied {varied}): {steady:.2}/s of {capacity:.2}, mean queue {queue:.2}, highest limit from 1.5 s {since_first_answers:?}"
    );
    assert!(steady >= 0.95 * capacity, "goodput {steady:.2}/s");
    assert!(queue <= 2.5, "mean queue {queue:.2}");
    // One served and two queued at the most; with answers of varied length
    // the no-load round trip is their mean (that of the requests sent
    // alone), against which some answers at two slots are no queue's and
    // grow the limit: it probes to four now and then (the mean queue 2.0,
    // where it was 1.4 with the quickest of the first answers as no-load).
    let most = if varied { 4 } else { 3 };
    assert!(since_first_answers <= Some(most), "{changes:?}");
}

/// A hosted model's answers vary in length, and so does their round trip:
/// here from 0.5 to 1.5 s whatever the load (a batching server with room for
/// every request, whose steps do not slow). Their mean is half again the
/// shortest of the first answers, the no-load estimate: taken for a queue,
/// it cut the limit window after window down to one, and 3,000 rows took 139
/// times as long as at the best fixed concurrency; then 2.03 times, slow
/// start ending at the first answer past half again that estimate and
/// growth after it probing up a slot at a time. An answer within the spread
/// of those at a lower load no longer ends slow start.
#[tokio::test(start_paused = true)]
async fn answers_that_vary_in_length_are_not_taken_for_a_queue() {
    let server = Server::Batching {
        max_batch: usize::MAX,
        step: Duration::from_millis(20),
        per_request: Duration::ZERO,
        tokens: 50,
    };
    let rows = 3000;
    let (adaptive, best) = against_fixed(|| Sim::new(server.clone()), rows, &[64, 256]).await;
    assert_eq!(adaptive.ok, rows);
    let ratio = ratio_to_best_fixed("answers of varied length", adaptive, best);
    assert!(
        ratio <= 1.6,
        "adaptive took {ratio:.2} times the best fixed"
    );
}

/// A hosted model's answers with a long tail, log-normal whatever the load:
/// a mean of 1 s, at sigma 0.8 the median 0.73 s and one in a hundred past
/// 4.7 s. The tail's answers are no queue's. Slow start ended at the first
/// answer past half again the quickest of the first four, and 3,000 rows
/// took 2.15, 1.55 and 1.61 times as long as at a fixed 256 (sigma 0.5,
/// 0.8, 1.2); now it ends when the quickest of the latest six is past it:
/// 1.28, 1.18 and 1.35 times, most of it slow start's growth from four.
#[tokio::test(start_paused = true)]
async fn answers_with_a_long_tail_are_not_taken_for_a_queue() {
    for sigma in [0.5, 0.8, 1.2] {
        let server = Server::LongTail {
            mean: Duration::from_secs(1),
            sigma,
            draw: 0,
        };
        let rows = 3000;
        let (adaptive, best) = against_fixed(|| Sim::new(server.clone()), rows, &[256]).await;
        assert_eq!(adaptive.ok, rows);
        let ratio = ratio_to_best_fixed(&format!("long tail, sigma {sigma}"), adaptive, best);
        assert!(
            ratio <= 1.45,
            "adaptive took {ratio:.2} times the best fixed"
        );
    }
}

/// Answers with the same long tail (a mean of 0.5 s), with the client
/// stalled early in the run, as a host whose cores another process holds
/// for a moment: answers that come meanwhile are read in a clump at its
/// end, late, and look like a queue's. The limit is cut to a few slots, and
/// at a few slots the no-load estimate (the quickest of the first answers,
/// a fraction of their mean) made every window of a few answers look
/// queued, so it climbed back slowly: 3,000 rows took 2.58, 1.24, 2.99 and
/// 1.17 times as long as at a fixed 256 for the four stalls below, where
/// such answers without a stall take 1.18 times (a mean of 1 s, above).
/// With the answers of requests sent alone as the no-load round trip, no
/// window cut for on fewer answers than say so, and the mean of two loads
/// found no queue's taken rather than the lesser: 1.63, 1.33, 2.63, 1.17.
/// The bound holds those; 1.45 is where they should be.
#[tokio::test(start_paused = true)]
async fn a_stalled_client_is_not_held_down_for_long() {
    for (from, to) in [(0.5, 1.0), (0.7, 2.0), (1.0, 3.0), (2.0, 2.5)] {
        let server = Server::LongTail {
            mean: Duration::from_millis(500),
            sigma: 0.8,
            draw: 0,
        };
        let stalled = || {
            Sim::stalled(
                server.clone(),
                Duration::from_secs_f64(from),
                Duration::from_secs_f64(to),
            )
        };
        let rows = 3000;
        let (adaptive, best) = against_fixed(stalled, rows, &[256]).await;
        assert_eq!(adaptive.ok, rows);
        let name = format!("long tail, client stalled {from}-{to} s");
        let ratio = ratio_to_best_fixed(&name, adaptive, best);
        assert!(
            ratio <= 2.8,
            "adaptive took {ratio:.2} times the best fixed"
        );
    }
}

/// The same answers (a mean of 0.5 s, sigma 0.8) in runs of 2,000 rows,
/// drawn 25 ways. Short runs are where slow start counts most, and it ends
/// early in many draws: at a window of a few answers that happen to be slow
/// against a no-load estimate taken from the quickest of the first four
/// (a fraction of the median), or at the delay exit on that estimate; the
/// limit then climbs about a slot a round trip. A window taken as slower
/// two standard errors below its mean, however few its answers: 1.13 to
/// 3.43 times as long as at a fixed 256, 1.72 on average; by Student's t
/// for their count, and three answers at least: 1.13 to 3.31, 1.56. Slow
/// start's cut back to where the queue began was often never judged (the
/// load it is measured against lags), and held the limit at three for
/// seconds; cut again while its answers show a queue: 1.13 to 3.41, 1.50
/// (over 60 draws 1.70 to 1.61 on average, the worst 5.44 to 3.72). The
/// bound holds the first; 1.45 is where they should be. A limit of 2.65
/// stuck for eight seconds, its windows too few to judge but for one now
/// and then that changed nothing, drained as one stuck: 1.45, the worst
/// 3.41 → 2.35 (`Controller::drain_if_stuck`).
#[tokio::test(start_paused = true)]
async fn short_runs_against_a_long_tail_over_many_draws() {
    let server = |draw| {
        Sim::new(Server::LongTail {
            mean: Duration::from_millis(500),
            sigma: 0.8,
            draw,
        })
    };
    let mean = mean_ratio_over_draws("long tail", 25, 2000, &[256], server).await;
    assert!(
        mean <= 2.0,
        "adaptive took {mean:.2} times the best fixed on average"
    );
}

/// Second runs of 2,000 rows against answers with a long tail (sigma 0.8),
/// with room for all or capped at 32, each started from what a first run
/// against the same draw learned, 25 draws: within 1.15 times the best
/// fixed concurrency on average, twice at worst (first runs, which
/// slow-start from 4, take 1.45 and 1.08 on average). The first answers of
/// a run started at 24 are the quickest of 24, and taken as the no-load
/// round trip they made every window look queued: one capped second run
/// took 3.46 times a fixed 32 (the first, 1.23), the mean of the capped
/// ones 1.19 against 1.08 (`Controller::seed_base`).
#[tokio::test(start_paused = true)]
async fn second_runs_against_a_long_tail_start_from_what_the_first_learned() {
    let long_tail = |draw| {
        Sim::new(Server::LongTail {
            mean: Duration::from_millis(500),
            sigma: 0.8,
            draw,
        })
    };
    let capped = |draw| {
        Sim::new(Server::CappedLongTail {
            cap: 32,
            mean: Duration::from_millis(100),
            sigma: 0.8,
            draw,
        })
    };
    second_runs_against("long tail", long_tail, 256).await;
    second_runs_against("capped long tail", capped, 32).await;
}

/// 25 draws of `server`, each run once from slow start and once from what
/// that run learned: both against a fixed `best_fixed`, printed under
/// `name`; the second runs bounded.
async fn second_runs_against(name: &str, server: impl Fn(u64) -> Rc<Sim>, best_fixed: usize) {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for draw in draws(25) {
        let fixed = run_rows(&server(draw), Concurrency::Fixed(best_fixed), 2000).await;
        let adaptive = Limiter::new(4, 256);
        let (one, limiter) =
            run_rows_through(&server(draw), adaptive, Concurrency::Adaptive, 2000).await;
        let learned = limiter.snapshot();
        let next = Limiter::new(4, 256);
        next.start_from(learned.limit, learned.floor, learned.held_by_queue);
        let (two, _) = run_rows_through(&server(draw), next, Concurrency::Adaptive, 2000).await;
        assert_eq!((one.ok, two.ok), (2000, 2000));
        first.push(one.seconds / fixed.seconds);
        second.push(two.seconds / fixed.seconds);
    }
    eprintln!(
        "{name}, second runs: {:.2} ({}), worst {:.2}; first runs {:.2} ({})",
        mean(&second),
        listed(&second),
        largest(&second),
        mean(&first),
        listed(&first)
    );
    assert!(mean(&second) <= 1.15, "{name}: {second:?}");
    assert!(largest(&second) <= 2.0, "{name}: {second:?}");
}

/// A server that takes 32 at once and refuses beyond (429, `Retry-After:
/// 1`), its answers of a mean of 0.1 s with a long tail (sigma 0.8), as a
/// gateway in front of a hosted model serves: drawn twenty ways, 3,000
/// rows each. Each window surely quicker than the no-load estimate lowered
/// it, and of the many windows a run judges some are that quick by chance:
/// the estimate sank to half the answers' mean, ordinary windows looked
/// queued, and the limit was cut as low as four, 1.19 times as long as at
/// a fixed 32 on average and 1.51 at worst. It now falls only for two such
/// windows in a row: 1.05 and 1.15.
#[tokio::test(start_paused = true)]
async fn a_capped_server_with_a_long_tail_is_used_to_its_capacity() {
    let server = |draw| {
        let server = Server::CappedLongTail {
            cap: 32,
            mean: Duration::from_millis(100),
            sigma: 0.8,
            draw,
        };
        let wire = Duration::from_micros(200);
        Sim::over_wire(server, wire, Some(Duration::from_secs(1)))
    };
    let name = "capped at 32, long tail";
    let mean = mean_ratio_over_draws(name, 20, 3000, &[32], server).await;
    assert!(
        mean <= 1.1,
        "adaptive took {mean:.2} times a fixed 32 on average"
    );
}

/// A model served with continuous batching on a GPU (vLLM, TGI, SGLang): a
/// step of 20 ms plus 0.2 ms per request in the batch, answers of 25 to 75
/// tokens, at most 128 decoding together. One at a time it answers one a
/// second; 128 at once take 2.3 times as long each and answer 55 a second;
/// beyond 128 they queue. Its round trip grows with the load although more
/// at once serve more: the limit was cut to one or two, and 3,000 rows
/// took 36 times as long as at the best fixed concurrency; then 1.91 times,
/// the limit settling near half the batch, where the round trip is half
/// again the one learned at a lower load. A round trip that rose far less
/// than the load since a lower one is no longer cut for.
#[tokio::test(start_paused = true)]
async fn a_batching_server_is_not_cut_to_a_few_slots() {
    let server = Server::Batching {
        max_batch: 128,
        step: Duration::from_millis(20),
        per_request: Duration::from_micros(200),
        tokens: 50,
    };
    let rows = 3000;
    let (adaptive, best) =
        against_fixed(|| Sim::new(server.clone()), rows, &[16, 32, 64, 128, 256]).await;
    assert_eq!(adaptive.ok, rows);
    let ratio = ratio_to_best_fixed("batching", adaptive, best);
    assert!(
        ratio <= 1.3,
        "adaptive took {ratio:.2} times the best fixed"
    );
}

#[tokio::test(start_paused = true)]
async fn random_rejections_do_not_collapse_the_limit() {
    let sim = Sim::new(Server::RandomErrors {
        one_in: 10,
        latency: LATENCY,
    });
    let limiter = drive(&sim, 64, 256, Duration::from_secs(30)).await;
    // At the best fixed concurrency, 64: a refusal frees its slot at once,
    // so 64 slots answer 640 a second.
    let best = 640.0;
    // The usual share of refusals is learned in the first seconds, while
    // the limit is still small and each window holds few answers.
    let steady = sim.goodput(6.0, 30.0);
    assert!(steady >= 0.9 * best, "goodput {steady:.0}/s");
    let snapshot = limiter.snapshot();
    let lowest = snapshot
        .samples
        .iter()
        .filter(|(at, _)| *at >= Duration::from_secs(6))
        .map(|(_, limit)| *limit)
        .min()
        .unwrap_or(snapshot.limit);
    eprintln!("random: {steady:.0}/s of {best}, lowest limit after 6 s {lowest}");
    assert!(
        lowest >= 32,
        "the limit fell to {lowest}: {:?}",
        snapshot.samples
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_step_down_and_up_the_limit_follows_within_seconds() {
    let sim = Sim::new(Server::Steps {
        steps: vec![
            (Duration::ZERO, 64),
            (Duration::from_secs(10), 16),
            (Duration::from_secs(20), 64),
        ],
        latency: LATENCY,
    });
    drive(&sim, 128, 256, Duration::from_secs(30)).await;
    let down = sim.recovery(10.0, 160.0, 0.9).unwrap();
    assert!(down <= 5.0, "after the step down: {down:.1} s");
    let up = sim.recovery(20.0, 640.0, 0.9).unwrap();
    assert!(up <= 5.0, "after the step up: {up:.1} s");
    let low = sim.goodput(12.0, 20.0);
    assert!(low >= 0.9 * 160.0, "at 16: {low:.0}/s");
    let high = sim.goodput(25.0, 30.0);
    assert!(high >= 0.9 * 640.0, "back at 64: {high:.0}/s");
    let calls = sim.calls_per_success();
    eprintln!(
        "step: down {down:.1} s, up {up:.1} s, at 16 {low:.0}/s, at 64 {high:.0}/s, {calls:.3} calls/answer"
    );
    assert!(calls <= 1.1, "{calls:.3} calls per answer");
}
#[tokio::test(start_paused = true)]
async fn four_shards_share_a_capped_server_as_one_run_uses_it() {
    let server = Server::Capped {
        cap: 32,
        latency: LATENCY,
    };
    let total = 2000;
    // Processes started together begin sending a little apart, and the
    // first to begin has the server to itself for a moment; a scheduler
    // starting pods one after another puts tens of milliseconds between
    // them. `WEIR_SIM_STAGGER_MS` runs one stagger alone.
    let staggers = match env_number("WEIR_SIM_STAGGER_MS") {
        Some(ms) => vec![ms],
        None => (10..=100).step_by(10).collect(),
    };
    let mut ratios = Vec::new();
    // Over no wire, the client whose answer frees a slot takes it again at
    // the same instant; over one of 0.75 to 2.25 ms each way, other
    // clients' requests may come first.
    for wire in [Duration::ZERO, Duration::from_micros(1500)] {
        let one = Sim::over_wire(server.clone(), wire, None);
        let single = drive_shards(&one, 1, total, Duration::ZERO).await[0];
        for &ms in &staggers {
            let four = Sim::over_wire(server.clone(), wire, None);
            let shards = drive_shards(&four, 4, total / 4, Duration::from_millis(ms)).await;
            let last = largest(&shards);
            let calls = four.calls_per_success();
            eprintln!(
                "wire {wire:?}: one run {single:.2} s ({:.3} calls/answer); 4 shards {ms} ms \
                 apart {shards:.2?} ({calls:.3} calls/answer); ratio {:.2}",
                one.calls_per_success(),
                single / last
            );
            ratios.push((wire, ms, single / last));
            if wire.is_zero() && ms == 40 {
                assert!(calls <= 1.12, "{calls:.3} calls per answer");
            }
        }
    }
    // Each limiter learns its share from its own refusals, with no word from
    // the others: together they keep the server about as busy as one does.
    // A shard whose slow start overlaps late is cut to one or two slots
    // against the full server, and its rows' back-offs would hold it back
    // after the others finish (0.55 of one run at 70 ms over no wire, 0.70
    // at 100 ms over a wire) did a back-off the server did not ask for not
    // end once it answers with room to spare.
    let mean = ratios.iter().map(|(_, _, ratio)| ratio).sum::<f64>() / ratios.len() as f64;
    assert!(
        ratios.iter().all(|(_, _, ratio)| *ratio >= 0.85) && mean >= 0.92,
        "4 shards against one run (wire, stagger ms, ratio): {ratios:.2?}, mean {mean:.3}"
    );
}
#[tokio::test(start_paused = true)]
async fn random_error_bursts_cost_little_against_the_best_fixed_concurrency() {
    let server = Server::Bursts {
        cap: 64,
        latency: LATENCY,
        every: Duration::from_secs(2),
        burst: Duration::from_millis(400),
    };
    let rows = 10_000;
    let (adaptive, best) =
        against_fixed(|| Sim::new(server.clone()), rows, &[16, 32, 48, 64, 96]).await;
    assert_eq!(adaptive.ok, rows);
    assert_near_best_fixed("bursts", adaptive, best);
}

/// The test LLM server's `bursts` preset, capped at 64: four in five
/// requests refused in a quarter of the 1 s windows (the server's own
/// `schedule`, or those drawn with `seed`), 3 % outside them, each refusal
/// asking for a second's wait; over a wire of 0.75 to 2.25 ms each way.
/// Answers take 100 ms, or `WEIR_SIM_LATENCY_MS`.
fn dense_bursts(schedule: Option<weir_test_llm_server::Bursts>, seed: u64) -> impl Fn() -> Rc<Sim> {
    dense_bursts_answered_in(latency_asked_or_default(), schedule, seed)
}

/// `WEIR_SIM_LATENCY_MS`, or `LATENCY`.
fn latency_asked_or_default() -> Duration {
    env_number("WEIR_SIM_LATENCY_MS").map_or(LATENCY, Duration::from_millis)
}

/// `dense_bursts` with answers in `latency`.
fn dense_bursts_answered_in(
    latency: Duration,
    schedule: Option<weir_test_llm_server::Bursts>,
    seed: u64,
) -> impl Fn() -> Rc<Sim> {
    let server = Server::WindowBursts {
        cap: 64,
        latency,
        window: Duration::from_secs(1),
        chance: 25,
        share: 80,
        outside: 3,
        schedule,
        seed,
    };
    move || {
        Sim::over_wire(
            server.clone(),
            Duration::from_micros(1500),
            Some(Duration::from_secs(1)),
        )
    }
}

#[tokio::test(start_paused = true)]
async fn dense_error_bursts_cost_little_against_the_best_fixed_concurrency() {
    let rows = 10_000;
    let (adaptive, best) = against_fixed(dense_bursts(None, 0), rows, &[16, 32, 64, 128]).await;
    assert_eq!(adaptive.ok, rows);
    assert_near_best_fixed("dense bursts", adaptive, best);
}

#[tokio::test(start_paused = true)]
async fn hung_and_failing_requests_cost_little_against_the_best_fixed_concurrency() {
    // A quarter of the requests fail, 1.25 % hang for 30 to 60 s, 3 %
    // answer 10 to 30 times late. Which requests hang decides much of a
    // run's time (one sent in its last seconds holds it open for a learned
    // attempt timeout), so eight draws of them are run, each adaptive and at
    // fixed concurrencies. `WEIR_SIM_SEED=N` runs draw N alone.
    let rows = 2000;
    let mut ratios = Vec::new();
    for seed in draws(8) {
        let server = Server::Faulty {
            cap: 64,
            latency: Duration::from_millis(200),
            refused: 130,
            failed: 120,
            hung: 13,
            slow: 30,
            seed: seed.wrapping_mul(0x9E37_79B9),
        };
        let (adaptive, (_, best)) =
            against_fixed(|| Sim::new(server.clone()), rows, &[32, 64, 96, 128]).await;
        assert!(
            adaptive.ok * 100 >= rows * 99,
            "{} of {rows} ok",
            adaptive.ok
        );
        ratios.push(adaptive.seconds / best.seconds);
    }
    let mean = mean(&ratios);
    eprintln!("faulty by draw: adaptive / best fixed {ratios:.2?}, mean {mean:.2}");
    assert!(
        mean <= 1.5,
        "adaptive took {mean:.2} times the best fixed on average"
    );
}

#[tokio::test(start_paused = true)]
async fn slow_start_ends_against_a_server_with_room_for_two() {
    // Slow start outlives refusals that say nothing of the endpoint's room
    // (a burst in a run's first second). Against a server that takes two at
    // once, every window holds the refusals of slow start's overshoot, so it
    // must end on the answers to requests sent with at most two in flight.
    let sim = Sim::over_wire(
        Server::Capped {
            cap: 2,
            latency: LATENCY,
        },
        Duration::from_micros(1500),
        Some(Duration::from_millis(200)),
    );
    let run = run_rows(&sim, Concurrency::Adaptive, 300).await;
    let calls = sim.calls_per_success();
    eprintln!(
        "room for two: {:.1} s, {calls:.3} calls/answer",
        run.seconds
    );
    assert_eq!(run.ok, 300);
    assert!(calls <= 1.3, "{calls:.3} calls per answer");
}

/// A server capped at `cap` answering in `latency`, 0.75 to 2.25 ms each
/// way over the wire, each refusal asking for a second's wait.
fn capped_over_wire(cap: usize, latency: Duration) -> Rc<Sim> {
    Sim::over_wire(
        Server::Capped { cap, latency },
        Duration::from_micros(1500),
        Some(Duration::from_secs(1)),
    )
}

#[tokio::test(start_paused = true)]
async fn a_whole_capped_run_is_served_near_capacity() {
    // Each way over the wire takes 0.75 to 2.25 ms, so a client must keep
    // a little more than the cap in flight to use all of it; a refusal
    // parks its request for a second, so one late in the run holds the run
    // open after every other row is done. Slow start's overshoot halved
    // (36 to 18 slots) left 98.75 % of the told client's goodput; cut to
    // where its refusals began, 99.2 %.
    let over_wire = || capped_over_wire(32, LATENCY);
    let rows = 10_000;
    let ideal = rows as f64 / 320.0;
    let told = run_rows(&over_wire(), Concurrency::Fixed(32), rows).await;
    let sim = over_wire();
    let run = run_rows(&sim, Concurrency::Adaptive, rows).await;
    let (goodput, told_goodput) = (ideal / run.seconds, ideal / told.seconds);
    let calls = sim.calls_per_success();
    eprintln!(
        "capped, whole run: {:.2} s against {ideal:.2} s ideal, goodput {:.1} % \
         (told the cap: {:.1} %), {calls:.3} calls/row",
        run.seconds,
        goodput * 100.0,
        told_goodput * 100.0
    );
    assert_eq!(sim.answered(), rows);
    assert!(
        goodput >= 0.99 * told_goodput,
        "whole-run goodput {:.1} % against {:.1} % for a client told the cap",
        goodput * 100.0,
        told_goodput * 100.0
    );
    assert!(calls <= 1.05, "{calls:.3} calls per row");
}

#[tokio::test(start_paused = true)]
async fn a_long_retry_after_does_not_hold_a_capped_run_open_at_its_end() {
    // Providers ask for seconds between a 429 and the next try (Azure
    // OpenAI's Retry-After is often 10 s or more). A request refused in the
    // run's last seconds waits that long with nothing else left to send, so
    // one probe beyond the edge there costs the run the whole Retry-After.
    let rows = 10_000;
    for retry_after in [5u64, 20] {
        let over_wire = || {
            Sim::over_wire(
                Server::Capped {
                    cap: 32,
                    latency: LATENCY,
                },
                Duration::from_micros(1500),
                Some(Duration::from_secs(retry_after)),
            )
        };
        let told = run_rows(&over_wire(), Concurrency::Fixed(32), rows).await;
        for window in [rows, crate::config::DEFAULT_REORDER_WINDOW] {
            let sim = over_wire();
            let limiter = Limiter::new(4, 256);
            let (run, _) =
                run_rows_in_window(&sim, limiter, Concurrency::Adaptive, rows, window).await;
            let ratio = run.seconds / told.seconds;
            eprintln!(
                "capped, Retry-After {retry_after} s, reorder window {window}: {:.2} s against \
                 {:.2} s told the cap ({ratio:.3}×), {:.3} calls/row",
                run.seconds,
                told.seconds,
                sim.calls_per_success()
            );
            assert_eq!(run.ok, rows);
            // Rows refused as the last stretch begins hold those behind them
            // back once the window is full, so that the stretch outlasts
            // the Retry-After; the edge must hold to its end all the same.
            let most = if window < rows { 1.3 } else { 1.05 };
            assert!(
                ratio <= most,
                "Retry-After {retry_after} s, window {window}: {ratio:.3} times the told \
                 client's time"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn capped_servers_of_every_size_and_speed_are_used_near_capacity() {
    // Caps from 2 to 200, answers in 20 ms to 2 s, `cap * 60` rows: the
    // adaptive limit against a client told the cap. At 20 ms a run lasts
    // 1.4 s, and a row refused while the limit finds the cap waits out its
    // 1 s Retry-After, so only the calls are bounded there. A probe of a
    // small cap's edge every few round trips costs a refusal a few rows:
    // 1.3 calls per row at a cap of 2 before probes of an edge found again
    // waited longer each time.
    for cap in [2usize, 4, 8, 32, 128, 200] {
        for ms in [20u64, 300, 2000] {
            let over_wire = || capped_over_wire(cap, Duration::from_millis(ms));
            let rows = (cap * 60).max(200);
            let told = run_rows(&over_wire(), Concurrency::Fixed(cap), rows).await;
            let sim = over_wire();
            let run = run_rows(&sim, Concurrency::Adaptive, rows).await;
            let (ratio, calls) = (run.seconds / told.seconds, sim.calls_per_success());
            eprintln!(
                "capped at {cap}, {ms} ms, {rows} rows: {:.2} s against {:.2} s told the cap \
                 ({ratio:.2}×), {calls:.3} calls/row",
                run.seconds, told.seconds
            );
            assert_eq!(run.ok, rows);
            assert!(
                calls <= 1.15,
                "cap {cap}, {ms} ms: {calls:.3} calls per row"
            );
            if ms >= 300 {
                assert!(
                    ratio <= 1.15,
                    "cap {cap}, {ms} ms: {ratio:.2} times the told"
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_short_run_through_dense_error_bursts_costs_little_against_the_best_fixed_concurrency() {
    // The `bursts` preset as the benchmark meets it: 2,000 rows, bursts in
    // the windows the test LLM server's own hash picks (3 s to 5 s, then
    // 7 s to 8 s), so that most rows go before the first burst and the rest
    // wait through it.
    let rows = 2000;
    let schedule = weir_test_llm_server::presets::error_bursts(LATENCY).bursts;
    let server = dense_bursts(schedule, 0);
    let (adaptive, best) = against_fixed(server, rows, &[16, 32, 64, 128]).await;
    assert_eq!(adaptive.ok, rows);
    assert_near_best_fixed("short run, dense bursts", adaptive, best);
}

#[tokio::test(start_paused = true)]
async fn dense_error_bursts_on_many_schedules_cost_little_on_average() {
    // One schedule of bursts says as much of luck as of the controller: a
    // burst during slow start, or just before the last rows are done, costs
    // seconds whatever the limit. Many schedules, each run adaptive and at
    // fixed concurrencies, say more. `WEIR_SIM_SEED=N` runs schedule N alone
    // (with `WEIR_SIM_TRACE` to see its limit), `WEIR_SIM_SCHEDULES=N` runs
    // N schedules instead of 32.
    let ratios = dense_bursts_by_schedule(latency_asked_or_default()).await;
    let mean = mean(&ratios);
    let beyond = ratios.iter().filter(|&&r| r > 1.5).count();
    assert!(
        mean <= 1.5,
        "adaptive took {mean:.2} times the best fixed on average"
    );
    assert!(
        beyond * 8 <= ratios.len(),
        "{beyond} of {} schedules took more than 1.5 times the best fixed",
        ratios.len()
    );
}

/// The same bursts with answers in a second, each lasting about a round
/// trip. Cut after cut within one burst took the limit from 64 to one or two
/// in milliseconds, and growing back took longer than the gap to the next
/// burst: a mean of 3.34 times the best fixed concurrency, every schedule
/// beyond 1.5. An endpoint known to refuse whatever the load is now cut at
/// most once a round trip.
#[tokio::test(start_paused = true)]
async fn dense_error_bursts_against_answers_in_a_second_do_not_hold_the_limit_down() {
    let ratios = dense_bursts_by_schedule(Duration::from_secs(1)).await;
    let mean = mean(&ratios);
    assert!(
        mean <= 2.0,
        "adaptive took {mean:.2} times the best fixed on average"
    );
}

/// 2,000 rows against the dense bursts of 32 schedules (or
/// `WEIR_SIM_SCHEDULES`) with answers in `latency`, adaptive and at fixed
/// concurrencies; every row must end ok. Returns the adaptive run's time
/// over the best fixed one's, by schedule.
async fn dense_bursts_by_schedule(latency: Duration) -> Vec<f64> {
    let schedules = env_number("WEIR_SIM_SCHEDULES").unwrap_or(32);
    let server =
        |seed: u64| dense_bursts_answered_in(latency, None, seed.wrapping_mul(0x9E37_79B9))();
    let ratios = ratios_over_draws(schedules, 2000, &[32, 64, 128], server).await;
    let mean = mean(&ratios);
    let beyond = ratios.iter().filter(|&&r| r > 1.5).count();
    eprintln!(
        "dense bursts by schedule, answers in {latency:?}: adaptive / best fixed \
         {ratios:.2?}, mean {mean:.2}, {beyond} beyond 1.5"
    );
    ratios
}

/// ChaosLLM's presets of refusals thrown whatever the load: `outside` per
/// cent of requests refused with 429/529/503 at any time, and `share` per
/// cent in the first 5 s of every `every` seconds, from the start; answers
/// in `latency`, refusals asking for 2 s (the middle of their 1 to 3 s).
/// Each runs at its own latency and with answers in 300 ms, as slow as a
/// short completion's; `WEIR_SIM_LATENCY_MS` runs them at that latency
/// alone instead. Every run is made before any is judged.
#[tokio::test(start_paused = true)]
async fn chaosllm_refusal_presets_cost_little_against_the_best_fixed_concurrency() {
    let ms = Duration::from_millis;
    let latency_asked = env_number("WEIR_SIM_LATENCY_MS").map(ms);
    let mut ratios = Vec::new();
    for preset in CHAOSLLM_PRESETS {
        let latencies = match latency_asked {
            Some(asked) => vec![asked],
            None => vec![preset.own_latency, ms(300)],
        };
        for latency in latencies {
            ratios.push(preset.against_fixed(latency).await);
        }
    }
    assert!(
        ratios.iter().all(|(_, ratio)| *ratio <= 1.5),
        "adaptive against the best fixed: {ratios:?}"
    );
}

/// The densest preset with answers in 2 and 3 s, as long completions take.
/// A burst then lasts two round trips or less, and the refusals at one or
/// two requests in flight are nearly all of them. While the usual share
/// could not pass a half, each burst cut the limit to one, the cuts could
/// not be judged at so few slots, and at 3 s the limit stayed at one or
/// two from the second minute on: 46 times as long as a fixed concurrency
/// of 256; now 1.34 and 1.46 times at 2 and 3 s. Growing back after each
/// burst still takes round trips, so the bound is against a collapse, with
/// room above those figures.
#[tokio::test(start_paused = true)]
async fn refusal_bursts_against_slow_answers_do_not_collapse_the_limit() {
    let extreme = CHAOSLLM_PRESETS
        .iter()
        .find(|preset| preset.name == "stress_extreme")
        .unwrap();
    let mut ratios = Vec::new();
    for seconds in [2, 3] {
        ratios.push(extreme.against_fixed(Duration::from_secs(seconds)).await);
    }
    assert!(
        ratios.iter().all(|(_, ratio)| *ratio <= 2.5),
        "adaptive against the best fixed: {ratios:?}"
    );
}

/// One of ChaosLLM's presets of refusals thrown whatever the load.
struct ChaosPreset {
    name: &'static str,
    own_latency: Duration,
    /// Seconds between the starts of bursts, each 5 s long.
    every: u64,
    /// Per cent refused within a burst and outside one.
    share: u64,
    outside: u64,
}

const CHAOSLLM_PRESETS: [ChaosPreset; 3] = [
    ChaosPreset {
        name: "stress_aimd",
        own_latency: Duration::from_millis(30),
        every: 30,
        share: 90,
        outside: 21,
    },
    ChaosPreset {
        name: "stress_extreme",
        own_latency: Duration::from_millis(10),
        every: 15,
        share: 97,
        outside: 31,
    },
    ChaosPreset {
        name: "realistic",
        own_latency: Duration::from_millis(100),
        every: 60,
        share: 65,
        outside: 7,
    },
];

impl ChaosPreset {
    /// 2,000 rows against the preset with answers in `latency`, refusals
    /// asking for 2 s, adaptive and at fixed concurrencies; every row must
    /// end ok. Returns the label printed and the adaptive run's time over
    /// the best fixed one's.
    async fn against_fixed(&self, latency: Duration) -> (String, f64) {
        let server = Server::Periodic {
            latency,
            every: Duration::from_secs(self.every),
            burst: Duration::from_secs(5),
            share: self.share,
            outside: self.outside,
        };
        let rows = 2000;
        let (adaptive, best) = against_fixed(
            || {
                Sim::over_wire(
                    server.clone(),
                    Duration::from_micros(1500),
                    Some(Duration::from_secs(2)),
                )
            },
            rows,
            &[16, 32, 64, 128, 256],
        )
        .await;
        assert_eq!(adaptive.ok, rows);
        let label = format!("{}, {} ms", self.name, latency.as_millis());
        let ratio = ratio_to_best_fixed(&label, adaptive, best);
        (label, ratio)
    }
}

/// Queueing servers of 1 to 64 slots answering in 200 ms or 2 s, each
/// answer taking its service time or, drawn five ways, half to one and a
/// half times it. The no-load estimate was lowered to the mean of any
/// quicker window: at a limit of one, a window holds an answer or two, and
/// the quickest of them made ordinary answers look queued. Against two
/// slots at 2 s the limit stayed at one for a minute, 66 % of capacity.
#[tokio::test(start_paused = true)]
async fn queueing_servers_of_every_size_and_speed_get_a_short_queue() {
    for slots in [1usize, 2, 4, 8, 32, 64] {
        for ms in [200u64, 2000] {
            let service = Duration::from_millis(ms);
            let run = service * 150;
            let (goodputs, queues) = queueing_draws(slots, service, 256, run, 0.1).await;
            let least_goodput = least(&goodputs);
            let mean_goodput = mean(&goodputs);
            let mean_queue = mean(&queues);
            eprintln!(
                "queueing at {slots} x {ms} ms: goodput {:.1} % (least {:.1} %), mean queue {mean_queue:.2} ({})",
                mean_goodput * 100.0,
                least_goodput * 100.0,
                listed(&queues)
            );
            assert!(least_goodput >= 0.85, "{slots} x {ms} ms: {goodputs:?}");
            assert!(mean_goodput >= 0.95, "{slots} x {ms} ms: {goodputs:?}");
            // About what the server serves at once, and a few more where
            // that is a few: growth probes a slot beyond the edge, which at
            // one slot is a queue of one.
            assert!(
                mean_queue <= slots as f64 + 3.0,
                "{slots} x {ms} ms: mean queue {mean_queue:.2}"
            );
        }
    }
}

/// Short runs, 75 answers' time (300 rows against 4 slots of 100 ms),
/// where slow start's overshoot and the first no-load estimate weigh most.
/// Against 4 slots answering alike, a window that closed at 0.4 s cut a
/// limit of 30 only to 27, and the next window to judge it closed at 2.3 s
/// (a mean queue of 8.6): a gap that stands. Against 4 slots whose answers
/// vary, a limit of 2.7 neither grew nor was judged for five seconds (56 %
/// of capacity) before `Controller::drain_if_stuck`; 79 % with it, and
/// 85 % once windows judged without a change at so few slots count too.
#[tokio::test(start_paused = true)]
async fn short_runs_against_queueing_servers_get_a_short_queue() {
    for slots in [2usize, 4, 8, 16] {
        let service = Duration::from_millis(100);
        let (goodputs, queues) = queueing_draws(slots, service, 64, service * 75, 0.0).await;
        let least_goodput = least(&goodputs);
        eprintln!(
            "short queueing run at {slots} x 100 ms: goodput {:.1} % (least {:.1} %), mean queue \
             {:.2} ({})",
            mean(&goodputs) * 100.0,
            least_goodput * 100.0,
            mean(&queues),
            listed(&queues)
        );
        // Slow start from 4 takes a few round trips of the 75.
        assert!(mean(&goodputs) >= 0.85, "{slots} slots: {goodputs:?}");
        assert!(least_goodput >= 0.8, "{slots} slots: {goodputs:?}");
        assert!(
            mean(&queues) <= slots as f64 + 3.0,
            "{slots} slots: mean queues {queues:?}"
        );
    }
}

/// A second run against a server serving one, two or four at once, started
/// from the limit the first learned (`Controller::start_from`). Below the
/// initial limit of 4 it was ignored, and slow start overshot to 14 against
/// one slot again, a queue the first seconds of every run waited in.
#[tokio::test(start_paused = true)]
async fn a_second_run_against_a_queueing_server_starts_from_its_queue() {
    let service = Duration::from_millis(100);
    let run = service * 75;
    for slots in [1usize, 2, 4] {
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for seed in QUEUEING_DRAWS {
            let server = queueing_draw(slots, service, seed);
            let sim = Sim::new(server.clone());
            let learned = drive(&sim, 64, 256, run).await.snapshot();
            first.push(sim.mean_queue_between(Duration::ZERO, run / 5));
            let limiter = Limiter::new(4, 64);
            limiter.start_from(learned.limit, learned.floor, learned.held_by_queue);
            let sim = Sim::new(server);
            drive_through(&sim, limiter, 256, run).await;
            second.push(sim.mean_queue_between(Duration::ZERO, run / 5));
            let goodput = sim.goodput(0.0, run.as_secs_f64()) / (slots as f64 / 0.1);
            assert!(goodput >= 0.9, "{slots} slots, draw {seed}: {goodput:.2}");
        }
        eprintln!(
            "second run at {slots} x 100 ms: mean queue over the first 1.5 s {:.2} ({}), the \
             first run's {:.2} ({})",
            mean(&second),
            listed(&second),
            mean(&first),
            listed(&first)
        );
        assert!(
            largest(&second) <= slots as f64 + 1.0,
            "{slots} slots: {second:?}"
        );
    }
}

/// A server that served two at once when a run learned its limit now
/// serves sixteen (a local server restarted with more slots): the next run
/// starts at two past slow start, and finds the rest by probing.
#[tokio::test(start_paused = true)]
async fn a_queue_learned_low_against_a_server_grown_since_is_outgrown() {
    let service = Duration::from_millis(100);
    let sim = Sim::new(Server::Queueing {
        slots: 16,
        service,
        varied: false,
        seed: 0,
        rescaled: None,
    });
    let limiter = Limiter::new(4, 64);
    limiter.start_from(2, 1, true);
    let run = Duration::from_secs(10);
    drive_through(&sim, limiter, 256, run).await;
    let reached = sim.recovery(0.0, 160.0, 0.9);
    let goodput = sim.goodput(0.0, run.as_secs_f64()) / 160.0;
    eprintln!(
        "a queue learned at 2, 16 slots now: 90 % after {reached:?} s, {goodput:.2} of capacity over 10 s"
    );
    assert!(reached.is_some_and(|s| s <= 2.0), "{reached:?}");
}

/// The draws of a queueing server the queueing tests run against
/// (`queueing_draw`).
const QUEUEING_DRAWS: std::ops::Range<u64> = 0..6;

/// Draw `seed` of a server serving `slots` at once in `service`: the first
/// with every answer taking `service`, the rest with answers from half to
/// one and a half times it.
fn queueing_draw(slots: usize, service: Duration, seed: u64) -> Server {
    Server::Queueing {
        slots,
        service,
        varied: seed > 0,
        seed,
        rescaled: None,
    }
}

/// Six draws of a server serving `slots` at once in `service` (the first
/// with answers alike, the others varied), each driven for `run` at a pool
/// of `pool`: the share of its capacity each served from `from` of the run
/// on, and its mean queue.
async fn queueing_draws(
    slots: usize,
    service: Duration,
    pool: usize,
    run: Duration,
    from: f64,
) -> (Vec<f64>, Vec<f64>) {
    let capacity = slots as f64 / service.as_secs_f64();
    let (mut goodputs, mut queues) = (Vec::new(), Vec::new());
    for seed in QUEUEING_DRAWS {
        let sim = Sim::new(queueing_draw(slots, service, seed));
        drive(&sim, pool, 256, run).await;
        let secs = run.as_secs_f64();
        goodputs.push(sim.goodput(secs * from, secs) / capacity);
        queues.push(sim.mean_queue(run));
    }
    (goodputs, queues)
}

/// A long run against the queueing server of the figures (8 at once,
/// 200 ms): windows held at up to half again the no-load round trip each
/// moved the estimate a little towards their mean, and the queue held grew
/// with the run, 6 over 30 s and 20 over ten minutes.
#[tokio::test(start_paused = true)]
async fn a_long_run_keeps_a_queueing_servers_queue_short() {
    let run = Duration::from_secs(600);
    let (sim, limiter) = against_eight_at_once(run).await;
    let goodput = sim.goodput(30.0, 600.0);
    let queue = sim.mean_queue(run);
    let limit = limiter.snapshot().limit;
    eprintln!("ten minutes queueing: {goodput:.1}/s of 40, mean queue {queue:.2}, limit {limit}");
    assert!(goodput >= 0.95 * 40.0, "goodput {goodput:.1}/s");
    assert!(queue <= 8.0, "mean queue {queue:.2}");
    assert!(limit <= 20, "limit {limit}");
}

/// A queueing server of `slots` answering in 200 ms, `factor` times that
/// from 20 s on, driven for 80 s at a pool of 256; and the share of its
/// new capacity used from 30 s on.
async fn rescaled_at_twenty_seconds(slots: usize, factor: f64, varied: bool) -> (Rc<Sim>, f64) {
    let service = Duration::from_millis(200);
    let sim = Sim::new(Server::Queueing {
        slots,
        service,
        varied,
        seed: 1,
        rescaled: Some((Duration::from_secs(20), factor)),
    });
    drive(&sim, 256, 256, Duration::from_secs(80)).await;
    // At most the pool's 256 at once where the server takes more.
    let capacity = slots.min(256) as f64 / (service.as_secs_f64() * factor);
    let after = sim.goodput(30.0, 80.0) / capacity;
    (sim, after)
}

/// Servers whose answers take two or three times as long from 20 s on (a
/// run's later prompts are longer, or the server's other tenants take
/// more of it): the longer round trip is the answers' own, learned as the
/// no-load one once a cut shows it does not follow the load.
#[tokio::test(start_paused = true)]
async fn a_server_that_slows_is_used_as_fully_after() {
    for (slots, factor) in [(8usize, 2.0f64), (100_000, 3.0)] {
        for varied in [false, true] {
            let (sim, after) = rescaled_at_twenty_seconds(slots, factor, varied).await;
            let queue = sim.mean_queue(Duration::from_secs(80));
            eprintln!(
                "slows {factor} times at {slots} slots (varied {varied}): {:.1} % of capacity after, mean queue {queue:.2}",
                after * 100.0
            );
            assert!(after >= 0.9, "{:.1} % of capacity after", after * 100.0);
            assert!(queue <= slots as f64, "mean queue {queue:.2}");
        }
    }
}

/// Servers serving one or two at a time, answers of 120 ms varied in
/// length, that take twice as long from 150 s on: the requests sent alone
/// by then were answered minutes before, and still judge queue cuts
/// (`Controller::queued_by_alone`). The server's slower answers show once
/// the limit is low enough to send requests alone again; meanwhile it
/// stays busy.
#[tokio::test(start_paused = true)]
async fn a_server_that_slows_late_is_used_as_fully_after() {
    let service = Duration::from_millis(120);
    for slots in [1usize, 2] {
        let mut queues = Vec::new();
        for seed in draws(4) {
            let sim = Sim::new(Server::Queueing {
                slots,
                service,
                varied: true,
                seed,
                rescaled: Some((Duration::from_secs(150), 2.0)),
            });
            drive(&sim, 64, 64, Duration::from_secs(300)).await;
            let capacity = slots as f64 / (service.as_secs_f64() * 2.0);
            let after = sim.goodput(160.0, 300.0) / capacity;
            assert!(
                after >= 0.95,
                "draw {seed}: {:.1} % of capacity after",
                after * 100.0
            );
            queues.push(sim.mean_queue_between(Duration::from_secs(150), Duration::from_secs(300)));
        }
        let mean = mean(&queues);
        eprintln!(
            "slows late at {slots} slots: mean queue after by draw {queues:.2?}, mean {mean:.2}"
        );
        assert!(mean <= slots as f64, "mean queue {mean:.2}");
    }
}

/// A server whose answers take half as long from 20 s on (its other tenants
/// left, or a run's later prompts are shorter). A window's round trip
/// lowers the no-load estimate only when it is quicker, and at the load
/// the old estimate allows, a queue of the server's slots or more makes
/// every window as slow as before: without drains (see
/// `controller/drain.rs`) the faster server kept a queue of 31 over the last
/// 40 s, four times its slots.
#[tokio::test(start_paused = true)]
async fn a_server_that_speeds_up_gets_a_short_queue_after() {
    for varied in [false, true] {
        let slots = 8;
        let (sim, after) = rescaled_at_twenty_seconds(slots, 0.5, varied).await;
        let queue = sim.mean_queue_between(Duration::from_secs(40), Duration::from_secs(80));
        let peak = sim.peak_queue_from(Duration::from_secs(20));
        eprintln!(
            "speeds up twice at {slots} slots (varied {varied}): {:.1} % of capacity after, mean queue over the last 40 s {queue:.2}, longest queue after the change {peak}",
            after * 100.0
        );
        assert!(after >= 0.9, "{:.1} % of capacity after", after * 100.0);
        assert!(queue <= slots as f64, "mean queue {queue:.2}");
        // The limit probes onwards while answers come quicker than the old
        // no-load round trip, until a window measures the new one: a queue
        // of 20 and 22 for a moment. Answers kept by band from before the
        // change, compared against, let it reach 46.
        assert!(peak <= 3 * slots, "a queue of {peak} after the change");
    }
}
