use super::growth::{MIN_GROWTH, growth_per_round_trip};
use super::losses::SERVED_MANY;
use super::record::thin;
use super::*;

/// `ok` answered and `lost` refused.
fn tally(ok: u32, lost: u32) -> Tally {
    Tally {
        ok,
        lost,
        ..Tally::default()
    }
}

/// A controller that has had answers to 4,000 requests sent with 1 to
/// `levels` in flight, in turn, each refused when `refused(i, in_flight)`.
fn answered(levels: usize, refused: impl Fn(usize, usize) -> bool) -> Controller {
    let start = Instant::now();
    let mut controller = Controller::new(4, 128, start);
    for i in 0..4000 {
        let in_flight = i % levels + 1;
        let sent_at = start + Duration::from_millis(i as u64);
        let signal = if refused(i, in_flight) {
            Signal::Overload
        } else {
            Signal::Success
        };
        controller.on_answer(
            sent_at + Duration::from_millis(100),
            sent_at,
            in_flight,
            signal,
        );
    }
    controller
}

#[test]
fn slow_starts_first_overshoot_is_cut_to_where_its_refusals_began() {
    let start = Instant::now();
    let cut_at = |refused_in_flight: [usize; 4], cut_before: bool| {
        let mut controller = Controller::new(36, 128, start);
        controller.cut_before = cut_before;
        for (i, in_flight) in refused_in_flight.into_iter().enumerate() {
            let sent_at = start + Duration::from_millis(1 + i as u64);
            let now = sent_at + Duration::from_millis(1);
            controller.on_answer(now, sent_at, in_flight, Signal::Overload);
        }
        controller.limit()
    };
    // A server taking 32 refuses what was sent beyond it.
    assert_eq!(cut_at([33, 34, 35, 36], false), 32);
    // Refusals far below the limit show no edge; nor do they once the
    // endpoint has refused before: halved.
    assert_eq!(cut_at([3, 20, 30, 35], false), 18);
    assert_eq!(cut_at([33, 34, 35, 36], true), 18);
}

#[test]
fn a_burst_that_answered_half_of_those_sent_alone_does_not_end_slow_start() {
    // Whether slow start goes on after refusals at two and three in
    // flight, given what the requests sent alone (`one`) and with one or two
    // others (`two_or_three`) brought so far.
    let after_cut = |one: Tally, two_or_three: Tally| {
        let start = Instant::now();
        let mut controller = Controller::new(4, 128, start);
        controller.outcomes_by_band[0] = one;
        controller.outcomes_by_band[1] = two_or_three;
        for (i, in_flight) in [2, 3].into_iter().enumerate() {
            let sent_at = start + Duration::from_millis(1 + i as u64);
            controller.on_answer(sent_at, sent_at, in_flight, Signal::Overload);
        }
        assert!(controller.limit() < 4, "the refusals cut the limit");
        controller.slow_start
    };
    // Four in five refused at every load: those sent alone, each often
    // after the refusals of those sent with it, were answered half the
    // time.
    assert!(after_cut(tally(3, 2), tally(1, 6)));
    assert!(after_cut(tally(4, 3), tally(2, 9)));
    // An endpoint with room for two answers those sent alone.
    assert!(!after_cut(tally(2, 0), tally(2, 3)));
    assert!(!after_cut(tally(8, 1), tally(5, 6)));
}

#[test]
fn a_cut_is_kept_with_its_reason_and_growth_is_not_a_decision() {
    let start = Instant::now();
    let mut controller = Controller::new(36, 128, start);
    for (i, in_flight) in [33, 34, 35, 36].into_iter().enumerate() {
        let sent_at = start + Duration::from_millis(1 + i as u64);
        controller.on_answer(
            sent_at + Duration::from_millis(1),
            sent_at,
            in_flight,
            Signal::Overload,
        );
    }
    let cut = Decision {
        at: Duration::from_millis(5),
        from: 36,
        to: 32,
        why: Why::Refused {
            refused: 4,
            slow_start: true,
        },
    };
    assert_eq!(controller.decisions(), [cut]);
    // Four refusals of 36 overshoot slow start (a few in a hundred do not).
    // Answers at a full limit then grow it, which is no decision.
    for i in 0..64 {
        let sent_at = start + Duration::from_millis(10 + i);
        controller.on_send(sent_at, true);
        let decided = controller.on_answer(
            sent_at + Duration::from_millis(100),
            sent_at,
            32,
            Signal::Success,
        );
        assert_eq!(decided, None);
    }
    assert!(controller.limit() > 32, "{}", controller.limit());
    assert_eq!(controller.decisions(), [cut]);
}

#[test]
fn a_decision_after_growth_within_one_answer_is_kept_though_the_limit_ends_where_it_began() {
    let start = Instant::now();
    let mut controller = Controller::new(6, 128, start);
    // An answer grew the limit from 6.2 to 7.2, and a cut then took it to
    // 6.5: no change of the whole-number limit, but a decision.
    controller.limit = 6.5;
    controller.decided(Why::Draining, 7.2);
    let decided = controller.note_change(6.2, start + Duration::from_secs(1));
    assert_eq!(decided.map(|d| (d.from, d.to)), Some((7, 6)));
    assert_eq!(controller.changes(), [(Duration::ZERO, 6)]);
    let kept = controller
        .decisions()
        .iter()
        .map(|d| (d.from, d.to))
        .collect::<Vec<_>>();
    assert_eq!(kept, [(7, 6)]);
    assert_eq!(controller.peak(), 7);
}

#[test]
fn refusals_at_every_level_in_flight_are_the_endpoints_usual_share() {
    let random = answered(64, |i, _| i % 10 < 3);
    let usual = random.usual_share();
    assert!((0.25..0.35).contains(&usual), "{usual}");
    // A server taking 32 refuses only above it: no usual share.
    let capped = answered(40, |_, in_flight| in_flight > 32);
    assert_eq!(capped.usual_share(), 0.0);
}

#[test]
fn a_share_refused_that_climbs_from_none_counts_a_round_trip_later() {
    let start = Instant::now();
    let mut controller = Controller::new(4, 128, start);
    let at = |ms: f64| start + Duration::from_secs_f64(ms / 1000.0);
    // Two seconds served at 48 in flight, answers in 100 ms.
    for ms in 0..2000 {
        let sent_at = at(f64::from(ms));
        controller.on_answer(
            sent_at + Duration::from_millis(100),
            sent_at,
            48,
            Signal::Success,
        );
    }
    controller.close_window(at(2099.0));
    assert_eq!(controller.usual_share(), 0.0);
    // The room falls: requests at the same load come back refused, 40
    // of them within 4 ms.
    for i in 0..40 {
        let sent_at = at(2100.0 + f64::from(i) * 0.1);
        controller.on_answer(
            sent_at + Duration::from_millis(1),
            sent_at,
            48,
            Signal::Overload,
        );
    }
    let banded = controller
        .banded_share()
        .expect("a band with enough answers");
    assert!(banded >= MIN_CUT, "{banded}");
    let usual = controller.usual_share();
    assert!(usual < MIN_CUT / 10.0, "{usual}");
    // A window that closes just after the first refusals still reads
    // them as the load's; one more, and the rise counts.
    controller.close_window(at(2110.0));
    assert!(controller.usual_share() < MIN_CUT / 10.0);
    controller.close_window(at(2210.0));
    let usual = controller.usual_share();
    assert!(usual >= MIN_CUT, "{usual}");
    // A share known before rises with the bands at once.
    let mut random = answered(64, |i, _| i % 10 < 3);
    let before = random.usual_share();
    let sent_at = start + Duration::from_millis(4100);
    for in_flight in [1, 2, 4, 8, 16, 32, 64] {
        for _ in 0..30 {
            random.on_answer(sent_at, sent_at, in_flight, Signal::Overload);
        }
    }
    let usual = random.usual_share();
    assert!(usual > before + 0.05, "{before} → {usual}");
}

#[test]
fn refusals_are_weighed_against_the_requests_sent_not_the_limit() {
    // An endpoint known to refuse a fifth whatever the load; then a
    // round trip in which refusals come back at once and their slots
    // are used again, so that twice the limit is sent and a fifth of
    // that refused.
    let start = Instant::now();
    let mut controller = Controller::new(4, 128, start);
    let limit = controller.start_from(64, 32, false) as usize;
    controller.outcomes_by_band[3] = tally(80, 20);
    let at = start + Duration::from_millis(10);
    for i in 0..2 * limit {
        controller.on_send(at, false);
        if i % 5 == 0 {
            controller.on_answer(at, at, limit, Signal::Overload);
        }
    }
    assert_eq!(controller.limit(), limit, "cut for the usual share");
    // Refusals of a third of what was sent are more than that share.
    for _ in 0..2 * limit / 3 {
        controller.on_answer(at, at, limit, Signal::Overload);
    }
    assert!(
        controller.limit() < limit,
        "not cut at {}",
        controller.limit()
    );
}

#[test]
fn most_refused_at_one_in_flight_is_the_usual_share_once_many_were_served() {
    // A provider's burst refusing nearly everything, at any load.
    let start = Instant::now();
    let mut controller = Controller::new(4, 128, start);
    controller.outcomes_by_band[0] = tally(8, 92);
    controller.outcomes_by_band[1] = tally(10, 90);
    controller.outcomes_by_band[5] = tally(30, 200);
    // A client that never had more answered at once (a shard started
    // into a server its siblings fill) takes them for load.
    controller.most_answered = SERVED_MANY - 1;
    assert_eq!(controller.usual_share(), MAX_USUAL_LOSS);
    controller.most_answered = SERVED_MANY;
    let usual = controller.usual_share();
    assert!((0.86..0.88).contains(&usual), "{usual}");
    // Refused less often at one to three in flight: no more than half
    // counts, however many were served.
    for few in 0..2 {
        controller.outcomes_by_band[few] = tally(40, 60);
    }
    assert_eq!(controller.usual_share(), MAX_USUAL_LOSS);
}

#[test]
fn a_burst_that_cuts_again_and_again_heads_back_to_what_was_answered() {
    // 80 in flight, then a provider's burst refusing every request sent
    // during it, each refusal back at once: cut after cut.
    let start = Instant::now();
    let mut controller = Controller::new(4, 256, start);
    controller.start_from(107, 8, false);
    let limit = controller.limit();
    assert_eq!(limit, 80);
    for _ in 0..limit {
        controller.on_send(start, true);
    }
    let burst = start + Duration::from_millis(10);
    for _ in 0..200 {
        controller.on_send(burst, true);
        controller.on_answer(burst, burst, limit, Signal::Overload);
    }
    // Cut at least twice (at most half the limit each time).
    assert!(controller.limit() <= 20, "cut to {}", controller.limit());
    // The requests sent before the burst were taken, and come back.
    let answered = start + Duration::from_secs(3);
    for _ in 0..limit {
        controller.on_answer(answered, start, limit, Signal::Success);
    }
    assert!(controller.ceiling >= 72.0, "{}", controller.ceiling);

    // Growth by round trips of answers at the limit: while refusals
    // stay beyond the usual share, slowly; once back to it, as in slow
    // start, up to half the ceiling within two round trips.
    let grown = |last_loss: f64| {
        let mut c = Controller::new(4, 256, start);
        (c.slow_start, c.limit, c.ceiling) = (false, 5.0, 80.0);
        c.last_loss = Some(last_loss);
        for _ in 0..2 {
            for _ in 0..c.limit() {
                c.grow(start);
            }
        }
        c.limit
    };
    assert!(grown(0.95) < 15.0, "{}", grown(0.95));
    assert!(grown(0.0) >= 40.0, "{}", grown(0.0));
}

#[test]
fn the_least_growth_follows_the_round_trip_up_to_an_eighth_of_the_limit() {
    assert_eq!(growth_per_round_trip(64.0, 64.0, 1.0), MIN_GROWTH);
    // Answers in 3 s: six times the least growth a round trip.
    let slow = growth_per_round_trip(64.0, 64.0, 6.0);
    assert!((slow - 6.0 * MIN_GROWTH).abs() < 1e-9, "{slow}");
    assert_eq!(growth_per_round_trip(8.0, 8.0, 6.0), 1.0);
    // Never less than a round trip's, however quick the answers.
    assert_eq!(growth_per_round_trip(64.0, 64.0, 0.2), MIN_GROWTH);
    // Heading back to the ceiling, half the distance as before.
    assert_eq!(growth_per_round_trip(40.0, 64.0, 6.0), 12.0);
}

#[test]
fn a_band_with_few_refusals_bounds_the_usual_share() {
    // Slow start overshot a server taking 8: the band of 8 to 15 in
    // flight holds enough answers, half of them refused; the band
    // below, fewer answers and hardly a refusal.
    let start = Instant::now();
    let mut controller = Controller::new(4, 64, start);
    controller.outcomes_by_band[2] = tally(36, 2);
    controller.outcomes_by_band[3] = tally(64, 63);
    let usual = controller.usual_share();
    assert!(usual < 0.2, "{usual}");
    assert!((0.15..0.2).contains(&upper_bound(2, 38)));
    assert!((0.25..0.3).contains(&upper_bound(0, 10)), "few say little");
}

#[test]
fn the_floor_follows_what_a_window_held() {
    // A busy machine answers in clumps: a window of 7 answers, none
    // refused, closes after slow start has grown the limit to 26.
    let start = Instant::now();
    let mut controller = Controller::new(4, 64, start);
    controller.limit = 26.0;
    let clean = tally(7, 0);
    controller.judge(clean, true, true, start);
    assert_eq!(controller.floor(), 3);
}

#[test]
fn cuts_the_floor_holds_back_round_trip_after_round_trip_lower_it() {
    // Past slow start at a floor of 32 from a window at 64, answers in
    // 100 ms; the endpoint's room has fallen to 16, and between two
    // cuts growth heads back towards 65, so that each cut comes at 35.
    let held_back = |every: Duration| {
        let start = Instant::now();
        let mut controller = Controller::new(4, 128, start);
        (controller.slow_start, controller.floor, controller.ceiling) = (false, 32.0, 65.0);
        controller.srtt = Some(0.1);
        for i in 0..6 {
            controller.limit = 35.0;
            controller.cut_for_losses(17, start + every * i);
        }
        controller.limit()
    };
    // Within a burst's few round trips the floor holds.
    assert_eq!(held_back(Duration::from_millis(20)), 32);
    // Refused round trip after round trip, the floor gives way.
    assert!(held_back(Duration::from_millis(100)) < 20);
}

#[test]
fn a_queue_cut_is_useless_where_the_round_trip_did_not_follow_the_load() {
    let cut = QueueCut {
        before: 40.0,
        point_before: (2.0, 40.0),
        after: 20.0,
        in_slow_start: false,
        rate_before: None,
    };
    // A queue: half the requests in flight, half the round trip.
    assert_eq!(cut.useless((1.0, 20.0)), Some(false));
    // Answers that vary by nature: the same mean at half the load.
    assert_eq!(cut.useless((1.9, 20.0)), Some(true));
    // A batching server: each request in the batch slows the step by a
    // share, so half the load answers a little sooner but far fewer a
    // second.
    assert_eq!(cut.useless((1.7, 20.0)), Some(true));
    // Too small a fall of the load to tell.
    assert_eq!(cut.useless((1.5, 36.0)), None);
}

/// A controller whose answers at 8 to 15 in flight (at 10) took
/// `rtts`, just now.
fn answered_at_ten(rtts: &[f64], now: Instant) -> Controller {
    let mut controller = Controller::new(4, 256, now);
    for &rtt in rtts {
        controller.by_band[3].answered(rtt, 10, f64::INFINITY);
    }
    controller.band_answered[3] = Some(now);
    controller
}

fn at_twenty(rtts: &[f64]) -> Tally {
    let mut tally = Tally::default();
    for &rtt in rtts {
        tally.answered(rtt, 20, f64::INFINITY);
    }
    tally
}

/// Answers to requests sent with nothing else in flight, a second
/// apart from `start`, each after its round trip in `rtts`.
fn answer_alone(controller: &mut Controller, start: Instant, rtts: &[f64]) {
    for (i, &rtt) in rtts.iter().enumerate() {
        let sent_at = start + Duration::from_secs(i as u64);
        let answered = sent_at + Duration::from_secs_f64(rtt);
        controller.on_answer(answered, sent_at, 1, Signal::Success);
    }
}

#[test]
fn answers_to_requests_sent_alone_undo_queue_cuts_they_find_no_queue() {
    let start = Instant::now();
    // Cut from 14 slots to 2 in slow start for round trips of `rtt`,
    // against an estimate of 0.1 s; then requests sent alone answer in
    // 0.4 s on average.
    let cut_then_alone = |rtt: f64| {
        let mut controller = Controller::new(4, 256, start);
        controller.slow_start = false;
        controller.base_rtt = Some(0.1);
        controller.note_queue_cuts(rtt, 14.0, true);
        controller.limit = 2.0;
        controller.queue_bound = true;
        answer_alone(&mut controller, start, &[0.3, 0.5, 0.4, 0.4]);
        controller
    };
    // The estimate was the quickest of a long tail, and 0.3 s is no
    // queue's.
    let controller = cut_then_alone(0.3);
    let base = controller.base_rtt.unwrap();
    assert!((base - 0.4).abs() < 1e-9, "{base}");
    assert_eq!(controller.limit(), 14);
    assert!(controller.slow_start && !controller.queue_bound);
    let undone = controller.decisions().last().copied();
    assert!(
        matches!(undone, Some(Decision { from: 2, to: 14, why: Why::NotAQueue { no_load }, .. })
            if (no_load - 0.4).abs() < 1e-9),
        "{undone:?}"
    );
    // Against a server that serves one at a time, a cut for round trips
    // of 0.9 s stays.
    let controller = cut_then_alone(0.9);
    assert_eq!(controller.limit(), 2);
    assert!(!controller.slow_start && controller.queue_bound);
}

#[test]
fn a_window_of_a_few_answers_is_judged_by_students_t() {
    let mut controller = Controller::new(4, 128, Instant::now());
    controller.base_rtt = Some(0.1);
    // Whatever the requests in flight: only the round trips count here.
    let window = at_twenty;
    // Four answers 1.65 times the no-load round trip on average, spread
    // so that two standard errors would call them surely slower and t at
    // three degrees of freedom does not.
    let spread = window(&[0.10, 0.12, 0.19, 0.25]);
    assert!(spread.point().unwrap().0 * (-2.0 * spread.log_rtt_error()).exp() > 0.1);
    assert_eq!(controller.queueing(&spread), None);
    // Alike, they are a queue's.
    assert!(controller.queueing(&window(&[0.165; 4])).is_some());
    // Two alike are too few; three are not.
    assert_eq!(controller.queueing(&window(&[0.3; 2])), None);
    assert!(controller.queueing(&window(&[0.3; 3])).is_some());
}

#[test]
fn the_no_load_estimate_falls_only_for_two_quicker_windows_in_a_row() {
    let now = Instant::now();
    let mut controller = answered_at_ten(&[0.1; 8], now);
    controller.base_rtt = Some(0.1);
    // Alike answers, so that each window's mean is as low as it says.
    let window = |rtt: f64| at_twenty(&[rtt; 8]);
    controller.queueing(&window(0.07));
    assert_eq!(controller.base_rtt, Some(0.1));
    // An ordinary window between two quick ones.
    controller.queueing(&window(0.1));
    controller.queueing(&window(0.07));
    assert_eq!(controller.base_rtt, Some(0.1));
    assert_eq!(controller.by_band[3].ok, 8);
    // Two in a row: the higher of the two, and the later far enough below
    // the estimate that the answers kept by band are of another server.
    controller.queueing(&window(0.08));
    let base = controller.base_rtt.unwrap();
    assert!((base - 0.08).abs() < 1e-6, "{base}");
    assert_eq!(controller.by_band[3].ok, 0);
}

#[test]
fn a_runs_last_answers_are_no_measure_of_a_queue() {
    let start = Instant::now();
    let ms = |n: u64| start + Duration::from_millis(n);
    // 64 requests in the first 50 ms against a no-load round trip of
    // 0.1 s, 63 answered in 0.16 s and the last, sent at 50 ms, back
    // at 0.4 s; a request sent after the window's own, or none.
    let limit_after = |sent_after: bool| {
        let mut controller = Controller::new(64, 128, start);
        controller.slow_start = false;
        controller.base_rtt = Some(0.1);
        controller.srtt = Some(0.1);
        for i in 0..64 {
            controller.on_send(ms(i * 50 / 64), false);
        }
        if sent_after {
            controller.on_send(ms(300), false);
        }
        for i in 0..63 {
            let sent_at = ms(i * 50 / 64);
            controller.on_answer(
                sent_at + Duration::from_millis(160),
                sent_at,
                64,
                Signal::Success,
            );
        }
        controller.on_answer(ms(400), ms(50), 64, Signal::Success);
        controller.limit()
    };
    // Requests went on: the round trip is a queue's.
    assert!(limit_after(true) < 64);
    // None followed: the answers still to come were the slowest.
    assert_eq!(limit_after(false), 64);
}

/// A controller after slow start whose queue cut `cut` waits to be
/// judged, with a no-load and a smoothed round trip of `rtts`.
fn cut_pending(start: Instant, rtts: (f64, f64), cut: QueueCut) -> Controller {
    let mut controller = Controller::new(4, 128, start);
    controller.slow_start = false;
    (controller.base_rtt, controller.srtt) = (Some(rtts.0), Some(rtts.1));
    controller.limit = cut.after;
    controller.queue_cut = Some(cut);
    controller
}

#[test]
fn a_queue_cut_its_answers_cannot_judge_is_cut_until_they_can() {
    let start = Instant::now();
    let ms = |n: u64| start + Duration::from_millis(n);
    // A cut from 16 to 3.3 by answers whose load is taken as 3.8 in
    // flight: the 3 since are too close to it to judge.
    let undecided = |in_slow_start: bool| {
        let cut = QueueCut {
            before: 16.0,
            point_before: (0.24, 3.8),
            after: 3.3,
            in_slow_start,
            rate_before: None,
        };
        let mut controller = cut_pending(start, (0.1, 0.3), cut);
        controller.queue_cuts = Some(QueueCuts {
            rtt: 0.24,
            before: 16.0,
            in_slow_start,
        });
        controller
    };
    // Answers in three times the no-load round trip, one at a time, so
    // that no window holds enough of them to be judged.
    let answer = |controller: &mut Controller, at: &mut u64, in_flight: usize, count: u64| {
        for _ in 0..count {
            controller.on_answer(ms(*at), ms(*at - 300), in_flight, Signal::Success);
            *at += 200;
        }
    };
    let mut at = 1000;
    let mut controller = undecided(true);
    answer(&mut controller, &mut at, 3, 7);
    assert_eq!(controller.limit(), 3, "seven answers are not yet many");
    answer(&mut controller, &mut at, 3, 1);
    assert!(
        controller.limit < QUEUE_JUDGED_BELOW * 3.8,
        "{}",
        controller.limit
    );
    // Sent since that cut, at two in flight, the round trip is the same:
    // no queue's, so the cuts are undone and slow start goes on.
    at += 300;
    answer(&mut controller, &mut at, 2, 4);
    assert_eq!(controller.limit(), 16);
    assert!(controller.slow_start);
    assert_eq!(controller.base_rtt, Some(0.3));
    // A cut made after slow start is left to the windows.
    let (mut controller, mut at) = (undecided(false), 1000);
    answer(&mut controller, &mut at, 3, 16);
    assert_eq!(controller.limit(), 3);
}

#[test]
fn a_queue_cut_whose_answers_come_as_many_a_second_stands() {
    let start = Instant::now();
    // Slow start's cut from 14 to 2.4, set off by answers taken as 0.8 s
    // at 3.4 in flight, coming 3.3 a second.
    let cut = |rate_before: Option<f64>| {
        let cut = QueueCut {
            before: 14.0,
            point_before: (0.8, 3.4),
            after: 2.4,
            in_slow_start: true,
            rate_before,
        };
        cut_pending(start, (0.35, 0.8), cut)
    };
    // Four answers at two in flight, 0.7 s each: a round trip that fell
    // by an eighth for a load that fell by two fifths.
    let answer_every = |controller: &mut Controller, gap_ms: u64| {
        for i in 0..4 {
            let at = start + Duration::from_millis(1000 + i * gap_ms);
            controller.on_answer(at, at - Duration::from_millis(700), 2, Signal::Success);
        }
    };
    // As many a second as before: a server serving one at a time.
    let mut controller = cut(Some(3.3));
    answer_every(&mut controller, 300);
    assert_eq!(controller.limit(), 2);
    assert_eq!(controller.base_rtt, Some(0.35));
    // Fewer a second, in proportion to the load: no queue's.
    let mut controller = cut(Some(3.3));
    answer_every(&mut controller, 520);
    assert_eq!(controller.limit(), 14);
    // Without a rate before, the round trip alone decides, as it did.
    let mut controller = cut(None);
    answer_every(&mut controller, 300);
    assert_eq!(controller.limit(), 14);
}

#[test]
fn a_queue_cut_stands_where_requests_sent_alone_were_far_quicker() {
    let start = Instant::now();
    // The cut above, its four answers at two in flight 0.7 s each and
    // coming fewer a second: alone, they show no queue, and it is undone.
    let cut = || {
        let cut = QueueCut {
            before: 14.0,
            point_before: (0.8, 3.4),
            after: 2.4,
            in_slow_start: true,
            rate_before: Some(3.3),
        };
        cut_pending(start, (0.35, 0.8), cut)
    };
    let answer_from = |controller: &mut Controller, from_ms: u64| {
        for i in 0..4 {
            let at = start + Duration::from_millis(from_ms + i * 520);
            controller.on_answer(at, at - Duration::from_millis(700), 2, Signal::Success);
        }
    };
    let mut controller = cut();
    answer_from(&mut controller, 1000);
    assert_eq!(controller.limit(), 14);
    // Requests sent alone took 0.3 s: a round trip of 0.7 s at two in
    // flight is a queue's, whatever the answers' rate says. A server
    // serving one at a time whose answers vary in length otherwise had such
    // a cut found useless now and then, and its queue's round trip taken
    // for the no-load one held a queue of three or four.
    let alone = |mean: f64, sd: f64| {
        let mut controller = cut();
        controller.by_band[0] = Tally {
            ok: 4,
            lost: 0,
            rtt_sum: 4.0 * mean,
            rtt_sq_sum: 4.0 * mean * mean + 3.0 * sd * sd,
            in_flight_sum: 4.0,
        };
        controller.band_answered[0] = Some(start);
        controller
    };
    let mut controller = alone(0.3, 0.0);
    answer_from(&mut controller, 1000);
    assert_eq!(controller.limit(), 2);
    assert_eq!(controller.base_rtt, Some(0.35));
    // Answered long before, they still say so: a server become slower since
    // shows it once the limit falls to one again.
    let mut controller = alone(0.3, 0.0);
    answer_from(&mut controller, 20_000);
    assert_eq!(controller.limit(), 2);
    // Alone, answers of 0.65 s give or take 0.05: 0.7 s may be no queue's.
    let mut controller = alone(0.65, 0.05);
    answer_from(&mut controller, 1000);
    assert_eq!(controller.limit(), 14);
}

#[test]
fn a_round_trip_that_rose_far_less_than_the_load_is_not_a_queue() {
    let now = Instant::now();
    let controller = answered_at_ten(&[1.0; 16], now);
    // A server that batches: twice the load, each answer 15 % slower;
    // the no-load estimate is the mean of both loads' answers.
    let batching = controller.not_a_queue(at_twenty(&[1.15; 16]), now);
    assert!(
        batching.is_some_and(|rtt| (rtt - 1.075).abs() < 1e-9),
        "{batching:?}"
    );
    // A queue: twice the load, twice the round trip.
    assert_eq!(controller.not_a_queue(at_twenty(&[2.0; 16]), now), None);
    // Four answers from half to twice the mean rise as little, but their
    // spread could hide a queue's rise.
    let spread = at_twenty(&[0.5, 0.8, 1.3, 2.0]);
    assert_eq!(controller.not_a_queue(spread, now), None);
    // A lower load answered long ago says nothing of the server now.
    let later = now + 20 * WINDOW_WITHOUT_RTT;
    assert_eq!(controller.not_a_queue(at_twenty(&[1.15; 16]), later), None);
}

#[test]
fn an_answer_within_the_spread_at_a_lower_load_is_slow_by_nature() {
    let now = Instant::now();
    let varied = answered_at_ten(&[0.5, 0.75, 1.0, 1.25, 1.5, 0.6, 1.4, 1.0], now);
    assert!(varied.within_lower_spread(1.5, 20.0, now));
    assert!(!varied.within_lower_spread(2.5, 20.0, now));
    let even = answered_at_ten(&[1.0; 8], now);
    assert!(!even.within_lower_spread(1.5, 20.0, now), "a queue's");
}

#[test]
fn a_long_record_of_changes_is_thinned_past_its_start() {
    let mut changes: Vec<_> = (0..MAX_CHANGES as u32 + 1)
        .map(|i| (Duration::from_millis(u64::from(i)), i))
        .collect();
    thin(&mut changes, MAX_CHANGES);
    let keep = MAX_CHANGES / 4;
    assert_eq!(changes.len(), keep + (MAX_CHANGES + 1 - keep) / 2);
    assert_eq!(changes[keep - 1].1 as usize, keep - 1, "the start whole");
    assert_eq!(changes[keep].1 as usize, keep + 1, "every other one after");
}

/// A request timed out in a server's queue is told of only
/// `request_timeout_seconds` after its send, once the window it was sent in
/// has closed: its loss counts against the limit all the same.
#[test]
fn losses_told_after_their_window_closed_still_cut() {
    let start = Instant::now();
    let at = |secs: u64| start + Duration::from_secs(secs);
    let mut controller = Controller::new(4, 64, start);
    for answered in [4, 8, 12] {
        controller.on_answer(at(answered), start, 4, Signal::Success);
    }
    let before = controller.limit();
    for _ in 0..2 {
        controller.on_answer(at(13), start, 4, Signal::Overload);
    }
    assert!(
        controller.limit() < before,
        "{} before, {} after",
        before,
        controller.limit()
    );
}

#[test]
fn a_timeout_in_the_queue_sets_the_limit_to_what_the_endpoint_answered_in_half_its_wait() {
    let start = Instant::now();
    let at = |millis: u64| start + Duration::from_millis(millis);
    let mut controller = Controller::new(16, 64, start);
    // The endpoint answered 6 of the requests before it in the 10 s this
    // one waited: 3 in half the wait.
    let decision = controller.timed_out_in_queue(at(10_000), start, 6);
    assert_eq!(controller.limit(), 3);
    let decision = decision.expect("a decision");
    assert_eq!((decision.from, decision.to), (16, 3));
    assert_eq!(
        decision.why.to_string(),
        "a request timed out after 10.0 s in the endpoint's queue, which answered 6 meanwhile"
    );
    assert!(!controller.slow_start && controller.is_held_by_queue());
    // Others of the same queue, sent before the cut, do not cut again,
    // however few answers they saw.
    assert!(
        controller
            .timed_out_in_queue(at(10_500), at(1), 1)
            .is_none()
    );
    assert_eq!(controller.limit(), 3);
    // One sent since, that still timed out, does.
    let decision = controller.timed_out_in_queue(at(21_000), at(11_000), 2);
    assert_eq!(decision.map(|d| (d.from, d.to)), Some((3, 1)));
    // Never below one, and a limit already at what was answered stays.
    assert!(
        controller
            .timed_out_in_queue(at(32_000), at(22_000), 1)
            .is_none()
    );
    assert_eq!(controller.limit(), 1);
}

#[test]
fn a_timeout_in_the_queue_lets_no_cut_being_judged_be_undone() {
    let start = Instant::now();
    let at = |millis: u64| start + Duration::from_millis(millis);
    let mut controller = Controller::new(36, 128, start);
    for (i, in_flight) in [33, 34, 35, 36].into_iter().enumerate() {
        controller.on_answer(
            at(2 + i as u64),
            at(1 + i as u64),
            in_flight,
            Signal::Overload,
        );
    }
    assert_eq!(controller.limit(), 32);
    assert!(controller.pending.is_some());
    controller.queue_cut = Some(QueueCut {
        before: 36.0,
        point_before: (0.2, 30.0),
        after: 32.0,
        in_slow_start: true,
        rate_before: Some(100.0),
    });
    // It waited behind the queue those cuts were made for: the endpoint
    // answered 64 in its wait, 32 in half of it, which the limit already is.
    assert!(
        controller
            .timed_out_in_queue(at(1_000), at(1), 64)
            .is_none()
    );
    assert_eq!(controller.limit(), 32);
    assert!(controller.queue_cut.is_none() && controller.pending.is_none());
}

#[test]
fn a_timeout_that_looks_queued_cuts_nothing_where_timeouts_come_at_any_load() {
    // A seventh of the requests lost at every level from 1 to 8 in
    // flight, as answers that take about as long as the timeout whatever
    // the load are; and the same where only more than 4 in flight are,
    // as a queue's timeouts are.
    let at_any_load = answered(8, |i, _| i % 7 == 0);
    let beyond_four = answered(8, |i, in_flight| in_flight > 4 && i % 2 == 0);
    for (mut controller, cuts) in [(at_any_load, false), (beyond_four, true)] {
        controller.limit = 16.0;
        // A round trip with no other loss since the last change.
        controller.restart_since_change();
        let sent = controller.last_change + Duration::from_secs(1);
        let decision = controller.timed_out_in_queue(sent + Duration::from_secs(2), sent, 6);
        assert_eq!(decision.is_some(), cuts);
        assert_eq!(controller.limit(), if cuts { 3 } else { 16 });
    }
}

#[test]
fn a_quicker_server_forgets_the_round_trips_by_band_but_not_what_it_loses() {
    let mut controller = answered(8, |i, _| i % 7 == 0);
    let usual = controller.usual_share();
    assert!(usual > 0.1, "{usual}");
    controller.base_rtt = Some(0.1);
    assert!(controller.lower_no_load(0.05));
    assert_eq!(controller.by_band[3].ok, 0);
    assert_eq!(controller.usual_share(), usual);
}

#[test]
fn a_cut_is_judged_on_the_requests_sent_long_enough_ago_for_their_losses_to_be_told() {
    let start = Instant::now();
    let at = |millis: u64| start + Duration::from_millis(millis);
    let mut controller = Controller::new(12, 64, start);
    // Losses told 2 s after their send, as timeouts are.
    controller.loss_latencies = [2.0; LOSS_LATENCY_SAMPLE];
    controller.losses_seen = LOSS_LATENCY_SAMPLE;
    // Eight requests sent half a second apart since the cut, every
    // fourth lost: at 4 s those sent by 2 s are told in full.
    controller.since_cut = (0..8)
        .map(|i| match i % 4 {
            0 => (at(500 * i), Signal::Overload),
            _ => (at(500 * i), Signal::Success),
        })
        .collect();
    let told = controller.told_since_cut(at(4_000));
    assert_eq!((told.ok, told.lost), (3, 2));
    // Losses told at once (refusals): every outcome so far counts.
    controller.loss_latencies = [0.001; LOSS_LATENCY_SAMPLE];
    let told = controller.told_since_cut(at(4_000));
    assert_eq!((told.ok, told.lost), (6, 2));
}

#[test]
fn an_edge_found_again_and_again_is_probed_less_often_each_time() {
    let start = Instant::now();
    let rtt = Duration::from_millis(200);
    let mut controller = Controller::new(4, 64, start);
    (controller.slow_start, controller.srtt) = (false, Some(rtt.as_secs_f64()));
    // How long growth is held below the edge after each of its findings:
    // doubling, up to 64 answers' worth of round trips at 5 slots (13).
    let held = |controller: &Controller, at: Instant| {
        (0..64u32)
            .find(|&k| controller.edge_bound(at + k * rtt + rtt / 2) == f64::INFINITY)
            .unwrap()
    };
    let mut holds = Vec::new();
    for i in 0..6u32 {
        let at = start + i * Duration::from_secs(10);
        controller.limit = 5.4;
        controller.note_edge(controller.limit, at);
        assert!(controller.edge_bound(at) < 5.0);
        assert_eq!(controller.edge_bound(at).floor(), 4.0);
        holds.push(held(&controller, at));
    }
    assert_eq!(holds, [1, 2, 4, 8, 13, 13]);

    // Another edge starts over; so does a window begun at the edge and
    // served clean, once growth is back there.
    let at = start + Duration::from_secs(100);
    controller.limit = 7.2;
    controller.note_edge(controller.limit, at);
    assert_eq!(held(&controller, at), 1);
    controller.note_edge(controller.limit, at);
    controller.limit = 7.0;
    controller.note_edge_reached(at + 3 * rtt);
    controller.edge_served(at + 2 * rtt);
    assert!(
        controller.edge_hold.is_some(),
        "a window begun below the edge"
    );
    controller.edge_served(at + 3 * rtt);
    assert!(controller.edge_hold.is_none());
    // Nor does slow start hold anything.
    controller.slow_start = true;
    controller.note_edge(7.2, at);
    assert_eq!(controller.edge_bound(at), f64::INFINITY);
}
